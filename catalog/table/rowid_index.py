"""The row id index: stable row id -> row address, for one table version.

Built from the fragments' row id sequences and deletion files.  Only live rows
are indexed, so a deleted id (even one whose value reappears in a newer
fragment, as pylance's updates do) is never returned.

The index has three parts:

* **runs**: ``[first_id, first_id + length)`` lives at consecutive addresses
  starting at ``first_address``.  A fragment written as one range of ids is
  one run, however many rows it has; a range with holes or with a few
  deleted rows is a handful of runs.  This is the common case and it costs
  24 bytes per run.
* **dense table**: single ids (runs of length 1, e.g. after a compaction that
  sorted the rows) that fill at least half of their id span go in a direct
  table, ``table[id - base] = address``: 8 bytes per slot, built by one
  scatter, no sort.
* **sparse points**: other single ids, as sorted ``(id, address)`` pairs.

A lookup is a vectorised binary search (runs, sparse points) and a gather
(dense table) over the whole query array; nothing loops per id in Python.  A
row address is ``fragment_id << 32 | offset``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from tessera.format.errors import CorruptFileError
from tessera.format.protos import table_pb2
from tessera.format.table import deletion as ldeletion
from tessera.format.table import paths
from tessera.format.table import rowids as lrowids
from tessera.stores.object_store import ObjectStore

from ..errors import DuplicateRowIdError
from ..query.scan import check_fragment_id

log = logging.getLogger(__name__)


def row_address(fragment_id: int, offset) -> np.ndarray:
    return (np.uint64(fragment_id) << np.uint64(32)) + np.asarray(offset, dtype=np.uint64)


def _live_runs(
    pos: np.ndarray, first: np.ndarray, length: np.ndarray, deleted: np.ndarray, physical_rows: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut runs ``(position, first_id, length)`` at deleted positions."""
    if not deleted.size:
        return pos, first, length
    d = np.unique(deleted.astype(np.int64))
    # live intervals of positions: the gaps between deleted rows
    live_lo = np.concatenate([[0], d + 1])
    live_hi = np.concatenate([d, [physical_rows]])
    keep = live_hi > live_lo
    live_lo, live_hi = live_lo[keep], live_hi[keep]
    # elementary intervals between every run and live-interval boundary
    bounds = np.unique(np.concatenate([pos, pos + length, live_lo, live_hi]))
    lo, hi = bounds[:-1], bounds[1:]
    k = np.searchsorted(live_lo, lo, side="right") - 1
    alive = (k >= 0) & (lo < live_hi[np.maximum(k, 0)])
    lo, hi = lo[alive], hi[alive]
    r = np.searchsorted(pos, lo, side="right") - 1
    return lo, first[r] + (lo - pos[r]).astype(np.uint64), hi - lo


NO_ADDRESS = np.uint64(2**64 - 1)
#: single ids are kept in a direct table (id - base -> address) when they
#: fill at least half of their id span: 8 bytes per slot, O(1) lookups
DENSE_MIN_POINTS = 4096


def _duplicate(row_id, a, b) -> DuplicateRowIdError:
    return DuplicateRowIdError(
        f"row id {int(row_id)} is live at two addresses ({int(a)} and {int(b)}); "
        "the table's row id sequences are corrupt"
    )


