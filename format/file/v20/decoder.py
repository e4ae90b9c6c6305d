"""Decoder for file format 2.0.

Every schema node has a column decoder with ``read_range(start, stop)``.  Only
the pages overlapping the range are fetched (one batched request per call);
flat values and validity bitmaps are wrapped as Arrow buffers without copying.
"""

from __future__ import annotations

import bisect

import numpy as np
import pyarrow as pa

from ...errors import CorruptFileError, UnsupportedEncodingError
from ...protos import encodings_pb2 as pb
from .. import blob as lblob
from .. import dictionary as ldict
from ..container import ARRAY_ENCODING_URL, ContainerReader, unpack_any
from ..schema import LanceField


def _bit_width_of(t: pa.DataType) -> int | None:
    try:
        return t.bit_width
    except ValueError:
        return None


def _offset_dtype(t: pa.DataType):
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t) or pa.types.is_large_list(t)
    return np.int64 if large else np.int32


class _Page:
    __slots__ = ("meta", "start", "encoding", "item_base")

    def __init__(self, meta, start: int, encoding: pb.ArrayEncoding) -> None:
        self.meta = meta
        self.start = start
        self.encoding = encoding
        self.item_base = 0


class _Column:
    """Pages of one column with their row starts."""

    def __init__(self, reader: ContainerReader, index: int) -> None:
        self.reader = reader
        self.index = index
        self.path = reader.path
        meta = reader.column(index)
        self.pages: list[_Page] = []
        start = 0
        for p in meta.pages:
            enc = unpack_any(p.encoding.direct.encoding, ARRAY_ENCODING_URL, pb.ArrayEncoding, self.path)
            self.pages.append(_Page(p, start, enc))
            start += p.length
        self.length = start
        self.starts = [p.start for p in self.pages]

    def overlapping(self, start: int, stop: int) -> list[_Page]:
        if start >= stop:
            return []
        i = max(0, bisect.bisect_right(self.starts, start) - 1)
        out = []
        while i < len(self.pages) and self.pages[i].start < stop:
            out.append(self.pages[i])
            i += 1
        return out

    def group_rows(self, rows: np.ndarray) -> tuple[list[_Page], list[np.ndarray]]:
        """The pages holding ``rows`` (sorted) and each page's share of them."""
        if rows.size == 0:
            return [], []
        if int(rows[0]) < 0 or int(rows[-1]) >= self.length:
            raise CorruptFileError(
                self.path,
                f"column {self.index}: rows [{int(rows[0])}, {int(rows[-1])}] asked of its {self.length} rows",
            )
        which = np.searchsorted(np.asarray(self.starts, dtype=np.int64), rows, side="right") - 1
        cuts = np.flatnonzero(np.diff(which)) + 1
        firsts = np.concatenate(([0], cuts)).tolist()
        return [self.pages[int(which[i])] for i in firsts], np.split(rows, cuts)

    def check_rows(self, rows: int, what: str) -> None:
        if self.length != rows:
            raise CorruptFileError(self.path, f"column {self.index} ({what}) has {self.length} rows, expected {rows}")


