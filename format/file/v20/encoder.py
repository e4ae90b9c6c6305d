"""Encoder for file format 2.0.

Each schema node gets a column encoder that buffers arrays and cuts a page when
about ``page_size`` bytes are buffered.  A large incoming array is sliced into
pages without copying; small ones are concatenated.
"""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import UnsupportedTypeError
from ...protos import encodings_pb2 as pb
from .. import dictionary as ldict
from ..container import ARRAY_ENCODING_URL, EncodedPage, pack_any
from ..schema import LanceField

# Strings with fewer distinct values than this (in a page of at least
# DICT_MIN_ROWS rows) are dictionary encoded, as pylance does.
DICT_MAX_DISTINCT = 100
DICT_MIN_ROWS = 100
_DICT_SAMPLE = 4096


def _any(enc: pb.ArrayEncoding) -> bytes:
    return pack_any(ARRAY_ENCODING_URL, enc)


def _flat(bits: int, index: int) -> pb.ArrayEncoding:
    e = pb.ArrayEncoding()
    e.flat.bits_per_value = bits
    e.flat.buffer.buffer_index = index
    e.flat.buffer.SetInParent()
    return e


def _no_nulls(values: pb.ArrayEncoding) -> pb.ArrayEncoding:
    e = pb.ArrayEncoding()
    e.nullable.no_nulls.values.CopyFrom(values)
    return e


def _some_nulls(validity_index: int, values: pb.ArrayEncoding) -> pb.ArrayEncoding:
    e = pb.ArrayEncoding()
    e.nullable.some_nulls.validity.CopyFrom(_flat(1, validity_index))
    e.nullable.some_nulls.values.CopyFrom(values)
    return e


def _all_nulls() -> pb.ArrayEncoding:
    e = pb.ArrayEncoding()
    e.nullable.all_nulls.SetInParent()
    return e


def _bit_width(t: pa.DataType) -> int:
    if pa.types.is_boolean(t):
        return 1
    try:
        return t.bit_width
    except ValueError as exc:
        raise UnsupportedTypeError(f"type {t} has no fixed width") from exc


def _aligned(arr: pa.Array) -> pa.Array:
    """``arr`` with offset 0, so its bitmaps start at bit 0."""
    return pa.concat_arrays([arr]) if arr.offset else arr


def _validity(arr: pa.Array) -> pa.Buffer:
    return pc.is_valid(arr).buffers()[1]


def _fixed_values(arr: pa.Array, bits: int) -> pa.Buffer | np.ndarray:
    """The value buffer of a fixed-width array, starting at its first row."""
    if bits == 1:
        arr = _aligned(arr)
        return arr.buffers()[1].slice(0, (len(arr) + 7) // 8)
    width = bits // 8
    return arr.buffers()[1].slice(arr.offset * width, len(arr) * width)


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t)


def _binary_parts(arr: pa.Array) -> tuple[np.ndarray, pa.Buffer | bytes, np.ndarray | None]:
    """(end offsets relative to the first byte, bytes, null mask or None)."""
    nulls = arr.null_count
    if nulls:
        mask = np.frombuffer(pc.is_null(arr).buffers()[1], dtype=np.uint8)
        null_mask = np.unpackbits(mask, bitorder="little", count=len(arr)).astype(bool)
    else:
        null_mask = None
    odt = np.int64 if pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type) else np.int32
    offsets = np.frombuffer(arr.buffers()[1], dtype=odt, count=arr.offset + len(arr) + 1)[arr.offset :]
    if null_mask is not None and np.any(np.diff(offsets)[null_mask]):
        # null slots that still own bytes: drop the bytes so ends stay honest
        empty = b"" if pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type) else ""
        ends, body, _ = _binary_parts(pc.if_else(pc.is_valid(arr), arr, pa.scalar(empty, arr.type)))
        return ends, body, null_mask
    first, last = int(offsets[0]), int(offsets[-1])
    data = arr.buffers()[2]
    body = data.slice(first, last - first) if data is not None else b""
    ends = (offsets[1:] - first).astype(np.uint64)
    return ends, body, null_mask


