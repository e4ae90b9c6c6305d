"""Writing one top-level field in file format 2.1 or 2.2.

:class:`FieldEncoder` receives the field's Arrow arrays as they stream in,
shreds them into per-leaf levels and values (:mod:`.repdef_encode`), buffers
each leaf column separately and cuts a page for a leaf as soon as about
``page_size`` bytes are buffered for it.  Pages always hold whole top-level
rows; pages of different leaves are cut independently.

Layout per page:

* ``all_null_layout`` when no visible value is non-null (no buffers for a
  plain nullable leaf, otherwise raw u16 rep and def buffers);
* in 2.2, ``all_null_layout`` with an inline constant when every non-null
  value of a fixed-width, non-repeated leaf has the same bytes (what pylance
  14 writes for constant columns);
* ``full_zip_layout`` for wide values: fixed width of 256 bytes or more,
  variable width averaging 256 bytes or more (or any value above 8 KiB);
* ``mini_block_layout`` otherwise; strings and binaries whose page repeats a
  few distinct values store u32 indices there plus a dictionary of the items
  (:mod:`.dictionary`).

A dictionary field (an Arrow dictionary column) always gets mini-block pages
of its indices, as wide as its index type, plus the page's dictionary (the
Arrow dictionaries of its rows, unified), or an all-null page: what pylance
writes and what its reader needs.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ....errors import UnsupportedTypeError
from ....protos import encodings21_pb2 as pb
from ... import dictionary as ldict
from ...container import PAGE_LAYOUT_URL, EncodedPage, pack_any
from ...schema import LanceField
from . import dictionary as dictionary_encode
from .fullzip import can_fullzip, encode_fullzip
from .miniblock import ChunkingError, encode_miniblock
from .repdef import LeafPlan, LeafShred, PageLevels, compact_levels, plan_leaves, shred
from .values import FixedValues, LeafValues, VariableValues, check_leaf_type, from_arrays

DEFAULT_PAGE_SIZE = 8 * 1024 * 1024
#: values at least this wide (bytes, on average) use the full-zip layout
FULLZIP_MIN_BYTES = 256
#: a variable-width value above this size forces full-zip
MINIBLOCK_MAX_VALUE_BYTES = 8192


class FieldEncoder:
    """Streams one top-level field into 2.1/2.2 pages (one column per leaf)."""

    def __init__(self, field: LanceField, page_size: int = DEFAULT_PAGE_SIZE, version: str = "2.2") -> None:
        if version not in ("2.1", "2.2"):
            raise ValueError(f"FieldEncoder writes file versions 2.1 and 2.2, not {version!r}")
        self.field = field
        self.version = version
        self.page_size = max(int(page_size), 1)
        self.plans = plan_leaves(field)
        for p in self.plans:
            check_leaf_type(p.field.arrow_type, p.field.name)
        self._pending: list[list[LeafShred]] = [[] for _ in self.plans]
        self._pending_bytes = [0] * len(self.plans)
        #: leaves cut into pages by size (not dictionary leaves with small indices:
        #: one page a file, so pylance can join the pages' dictionaries)
        self._paged = [
            not (pa.types.is_dictionary(p.field.arrow_type) and ldict.one_page(p.field.arrow_type)) for p in self.plans
        ]

    def append(self, array: pa.Array) -> list[EncodedPage]:
        """Buffer ``array`` (this field's values for some rows); return the pages that filled up."""
        pages: list[EncodedPage] = []
        if isinstance(array, pa.ChunkedArray):
            for chunk in array.chunks:
                pages.extend(self.append(chunk))
            return pages
        for piece in self._pieces(array):
            for i, sh in enumerate(shred(piece, self.field, self.plans)):
                self._pending[i].append(sh)
                self._pending_bytes[i] += _shred_bytes(sh)
                if self._pending_bytes[i] >= self.page_size and self._paged[i]:
                    pages.extend(self._flush(i))
        return pages

    def finish(self) -> list[EncodedPage]:
        """Flush every leaf's remaining rows."""
        pages: list[EncodedPage] = []
        for i in range(len(self.plans)):
            if self._pending[i]:
                pages.extend(self._flush(i))
        return pages

    def _pieces(self, array: pa.Array):
        """Row slices of ``array`` of at most about half a page each."""
        n = len(array)
        if n == 0:
            return
        # a dictionary array's rows cost their indices (its dictionary is stored once a page)
        nbytes = max(ldict.index_bytes(array) if pa.types.is_dictionary(array.type) else array.nbytes, 1)
        rows = max(1, int(n * (self.page_size / 2) / nbytes))
        if rows >= n:
            yield array
            return
        for start in range(0, n, rows):
            yield array.slice(start, min(rows, n - start))

    def _flush(self, i: int) -> list[EncodedPage]:
        pieces = self._pending[i]
        self._pending[i] = []
        self._pending_bytes[i] = 0
        return encode_page(self.plans[i], i, pieces, self.version)


def _shred_bytes(sh: LeafShred) -> int:
    n = ldict.index_bytes(sh.values) if pa.types.is_dictionary(sh.values.type) else sh.values.nbytes
    if sh.rep is not None:
        n += sh.rep.nbytes
    if sh.defs is not None:
        n += sh.defs.nbytes
    return n


def _concat_levels(pieces: list[LeafShred]) -> tuple[np.ndarray | None, np.ndarray | None, int]:
    num_levels = sum(p.num_levels for p in pieces)
    rep = None
    if pieces[0].rep is not None:
        rep = pieces[0].rep if len(pieces) == 1 else np.concatenate([p.rep for p in pieces])
    defs = None
    if any(p.defs is not None for p in pieces):
        if len(pieces) == 1:
            defs = pieces[0].defs
        else:
            defs = np.concatenate(
                [p.defs if p.defs is not None else np.zeros(p.num_levels, dtype=np.uint16) for p in pieces]
            )
    return rep, defs, num_levels


def encode_page(plan: LeafPlan, column: int, pieces: list[LeafShred], version: str) -> list[EncodedPage]:
    """Encode buffered rows of one leaf: normally one page, more if it must be split."""
    rep, raw_defs, num_levels = _concat_levels(pieces)
    num_rows = sum(p.num_rows for p in pieces)
    arrays = [p.values for p in pieces if len(p.values)] or [pieces[0].values]
    return _encode_rows(plan, column, rep, raw_defs, arrays, num_rows, num_levels, version)


class _Unchunkable(Exception):
    pass


def _encode_rows(plan, column, rep, raw_defs, arrays, num_rows, num_levels, version) -> list[EncodedPage]:
    large = version != "2.1"
    levels = compact_levels(plan, rep, raw_defs, num_levels)
    dictionary = None  # a dictionary leaf's values: one array of the page's one dictionary
    if pa.types.is_dictionary(arrays[0].type):
        dictionary = ldict.concat(arrays)
        arrays = [dictionary]
        values = None if len(dictionary.dictionary) == 0 else from_arrays([dictionary.indices])
    else:
        values = from_arrays(arrays)
    nvis = sum(len(a) for a in arrays)
    valid = None  # visible values that are not null
    if levels.defs is not None:
        vis_defs = levels.defs if levels.visible is None else levels.defs[levels.visible]
        valid = vis_defs == 0
    no_valid = valid is not None and not valid.any()
    # pylance reads every visible slot of an all-null page as a null leaf
    # value; for a non-nullable leaf whose visible slots are only masked by
    # null parents that is "unmasked nulls in a non-nullable field", so such
    # a page keeps its (meaningless) values instead.
    if values is None or nvis == 0 or (no_valid and plan.field.nullable):
        layout, buffers = _all_null(levels)
        return [_page(column, buffers, num_rows, layout)]
    if no_valid:
        valid = None  # every visible value is masked: any bytes will do
    if (
        large
        and dictionary is None  # pylance writes no constant pages for dictionary fields
        and levels.rep is None
        # pylance turns every slot with a definition level into a null on a
        # constant page too: not for a non-nullable leaf below null parents
        and (levels.defs is None or plan.field.nullable)
        and isinstance(values, FixedValues)
        and values.dim is None
        and values.packed is None
        and values.all_equal(valid)
    ):
        layout, buffers = _all_null(levels, values.value_bytes(values.first_valid_index(valid)))
    else:
        try:
            if dictionary is not None:
                buffers, layout = _encode_dictionary(levels, dictionary, plan.max_rep, large)
            else:
                buffers, layout = _encode_values(plan, levels, values, num_rows, large, valid)
        except _Unchunkable as exc:
            if rep is None or num_rows < 2:
                raise UnsupportedTypeError(
                    f"field {plan.field.name!r}: values cannot be written as mini-blocks ({exc}) "
                    f"and their type cannot use the full-zip layout"
                ) from exc
            # split at a row boundary: the halves have fewer invisible items in a row
            cut = int(np.flatnonzero(rep == plan.max_rep)[num_rows // 2])
            left_vis = cut if levels.visible is None else int(np.count_nonzero(levels.visible[:cut]))
            arr = arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)  # one array for a dictionary leaf
            halves = (
                (slice(0, cut), arr.slice(0, left_vis), num_rows // 2, cut),
                (slice(cut, None), arr.slice(left_vis), num_rows - num_rows // 2, num_levels - cut),
            )
            pages = []
            for sl, part, rows, nlev in halves:
                part_defs = None if raw_defs is None else raw_defs[sl]
                pages.extend(_encode_rows(plan, column, rep[sl], part_defs, [part], rows, nlev, version))
            return pages
    return [_page(column, buffers, num_rows, layout)]


def _page(column: int, buffers: list, num_rows: int, layout: pb.PageLayout) -> EncodedPage:
    """The page, its planning buffers named: the ones a reader fetches before
    the data (as ``pages.*.meta_ranges`` reads them)."""
    kind = layout.WhichOneof("layout")
    n = len(buffers)
    planning: tuple[int, ...] = ()
    if kind == "mini_block_layout":
        mb = layout.mini_block_layout
        planning = (0,) + ((2,) if mb.HasField("dictionary") else ()) + ((n - 1,) if mb.repetition_index_depth else ())
    elif kind == "full_zip_layout":
        planning = (1,) if n == 2 else ()
    elif kind == "all_null_layout":
        planning = tuple(range(n))
    return EncodedPage(column, buffers, num_rows, pack_any(PAGE_LAYOUT_URL, layout), planning)


def _encode_dictionary(levels: PageLevels, arr: pa.Array, max_rep: int, large: bool):
    """A dictionary field's page: always mini-block indices plus the page's
    dictionary, as pylance writes it (its reader needs the dictionary)."""
    d = dictionary_encode.from_dictionary(arr, "2.2" if large else "2.1")
    try:
        buffers, layout = encode_miniblock(levels, d.indices, max_rep, large)
    except ChunkingError as exc:
        raise _Unchunkable(str(exc)) from exc
    return dictionary_encode.apply(layout, buffers, d), layout


def _is_wide(values: LeafValues, valid: np.ndarray | None) -> bool:
    """Wide values go to full-zip: fixed width >= 256 bytes, or non-null
    variable-width values averaging >= 256 bytes, or any above 8 KiB."""
    if not can_fullzip(values):
        return False
    if isinstance(values, FixedValues):
        return values.bits_per_value >= 8 * FULLZIP_MIN_BYTES
    lengths = values.lengths()
    if valid is not None:
        lengths = lengths[valid]
    if len(lengths) == 0:
        return False
    return int(lengths.sum()) >= FULLZIP_MIN_BYTES * len(lengths) or int(lengths.max()) > MINIBLOCK_MAX_VALUE_BYTES


def _encode_values(plan: LeafPlan, levels: PageLevels, values: LeafValues, num_rows: int, large: bool, valid):
    if not _is_wide(values, valid):
        try:
            d = (
                dictionary_encode.choose(values, "2.2" if large else "2.1")
                if isinstance(values, VariableValues)
                else None
            )
            if d is not None:
                buffers, layout = encode_miniblock(levels, d.indices, plan.max_rep, large)
                return dictionary_encode.apply(layout, buffers, d), layout
            return encode_miniblock(levels, values, plan.max_rep, large)
        except ChunkingError as exc:
            if not can_fullzip(values):
                raise _Unchunkable(str(exc)) from exc
    return encode_fullzip(levels, values, plan.max_rep, num_rows)


def _all_null(levels: PageLevels, constant: bytes | None = None):
    layout = pb.PageLayout()
    an = layout.all_null_layout
    an.layers.extend(levels.layers)
    simple = levels.rep is None and levels.defs is None
    if constant is not None:
        an.constant_value = constant
    else:
        simple = levels.rep is None and list(levels.layers) == [pb.REPDEF_NULLABLE_ITEM]
    if simple:
        return layout, []
    rep = levels.rep.view(np.uint8) if levels.rep is not None else b""
    defs = levels.defs.view(np.uint8) if levels.defs is not None else b""
    return layout, [rep, defs]


__all__ = ["DEFAULT_PAGE_SIZE", "FieldEncoder", "encode_page"]