@dataclass
class RowIdIndex:
    """Live row id -> row address for one version of a table."""

    run_first: np.ndarray  # uint64, sorted
    run_end: np.ndarray  # uint64, exclusive
    run_address: np.ndarray  # uint64, address of run_first
    point_id: np.ndarray  # uint64, sorted (sparse single ids)
    point_address: np.ndarray  # uint64
    table_base: int = 0  # dense single ids: table[id - table_base] (NO_ADDRESS = absent)
    table: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    build_seconds: float = 0.0

    @classmethod
    def build(cls, store: ObjectStore, fragments: Iterable[table_pb2.DataFragment]) -> RowIdIndex:
        """Index the live rows of ``fragments`` (which must carry row id sequences)."""
        t0 = time.perf_counter()
        firsts, lengths, addrs = [], [], []
        for frag in fragments:
            seq = lrowids.read_row_id_sequence(store, frag)
            if seq is None:
                raise DuplicateRowIdError(
                    f"fragment {frag.id} of {store.uri} has no row id sequence; the table does not have "
                    "stable row ids, so its _rowid is the row address"
                )
            pos, first, length = seq.runs()
            if int(length.sum()) != frag.physical_rows:
                raise CorruptFileError(
                    None, f"fragment {frag.id} has {frag.physical_rows} rows but {int(length.sum())} row ids"
                )
            if frag.HasField("deletion_file"):
                d = frag.deletion_file
                path = paths.deletion_file_path(frag.id, d)
                deleted = ldeletion.decode_for_fragment(store.read(path), d, frag.physical_rows, f"{store.uri}/{path}")
                pos, first, length = _live_runs(pos, first, length, deleted, frag.physical_rows)
            firsts.append(first)
            lengths.append(length)
            addrs.append(row_address(frag.id, pos))
        index = cls.from_runs(
            np.concatenate(firsts) if firsts else np.zeros(0, np.uint64),
            np.concatenate(lengths) if lengths else np.zeros(0, np.int64),
            np.concatenate(addrs) if addrs else np.zeros(0, np.uint64),
        )
        index.build_seconds = time.perf_counter() - t0
        log.debug("row id index of %s: %r in %.3fs", store.uri, index, index.build_seconds)
        return index

    @classmethod
    def from_runs(cls, first: np.ndarray, length: np.ndarray, address: np.ndarray) -> RowIdIndex:
        """Split runs from single ids, sort them, and check that no id is live twice."""
        first = np.asarray(first, np.uint64)
        length = np.asarray(length, np.int64)
        address = np.asarray(address, np.uint64)
        single = length == 1
        n_single = int(np.count_nonzero(single))
        if n_single == 0:
            rf, rl, ra, pid, paddr = first, length, address, first[:0], address[:0]
        elif n_single == first.size:
            rf, rl, ra, pid, paddr = first[:0], length[:0], address[:0], first, address
        else:
            rf, rl, ra, pid, paddr = first[~single], length[~single], address[~single], first[single], address[single]
        if rf.size > 1 and not bool(np.all(rf[1:] >= rf[:-1])):  # usually sorted already
            order = np.argsort(rf)
            rf, rl, ra = rf[order], rl[order], ra[order]
        re = rf + rl.astype(np.uint64)
        if rf.size > 1:
            clash = np.nonzero(rf[1:] < re[:-1])[0]
            if clash.size:
                i = int(clash[0])
                raise _duplicate(rf[i + 1], ra[i] + (rf[i + 1] - rf[i]), ra[i + 1])
        if pid.size and rf.size:  # a single id inside a run
            near = np.flatnonzero((pid >= rf[0]) & (pid < re[-1]))
            k = np.searchsorted(rf, pid[near], side="right") - 1
            inside = np.flatnonzero((k >= 0) & (pid[near] < re[np.maximum(k, 0)]))
            if inside.size:
                j, r = int(near[inside[0]]), int(k[inside[0]])
                raise _duplicate(pid[j], ra[r] + (pid[j] - rf[r]), paddr[j])
        index = cls(rf, re, ra, pid[:0], paddr[:0])
        if pid.size >= DENSE_MIN_POINTS and int(pid.max()) - int(pid.min()) < 2 * pid.size:
            base = int(pid.min())
            table = np.full(int(pid.max()) - base + 1, NO_ADDRESS, np.uint64)
            slot = (pid - np.uint64(base)).view(np.int64)
            table[slot] = paddr
            if np.count_nonzero(table != NO_ADDRESS) != pid.size:
                dup = np.sort(slot)
                d = int(dup[np.nonzero(dup[1:] == dup[:-1])[0][0]]) + base
                raise _duplicate(d, table[d - base], paddr[pid == np.uint64(d)][0])
            index.table_base, index.table = base, table
        else:
            if pid.size > 1 and not bool(np.all(pid[1:] > pid[:-1])):
                order = np.argsort(pid)
                pid, paddr = pid[order], paddr[order]
                same = np.nonzero(pid[1:] == pid[:-1])[0]
                if same.size:
                    raise _duplicate(pid[same[0]], paddr[same[0]], paddr[same[0] + 1])
            index.point_id, index.point_address = pid, paddr
        return index

    def __len__(self) -> int:
        return (
            int((self.run_end - self.run_first).sum())
            + int(self.point_id.size)
            + int(np.count_nonzero(self.table != NO_ADDRESS))
        )

    @property
    def nbytes(self) -> int:
        return sum(
            a.nbytes
            for a in (self.run_first, self.run_end, self.run_address, self.point_id, self.point_address, self.table)
        )

    def lookup(self, row_ids) -> tuple[np.ndarray, np.ndarray]:
        """``(addresses, found)`` for ``row_ids``; ``addresses`` is 0 where not found."""
        q = np.asarray(row_ids, dtype=np.uint64).ravel()
        out = np.zeros(q.size, np.uint64)
        found = np.zeros(q.size, bool)
        if self.run_first.size:
            k = np.searchsorted(self.run_first, q, side="right") - 1
            kk = np.maximum(k, 0)
            hit = (k >= 0) & (q < self.run_end[kk])
            out[hit] = self.run_address[kk[hit]] + (q[hit] - self.run_first[kk[hit]])
            found |= hit
        if self.point_id.size:
            j = np.searchsorted(self.point_id, q)
            jj = np.minimum(j, self.point_id.size - 1)
            hit = self.point_id[jj] == q
            out[hit] = self.point_address[jj[hit]]
            found |= hit
        if self.table.size:
            base = np.uint64(self.table_base)
            inside = (q >= base) & (q - base < np.uint64(self.table.size))
            slot = np.where(inside, q - base, 0).astype(np.int64)
            got = self.table[slot]
            hit = inside & (got != NO_ADDRESS)
            out[hit] = got[hit]
            found |= hit
        return out, found

    def __contains__(self, row_id: int) -> bool:
        return bool(self.lookup([row_id])[1][0])

    def __repr__(self) -> str:
        return (
            f"RowIdIndex({len(self)} ids: {self.run_first.size} runs, {self.point_id.size} sparse points, "
            f"{self.table.size} dense slots, {self.nbytes} bytes)"
        )


