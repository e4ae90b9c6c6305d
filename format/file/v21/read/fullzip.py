"""Full-zip pages of file formats 2.1/2.2: wide values zipped row by row with
their levels (``FullZipLayout``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ....errors import CorruptFileError, UnsupportedEncodingError
from . import compressive as cz
from .page import PageBase, Piece
from .repdef import Structure
from .values import as_u8, to_arrow, uint_at


class FullZipPage(PageBase):
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
