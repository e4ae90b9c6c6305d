"""Reading one top-level field of a 2.1/2.2 data file.

A top-level field owns one column per leaf (struct and list parents have no
column).  For a row range each leaf column is read on its own - only the
pages that hold the rows, and inside a page only the mini-block chunks or the
full-zip bytes of those rows - giving the leaf values, the repetition levels
and the canonical definition levels.  The levels are unravelled into the
validity of every struct layer and the offsets and validity of every list
layer, and the Arrow array is assembled from the leaves up.

Pages are decoded independently: a read of many rows decodes its pages on a
small thread pool (numpy and Arrow release the GIL).  ``take`` plans every
page holding a wanted row, fetches all their byte ranges in one request and
decodes only the mini-block chunks (or full-zip rows) holding them.

Modules of the reader:

* ``layout``      - validating PageLayout messages (unknown fields, layouts, enums);
* ``pages``       - mini-block, full-zip and all-null/constant pages;
* ``compressive`` - the compressive encodings (mini-block, block, per value);
* ``repdef``      - canonical definition levels and the vectorised unravelling;
* ``values``      - decoded blocks and their conversion to Arrow.
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from ....errors import CorruptFileError, UnsupportedEncodingError
from ....protos import encodings21_pb2 as pb
from ... import blob as lblob
from ... import dictionary as ldict
from ...container import PAGE_LAYOUT_URL, unpack_any
from ...schema import LanceField, arrow_type_of
from .blob import BlobPage
from .constant import AllNullPage
from .fullzip import FullZipPage
from .layout import parse_page_layout
from .miniblock import MiniBlockPage
from .page import PageBase, Piece, joined_buffers
from .repdef import ITEM, LIST, LayerOut, Structure, unravel
from .values import bitmap_from_bool, with_validity

#: layer structures by their kinds: a handful per process, shared by every
#: decoder (a Structure is never changed once built)
_STRUCTURES: dict[tuple[str, ...], Structure] = {}


def _structure(kinds: list[str]) -> Structure:
    key = tuple(kinds)
    st = _STRUCTURES.get(key)
    if st is None:
        st = _STRUCTURES[key] = Structure(kinds)
    return st


class _Leaf:
    def __init__(self, field: LanceField, column: int, kinds: list[str]) -> None:
        self.field = field
        self.column = column
        self.st = _structure(kinds)
        #: "v1" / "v2" for a blob column (its pages hold descriptions: :mod:`...blob`)
        self.blob = field.blob
        #: the type of the values in the pages (a dictionary leaf's value type)
        self.type = field.storage_type
        if self.blob == "v1":
            self.type = lblob.V1_DESCRIPTION
        elif self.blob == "v2":
            self.type = arrow_type_of("struct", field.children)
        #: the type the leaf is read as (its dictionary type for a dictionary leaf)
        self.out_type = field.arrow_type
        self.pages: list[PageBase] | None = None
        #: first row of each page, then the row count (set with ``pages``)
        self.row_starts: np.ndarray | None = None

    def fresh(self) -> _Leaf:
        """A leaf like this one, for another file (no pages loaded)."""
        leaf = _Leaf.__new__(_Leaf)
        leaf.__dict__.update(self.__dict__)
        leaf.pages = leaf.row_starts = None
        return leaf


#: a top-level field's leaves as first built, by (id(field), first column), the
#: field held in the value: files of one schema share their field objects (the
#: process's parsed schemas), so each file's leaves are copies, not rebuilt
_LEAF_PROTOS: dict[tuple[int, int], tuple[LanceField, tuple[_Leaf, ...]]] = {}
_LEAF_PROTOS_MAX = 4096


def _new_leaves(field: LanceField, first_column: int) -> tuple[_Leaf, ...]:
    key = (id(field), first_column)
    hit = _LEAF_PROTOS.get(key)
    if hit is None or hit[0] is not field:
        protos = tuple(
            _Leaf(leaf, first_column + i, kinds) for i, (leaf, kinds) in enumerate(_leaves_with_kinds(field, []))
        )
        hit = (field, protos)
        if len(_LEAF_PROTOS) >= _LEAF_PROTOS_MAX:
            _LEAF_PROTOS.clear()
        _LEAF_PROTOS[key] = hit
    return tuple(p.fresh() for p in hit[1])


def _leaves_with_kinds(field: LanceField, outer: list[str]):
    """(leaf, layer kinds inner to outer) for every leaf under ``field`` (a
    packed struct is a leaf: its rows are the values of one column)."""
    if (field.is_struct and not field.is_packed_struct) or field.is_list:
        kind = LIST if field.is_list else ITEM
        for c in field.children:
            yield from _leaves_with_kinds(c, [kind] + outer)
    else:
        yield field, [ITEM] + outer


#: reads of at least this many rows decode their pages on a thread pool
_PARALLEL_MIN_ROWS = 1 << 16
_POOL = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        with _POOL_LOCK:
            if _POOL is None:
                workers = max(1, min(8, os.cpu_count() or 1))
                _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tessera-decode")
    return _POOL


#: validated page layouts by their serialised bytes: files written alike
#: (every file of a table, most pages of a column) share a handful of layouts,
#: so each is parsed and checked once per process.  Parsed messages are only
#: read, never changed.
_LAYOUTS: dict[bytes, tuple] = {}
_LAYOUTS_MAX = 4096


def _page_layout(raw: bytes, where: str, path):
    hit = _LAYOUTS.get(raw)
    if hit is None:
        layout = unpack_any(raw, PAGE_LAYOUT_URL, pb.PageLayout, path)
        hit = parse_page_layout(layout, where)
        if len(_LAYOUTS) >= _LAYOUTS_MAX:
            _LAYOUTS.clear()
        _LAYOUTS[raw] = hit
    return hit


def _count_leaves(field: LanceField) -> int:
    return sum(1 for _ in field.leaves())


class FieldDecoder:
    """Decodes rows of one top-level field of a 2.1/2.2 file."""

    def __init__(self, field: LanceField, reader, first_column: int, version: str = "2.1") -> None:
        self.field = field
        self.reader = reader
        self.version = version
        self.path = getattr(reader, "path", None)
        # the leaves of a file's field are the same for every reader of the file:
        # kept with its parsed tail (with their pages, loaded on first use)
        shared = getattr(reader, "parsed", None)
        key = (first_column, id(field))
        hit = shared.leaves.get(key) if shared is not None else None
        if hit is not None and hit[0] is field:
            self.leaves = hit[1]
        else:
            self.leaves = _new_leaves(field, first_column)  # a tuple: it stays in the parsed-tail cache
            if shared is not None:
                shared.leaves[key] = (field, self.leaves)
        self._types: dict[int, pa.DataType] = {}
        #: opens a blob v2 sidecar file by name (set by the FileReader)
        self.open_sidecar: lblob.SidecarOpener | None = None

    # ------------------------------------------------------------------ pages

    def _leaf_pages(self, leaf: _Leaf) -> tuple[list[PageBase], np.ndarray]:
        """The leaf's pages and their row starts, loaded on first use."""
        pages, rs = leaf.pages, leaf.row_starts
        if pages is None or rs is None:
            return self._load_pages(leaf)
        return pages, rs

    def _load_pages(self, leaf: _Leaf) -> tuple[list[PageBase], np.ndarray]:
        shared = getattr(self.reader, "parsed", None)  # page lists of the same file, decoded by any reader
        if shared is not None and (hit := shared.pages.get(leaf.column)) is not None:
            leaf.pages, leaf.row_starts = hit
            return hit
        cm = self.reader.column(leaf.column)
        pages: list[PageBase] = []
        for i, page in enumerate(cm.pages):
            where = f"{self.path or 'data file'}: column {leaf.column} ({leaf.field.name!r}) page {i}"
            loc = page.encoding.WhichOneof("location")
            if loc != "direct":
                raise UnsupportedEncodingError(f"{where}: page encoding stored as {loc!r} is not supported")
            kind, msg = _page_layout(page.encoding.direct.encoding, where, self.path)
            if kind == "mini_block_layout":
                pages.append(MiniBlockPage(page, msg, leaf.st, leaf.type, where, leaf.out_type))
            elif kind == "full_zip_layout":
                pages.append(FullZipPage(page, msg, leaf.st, leaf.type, where, leaf.out_type))
            elif kind == "all_null_layout":
                pages.append(AllNullPage(page, msg, leaf.st, leaf.type, where, leaf.out_type))
            elif kind == "blob_layout":
                if leaf.blob != "v1":
                    raise UnsupportedEncodingError(
                        f"{where}: a blob page in a column that is not a blob column (no lance-encoding:blob "
                        "metadata on large_binary) is not supported"
                    )
                pages.append(BlobPage(page, msg, leaf.st, where))  # type: ignore[arg-type]
            else:  # pragma: no cover - parse_page_layout rejects the rest
                raise UnsupportedEncodingError(f"{where}: page layout {kind} is not supported")
        rows = [p.num_rows for p in pages]
        total = sum(rows)  # Python ints: a corrupt page length may not fit in int64
        if total != self.reader.num_rows or total >= 2**62:
            raise CorruptFileError(
                self.path,
                f"column {leaf.column} ({leaf.field.name!r}) holds {total} rows, the file {self.reader.num_rows}",
            )
        if len(rows) == 1:  # a small file's column: one page
            row_starts = np.array((0, total), dtype=np.int64)
        else:
            row_starts = np.concatenate(([0], np.cumsum(np.asarray(rows, dtype=np.int64))))
        leaf.row_starts = row_starts
        kept = tuple(pages)  # cached for the file's life: a tuple is less work for the garbage collector
        leaf.pages = kept  # type: ignore[assignment]
        if shared is not None:
            shared.pages[leaf.column] = (kept, row_starts)
            # the pages hold what the column's metadata said: the message itself goes (a parsed
            # tail lives in the process cache, and every object it keeps is the collector's work)
            shared.columns.pop(leaf.column, None)
        return kept, row_starts  # type: ignore[return-value]

    def _read_leaf(self, leaf: _Leaf, start: int, stop: int) -> tuple[pa.Array, list[LayerOut]]:
        return self._assemble_leaf(leaf, self._read_pieces(leaf, start, stop), stop - start)

    def _pages_in(self, leaf: _Leaf, start: int, stop: int) -> list[tuple[PageBase, int, int]]:
        """(page, first row, end row within the page) of the pages overlapping rows ``[start, stop)``."""
        leaf_pages, rs = self._leaf_pages(leaf)
        i = int(np.searchsorted(rs, start, side="right")) - 1
        sel = []
        while i < len(leaf_pages) and rs[i] < stop:
            a = max(start, int(rs[i])) - int(rs[i])
            b = min(stop, int(rs[i + 1])) - int(rs[i])
            if b > a:
                sel.append((leaf_pages[i], a, b))
            i += 1
        return sel

    def planned_pages(self, start: int, stop: int) -> list[tuple[PageBase, int, int]]:
        """Every page of every leaf that reading rows ``[start, stop)`` decodes
        (for a reader that fetches several fields' bytes at once)."""
        return [p for leaf in self.leaves for p in self._pages_in(leaf, start, stop)]

    def _read_pieces(self, leaf: _Leaf, start: int, stop: int) -> list[Piece]:
        """One decoded piece per page overlapping rows ``[start, stop)``."""
        leaf_pages, rs = self._leaf_pages(leaf)
        first = int(np.searchsorted(rs, start, side="right")) - 1
        sel = []
        i = first
        while i < len(leaf_pages) and rs[i] < stop:
            a = max(start, int(rs[i])) - int(rs[i])
            b = min(stop, int(rs[i + 1])) - int(rs[i])
            if b > a:
                sel.append((leaf_pages[i], a, b))
            i += 1
        io = self.reader.io
        # 1. metadata of pages not seen before, in one request
        self._ensure_meta([p for p, _, _ in sel])
        # 2. the bytes of the rows, in one request
        plans = [p.data_ranges(a, b) for p, a, b in sel]
        ranges = [r for plan in plans for r in plan]
        got = io.read_ranges(ranges) if ranges else []
        jobs = []
        k = 0
        for (p, a, b), plan in zip(sel, plans):
            jobs.append((p, a, b, got[k : k + len(plan)]))
            k += len(plan)
        # 3. decode: pages are independent, and numpy / Arrow release the GIL
        if len(jobs) > 1 and stop - start >= _PARALLEL_MIN_ROWS:
            return list(_pool().map(lambda j: j[0].decode(j[1], j[2], j[3]), jobs))
        return [p.decode(a, b, bufs) for p, a, b, bufs in jobs]

    def _ensure_meta(self, pages) -> None:
        """Read the planning metadata of pages not seen before, in one request."""
        if all(p.meta_loaded for p in pages):
            return
        # pages may be shared by readers of the same file on other threads: one loads
        # a page's metadata (set_meta marks it loaded last), the others wait and see it
        lock = getattr(self.reader, "meta_lock", None)
        with lock if lock is not None else contextlib.nullcontext():
            todo = [p for p in pages if not p.meta_loaded]
            ranges = [r for p in todo for r in p.meta_ranges()]
            got = self.reader.io.read_ranges(ranges) if ranges else []
            k = 0
            for p in todo:
                n = len(p.meta_ranges())
                p.set_meta(got[k : k + n])
                k += n

    def _take_pieces(self, leaf: _Leaf, rows: np.ndarray) -> list[Piece]:
        """One piece per page holding some of ``rows`` (sorted, distinct).

        Mini-block pages without lists plan the chunks holding the rows; all
        their chunks are read at once (in place when the file is mapped or in
        memory) and decoded there, with no buffer object per chunk.  The other
        pages' byte ranges are fetched in one request."""
        leaf_pages, rs = self._leaf_pages(leaf)
        if len(leaf_pages) == 1:
            groups = [(0, rows)]
        else:
            page_of = np.searchsorted(rs, rows, side="right") - 1
            if page_of[0] == page_of[-1]:
                groups = [(int(page_of[0]), rows - int(rs[page_of[0]]))]
            else:
                cuts = np.flatnonzero(np.diff(page_of)) + 1
                groups = [(int(g[0]), r - int(rs[g[0]])) for g, r in zip(np.split(page_of, cuts), np.split(rows, cuts))]
        pages = [leaf_pages[i] for i, _ in groups]
        self._ensure_meta(pages)
        pieces: list = [None] * len(groups)
        planned, todo = [], []
        for j, (p, (_, r)) in enumerate(zip(pages, groups)):
            if p.planned_take:
                planned.append((j, p, r) + p.take_plan(r))
            else:
                todo.append((j, p, r, p.take_ranges(r)))
        if planned:
            # every chunk of every page in one read, decoded in place
            page_offs = [x[4] for x in planned]
            page_sizes = [x[5] for x in planned]
            offs = page_offs[0] if len(page_offs) == 1 else np.concatenate(page_offs)
            sizes = page_sizes[0] if len(page_sizes) == 1 else np.concatenate(page_sizes)
            data, base = self._read_pieces_at(offs, sizes)
            k = 0
            for j, p, r, plan, o, _ in planned:
                pieces[j] = p.take_planned(r, plan, data, base[k : k + o.size])
                k += o.size
        if todo:
            ranges = [x for _, _, _, plan in todo for x in plan]
            got = self.reader.io.read_ranges(ranges) if ranges else []
            k = 0
            for j, p, r, page_ranges in todo:
                pieces[j] = p.take(r, got[k : k + len(page_ranges)])
                k += len(page_ranges)
        return pieces

    def _read_pieces_at(self, offsets: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(data, starts)``: the byte ranges ``offsets``/``sizes`` of the file
        as one uint8 array and where each starts in it - the file's own bytes
        when it is mapped or in memory (no copy), else one read."""
        io = self.reader.io
        whole = getattr(io, "whole_buffer", None)
        buf = whole() if whole is not None else None
        if buf is not None:
            if offsets.size and int((offsets + sizes).max()) > buf.size:
                raise CorruptFileError(self.path, "a chunk lies past the end of the file")
            return np.frombuffer(buf, dtype=np.uint8), offsets
        joined = getattr(io, "read_joined", None)
        if joined is not None:
            return joined(offsets, sizes)
        return joined_buffers(io.read_ranges(list(zip(offsets.tolist(), sizes.tolist()))))

    def take(self, rows, blob_descriptions: bool = False) -> pa.Array:
        """The rows ``rows`` (sorted, distinct) of the field.  Every page
        involved is planned first, all byte ranges are fetched in one request,
        and mini-block pages decode only the chunks holding the rows.

        ``blob_descriptions``: a blob column's descriptions instead of its
        bytes (nothing else is read)."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size == 0:
            return pa.array([], type=self._type(self.field))
        results = [
            self._assemble_leaf(leaf, self._take_pieces(leaf, rows), int(rows.size), not blob_descriptions)
            for leaf in self.leaves
        ]
        infos = [(arr, layers, len(layers) - 1) for arr, layers in results]
        out = self._build(self.field, infos)
        if len(out) != rows.size:
            raise CorruptFileError(
                self.path, f"field {self.field.name!r}: decoded {len(out)} rows, {rows.size} expected"
            )
        return out

    def _assemble_leaf(self, leaf: _Leaf, pieces: list[Piece], num_rows: int, resolve_blobs: bool = True):
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
            values = (
                ldict.concat([p.values for p in pieces])
                if pa.types.is_dictionary(leaf.out_type)
                else pa.concat_arrays([p.values for p in pieces])
            )
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
        values = with_validity(values, layers[0].validity)
        if leaf.blob is not None and resolve_blobs:
            values = self._blob_values(leaf, values)
        return values, layers

    def _blob_values(self, leaf: _Leaf, desc: pa.Array) -> pa.Array:
        """The bytes a blob column's descriptions point at."""
        name = leaf.field.name
        if leaf.blob == "v1":
            refs = lblob.refs_v1(desc, self.version, self.path, name)
        else:
            refs = lblob.refs_v2(desc, self.path, name)
        return lblob.read_values(refs, self.reader.io, self.open_sidecar, self.path, name)

    # ------------------------------------------------------------------ assembly

    def _type(self, f: LanceField) -> pa.DataType:
        t = self._types.get(f.id)
        if t is None:
            t = self._types[f.id] = f.arrow_type
        return t

    def _build(self, f: LanceField, infos: list) -> pa.Array:
        arr, layers, idx = infos[0]
        if f.is_packed_struct or not (f.is_struct or f.is_list):
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
                    raise CorruptFileError(
                        self.path, f"struct {f.name!r}: child {c.name!r} has {len(child)} rows, expected {lay.length}"
                    )
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

    def read_chunks(self, start: int, stop: int) -> list[pa.Array]:
        """Rows ``[start, stop)`` as arrays to be read back to back.

        A field without struct or list layers comes as one array per page, so
        no copy joins the pages; other fields as one array (``read_range``)."""
        if (self.field.is_struct and not self.field.is_packed_struct) or self.field.is_list or stop <= start:
            return [self.read_range(start, stop)]
        (leaf,) = self.leaves
        out = []
        for p in self._read_pieces(leaf, start, stop):
            arr, _ = self._assemble_leaf(leaf, [p], p.num_rows)
            out.append(arr)
        return out

    def read_range(self, start: int, stop: int) -> pa.Array:
        """Rows ``[start, stop)`` of the field as an Array of ``field.arrow_type``."""
        t = self._type(self.field)
        if stop <= start:
            return pa.array([], type=t)
        results = [self._read_leaf(leaf, start, stop) for leaf in self.leaves]
        infos = [(arr, layers, len(layers) - 1) for arr, layers in results]
        out = self._build(self.field, infos)
        if len(out) != stop - start:
            raise CorruptFileError(
                self.path, f"field {self.field.name!r}: decoded {len(out)} rows, {stop - start} expected"
            )
        return out
