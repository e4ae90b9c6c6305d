"""The change data feed (:meth:`Table.changes`): the rows each version in a
range inserted, updated and deleted, named as Delta's change feed names them.

Each version is compared with the one before it, fragment by fragment: a
fragment both versions hold with the same data file and row count has the
same rows, and only its deletion vector can differ (the rows it newly
deletes are removed); a fragment only the earlier version holds has all its
live rows removed, one only the later holds all its live rows added.  Only
changed fragments are read, and of them only the changed rows.

With stable row ids (``stable_row_ids=True``) every row is known by its id:

* an id removed and not added is a ``delete`` (its values before);
* an id added and not removed is an ``insert`` (its values after);
* an id removed and added again whose last-updated-at version changed is an
  update: ``update_preimage`` and ``update_postimage``; one whose
  last-updated-at version stayed is a row a compaction moved: no change.

Without them rows have no identity across fragments: a row an update moves
is the ``delete`` of its old copy and the ``insert`` of its new one, and the
table cannot say which deletes and inserts pair up (the feed's schema
metadata says ``tessera.changes.exact: false`` whenever a version in the
range could hold such a pair); a compaction (a ``rewrite``) changes no row.
Schema changes (a column added, dropped or renamed) change no row either, as
in Delta: a row's values are given in the range's last schema, NULL in a
column its version did not have.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from tessera.commit import VersionNotFoundError, fragment_live_rows
from tessera.format.file import schema as lschema
from tessera.format.protos import table_pb2
from tessera.format.table import manifest as mf
from tessera.format.table.fragments import FragmentReader

from ..errors import InvalidArgumentError
from ..query.scan import fields_by_name
from .snapshot import TableSnapshot

__all__ = ["CHANGE_TYPE", "COMMIT_TIMESTAMP", "COMMIT_VERSION", "changes"]

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
#: operations that may move a row without stable row ids to tell it (an update's old and new copy)
_MOVING = frozenset({"update", "merge", "data_replacement"})

Rows = list[tuple[table_pb2.DataFragment, np.ndarray]]  # (fragment, physical offsets)


def _same_rows(a: table_pb2.DataFragment, b: table_pb2.DataFragment) -> bool:
    return a.physical_rows == b.physical_rows and bool(a.files) and bool(b.files) and a.files[0].path == b.files[0].path


@contextlib.contextmanager
def _reader(store, frag: table_pb2.DataFragment, fields: list[lschema.LanceField] | None = None):
    r = FragmentReader(store, frag, fields or [])
    try:
        yield r
    finally:
        r.close()


def _deleted(store, frag: table_pb2.DataFragment) -> np.ndarray:
    if not frag.HasField("deletion_file"):
        return np.zeros(0, np.int64)
    with _reader(store, frag) as r:
        return r.deleted_rows().astype(np.int64)


def _live(store, frag: table_pb2.DataFragment) -> np.ndarray:
    offs = np.arange(frag.physical_rows, dtype=np.int64)
    gone = _deleted(store, frag)
    return np.setdiff1d(offs, gone, assume_unique=True) if gone.size else offs


#: operations whose transaction names every fragment both versions hold but changed the rows of
_NAMES_UPDATED = {"delete": "delete", "update": "update"}
#: operations that change no row of a fragment both versions hold
_NO_ROWS_CHANGED = frozenset({"append", "rewrite", "merge", "project", "create_index", "update_config",
                              "data_replacement", "reserve_fragments"})  # fmt: skip


def _candidates(old: dict, new: dict, after: mf.ManifestFile, whole: bool) -> set[int]:
    """The fragment ids whose rows may differ between the two versions: those
    only one holds, and of those both hold, the ones the version's transaction
    names (every one, when the transaction cannot say: a restore, an unknown
    operation, none).  A transaction that does not add up (the live rows it
    leaves are not the version's) is not trusted either."""
    only = old.keys() ^ new.keys()
    txn = after.transaction
    op = txn.WhichOneof("operation") if txn is not None else None
    if whole or op is None or (op not in _NO_ROWS_CHANGED and op not in _NAMES_UPDATED):
        return old.keys() | new.keys()
    named: set[int] = set()
    if op in _NAMES_UPDATED:
        named = {f.id for f in getattr(txn, _NAMES_UPDATED[op]).updated_fragments} & old.keys() & new.keys()
    unchanged = (old.keys() & new.keys()) - named
    picked = only | named
    moved = sum(fragment_live_rows(new[i]) for i in picked if i in new) - sum(
        fragment_live_rows(old[i]) for i in picked if i in old
    )
    total = sum(fragment_live_rows(f) for f in new.values()) - sum(fragment_live_rows(f) for f in old.values())
    if moved != total or any(
        not _same_rows(old[i], new[i]) or old[i].deletion_file != new[i].deletion_file for i in _sample(unchanged)
    ):
        return old.keys() | new.keys()
    return picked


def _sample(ids: set[int]) -> list[int]:
    """A few of ``ids`` (the transaction is trusted for the rest: checking every
    one is the per-fragment cost the transaction saves)."""
    return sorted(ids)[:: max(1, len(ids) // 16)]


def _diff(store, before: mf.ManifestFile | None, after: mf.ManifestFile, whole: bool) -> tuple[Rows, Rows]:
    """The rows ``after`` no longer holds, and the rows it holds anew
    (``whole``: every fragment replaced, as an overwrite does)."""
    old = {} if before is None else {f.id: f for f in before.manifest.fragments}
    new = {f.id: f for f in after.manifest.fragments}
    removed: Rows = []
    added: Rows = []
    for fid in sorted(_candidates(old, new, after, whole)):
        a, b = old.get(fid), new.get(fid)
        if a is not None and b is not None and not whole and _same_rows(a, b):
            if a.deletion_file == b.deletion_file:
                continue
            da, db = _deleted(store, a), _deleted(store, b)
            gone = np.setdiff1d(db, da, assume_unique=True)
            back = np.setdiff1d(da, db, assume_unique=True)  # a restore can bring rows back
            if gone.size:
                removed.append((a, gone))
            if back.size:
                added.append((b, back))
            continue
        if a is not None and (live := _live(store, a)).size:
            removed.append((a, live))
        if b is not None and (live := _live(store, b)).size:
            added.append((b, live))
    return removed, added


def _ids(store, rows: Rows) -> np.ndarray:
    parts = []
    for f, o in rows:
        with _reader(store, f) as r:
            parts.append(r.row_ids(0, f.physical_rows)[o])
    return np.concatenate(parts).astype(np.uint64) if parts else np.zeros(0, np.uint64)


def _updated_at(store, rows: Rows) -> np.ndarray:
    parts = []
    for f, o in rows:
        with _reader(store, f) as r:
            parts.append(r.row_versions(created=False)[o])
    return np.concatenate(parts) if parts else np.zeros(0, np.uint64)


def _select(rows: Rows, mask: np.ndarray) -> Rows:
    out, at = [], 0
    for f, o in rows:
        m = mask[at : at + o.size]
        at += o.size
        if m.any():
            out.append((f, o[m]))
    return out


def _values(
    store, m: table_pb2.Manifest, rows: Rows, out_fields: list[lschema.LanceField], schema: pa.Schema
) -> pa.Table:
    """The output columns of ``rows`` as version ``m`` holds them (by field
    id; NULL where that version lacks the column, cast to the output type)."""
    mine = {f.id: f for f in lschema.fields_from_protos(m.fields)}
    present = [mine[f.id] for f in out_fields if f.id in mine]
    parts: list[pa.Table] = []
    for frag, offsets in rows:
        with _reader(store, frag, present) as r:
            arrays = r.take(offsets) if present else []
        got = dict(zip((f.id for f in present), arrays))
        cols = []
        for f, field in zip(out_fields, schema):
            a = got.get(f.id)
            cols.append(pa.nulls(offsets.size, field.type) if a is None else a.cast(field.type))
        parts.append(pa.Table.from_arrays(cols, schema=schema))
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _tagged(t: pa.Table, kind: str, version: int, when: dt.datetime) -> pa.Table:
    n = t.num_rows
    t = t.append_column(CHANGE_TYPE, pa.array([kind] * n, pa.string()))
    t = t.append_column(COMMIT_VERSION, pa.array(np.full(n, version, np.int64)))
    return t.append_column(COMMIT_TIMESTAMP, pa.array([when] * n, pa.timestamp("us", tz="UTC")))


def changes(
    table: TableSnapshot, start_version: int, end_version: int | None = None, columns: Sequence[str] | None = None
) -> pa.Table:
    """The change feed of versions ``start_version`` to ``end_version``
    (inclusive; default: ``table``'s version), in the columns of
    ``end_version`` (``columns``: some of them), with ``_change_type``,
    ``_commit_version`` and ``_commit_timestamp``, ordered by version."""
    end = table.version if end_version is None else end_version
    for name, v in (("start_version", start_version), ("end_version", end)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InvalidArgumentError(f"{name} must be a version number (1 or more), got {v!r}")
    if start_version > end:
        raise InvalidArgumentError(f"start_version {start_version} is after end_version {end}")
    store, handler = table.store, table.handler

    def load(v: int) -> mf.ManifestFile:
        try:
            return handler.load(store, v)
        except VersionNotFoundError as exc:
            raise VersionNotFoundError(
                f"the changes of versions {start_version}-{end} need version {v}, which {store.uri} no longer "
                f"has ({exc}): a cleanup removed it, or it was never committed"
            ) from None

    last = load(end)
    fields = lschema.fields_from_protos(last.manifest.fields)
    top = [f for f in fields if f.parent_id == -1]
    names = [f.name for f in top] if columns is None else list(columns)
    out_fields = fields_by_name(top, names)
    full = lschema.to_arrow_schema(fields, {})
    schema = pa.schema([full.field(f.name) for f in out_fields])
    before = load(start_version - 1) if start_version > 1 else None
    pieces: list[pa.Table] = []
    exact = True
    for v in range(start_version, end + 1):
        after = last if v == end else load(v)
        m = after.manifest
        op = after.transaction.WhichOneof("operation") if after.transaction is not None else None
        when = dt.datetime.fromtimestamp(m.timestamp.seconds + m.timestamp.nanos / 1e9, tz=dt.UTC)
        stable = bool(m.reader_feature_flags & mf.FLAG_STABLE_ROW_IDS) and (
            before is None or bool(before.manifest.reader_feature_flags & mf.FLAG_STABLE_ROW_IDS)
        )
        removed, added = _diff(store, before, after, whole=op == "overwrite")
        kinds: list[tuple[Rows, str, table_pb2.Manifest]] = []
        if stable and removed and added:
            old_ids, new_ids = _ids(store, removed), _ids(store, added)
            moved_old = np.isin(old_ids, new_ids)
            moved_new = np.isin(new_ids, old_ids)
            order_old, order_new = np.argsort(old_ids[moved_old]), np.argsort(new_ids[moved_new])
            was = _updated_at(store, removed)[moved_old][order_old]
            now = _updated_at(store, added)[moved_new][order_new]
            changed = was != now  # pairs in id order: a moved row whose last update is this version's
            pre, post = np.zeros(old_ids.size, bool), np.zeros(new_ids.size, bool)
            pre[np.flatnonzero(moved_old)[order_old[changed]]] = True
            post[np.flatnonzero(moved_new)[order_new[changed]]] = True
            kinds += [(_select(removed, pre), "update_preimage", before.manifest if before else m)]
            kinds += [(_select(added, post), "update_postimage", m)]
            removed, added = _select(removed, ~moved_old), _select(added, ~moved_new)
        elif not stable and op == "rewrite":
            removed = added = []  # a compaction moves rows without changing one
        elif not stable and op in _MOVING and removed and added:
            exact = False
        if removed and before is not None:
            kinds.append((removed, "delete", before.manifest))
        if added:
            kinds.append((added, "insert", m))
        for rows, kind, version_manifest in kinds:
            if rows:
                pieces.append(_tagged(_values(store, version_manifest, rows, out_fields, schema), kind, v, when))
        before = after
    result = pa.concat_tables(pieces) if pieces else _tagged(schema.empty_table(), "insert", 0, dt.datetime.now(dt.UTC))
    meta: dict[Any, Any] = {b"tessera.changes.exact": b"true" if exact else b"false"}
    return result.replace_schema_metadata(meta)
