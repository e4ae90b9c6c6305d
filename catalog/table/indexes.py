"""Zone-map indices (pylance 14's ZONEMAP) that Tessera's writes keep current.

A table keeps zone maps for the columns named by the table property
``tessera.zonemap.columns`` (comma-separated) and for every column that
already has a ZONEMAP index (made by :meth:`Table.create_index`, by a sorted
compaction for its sort columns, or by pylance).  After each write that adds
fragments (append, update, merge_insert, compaction, a Spark job) the writer
commits a second version (:func:`maintain`, the second step of a write in
``writes.py``), a ``CreateIndex`` transaction, that replaces each
zone map with one covering every fragment of the table: the zones of the
fragments the old index covered are kept as they are (a fragment's rows never
change under its id), the new fragments' zones are computed, the zones of
fragments no longer in the table are dropped.

Between the two commits a reader sees the new fragments outside the index and
reads them whole: a zone map can only make a scan skip rows, never change its
answer.  When the index commit loses a race (another writer replaced the
index first) it is rebuilt on the latest version; when it fails for good the
data commit stands and the next write (or :meth:`Table.optimize_indices`)
covers the fragments.
"""

from __future__ import annotations

import logging
import uuid as uuidlib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from pyroaring import BitMap

from tessera.commit import new_transaction
from tessera.format.errors import FormatError
from tessera.format.protos import table_pb2, transaction_pb2
from tessera.format.table import manifest as mf
from tessera.format.table import zonemap as zm
from tessera.format.table.fragments import FragmentReader
from tessera.stores.errors import StoreError

from ..errors import InvalidArgumentError, UnknownColumnError
from .snapshot import TableSnapshot
from .writes import DeletedRows, Stage, run

if TYPE_CHECKING:
    from tessera.format.file import schema as lschema

log = logging.getLogger(__name__)

#: table property: the columns whose zone maps every write keeps current
ZONEMAP_COLUMNS = "tessera.zonemap.columns"
INDEX_TYPES = ("zonemap",)


def zonemap_entries(index_section: bytes | None) -> list[table_pb2.IndexMetadata]:
    """The ZONEMAP entries of a manifest's index section."""
    if not index_section:
        return []
    section = table_pb2.IndexSection.FromString(index_section)
    return [m for m in section.indices if m.index_details.type_url.endswith(zm.TYPE_URL)]


def _index_names(index_section: bytes | None) -> set[str]:
    if not index_section:
        return set()
    return {m.name for m in table_pb2.IndexSection.FromString(index_section).indices}


def parse_columns(value: str | None) -> list[str]:
    return [c.strip() for c in (value or "").split(",") if c.strip()]


def configured_columns(table: TableSnapshot) -> list[str]:
    """The columns the table property names (present or not)."""
    return parse_columns(table.manifest.config.get(ZONEMAP_COLUMNS))


def _top_field(table: TableSnapshot, column: str) -> lschema.LanceField:
    for f in table.fields:
        if f.name == column:
            return f
    raise UnknownColumnError(f"{table.uri}: no top-level column {column!r}; the table has {table.schema.names}")


def check_indexable(table: TableSnapshot, column: str) -> lschema.LanceField:
    """The top-level field ``column``, if a zone map can bound its values."""
    f = _top_field(table, column)
    t = f.arrow_type
    if f.is_dictionary or not zm._value_type_ok(t):
        raise InvalidArgumentError(
            f"{table.uri}: a zone map cannot bound column {column!r} of type {t} "
            "(integers, floats, decimals, dates, times, timestamps, strings and booleans can be indexed)"
        )
    return f


def maintained_columns(table: TableSnapshot) -> list[str]:
    """Columns whose zone maps writes keep current: the property's and every
    column that has a ZONEMAP index (columns the table no longer has are skipped)."""
    by_id = {f.id: f.name for f in table.fields}
    out = [c for c in configured_columns(table) if c in by_id.values()]
    for m in zonemap_entries(table.index_section):
        if len(m.fields) == 1 and m.fields[0] in by_id and by_id[m.fields[0]] not in out:
            out.append(by_id[m.fields[0]])
    return out