class _PageDecoder:
    """Decodes one page's ArrayEncoding tree into an Arrow array."""

    def __init__(self, path: str | None, buffers: list[pa.Buffer]) -> None:
        self.path = path
        self.buffers = buffers

    def buffer(self, ref: pb.Buffer) -> pa.Buffer:
        if ref.buffer_type != pb.Buffer.page:
            raise UnsupportedEncodingError(
                f"{self.path}: {pb.Buffer.BufferType.Name(ref.buffer_type)} buffers are not supported in 2.0 pages"
            )
        if ref.buffer_index >= len(self.buffers):
            raise CorruptFileError(self.path, f"page refers to buffer {ref.buffer_index} but has {len(self.buffers)}")
        return self.buffers[ref.buffer_index]

    def flat(self, enc: pb.ArrayEncoding, length: int, t: pa.DataType, validity: pa.Buffer | None) -> pa.Array:
        if enc.WhichOneof("array_encoding") != "flat":
            raise UnsupportedEncodingError(
                f"{self.path}: 2.0 values encoding {enc.WhichOneof('array_encoding')!r} is not supported for {t}"
            )
        flat = enc.flat
        if flat.HasField("compression") and flat.compression.scheme:
            raise UnsupportedEncodingError(
                f"{self.path}: 2.0 flat buffer compression {flat.compression.scheme!r} is not supported"
            )
        bits = flat.bits_per_value
        expected = 1 if pa.types.is_boolean(t) else _bit_width_of(t)
        if expected is None or pa.types.is_nested(t):
            raise CorruptFileError(
                self.path, f"flat encoding of {bits}-bit values stored for {t}, which is not fixed-width"
            )
        if bits != expected:
            raise CorruptFileError(self.path, f"flat encoding has {bits} bits per value, type {t} needs {expected}")
        buf = self.buffer(flat.buffer)
        need = (length * bits + 7) // 8
        if buf.size < need:
            raise CorruptFileError(self.path, f"flat buffer holds {buf.size} bytes, {length} values need {need}")
        return pa.Array.from_buffers(t, length, [validity, buf])

    def nullable_values(
        self, enc: pb.ArrayEncoding, length: int, t: pa.DataType
    ) -> tuple[pa.Buffer | None, pb.ArrayEncoding | None]:
        """(validity, inner values encoding); inner is None when all values are null."""
        kind = enc.WhichOneof("array_encoding")
        if kind != "nullable":
            return None, enc
        which = enc.nullable.WhichOneof("nullability")
        if which == "no_nulls":
            return None, enc.nullable.no_nulls.values
        if which == "some_nulls":
            v = enc.nullable.some_nulls.validity
            validity = self.flat(v, length, pa.bool_(), None).buffers()[1]
            return validity, enc.nullable.some_nulls.values
        if which == "all_nulls":
            return None, None
        raise UnsupportedEncodingError(f"{self.path}: nullable encoding without a case")

    def decode(self, enc: pb.ArrayEncoding, length: int, t: pa.DataType) -> pa.Array:
        if pa.types.is_dictionary(t):
            return self.dictionary_field(enc, length, t)
        kind = enc.WhichOneof("array_encoding")
        if kind == "binary":
            return self.binary(enc.binary, length, t)
        if kind == "packed_struct":
            return self.packed_struct(enc.packed_struct, length, t)
        if kind == "dictionary":
            return self.dictionary(enc.dictionary, length, t)
        validity, inner = self.nullable_values(enc, length, t)
        if inner is None:
            return pa.nulls(length, t)
        ikind = inner.WhichOneof("array_encoding")
        if ikind == "fixed_size_list":
            fsl = inner.fixed_size_list
            if not pa.types.is_fixed_size_list(t) or fsl.dimension != t.list_size:
                raise CorruptFileError(self.path, f"fixed_size_list of dimension {fsl.dimension} stored for {t}")
            items = self.decode(fsl.items, length * fsl.dimension, t.value_type)
            return pa.Array.from_buffers(t, length, [validity], children=[items])
        if ikind == "flat":
            return self.flat(inner, length, t, validity)
        if ikind in ("binary", "dictionary"):
            arr = self.decode(inner, length, t)
            if validity is None:
                return arr
            return pa.Array.from_buffers(t, length, [validity] + arr.buffers()[1:])
        raise UnsupportedEncodingError(f"{self.path}: 2.0 encoding {ikind!r} is not supported (type {t})")

    def packed_struct(self, enc: pb.PackedStruct, length: int, t: pa.DataType) -> pa.Array:
        """Rows of fixed-width fields back to back in one buffer (``inner``
        gives each field's flat width)."""
        if not pa.types.is_struct(t) or t.num_fields != len(enc.inner):
            raise CorruptFileError(self.path, f"packed struct of {len(enc.inner)} fields stored for {t}")
        widths = []
        for f, inner in zip(t, enc.inner):
            validity, values = self.nullable_values(inner, length, f.type)
            if validity is not None or values is None or values.WhichOneof("array_encoding") != "flat":
                raise UnsupportedEncodingError(
                    f"{self.path}: packed struct field {f.name!r} is not plain fixed-width values"
                )
            bits = values.flat.bits_per_value
            if bits % 8 or bits <= 0 or bits != _bit_width_of(f.type):
                raise UnsupportedEncodingError(f"{self.path}: packed struct field {f.name!r} of {bits} bits ({f.type})")
            widths.append(bits // 8)
        row = sum(widths)
        buf = self.buffer(enc.buffer)
        if buf.size < row * length:
            raise CorruptFileError(
                self.path, f"packed struct buffer holds {buf.size} bytes, {length} rows need {row * length}"
            )
        rows = np.frombuffer(buf, np.uint8, count=row * length).reshape(length, row)
        kids, pos = [], 0
        for f, w in zip(t, widths):
            col = np.ascontiguousarray(rows[:, pos : pos + w]).reshape(-1)
            kids.append(pa.Array.from_buffers(f.type, length, [None, pa.py_buffer(col)]))
            pos += w
        return pa.StructArray.from_arrays(kids, fields=list(t))

    def end_offsets(self, enc: pb.ArrayEncoding, length: int) -> np.ndarray:
        validity, inner = self.nullable_values(enc, length, pa.uint64())
        if inner is None or validity is not None:
            raise UnsupportedEncodingError(f"{self.path}: offsets with their own nulls are not supported")
        arr = self.flat(inner, length, pa.uint64(), None)
        return np.frombuffer(arr.buffers()[1], dtype=np.uint64, count=length)

    def _check_binary(self, t: pa.DataType) -> None:
        if not (
            pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t)
        ):
            raise CorruptFileError(self.path, f"binary (variable-width) encoding stored for {t}")

    def binary(self, enc: pb.Binary, length: int, t: pa.DataType) -> pa.Array:
        self._check_binary(t)
        stored = self.end_offsets(enc.indices, length)
        return _binary_from_ends(stored, enc.null_adjustment, self.decode_bytes(enc.bytes), t, self.path)

    def decode_bytes(self, enc: pb.ArrayEncoding) -> pa.Buffer:
        if enc.WhichOneof("array_encoding") != "flat" or enc.flat.bits_per_value != 8:
            raise UnsupportedEncodingError(f"{self.path}: binary bytes encoded as {enc.WhichOneof('array_encoding')!r}")
        if enc.flat.HasField("compression") and enc.flat.compression.scheme:
            raise UnsupportedEncodingError(
                f"{self.path}: 2.0 flat buffer compression {enc.flat.compression.scheme!r} is not supported"
            )
        return self.buffer(enc.flat.buffer)

    def _bits(self, bitmap: pa.Buffer, length: int) -> np.ndarray:
        return np.unpackbits(np.frombuffer(bitmap, np.uint8), bitorder="little", count=length).astype(bool)

    def dictionary_field(self, enc: pb.ArrayEncoding, length: int, t: pa.DictionaryType) -> pa.Array:
        """A page of a dictionary field.  pylance writes its ``Dictionary``
        encoding with the page's dictionary as the items (a null row points
        at a null item) and 0-based indices as wide as the field's; any other
        encoding holds plain values, dictionary-encoded here.  The result holds
        its nulls in the indices, never in the dictionary."""
        validity, inner = self.nullable_values(enc, length, t)
        if inner is not None and inner.WhichOneof("array_encoding") != "dictionary":
            return ldict.as_dictionary(self.decode(enc, length, t.value_type), t, self.path)
        if inner is None:
            return pa.nulls(length, t)
        d = inner.dictionary
        n_items = d.num_dictionary_items
        items = self.decode(d.items, n_items, t.value_type)
        if len(items) != n_items:
            raise CorruptFileError(self.path, f"dictionary of {n_items} items decoded {len(items)}")
        ivalid, indices = self.nullable_values(d.indices, length, pa.uint64())
        if indices is None:
            return pa.nulls(length, t)
        if indices.WhichOneof("array_encoding") != "flat":
            raise UnsupportedEncodingError(
                f"{self.path}: dictionary indices encoded as {indices.WhichOneof('array_encoding')!r}"
            )
        bits = indices.flat.bits_per_value
        itype = {8: pa.uint8(), 16: pa.uint16(), 32: pa.uint32(), 64: pa.uint64()}.get(bits)
        if itype is None:
            raise UnsupportedEncodingError(f"{self.path}: {bits}-bit dictionary indices")
        codes = np.frombuffer(self.flat(indices, length, itype, None).buffers()[1], f"<u{bits // 8}", count=length)
        valid = np.ones(length, dtype=bool)
        for bitmap in (validity, ivalid):
            if bitmap is not None:
                valid &= self._bits(bitmap, length)
        in_range = codes < n_items
        if not in_range.all():
            if np.any(valid & ~in_range):
                raise CorruptFileError(
                    self.path, f"dictionary index {int(codes[valid & ~in_range].max())} exceeds {n_items} items"
                )
            codes = np.where(in_range, codes, 0)
        arr = ldict.from_indices(codes, items, t, valid, self.path)
        # a row pointing at a null item is a null row, and the null items leave the
        # dictionary: pylance hands them out (which pandas refuses as categories);
        # its 2.1/2.2 pages hold none
        return ldict.normalize_nulls(arr)

    def dictionary(self, enc: pb.Dictionary, length: int, t: pa.DataType) -> pa.Array:
        n_items = enc.num_dictionary_items
        items = self.decode(enc.items, n_items, t)
        validity, inner = self.nullable_values(enc.indices, length, pa.uint8())
        if inner is None or inner.WhichOneof("array_encoding") != "flat":
            raise UnsupportedEncodingError(f"{self.path}: dictionary indices encoding not supported")
        bits = inner.flat.bits_per_value
        itype = {8: pa.uint8(), 16: pa.uint16(), 32: pa.uint32(), 64: pa.uint64()}.get(bits)
        if itype is None:
            raise UnsupportedEncodingError(f"{self.path}: {bits}-bit dictionary indices")
        codes = self.flat(inner, length, itype, None).to_numpy(zero_copy_only=False).astype(np.int64)
        if codes.size and codes.max() > n_items:
            raise CorruptFileError(self.path, f"dictionary index {codes.max()} exceeds {n_items} items")
        mask = codes == 0
        if validity is not None:
            mask |= ~np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little", count=length).astype(bool)
        return items.take(pa.array(codes - 1, mask=mask))


