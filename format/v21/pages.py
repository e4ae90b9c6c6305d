"""Page decoders of file formats 2.1/2.2: mini-block, full-zip, all-null/constant.

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
``out_type`` (:mod:`..dictionary`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .. import dictionary as ldict
from ..errors import CorruptFileError, UnsupportedEncodingError
from . import compressive as cz
from .layout import DEF_LEVELS, LIST_LAYERS, NULL_AND_EMPTY_LIST, NULLABLE_ITEM, NULLABLE_LIST, check_layers
from .repdef import Structure, canonical_defs, page_max_visible
from .values import Fixed, as_u8, is_var, repeat_scalar, to_arrow, uint_at

#: ``(chunks, slot, within)`` of a planned ``take`` (see ``MiniBlockPage._take_plan``)
TakePlan = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass
class Piece:
    rep: np.ndarray | None
    defs: np.ndarray | None  # canonical codes
    values: pa.Array
    num_rows: int
    num_levels: int


def _ceil8(x):
    return (x + 7) // 8 * 8


def _joined(bufs) -> tuple[np.ndarray, np.ndarray]:
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


class _PageBase:
    def __init__(self, page, st: Structure, t: pa.DataType, where: str, out_type: pa.DataType | None = None) -> None:
        self.where = where
        self.st = st
        self.t = t
        #: the dictionary type of a dictionary leaf (its values are of type ``t``)
        self.out = out_type if out_type is not None and pa.types.is_dictionary(out_type) else None
        self.num_rows = int(page.length)
        self.buffers = list(zip((int(o) for o in page.buffer_offsets), (int(n) for n in page.buffer_sizes)))
        self.meta_loaded = False

    def _init_layers(self, msg) -> None:
        """The page's layout message and its rep/def layers (mini-block and full-zip pages)."""
        self.msg = msg
        self.layers = check_layers(msg.layers, self.where)
        self.lut = self.st.page_lut(self.layers, self.where)
        self.max_visible = page_max_visible(self.layers)
        self.max_rep = sum(1 for lay in self.layers if lay in LIST_LAYERS)

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


# --------------------------------------------------------------------- mini-block


