"""Rewriting fragments: the live rows of a group of fragments as new fragments.

This is compaction's data step (planning which fragments to rewrite and
committing the result are the catalog's): the rows are read, the deleted
ones dropped, optionally sorted, and written in new data files of a target
size.  With stable row ids every surviving row keeps its id: a new fragment's
row id sequence is the old ids in their new order, and its created-at /
last-updated-at version sequences are carried over row by row.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import RewriteError
from ..file import schema as lschema
from ..protos import table_pb2
from . import rowids as lrowids
from . import whole_reads
from .fragments import FragmentReader, write_fragments
from .store import TableStore

#: rows read from a fragment at a time
READ_BATCH = 64 * 1024
#: fragments of at most this many rows are read many at once (as a scan reads them)
SMALL_FRAGMENT_ROWS = 16 * 1024


@dataclass(frozen=True)
class TableLayout:
    """What rewriting needs to know of a table (one version of it)."""

    store: TableStore
    schema: pa.Schema
    fields: list[lschema.LanceField]
    file_version: str
    stable_row_ids: bool


Columns = tuple[pa.RecordBatch, np.ndarray | None, np.ndarray | None, np.ndarray | None, np.ndarray | None]


class LiveRows:
    """The live rows of a group of fragments, with their ids and versions
    (and their row addresses, with ``addresses``)."""

    def __init__(self, layout: TableLayout, frags: Sequence[table_pb2.DataFragment], addresses: bool = False) -> None:
        self.layout, self.frags, self.addresses = layout, frags, addresses
        self.stable = layout.stable_row_ids
        self.versions = any(
            f.WhichOneof("created_at_version_sequence") or f.WhichOneof("last_updated_at_version_sequence")
            for f in frags
        )

    def batches(self) -> Iterator[Columns]:
        """Yields ``(record_batch, row_ids, created_at, last_updated_at,
        row_addresses)`` per read batch (None for what the table lacks or was
        not asked).  Small fragments are read many at once (their columns
        decoded together: :mod:`.whole_reads`), one batch per group."""
        group: list[table_pb2.DataFragment] = []
        rows = 0
        for frag in self.frags:
            n = frag.physical_rows
            if 0 < n <= SMALL_FRAGMENT_ROWS and self.layout.fields:
                if rows + n > READ_BATCH and group:
                    yield from self._group(group)
                    group, rows = [], 0
                group.append(frag)
                rows += n
                continue
            if group:
                yield from self._group(group)
                group, rows = [], 0
            yield from self._fragment(frag)
        if group:
            yield from self._group(group)

    def _extras(self, frag: table_pb2.DataFragment) -> tuple[np.ndarray | None, ...]:
        """Every row's id, versions and address in ``frag`` (None: not kept or not asked)."""
        t = self.layout
        ids = lrowids.decode_row_ids(t.store, frag) if self.stable else None
        if self.stable and ids is None:
            raise RewriteError(f"fragment {frag.id} of a stable-row-id table has no row id sequence")
        created = updated = None
        if self.versions:
            ones = np.ones(frag.physical_rows, np.uint64)  # what pylance reads when a sequence is missing
            created = lrowids.read_versions(t.store, frag, lrowids.CREATED_AT_FIELDS)
            updated = lrowids.read_versions(t.store, frag, lrowids.LAST_UPDATED_AT_FIELDS)
            created = ones if created is None else created
            updated = ones if updated is None else updated
        addrs = (
            (np.uint64(frag.id) << np.uint64(32)) + np.arange(frag.physical_rows, dtype=np.uint64)
            if self.addresses
            else None
        )
        return ids, created, updated, addrs

    def _fragment(self, frag: table_pb2.DataFragment) -> Iterator[Columns]:
        t = self.layout
        reader = FragmentReader(t.store, frag, t.fields, remember_tails=False)
        try:
            extras = self._extras(frag)
            for start in range(0, frag.physical_rows, READ_BATCH):
                stop = min(start + READ_BATCH, frag.physical_rows)
                batch = pa.RecordBatch.from_arrays(reader.read(start, stop), schema=t.schema)
                got = _live(
                    batch, reader.live_mask(start, stop), [None if a is None else a[start:stop] for a in extras]
                )
                if got is not None:
                    yield got
        finally:
            reader.close()

    def _group(self, frags: list[table_pb2.DataFragment]) -> Iterator[Columns]:
        if len(frags) == 1:
            yield from self._fragment(frags[0])
            return
        t = self.layout
        # the sources are read once and replaced: their parsed tails are not kept
        readers = [FragmentReader(t.store, f, t.fields, remember_tails=False) for f in frags]
        try:
            live = whole_reads.live_mask(readers)
            extras = [self._extras(f) for f in frags]
            batch = pa.RecordBatch.from_arrays(whole_reads.read_whole(readers, release=True), schema=t.schema)
        finally:
            for r in readers:
                r.close()
        joined = [None if e[0] is None else np.concatenate(e) for e in zip(*extras)]
        got = _live(batch, live, joined)
        if got is not None:
            yield got


