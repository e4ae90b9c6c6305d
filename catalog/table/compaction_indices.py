"""What compaction does to a table's indices (``format.table.indices`` says
which follow the rows): BTREEs of row addresses are remapped into new
indices, and ranked indices of row ids (vector, FTS) that still hold the ids
of rows a group drops are told not to follow it.  See ``catalog.table.compaction``.
"""

from __future__ import annotations

import logging

import numpy as np

from tessera.format.errors import FormatError
from tessera.format.protos import table_pb2, transaction_pb2
from tessera.format.table import btree, indices, paths
from tessera.format.table import deletion as ldeletion
from tessera.format.table import rowids as lrowids
from tessera.format.table.zonemap import TYPE_URL as ZONEMAP_TYPE_URL
from tessera.stores.errors import StoreError

from ..errors import CompactionError
from .snapshot import TableSnapshot

log = logging.getLogger(__name__)

BLOOMFILTER_TYPE_URL = "BloomFilterIndexDetails"


def section(table: TableSnapshot) -> list[table_pb2.IndexMetadata]:
    """The index entries of the table version compaction read."""
    raw = table.index_section
    return list(table_pb2.IndexSection.FromString(raw).indices) if raw else []


def zone_based(idx: table_pb2.IndexMetadata) -> bool:
    """A zone map or bloom filter: zones of row addresses, which compaction
    leaves uncovered (pylance does not remap them) instead of wrong."""
    return idx.index_details.type_url.endswith((ZONEMAP_TYPE_URL, BLOOMFILTER_TYPE_URL))


def needs_remap(idx: table_pb2.IndexMetadata, stable: bool) -> bool:
    """Whether compaction remaps this index (a BTREE of row addresses), as pylance does."""
    return btree.remappable(idx) and not (stable and indices.holds_row_ids(idx))


def remap_indices(
    view: TableSnapshot,
    groups: list[list[table_pb2.DataFragment]],
    written,
    addresses,
    rw: transaction_pb2.Transaction.Rewrite,
) -> None:
    """Remap the BTREEs of row addresses covering the rewritten fragments into
    new indices, named in ``rw.rewritten_indices``; the commit moves their
    coverage (``format.table.indices``)."""
    todo = to_remap(view, groups)
    if not todo:
        return
    old = np.concatenate([a for per_group in addresses for a in per_group] or [np.zeros(0, np.uint64)])
    new = np.concatenate(
        [
            (np.uint64(f.id) << np.uint64(32)) + np.arange(f.physical_rows, dtype=np.uint64)
            for frags in written
            for f in frags
        ]
        or [np.zeros(0, np.uint64)]
    )
    if old.size != new.size:
        raise CompactionError(f"{old.size} rows were read but {new.size} written")
    amap = btree.AddressMap.build([f.id for g in groups for f in g], old, new)
    for idx in todo:
        try:
            remapped, _ = btree.remap(view.store, idx, amap)
        except (FormatError, StoreError, FileNotFoundError) as exc:
            # the index stops covering the rewritten fragments instead (never a wrong answer)
            log.warning(
                "%s: index %r could not be remapped (%s); it no longer covers the compacted rows",
                view.uri,
                idx.name,
                exc,
            )
            continue
        r = rw.rewritten_indices.add()
        r.old_id.CopyFrom(idx.uuid)
        r.new_id.CopyFrom(remapped.uuid)
        r.new_index_details = idx.index_details.SerializeToString()
        r.new_index_version = idx.index_version if idx.HasField("index_version") else 0
        r.new_index_files.extend(remapped.files)


def _dead_row_ids(view: TableSnapshot, group: list[table_pb2.DataFragment]) -> np.ndarray:
    """The row ids of the deleted rows of ``group`` (which compaction drops)."""
    out = []
    for f in group:
        if not f.HasField("deletion_file"):
            continue
        ids = lrowids.decode_row_ids(view.store, f)
        if ids is None:
            continue
        path = paths.deletion_file_path(f.id, f.deletion_file)
        deleted = ldeletion.decode_for_fragment(view.store.read(path), f.deletion_file, f.physical_rows, path)
        out.append(ids[np.asarray(deleted, np.int64)])
    return np.concatenate(out) if out else np.zeros(0, np.uint64)


def unfollowed(view: TableSnapshot, groups: list[list[table_pb2.DataFragment]]) -> list[tuple[bytes, int]]:
    """(index uuid, group position) pairs where a ranked index of row ids
    (vector, FTS) holds ids of rows the group drops: its coverage must not
    follow that group (``format.table.indices``), or its top-k answers would
    come back short.  An index whose row ids cannot be read counts as holding them."""
    if not view.stable_row_ids:
        return []
    out: list[tuple[bytes, int]] = []
    dead: dict[int, np.ndarray] = {}
    for idx in section(view):
        covered = indices.fragments(idx)
        if indices.kind(idx) not in indices.RANKED_KINDS or not indices.holds_row_ids(idx) or covered is None:
            continue
        held: np.ndarray | None = None
        read = False
        for pos, g in enumerate(groups):
            if not all(f.id in covered for f in g):
                continue
            if pos not in dead:
                dead[pos] = _dead_row_ids(view, g)
            if not dead[pos].size:
                continue
            if not read:
                held, read = indices.held_row_ids(view.store, idx), True
            if held is None or np.isin(dead[pos], held).any():
                out.append((bytes(idx.uuid.uuid), pos))
    return out


def to_remap(view: TableSnapshot, groups: list[list[table_pb2.DataFragment]]) -> list[table_pb2.IndexMetadata]:
    """The indices compaction remaps: BTREEs of row addresses covering every
    fragment of a rewrite group (one covering a group in part stops covering it)."""
    out = []
    for idx in section(view):
        covered = indices.fragments(idx)
        if not needs_remap(idx, view.stable_row_ids) or covered is None:
            continue
        if any(all(f.id in covered for f in g) for g in groups):
            out.append(idx)
    return out