class MiniBlockPage(_PageBase):
    def __init__(
        self, page, msg, st: Structure, t: pa.DataType, where: str, out_type: pa.DataType | None = None
    ) -> None:
        super().__init__(page, st, t, where, out_type)
        self._init_layers(msg)
        self.has_rep = msg.HasField("rep_compression")
        self.has_def = msg.HasField("def_compression")
        if self.has_rep != (self.max_rep > 0):
            raise CorruptFileError(None, f"{where}: repetition levels do not match the page's list layers")
        if not msg.HasField("value_compression"):
            raise CorruptFileError(None, f"{where}: mini-block page without a value encoding")
        self.large = bool(msg.has_large_chunk)
        self.num_buffers = int(msg.num_buffers)
        self.num_items = int(msg.num_items)
        self.depth = int(msg.repetition_index_depth)
        self.has_dict = msg.HasField("dictionary")
        want = 2 + int(self.has_dict) + int(self.depth > 0)
        if len(self.buffers) != want:
            raise CorruptFileError(None, f"{where}: mini-block page has {len(self.buffers)} buffers, expected {want}")
        if self.num_buffers < 1:
            raise CorruptFileError(None, f"{where}: mini-block chunks without value buffers")

    def meta_ranges(self):
        r = [self.buffers[0]]
        if self.has_dict:
            r.append(self.buffers[2])
        if self.depth > 0:
            r.append(self.buffers[-1])
        return r

    def set_meta(self, bufs) -> None:
        w = self.where
        meta = as_u8(bufs[0])
        wsize = 4 if self.large else 2
        if meta.size % wsize:
            raise CorruptFileError(None, f"{w}: chunk metadata of {meta.size} bytes")
        words = np.frombuffer(meta.tobytes(), dtype=f"<u{wsize}").astype(np.int64)
        nchunks = words.size
        self.chunk_bytes = ((words >> 4) + 1) * 8
        logs = words & 0xF
        counts = np.left_shift(np.int64(1), logs)
        if nchunks:
            rest = self.num_items - int(counts[:-1].sum())
            if rest < 0 or (logs[-1] and counts[-1] != rest):
                raise CorruptFileError(None, f"{w}: chunk value counts do not add up to {self.num_items} items")
            counts[-1] = rest
        elif self.num_items:
            raise CorruptFileError(None, f"{w}: {self.num_items} items but no chunks")
        self.counts = counts
        self.item_start = np.cumsum(counts) - counts
        self.chunk_off = np.cumsum(self.chunk_bytes) - self.chunk_bytes
        if nchunks and int(self.chunk_off[-1] + self.chunk_bytes[-1]) > self.buffers[1][1]:
            raise CorruptFileError(None, f"{w}: chunks run past the end of the page's data buffer")
        i = 1
        self.dict_items = None
        if self.has_dict:
            n = int(self.msg.num_dictionary_items)
            items = cz.block_values(self.msg.dictionary, bufs[i], n, f"{w}.dictionary")
            self.dict_items = to_arrow(items, self.t)
            i += 1
        self.first_row = None
        if self.depth > 0:
            idx = as_u8(bufs[i])
            stride = self.depth + 1
            if idx.size != nchunks * stride * 8:
                raise CorruptFileError(None, f"{w}: repetition index of {idx.size} bytes for {nchunks} chunks")
            ri = np.frombuffer(idx.tobytes(), dtype="<u8").astype(np.int64).reshape(nchunks, stride)
            ends, partial = ri[:, 0], ri[:, 1]
            trailer = partial > 0
            preamble = np.zeros(nchunks, dtype=bool)
            preamble[1:] = trailer[:-1]
            sit = ends + trailer - preamble
            if np.any(sit < 0) or int(sit.sum()) != self.num_rows:
                raise CorruptFileError(None, f"{w}: repetition index does not add up to {self.num_rows} rows")
            self.sit = sit
            self.preamble = preamble
            self.first_row = np.cumsum(sit) - sit
        elif self.has_rep:
            pass  # no index: every read decodes the whole page
        elif self.num_items != self.num_rows:
            raise CorruptFileError(None, f"{w}: {self.num_items} items in a page of {self.num_rows} rows without lists")
        self.meta_loaded = True

    @staticmethod
    def _row_chunk(first_row: np.ndarray, r: int) -> int:
        return int(np.searchsorted(first_row, r, side="right")) - 1

    def _chunk_range(self, a: int, b: int) -> tuple[int, int]:
        n = self.counts.size
        if not self.has_rep:
            c0 = int(np.searchsorted(self.item_start, a, side="right")) - 1
            c1 = int(np.searchsorted(self.item_start, b, side="left")) - 1
            return c0, c1
        first_row = self.first_row
        if first_row is None:
            return 0, n - 1
        c0 = self._row_chunk(first_row, a)
        if b >= self.num_rows:
            return c0, n - 1
        kb = self._row_chunk(first_row, b)
        if b > first_row[kb] or self.preamble[kb]:
            return c0, kb
        return c0, kb - 1

    def data_ranges(self, a: int, b: int):
        c0, c1 = self._chunk_range(a, b)
        off, _ = self.buffers[1]
        start = int(self.chunk_off[c0])
        end = int(self.chunk_off[c1] + self.chunk_bytes[c1])
        return [(off + start, end - start)]

    def _decode_chunks(self, data: np.ndarray, base: np.ndarray, chunks: np.ndarray, pick=None, at=None):
        """Decode the chunks ``chunks`` (indices, ascending) whose bytes start at
        ``base`` in ``data``; returns (rep, defs, values, value count, picked).

        ``pick``: positions of the values wanted (in the decoded chunks); an
        encoding that can skip the others (FSST, inline bit-packing, flat)
        returns just those, and ``picked`` says so; ``at``: optionally the
        same positions as (index into ``chunks``, position in the chunk)."""
        w = self.where
        cbytes = self.chunk_bytes[chunks]
        counts = self.counts[chunks]
        if data.size < int(base[-1] + cbytes[-1]):
            raise CorruptFileError(None, f"{w}: chunk data truncated")
        bw = 4 if self.large else 2
        header = 2 * (1 + bool(self.has_rep) + bool(self.has_def)) + self.num_buffers * bw
        if np.any(cbytes < header) or np.any(base + cbytes > data.size):
            raise CorruptFileError(
                None, f"{w}: a chunk is smaller than its header ({header} bytes) or lies outside the data"
            )
        # the level count is only needed to decode levels
        nlev = cz.u16(data, base) if self.has_rep or self.has_def else None
        pos = base + 2
        rep_size = def_size = None
        if self.has_rep:
            rep_size = cz.u16(data, pos)
            pos = pos + 2
        if self.has_def:
            def_size = cz.u16(data, pos)
            pos = pos + 2
        sizes = [uint_at(data, pos + k * bw, bw) for k in range(self.num_buffers)]
        cur = _ceil8(pos + self.num_buffers * bw)
        rep = defs = None
        if self.has_rep:
            assert rep_size is not None and nlev is not None  # both read above for a page with rep levels
            rep = cz.chunk_levels(self.msg.rep_compression, data, cur, rep_size, nlev, f"{w}.rep_compression")
            cur = _ceil8(cur + rep_size)
        if self.has_def:
            assert def_size is not None and nlev is not None  # both read above for a page with def levels
            defs = cz.chunk_levels(self.msg.def_compression, data, cur, def_size, nlev, f"{w}.def_compression")
            cur = _ceil8(cur + def_size)
        starts = []
        for k in range(self.num_buffers):
            starts.append(cur)
            cur = _ceil8(cur + sizes[k])
        if np.any(cur > base + cbytes):
            raise CorruptFileError(None, f"{w}: chunk contents overrun the chunk size in the metadata")
        if not self.has_rep and self.has_def and (nlev is None or not np.array_equal(nlev, counts)):
            raise CorruptFileError(None, f"{w}: chunk level counts differ from value counts")
        ch = cz.Chunks([data] * self.num_buffers, starts, sizes, counts)
        total = int(counts.sum())
        picked = False
        if pick is not None and not self.has_dict:
            vals, picked = cz.miniblock_pick(self.msg.value_compression, ch, f"{w}.value_compression", pick, at)
        else:
            vals = cz.miniblock_values(self.msg.value_compression, ch, f"{w}.value_compression")
        want = pick.size if picked else total
        if vals.n != want:
            raise CorruptFileError(None, f"{w}: decoded {vals.n} values, chunks hold {want}")
        return rep, defs, vals, total, picked

    def _values_array(self, vals, defs, sel=None) -> pa.Array:
        """Arrow values of the decoded ``vals`` (``sel``: a slice or positions)."""
        if self.has_dict:
            items = self.dict_items
            assert items is not None  # set_meta decodes the dictionary of a page that has one
            idx = vals.typed() if isinstance(vals, Fixed) else None
            if idx is None:
                raise CorruptFileError(None, f"{self.where}: dictionary indices are not fixed-width integers")
            if sel is not None:
                idx = idx[sel]
            if idx.size and int(idx.max()) >= len(items):
                idx = self._check_null_indices(idx, defs, len(items))
            if self.out is not None:  # a dictionary leaf keeps the page's dictionary
                if len(items) == 0:  # every value null (checked above)
                    return pa.nulls(idx.size, self.out)
                return ldict.from_indices(idx, items, self.out, where=self.where)
            return items.take(pa.array(idx))
        arr = to_arrow(vals, self.t)
        if isinstance(sel, slice):
            if sel.start or sel.stop != len(arr):
                arr = arr.slice(sel.start, sel.stop - sel.start)
        elif sel is not None:
            arr = arr.take(pa.array(sel))
        return arr

    def _take_plan(self, rows: np.ndarray):
        """``(chunks, slot, within)`` for sorted distinct ``rows``: the chunks
        holding them (ascending), each row's index into ``chunks`` and its
        position inside its chunk."""
        which = np.searchsorted(self.item_start, rows, side="right") - 1
        n = which.size
        if n > 1:
            new = np.empty(n, dtype=bool)
            new[0] = True
            np.not_equal(which[1:], which[:-1], out=new[1:])
            chunks = which[new]
            slot = np.cumsum(new) - 1
        else:
            chunks, slot = which, np.zeros(n, dtype=np.int64)
        return chunks, slot, rows - self.item_start[which]

    def take_ranges(self, rows: np.ndarray):
        if self.has_rep:
            return super().take_ranges(rows)
        off, _ = self.buffers[1]
        chunks = self._take_plan(rows)[0]
        return [
            (off + int(o), int(n)) for o, n in zip(self.chunk_off[chunks].tolist(), self.chunk_bytes[chunks].tolist())
        ]

    def take(self, rows: np.ndarray, bufs) -> Piece:
        """Only the chunks holding ``rows`` are fetched and decoded, all at once."""
        if self.has_rep:
            return super().take(rows, bufs)
        plan = self._take_plan(rows)
        data, base = _joined(bufs)  # one buffer per chunk
        return self._take_from(rows, plan, data, base)

    @property
    def planned_take(self) -> bool:
        """Whether ``take_plan`` / ``take_planned`` apply (no lists)."""
        return not self.has_rep

    def take_plan(self, rows: np.ndarray):
        """``(plan, offsets, sizes)``: the chunks holding ``rows`` and their
        byte ranges in the file, as arrays."""
        plan = self._take_plan(rows)
        chunks = plan[0]
        return plan, self.buffers[1][0] + self.chunk_off[chunks], self.chunk_bytes[chunks]

    def take_planned(self, rows: np.ndarray, plan, data: np.ndarray, base: np.ndarray) -> Piece:
        """``take`` of the planned chunks, found at ``base`` in ``data``."""
        return self._take_from(rows, plan, data, base)

    def _take_from(self, rows: np.ndarray, plan, data: np.ndarray, base: np.ndarray) -> Piece:
        chunks, slot, within = plan
        counts = self.counts[chunks]
        first_value = np.cumsum(counts) - counts
        pos = first_value[slot] + within
        _, defs, vals, _, picked = self._decode_chunks(data, base, chunks, pick=pos, at=(slot, within))
        if defs is not None:
            defs = defs[pos]
        arr = self._values_array(vals, defs, None if picked else pos)
        return self._finish(None, defs, arr, int(rows.size), int(rows.size))

    def decode(self, a: int, b: int, bufs) -> Piece:
        w = self.where
        c0, c1 = self._chunk_range(a, b)
        data = as_u8(bufs[0])
        base = self.chunk_off[c0 : c1 + 1] - self.chunk_off[c0]
        rep, defs, vals, total, _ = self._decode_chunks(data, base, np.arange(c0, c1 + 1))
        # rows [a, b) within the decoded chunks
        if not self.has_rep:
            i0 = a - int(self.item_start[c0])
            i1 = b - int(self.item_start[c0])
            if defs is not None:
                defs = defs[i0:i1]
            nlevels = i1 - i0
        else:
            starts_r = np.flatnonzero(rep == self.max_rep)
            fr0 = int(self.first_row[c0]) if self.first_row is not None else 0
            ra, rb = a - fr0, b - fr0
            if ra < 0 or rb > starts_r.size:
                raise CorruptFileError(None, f"{w}: repetition levels do not match the repetition index")
            la = int(starts_r[ra])
            lb = int(starts_r[rb]) if rb < starts_r.size else rep.size
            if defs is not None:
                visible = defs <= self.max_visible
                if int(np.count_nonzero(visible)) != total:
                    raise CorruptFileError(None, f"{w}: {total} values but a different number of visible levels")
                i0 = int(np.count_nonzero(visible[:la]))
                i1 = i0 + int(np.count_nonzero(visible[la:lb]))
                defs = defs[la:lb]
            else:
                if rep.size != total:
                    raise CorruptFileError(None, f"{w}: {total} values for {rep.size} levels")
                i0, i1 = la, lb
            rep = rep[la:lb]
            nlevels = lb - la
        arr = self._values_array(vals, defs, slice(i0, i1))
        return self._finish(rep, defs, arr, b - a, nlevels)

    def _check_null_indices(self, idx: np.ndarray, defs, num_items: int) -> np.ndarray:
        """Out-of-range indices (``num_items`` dictionary items) are only allowed
        on null items; point them at item 0."""
        bad = idx >= num_items
        if defs is not None:
            vis = defs[defs <= self.max_visible] if self.has_rep else defs
            if not np.any(bad & (vis == 0)):
                idx = idx.copy()
                idx[bad] = 0
                return idx
        raise CorruptFileError(None, f"{self.where}: dictionary index {int(idx.max())} out of range")


