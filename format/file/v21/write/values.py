"""Leaf values of a 2.1/2.2 page as raw bytes, plus their compressive encodings.

A leaf's visible values (see :mod:`.repdef_encode`) reach the layout writers
as one of two shapes:

* :class:`FixedValues`: a fixed number of bits per value.  Byte-aligned types
  (integers, floats, dates, times, timestamps, durations, decimals,
  fixed-size binary, fixed-size lists of those) are kept as a uint8 view of
  the Arrow buffer; booleans (and fixed-size lists of booleans) as one numpy
  bool per bit.  Fixed-size lists may carry item validity.
* :class:`VariableValues`: string, binary, large_string and large_binary, as
  the Arrow offsets (u32 or u64 on disk) and the data bytes.

Nothing here copies data unless the Arrow layout forces it (bit-offset
booleans, several Arrow chunks in one page).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ....errors import UnsupportedTypeError
from ....protos import encodings21_pb2 as pb
from ..read.values import is_large_var, is_var


def _u8(buf: pa.Buffer | None) -> np.ndarray:
    if buf is None:
        return np.zeros(0, dtype=np.uint8)
    return np.frombuffer(buf, dtype=np.uint8)


def _bits(buf: pa.Buffer | None, offset: int, n: int) -> np.ndarray:
    if n == 0:
        return np.zeros(0, dtype=bool)
    if buf is None:
        return np.zeros(n, dtype=bool)
    start, stop = offset // 8, (offset + n + 7) // 8
    bits = np.unpackbits(_u8(buf)[start:stop], bitorder="little")
    first = offset - 8 * start
    return bits[first : first + n].astype(bool)


def flat(bits: int) -> pb.CompressiveEncoding:
    """``flat{bits}``."""
    enc = pb.CompressiveEncoding()
    enc.flat.bits_per_value = bits
    return enc


def variable(offset_bits: int) -> pb.CompressiveEncoding:
    """``variable{offsets: flat{offset_bits}}``."""
    enc = pb.CompressiveEncoding()
    enc.variable.offsets.CopyFrom(flat(offset_bits))
    return enc


@dataclass
class FixedValues:
    """``n`` values of ``bits_per_value`` bits each.

    ``data`` is uint8 (``n * bits_per_value / 8`` bytes) for byte-aligned
    values, or bool (``n * bits_per_value`` bits) for bit-sized ones.
    ``dim`` is set for fixed-size lists (``item_bits`` bits per item);
    ``item_validity`` (bool per item, True = valid) when their items have nulls.
    """

    n: int
    bits_per_value: int
    data: np.ndarray
    dim: int | None = None
    item_bits: int | None = None
    item_validity: np.ndarray | None = None
    #: integer-like values (ints, dates, times, timestamps, durations) may be bit-packed
    integer: bool = False
    #: packed struct rows: the bits of each field (the row is the fields back to back)
    packed: list[int] | None = None

    @property
    def is_bits(self) -> bool:
        return self.data.dtype == np.bool_

    @property
    def width(self) -> int:
        """Bytes per value (byte-aligned values only)."""
        return self.bits_per_value // 8

    def encoding(self) -> pb.CompressiveEncoding:
        if self.packed is not None:
            enc = pb.CompressiveEncoding()
            enc.packed_struct.bits_per_value.extend(self.packed)
            enc.packed_struct.values.CopyFrom(flat(self.bits_per_value))
            return enc
        if self.dim is None:
            return flat(self.bits_per_value)
        enc = pb.CompressiveEncoding()
        enc.fixed_size_list.items_per_value = self.dim
        enc.fixed_size_list.values.CopyFrom(flat(self.item_bits))  # type: ignore[arg-type]
        if self.item_validity is not None:
            enc.fixed_size_list.has_validity = True
        return enc

    def nbytes(self) -> int:
        return (self.n * self.bits_per_value + 7) // 8

    def value_bytes(self, i: int) -> bytes:
        """The bytes of value ``i`` (byte-aligned) or its bits packed LSB-first."""
        if self.is_bits:
            b = self.bits_per_value
            return np.packbits(self.data[i * b : (i + 1) * b], bitorder="little").tobytes()
        w = self.width
        return self.data[i * w : (i + 1) * w].tobytes()

    def all_equal(self, valid: np.ndarray | None) -> bool:
        """True when every value (restricted to ``valid`` positions) is the same bit pattern."""
        if self.is_bits:
            v = self.data.reshape(self.n, self.bits_per_value)
        else:
            w = self.width
            word = next(s for s in (8, 4, 2, 1) if w % s == 0)
            v = self.data.view(f"<u{word}").reshape(self.n, w // word)
        if valid is not None:
            v = v[valid]
        if len(v) == 0:
            return False
        head = v[:256]
        if not (head == v[0]).all():  # cheap early exit for ordinary columns
            return False
        return bool((v == v[0]).all())

    def first_valid_index(self, valid: np.ndarray | None) -> int:
        return 0 if valid is None else int(np.argmax(valid))


@dataclass
class VariableValues:
    """``n`` variable-width values: ``offsets`` (n + 1, int64, may not start at 0) into ``data``."""

    n: int
    offsets: np.ndarray
    data: np.ndarray
    offset_bits: int

    def encoding(self) -> pb.CompressiveEncoding:
        return variable(self.offset_bits)

    def nbytes(self) -> int:
        return int(self.offsets[-1] - self.offsets[0]) + self.n * (self.offset_bits // 8)

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


LeafValues = FixedValues | VariableValues

_FIXED_IDS = (pa.types.is_integer, pa.types.is_floating, pa.types.is_temporal, pa.types.is_decimal)


def _byte_width(t: pa.DataType) -> int | None:
    if pa.types.is_fixed_size_binary(t):
        return t.byte_width
    if any(pred(t) for pred in _FIXED_IDS):
        bw = t.bit_width
        if bw % 8 == 0:
            return bw // 8
    return None


def check_leaf_type(t: pa.DataType, name: str) -> None:
    """Raise :class:`UnsupportedTypeError` unless a leaf of type ``t`` can be written."""
    if pa.types.is_dictionary(t):
        from ...schema import dictionary_value_supported

        if not dictionary_value_supported(t.value_type):
            raise UnsupportedTypeError(f"field {name!r}: dictionaries of {t.value_type} cannot be written")
        return
    if pa.types.is_null(t) or pa.types.is_boolean(t) or _byte_width(t) is not None:
        return
    if pa.types.is_struct(t):  # only as a packed struct leaf
        bad = [f for f in t if _byte_width(f.type) is None]
        if bad or t.num_fields == 0:
            raise UnsupportedTypeError(
                f"field {name!r}: a packed struct needs fields of whole-byte fixed width "
                f"({', '.join(f'{f.name}: {f.type}' for f in bad) or 'it has none'})"
            )
        return
    if pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return
    if pa.types.is_fixed_size_list(t):
        inner = t.value_type
        if pa.types.is_boolean(inner) or _byte_width(inner) is not None:
            return
        raise UnsupportedTypeError(
            f"field {name!r}: fixed_size_list<{inner}> cannot be written in file format 2.1/2.2 "
            f"(only fixed-width items are supported)"
        )
    raise UnsupportedTypeError(f"field {name!r}: Arrow type {t} cannot be written in file format 2.1/2.2")


def _packed_from_array(arr: pa.StructArray) -> FixedValues:
    """Packed struct rows: every field's bytes, row by row."""
    n = len(arr)
    parent_valid = (
        None if arr.null_count == 0 else np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    )
    cols, widths = [], []
    for i, f in enumerate(arr.type):
        child = arr.field(i)  # sliced to the struct's rows
        if child.null_count:
            nulls = np.asarray(child.is_null().to_numpy(zero_copy_only=False), dtype=bool)
            if parent_valid is None or np.any(nulls & parent_valid):
                raise UnsupportedTypeError(
                    f"packed struct field {f.name!r} holds nulls; packed structs store no validity for their fields"
                )
        fv = _fixed_from_array(child)
        cols.append(fv.data.reshape(n, fv.width))
        widths.append(fv.bits_per_value)
    rows = np.concatenate(cols, axis=1).reshape(-1) if n else np.zeros(0, dtype=np.uint8)
    return FixedValues(n, sum(widths), rows, packed=widths)


