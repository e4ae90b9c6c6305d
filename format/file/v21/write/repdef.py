"""Shredding Arrow arrays into repetition and definition levels (2.1/2.2 writer).

In file formats 2.1 and 2.2 a struct or list parent owns no column.  Its
validity and offsets are folded into every leaf below it as two streams of
u16 levels, one entry per leaf *slot*:

* a **repetition level** is non-zero where a list starts; the outermost list
  uses ``max_rep`` (so ``max_rep`` marks the start of a top-level row), the
  innermost uses 1, and 0 continues the current list;
* a **definition level** is 0 for a valid item; otherwise it says which layer
  made the slot null (or an empty list).  Inner layers take the small numbers.

A null or empty list still takes one slot (an *invisible item*: it has levels
but no value).  Every other slot is *visible* and owns one leaf value, null or
not.

:func:`shred` walks a top-level array once and returns one :class:`LeafShred`
per leaf.  While walking it numbers definition levels by depth from the top
(outer layers get larger numbers), so struct siblings can share the work; the
numbers only become Lance's compact level numbers when a page is cut
(:func:`compact_levels`), because which layers actually hold nulls or empty
lists is a property of the page.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ....errors import UnsupportedTypeError
from ....protos import encodings21_pb2 as pb
from ... import dictionary as ldict
from ...schema import LanceField

#: raw definition codes: depth d (0 = top level) owns codes _base(d) (null)
#: and _base(d) + 1 (empty list).  Deeper layers get smaller codes.
_TOP_CODE = 65533
#: raw repetition codes: the list with k lists above it uses _REP_TOP - k.
_REP_TOP = 65535

ITEM, LIST = "item", "list"


def _base(depth: int) -> int:
    return _TOP_CODE - 2 * depth


@dataclass(frozen=True)
class LeafPlan:
    """Static description of one leaf: its layers and level numbering."""

    field: LanceField
    #: (kind, depth) of each layer from the leaf (inner) to the top (outer)
    layers: tuple[tuple[str, int], ...]
    max_rep: int
    #: schema nullability of the field owning each layer (parallel to ``layers``)
    nullable: tuple[bool, ...] = ()

    @property
    def innermost_list_code(self) -> int | None:
        """Raw null code of the innermost list: slots with smaller codes are visible."""
        for kind, depth in self.layers:
            if kind == LIST:
                return _base(depth)
        return None


def plan_leaves(field: LanceField) -> list[LeafPlan]:
    """One :class:`LeafPlan` per leaf of ``field``, in column order."""
    out: list[LeafPlan] = []

    def walk(f: LanceField, path: list[tuple[str, int, bool]]) -> None:
        depth = len(path)
        if f.is_struct and not f.is_packed_struct:  # a packed struct is one leaf
            if not f.children:
                raise UnsupportedTypeError(
                    f"field {f.name!r}: a struct with no fields cannot be written in file format 2.1/2.2"
                )
            for c in f.children:
                walk(c, path + [(ITEM, depth, f.nullable)])
        elif f.is_list:
            walk(f.children[0], path + [(LIST, depth, f.nullable)])
        else:
            full = list(reversed(path + [(ITEM, depth, f.nullable)]))
            layers = tuple((k, d) for k, d, _ in full)
            nullable = tuple(n for _, _, n in full)
            out.append(LeafPlan(f, layers, sum(1 for k, _ in layers if k == LIST), nullable))

    walk(field, [])
    return out


@dataclass
class LeafShred:
    """One leaf's levels and visible values for a run of whole top-level rows.

    ``rep`` holds final repetition levels (1..max_rep) or is None when no list
    lies above the leaf.  ``defs`` holds *raw* definition codes (see module
    docstring) or is None when every slot is valid.  ``values`` are the
    visible leaf values in order (nulls included), as an Arrow array.
    """

    rep: np.ndarray | None
    defs: np.ndarray | None
    values: pa.Array
    num_rows: int

    @property
    def num_levels(self) -> int:
        if self.rep is not None:
            return len(self.rep)
        if self.defs is not None:
            return len(self.defs)
        return len(self.values)


def null_mask(arr: pa.Array) -> np.ndarray | None:
    """Boolean array, True where ``arr`` is null; None when nothing is null."""
    if arr.null_count == 0:
        return None
    if pa.types.is_null(arr.type):
        return np.ones(len(arr), dtype=bool)
    buf = arr.buffers()[0]
    if buf is None:  # e.g. unions; not expected here
        return np.asarray(arr.is_null().to_numpy(zero_copy_only=False))
    start, stop = arr.offset // 8, (arr.offset + len(arr) + 7) // 8
    bits = np.unpackbits(np.frombuffer(buf, dtype=np.uint8)[start:stop], bitorder="little")
    first = arr.offset - 8 * start
    return ~bits[first : first + len(arr)].view(bool)


class _State:
    """Levels of the slots at one node of the walk (shared, never mutated)."""

    __slots__ = ("rep", "defs", "idx", "n")

    def __init__(self, rep, defs, idx, n):
        self.rep = rep  # raw rep codes or None (all zero)
        self.defs = defs  # raw def codes or None (all zero)
        self.idx = idx  # index of each slot in the current array, -1 = invisible; None = identity
        self.n = n  # number of slots


def _apply_validity(arr: pa.Array, st: _State, code: int) -> _State:
    mask = null_mask(arr)
    if mask is None:
        return st
    if st.idx is not None:
        real = st.idx >= 0
        m = np.zeros(st.n, dtype=bool)
        m[real] = mask[st.idx[real]]
        mask = m
    if st.defs is None:
        defs = np.where(mask, np.uint16(code), np.uint16(0)).astype(np.uint16)
    else:
        defs = np.where((st.defs == 0) & mask, np.uint16(code), st.defs).astype(np.uint16)
    return _State(st.rep, defs, st.idx, st.n)


def _list_parts(arr: pa.Array) -> tuple[np.ndarray, pa.Array]:
    offsets = np.asarray(arr.offsets)
    return offsets, arr.values


def _expand_list(arr: pa.Array, st: _State, depth: int, rep_code: int) -> tuple[pa.Array, _State]:
    offsets, child = _list_parts(arr)
    null_code = _base(depth)
    empty_code = null_code + 1
    lens = offsets[1:] - offsets[:-1]
    mask = null_mask(arr)
    if st.idx is None and st.defs is None and mask is None and (len(lens) == 0 or lens.min() > 0):
        # every slot is a valid non-empty list: items are a contiguous child range
        first = int(offsets[0]) if len(offsets) else 0
        total = int(offsets[-1]) - first if len(offsets) else 0
        rep = np.zeros(total, dtype=np.uint16)
        starts = offsets[:-1] - first
        rep[starts] = rep_code if st.rep is None else np.where(st.rep != 0, st.rep, np.uint16(rep_code))
        return child.slice(first, total), _State(rep, None, None, total)

    if st.idx is None:
        real = None
        slot_lens = lens
        slot_null = mask if mask is not None else np.zeros(st.n, dtype=bool)
        slot_start = offsets[:-1]
    else:
        # Invisible slots (idx -1: a null or empty list, or a null struct,
        # somewhere above) have no element in ``arr``.  Gather only the real
        # ones: ``arr`` may even be empty (e.g. a single null outer list), so
        # no placeholder index is valid.
        real = st.idx >= 0
        ridx = st.idx[real]
        slot_lens = np.zeros(st.n, dtype=lens.dtype)
        slot_lens[real] = lens[ridx]
        slot_null = np.zeros(st.n, dtype=bool)
        if mask is not None:
            slot_null[real] = mask[ridx]
        slot_start = np.zeros(st.n, dtype=offsets.dtype)
        slot_start[real] = offsets[ridx]
    ok = np.ones(st.n, dtype=bool) if st.defs is None else st.defs == 0
    if real is not None:
        ok &= real
    expand = ok & ~slot_null & (slot_lens > 0)
    counts = np.where(expand, slot_lens, 1)
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    # repetition: each slot's first output entry carries the list start
    rep = np.zeros(total, dtype=np.uint16)
    rep[starts] = np.uint16(rep_code) if st.rep is None else np.where(st.rep != 0, st.rep, np.uint16(rep_code))
    # definition: invisible slots keep their code (or become null/empty lists)
    keep = ~expand
    defs = None
    if keep.any():
        old = st.defs if st.defs is not None else np.zeros(st.n, dtype=np.uint16)
        special = np.where(ok & slot_null, np.uint16(null_code), np.where(ok, np.uint16(empty_code), old))
        defs = np.zeros(total, dtype=np.uint16)
        defs[starts[keep]] = special[keep]
    # child indices
    base = np.where(expand, slot_start - starts, 0)
    idx = np.arange(total, dtype=np.int64) + np.repeat(base, counts)
    if keep.any():
        idx[starts[keep]] = -1
    return child, _State(rep, defs, idx, total)


def shred(array: pa.Array, field: LanceField, plans: list[LeafPlan]) -> list[LeafShred]:
    """Split a top-level array into per-leaf levels and visible values."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    out: list[LeafShred] = []
    num_rows = len(array)

    def walk(arr: pa.Array, f: LanceField, st: _State, depth: int, nlists: int) -> None:
        if f.is_struct and not f.is_packed_struct:
            st = _apply_validity(arr, st, _base(depth))
            for k, c in enumerate(f.children):
                walk(arr.field(k), c, st, depth + 1, nlists)
        elif f.is_list:
            if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
                raise UnsupportedTypeError(f"field {f.name!r}: expected a list array, got {arr.type}")
            child, st = _expand_list(arr, st, depth, _REP_TOP - nlists)
            walk(child, f.children[0], st, depth + 1, nlists + 1)
        else:
            if pa.types.is_dictionary(arr.type):  # rows pointing at null items are null rows
                arr = ldict.normalize_nulls(arr)
            st = _apply_validity(arr, st, _base(depth))
            if st.idx is not None:
                arr = arr.take(pa.array(st.idx[st.idx >= 0]))
            plan = plans[len(out)]
            rep = st.rep
            if rep is not None:
                shift = np.uint16(_REP_TOP - plan.max_rep)
                rep = np.where(rep == 0, np.uint16(0), rep - shift).astype(np.uint16)
            out.append(LeafShred(rep, st.defs, arr, num_rows))

    walk(array, field, _State(None, None, None, num_rows), 0, 0)
    return out