# --------------------------------------------------------------------- full-zip


class FullZipPage(_PageBase):
    def __init__(
        self, page, msg, st: Structure, t: pa.DataType, where: str, out_type: pa.DataType | None = None
    ) -> None:
        super().__init__(page, st, t, where, out_type)
        self._init_layers(msg)
        self.bits_rep = int(msg.bits_rep)
        self.bits_def = int(msg.bits_def)
        if (self.bits_rep > 0) != (self.max_rep > 0):
            raise CorruptFileError(None, f"{where}: control words do not match the page's list layers")
        total = self.bits_rep + self.bits_def
        self.cw = 0 if total == 0 else 1 if total <= 8 else 2 if total <= 16 else 4
        if not msg.HasField("value_compression"):
            raise CorruptFileError(None, f"{where}: full-zip page without a value encoding")
        details = msg.WhichOneof("details")
        if details == "bits_per_value":
            self.variable = False
            bits = int(msg.bits_per_value)
            enc_bits = cz.fixed_value_bits(msg.value_compression, f"{where}.value_compression")
            if bits % 8 or bits <= 0 or (enc_bits and enc_bits != bits):
                raise UnsupportedEncodingError(f"{where}: full-zip values of {bits} bits")
            self.bpv = bits // 8
        elif details == "bits_per_offset":
            self.variable = True
            bits = int(msg.bits_per_offset)
            if bits not in (32, 64):
                raise UnsupportedEncodingError(f"{where}: full-zip lengths of {bits} bits")
            self.lw = bits // 8
        else:
            raise CorruptFileError(None, f"{where}: full-zip layout without value width")
        if len(self.buffers) not in (1, 2):
            raise CorruptFileError(None, f"{where}: full-zip page with {len(self.buffers)} buffers")
        self.has_index = len(self.buffers) == 2
        if not self.has_index and (self.variable or self.max_rep):
            raise CorruptFileError(None, f"{where}: variable-width or repeated full-zip page without row offsets")
        if not self.has_index:
            self.meta_loaded = True
            if self.buffers[0][1] != self.num_rows * (self.cw + self.bpv):
                raise CorruptFileError(None, f"{where}: full-zip data size does not match {self.num_rows} rows")

    def meta_ranges(self):
        return [self.buffers[1]] if self.has_index else []

    def set_meta(self, bufs) -> None:
        if self.has_index:
            raw = as_u8(bufs[0])
            n = self.num_rows + 1
            if raw.size % n or raw.size // n not in (1, 2, 4, 8):
                raise CorruptFileError(
                    None, f"{self.where}: row offset table of {raw.size} bytes for {self.num_rows} rows"
                )
            width = raw.size // n
            self.row_off = np.frombuffer(raw.tobytes(), dtype=f"<u{width}").astype(np.int64)
            if np.any(np.diff(self.row_off) < 0) or int(self.row_off[-1]) > self.buffers[0][1]:
                raise CorruptFileError(None, f"{self.where}: row offsets out of range")
        self.meta_loaded = True

    def data_ranges(self, a, b):
        off = self.buffers[0][0]
        if self.has_index:
            s, e = int(self.row_off[a]), int(self.row_off[b])
        else:
            stride = self.cw + self.bpv
            s, e = a * stride, b * stride
        return [(off + s, e - s)]

    def _ctrl(self, data, pos):
        word = uint_at(data, pos, self.cw)
        if self.bits_rep and self.bits_def:
            return word >> self.bits_def, word & ((1 << self.bits_def) - 1)
        if self.bits_rep:
            return word, None
        return None, word

    def take_ranges(self, rows: np.ndarray):
        """One byte range per row (rows are self-contained in a full-zip page)."""
        off = self.buffers[0][0]
        if self.has_index:
            s, e = self.row_off[rows], self.row_off[rows + 1]
        else:
            stride = self.cw + self.bpv
            s = rows * stride
            e = s + stride
        return [(off + a, b - a) for a, b in zip(s.tolist(), e.tolist())]

    def take(self, rows: np.ndarray, bufs) -> Piece:
        data = np.frombuffer(b"".join(bufs), dtype=np.uint8) if len(bufs) != 1 else as_u8(bufs[0])
        rel = None
        if self.has_index:
            sizes = self.row_off[rows + 1] - self.row_off[rows]
            rel = np.concatenate(([0], np.cumsum(sizes)))
        return self._decode_rows(data, int(rows.size), rel)

    def decode(self, a, b, bufs) -> Piece:
        rel = self.row_off[a : b + 1] - self.row_off[a] if self.has_index else None
        return self._decode_rows(as_u8(bufs[0]), b - a, rel)

    def _decode_rows(self, data: np.ndarray, n: int, rel: np.ndarray | None) -> Piece:
        """Decode ``n`` whole rows laid out back to back in ``data``; ``rel``:
        their n + 1 byte offsets (None: fixed-width rows without lists)."""
        w = self.where
        enc = self.msg.value_compression
        if not self.variable and self.max_rep == 0:
            stride = self.cw + self.bpv
            if data.size != n * stride:
                raise CorruptFileError(None, f"{w}: full-zip data size does not match the rows")
            rows = data.reshape(n, stride)
            defs = None
            if self.cw:
                _, defs = self._ctrl(data, np.arange(n, dtype=np.int64) * stride)
            vals = cz.fixed_per_value(enc, rows[:, self.cw :], n, f"{w}.value_compression")
            return self._finish(None, defs, to_arrow(vals, self.t), n, n)
        # variable-width and repeated pages have row offsets (checked in __init__)
        assert rel is not None
        if self.max_rep == 0:
            # one entry per row: [ctrl][len][bytes] or just [ctrl] for a null
            pos = rel[:-1]
            size = np.diff(rel)
            _, defs = self._ctrl(data, pos) if self.cw else (None, None)
            valid = np.ones(n, dtype=bool) if defs is None else defs == 0
            lens = np.zeros(n, dtype=np.int64)
            if valid.any():
                lens[valid] = uint_at(data, pos[valid] + self.cw, self.lw)
            if not np.array_equal(size, np.where(valid, self.cw + self.lw + lens, self.cw)):
                raise CorruptFileError(None, f"{w}: full-zip value sizes do not match the row offsets")
            hdr = self.cw + self.lw
            mask = np.ones(data.size, dtype=bool)
            if hdr:
                idx = (pos[valid][:, None] + np.arange(hdr)).reshape(-1)
                mask[idx] = False
                if self.cw and not valid.all():
                    mask[(pos[~valid][:, None] + np.arange(self.cw)).reshape(-1)] = False
            payload = data[mask] if hdr else data
            offsets = np.concatenate(([0], np.cumsum(lens)))
            v = cz.var_per_value(enc, offsets, payload, f"{w}.value_compression")
            return self._finish(None, defs, to_arrow(v, self.t), n, n)
        return self._decode_repeated(n, data, rel)

    def _decode_repeated(self, n, data, rel) -> Piece:
        """Rows with lists: entries are walked row-parallel (one step per list position)."""
        w = self.where
        p = rel[:-1].copy()
        end = rel[1:]
        rec_row, rec_j, rec_pos, rec_rep, rec_def, rec_len, rec_has = [], [], [], [], [], [], []
        active = np.flatnonzero(p < end)
        j = 0
        while active.size:
            pa_ = p[active]
            if np.any(pa_ + self.cw > end[active]):
                raise CorruptFileError(None, f"{w}: control word runs past its row")
            rep, defs = self._ctrl(data, pa_)
            visible = np.ones(active.size, dtype=bool) if defs is None else defs <= self.max_visible
            if self.variable:
                has = visible.copy() if defs is None else visible & (defs == 0)
                ln = np.zeros(active.size, dtype=np.int64)
                if has.any():
                    ln[has] = uint_at(data, pa_[has] + self.cw, self.lw)
                size = self.cw + np.where(has, self.lw + ln, 0)
            else:
                has = visible
                ln = np.where(has, self.bpv, 0)
                size = self.cw + ln
            rec_row.append(active)
            rec_j.append(np.full(active.size, j))
            rec_pos.append(pa_)
            rec_rep.append(rep)
            rec_def.append(defs if defs is not None else np.zeros(active.size, dtype=np.int64))
            rec_len.append(ln)
            rec_has.append(has)
            p[active] = pa_ + size
            if np.any(p[active] > end[active]):
                raise CorruptFileError(None, f"{w}: full-zip entry runs past its row")
            active = active[p[active] < end[active]]
            j += 1
        if not rec_row:
            raise CorruptFileError(None, f"{w}: full-zip rows without entries")
        row = np.concatenate(rec_row)
        order = np.lexsort((np.concatenate(rec_j), row))
        pos = np.concatenate(rec_pos)[order]
        rep = np.concatenate(rec_rep)[order].astype(np.uint16)
        defs = np.concatenate(rec_def)[order].astype(np.uint16) if self.bits_def else None
        ln = np.concatenate(rec_len)[order]
        has = np.concatenate(rec_has)[order]
        if np.any(rep[np.r_[0, np.flatnonzero(np.diff(row[order])) + 1]] != self.max_rep):
            raise CorruptFileError(None, f"{w}: a full-zip row does not start a new row")
        mask = np.ones(data.size, dtype=bool)
        if self.cw:
            mask[(pos[:, None] + np.arange(self.cw)).reshape(-1)] = False
        if self.variable and has.any():
            mask[((pos[has] + self.cw)[:, None] + np.arange(self.lw)).reshape(-1)] = False
        payload = data[mask]
        enc = self.msg.value_compression
        visible = np.ones(rep.size, dtype=bool) if defs is None else defs <= self.max_visible
        if self.variable:
            lens = ln[visible]
            offsets = np.concatenate(([0], np.cumsum(lens)))
            v = cz.var_per_value(enc, offsets, payload, f"{w}.value_compression")
        else:
            nv = int(np.count_nonzero(visible))
            if payload.size != nv * self.bpv:
                raise CorruptFileError(None, f"{w}: full-zip payload size mismatch")
            v = cz.fixed_per_value(enc, payload.reshape(nv, self.bpv), nv, f"{w}.value_compression")
        return self._finish(rep, defs, to_arrow(v, self.t), n, int(rep.size))


