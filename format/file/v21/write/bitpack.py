"""Inline FastLanes bit-packing of integer mini-block values (2.1/2.2 writer).

``inline_bitpacking{uncompressed_bits_per_value: T}`` stores each chunk's
values as one FastLanes block of 1024 values: ``[W as a T-bit integer]``
followed by ``128 * W`` packed bytes, where W is the bit width of the chunk's
largest value (reinterpreted as unsigned).  A chunk with fewer than 1024
values still stores a whole block, zero-padded, as pylance does.  Chunks
therefore hold at most 1024 values.

The packing itself is :func:`format.encodings.fastlanes.pack`.
It is used only when it saves at least :data:`MIN_SAVING` of the flat size
(it never helps for negative numbers, whose top bit is set).
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from ....protos import encodings21_pb2 as pb
from .values import FixedValues

_fastlanes: ModuleType | None
try:
    from ...encodings import fastlanes as _fastlanes
except ImportError:  # pragma: no cover - the helper is optional
    _fastlanes = None

BLOCK = 1024
#: use bit-packing only when it shrinks the values by at least this fraction
MIN_SAVING = 0.2
#: switch for tests and benchmarks
ENABLED = True


def _unsigned(values: FixedValues) -> np.ndarray:
    return values.data.view(f"<u{values.width}")


def _bit_widths(maxes: np.ndarray, type_bits: int) -> np.ndarray:
    """The bit length of each (unsigned) value of ``maxes`` (0 for 0)."""
    if len(maxes) <= 16:  # a small page's few chunks: Python's int.bit_length beats numpy's per-call cost
        return np.array([int(m).bit_length() for m in maxes.tolist()], dtype=np.int64)
    x = maxes.astype(np.uint64)
    widths = np.zeros(len(x), dtype=np.int64)
    shift = 32
    while shift:  # binary search on the highest set bit: log2(64) steps
        high = (x >> np.uint64(shift)) != 0
        widths += high * shift
        x = np.where(high, x >> np.uint64(shift), x)
        shift //= 2
    return widths + (x != 0)


def choose(values: FixedValues) -> int | None:
    """T (bits per value) when these values should be bit-packed, else None."""
    if not can_pack(values):
        return None
    T = values.bits_per_value
    nblocks = -(-values.n // BLOCK)
    return T if packed_bytes(values) <= (1 - MIN_SAVING) * nblocks * BLOCK * values.width else None


def can_pack(values: FixedValues) -> bool:
    """True for values inline bit-packing can encode (integer-like, 8 to 64 bits)."""
    if not ENABLED or _fastlanes is None:
        return False
    return values.integer and values.dim is None and not values.is_bits and values.width in (1, 2, 4, 8)


def packed_bytes(values: FixedValues) -> int:
    """Bytes of the page's values as inline bit-packed blocks of :data:`BLOCK` values."""
    T = values.bits_per_value
    u = _unsigned(values)
    nblocks = -(-len(u) // BLOCK)
    padded = np.zeros(nblocks * BLOCK, dtype=u.dtype)
    padded[: len(u)] = u
    widths = _bit_widths(padded.reshape(nblocks, BLOCK).max(axis=1), T)
    return int((T // 8 + 128 * widths).sum())


def _chunk_widths(values: FixedValues, type_bits: int, vs: np.ndarray) -> np.ndarray:
    u = _unsigned(values)
    maxes = np.maximum.reduceat(u, vs) if len(vs) else np.zeros(0, dtype=u.dtype)
    return _bit_widths(maxes, type_bits)


def chunk_sizes(values: FixedValues, type_bits: int, vs: np.ndarray, ve: np.ndarray) -> np.ndarray:
    """Bytes of each chunk's block (chunks hold at most 1024 values)."""
    return type_bits // 8 + 128 * _chunk_widths(values, type_bits, vs)


def chunk_blocks(values: FixedValues, type_bits: int, vs: np.ndarray, ve: np.ndarray):
    """The chunks' blocks: ``(heads, groups)``.  ``heads`` holds each chunk's
    width word (a ``(chunks, T / 8)`` uint8 array); ``groups`` lists, per bit
    width W > 0, ``(chunks, packed, 128 * W)``: the chunks of that width, in
    order, and their packed bytes back to back."""
    assert _fastlanes is not None  # choose() picks bit-packing only when the helper is there
    u = _unsigned(values)
    K = len(vs)
    counts = ve - vs
    padded = np.zeros((K, BLOCK), dtype=u.dtype)
    if K == 1 or bool((counts[:-1] == BLOCK).all()):
        padded.reshape(-1)[: len(u)] = u
    else:
        rows = np.repeat(np.arange(K), counts)
        cols = np.arange(len(u)) - np.repeat(vs, counts)
        padded[rows, cols] = u
    widths = _chunk_widths(values, type_bits, vs)
    heads = widths.astype(f"<u{type_bits // 8}").view(np.uint8).reshape(K, type_bits // 8)
    groups = []
    for W in np.unique(widths).tolist():
        if W == 0:
            continue
        sel = np.flatnonzero(widths == W)
        packed = _fastlanes.pack(padded if len(sel) == K else padded[sel], W)
        groups.append((sel, np.frombuffer(packed, dtype=np.uint8), 128 * W))
    return heads, groups


def encoding(type_bits: int) -> pb.CompressiveEncoding:
    """``inline_bitpacking{uncompressed_bits_per_value: T}``."""
    enc = pb.CompressiveEncoding()
    enc.inline_bitpacking.uncompressed_bits_per_value = type_bits
    return enc