def _covered_zones(table: TableSnapshot, meta: table_pb2.IndexMetadata, rows: dict[int, int]) -> zm.ZoneMap | None:
    """The zones of ``meta`` for fragments still in the table whose zones tile
    their rows; None when the index cannot be read (it is then rebuilt)."""
    try:
        old = zm.read_zonemap(table.store, meta)
        covered = BitMap.deserialize(bytes(meta.fragment_bitmap)) if meta.fragment_bitmap else BitMap()
    except (FormatError, StoreError, OSError, ValueError) as exc:
        log.warning("%s: zone map %s unreadable, rebuilt (%s)", table.uri, meta.name, exc)
        return None
    kept = zm.ZoneMap(old.rows_per_zone, old.value_type)
    for fid in covered:
        zones = old.zones.get(fid, [])
        if fid in rows and sum(z.length for z in zones) == rows[fid]:
            kept.zones[fid] = zones
            kept.null_rows[fid] = old.null_rows.get(fid, BitMap())
    return kept


def _covers(meta: table_pb2.IndexMetadata, rows: dict[int, int]) -> bool:
    """Whether ``meta``'s fragment bitmap names every fragment (ids of removed
    fragments in it do no harm: the pruner checks each fragment's zones)."""
    if not meta.fragment_bitmap:
        return False
    return BitMap(rows).issubset(BitMap.deserialize(bytes(meta.fragment_bitmap)))


def needs_maintenance(table: TableSnapshot) -> list[str]:
    """The maintained columns whose zone maps miss a fragment of ``table`` (no file is read)."""
    cols = maintained_columns(table)
    if not cols:
        return []
    rows = {f.id: f.physical_rows for f in table.fragments}
    by_name = {f.name: f.id for f in table.fields}
    entries = zonemap_entries(table.index_section)
    out = []
    for c in cols:
        mine = [m for m in entries if list(m.fields) == [by_name[c]]]
        if rows and not (len(mine) == 1 and _covers(mine[0], rows)):
            out.append(c)
    return out


def _fragment_zones(table: TableSnapshot, field: lschema.LanceField, frag: table_pb2.DataFragment, rows_per_zone: int):
    reader = FragmentReader(table.store, frag, [field])
    try:
        (values,) = reader.read(0, frag.physical_rows)
    finally:
        reader.close()
    return zm.fragment_zones(frag.id, values, rows_per_zone)


def build_index_transaction(
    table: TableSnapshot,
    columns: Iterable[str],
    *,
    rebuild: bool = False,
    rows_per_zone: int | None = None,
    name: str | None = None,
) -> transaction_pb2.Transaction | None:
    """A CreateIndex transaction on ``table``'s version that gives each of
    ``columns`` one ZONEMAP index covering every fragment (None: all current).

    An existing zone map is extended (its zones for fragments still present
    are kept) unless ``rebuild`` or a different ``rows_per_zone`` is asked for.
    The new index files are written here; the manifest entry is committed by
    the caller."""
    txn = new_transaction(table.version)
    ci = txn.create_index
    entries = zonemap_entries(table.index_section)
    taken = _index_names(table.index_section)
    frags = list(table.fragments)
    rows = {f.id: f.physical_rows for f in frags}
    for column in columns:
        field = check_indexable(table, column)
        mine = [m for m in entries if list(m.fields) == [field.id]]
        if mine and not rebuild and len(mine) == 1 and rows_per_zone is None and _covers(mine[0], rows):
            continue  # every fragment is covered: nothing to read or write
        kept: zm.ZoneMap | None = None
        if mine and not rebuild and len(mine) == 1:
            kept = _covered_zones(table, mine[0], rows)
            if kept is not None and rows_per_zone is not None and kept.rows_per_zone != rows_per_zone:
                kept = None
        if kept is None:
            kept = zm.ZoneMap(rows_per_zone or zm.DEFAULT_ROWS_PER_ZONE, field.arrow_type)
        missing = [f for f in frags if f.id not in kept.zones]
        for frag in missing:
            kept.zones[frag.id], kept.null_rows[frag.id] = _fragment_zones(table, field, frag, kept.rows_per_zone)
        if not kept.zones:
            ci.removed_indices.extend(mine)  # no fragments left: no zones to keep
            continue
        index_name = name or (mine[0].name if mine else f"{column}_idx")
        if not mine and index_name in taken:
            if name is not None:
                raise InvalidArgumentError(f"{table.uri} already has an index named {name!r}")
            index_name = f"{column}_zonemap"
        _paths, meta = zm.write_zones(table.store, field, kept, name=index_name, dataset_version=table.version)
        ci.new_indices.append(meta)
        ci.removed_indices.extend(mine)
    if not ci.new_indices and not ci.removed_indices:
        return None
    return txn


