"""Dictionary encoding of a mini-block page of strings or binaries (2.1/2.2),
and the pages of dictionary fields (:func:`from_dictionary`).

A page whose values repeat a few distinct items is written as pylance 14
writes low-cardinality strings: the mini-block chunks hold u32 indices (bit
packed where that pays, like any integer), and the page carries the distinct
items once, as a ``variable`` block with the page's offset width::

    u32 32 | u32 offset of the bytes | (k + 1) u32 offsets from 0 | item bytes
    u32 64 | 4 zero bytes | u64 offset of the bytes | (k + 1) u64 offsets | bytes

``MiniBlockLayout.dictionary`` describes that block (in 2.2 wrapped in
``general{LZ4}``: a u32 uncompressed size, then an LZ4 raw block, as pylance
does) and ``num_dictionary_items`` counts the items.  The block is the page
buffer after the chunks (before the repetition index).  Nulls stay in the
definition levels; a null slot's index points at whatever item its (empty)
bytes matched.

The choice is made per page: a sample of the first values must repeat, then
the whole page is hashed (Arrow's ``dictionary_encode``) and the dictionary is
used only when indices plus items take at most half the plain bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ....errors import UnsupportedTypeError
from ....protos import encodings21_pb2 as pb
from ...encodings import general
from .values import FixedValues, VariableValues, flat, from_arrays, variable

#: values looked at before hashing a whole page
SAMPLE = 4096
#: the sample must hold at most this share of distinct values
MAX_SAMPLE_DISTINCT = 0.25
#: indices + items must take at most this share of the plain size
MAX_SIZE_RATIO = 0.5
#: switch for tests and benchmarks
ENABLED = True


@dataclass
class Dictionary:
    indices: FixedValues  # u32, one per value
    block: np.ndarray  # the page buffer holding the items
    encoding: pb.CompressiveEncoding
    num_items: int


def _as_arrow(values: VariableValues) -> pa.Array:
    """The values as a large_binary array over the same memory (no copy)."""
    offsets = np.ascontiguousarray(values.offsets, dtype=np.int64)
    return pa.Array.from_buffers(pa.large_binary(), values.n, [None, pa.py_buffer(offsets), pa.py_buffer(values.data)])


def _block(items: pa.Array, offset_bits: int) -> bytes:
    """The ``variable`` block of the dictionary items, with the page's offset width."""
    offs = np.frombuffer(items.buffers()[1], dtype=np.int64)[items.offset : items.offset + len(items) + 1]
    return _variable_block(offs, items.buffers()[2], offset_bits)


def _variable_block(offs: np.ndarray, data_buf, offset_bits: int) -> bytes:
    """The ``variable`` block of items at ``offs`` (n + 1, any start) into ``data_buf``."""
    data = memoryview(data_buf if data_buf is not None else b"")[int(offs[0]) : int(offs[-1])]
    rel = (offs - offs[0]).astype(f"<u{offset_bits // 8}")
    if offset_bits == 32:
        head = struct.pack("<II", 32, 8 + rel.nbytes)
    else:  # u32 width, 4 zero bytes, u64 offset of the bytes
        head = struct.pack("<IIQ", 64, 0, 16 + rel.nbytes)
    return b"".join([head, rel.tobytes(), data])


def choose(values: VariableValues, version: str) -> Dictionary | None:
    """The page's dictionary when it pays, else None."""
    if not ENABLED or values.n < 2:
        return None
    arr = _as_arrow(values)
    sample = arr.slice(0, SAMPLE)
    if pc.count_distinct(sample).as_py() > MAX_SAMPLE_DISTINCT * len(sample):
        return None
    encoded = pc.dictionary_encode(arr)
    items = encoded.dictionary
    k = len(items)
    item_bytes = int(np.frombuffer(items.buffers()[1], dtype=np.int64)[len(items)]) if k else 0
    index_bits = max(int(k - 1).bit_length(), 1)
    if values.offset_bits == 32 and item_bytes >= 1 << 32:
        return None
    if item_bytes + 4 * (k + 1) + values.n * index_bits / 8 > MAX_SIZE_RATIO * values.nbytes():
        return None
    indices = encoded.indices.to_numpy(zero_copy_only=False).astype("<u4")
    block, enc = _wrap(_block(items, values.offset_bits), variable(values.offset_bits), version)
    return Dictionary(FixedValues(values.n, 32, indices.view(np.uint8), integer=True), block, enc, k)


def _wrap(raw: bytes, enc: pb.CompressiveEncoding, version: str) -> tuple[np.ndarray, pb.CompressiveEncoding]:
    """The dictionary block as stored: as is in 2.1, in 2.2 inside ``general{LZ4}``
    (a u32 uncompressed size, then an LZ4 raw block), as pylance writes it."""
    if version == "2.1":
        return np.frombuffer(raw, dtype=np.uint8), enc
    block = np.frombuffer(general.compress(general.LZ4, raw), dtype=np.uint8)
    wrapped = pb.CompressiveEncoding()
    wrapped.general.compression.scheme = pb.COMPRESSION_ALGORITHM_LZ4
    wrapped.general.values.CopyFrom(enc)
    return block, wrapped


def from_dictionary(arr: pa.Array, version: str) -> Dictionary:
    """The page of a dictionary field (visible values ``arr``, one dictionary,
    no null items: see :func:`..dictionary.normalize_nulls`) as pylance writes
    it: the Arrow dictionary as the page's items, unused and repeated ones
    kept, and one index per value as wide as the field's index type (0 in
    null slots).  Items are a ``variable`` block (offsets as wide as the value
    type's) or a ``flat`` one (fixed-width values; booleans as bits)."""
    t = arr.type
    items = from_arrays([arr.dictionary])
    if items is None:  # pragma: no cover - schema.py refuses dictionaries of nulls
        raise UnsupportedTypeError(f"dictionary values of type {t.value_type} cannot be written")
    if isinstance(items, VariableValues):
        raw = _variable_block(items.offsets, items.data, items.offset_bits)
        enc = variable(items.offset_bits)
    else:
        data = np.packbits(items.data, bitorder="little") if items.is_bits else items.data
        raw = np.ascontiguousarray(data).tobytes()
        enc = flat(items.bits_per_value)
    block, enc = _wrap(raw, enc, version)
    dt = np.dtype(f"<u{t.index_type.bit_width // 8}")
    codes = np.asarray(arr.indices.fill_null(0).to_numpy(zero_copy_only=False)).astype(dt)
    indices = FixedValues(len(arr), t.index_type.bit_width, codes.view(np.uint8), integer=True)
    return Dictionary(indices, block, enc, items.n)


def apply(layout: pb.PageLayout, buffers: list, d: Dictionary) -> list:
    """Record ``d`` in a mini-block page's layout; the buffers with its block
    in place (after the chunks, before any repetition index)."""
    mb = layout.mini_block_layout
    mb.dictionary.CopyFrom(d.encoding)
    mb.num_dictionary_items = d.num_items
    return buffers[:2] + [d.block] + buffers[2:]
