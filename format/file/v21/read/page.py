"""What every page decoder of file formats 2.1/2.2 shares: the base class, the
decoded :class:`Piece` and the row selection of ``take``.

The decoders are :mod:`.miniblock`, :mod:`.fullzip`, :mod:`.constant` (all-null/constant)
and :mod:`.blob`.

Each page object is built once per page (its layout is validated then) and
reads a row range in two steps, so a caller can batch the I/O of many pages:

1. ``meta_ranges()`` / ``set_meta(buffers)``: the small buffers needed to plan
   (mini-block chunk metadata, dictionary and repetition index; the full-zip
   row offsets; the levels of a constant page), read once and kept;
2. ``data_ranges(a, b)`` / ``decode(a, b, buffers)``: only the bytes holding
   rows ``[a, b)`` of the page (whole mini-block chunks, a full-zip byte range);
   or ``take_ranges(rows)`` / ``take(rows, buffers)`` for scattered rows: the
   mini-block chunks holding them (decoded together, values picked before
   expanding where the encoding allows), one full-zip range per row.

``decode`` returns a :class:`Piece`: the page's repetition levels, its
definition levels mapped to the column's canonical codes, and the values of
the visible items as an Arrow array of the leaf type (no validity yet).

A dictionary leaf (``out_type`` a dictionary type) decodes its values as the
dictionary's value type ``t``; a page with a dictionary gives a DictionaryArray
of its indices into the page's items, any other page its values encoded as
``out_type`` (:mod:`...dictionary`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ... import dictionary as ldict
from .layout import LIST_LAYERS, check_layers
from .repdef import Structure, canonical_defs, page_max_visible
from .values import as_u8

#: ``(chunks, slot, within)`` of a planned ``take`` (see ``MiniBlockPage._take_plan``)
TakePlan = tuple[np.ndarray, np.ndarray, np.ndarray]


#: what a layout message's rep/def layers mean for a leaf's structure, by
#: (id(message), id(structure)): the messages are shared by every page written
#: alike (the process's parsed layouts), so a file of small pages checks and
#: maps its layers once, not per page (the message and structure are held
#: in the value: an id is never taken for another object's)
_LAYER_INFO: dict[tuple[int, int], tuple] = {}
_LAYER_INFO_MAX = 4096


def layer_info(msg, st: Structure, where: str) -> tuple:
    """``(msg, st, layers, lut, max_visible, max_rep)`` of a page whose layout
    message is ``msg`` in a leaf of structure ``st`` (checked: CorruptFileError)."""
    key = (id(msg), id(st))
    hit = _LAYER_INFO.get(key)
    if hit is not None and hit[0] is msg and hit[1] is st:
        return hit
    layers = tuple(check_layers(msg.layers, where))
    lut = st.page_lut(layers, where)
    lut.flags.writeable = False  # shared by every page with this layout
    hit = (msg, st, layers, lut, page_max_visible(layers), sum(1 for lay in layers if lay in LIST_LAYERS))
    if len(_LAYER_INFO) >= _LAYER_INFO_MAX:
        _LAYER_INFO.clear()
    _LAYER_INFO[key] = hit
    return hit


@dataclass
class Piece:
    rep: np.ndarray | None
    defs: np.ndarray | None  # canonical codes
    values: pa.Array
    num_rows: int
    num_levels: int


def joined_buffers(bufs) -> tuple[np.ndarray, np.ndarray]:
    """``(data, starts)``: the buffers as one uint8 array and where each starts.

    Slices of one parent buffer (a memory-mapped file) are not copied: the
    parent is used as is.  Others are joined into a new buffer."""
    if len(bufs) == 1:
        return as_u8(bufs[0]), np.zeros(1, dtype=np.int64)
    parent = getattr(bufs[0], "parent", None)
    if parent is not None and all(
        getattr(b, "parent", None) is not None and b.parent.address == parent.address for b in bufs
    ):
        starts = np.fromiter((b.address for b in bufs), dtype=np.int64, count=len(bufs)) - parent.address
        return np.frombuffer(parent, dtype=np.uint8), starts
    sizes = np.fromiter((b.size if hasattr(b, "size") else len(b) for b in bufs), dtype=np.int64, count=len(bufs))
    return np.frombuffer(b"".join(bufs), dtype=np.uint8), np.cumsum(sizes) - sizes


class PageBase:
    """One page of a leaf column: its buffers, layers and the two-step reads above."""

    def __init__(self, page, st: Structure, t: pa.DataType, where: str, out_type: pa.DataType | None = None) -> None:
        self.where = where
        self.st = st
        self.t = t
        #: the dictionary type of a dictionary leaf (its values are of type ``t``)
        self.out = out_type if out_type is not None and pa.types.is_dictionary(out_type) else None
        self.num_rows = int(page.length)
        # a tuple of tuples of numbers: pages stay in the parsed-tail cache, and
        # these are no work for the garbage collector (lists would be)
        self.buffers = tuple(zip(page.buffer_offsets, page.buffer_sizes))  # protobuf gives Python ints
        self.meta_loaded = False

    def _init_layers(self, msg) -> None:
        """The page's layout message and its rep/def layers (mini-block and full-zip pages)."""
        self.msg = msg
        _, _, self.layers, self.lut, self.max_visible, self.max_rep = layer_info(msg, self.st, self.where)

    def _finish(self, rep, page_defs, values: pa.Array, num_rows: int, num_levels: int) -> Piece:
        defs = canonical_defs(page_defs, self.lut, self.where)
        if self.out is not None:
            values = ldict.as_dictionary(values, self.out, self.where)
        return Piece(rep, defs, values, num_rows, num_levels)

    def meta_ranges(self) -> list[tuple[int, int]]:
        return []

    def set_meta(self, bufs) -> None:
        self.meta_loaded = True

    def data_ranges(self, a: int, b: int) -> list[tuple[int, int]]:
        raise NotImplementedError  # pragma: no cover - overridden

    def decode(self, a: int, b: int, bufs) -> Piece:
        raise NotImplementedError  # pragma: no cover - overridden

    def whole_ranges(self):
        """The byte ranges of every row of the page (``data_ranges(0, num_rows)``)."""
        return self.data_ranges(0, self.num_rows)

    # ``take``: rows given as a sorted array of distinct page-relative rows.
    # By default the span from the first to the last row is decoded and the
    # rows picked from it; subclasses fetch and decode less where they can.

    def take_ranges(self, rows: np.ndarray) -> list[tuple[int, int]]:
        return self.data_ranges(int(rows[0]), int(rows[-1]) + 1)

    @property
    def planned_take(self) -> bool:
        """Whether ``take_plan`` / ``take_planned`` apply (see MiniBlockPage)."""
        return False

    def take_plan(self, rows: np.ndarray) -> tuple[TakePlan, np.ndarray, np.ndarray]:
        raise NotImplementedError  # pragma: no cover - only called where ``planned_take`` is true

    def take_planned(self, rows: np.ndarray, plan: TakePlan, data: np.ndarray, base: np.ndarray) -> Piece:
        raise NotImplementedError  # pragma: no cover - only called where ``planned_take`` is true

    def take(self, rows: np.ndarray, bufs) -> Piece:
        a = int(rows[0])
        piece = self.decode(a, int(rows[-1]) + 1, bufs)
        return select_rows(piece, rows - a, self.st)


def select_rows(piece: Piece, rows: np.ndarray, st: Structure) -> Piece:
    """The rows ``rows`` (sorted, distinct, relative to the piece) of a piece."""
    if rows.size == piece.num_rows:
        return piece
    if piece.rep is None:
        defs = piece.defs[rows] if piece.defs is not None else None
        return Piece(None, defs, piece.values.take(pa.array(rows)), int(rows.size), int(rows.size))
    starts = np.flatnonzero(piece.rep == st.max_rep)
    ends = np.append(starts[1:], piece.rep.size)
    s, e = starts[rows], ends[rows]
    n = e - s
    first = np.cumsum(n) - n
    lv = np.arange(int(n.sum()), dtype=np.int64) + np.repeat(s - first, n)
    if piece.defs is None:
        vpos = lv
        defs = None
    else:
        visible = piece.defs <= st.max_visible
        vpos = (np.cumsum(visible) - 1)[lv[visible[lv]]]
        defs = piece.defs[lv]
    return Piece(piece.rep[lv], defs, piece.values.take(pa.array(vpos)), int(rows.size), int(lv.size))