class _RowPicker(_PageDecoder):
    """Decodes only some rows of a page (sorted, distinct), indexing straight
    into the page buffers instead of converting the whole page."""

    def pick(self, enc: pb.ArrayEncoding, length: int, t: pa.DataType, rows: np.ndarray) -> pa.Array:
        kind = enc.WhichOneof("array_encoding")
        if pa.types.is_dictionary(t):
            return self.decode(enc, length, t).take(pa.array(rows))
        if kind == "binary":
            return self.pick_binary(enc.binary, length, t, rows, None)
        if kind == "dictionary":
            return self.decode(enc, length, t).take(pa.array(rows))
        validity, inner = self.nullable_values(enc, length, t)
        valid = None
        if validity is not None:
            bits = np.frombuffer(validity, np.uint8)
            valid = ((bits[rows >> 3] >> (rows & 7).astype(np.uint8)) & 1).astype(bool)
        if inner is None:
            return pa.nulls(rows.size, t)
        ikind = inner.WhichOneof("array_encoding")
        if ikind == "flat":
            return self.pick_flat(inner, length, t, rows, valid)
        if ikind == "binary":
            return self.pick_binary(inner.binary, length, t, rows, valid)
        return _with_valid(self.decode(inner, length, t).take(pa.array(rows)), valid)

    def pick_flat(self, enc, length, t, rows, valid) -> pa.Array:
        arr = self.flat(enc, length, t, None)  # validates; zero-copy
        bits = enc.flat.bits_per_value
        data = np.frombuffer(arr.buffers()[1], np.uint8)
        if bits == 1:
            picked = ((data[rows >> 3] >> (rows & 7).astype(np.uint8)) & 1).astype(bool)
            out = pa.Array.from_buffers(t, rows.size, [None, pa.py_buffer(np.packbits(picked, bitorder="little"))])
        elif bits % 8 == 0:
            width = bits // 8
            picked = data[: length * width].reshape(length, width)[rows]
            out = pa.Array.from_buffers(t, rows.size, [None, pa.py_buffer(np.ascontiguousarray(picked))])
        else:  # pragma: no cover - flat() only accepts the type's width
            return _with_valid(arr.take(pa.array(rows)), valid)
        return _with_valid(out, valid)

    def pick_binary(self, enc: pb.Binary, length, t, rows, valid) -> pa.Array:
        self._check_binary(t)
        stored = self.end_offsets(enc.indices, length)
        data = self.decode_bytes(enc.bytes)
        adj = enc.null_adjustment
        ends = stored[rows].astype(np.uint64)
        prev = np.where(rows > 0, stored[np.maximum(rows - 1, 0)], 0).astype(np.uint64)
        null = ends >= np.uint64(adj) if adj else np.zeros(rows.size, bool)
        if adj:
            ends = np.where(null, ends - np.uint64(adj), ends)
            prev = np.where(prev >= np.uint64(adj), prev - np.uint64(adj), prev)
        ends, prev = ends.astype(np.int64), prev.astype(np.int64)
        lens = ends - prev
        if np.any(lens < 0) or (rows.size and (int(ends.max()) > data.size or int(prev.min()) < 0)):
            raise CorruptFileError(self.path, f"string offsets are not increasing or exceed the {data.size} data bytes")
        raw = np.frombuffer(data, np.uint8)
        total = int(lens.sum())
        if total > data.size:  # distinct rows of a valid page never overlap
            raise CorruptFileError(
                self.path, f"string offsets of {rows.size} rows span {total} bytes, the page holds {data.size}"
            )
        first = np.cumsum(lens) - lens
        src = np.arange(total, dtype=np.int64) + np.repeat(prev - first, lens)
        values = raw[src]
        odt = _offset_dtype(t)
        offsets = np.zeros(rows.size + 1, dtype=odt)
        np.cumsum(lens, out=offsets[1:])
        if null.any():
            valid = ~null if valid is None else (valid & ~null)
        return _with_valid(
            pa.Array.from_buffers(t, rows.size, [None, pa.py_buffer(offsets), pa.py_buffer(values)]), valid
        )