def _binary_encoding(
    ends: np.ndarray, null_mask: np.ndarray | None, total: int, first_buffer: int
) -> tuple[pb.ArrayEncoding, np.ndarray]:
    """Binary encoding over end offsets with nulls marked by ``+ adj``."""
    adj = total + 1
    if null_mask is not None:
        ends = ends.copy()
        ends[null_mask] += np.uint64(adj)
    e = pb.ArrayEncoding()
    e.binary.indices.CopyFrom(_no_nulls(_flat(64, first_buffer)))
    e.binary.bytes.CopyFrom(_flat(8, first_buffer + 1))
    e.binary.null_adjustment = adj
    return e, ends


class _ColumnEncoder:
    """Buffers arrays for one column and emits pages of about ``page_size`` bytes."""

    def __init__(self, column: int, page_size: int) -> None:
        self.column = column
        self.page_size = page_size
        self._pending: list[pa.Array] = []
        self._pending_bytes = 0

    def nbytes(self, arr: pa.Array) -> int:
        return arr.nbytes

    def append(self, arr: pa.Array) -> list[EncodedPage]:
        pages: list[EncodedPage] = []
        n = len(arr)
        if n == 0:
            return pages
        size = self.nbytes(arr)
        if self._pending_bytes + size < self.page_size:
            self._pending.append(arr)
            self._pending_bytes += size
            return pages
        # fill the current page, then cut whole pages straight from ``arr``
        rows_per_page = max(1, int(n * self.page_size / max(size, 1)))
        take = max(1, min(n, int((self.page_size - self._pending_bytes) * n / max(size, 1))))
        self._pending.append(arr.slice(0, take))
        pages.extend(self.flush())
        pos = take
        while n - pos >= rows_per_page:
            pages.append(self.encode(arr.slice(pos, rows_per_page)))
            pos += rows_per_page
        if pos < n:
            rest = arr.slice(pos)
            self._pending.append(rest)
            self._pending_bytes = self.nbytes(rest)
        return pages

    def flush(self) -> list[EncodedPage]:
        if not self._pending:
            return []
        arr = self._pending[0] if len(self._pending) == 1 else pa.concat_arrays(self._pending)
        self._pending, self._pending_bytes = [], 0
        return [self.encode(arr)] if len(arr) else []

    def encode(self, arr: pa.Array) -> EncodedPage:  # pragma: no cover - abstract
        raise NotImplementedError


class _FixedEncoder(_ColumnEncoder):
    """ints, floats, bool, date/time, decimal, fixed-size binary."""

    def __init__(self, column: int, page_size: int, t: pa.DataType) -> None:
        super().__init__(column, page_size)
        self.bits = _bit_width(t)

    def encode(self, arr: pa.Array) -> EncodedPage:
        n = len(arr)
        if arr.null_count == n:
            return EncodedPage(self.column, [], n, _any(_all_nulls()))
        values = _fixed_values(arr, self.bits)
        if arr.null_count:
            enc = _some_nulls(0, _flat(self.bits, 1))
            return EncodedPage(self.column, [_validity(arr), values], n, _any(enc))
        return EncodedPage(self.column, [values], n, _any(_no_nulls(_flat(self.bits, 0))))


class _FixedSizeListEncoder(_ColumnEncoder):
    def __init__(self, column: int, page_size: int, t: pa.DataType) -> None:
        super().__init__(column, page_size)
        self.dim = t.list_size
        self.bits = _bit_width(t.value_type)

    def encode(self, arr: pa.Array) -> EncodedPage:
        n = len(arr)
        if arr.null_count == n:
            return EncodedPage(self.column, [], n, _any(_all_nulls()))
        items = arr.values.slice(arr.offset * self.dim, n * self.dim)
        buffers: list = []
        if arr.null_count:
            buffers.append(_validity(arr))
        if items.null_count:
            buffers.append(_validity(items))
            item_enc = _some_nulls(len(buffers) - 1, _flat(self.bits, len(buffers)))
        else:
            item_enc = _no_nulls(_flat(self.bits, len(buffers)))
        buffers.append(_fixed_values(items, self.bits))
        fsl = pb.ArrayEncoding()
        fsl.fixed_size_list.dimension = self.dim
        fsl.fixed_size_list.items.CopyFrom(item_enc)
        enc = _some_nulls(0, fsl) if arr.null_count else _no_nulls(fsl)
        return EncodedPage(self.column, buffers, n, _any(enc))


