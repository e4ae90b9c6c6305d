"""Deletion files: which rows of a fragment are deleted.

Up to :data:`ARROW_MAX_ROWS` rows: an Arrow IPC *file* with one batch of
``row_id: uint32 not null`` (zstd); more: a 32-bit Roaring bitmap in the portable
format (``.bin``).  The manifest's ``DeletionFile.file_type`` decides how a file
is parsed, whatever its size.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
from pyroaring import BitMap

from ..errors import CorruptFileError
from ..protos import table_pb2
from .paths import deletion_file_path  # noqa: F401  (a deletion file's path; defined with the table's other names)

ARROW_MAX_ROWS = 5000
SCHEMA = pa.schema([pa.field("row_id", pa.uint32(), nullable=False)])


def encode(rows: np.ndarray, read_version: int) -> tuple[table_pb2.DeletionFile, bytes]:
    """Encode the deleted row offsets ``rows`` (unique) as a new deletion file."""
    rows = np.unique(np.asarray(rows, dtype=np.uint32))
    meta = table_pb2.DeletionFile(read_version=read_version, id=random.getrandbits(63), num_deleted_rows=len(rows))
    if len(rows) <= ARROW_MAX_ROWS:
        meta.file_type = table_pb2.ARROW_ARRAY
        sink = pa.BufferOutputStream()
        # uncompressed, as pylance writes them: a few thousand offsets at most, and a
        # zstd stream costs more to set up (~0.2 ms to write, as much to read) than it saves
        with ipc.new_file(sink, SCHEMA) as w:
            w.write_batch(pa.record_batch([pa.array(rows, pa.uint32())], schema=SCHEMA))
        return meta, sink.getvalue().to_pybytes()
    meta.file_type = table_pb2.BITMAP
    return meta, BitMap(rows).serialize()


def decode(data: bytes, file_type: int, path: str | None = None) -> np.ndarray:
    """Deleted row offsets (sorted, unique uint32) from a deletion file's bytes.

    Every way the bytes can fail to be a deletion file raises CorruptFileError;
    :func:`decode_for_fragment` also checks them against the fragment."""
    if file_type == table_pb2.ARROW_ARRAY:
        return _decode_arrow(data, path)
    if file_type == table_pb2.BITMAP:
        return _bitmap_rows(_decode_bitmap(data, path))
    raise CorruptFileError(path, f"unknown deletion file type {file_type}")


def _decode_bitmap(data: bytes, path: str | None) -> BitMap:
    try:
        return BitMap.deserialize(data)
    except (ValueError, OverflowError, MemoryError, IndexError) as exc:  # IndexError: empty or cut short
        raise CorruptFileError(path, f"deletion bitmap is not a portable Roaring bitmap: {exc}") from exc


def _bitmap_rows(bm: BitMap) -> np.ndarray:
    if not len(bm):
        return np.zeros(0, np.uint32)
    arr = bm.to_array()  # array.array of uint32, ascending
    return np.frombuffer(arr, dtype=np.uint32) if arr.itemsize == 4 else np.array(arr, dtype=np.uint32)


def _decode_arrow(data: bytes, path: str | None) -> np.ndarray:
    # pyarrow reports a damaged IPC file through many classes (ArrowInvalid,
    # ArrowNotImplementedError, ArrowMemoryError for a huge length, plain
    # OSError for "Read out of bounds", "Invalid flatbuffers message" or a
    # failed zstd frame), some only when the batch is read or validated
    try:
        reader = ipc.open_file(pa.py_buffer(data))
        schema = reader.schema
        if not schema.equals(SCHEMA):
            raise CorruptFileError(path, f"deletion file schema is {schema}, expected {SCHEMA}")
        if reader.num_record_batches != 1:
            raise CorruptFileError(
                path, f"expected exactly one batch in deletion file, got {reader.num_record_batches}"
            )
        batch = reader.get_batch(0)
        batch.validate(full=True)  # offsets, lengths and buffer sizes agree
        col = batch.column(0)
        if col.null_count:
            raise CorruptFileError(path, f"deletion file holds {col.null_count} null row offsets")
        rows = col.to_numpy(zero_copy_only=False)
    except (pa.ArrowException, OSError, IndexError) as exc:
        raise CorruptFileError(path, f"deletion file is not a valid Arrow IPC file: {exc}") from exc
    return np.unique(rows.astype(np.uint32, copy=False))


def decode_for_fragment(
    data: bytes, d: table_pb2.DeletionFile, physical_rows: int, path: str | None = None
) -> np.ndarray:
    """The deleted row offsets of a fragment of ``physical_rows`` rows from its
    deletion file ``d``: decoded, and checked to hold exactly the
    ``num_deleted_rows`` rows the manifest promises (``count_rows`` trusts that
    number), all below ``physical_rows``."""
    if d.file_type == table_pb2.BITMAP:
        # checked before it is expanded: a few corrupt bytes can describe 2**32 rows
        bm = _decode_bitmap(data, path)
        n = len(bm)
        if n != d.num_deleted_rows:
            raise CorruptFileError(
                path, f"deletion file holds {n} rows, its manifest entry (num_deleted_rows) says {d.num_deleted_rows}"
            )
        if n and bm.max() >= physical_rows:
            raise CorruptFileError(
                path, f"deletion file deletes row {bm.max()}, beyond the fragment's {physical_rows} rows"
            )
        return _bitmap_rows(bm)
    rows = decode(data, d.file_type, path)
    if len(rows) != d.num_deleted_rows:
        raise CorruptFileError(
            path,
            f"deletion file holds {len(rows)} rows, its manifest entry (num_deleted_rows) says {d.num_deleted_rows}",
        )
    if len(rows) and int(rows[-1]) >= physical_rows:
        raise CorruptFileError(
            path, f"deletion file deletes row {int(rows[-1])}, beyond the fragment's {physical_rows} rows"
        )
    return rows


#: decoded deletion vectors kept by the process, by their bytes at most
CACHE_BYTES = 64 << 20
_CACHE: OrderedDict[tuple, np.ndarray] = OrderedDict()
_CACHE_HELD = [0]
_CACHE_LOCK = threading.Lock()


def cached(key: tuple, load: Callable[[], np.ndarray]) -> np.ndarray:
    """The deleted rows ``load()`` returns, decoded once per process for ``key``.

    A deletion file is never rewritten (each has a new random id in its
    name), so a key naming the table, the file and what the manifest says of
    it (rows deleted, file type, the fragment's rows) names one decoded
    vector for good; where reading the bytes again is cheap (local disk) the
    key holds their digest too, so a file damaged or replaced since is
    decoded (and checked) again.  The arrays are shared: they are made
    read-only."""
    with _CACHE_LOCK:
        rows = _CACHE.get(key)
        if rows is not None:
            _CACHE.move_to_end(key)
            return rows
    rows = load()
    rows.flags.writeable = False
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = rows
            _CACHE_HELD[0] += rows.nbytes
            while _CACHE_HELD[0] > CACHE_BYTES and len(_CACHE) > 1:
                _, old = _CACHE.popitem(last=False)
                _CACHE_HELD[0] -= old.nbytes
    return rows


def digest(data: bytes | None) -> bytes | None:
    """A short digest of a deletion file's bytes, for :func:`cached`'s key."""
    return None if data is None else hashlib.blake2b(data, digest_size=16).digest()


def clear_cache() -> None:
    """Forget every decoded deletion vector (tests)."""
    with _CACHE_LOCK:
        _CACHE.clear()
        _CACHE_HELD[0] = 0
