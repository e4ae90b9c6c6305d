"""Reading rows by where they are: by position among the live rows (take), by
stable row id (take_rows, through the row id index) and blob values as files
(take_blobs).  Scans (by filter) are ``catalog/query/scan.py``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from tessera.commit import fragment_live_rows
from tessera.format.errors import NotABlobColumnError, RowOutOfRangeError
from tessera.format.table import whole_reads
from tessera.format.table.fragments import FileReaderCache, FragmentReader
from tessera.format.table.fragments import take_blobs as read_blobs

from ..errors import InvalidArgumentError, RowIdNotFoundError
from ..query.scan import ROW_ADDRESS, ROW_ID, fields_by_name
from .rowid_index import RowIdIndex, address_index_lookup
from .snapshot import TableSnapshot


def take(
    table: TableSnapshot,
    cache: FileReaderCache | None,
    indices: Sequence[int],
    columns: Sequence[str] | None = None,
    *,
    with_row_address: bool = False,
) -> pa.Table:
    """Rows by position among the live rows (0 .. count_rows()-1), in the order given."""
    idx = np.asarray(indices, dtype=np.int64)
    frags = list(table.manifest.fragments)
    live = np.array([fragment_live_rows(f) for f in frags], dtype=np.int64)
    total = int(live.sum())
    if idx.size and (idx.min() < 0 or idx.max() >= total):
        raise InvalidArgumentError(f"take index out of range [0, {total})")
    names = list(columns) if columns is not None else list(table.schema.names)
    fields = fields_by_name(table.fields, names)
    out_schema = pa.schema(
        [table.schema.field(n) for n in names]
        + ([pa.field("_rowaddr", pa.uint64(), False)] if with_row_address else [])
    )
    if idx.size == 0:
        return out_schema.empty_table()
    starts = np.concatenate([[0], np.cumsum(live)])
    # the rows of every fragment concerned, taken together (whole_reads.take_whole):
    # each fragment's distinct rows in order, then put back in the order asked
    uniq, back = np.unique(idx, return_inverse=True)
    which = np.searchsorted(starts, uniq, side="right") - 1
    cuts = np.flatnonzero(np.diff(which)) + 1
    readers, wanted, addrs = [], [], []
    for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), uniq.size]):
        fi = int(which[lo])
        frag = frags[fi]
        reader = FragmentReader(table.store, frag, fields, file_cache=cache)
        phys = uniq[lo:hi] - starts[fi]
        deleted = reader.deleted_rows()
        if len(deleted):
            live_rows = np.setdiff1d(np.arange(frag.physical_rows), deleted.astype(np.int64), assume_unique=True)
            phys = live_rows[phys]
        readers.append(reader)
        wanted.append(phys)
        if with_row_address:
            addrs.append((np.uint64(frag.id) << np.uint64(32)) + phys.astype(np.uint64))
    try:
        arrays = whole_reads.take_whole(readers, wanted) if fields else []
    finally:
        for reader in readers:
            reader.close()
    if with_row_address:
        arrays.append(pa.array(np.concatenate(addrs), pa.uint64()))
    if not arrays:
        return pa.table({"_": pa.nulls(idx.size)}).select([])
    return pa.Table.from_arrays(arrays, schema=out_schema).take(pa.array(back))


def take_blobs(
    table: TableSnapshot,
    index: Callable[[], RowIdIndex],
    cache: FileReaderCache | None,
    column: str,
    indices: Sequence[int] | None = None,
    ids: Sequence[int] | None = None,
    addresses: Sequence[int] | None = None,
) -> list[Any]:
    """Values of blob column ``column`` as read-only, seekable file-like objects
    (see :meth:`Table.take_blobs`), the rows chosen by exactly one of
    ``indices``, ``ids`` or ``addresses``."""
    given = [x for x in (indices, ids, addresses) if x is not None]
    if len(given) != 1:
        raise InvalidArgumentError("take_blobs needs exactly one of indices, ids or addresses")
    (field,) = fields_by_name(table.fields, [column])
    if field.blob is None:
        raise NotABlobColumnError(
            f"column {column!r} is not a blob column (large_binary with lance-encoding:blob metadata)"
        )
    if indices is not None:
        addr = take(table, cache, indices, columns=[], with_row_address=True).column("_rowaddr").to_numpy()
    elif ids is not None:
        addr, found = resolve(table, index, np.asarray(ids, dtype=np.uint64).ravel())
        if not found.all():
            missing = np.asarray(ids)[~found][:5].tolist()
            raise InvalidArgumentError(f"row ids not live in version {table.version}: {missing}")
    else:
        addr = np.asarray(addresses, dtype=np.uint64)
    try:
        return read_blobs(table.store, table.manifest.fragments, field, addr, cache)
    except RowOutOfRangeError as exc:
        raise InvalidArgumentError(str(exc)) from exc


#: a fragment asked for at least one row per this many is read as a stream of
#: slices instead of row by row (the file reader's take decodes a page chunk
#: per run of rows, which costs more than streaming once rows are this dense)
DENSE_EVERY = 2500
DENSE_SLICE = 256 * 1024


def _take_fragment(reader, rows: np.ndarray) -> list:
    """``reader``'s columns at physical ``rows`` (sorted, distinct)."""
    lo_all, hi_all = int(rows[0]), int(rows[-1]) + 1
    if rows.size * DENSE_EVERY < hi_all - lo_all:
        return reader.take(rows)
    parts: list[list] = []
    for lo in range(lo_all, hi_all, DENSE_SLICE):
        hi = min(lo + DENSE_SLICE, hi_all)
        a, b = np.searchsorted(rows, [lo, hi])
        if a == b:
            continue
        pick = pa.array(rows[a:b] - lo)
        parts.append([col.take(pick) for col in reader.read(lo, hi)])
    if len(parts) == 1:
        return parts[0]
    return [pa.concat_arrays([p[k] for p in parts]) for k in range(len(parts[0]))]