def _live(batch: pa.RecordBatch, live: np.ndarray | None, extras: list) -> Columns | None:
    """The live rows of ``batch`` and of its rows' ``extras`` (None: none is live)."""
    if live is not None:
        if not live.any():
            return None
        batch = batch.filter(pa.array(live))
        extras = [None if a is None else a[live] for a in extras]
    ids, created, updated, addrs = extras
    return batch, ids, created, updated, addrs


def write_fragment(
    layout: TableLayout,
    rows: pa.Table,
    ids: np.ndarray | None,
    created: np.ndarray | None,
    updated: np.ndarray | None,
    limit: int | None,
) -> table_pb2.DataFragment:
    """``rows`` as one new fragment (id unassigned) with these row ids and
    version sequences (inline, or external files over ``limit`` bytes)."""
    store = layout.store
    frags = write_fragments(
        store,
        rows.to_batches(),
        layout.schema,
        layout.fields,
        layout.file_version,
        max_rows_per_file=max(rows.num_rows, 1),
    )
    if len(frags) != 1:
        raise RewriteError(f"expected one fragment for {rows.num_rows} rows, the writer made {len(frags)}")
    frag = frags[0]
    if ids is not None:
        lrowids.set_sequence(
            frag, lrowids.ROW_ID_FIELDS, lrowids.RowIdSequence.from_values(ids).to_bytes(), store.put, limit
        )
    if created is not None:
        lrowids.set_sequence(frag, lrowids.CREATED_AT_FIELDS, lrowids.encode_versions(created), store.put, limit)
        lrowids.set_sequence(frag, lrowids.LAST_UPDATED_AT_FIELDS, lrowids.encode_versions(updated), store.put, limit)
    return frag


def _cat(parts: list) -> np.ndarray | None:
    return None if not parts or parts[0] is None else np.concatenate(parts)


def rewrite_fragments(
    layout: TableLayout,
    frags: Sequence[table_pb2.DataFragment],
    target: int,
    sort_keys: list[tuple[str, str]] | None = None,
    limit: int | None = None,
    addresses: list[np.ndarray] | None = None,
) -> list[table_pb2.DataFragment]:
    """Write the live rows of ``frags`` as new fragments (ids unassigned) of
    ``target`` rows each (the last may be smaller), sorted by ``sort_keys``
    (``[(column, "ascending" | "descending")]``) when given.

    ``addresses``, when a list, receives one array per new fragment: the old
    row address of each of its rows, in order (what an index of row addresses
    needs to be remapped)."""
    src = LiveRows(layout, frags, addresses is not None)
    out: list[table_pb2.DataFragment] = []

    def emit(rows: pa.Table, cols: list[np.ndarray | None]) -> None:
        ids, cr, up, addrs = cols
        out.append(write_fragment(layout, rows, ids, cr, up, limit))
        if addresses is not None:
            assert addrs is not None  # asked for, so LiveRows yielded them
            addresses.append(addrs)

    if sort_keys:
        batches: list[pa.RecordBatch] = []
        parts: list[list] = [[], [], [], []]
        for b, *cols in src.batches():
            batches.append(b)
            for p, c in zip(parts, cols):
                p.append(c)
        rows = pa.Table.from_batches(batches, schema=layout.schema)
        order = pc.sort_indices(rows, sort_keys=sort_keys).to_numpy()
        rows = rows.take(pa.array(order))
        ordered = [None if (a := _cat(p)) is None else a[order] for p in parts]
        for s in range(0, rows.num_rows, target):
            e = min(s + target, rows.num_rows)
            emit(rows.slice(s, e - s), [None if a is None else a[s:e] for a in ordered])
        return out
    buf: list[pa.RecordBatch] = []
    pending: list[list] = [[], [], [], []]
    n = 0
    for b, *cols in src.batches():
        buf.append(b)
        for p, c in zip(pending, cols):
            p.append(c)
        n += b.num_rows
        while n >= target:
            rows = pa.Table.from_batches(buf, schema=layout.schema)
            whole = [_cat(p) for p in pending]
            emit(rows.slice(0, target), [None if a is None else a[:target] for a in whole])
            rest = rows.slice(target)
            buf = rest.to_batches()
            pending = [[None if a is None else a[target:]] for a in whole]
            n = rest.num_rows
    if n:
        rows = pa.Table.from_batches(buf, schema=layout.schema)
        emit(rows, [_cat(p) for p in pending])
    return out
