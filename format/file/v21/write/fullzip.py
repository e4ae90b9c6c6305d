"""The full-zip layout writer (file formats 2.1 and 2.2), for wide values.

Each level becomes one entry of buffer 0::

    [control word][value]

* the control word is ``(rep << bits_def) | def`` in 1, 2 or 4 bytes (absent
  when the page has neither repetition nor definition levels), where
  ``bits_rep``/``bits_def`` are the bit lengths of the largest levels;
* fixed-width values follow for every *visible* slot, null or not;
* variable-width values follow as ``[u32|u64 length][bytes]`` for visible
  valid slots only (a null value is just its control word).

Buffer 1, present for variable-width values or repetition, holds the byte
offset in buffer 0 where each top-level row starts, plus the end: ``rows + 1``
entries of 4 bytes (8 when buffer 0 exceeds 4 GiB).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ....protos import encodings21_pb2 as pb
from .repdef import PageLevels
from .values import FixedValues, LeafValues, VariableValues


def can_fullzip(values: LeafValues) -> bool:
    """Full-zip stores byte-aligned values only (no bit-sized values, no item validity)."""
    if isinstance(values, VariableValues):
        return True
    # packed struct rows stay in mini-blocks (as pylance writes them)
    return not values.is_bits and values.item_validity is None and values.packed is None


def _ranges_mask(total: int, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Boolean mask of ``total`` bytes, True inside each [start, start + length)."""
    keep = lengths > 0
    starts, lengths = starts[keep], lengths[keep]
    marks = np.zeros(total + 1, dtype=np.int8)
    marks[starts] = 1
    marks[starts + lengths] -= 1
    return np.cumsum(marks[:-1], dtype=np.int8).astype(bool)


def _control_words(levels: PageLevels) -> tuple[np.ndarray | None, int, int, int]:
    rep, defs = levels.rep, levels.defs
    bits_rep = int(rep.max()).bit_length() if rep is not None and len(rep) else 0
    bits_def = int(defs.max()).bit_length() if defs is not None and len(defs) else 0
    total = bits_rep + bits_def
    if total == 0:
        return None, 0, bits_rep, bits_def
    size = 1 if total <= 8 else 2 if total <= 16 else 4
    dtypes: dict[int, npt.DTypeLike] = {1: np.uint8, 2: "<u2", 4: "<u4"}
    dtype = dtypes[size]
    word = np.zeros(levels.num_levels, dtype=np.uint32)
    if rep is not None and bits_rep:
        word |= rep.astype(np.uint32) << bits_def
    if defs is not None and bits_def:
        word |= defs.astype(np.uint32)
    return word.astype(dtype).view(np.uint8).reshape(-1, size), size, bits_rep, bits_def


def encode_fullzip(levels: PageLevels, values: LeafValues, max_rep: int, num_rows: int):
    """Buffers and the PageLayout for a full-zip page."""
    ctrl, cw, bits_rep, bits_def = _control_words(levels)
    L = levels.num_levels
    visible = levels.visible
    nvis = values.n
    if isinstance(values, FixedValues):
        w = values.width
        value_len = np.full(nvis, w, dtype=np.int64)
    else:
        ob = values.offset_bits // 8
        lens = values.lengths()
        valid = np.ones(nvis, dtype=bool)
        if levels.defs is not None:
            vis_defs = levels.defs if visible is None else levels.defs[visible]
            valid = vis_defs == 0
        value_len = np.where(valid, ob + lens, 0)
    # per level: control word + value (invisible levels carry no value)
    entry_value = np.zeros(L, dtype=np.int64)
    if visible is None:
        entry_value[:] = value_len
    else:
        entry_value[visible] = value_len
    entry_size = cw + entry_value
    ends = np.cumsum(entry_size)
    total = int(ends[-1]) if L else 0
    starts = ends - entry_size

    if ctrl is None and isinstance(values, FixedValues):
        zipped = values.data  # plain concatenated values, zero-copy
    else:
        zipped = np.empty(total, dtype=np.uint8)
        if isinstance(values, FixedValues):
            vmask = _ranges_mask(total, starts + cw, entry_value)
            zipped[vmask] = values.data
            if ctrl is not None:
                zipped[~vmask] = ctrl.reshape(-1)
        else:
            if ctrl is not None:
                cmask = _ranges_mask(total, starts, np.full(L, cw, dtype=np.int64))
                zipped[cmask] = ctrl.reshape(-1)
            vis_starts = (starts if visible is None else starts[visible]) + cw
            valid_idx = np.flatnonzero(value_len > 0)
            len_bytes = lens[valid_idx].astype("<u4" if ob == 4 else "<u8").view(np.uint8)
            lmask = _ranges_mask(total, vis_starts[valid_idx], np.full(len(valid_idx), ob, dtype=np.int64))
            zipped[lmask] = len_bytes
            dmask = _ranges_mask(total, vis_starts[valid_idx] + ob, lens[valid_idx])
            o = values.offsets
            if len(valid_idx) == nvis:
                zipped[dmask] = values.data[int(o[0]) : int(o[-1])]
            else:
                keep = _ranges_mask(int(o[-1] - o[0]), o[:-1][valid_idx] - o[0], lens[valid_idx])
                zipped[dmask] = values.data[int(o[0]) : int(o[-1])][keep]

    layout = pb.PageLayout()
    fz = layout.full_zip_layout
    fz.bits_rep = bits_rep
    fz.bits_def = bits_def
    if isinstance(values, FixedValues):
        fz.bits_per_value = values.bits_per_value
    else:
        fz.bits_per_offset = values.offset_bits
    fz.num_items = L if levels.rep is not None else nvis
    fz.num_visible_items = nvis
    fz.value_compression.CopyFrom(values.encoding())
    fz.layers.extend(levels.layers)

    buffers = [zipped]
    if levels.rep is not None or isinstance(values, VariableValues):
        row_starts = starts if levels.rep is None else starts[levels.rep == max_rep]
        index = np.concatenate([row_starts, [total]])
        assert len(index) == num_rows + 1
        buffers.append(index.astype("<u4" if total <= 0xFFFFFFFF else "<u8"))
    return buffers, layout