def _with_valid(arr: pa.Array, valid: np.ndarray | None) -> pa.Array:
    """``arr`` with the extra validity ``valid`` (bool per row) applied."""
    if valid is None or valid.all():
        return arr
    if arr.null_count:
        valid = valid & arr.is_valid().to_numpy(zero_copy_only=False)
    if arr.offset:
        arr = pa.concat_arrays([arr])  # a copy starting at offset 0
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    if pa.types.is_fixed_size_list(arr.type):
        return pa.Array.from_buffers(arr.type, len(arr), [bitmap], children=[arr.values])
    return pa.Array.from_buffers(arr.type, len(arr), [bitmap] + arr.buffers()[1:])


def _binary_from_ends(stored: np.ndarray, adj: int, data: pa.Buffer, t: pa.DataType, path) -> pa.Array:
    """Build a string/binary array from u64 end offsets using Lance's null trick."""
    length = len(stored)
    null = stored >= np.uint64(adj) if adj else np.zeros(length, bool)
    if null.any():
        ends = np.where(null, stored - np.uint64(adj), stored)
        validity = pa.py_buffer(np.packbits(~null, bitorder="little"))
        nulls = int(null.sum())
    else:
        ends, validity, nulls = stored, None, 0
    odt = _offset_dtype(t)
    offsets = np.empty(length + 1, dtype=odt)
    offsets[0] = 0
    offsets[1:] = ends
    if length and (np.any(offsets[1:] < offsets[:-1]) or int(offsets[-1]) > data.size):
        raise CorruptFileError(path, f"string offsets are not increasing or exceed the {data.size} data bytes")
    return pa.Array.from_buffers(t, length, [validity, pa.py_buffer(offsets), data], null_count=nulls)


