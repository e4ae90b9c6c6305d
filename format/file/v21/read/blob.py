"""Blob pages of file formats 2.1/2.2 (``BlobLayout``).

A blob column's page holds one description ``(position, size)`` per row,
stored with an inner page layout of its own (pylance 14: a mini-block page
of a packed struct of two u64, all valid).  The column's nullness is not in
the inner layout: ``BlobLayout.layers`` describes it, and a row that is null
(or, under a list, an empty or null list) has ``size`` 0 and its repetition
and definition levels packed into ``position`` as ``def << 16 | rep``.  An
empty value is ``(0, 0)``.  The page object here wraps the inner page, and
turns the descriptions it decodes back into levels.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ....errors import CorruptFileError, UnsupportedEncodingError
from ...blob import V1_DESCRIPTION
from .constant import AllNullPage
from .fullzip import FullZipPage
from .layout import ALL_VALID_ITEM, BlobInfo, check_layers
from .miniblock import MiniBlockPage
from .page import Piece, TakePlan
from .repdef import ITEM, Structure, canonical_defs


class BlobPage:
    """A blob column's page: the inner page's descriptions with the column's
    rep/def levels recovered from them (top-level blob columns)."""

    def __init__(self, page, info: BlobInfo, st: Structure, where: str) -> None:
        self.where = where
        if st.has_lists or len(st.kinds) != 1:
            raise UnsupportedEncodingError(
                f"{where}: a blob column inside a struct or list is not supported (only top-level blob columns)"
            )
        inner_layers = check_layers(getattr(info.inner, "layers", [ALL_VALID_ITEM]), where)
        if inner_layers != [ALL_VALID_ITEM]:
            raise UnsupportedEncodingError(f"{where}: blob descriptions with rep/def layers {inner_layers}")
        inner_st = Structure([ITEM])
        kinds = {"mini_block_layout": MiniBlockPage, "full_zip_layout": FullZipPage, "all_null_layout": AllNullPage}
        cls = kinds.get(info.inner_kind)
        if cls is None:
            raise UnsupportedEncodingError(f"{where}: blob descriptions in a {info.inner_kind}")
        self.inner = cls(page, info.inner, inner_st, V1_DESCRIPTION, f"{where}.blob_layout", None)
        self.lut = st.page_lut(info.layers, where)
        self.num_rows = self.inner.num_rows
        self.buffers = self.inner.buffers

    # the inner page plans and reads; only its pieces are turned into levels

    @property
    def meta_loaded(self) -> bool:
        return self.inner.meta_loaded

    def meta_ranges(self) -> list[tuple[int, int]]:
        return self.inner.meta_ranges()

    def set_meta(self, bufs) -> None:
        self.inner.set_meta(bufs)

    def data_ranges(self, a: int, b: int) -> list[tuple[int, int]]:
        return self.inner.data_ranges(a, b)

    def decode(self, a: int, b: int, bufs) -> Piece:
        return self._levels(self.inner.decode(a, b, bufs))

    def take_ranges(self, rows: np.ndarray) -> list[tuple[int, int]]:
        return self.inner.take_ranges(rows)

    def take(self, rows: np.ndarray, bufs) -> Piece:
        return self._levels(self.inner.take(rows, bufs))

    @property
    def planned_take(self) -> bool:
        return self.inner.planned_take

    def take_plan(self, rows: np.ndarray) -> tuple[TakePlan, np.ndarray, np.ndarray]:
        return self.inner.take_plan(rows)

    def take_planned(self, rows: np.ndarray, plan: TakePlan, data: np.ndarray, base: np.ndarray) -> Piece:
        return self._levels(self.inner.take_planned(rows, plan, data, base))

    def _levels(self, piece: Piece) -> Piece:
        desc = piece.values
        if not isinstance(desc, pa.StructArray) or desc.null_count:
            raise CorruptFileError(None, f"{self.where}: blob descriptions are not all-valid (position, size) pairs")
        pos = np.asarray(desc.field("position").to_numpy(zero_copy_only=False), dtype=np.uint64)
        size = np.asarray(desc.field("size").to_numpy(zero_copy_only=False), dtype=np.uint64)
        special = (size == 0) & (pos != 0)
        if not special.any():
            return Piece(None, None, desc, piece.num_rows, piece.num_levels)
        rep = (pos & np.uint64(0xFFFF)) * special
        if rep.any():
            raise CorruptFileError(None, f"{self.where}: a top-level blob column's description has a repetition level")
        page_defs = ((pos >> np.uint64(16)) & np.uint64(0xFFFF)) * special
        defs = canonical_defs(page_defs.astype(np.uint16), self.lut, self.where)
        return Piece(None, defs, desc, piece.num_rows, piece.num_levels)
