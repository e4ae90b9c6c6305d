"""A version's statistics (:meth:`Table.stats`): what its manifest, deletion
files and indices know, without reading a data page.

Counts are pylance's where pylance has one (``dataset.stats.dataset_stats()``:
deleted rows, fragments, small files; ``index_stats(name)``: indexed and
unindexed rows and fragments).  Column statistics come from the table's zone
maps (the ZONEMAP index): a column has them when one covers every fragment of
the version, and none otherwise (a column statistic is never a guess):

* ``min`` and ``max`` bound every live value (NULL and NaN aside): taken over
  the zones, they may be wider than the live values after a delete, never
  narrower;
* ``null_count`` is exact: the zone map's NULL row positions less the deleted
  rows, or the zones' counts where the version deletes nothing from the
  fragment; None when neither tells.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from pyroaring import BitMap

from tessera.commit import fragment_live_rows, list_versions
from tessera.format.errors import FormatError
from tessera.format.protos import table_pb2
from tessera.format.table import paths
from tessera.format.table import zonemap as zm
from tessera.format.table.fragments import FragmentReader
from tessera.stores.errors import StoreError

from ..query import pruning
from .indexes import list_indices
from .snapshot import TableSnapshot

__all__ = ["SMALL_FRAGMENT_ROWS", "ColumnStats", "IndexStats", "TableStats", "table_stats"]

#: pylance's "small file": a fragment of fewer physical rows (its ``num_small_files``)
SMALL_FRAGMENT_ROWS = 1024


@dataclasses.dataclass(frozen=True)
class ColumnStats:
    """One top-level column's statistics (see the module)."""

    name: str
    type: str
    #: live rows holding NULL; None when unknown
    null_count: int | None = None
    #: bounds of the live non-NULL, non-NaN values; None when unknown (or no such value)
    min: Any = None
    max: Any = None
    #: the index they come from (None: no zone map covers the version)
    source: str | None = None


@dataclasses.dataclass(frozen=True)
class IndexStats:
    """One index: what it covers of the version (pylance's ``index_stats``)."""

    name: str
    type: str
    columns: tuple[str, ...]
    indexed_fragments: int
    unindexed_fragments: int
    indexed_rows: int
    unindexed_rows: int


@dataclasses.dataclass(frozen=True)
class TableStats:
    """A version's statistics: :meth:`Table.stats`."""

    version: int
    #: versions of the table on storage (all that cleanup kept)
    versions: int
    rows: int
    deleted_rows: int
    physical_rows: int
    fragments: int
    #: fragments of fewer than :data:`SMALL_FRAGMENT_ROWS` physical rows (pylance's ``num_small_files``)
    small_fragments: int
    data_files: int
    deletion_files: int
    #: bytes of the version's data files
    data_bytes: int
    columns: tuple[ColumnStats, ...]
    indices: tuple[IndexStats, ...]

    def to_dict(self) -> dict[str, Any]:
        """Plain data (``tessera describe -o json``): bounds that are not
        JSON numbers or strings are given as strings."""
        d = dataclasses.asdict(self)
        for c in d["columns"]:
            for k in ("min", "max"):
                v = c[k]
                if v is not None and not isinstance(v, (bool, int, float, str)):
                    c[k] = str(v)
        return d


Frags = list[table_pb2.DataFragment]


def _data_bytes(table: TableSnapshot, frags: Frags) -> int:
    total = 0
    for f in frags:
        for df in f.files:
            size = df.file_size_bytes
            if not size:  # older writers leave it out
                size = table.store.size(paths.data_path(df.path))
            total += size
    return total


def _deleted(table: TableSnapshot, frag: table_pb2.DataFragment) -> np.ndarray:
    return FragmentReader(table.store, frag, []).deleted_rows()


def _column_stats(
    table: TableSnapshot, frags: Frags, live: dict[int, int], field_id: int, name: str, type_: str
) -> ColumnStats:
    for meta in pruning.zone_indices(table.index_section):
        if list(meta.fields) != [field_id]:
            continue
        covered = BitMap.deserialize(bytes(meta.fragment_bitmap)) if meta.fragment_bitmap else BitMap()
        if any(f.id not in covered for f in frags):
            continue  # rows no zone describes: no bound holds for them
        try:
            zones = pruning.read_zonemap(table.store, meta)
        except (FormatError, StoreError, OSError, ValueError):
            continue
        if any(zones.rows(f.id) != f.physical_rows for f in frags):
            continue  # zones that do not tile a fragment's rows
        return _from_zones(table, frags, live, zones, name, type_, meta.name)
    return ColumnStats(name, type_)


def _from_zones(
    table: TableSnapshot, frags: Frags, live: dict[int, int], zones: zm.ZoneMap, name: str, type_: str, source: str
) -> ColumnStats:
    values: list[Any] = []  # the zones' bounds, over fragments with live rows
    nulls: int | None = 0
    for f in frags:
        zs = zones.fragment(f.id)[0]
        if live[f.id]:
            values += [v for z in zs for v in (z.min, z.max) if v is not None and not _nan(v)]
        if nulls is None:
            continue
        zone_nulls = sum(z.null_count for z in zs)
        if not zone_nulls:
            continue
        deleted = f.deletion_file.num_deleted_rows if f.HasField("deletion_file") else 0
        if not deleted:
            nulls += zone_nulls
        elif f.id in zones.null_rows:
            gone = BitMap(_deleted(table, f).tolist())
            nulls += len(zones.null_rows[f.id] - gone)
        else:
            nulls = None  # NULLs in a fragment with deletions, positions unknown
    lo = hi = None
    if values:
        try:
            lo, hi = min(values), max(values)
        except TypeError:
            lo = hi = None
    return ColumnStats(name, type_, nulls, lo, hi, source)


def _nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _index_stats(table: TableSnapshot, live: dict[int, int]) -> tuple[IndexStats, ...]:
    out = []
    for ix in list_indices(table):
        covered = set(ix["fragments"] or ()) & live.keys()
        out.append(
            IndexStats(
                ix["name"],
                ix["type"],
                tuple(ix["columns"]),
                len(covered),
                len(live) - len(covered),
                sum(live[f] for f in covered),
                sum(n for f, n in live.items() if f not in covered),
            )
        )
    return tuple(out)


def table_stats(table: TableSnapshot) -> TableStats:
    """The statistics of ``table``'s version (see the module)."""
    frags = table.fragments  # a copy of the manifest's list: taken once
    live = {f.id: fragment_live_rows(f) for f in frags}
    physical = sum(f.physical_rows for f in frags)
    rows = sum(live.values())
    top = [f for f in table.fields if f.parent_id == -1]
    columns = tuple(_column_stats(table, frags, live, f.id, f.name, str(table.schema.field(f.name).type)) for f in top)
    return TableStats(
        version=table.version,
        versions=len(list_versions(table.store)[0]),
        rows=rows,
        deleted_rows=physical - rows,
        physical_rows=physical,
        fragments=len(frags),
        small_fragments=sum(1 for f in frags if f.physical_rows < SMALL_FRAGMENT_ROWS),
        data_files=sum(len(f.files) for f in frags),
        deletion_files=sum(1 for f in frags if f.HasField("deletion_file")),
        data_bytes=_data_bytes(table, frags),
        columns=columns,
        indices=_index_stats(table, live),
    )