def _concat(pieces: list[pa.Array], t: pa.DataType) -> pa.Array:
    if len(pieces) == 1:
        return pieces[0]
    if not pieces:
        return pa.array([], t)
    if pa.types.is_dictionary(t):
        return ldict.concat(pieces)
    return pa.concat_arrays(pieces)


class _LeafDecoder:
    def __init__(self, field: LanceField, reader: ContainerReader, column: int) -> None:
        self.type = field.arrow_type
        self.col = _Column(reader, column)
        self.reader = reader

    def read_chunks(self, start: int, stop: int) -> list[pa.Array]:
        """Rows ``[start, stop)`` as one array per page."""
        pages = self.col.overlapping(start, stop)
        buffers = self.reader.page_buffers([p.meta for p in pages])
        pieces = []
        for page, bufs in zip(pages, buffers):
            arr = _PageDecoder(self.col.path, bufs).decode(page.encoding, page.meta.length, self.type)
            if len(arr) != page.meta.length:
                raise CorruptFileError(
                    self.col.path,
                    f"column {self.col.index}: a page of {page.meta.length} rows decoded {len(arr)} values",
                )
            lo = max(start - page.start, 0)
            hi = min(stop - page.start, page.meta.length)
            pieces.append(arr.slice(lo, hi - lo) if (lo, hi) != (0, page.meta.length) else arr)
        return pieces or [pa.array([], self.type)]

    def read_range(self, start: int, stop: int) -> pa.Array:
        return _concat(self.read_chunks(start, stop), self.type)

    def take(self, rows: np.ndarray) -> pa.Array:
        pages, groups = self.col.group_rows(rows)
        buffers = self.reader.page_buffers([p.meta for p in pages])
        pieces = [
            _RowPicker(self.col.path, bufs).pick(page.encoding, page.meta.length, self.type, r - page.start)
            for page, r, bufs in zip(pages, groups, buffers)
        ]
        return _concat(pieces, self.type)