def _fixed_from_array(arr: pa.Array) -> FixedValues:
    t = arr.type
    n = len(arr)
    if pa.types.is_struct(t):
        return _packed_from_array(arr)
    if pa.types.is_boolean(t):
        return FixedValues(n, 1, _bits(arr.buffers()[1], arr.offset, n))
    if pa.types.is_fixed_size_list(t):
        dim = t.list_size
        child = arr.values
        start, count = (arr.offset) * dim, n * dim
        child = child.slice(start, count)
        inner = _fixed_from_array(child)
        validity = None
        if child.null_count:
            validity = ~np.asarray(child.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        return FixedValues(n, inner.bits_per_value * dim, inner.data, dim, inner.bits_per_value, validity)
    w = _byte_width(t)
    assert w is not None
    data = _u8(arr.buffers()[1])[arr.offset * w : (arr.offset + n) * w]
    if len(data) < n * w:  # a buffer may be absent or short only for n == 0
        data = np.zeros(n * w, dtype=np.uint8)
    integer = (pa.types.is_integer(t) or pa.types.is_temporal(t)) and w in (1, 2, 4, 8)
    return FixedValues(n, 8 * w, data, integer=integer)


def _join_adjacent(arrays: list[pa.Array]) -> list[pa.Array]:
    """``[one array]`` when the pieces are consecutive slices of the same
    buffers (a large array cut into pages); the pieces otherwise.  Only for
    flat types, whose buffers are all addressed by the array offset."""
    if len(arrays) < 2:
        return arrays
    t = arrays[0].type
    if not (pa.types.is_primitive(t) or is_var(t)) or pa.types.is_dictionary(t):
        return arrays

    def addresses(a: pa.Array):
        return [None if b is None else b.address for b in a.buffers()]

    first = addresses(arrays[0])
    end = arrays[0].offset + len(arrays[0])
    for a in arrays[1:]:
        if a.offset != end or addresses(a) != first:
            return arrays
        end += len(a)
    n = end - arrays[0].offset
    null_count = sum(a.null_count for a in arrays)
    return [pa.Array.from_buffers(t, n, arrays[0].buffers(), null_count=null_count, offset=arrays[0].offset)]


def from_arrays(arrays: list[pa.Array]) -> LeafValues | None:
    """The values of one page (several Arrow pieces, same type); None for the null type."""
    arrays = _join_adjacent(arrays)
    t = arrays[0].type
    if pa.types.is_null(t):
        return None
    if is_var(t):
        large = is_large_var(t)
        odt = np.int64 if large else np.int32
        offs_list, data_list, n = [], [], 0
        for a in arrays:
            bufs = a.buffers()
            m = len(a)
            offs = (
                np.frombuffer(bufs[1], dtype=odt)[a.offset : a.offset + m + 1]
                if bufs[1] is not None
                else np.zeros(1, odt)
            )
            offs_list.append(offs)
            data_list.append(_u8(bufs[2]))
            n += m
        if len(arrays) == 1:
            return VariableValues(n, offs_list[0].astype(np.int64), data_list[0], 64 if large else 32)
        out_offs = [np.zeros(1, dtype=np.int64)]
        chunks = []
        base = 0
        for offs, data in zip(offs_list, data_list):
            lo, hi = int(offs[0]), int(offs[-1])
            chunks.append(data[lo:hi])
            out_offs.append(offs[1:].astype(np.int64) - lo + base)
            base += hi - lo
        return VariableValues(
            n, np.concatenate(out_offs), np.concatenate(chunks) if chunks else _u8(None), 64 if large else 32
        )
    parts = [_fixed_from_array(a) for a in arrays]
    if len(parts) == 1:
        return parts[0]
    p0 = parts[0]
    validity = None
    if any(p.item_validity is not None for p in parts):
        validity = np.concatenate(
            [p.item_validity if p.item_validity is not None else np.ones(p.n * (p.dim or 1), dtype=bool) for p in parts]
        )
    return FixedValues(
        sum(p.n for p in parts),
        p0.bits_per_value,
        np.concatenate([p.data for p in parts]),
        p0.dim,
        p0.item_bits,
        validity,
        p0.integer,
        p0.packed,
    )
