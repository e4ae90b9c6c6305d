"""Reading one top-level field of a 2.1/2.2 data file.

A top-level field owns one column per leaf (struct and list parents have no
column).  For a row range each leaf column is read on its own - only the
pages that hold the rows, and inside a page only the mini-block chunks or the
full-zip bytes of those rows - giving the leaf values, the repetition levels
and the canonical definition levels.  The levels are unravelled into the
validity of every struct layer and the offsets and validity of every list
layer, and the Arrow array is assembled from the leaves up.

Modules of the reader:

* ``layout``      - validating PageLayout messages (unknown fields, layouts, enums);
* ``pages``       - mini-block, full-zip and all-null/constant pages;
* ``compressive`` - the compressive encodings (mini-block, block, per value);
* ``repdef``      - canonical definition levels and the vectorised unravelling;
* ``values``      - decoded blocks and their conversion to Arrow.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..container import PAGE_LAYOUT_URL, unpack_any
from ..errors import CorruptFileError, UnsupportedEncodingError
from ..protos import encodings21_pb2 as pb
from ..schema import LanceField
from .layout import parse_page_layout
from .pages import AllNullPage, FullZipPage, MiniBlockPage, Piece
from .repdef import ITEM, LIST, LayerOut, Structure, unravel
from .values import bitmap_from_bool, with_validity


class _Leaf:
    def __init__(self, field: LanceField, column: int, kinds: list[str]) -> None:
        self.field = field
        self.column = column
        self.st = Structure(kinds)
        self.type = field.arrow_type
        self.pages = None
        self.row_starts = None


def _leaves_with_kinds(field: LanceField, outer: list[str]):
    """(leaf, layer kinds inner to outer) for every leaf under ``field``."""
    if field.is_struct or field.is_list:
        kind = LIST if field.is_list else ITEM
        for c in field.children:
            yield from _leaves_with_kinds(c, [kind] + outer)
    else:
        yield field, [ITEM] + outer


_PACKED_KEYS = ("lance-encoding:packed", "packed")


def _is_packed(field: LanceField) -> bool:
    """Struct fields pylance stores as one packed column (opt-in field metadata)."""
    for k, v in (field.metadata or {}).items():
        k = k.decode() if isinstance(k, bytes) else k
        v = v.decode(errors="replace") if isinstance(v, bytes) else str(v)
        if k in _PACKED_KEYS and v.strip().lower() in ("true", "1", "yes"):
            return True
    return False


def _count_leaves(field: LanceField) -> int:
    return sum(1 for _ in field.leaves())


class FieldDecoder:
    """Decodes rows of one top-level field of a 2.1/2.2 file."""

    def __init__(self, field: LanceField, reader, first_column: int, version: str = "2.1") -> None:
        self.field = field
        self.reader = reader
        self.version = version
        self.path = getattr(reader, "path", None)
        for f in field.walk():
            if f.is_struct and _is_packed(f):
                raise UnsupportedEncodingError(
                    f"{self.path or 'data file'}: field {f.name!r} is a packed struct, which this reader does not support"
                )
        self.leaves = [
            _Leaf(leaf, first_column + i, kinds) for i, (leaf, kinds) in enumerate(_leaves_with_kinds(field, []))
        ]
        self._types: dict[int, pa.DataType] = {}

    # ------------------------------------------------------------------ pages

    def _load_pages(self, leaf: _Leaf) -> None:
        cm = self.reader.column(leaf.column)
        pages = []
        for i, page in enumerate(cm.pages):
            where = f"{self.path or 'data file'}: column {leaf.column} ({leaf.field.name!r}) page {i}"
            loc = page.encoding.WhichOneof("location")
            if loc != "direct":
                raise UnsupportedEncodingError(f"{where}: page encoding stored as {loc!r} is not supported")
            layout = unpack_any(page.encoding.direct.encoding, PAGE_LAYOUT_URL, pb.PageLayout, self.path)
            kind, msg = parse_page_layout(layout, where)
            if kind == "mini_block_layout":
                pages.append(MiniBlockPage(page, msg, leaf.st, leaf.type, where))
            elif kind == "full_zip_layout":
                pages.append(FullZipPage(page, msg, leaf.st, leaf.type, where))
            elif kind == "all_null_layout":
                pages.append(AllNullPage(page, msg, leaf.st, leaf.type, where))
            else:  # pragma: no cover - parse_page_layout rejects the rest
                raise UnsupportedEncodingError(f"{where}: page layout {kind} is not supported")
        lengths = np.asarray([p.num_rows for p in pages], dtype=np.int64)
        leaf.row_starts = np.concatenate(([0], np.cumsum(lengths)))
        total = int(leaf.row_starts[-1])
        if total != self.reader.num_rows:
            raise CorruptFileError(
                self.path, f"column {leaf.column} ({leaf.field.name!r}) holds {total} rows, the file {self.reader.num_rows}"
            )
        leaf.pages = pages

    def _read_leaf(self, leaf: _Leaf, start: int, stop: int) -> tuple[pa.Array, list[LayerOut]]:
        if leaf.pages is None:
            self._load_pages(leaf)
        rs = leaf.row_starts
        first = int(np.searchsorted(rs, start, side="right")) - 1
        sel = []
        i = first
        while i < len(leaf.pages) and rs[i] < stop:
            a = max(start, int(rs[i])) - int(rs[i])
            b = min(stop, int(rs[i + 1])) - int(rs[i])
            if b > a:
                sel.append((leaf.pages[i], a, b))
            i += 1
        io = self.reader.io
        # 1. metadata of pages not seen before, in one request
        todo = [p for p, _, _ in sel if not p.meta_loaded]
        if todo:
            ranges = [r for p in todo for r in p.meta_ranges()]
            got = io.read_ranges(ranges) if ranges else []
            k = 0
            for p in todo:
                n = len(p.meta_ranges())
                p.set_meta(got[k : k + n])
                k += n
        # 2. the bytes of the rows, in one request
        plans = [p.data_ranges(a, b) for p, a, b in sel]
        ranges = [r for plan in plans for r in plan]
        got = io.read_ranges(ranges) if ranges else []
        pieces: list[Piece] = []
        k = 0
        for (p, a, b), plan in zip(sel, plans):
            pieces.append(p.decode(a, b, got[k : k + len(plan)]))
            k += len(plan)
        return self._assemble_leaf(leaf, pieces, stop - start)

    def _assemble_leaf(self, leaf: _Leaf, pieces: list[Piece], num_rows: int):
        st = leaf.st
        if len(pieces) == 1:
            p = pieces[0]
            rep, defs, values = p.rep, p.defs, p.values
        else:
            rep = np.concatenate([p.rep for p in pieces]) if st.has_lists else None
            if all(p.defs is None for p in pieces):
                defs = None
            else:
                defs = np.concatenate(
                    [p.defs if p.defs is not None else np.zeros(p.num_levels, dtype=np.uint16) for p in pieces]
                )
            values = pa.concat_arrays([p.values for p in pieces])
        if sum(p.num_rows for p in pieces) != num_rows:
            raise CorruptFileError(self.path, f"column {leaf.column}: pages returned the wrong number of rows")
        if st.has_lists and rep is None:
            raise CorruptFileError(self.path, f"column {leaf.column}: list column without repetition levels")
        layers = unravel(st, rep, defs, num_rows)
        if layers[-1].length != num_rows:
            raise CorruptFileError(
                self.path, f"column {leaf.column}: levels describe {layers[-1].length} rows, {num_rows} expected"
            )
        if layers[0].length != len(values):
            raise CorruptFileError(
                self.path, f"column {leaf.column}: {len(values)} values for {layers[0].length} leaf slots"
            )
        return with_validity(values, layers[0].validity), layers

    # ------------------------------------------------------------------ assembly

    def _type(self, f: LanceField) -> pa.DataType:
        t = self._types.get(f.id)
        if t is None:
            t = self._types[f.id] = f.arrow_type
        return t

    def _build(self, f: LanceField, infos: list) -> pa.Array:
        arr, layers, idx = infos[0]
        if not (f.is_struct or f.is_list):
            if idx != 0:
                raise CorruptFileError(self.path, f"field {f.name!r}: rep/def layers do not match the schema")
            return arr
        lay = layers[idx]
        t = self._type(f)
        validity = None if lay.validity is None else bitmap_from_bool(lay.validity)
        if f.is_struct:
            children = []
            pos = 0
            for c in f.children:
                k = _count_leaves(c)
                child = self._build(c, [(a, ls, i - 1) for a, ls, i in infos[pos : pos + k]])
                if len(child) != lay.length:
                    raise CorruptFileError(self.path, f"struct {f.name!r}: child {c.name!r} has {len(child)} rows, expected {lay.length}")
                children.append(child)
                pos += k
            return pa.Array.from_buffers(t, lay.length, [validity], children=children)
        child = self._build(f.children[0], [(a, ls, i - 1) for a, ls, i in infos])
        offsets = lay.offsets
        if len(child) != int(offsets[-1]):
            raise CorruptFileError(self.path, f"list {f.name!r}: {len(child)} items, offsets end at {int(offsets[-1])}")
        if pa.types.is_large_list(t):
            obuf = pa.py_buffer(offsets.astype(np.int64, copy=False))
        else:
            if offsets.size and int(offsets[-1]) > 2**31 - 1:
                raise UnsupportedEncodingError(f"list {f.name!r}: more than 2**31 items in one read")
            obuf = pa.py_buffer(offsets.astype(np.int32))
        return pa.Array.from_buffers(t, lay.length, [validity, obuf], children=[child])

    def read_range(self, start: int, stop: int) -> pa.Array:
        """Rows ``[start, stop)`` of the field as an Array of ``field.arrow_type``."""
        t = self._type(self.field)
        if stop <= start:
            return pa.array([], type=t)
        results = [self._read_leaf(leaf, start, stop) for leaf in self.leaves]
        infos = [(arr, layers, len(layers) - 1) for arr, layers in results]
        out = self._build(self.field, infos)
        if len(out) != stop - start:
            raise CorruptFileError(self.path, f"field {self.field.name!r}: decoded {len(out)} rows, {stop - start} expected")
        return out