class _BlobLeafDecoder(_LeafDecoder):
    """A blob column: its pages hold ``(position, size)`` descriptions (a
    packed struct of two u64), its bytes lie elsewhere in the file
    (:mod:`..blob`); read as the bytes, or as the descriptions."""

    def __init__(self, field: LanceField, reader: ContainerReader, column: int) -> None:
        super().__init__(field, reader, column)
        self.type = lblob.V1_DESCRIPTION
        self.name = field.name

    def _bytes(self, desc: pa.Array) -> pa.Array:
        refs = lblob.refs_v1(desc, "2.0", self.col.path, self.name)
        return lblob.read_values(refs, self.reader.io, None, self.col.path, self.name)

    def read_chunks(self, start: int, stop: int) -> list[pa.Array]:
        return [self._bytes(d) for d in super().read_chunks(start, stop)]

    def read_range(self, start: int, stop: int) -> pa.Array:
        return _concat(self.read_chunks(start, stop), pa.large_binary())

    def take(self, rows: np.ndarray, blob_descriptions: bool = False) -> pa.Array:
        pages, groups = self.col.group_rows(rows)
        buffers = self.reader.page_buffers([p.meta for p in pages])
        pieces = [
            _PageDecoder(self.col.path, bufs)
            .decode(page.encoding, page.meta.length, self.type)
            .take(pa.array(r - page.start))
            for page, r, bufs in zip(pages, groups, buffers)
        ]
        desc = _concat(pieces, self.type)
        return desc if blob_descriptions else self._bytes(desc)


class _StructDecoder:
    def __init__(self, field: LanceField, reader: ContainerReader, column: int, children: list) -> None:
        self.type = field.arrow_type
        self.children = children
        self.col = _Column(reader, column)
        for p in self.col.pages:
            if p.encoding.WhichOneof("array_encoding") != "struct":
                raise UnsupportedEncodingError(
                    f"{reader.path}: struct column page encoded as {p.encoding.WhichOneof('array_encoding')!r}"
                )

    def read_range(self, start: int, stop: int) -> pa.Array:
        kids = self._check([c.read_range(start, stop) for c in self.children], stop - start)
        return pa.StructArray.from_arrays(kids, fields=list(self.type)) if kids else pa.nulls(stop - start, self.type)

    def take(self, rows: np.ndarray) -> pa.Array:
        kids = self._check([c.take(rows) for c in self.children], rows.size)
        return pa.StructArray.from_arrays(kids, fields=list(self.type)) if kids else pa.nulls(rows.size, self.type)

    def _check(self, kids: list, n: int) -> list:
        for f, k in zip(self.type, kids):
            if len(k) != n:
                raise CorruptFileError(self.col.path, f"struct child {f.name!r} decoded {len(k)} rows, expected {n}")
        return kids


