"""Deletion files: which rows of a fragment are deleted.

Up to :data:`ARROW_MAX_ROWS` rows: an Arrow IPC *file* with one batch of
``row_id: uint32 not null`` (zstd); more: a 32-bit Roaring bitmap in the portable
format (``.bin``).  The manifest's ``DeletionFile.file_type`` decides how a file
is parsed, whatever its size.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
from pyroaring import BitMap

from .errors import CorruptFileError
from .protos import table_pb2

ARROW_MAX_ROWS = 5000
SCHEMA = pa.schema([pa.field("row_id", pa.uint32(), nullable=False)])


def deletion_file_path(fragment_id: int, d: table_pb2.DeletionFile) -> str:
    """Path of a deletion file relative to the table root."""
    ext = "arrow" if d.file_type == table_pb2.ARROW_ARRAY else "bin"
    return f"_deletions/{fragment_id}-{d.read_version}-{d.id}.{ext}"


def encode(rows: np.ndarray, read_version: int) -> tuple[table_pb2.DeletionFile, bytes]:
    """Encode the deleted row offsets ``rows`` (unique) as a new deletion file."""
    rows = np.unique(np.asarray(rows, dtype=np.uint32))
    meta = table_pb2.DeletionFile(read_version=read_version, id=random.getrandbits(63), num_deleted_rows=len(rows))
    if len(rows) <= ARROW_MAX_ROWS:
        meta.file_type = table_pb2.ARROW_ARRAY
        sink = pa.BufferOutputStream()
        opts = ipc.IpcWriteOptions(compression="zstd")
        with ipc.new_file(sink, SCHEMA, options=opts) as w:
            w.write_batch(pa.record_batch([pa.array(rows, pa.uint32())], schema=SCHEMA))
        return meta, sink.getvalue().to_pybytes()
    meta.file_type = table_pb2.BITMAP
    return meta, BitMap(rows).serialize()


def decode(data: bytes, file_type: int, path: str | None = None) -> np.ndarray:
    """Deleted row offsets (sorted uint32) from a deletion file's bytes."""
    if file_type == table_pb2.ARROW_ARRAY:
        try:
            reader = ipc.open_file(pa.py_buffer(data))
        except (pa.ArrowInvalid, OSError) as exc:
            raise CorruptFileError(path, f"deletion file is not an Arrow IPC file: {exc}") from exc
        if not reader.schema.equals(SCHEMA):
            raise CorruptFileError(path, f"deletion file schema is {reader.schema}, expected {SCHEMA}")
        if reader.num_record_batches != 1:
            raise CorruptFileError(path, f"expected exactly one batch in deletion file, got {reader.num_record_batches}")
        col = reader.get_batch(0).column(0)
        return np.sort(col.to_numpy(zero_copy_only=False).astype(np.uint32))
    if file_type == table_pb2.BITMAP:
        try:
            bm = BitMap.deserialize(data)
        except (ValueError, OverflowError, MemoryError) as exc:
            raise CorruptFileError(path, f"deletion bitmap is not a portable Roaring bitmap: {exc}") from exc
        return np.array(bm, dtype=np.uint32) if len(bm) else np.zeros(0, np.uint32)
    raise CorruptFileError(path, f"unknown deletion file type {file_type}")