class _BinaryEncoder(_ColumnEncoder):
    """string / binary (and large variants): plain or dictionary pages."""

    def encode(self, arr: pa.Array) -> EncodedPage:
        n = len(arr)
        if n >= DICT_MIN_ROWS or arr.null_count == n:
            page = self._try_dictionary(arr)
            if page is not None:
                return page
        ends, body, null_mask = _binary_parts(arr)
        total = int(ends[-1]) if len(ends) else 0
        enc, stored = _binary_encoding(ends, null_mask, total, 0)
        return EncodedPage(self.column, [stored, body], n, _any(enc))

    def _try_dictionary(self, arr: pa.Array) -> EncodedPage | None:
        n = len(arr)
        sample = arr.slice(0, _DICT_SAMPLE)
        if pc.count_distinct(sample).as_py() >= DICT_MAX_DISTINCT:
            return None
        denc = pc.dictionary_encode(arr)
        items = denc.dictionary
        if len(items) >= DICT_MAX_DISTINCT:
            return None
        if len(items) == 0:  # every value null: one empty item, every index 0
            items = pa.array(
                [""] if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) else [b""], arr.type
            )
        idx = denc.indices
        # index 0 is null, k is items[k-1]
        codes = pc.fill_null(pc.add(idx.cast(pa.uint8()), pa.scalar(1, pa.uint8())), pa.scalar(0, pa.uint8()))
        ends, body, _ = _binary_parts(items)
        total = int(ends[-1]) if len(ends) else 0
        item_enc, stored = _binary_encoding(ends, None, total, 1)
        e = pb.ArrayEncoding()
        e.dictionary.indices.CopyFrom(_no_nulls(_flat(8, 0)))
        e.dictionary.items.CopyFrom(item_enc)
        e.dictionary.num_dictionary_items = len(items)
        return EncodedPage(self.column, [_fixed_values(codes, 8), stored, body], n, _any(e))


class _DictionaryEncoder(_ColumnEncoder):
    """A dictionary field, as pylance writes it: every page a ``Dictionary``
    encoding of its own dictionary (the Arrow dictionary written, unused and
    repeated items kept) and 0-based indices as wide as the field's index
    type.  Indices carry no validity: a null row points at a null item (the
    dictionary's first, else one appended to the page's dictionary)."""

    def __init__(self, column: int, page_size: int, t: pa.DictionaryType, name: str) -> None:
        # small index types: one page a file, so pylance can join the pages' dictionaries
        super().__init__(column, sys.maxsize if ldict.one_page(t) else page_size)
        self.t = t
        self.name = name
        self.bits = t.index_type.bit_width

    def nbytes(self, arr: pa.Array) -> int:
        return ldict.index_bytes(arr)

    def flush(self) -> list[EncodedPage]:
        if not self._pending:
            return []
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        arr = pending[0] if len(pending) == 1 else ldict.concat(pending)
        return [self.encode(arr)] if len(arr) else []

    def encode(self, arr: pa.Array) -> EncodedPage:
        n = len(arr)
        t = self.t
        items = arr.dictionary
        indices = arr.indices
        codes = np.array(pc.fill_null(indices, 0).to_numpy(zero_copy_only=False), dtype=ldict.index_dtype(t))
        if indices.null_count:
            if items.null_count:  # the first null item
                null_item = int(np.argmax(~np.asarray(items.is_valid().to_numpy(zero_copy_only=False), dtype=bool)))
            else:
                null_item = len(items)
                if null_item > ldict.index_max(t):
                    raise UnsupportedTypeError(
                        f"field {self.name!r}: file format 2.0 stores a null of a dictionary column as an index "
                        f"to a null item, and the {len(items)} items of this {t} dictionary leave no "
                        f"{t.index_type} index for one; use a wider index type or file version 2.1 or later"
                    )
                items = pa.concat_arrays([items, pa.nulls(1, items.type)])
            mask = np.asarray(indices.is_null().to_numpy(zero_copy_only=False), dtype=bool)
            codes[mask] = null_item
        item_enc, item_buffers = _dictionary_items(items, 1)
        e = pb.ArrayEncoding()
        e.dictionary.indices.CopyFrom(_no_nulls(_flat(self.bits, 0)))
        e.dictionary.items.CopyFrom(item_enc)
        e.dictionary.num_dictionary_items = len(items)
        return EncodedPage(self.column, [codes.view(np.uint8)] + item_buffers, n, _any(e))


