"""All-null and constant pages of file formats 2.1/2.2 (``AllNullLayout``; 2.2
stores a constant page's value with it)."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

from ....errors import CorruptFileError, UnsupportedEncodingError
from . import levels as lv
from .layout import DEF_LEVELS, LIST_LAYERS, NULL_AND_EMPTY_LIST, NULLABLE_ITEM, NULLABLE_LIST
from .page import PageBase, Piece
from .repdef import Structure, page_max_visible
from .values import Fixed, as_u8, is_var, repeat_scalar, to_arrow


class AllNullPage(PageBase):
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
            return lv.block_levels(enc, raw, int(count), f"{self.where}.{what}_compression")
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