# --------------------------------------------------------------------- all-null / constant


class AllNullPage(_PageBase):
    """AllNullLayout: no values (2.1), or (2.2) a constant page when a value is stored."""

    def __init__(
        self, page, info, st: Structure, t: pa.DataType, where: str, out_type: pa.DataType | None = None
    ) -> None:
        super().__init__(page, st, t, where, out_type)
        self.info = info
        self.layers = info.layers
        self.lut = st.page_lut(self.layers, where)
        self.max_visible = page_max_visible(self.layers)
        self.max_rep = sum(1 for lay in self.layers if lay in LIST_LAYERS)
        nb = len(self.buffers)
        inline = info.constant_value is not None
        # buffer count -> index of the (value, rep, def) buffer, None: not stored
        layout: dict[int, tuple[int | None, int | None, int | None]]
        if inline:
            layout = {0: (None, None, None), 2: (None, 0, 1)}
        else:
            layout = {0: (None, None, None), 1: (0, None, None), 2: (None, 0, 1), 3: (0, 1, 2)}
        if nb not in layout:
            raise CorruptFileError(None, f"{where}: all-null/constant page with {nb} buffers")
        self.value_buf, self.rep_buf, self.def_buf = layout[nb]
        self.is_constant = inline or self.value_buf is not None
        if self.max_rep and self.rep_buf is None:
            raise CorruptFileError(None, f"{where}: page with list layers but no repetition levels")

    def meta_ranges(self):
        return [b for b in self.buffers]

    def set_meta(self, bufs) -> None:
        w = self.where
        info = self.info
        self.scalar = None
        if info.constant_value is not None:
            self.scalar = _inline_scalar(info.constant_value, self.t, w)
        elif self.value_buf is not None:
            self.scalar = _buffer_scalar(as_u8(bufs[self.value_buf]), self.t, w)
        rep = defs = None
        if self.rep_buf is not None and self.buffers[self.rep_buf][1]:
            rep = self._levels(bufs[self.rep_buf], info.rep_compression, info.num_rep_values, "rep")
        if self.def_buf is not None and self.buffers[self.def_buf][1]:
            defs = self._levels(bufs[self.def_buf], info.def_compression, info.num_def_values, "def")
        if self.max_rep and rep is None:
            raise CorruptFileError(None, f"{w}: page with list layers but no repetition levels")
        if rep is not None and defs is not None and rep.size != defs.size:
            raise CorruptFileError(None, f"{w}: {rep.size} repetition and {defs.size} definition levels")
        if defs is None and not self.is_constant:
            # every item is null at the innermost nullable layer
            code = 1
            for lay in self.layers:
                if lay == NULLABLE_ITEM or lay == NULLABLE_LIST or lay == NULL_AND_EMPTY_LIST:
                    break
                code += DEF_LEVELS[lay]
            else:
                raise CorruptFileError(None, f"{w}: all-null page whose layers hold no nulls")
            n = rep.size if rep is not None else self.num_rows
            defs = np.full(n, code, dtype=np.uint16)
        if defs is not None and not self.is_constant:
            vis = defs <= self.max_visible if self.max_rep else np.ones(defs.size, dtype=bool)
            if np.any(defs[vis] == 0):
                raise CorruptFileError(None, f"{w}: all-null page has valid items")
        self.rep, self.defs = rep, defs
        if rep is not None:
            self.row_starts = np.flatnonzero(rep == self.max_rep)
            if self.row_starts.size != self.num_rows or (rep.size and self.row_starts[0] != 0):
                raise CorruptFileError(
                    None, f"{w}: levels describe {self.row_starts.size} rows, page has {self.num_rows}"
                )
        elif defs is not None and defs.size != self.num_rows:
            raise CorruptFileError(None, f"{w}: {defs.size} levels for {self.num_rows} rows")
        self.meta_loaded = True

    def _levels(self, buf, enc, count, what):
        raw = as_u8(buf)
        if enc is not None:
            if count is None:
                raise CorruptFileError(None, f"{self.where}: compressed {what} levels without a count")
            return cz.block_levels(enc, raw, int(count), f"{self.where}.{what}_compression")
        if raw.size % 2:
            raise CorruptFileError(None, f"{self.where}: {what} levels of {raw.size} bytes")
        return np.frombuffer(raw.tobytes(), dtype="<u2").astype(np.uint16)

    def data_ranges(self, a, b):
        return []

    def decode(self, a, b, bufs) -> Piece:
        rep, defs = self.rep, self.defs
        if rep is not None:
            la = int(self.row_starts[a])
            lb = int(self.row_starts[b]) if b < self.num_rows else rep.size
        else:
            la, lb = a, b
        rep = rep[la:lb] if rep is not None else None
        defs = defs[la:lb] if defs is not None else None
        if defs is not None and self.max_rep:
            nvis = int(np.count_nonzero(defs <= self.max_visible))
        else:
            nvis = lb - la
        if self.is_constant:
            values = repeat_scalar(self.scalar, nvis)
        else:
            values = pa.nulls(nvis, self.t)
        return self._finish(rep, defs, values, b - a, lb - la)