def resolve(table: TableSnapshot, index: Callable[[], RowIdIndex], row_ids) -> tuple[np.ndarray, np.ndarray]:
    """``(addresses, found)`` of ``row_ids`` in ``table`` (ids are addresses
    without stable row ids; with them ``index()`` gives the version's index)."""
    if table.stable_row_ids:
        return index().lookup(row_ids)
    return address_index_lookup(table.manifest.fragments, table.store, row_ids)


def take_rows(
    table: TableSnapshot,
    index: Callable[[], RowIdIndex],
    cache: FileReaderCache | None,
    row_ids,
    columns=None,
    *,
    on_missing: str = "skip",
) -> pa.Table:
    """Rows by ``_rowid``, in the order asked (repeats allowed).  Ids that are
    not live are skipped, as pylance's ``_take_rows`` does, or raise
    :class:`RowIdNotFoundError` with ``on_missing="raise"``.  ``columns`` may
    include ``_rowid`` and ``_rowaddr``.  ``cache`` keeps the data files open
    between takes."""
    if on_missing not in ("skip", "raise"):
        raise InvalidArgumentError(f"on_missing must be 'skip' or 'raise', got {on_missing!r}")
    if isinstance(columns, str):
        raise InvalidArgumentError("columns must be a list of names, not a string")
    try:
        ids = np.asarray(row_ids.to_numpy(zero_copy_only=False) if hasattr(row_ids, "to_numpy") else row_ids)
        if ids.dtype.kind == "i" and ids.size and ids.min() < 0:
            raise InvalidArgumentError("row ids are unsigned; got a negative id")
        ids = ids.astype(np.uint64).ravel()
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"row ids must be integers: {exc}") from exc
    names = list(columns) if columns is not None else list(table.schema.names)
    # a table column named like a special column is that column
    special = tuple(n for n in (ROW_ID, ROW_ADDRESS) if n not in table.schema.names)
    data_names = [n for n in names if n not in special]
    fields = fields_by_name(table.fields, data_names)
    out_fields = [pa.field(n, pa.uint64()) if n in special else table.schema.field(n) for n in names]
    schema = pa.schema(out_fields)
    addr, found = resolve(table, index, ids)
    if not found.all():
        if on_missing == "raise":
            missing = ids[~found]
            raise RowIdNotFoundError(
                f"{missing.size} row ids are not live in version {table.version}, e.g. {missing[:5].tolist()}"
            )
        ids, addr = ids[found], addr[found]
    if not ids.size:
        return schema.empty_table()
    # every distinct address once, in file order: each fragment is read
    # once for sorted rows, and the result is put in the order asked at the end
    uaddr, inverse = np.unique(addr, return_inverse=True)
    frag_ids = (uaddr >> np.uint64(32)).astype(np.int64)
    offsets = (uaddr & np.uint64(0xFFFFFFFF)).astype(np.int64)
    by_id = {f.id: f for f in table.manifest.fragments}
    bounds = np.concatenate(([0], np.flatnonzero(frag_ids[1:] != frag_ids[:-1]) + 1, [uaddr.size])).tolist()
    parts: list[list] = [[] for _ in data_names]
    if fields:
        for a, b in zip(bounds[:-1], bounds[1:]):
            frag = by_id[int(frag_ids[a])]
            reader = FragmentReader(table.store, frag, fields, file_cache=cache)
            try:
                for k, arr in enumerate(_take_fragment(reader, offsets[a:b])):
                    parts[k].append(arr)
            finally:
                reader.close()
    identity = uaddr.size == ids.size and bool(np.all(addr[1:] > addr[:-1]))
    where = None if identity else pa.array(inverse.ravel().astype(np.int64, copy=False))
    cols = []
    for n in names:
        if n == ROW_ID and n in special:
            cols.append(pa.array(ids, pa.uint64()))
        elif n == ROW_ADDRESS and n in special:
            cols.append(pa.array(addr, pa.uint64()))
        else:
            p = parts[data_names.index(n)]
            col = p[0] if len(p) == 1 else pa.concat_arrays(p)
            cols.append(col if where is None else col.take(where))
    return pa.Table.from_arrays(cols, schema=schema)