def _check_address_fragment(frag: table_pb2.DataFragment, store: ObjectStore, seen: set[int]) -> None:
    """A fragment of a table whose row ids are its row addresses: its id must
    fit the address's high 32 bits and be unique, and it must not carry a
    row id sequence (which only a table with stable row ids has)."""
    check_fragment_id(frag, store, seen)
    if frag.WhichOneof("row_id_sequence") is not None:
        raise CorruptFileError(
            store.uri,
            f"fragment {frag.id} carries a row id sequence, but the manifest's reader feature flags "
            "say the table has no stable row ids",
        )


def address_index_lookup(
    fragments: Iterable[table_pb2.DataFragment], store: ObjectStore, addresses
) -> tuple[np.ndarray, np.ndarray]:
    """``(addresses, found)`` for a table without stable row ids, where
    ``_rowid`` is the row address itself: checks fragment, bounds and deletions."""
    q = np.asarray(addresses, dtype=np.uint64).ravel()
    frag_of = (q >> np.uint64(32)).astype(np.int64)
    offset = (q & np.uint64(0xFFFFFFFF)).astype(np.int64)
    found = np.zeros(q.size, bool)
    seen: set[int] = set()
    for frag in fragments:
        _check_address_fragment(frag, store, seen)
        sel = frag_of == frag.id
        if not sel.any():
            continue
        ok = sel & (offset < frag.physical_rows)
        if frag.HasField("deletion_file") and ok.any():
            d = frag.deletion_file
            path = paths.deletion_file_path(frag.id, d)
            deleted = ldeletion.decode_for_fragment(
                store.read(path), d, frag.physical_rows, f"{store.uri}/{path}"
            ).astype(np.int64)
            ok &= ~np.isin(offset, deleted)
        found |= ok
    return np.where(found, q, np.uint64(0)), found
