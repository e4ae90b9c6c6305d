"""Decoded value blocks and their conversion to Arrow arrays.

Decoders produce one of these intermediate forms (numpy views where the bytes
allow, so a single-chunk page is never copied):

* :class:`Fixed` - ``n`` values of ``bits`` bits back to back (``bits == 1`` is an
  LSB-first bitmap starting at ``bit_offset``);
* :class:`Var` - variable-width values: ``offsets`` (n + 1, any start) into ``data``;
* :class:`Fsl` - fixed-size lists of a :class:`Fixed` child with optional item validity;
* :class:`ArrowValues` - an already built Arrow array (dictionary lookups, constants).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ....errors import CorruptFileError, UnsupportedEncodingError
from ...encodings import buffers

U8 = np.dtype(np.uint8)


@dataclass
class Fixed:
    data: np.ndarray  # uint8
    bits: int
    n: int
    bit_offset: int = 0

    def typed(self, signed: bool = False) -> np.ndarray:
        """The values as an unsigned (or signed) numpy integer array (bits 8..64)."""
        if self.bits not in (8, 16, 32, 64):
            raise CorruptFileError(None, f"cannot read {self.bits}-bit values as integers")
        width = self.bits // 8
        need = self.n * width
        if self.data.size < need:
            raise CorruptFileError(None, f"value buffer holds {self.data.size} bytes, {need} needed")
        dt = np.dtype(f"<{'i' if signed else 'u'}{width}")
        return (
            self.data[:need].view(dt) if self.data.flags.c_contiguous else np.frombuffer(self.data[:need].tobytes(), dt)
        )


@dataclass
class Var:
    offsets: np.ndarray  # integer, n + 1
    data: np.ndarray  # uint8

    @property
    def n(self) -> int:
        return int(self.offsets.size) - 1


@dataclass
class Fsl:
    child: Fixed
    dim: int
    n: int
    validity: np.ndarray | None = None  # uint8 bitmap of n * dim item bits


@dataclass
class Packed:
    """Packed struct rows: ``rows`` holds each row's fields back to back,
    ``widths`` the bits of every field (whole bytes)."""

    rows: Fixed
    widths: list[int]

    @property
    def n(self) -> int:
        return self.rows.n


@dataclass
class VarPacked:
    """Rows of a variable-width packed struct, unpacked into one block per
    field (a null row's fields are zeros or empty)."""

    fields: list
    rows: int

    @property
    def n(self) -> int:
        return self.rows


@dataclass
class ArrowValues:
    array: pa.Array

    @property
    def n(self) -> int:
        return len(self.array)


def as_u8(buf) -> np.ndarray:
    if isinstance(buf, np.ndarray):
        return buf.reshape(-1).view(np.uint8) if buf.dtype != U8 else buf.reshape(-1)
    if buf is None:
        return np.zeros(0, dtype=np.uint8)
    return np.frombuffer(buf, dtype=np.uint8)


_BYTE_STEPS = {w: np.arange(w, dtype=np.int64) for w in (2, 4, 8)}


def _le_at(data: np.ndarray, pos, width: int) -> np.ndarray:
    """Little-endian ``width``-byte unsigned integers at byte positions ``pos``
    (any alignment): one gather of the bytes, read back as integers."""
    pos = np.asarray(pos, dtype=np.int64)
    raw = data[pos[..., None] + _BYTE_STEPS[width]]
    return raw.view(f"<u{width}")[..., 0].astype(np.int64)


def u16_at(data: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return _le_at(data, pos, 2)


def u32_at(data: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return _le_at(data, pos, 4)


def u64_at(data: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return _le_at(data, pos, 8)


def uint_at(data: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    if width == 1:
        return data[pos].astype(np.int64)
    if width in (2, 4, 8):
        return _le_at(data, pos, width)
    raise CorruptFileError(None, f"unsupported integer width {width}")


def gather(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenate ``data[starts[i] : starts[i] + lengths[i]]`` (a view when there is one piece)."""
    n = starts.size
    if n == 0:
        return np.zeros(0, dtype=data.dtype)
    if n == 1:
        s = int(starts[0])
        return data[s : s + int(lengths[0])]
    ends = starts + lengths
    if int(ends.max()) > data.size or int(starts.min()) < 0:
        raise CorruptFileError(None, "a chunk buffer runs past the end of its page buffer")
    # contiguous pieces: one slice
    if np.array_equal(starts[1:], ends[:-1]):
        return data[int(starts[0]) : int(ends[-1])]
    # a run of equally sized, equally spaced pieces: one strided copy
    L = int(lengths[0])
    if n > 2 and L > 0:
        steps = np.diff(starts)
        step = int(steps[0])
        same = (lengths[:-1] == L) & (steps == step)
        k = int(np.argmin(same)) if not same.all() else n - 1
        if k >= 8 and step >= L:
            view = np.lib.stride_tricks.as_strided(
                data[int(starts[0]) :], shape=(k, L), strides=(step * data.itemsize, data.itemsize), writeable=False
            )
            out = buffers.empty(int(lengths.sum()), data.dtype)  # one copy: the run, then the rest
            out[: k * L].reshape(k, L)[...] = view
            out[k * L :] = gather(data, starts[k:], lengths[k:])
            return out
    total = int(lengths.sum())
    if total <= 256 * n and int(lengths.min()) >= 0:  # many short pieces: one gather of every byte
        first = np.cumsum(lengths) - lengths
        return data[np.arange(total, dtype=np.int64) + np.repeat(starts - first, lengths)]
    s_list = starts.tolist()
    e_list = ends.tolist()
    return np.concatenate([data[s:e] for s, e in zip(s_list, e_list)])


def concat_bits(pieces: list[tuple[np.ndarray, int, int]]) -> tuple[np.ndarray, int]:
    """Concatenate LSB-first bitmaps given as (bytes, bit offset, bit count)."""
    if len(pieces) == 1:
        return pieces[0][0], pieces[0][1]
    if all(off == 0 and (cnt % 8 == 0 or i == len(pieces) - 1) for i, (_, off, cnt) in enumerate(pieces)):
        return np.concatenate([b[: (cnt + 7) // 8] for b, _, cnt in pieces]), 0
    bits = np.concatenate([np.unpackbits(b, bitorder="little")[off : off + cnt] for b, off, cnt in pieces])
    return np.packbits(bits, bitorder="little"), 0


def bitmap_from_bool(valid: np.ndarray, offset: int = 0) -> pa.Buffer:
    if offset:
        valid = np.concatenate([np.zeros(offset, dtype=bool), valid])
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def buf(arr: np.ndarray) -> pa.Buffer:
    return pa.py_buffer(np.ascontiguousarray(arr))


def fixed_bits(t: pa.DataType) -> int | None:
    """Bit width of a fixed-width Arrow type (None for others)."""
    if pa.types.is_boolean(t):
        return 1
    if pa.types.is_fixed_size_binary(t):
        return t.byte_width * 8
    try:
        return t.bit_width
    except ValueError:
        return None


def is_var(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t)


def is_large_var(t: pa.DataType) -> bool:
    return pa.types.is_large_string(t) or pa.types.is_large_binary(t)


def _offsets_for(t: pa.DataType, offsets: np.ndarray) -> np.ndarray:
    if is_large_var(t):
        return offsets.astype(np.int64, copy=False)
    if offsets.dtype == np.int32:
        return offsets
    if offsets.size and int(offsets[-1]) > 2**31 - 1:
        raise UnsupportedEncodingError(f"{t} values exceed 2 GiB in one read; read fewer rows at a time")
    return offsets.astype(np.int32)


def to_arrow(v, t: pa.DataType) -> pa.Array:
    """Turn a decoded block into an Arrow array of type ``t`` (no validity)."""
    if isinstance(v, ArrowValues):
        a = v.array
        if not a.type.equals(t):
            raise CorruptFileError(None, f"decoded {a.type} values for a {t} column")
        return a
    if isinstance(v, Var):
        if not is_var(t):
            raise CorruptFileError(None, f"variable-width values found for a {t} column")
        offs = _offsets_for(t, v.offsets)
        return pa.Array.from_buffers(t, v.n, [None, buf(offs), buf(v.data)])
    if isinstance(v, Packed):
        return _unpack_struct(v, t)
    if isinstance(v, VarPacked):
        if not pa.types.is_struct(t) or t.num_fields != len(v.fields):
            raise UnsupportedEncodingError(
                f"variable packed struct values of {len(v.fields)} fields found for a {t} column"
            )
        kids = [to_arrow(f, t.field(i).type) for i, f in enumerate(v.fields)]
        return pa.StructArray.from_arrays(kids, fields=list(t))
    if isinstance(v, Fsl):
        if not pa.types.is_fixed_size_list(t):
            raise CorruptFileError(None, f"fixed-size-list values found for a {t} column")
        if t.list_size != v.dim:
            raise CorruptFileError(None, f"fixed-size list of {v.dim} values found for a {t} column")
        child_t = t.value_type
        child = to_arrow(v.child, child_t)
        if v.validity is not None:
            child = pa.Array.from_buffers(
                child_t, len(child), [pa.py_buffer(v.validity)] + child.buffers()[1:], offset=child.offset
            )
        return pa.Array.from_buffers(t, v.n, [None], children=[child])
    if isinstance(v, Fixed):
        if v.bits == 0 and not pa.types.is_fixed_size_list(t):
            # unspecified values (a constant without a value, items all null)
            want = fixed_bits(t)
            if want is None:
                raise CorruptFileError(None, f"value-less constant found for a {t} column")
            v = Fixed(np.zeros((v.n * want + 7) // 8, dtype=np.uint8), want, v.n)
        if pa.types.is_fixed_size_list(t):
            # a vector stored as one wide value (e.g. flat of 4096 bits)
            width = fixed_bits(t.value_type)
            if width is None or width * t.list_size != v.bits:
                raise CorruptFileError(None, f"{v.bits}-bit values found for a {t} column")
            child = Fixed(v.data, width, v.n * t.list_size)
            return to_arrow(Fsl(child, t.list_size, v.n), t)
        want = fixed_bits(t)
        if want is None or want != v.bits:
            raise CorruptFileError(None, f"{v.bits}-bit values found for a {t} column")
        if v.bits == 1:
            return pa.Array.from_buffers(t, v.n, [None, buf(v.data)], offset=v.bit_offset)
        need = v.n * v.bits // 8
        if v.data.size < need:
            raise CorruptFileError(None, f"value buffer holds {v.data.size} bytes, {need} needed")
        data = v.data[:need]
        if v.bits >= 16 and data.ctypes.data % (v.bits // 8):
            # a view of the file at an odd address: Arrow (Acero) wants values on their own alignment
            data = data.copy()
        return pa.Array.from_buffers(t, v.n, [None, buf(data)])
    raise TypeError(f"unexpected decoded block {type(v).__name__}")


def _unpack_struct(v: Packed, t: pa.DataType) -> pa.Array:
    """A struct array from packed rows: each field is a column of the row bytes."""
    if not pa.types.is_struct(t) or t.num_fields != len(v.widths):
        raise UnsupportedEncodingError(
            f"packed_struct values of {len(v.widths)} fields found for a {t} column (only structs of as many fields)"
        )
    if any(w <= 0 or w % 8 for w in v.widths) or v.rows.bits != sum(v.widths):
        raise CorruptFileError(None, f"packed_struct of {v.widths} bits per field in rows of {v.rows.bits} bits")
    n = v.n
    row_bytes = v.rows.bits // 8
    need = n * row_bytes
    if v.rows.data.size < need:
        raise CorruptFileError(None, f"packed_struct rows hold {v.rows.data.size} bytes, {need} needed")
    rows = v.rows.data[:need].reshape(n, row_bytes)
    children, pos = [], 0
    for f, w in zip(t, v.widths):
        wb = w // 8
        col = np.ascontiguousarray(rows[:, pos : pos + wb]).reshape(-1)
        children.append(to_arrow(Fixed(col, w, n), f.type))
        pos += wb
    return pa.StructArray.from_arrays(children, fields=list(t))


def with_validity(arr: pa.Array, valid: np.ndarray | None) -> pa.Array:
    """``arr`` (no nulls) with the validity ``valid`` (bool per value) applied."""
    if valid is None:
        return arr
    if len(valid) != len(arr):
        raise CorruptFileError(None, f"{len(valid)} validity bits for {len(arr)} values")
    t = arr.type
    bitmap = bitmap_from_bool(valid, arr.offset)
    if pa.types.is_null(t):
        return arr
    if pa.types.is_fixed_size_list(t):
        return pa.Array.from_buffers(t, len(arr), [bitmap], offset=arr.offset, children=[arr.values])
    if pa.types.is_struct(t):  # a packed struct leaf: children sliced, so offset 0
        kids = [arr.field(i) for i in range(t.num_fields)]
        return pa.Array.from_buffers(t, len(arr), [bitmap_from_bool(valid)], children=kids)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        raise TypeError("with_validity is for leaf arrays")
    if pa.types.is_dictionary(t):  # the validity goes on the indices
        indices = with_validity(arr.indices, valid)
        return pa.DictionaryArray.from_arrays(indices, arr.dictionary, ordered=t.ordered, safe=False)
    return pa.Array.from_buffers(t, len(arr), [bitmap] + arr.buffers()[1:], offset=arr.offset)


def repeat_scalar(arr1: pa.Array, n: int) -> pa.Array:
    """An array of ``n`` copies of the single value in ``arr1``."""
    if n == 0:
        return arr1.slice(0, 0)
    return arr1.take(pa.array(np.zeros(n, dtype=np.int32)))