class _ListDecoder:
    def __init__(self, field: LanceField, reader: ContainerReader, column: int, child) -> None:
        self.type = field.arrow_type
        self.child = child
        self.reader = reader
        self.col = _Column(reader, column)
        base = 0
        for p in self.col.pages:
            if p.encoding.WhichOneof("array_encoding") != "list":
                raise UnsupportedEncodingError(
                    f"{reader.path}: list column page encoded as {p.encoding.WhichOneof('array_encoding')!r}"
                )
            p.item_base = base
            base += p.encoding.list.num_items
        self.num_items = base

    def take(self, rows: np.ndarray) -> pa.Array:
        return _list_take(self, rows)

    def read_range(self, start: int, stop: int) -> pa.Array:
        n = stop - start
        pages = self.col.overlapping(start, stop)
        buffers = self.reader.page_buffers([p.meta for p in pages])
        ends_parts, null_parts = [], []
        first_item = None
        for page, bufs in zip(pages, buffers):
            enc = page.encoding.list
            stored = _PageDecoder(self.col.path, bufs).end_offsets(enc.offsets, page.meta.length)
            adj = enc.null_offset_adjustment
            null = stored >= np.uint64(adj) if adj else np.zeros(len(stored), bool)
            ends = np.where(null, stored - np.uint64(adj), stored).astype(np.int64) + page.item_base
            lo = max(start - page.start, 0)
            hi = min(stop - page.start, page.meta.length)
            if first_item is None:
                first_item = page.item_base if lo == 0 else int(ends[lo - 1])
            ends_parts.append(ends[lo:hi])
            null_parts.append(null[lo:hi])
        if first_item is None:
            first_item = 0
        ends = np.concatenate(ends_parts) if ends_parts else np.zeros(0, np.int64)
        null = np.concatenate(null_parts) if null_parts else np.zeros(0, bool)
        last_item = int(ends[-1]) if n else first_item
        if not 0 <= first_item <= last_item <= self.num_items:
            raise CorruptFileError(
                self.col.path,
                f"list items [{first_item}, {last_item}) outside the {self.num_items} items of the column",
            )
        items = self.child.read_range(first_item, last_item)
        if len(items) != last_item - first_item:
            raise CorruptFileError(
                self.col.path, f"list item column returned {len(items)} items, expected {last_item - first_item}"
            )
        odt = _offset_dtype(self.type)
        offsets = np.empty(n + 1, dtype=odt)
        offsets[0] = 0
        offsets[1:] = ends - first_item
        if n and np.any(offsets[1:] < offsets[:-1]):
            raise CorruptFileError(self.col.path, "list offsets are not increasing")
        validity = pa.py_buffer(np.packbits(~null, bitorder="little")) if null.any() else None
        return pa.Array.from_buffers(
            self.type, n, [validity, pa.py_buffer(offsets)], children=[items], null_count=int(null.sum())
        )