def _inline_scalar(value: bytes, t: pa.DataType, where: str) -> pa.Array:
    from .values import fixed_bits

    if pa.types.is_boolean(t):
        if len(value) != 1:
            raise CorruptFileError(None, f"{where}: boolean constant of {len(value)} bytes")
        return pa.array([bool(value[0] & 1)], type=t)
    bits = fixed_bits(t)
    if bits is None or bits != len(value) * 8:
        raise UnsupportedEncodingError(f"{where}: an inline constant of {len(value)} bytes for a {t} column")
    return to_arrow(Fixed(np.frombuffer(value, dtype=np.uint8), bits, 1), t)


def _buffer_scalar(raw: np.ndarray, t: pa.DataType, where: str) -> pa.Array:
    b = raw.tobytes()
    try:
        (nbuf,) = struct.unpack_from("<I", b, 0)
        lens = struct.unpack_from(f"<{nbuf}I", b, 4)
    except struct.error as exc:
        raise CorruptFileError(None, f"{where}: constant value buffer truncated") from exc
    pos = 4 + 4 * nbuf
    parts = []
    for n in lens:
        parts.append(b[pos : pos + n])
        pos += n
    if pos != len(b):
        raise CorruptFileError(None, f"{where}: constant value buffer has {len(b) - pos} stray bytes")
    if is_var(t):
        if nbuf != 2 or len(parts[0]) not in (8, 16):
            raise CorruptFileError(None, f"{where}: a string constant needs an offsets and a data buffer")
        fmt = "<2i" if len(parts[0]) == 8 else "<2q"
        o0, o1 = struct.unpack(fmt, parts[0])
        if not 0 <= o0 <= o1 <= len(parts[1]):
            raise CorruptFileError(None, f"{where}: constant offsets out of range")
        return pa.array([parts[1][o0:o1]], type=pa.binary()).cast(t)
    if nbuf != 1:
        raise UnsupportedEncodingError(f"{where}: a constant of {nbuf} buffers for a {t} column")
    return _inline_scalar(parts[0], t, where)
