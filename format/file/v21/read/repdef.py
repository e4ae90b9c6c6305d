"""Repetition and definition levels: canonical codes and vectorised unravelling.

A leaf column's levels describe every layer between the leaf and its
top-level field, listed inner to outer (leaf, then each struct or list
ancestor).  Definition level 0 means "valid all the way down"; each layer
takes the next level numbers: a nullable item (or struct) one ("null"), a
nullable list one ("null"), an emptyable list one ("empty"), a null-and-empty
list two ("null", then "empty"); all-valid layers take none.  Repetition
level ``r`` on an entry means the ``r`` innermost lists start a new list at
that entry, so ``max_rep`` (the number of list layers) starts a new row.

Pages of one column may describe the same layer differently (one page has
nulls, the next does not), so each page's definition levels are first mapped
to a *canonical* code space in which every item layer has a null code and
every list layer has a null and an empty code.  The canonical levels of all
pages can then be concatenated and unravelled once.

Unravelling peels the layers inner to outer:

* an item layer yields a validity over the entries visible at that depth;
* a list layer yields offsets into the layer below and a validity, then keeps
  only the entries that start a list at this layer (with rep reduced by one)
  for the layers above.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ....errors import CorruptFileError
from .layout import (
    DEF_LEVELS,
    EMPTYABLE_LIST,
    ITEM_LAYERS,
    LIST_LAYERS,
    NULL_AND_EMPTY_LIST,
    NULLABLE_ITEM,
    NULLABLE_LIST,
)

ITEM = "item"
LIST = "list"


class Structure:
    """The layer kinds of one leaf (inner to outer) and its canonical code space."""

    def __init__(self, kinds: list[str]) -> None:
        self.kinds = list(kinds)
        self.code_start: list[int] = []
        c = 1
        l2r = [0]
        lists = 0
        for k in self.kinds:
            self.code_start.append(c)
            if k == ITEM:
                c += 1
                l2r.append(lists)
            else:
                lists += 1
                c += 2
                l2r += [lists, lists]
        self.num_codes = c
        #: canonical code -> number of list layers that must be peeled before it is visible
        self.levels_to_rep = np.asarray(l2r, dtype=np.int64)
        self.max_rep = lists
        first_list = next((i for i, k in enumerate(self.kinds) if k == LIST), len(self.kinds))
        #: canonical codes <= this belong to entries that carry a leaf value
        self.max_visible = first_list  # each item layer before the first list has one code
        self.has_lists = lists > 0
        # codes are ordered inner to outer and so is the number of lists below
        # them: after peeling p lists the visible entries have code <= vis_max[p]
        self.vis_max = [int(np.flatnonzero(self.levels_to_rep <= p).max()) for p in range(lists + 1)]

    def page_lut(self, layers: Sequence[int], where: str) -> np.ndarray:
        """Map a page's definition levels onto canonical codes."""
        if len(layers) != len(self.kinds):
            raise CorruptFileError(
                None, f"{where}: page describes {len(layers)} rep/def layers, the schema needs {len(self.kinds)}"
            )
        lut = [0]
        for j, (lay, kind) in enumerate(zip(layers, self.kinds)):
            want = ITEM_LAYERS if kind == ITEM else LIST_LAYERS
            if lay not in want:
                raise CorruptFileError(None, f"{where}: rep/def layer {j} is {lay}, expected a {kind} layer")
            c = self.code_start[j]
            if lay == NULLABLE_ITEM or lay == NULLABLE_LIST:
                lut.append(c)
            elif lay == EMPTYABLE_LIST:
                lut.append(c + 1)
            elif lay == NULL_AND_EMPTY_LIST:
                lut += [c, c + 1]
        return np.asarray(lut, dtype=np.uint16)


def page_max_visible(layers: Sequence[int]) -> int:
    """Largest page definition level of an entry that carries a value (levels of
    the layers below the first list)."""
    total = 0
    for lay in layers:
        if lay in LIST_LAYERS:
            break
        total += DEF_LEVELS[lay]
    return total


def page_max_def(layers: Sequence[int]) -> int:
    return sum(DEF_LEVELS[lay] for lay in layers)


def canonical_defs(defs: np.ndarray | None, lut: np.ndarray, where: str) -> np.ndarray | None:
    if defs is None:
        return None
    if defs.size and int(defs.max()) >= lut.size:
        raise CorruptFileError(None, f"{where}: definition level {int(defs.max())} exceeds the page's layers")
    if lut.size == 1:
        return None
    return lut[defs]


@dataclass
class LayerOut:
    kind: str
    length: int  # slots at this layer
    validity: np.ndarray | None  # bool per slot, None = all valid
    offsets: np.ndarray | None = None  # lists: int64, length + 1


def unravel(st: Structure, rep: np.ndarray | None, defs: np.ndarray | None, num_entries: int) -> list[LayerOut]:
    """Unravel canonical levels into per-layer validity and offsets (inner to outer)."""
    out: list[LayerOut] = []
    cmp = 0  # canonical codes consumed by the layers below
    peeled = 0
    nlayers = len(st.kinds)
    vis_max = st.vis_max
    for j, kind in enumerate(st.kinds):
        last = j == nlayers - 1
        n_entries = rep.size if rep is not None else (defs.size if defs is not None else num_entries)
        if kind == ITEM:
            if defs is None:
                out.append(LayerOut(ITEM, n_entries, None))
            else:
                d = defs
                if vis_max[peeled] < st.num_codes - 1:
                    vis = d <= vis_max[peeled]
                    if not vis.all():
                        d = d[vis]
                valid = d <= cmp
                out.append(LayerOut(ITEM, int(d.size), None if valid.all() else valid))
            cmp += 1
            continue
        # list layer
        null_c = st.code_start[j]
        empty_c = null_c + 1
        valid_level = cmp
        cmp += 2
        max_level = empty_c
        for k in st.kinds[j + 1 :]:
            if k == ITEM:
                max_level += 1
            else:
                break
        if rep is None:
            raise CorruptFileError(None, "list layer without repetition levels")
        S = np.flatnonzero(rep)  # entries starting a list at this layer (or one outside it)
        if defs is None:
            offsets = np.empty(S.size + 1, dtype=np.int64)
            offsets[:-1] = S
            offsets[-1] = rep.size
            out.append(LayerOut(LIST, int(S.size), None, offsets))
            dS = None
        else:
            dS = defs[S]
            # starts of null, empty or invisible lists are not items of this layer
            nonchild = dS > valid_level
            excl = np.cumsum(nonchild, dtype=np.int64)
            n_nonchild = int(excl[-1]) if excl.size else 0
            excl -= nonchild
            isl = dS <= max_level
            if isl.all():
                pos, before, d = S, excl, dS
            else:
                pos, before, d = S[isl], excl[isl], dS[isl]
            offsets = np.empty(pos.size + 1, dtype=np.int64)
            np.subtract(pos, before, out=offsets[:-1])
            offsets[-1] = rep.size - n_nonchild
            null = (d == null_c) | (d > empty_c)
            out.append(LayerOut(LIST, int(pos.size), ~null if null.any() else None, offsets))
        if not last:
            rep = rep[S] - 1
            defs = dS
        peeled += 1
    return out