def _list_take(dec: _ListDecoder, rows: np.ndarray) -> pa.Array:
    """Rows of a list column: their item ranges, then the child's items."""
    pages, groups = dec.col.group_rows(rows)
    buffers = dec.reader.page_buffers([p.meta for p in pages])
    starts_parts, ends_parts, null_parts = [], [], []
    for page, r, bufs in zip(pages, groups, buffers):
        enc = page.encoding.list
        stored = _PageDecoder(dec.col.path, bufs).end_offsets(enc.offsets, page.meta.length)
        adj = enc.null_offset_adjustment
        rel = r - page.start
        e = stored[rel]
        p = np.where(rel > 0, stored[np.maximum(rel - 1, 0)], 0)
        null = e >= np.uint64(adj) if adj else np.zeros(rel.size, bool)
        if adj:
            e = np.where(null, e - np.uint64(adj), e)
            p = np.where(p >= np.uint64(adj), p - np.uint64(adj), p)
        starts_parts.append(p.astype(np.int64) + page.item_base)
        ends_parts.append(e.astype(np.int64) + page.item_base)
        null_parts.append(null)
    s, e = np.concatenate(starts_parts), np.concatenate(ends_parts)
    null = np.concatenate(null_parts)
    lens = e - s
    if np.any(lens < 0):
        raise CorruptFileError(dec.col.path, "list offsets are not increasing")
    if s.size and (int(s.min()) < 0 or int(e.max()) > dec.num_items):
        raise CorruptFileError(
            dec.col.path, f"list items [{int(s.min())}, {int(e.max())}) outside the {dec.num_items} items of the column"
        )
    first = np.cumsum(lens) - lens
    items_idx = np.arange(int(lens.sum()), dtype=np.int64) + np.repeat(s - first, lens)
    items = dec.child.take(items_idx) if items_idx.size else dec.child.read_range(0, 0)
    odt = _offset_dtype(dec.type)
    offsets = np.zeros(rows.size + 1, dtype=odt)
    np.cumsum(lens, out=offsets[1:])
    validity = pa.py_buffer(np.packbits(~null, bitorder="little")) if null.any() else None
    return pa.Array.from_buffers(
        dec.type, rows.size, [validity, pa.py_buffer(offsets)], children=[items], null_count=int(null.sum())
    )


def _check_lengths(dec, rows: int, what: str) -> None:
    """Every column of a field holds the rows its parent says: the file's
    rows at the top, the struct's rows for its children, the list's items
    for its item column (a corrupt page length is found before any read)."""
    dec.col.check_rows(rows, what)
    if isinstance(dec, _StructDecoder):
        for f, c in zip(dec.type, dec.children):
            _check_lengths(c, rows, f"{what}.{f.name}")
    elif isinstance(dec, _ListDecoder):
        _check_lengths(dec.child, dec.num_items, f"{what} items")


class FieldDecoder:
    """Reads rows of one top-level field from a 2.0 file."""

    def __init__(self, field: LanceField, reader: ContainerReader, first_column: int, version: str = "2.0") -> None:
        self.field = field
        self._next = first_column
        self._root = self._build(field, reader)
        _check_lengths(self._root, reader.num_rows, field.name)

    def _build(self, f: LanceField, reader: ContainerReader):
        col = self._next  # pre-order: a parent's column comes before its children's
        self._next += 1
        if f.blob is not None:
            if f is not self.field or f.blob != "v1":
                raise UnsupportedEncodingError(
                    f"{reader.path}: blob column {f.name!r}: only top-level blob columns of the 2.0 layout are read"
                )
            return _BlobLeafDecoder(f, reader, col)
        if f.is_packed_struct:  # one column of packed rows
            return _LeafDecoder(f, reader, col)
        if f.is_struct:
            return _StructDecoder(f, reader, col, [self._build(c, reader) for c in f.children])
        if f.is_list:
            return _ListDecoder(f, reader, col, self._build(f.children[0], reader))
        return _LeafDecoder(f, reader, col)

    def read_range(self, start: int, stop: int) -> pa.Array:
        return self._root.read_range(start, stop)

    def take(self, rows, blob_descriptions: bool = False) -> pa.Array:
        """The rows ``rows`` (sorted, distinct): the pages holding them are
        fetched in one request and only those rows are decoded
        (``blob_descriptions``: a blob column's descriptions, not its bytes)."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size == 0:
            return self._root.read_range(0, 0)
        if blob_descriptions and isinstance(self._root, _BlobLeafDecoder):
            return self._root.take(rows, blob_descriptions=True)
        return self._root.take(rows)

    def read_chunks(self, start: int, stop: int) -> list[pa.Array]:
        """Rows ``[start, stop)`` as arrays to be read back to back (one per
        page for a leaf field, sparing the copy that joins them)."""
        if isinstance(self._root, _LeafDecoder):
            return self._root.read_chunks(start, stop)
        return [self._root.read_range(start, stop)]