def _dictionary_items(items: pa.Array, first_buffer: int) -> tuple[pb.ArrayEncoding, list]:
    """The encoding and buffers of a dictionary's items: strings and binaries
    as ``binary`` (nulls marked by the offset adjustment), fixed-width values
    as ``nullable`` ``flat`` values."""
    t = items.type
    if _is_binary(t):
        ends, body, null_mask = _binary_parts(items)
        total = int(ends[-1]) if len(ends) else 0
        enc, stored = _binary_encoding(ends, null_mask, total, first_buffer)
        return enc, [stored, body]
    bits = _bit_width(t)
    items = _aligned(items)
    if items.buffers()[1] is None:  # no value buffer (e.g. only nulls): zero bytes
        items = pa.Array.from_buffers(
            t, len(items), [items.buffers()[0], pa.py_buffer(bytes((len(items) * bits + 7) // 8))]
        )
    values = _fixed_values(items, bits)
    if items.null_count:
        return _some_nulls(first_buffer, _flat(bits, first_buffer + 1)), [_validity(items), values]
    return _no_nulls(_flat(bits, first_buffer)), [values]


class _StructEncoder(_ColumnEncoder):
    """A struct column: one buffer-less page per batch of rows."""

    def __init__(self, column: int, page_size: int, name: str) -> None:
        super().__init__(column, page_size)
        self.name = name
        self._rows = 0

    def append(self, arr: pa.Array) -> list[EncodedPage]:
        if arr.null_count:
            raise UnsupportedTypeError(
                f"the struct field {self.name!r} contains {arr.null_count} null value(s), but Lance file "
                "version 2.0 does not encode struct validity; use file version 2.1 or later"
            )
        self._rows += len(arr)
        return []

    def flush(self) -> list[EncodedPage]:
        if not self._rows:
            return []
        e = pb.ArrayEncoding()
        e.struct.SetInParent()
        rows, self._rows = self._rows, 0
        return [EncodedPage(self.column, [], rows, _any(e))]


class _PackedStructEncoder(_ColumnEncoder):
    """A packed struct: every row's fixed-width fields back to back, one buffer."""

    def __init__(self, column: int, page_size: int, t: pa.DataType, name: str) -> None:
        super().__init__(column, page_size)
        self.widths = []
        for f in t:
            w = _bit_width(f.type) if not pa.types.is_boolean(f.type) else 1
            if w % 8 or pa.types.is_fixed_size_list(f.type):
                raise UnsupportedTypeError(
                    f"field {name!r}: a packed struct needs fields of whole-byte fixed width, not {f.name}: {f.type}"
                )
            self.widths.append(w)

    def encode(self, arr: pa.Array) -> EncodedPage:
        n = len(arr)
        if arr.null_count:
            raise UnsupportedTypeError("file format 2.0 cannot store null struct rows (use 2.1 or later)")
        cols = []
        for i, w in enumerate(self.widths):
            child = arr.field(i)
            if child.null_count:
                raise UnsupportedTypeError(
                    f"packed struct field {arr.type[i].name!r} holds nulls; packed fields store no validity"
                )
            cols.append(np.frombuffer(_fixed_values(child, w), np.uint8)[: n * (w // 8)].reshape(n, w // 8))
        rows = np.concatenate(cols, axis=1).reshape(-1) if n else np.zeros(0, np.uint8)
        enc = pb.ArrayEncoding()
        for w in self.widths:
            enc.packed_struct.inner.append(_no_nulls(_flat(w, 0)))
        enc.packed_struct.buffer.buffer_index = 0
        enc.packed_struct.buffer.SetInParent()
        return EncodedPage(self.column, [rows], n, _any(enc))


class _ListEncoder(_ColumnEncoder):
    """A list column: page-local u64 end offsets, nulls marked by ``+ adj``."""

    def nbytes(self, arr: pa.Array) -> int:
        return 8 * len(arr)

    def encode(self, arr: pa.Array) -> EncodedPage:
        n = len(arr)
        lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
        ends = np.cumsum(lengths, dtype=np.uint64)
        total = int(ends[-1]) if n else 0
        adj = total + 1
        if arr.null_count:
            null_mask = np.asarray(pc.is_null(arr).to_numpy(zero_copy_only=False), dtype=bool)
            ends[null_mask] += np.uint64(adj)
        e = pb.ArrayEncoding()
        e.list.offsets.CopyFrom(_no_nulls(_flat(64, 0)))
        e.list.null_offset_adjustment = adj
        e.list.num_items = total
        return EncodedPage(self.column, [ends], n, _any(e))


class FieldEncoder:
    """Encodes one top-level field (and its subtree) into 2.0 pages."""

    def __init__(self, field: LanceField, page_size: int, version: str = "2.0") -> None:
        self.field = field
        self._encoders: list[tuple[LanceField, _ColumnEncoder]] = []
        self._build(field, page_size)

    def _build(self, f: LanceField, page_size: int) -> None:
        col = len(self._encoders)
        t = f.arrow_type
        if f.is_packed_struct:
            self._encoders.append((f, _PackedStructEncoder(col, page_size, t, f.name)))
        elif f.is_struct:
            self._encoders.append((f, _StructEncoder(col, page_size, f.name)))
            for c in f.children:
                self._build(c, page_size)
        elif f.is_list:
            self._encoders.append((f, _ListEncoder(col, page_size)))
            self._build(f.children[0], page_size)
        elif pa.types.is_fixed_size_list(t):
            self._encoders.append((f, _FixedSizeListEncoder(col, page_size, t)))
        elif pa.types.is_dictionary(t):
            self._encoders.append((f, _DictionaryEncoder(col, page_size, t, f.name)))
        elif _is_binary(t):
            self._encoders.append((f, _BinaryEncoder(col, page_size)))
        elif pa.types.is_null(t):
            raise UnsupportedTypeError(f"field {f.name!r}: the null type cannot be written; give the column a type")
        else:
            _bit_width(t)
            self._encoders.append((f, _FixedEncoder(col, page_size, t)))

    def append(self, arr: pa.Array) -> list[EncodedPage]:
        pages: list[EncodedPage] = []
        self._feed(arr, 0, pages)
        return pages

    def _feed(self, arr: pa.Array, index: int, pages: list[EncodedPage]) -> int:
        """Feed ``arr`` to encoder ``index`` and its descendants; returns the next index."""
        f, enc = self._encoders[index]
        pages.extend(enc.append(arr))
        index += 1
        if f.is_struct and not f.is_packed_struct:
            for i in range(len(f.children)):
                index = self._feed(arr.field(i), index, pages)
        elif f.is_list:
            index = self._feed(arr.flatten(), index, pages)
        return index

    def finish(self) -> list[EncodedPage]:
        pages: list[EncodedPage] = []
        for _, enc in self._encoders:
            pages.extend(enc.flush())
        return pages