def maintain(table: TableSnapshot, columns: Sequence[str] | None = None) -> mf.ManifestFile | None:
    """The second step of a write: commit zone maps covering the new fragments of
    the maintained columns (or of ``columns``); the new version, None when
    nothing was committed.  The data commit has landed; a failure here is logged
    and leaves the new fragments unindexed (read whole), never a wrong answer.
    (Inside a multi-table transaction the caller skips it: the next write, or
    optimize_indices, catches up.)"""
    cols = list(columns) if columns is not None else needs_maintenance(table)
    if not cols:
        return None
    try:
        return run(table, lambda view, deleted: build_index_transaction(view, [c for c in cols if _has(view, c)]))
    except Exception as exc:  # noqa: BLE001 - the data commit stands; the next write catches up
        log.warning("%s: zone maps not updated after the write (%s: %s)", table.uri, type(exc).__name__, exc)
        return None


def optimize(table: TableSnapshot, stage: Stage | None = None) -> mf.ManifestFile | None:
    """Extend every zone map (and index every ``tessera.zonemap.columns`` column)
    to cover all fragments, in one commit."""
    return run(table, lambda view, deleted: build_index_transaction(view, maintained_columns(view)), stage)


def check_index_request(
    table: TableSnapshot, column: str, index_type: str, name: str | None, rows_per_zone: int | None
) -> None:
    """Refuse an index Tessera cannot build, before anything is read."""
    if not isinstance(index_type, str) or index_type.lower() not in INDEX_TYPES:
        raise InvalidArgumentError(f"unsupported index type {index_type!r}; Tessera builds {list(INDEX_TYPES)}")
    if rows_per_zone is not None and (
        isinstance(rows_per_zone, bool) or not isinstance(rows_per_zone, int) or rows_per_zone < 1
    ):
        raise InvalidArgumentError(f"rows_per_zone must be a positive integer, got {rows_per_zone!r}")
    if name is not None and (not isinstance(name, str) or not name):
        raise InvalidArgumentError(f"an index name is a non-empty string, got {name!r}")
    check_indexable(table, column)


def create_index(
    table: TableSnapshot, column: str, name: str | None, rows_per_zone: int | None, stage: Stage | None = None
) -> mf.ManifestFile | None:
    """Commit a ZONEMAP index of ``column`` over every fragment, replacing any it has."""

    def build(view: TableSnapshot, deleted: DeletedRows) -> transaction_pb2.Transaction | None:
        return build_index_transaction(view, [column], rebuild=True, rows_per_zone=rows_per_zone, name=name)

    return run(table, build, stage)


def list_indices(table: TableSnapshot) -> list[dict[str, Any]]:
    """The version's indices (pylance's and Tessera's): name, type, columns,
    uuid, the fragments covered and the version each was built on."""
    raw = table.index_section
    if not raw:
        return []
    by_id = {f.id: f.name for f in table.fields}
    out = []
    for m in table_pb2.IndexSection.FromString(raw).indices:
        kind = m.index_details.type_url.rsplit(".", 1)[-1].removesuffix("IndexDetails") or "unknown"
        out.append(
            {
                "name": m.name,
                "type": kind.upper(),
                "columns": [by_id.get(i, f"<field {i}>") for i in m.fields],
                "uuid": str(uuidlib.UUID(bytes=bytes(m.uuid.uuid))),
                "fragments": sorted(BitMap.deserialize(bytes(m.fragment_bitmap))) if m.fragment_bitmap else None,
                "dataset_version": m.dataset_version,
            }
        )
    return out


def _has(table: TableSnapshot, column: str) -> bool:
    return any(f.name == column for f in table.fields)