@dataclass
class PageLevels:
    """Levels of one page after compaction to Lance's numbering."""

    rep: np.ndarray | None
    defs: np.ndarray | None
    #: RepDefLayer values, inner to outer
    layers: list[int]
    #: True for slots that own a value (None: every slot does)
    visible: np.ndarray | None
    num_levels: int


def compact_levels(plan: LeafPlan, rep: np.ndarray | None, raw_defs: np.ndarray | None, num_levels: int) -> PageLevels:
    """Choose each layer's kind from the codes present and renumber the levels.

    A layer normally gets a definition level only when this page holds a null
    (or empty list) there.  Two exceptions keep pylance 14's reader working;
    it mis-decodes both shapes, which its own writer only avoids because
    pyarrow-built data carries null buffers all the way down:

    * a nullable struct (item layer) with a list below it is NULLABLE_ITEM on
      every page, nulls or not.  Where one page calls such a layer all-valid
      and another nullable, pylance fills the all-valid page's share of the
      struct validity with one entry per *leaf item* rather than per struct
      ("Incorrect number of nulls for StructArray");
    * a list below a NULLABLE_ITEM layer is never ALL_VALID_LIST: pylance
      numbers the repetition depth of every definition level above an
      all-valid list one too low, so the struct's validity picks up levels
      that belong to outer lists.  Such a list reserves an *empty-list* level
      it never uses.  (Not a null level: pylance turns slots masked by a null
      parent into null lists when the layer is nullable, and a non-nullable
      list field holding nulls fails Arrow's struct validation.)
    """
    present: set[int] = set()
    if raw_defs is not None and len(raw_defs):
        counts = np.bincount(raw_defs, minlength=1)
        present = set(np.flatnonzero(counts).tolist())
        present.discard(0)
    n_layers = len(plan.layers)
    nullable = plan.nullable or (True,) * n_layers
    # item layers that get a level: holding nulls, or a nullable struct above a list
    item_level = [False] * n_layers
    list_below = False
    for k, (kind, depth) in enumerate(plan.layers):
        if kind == ITEM:
            item_level[k] = _base(depth) in present or (list_below and nullable[k])
        else:
            list_below = True
    layers: list[int] = []
    level = 0
    lut = np.zeros(_TOP_CODE + 2, dtype=np.uint16)
    for k, (kind, depth) in enumerate(plan.layers):
        code = _base(depth)
        if kind == ITEM:
            if item_level[k]:
                level += 1
                lut[code] = level
                layers.append(pb.REPDEF_NULLABLE_ITEM)
            else:
                layers.append(pb.REPDEF_ALL_VALID_ITEM)
        else:
            has_null, has_empty = code in present, code + 1 in present
            if not has_null and not has_empty and any(item_level[k + 1 :]):
                has_empty = True  # reserved, never used (see above)
            if has_null:
                level += 1
                lut[code] = level
            if has_empty:
                level += 1
                lut[code + 1] = level
            layers.append(
                pb.REPDEF_NULL_AND_EMPTY_LIST
                if has_null and has_empty
                else pb.REPDEF_NULLABLE_LIST
                if has_null
                else pb.REPDEF_EMPTYABLE_LIST
                if has_empty
                else pb.REPDEF_ALL_VALID_LIST
            )
    defs = None
    visible = None
    if not present and level:
        # levels are declared (see above) but this page uses none of them
        defs = np.zeros(num_levels, dtype=np.uint16)
    if present:
        assert raw_defs is not None  # ``present`` holds codes found in raw_defs
        if len(present) == 1:
            (code,) = present
            defs = np.where(raw_defs == code, lut[code], np.uint16(0)).astype(np.uint16)
        else:
            defs = lut[raw_defs]
        threshold = plan.innermost_list_code
        if threshold is not None:
            visible = raw_defs < threshold
            if visible.all():
                visible = None
    return PageLevels(rep, defs, layers, visible, num_levels)
