"""The mini-block layout writer (file formats 2.1 and 2.2).

A mini-block page cuts a leaf's values into small chunks, each holding its own
repetition levels, definition levels and value buffers, so any chunk decodes on
its own.  Page buffers:

0. one metadata word per chunk, u16 (2.1) or u32 (2.2):
   ``((chunk_bytes / 8 - 1) << 4) | log2(values in chunk)``, log2 = 0 for the
   last chunk (its count is whatever remains of ``num_items``);
1. the chunks back to back;
2. (lists only) the repetition index: per chunk, u64 (rows completed in the
   chunk, levels left over after the last row start).

A chunk is::

    u16 num_levels | [u16 rep bytes] | [u16 def bytes] | value buffer sizes
    (u16 each in 2.1, u32 in 2.2) | pad to 8 | rep | pad | def | pad |
    value buffer 0 | pad | ...                       (padding bytes are 0xFE)

Every chunk but the last holds a power-of-two number of values (at least two).
A chunk ends right after the level of its last value, so null or empty lists
that follow it open the next chunk, and one top-level row may span chunks.
Levels are stored uncompressed as ``flat{16}``; values as ``flat``,
``fixed_size_list{flat}``, ``variable{flat}`` or, for integers where it pays,
``inline_bitpacking`` (:mod:`.bitpack_encode`), or ``rle`` where runs of
equal values make it smaller (:mod:`.rle_encode`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ....protos import encodings21_pb2 as pb
from . import bitpack as bitpack_encode
from . import rle as rle_encode
from .repdef import PageLevels
from .values import FixedValues, LeafValues, VariableValues, flat

#: aim for about this many value bytes per chunk (as Lance does)
TARGET_VALUE_BYTES = 4096
MAX_VALUES_PER_CHUNK = 4096
#: split chunks above these sizes when they can be split
SOFT_VALUE_BYTES = 2 * TARGET_VALUE_BYTES
SOFT_LEVELS = 8192
#: a 2.1 chunk size must fit 12 bits of 8-byte words
MAX_CHUNK_BYTES_21 = 32 * 1024
PAD = 0xFE
VAR_PAD = 0x48


class ChunkingError(Exception):
    """The page cannot be cut into valid mini-block chunks (use another layout)."""


def _pad8(n):
    return (n + 7) // 8 * 8


def _pow2_floor(x: int) -> int:
    return 1 << (max(int(x), 1).bit_length() - 1)


@dataclass
class _Plan:
    vs: np.ndarray  # first value of each chunk
    ve: np.ndarray  # end value
    ls: np.ndarray  # first level
    le: np.ndarray  # end level


def _initial_count(values: LeafValues, bitpack: int | None, rle: bool = False) -> int:
    if rle:
        return MAX_VALUES_PER_CHUNK
    if bitpack:
        return bitpack_encode.BLOCK
    if isinstance(values, FixedValues):
        bits = values.bits_per_value
        if values.item_validity is not None:
            assert values.dim is not None  # only fixed-size lists have item validity
            bits += values.dim
        n = _pow2_floor(TARGET_VALUE_BYTES * 8 // max(bits, 1))
    else:
        avg = values.nbytes() / max(values.n, 1)
        n = _pow2_floor(int(TARGET_VALUE_BYTES / max(avg, 1.0)))
    return int(min(max(n, 2), MAX_VALUES_PER_CHUNK))


class _Sizer:
    """Per-chunk byte sizes of every part of a chunk."""

    def __init__(
        self, levels: PageLevels, values: LeafValues, large: bool, bitpack: int | None, rle: bool = False
    ) -> None:
        self.has_rep = levels.rep is not None
        self.has_def = levels.defs is not None
        self.values = values
        self.large = large
        self.bitpack = bitpack
        self.rle = rle
        self.nbuf = 2 if isinstance(values, FixedValues) and (values.item_validity is not None or rle) else 1
        # a bit-packed block is at most 8 + 8192 bytes and cannot be split usefully
        self.soft_value_bytes = 2 * SOFT_VALUE_BYTES if bitpack else SOFT_VALUE_BYTES

    def buffer_sizes(self, vs: np.ndarray, ve: np.ndarray) -> list[np.ndarray]:
        v = self.values
        n = ve - vs
        if self.rle:
            return rle_encode.chunk_sizes(v, vs, ve)  # type: ignore[arg-type]
        if self.bitpack:
            return [bitpack_encode.chunk_sizes(v, self.bitpack, vs, ve)]  # type: ignore[arg-type]
        if isinstance(v, VariableValues):
            ob = v.offset_bits // 8
            raw = ob * (n + 1) + (v.offsets[ve] - v.offsets[vs])
            return [(raw + ob - 1) // ob * ob]
        sizes = []
        if v.item_validity is not None:
            sizes.append((n * v.dim + 7) // 8)
        sizes.append((n * v.bits_per_value + 7) // 8)
        return sizes

    def sizes(self, p: _Plan):
        """(levels, header bytes, value buffer sizes, total bytes) of each chunk of
        ``p``; the last plan's answer is kept (planning, the limit check and the
        serializer all ask for the final plan's)."""
        last = getattr(self, "_last", None)
        if last is not None and last[0] is p:
            return last[1]
        out = self._sizes(p)
        self._last = (p, out)
        return out

    def _sizes(self, p: _Plan):
        nl = (p.le - p.ls) if (self.has_rep or self.has_def) else np.zeros(len(p.vs), dtype=np.int64)
        hdr = 2 + 2 * self.has_rep + 2 * self.has_def + self.nbuf * (4 if self.large else 2)
        bufs = self.buffer_sizes(p.vs, p.ve)
        total = _pad8(hdr) + _pad8(2 * nl) * self.has_rep + _pad8(2 * nl) * self.has_def
        for b in bufs:
            total = total + _pad8(b)
        return nl, hdr, bufs, total


def _plan_chunks(
    levels: PageLevels, values: LeafValues, large: bool, bitpack: int | None, rle: bool = False
) -> tuple[_Plan, _Sizer]:
    V = values.n
    L = levels.num_levels
    lpos = None if levels.visible is None else np.flatnonzero(levels.visible)
    sizer = _Sizer(levels, values, large, bitpack, rle)

    def level_bounds(vs: np.ndarray, ve: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        last = ve[:-1] - 1
        le_inner = last + 1 if lpos is None else lpos[last] + 1
        le = np.concatenate([le_inner, [L]]).astype(np.int64)
        ls = np.concatenate([[0], le[:-1]]).astype(np.int64)
        return ls, le

    n0 = _initial_count(values, bitpack, rle)
    vs = np.arange(0, V, n0, dtype=np.int64)
    ve = np.minimum(vs + n0, V)
    ls, le = level_bounds(vs, ve)
    plan = _Plan(vs, ve, ls, le)
    for _ in range(64):
        nl, _, bufs, total = sizer.sizes(plan)
        vbytes = sum(bufs)
        bad = (vbytes > sizer.soft_value_bytes) | (nl > SOFT_LEVELS)
        if large:
            bad |= nl > 65535 // 2
        else:
            bad |= total > MAX_CHUNK_BYTES_21
        counts = plan.ve - plan.vs
        is_last = np.zeros(len(counts), dtype=bool)
        is_last[-1] = True
        splittable = np.where(is_last, counts >= 3, counts >= 4)
        todo = np.flatnonzero(bad & splittable)
        if len(todo) == 0:
            break
        new_vs = [plan.vs]
        for k in todo.tolist():
            s, e = int(plan.vs[k]), int(plan.ve[k])
            half = (e - s) // 2 if k < len(counts) - 1 else _pow2_floor(e - s - 1)
            new_vs.append(np.array([s + half], dtype=np.int64))
        vs = np.unique(np.concatenate(new_vs))
        ve = np.concatenate([vs[1:], [V]]).astype(np.int64)
        ls, le = level_bounds(vs, ve)
        plan = _Plan(vs, ve, ls, le)
    _check_hard_limits(sizer, plan, large)
    return plan, sizer


def _check_hard_limits(sizer: _Sizer, plan: _Plan, large: bool) -> None:
    nl, _, bufs, total = sizer.sizes(plan)
    if len(nl) and (nl.max() > 65535 or 2 * nl.max() > 65535):
        raise ChunkingError("too many levels between two values for a mini-block chunk")
    limit = (1 << 32) - 1 if large else 65535
    for b in bufs:
        if len(b) and b.max() > limit:
            raise ChunkingError("a chunk value buffer is too large for a mini-block chunk")
    if not large and len(total) and total.max() > MAX_CHUNK_BYTES_21:
        raise ChunkingError("a mini-block chunk would exceed 32 KiB")
    counts = plan.ve - plan.vs
    if len(counts) > 1 and (counts[:-1] < 2).any():
        raise ChunkingError("a mini-block chunk would hold a single value")


def _headers(sizer: _Sizer, nl, hdr: int, bufs, large: bool) -> np.ndarray:
    K = len(nl)
    width = _pad8(hdr)
    out = np.full((K, width), PAD, dtype=np.uint8)
    col = 0

    def put(vals, dtype):
        nonlocal col
        b = np.ascontiguousarray(np.asarray(vals).astype(dtype)).view(np.uint8).reshape(K, -1)
        out[:, col : col + b.shape[1]] = b
        col += b.shape[1]

    put(nl if (sizer.has_rep or sizer.has_def) else np.zeros(K), "<u2")
    if sizer.has_rep:
        put(2 * nl, "<u2")
    if sizer.has_def:
        put(2 * nl, "<u2")
    for b in bufs:
        put(b, "<u4" if large else "<u2")
    return out


@dataclass
class _Part:
    """Bytes of some chunks' value buffer: chunk ``chunks[i]`` (every chunk,
    in order, when None) receives ``src[start[i] : start[i] + length[i]]`` at
    ``at`` (scalar or per chunk) bytes into its buffer."""

    src: np.ndarray  # uint8, 1-D
    start: np.ndarray
    length: np.ndarray
    at: np.ndarray | int = 0
    chunks: np.ndarray | None = None

    def scatter(self, out: np.ndarray, buf_pos: np.ndarray) -> None:
        pos = buf_pos if self.chunks is None else buf_pos[self.chunks]
        _copy_runs(out, self.src, pos + self.at, self.start, self.length)


@dataclass
class _Rows:
    """A fixed-size prefix per chunk: row ``i`` of ``rows`` goes to chunk
    ``chunks[i]`` (every chunk when None) at ``at`` bytes into its buffer."""

    rows: np.ndarray  # uint8, (chunks, width)
    at: int = 0
    chunks: np.ndarray | None = None

    def scatter(self, out: np.ndarray, buf_pos: np.ndarray) -> None:
        pos = buf_pos if self.chunks is None else buf_pos[self.chunks]
        _scatter_rows(out, self.rows, pos + self.at)


def _copy_runs(out: np.ndarray, src: np.ndarray, dst, start, length) -> None:
    """``out[dst[i] : dst[i] + length[i]] = src[start[i] : ...]`` for every i
    (memoryview slice assignment: a plain memcpy, far cheaper per run than numpy's)."""
    o = memoryview(out)  # type: ignore[arg-type]  # numpy stubs: ndarray.__buffer__ only for Python >= 3.12
    src_bytes = np.ascontiguousarray(src).reshape(-1).view(np.uint8)
    s = memoryview(src_bytes)  # type: ignore[arg-type]  # numpy stubs: ndarray.__buffer__ only for Python >= 3.12
    for d, a, n in zip(np.asarray(dst).tolist(), np.asarray(start).tolist(), np.asarray(length).tolist()):
        o[d : d + n] = s[a : a + n]


def _scatter_rows(out: np.ndarray, rows: np.ndarray, pos: np.ndarray) -> None:
    if rows.size:
        out[np.asarray(pos)[:, None] + np.arange(rows.shape[1])] = rows


def _bits_parts(bits: np.ndarray, per_value: int, vs: np.ndarray, ve: np.ndarray) -> list:
    """Each chunk's bits packed LSB-first from bit 0 of its own buffer."""
    starts = vs * per_value
    if len(starts) == 0 or (starts % 8 == 0).all():
        packed = np.packbits(bits, bitorder="little")
        first = starts // 8
        return [_Part(packed, first, (ve * per_value + 7) // 8 - first)]
    pieces = [
        np.packbits(bits[s * per_value : e * per_value], bitorder="little") for s, e in zip(vs.tolist(), ve.tolist())
    ]
    lengths = np.array([len(x) for x in pieces], dtype=np.int64)
    return [_Part(np.concatenate(pieces), np.cumsum(lengths) - lengths, lengths)]


_VAR_PADS = np.full(8, VAR_PAD, dtype=np.uint8)


def _value_parts(values: LeafValues, plan: _Plan, bitpack: int | None, rle: bool = False) -> list[list]:
    """Per value buffer, where each chunk's bytes come from (before 8-byte padding)."""
    vs, ve = plan.vs, plan.ve
    if rle:
        run_vals, run_lens, first, count = rle_encode.chunk_buffers(values, vs, ve)  # type: ignore[arg-type]
        w = values.width  # type: ignore[union-attr]
        return [[_Part(run_vals, first * w, count * w)], [_Part(run_lens, first, count)]]
    if bitpack:
        heads, groups = bitpack_encode.chunk_blocks(values, bitpack, vs, ve)  # type: ignore[arg-type]
        parts: list = [_Rows(heads)]
        for sel, packed, size in groups:
            parts.append(
                _Part(packed, np.arange(len(sel), dtype=np.int64) * size, np.full(len(sel), size), heads.shape[1], sel)
            )
        return [parts]
    if isinstance(values, VariableValues):
        # a chunk's buffer: its offsets rebased to the buffer start (counting
        # the offsets themselves), its data bytes, then 0x48 up to a whole offset
        ob = values.offset_bits // 8
        counts = ve - vs + 1
        first = np.repeat(vs, counts)
        pos = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        base = values.offsets[vs] - ob * counts
        rebased = values.offsets[first + pos] - np.repeat(base, counts)
        offs = rebased.astype("<u4" if ob == 4 else "<u8").view(np.uint8)
        ends = np.cumsum(counts) * ob
        lo, hi = values.offsets[vs], values.offsets[ve]
        data_at = counts * ob
        pads = (-(data_at + hi - lo)) % ob
        parts = [_Part(offs, ends - data_at, data_at), _Part(values.data, lo, hi - lo, data_at)]
        padded = np.flatnonzero(pads)
        if len(padded):
            parts.append(
                _Part(
                    _VAR_PADS, np.zeros(len(padded), dtype=np.int64), pads[padded], (data_at + hi - lo)[padded], padded
                )
            )
        return [parts]
    out = []
    if values.item_validity is not None:
        assert values.dim is not None  # only fixed-size lists have item validity
        out.append(_bits_parts(values.item_validity, values.dim, vs, ve))
    if values.is_bits:
        out.append(_bits_parts(values.data, values.bits_per_value, vs, ve))
    else:
        w = values.width
        out.append([_Part(values.data, vs * w, (ve - vs) * w)])
    return out


def _serialize_general(levels: PageLevels, values: LeafValues, plan: _Plan, sizer: _Sizer, large: bool):
    """Every chunk written into one buffer: the buffer starts as padding, then
    headers are scattered in one step and each run of levels and values is
    copied to its place (one slice assignment per chunk and run)."""
    nl, hdr, bufs, total = sizer.sizes(plan)
    headers = _headers(sizer, nl, hdr, bufs, large)
    out = np.full(int(total.sum()), PAD, dtype=np.uint8)
    pos = np.cumsum(total) - total
    _scatter_rows(out, headers, pos)
    pos = pos + headers.shape[1]
    level_bytes = 2 * (plan.le - plan.ls)
    for lv in (levels.rep, levels.defs):
        if lv is not None:
            _copy_runs(out, lv.view(np.uint8), pos, 2 * plan.ls, level_bytes)
            pos = pos + _pad8(level_bytes)
    for size, parts in zip(bufs, _value_parts(values, plan, sizer.bitpack, sizer.rle)):
        for part in parts:
            part.scatter(out, pos)
        pos = pos + _pad8(size)
    return out, total


def _serialize_uniform(levels: PageLevels, values: FixedValues, plan: _Plan, sizer: _Sizer, large: bool):
    """Fast path: fixed-width values, no repetition, equal full chunks."""
    n0 = int(plan.ve[0] - plan.vs[0])
    V = values.n
    full = V // n0
    if full == len(plan.vs) and full > 0:
        full -= 1  # serialize the last chunk with the general path (same bytes)
    nl, hdr, bufs, total = sizer.sizes(plan)
    if full == 0:
        return _serialize_general(levels, values, plan, sizer, large)
    row = int(total[0])
    out = np.full((full, row), PAD, dtype=np.uint8)
    hdr_row = _headers(sizer, nl[:1], hdr, [b[:1] for b in bufs], large)[0]
    out[:, : len(hdr_row)] = hdr_row
    col = len(hdr_row)
    if levels.defs is not None:
        d = levels.defs[: full * n0].view(np.uint8).reshape(full, 2 * n0)
        out[:, col : col + 2 * n0] = d
        col += _pad8(2 * n0)
    if values.is_bits:
        packed = np.packbits(values.data[: full * n0 * values.bits_per_value], bitorder="little")
        vb = n0 * values.bits_per_value // 8
        out[:, col : col + vb] = packed.reshape(full, vb)
    else:
        vb = n0 * values.width
        out[:, col : col + vb] = values.data[: full * vb].reshape(full, vb)
    tail_plan = _Plan(
        plan.vs[full:] - full * n0, plan.ve[full:] - full * n0, plan.ls[full:] - full * n0, plan.le[full:] - full * n0
    )
    tail_levels = PageLevels(
        None,
        None if levels.defs is None else levels.defs[full * n0 :],
        levels.layers,
        None,
        levels.num_levels - full * n0,
    )
    bpv = values.bits_per_value
    tail_values = FixedValues(
        V - full * n0,
        bpv,
        values.data[full * n0 * (bpv if values.is_bits else values.width) :],
        values.dim,
        values.item_bits,
    )
    tail, _ = _serialize_general(tail_levels, tail_values, tail_plan, sizer, large)
    data = np.concatenate([out.reshape(-1), tail]) if len(tail) else out.reshape(-1)
    return data, total


def repetition_index(rep: np.ndarray, max_rep: int, plan: _Plan) -> np.ndarray:
    """Per chunk (rows completed in it, levels after its last row start), as u64 pairs."""
    L = len(rep)
    starts = np.flatnonzero(rep == max_rep)
    ls, le = plan.ls, plan.le
    K = len(ls)
    inner = np.searchsorted(starts, le, "left") - np.searchsorted(starts, ls, "right")
    nxt = np.zeros(K, dtype=bool)
    if K > 1:
        nxt[:-1] = rep[np.minimum(le[:-1], L - 1)] == max_rep
    rows = inner + nxt
    rows[-1] = inner[-1] + 1
    j = np.searchsorted(starts, le, "left") - 1
    last_start = np.maximum(np.where(j >= 0, starts[np.maximum(j, 0)], 0), ls)
    left = np.where(nxt, 0, le - last_start)
    left[-1] = 0
    return np.stack([rows, left], axis=1).astype("<u8").reshape(-1)


#: pages of at most this many values and levels take :func:`_encode_single`
SMALL_VALUES = 1024
#: switch for tests (the general path must write the same bytes)
SMALL_FAST_PATH = True


def _small_page(levels: PageLevels, values: LeafValues) -> bool:
    """True for a page the general planner would write as one chunk of plain
    fixed-width values: byte-aligned scalars, no repetition, no item validity,
    few enough values and levels (whatever encoding is chosen: one bit-packed
    block holds 1024 values, an RLE chunk 4096, a flat chunk
    :func:`_initial_count`; every size limit is far away)."""
    return (
        SMALL_FAST_PATH
        and isinstance(values, FixedValues)
        and levels.rep is None
        and values.dim is None
        and values.packed is None
        and values.item_validity is None
        and 0 < values.n <= SMALL_VALUES
        and levels.num_levels <= SMALL_VALUES
        and values.data.dtype == np.uint8
        and values.bits_per_value % 8 == 0
    )


def _small_choice(values: FixedValues) -> tuple[int | None, int, np.ndarray | None]:
    """The general path's choice for a one-chunk page, computed directly:
    ``(bitpack T or None, bit width of the largest value (when it can be
    bit-packed), run starts when RLE is chosen else None)``."""
    # an unsigned view where numpy has one (bit-packing and RLE need it; wider values stay flat)
    u = values.data.view(f"<u{values.width}") if values.width in (1, 2, 4, 8) else None
    flat_bytes = values.nbytes()
    width, packed = 0, None
    if u is not None and bitpack_encode.can_pack(values):
        # one block of 1024 values: the width word plus 128 bytes per bit of the largest value
        width = int(u.max()).bit_length()
        packed = values.width + 128 * width
    other = flat_bytes if packed is None else min(flat_bytes, packed)
    if u is not None and rle_encode.eligible(values):
        starts = rle_encode._segments(u)
        if int(rle_encode._pieces(starts, len(u)).sum()) * (values.width + 1) < other:
            return None, width, starts
    if packed is not None and packed <= (1 - bitpack_encode.MIN_SAVING) * bitpack_encode.BLOCK * values.width:
        return values.bits_per_value, width, None
    return None, width, None


def _pad_to8(parts: list[bytes], b: bytes) -> None:
    parts.append(b)
    if len(b) % 8:
        parts.append(b"\xfe" * (8 - len(b) % 8))


def _encode_single(levels: PageLevels, values: FixedValues, large: bool, choice):
    """One chunk written directly (see :func:`_small_page`): the same bytes as
    the general planner and serializer, without their per-page numpy work.
    ``choice`` is :func:`_small_choice`'s.  Returns ``(bitpack, rle, nbuf, data, total)``."""
    bitpack, width, starts = choice
    if starts is not None:
        u = values.data.view(f"<u{values.width}")
        bufs = [b.tobytes() for b in rle_encode.run_pieces(u, starts)]
    elif bitpack:
        u = values.data.view(f"<u{values.width}")
        head = np.array([width], dtype=u.dtype).tobytes()
        if width:
            block = np.zeros((1, bitpack_encode.BLOCK), dtype=u.dtype)
            block[0, : len(u)] = u
            assert bitpack_encode._fastlanes is not None  # can_pack() checked
            head += bytes(bitpack_encode._fastlanes.pack(block, width))
        bufs = [head]
    else:
        bufs = [values.data.tobytes()]
    data, total = _single_chunk(levels, bufs, large)
    return bitpack, starts is not None, len(bufs), data, total


def _small_variable(levels: PageLevels, values: LeafValues) -> bytes | None:
    """The one value buffer of a small page of variable-width values that
    the general planner would write as one chunk (None: it would not):
    the offsets rebased to the buffer start (counting the offsets
    themselves), the data bytes, then 0x48 up to a whole offset."""
    if not (
        SMALL_FAST_PATH
        and isinstance(values, VariableValues)
        and levels.rep is None
        and 0 < values.n <= SMALL_VALUES
        and levels.num_levels <= SMALL_VALUES
        and values.n <= _initial_count(values, None)
    ):
        return None
    ob = values.offset_bits // 8
    n = values.n
    lo, hi = int(values.offsets[0]), int(values.offsets[n])
    raw = ob * (n + 1) + (hi - lo)
    if raw + ob > SOFT_VALUE_BYTES:  # the planner would split it (or come close)
        return None
    rebased = (values.offsets[: n + 1] - (lo - ob * (n + 1))).astype("<u4" if ob == 4 else "<u8")
    return rebased.tobytes() + values.data[lo:hi].tobytes() + bytes([VAR_PAD]) * ((-raw) % ob)


def _single_chunk(levels: PageLevels, bufs: list[bytes], large: bool) -> tuple[np.ndarray, np.ndarray]:
    """One chunk: header (levels, buffer sizes), definition levels, value
    buffers, each padded to 8 bytes with 0xFE; and its size."""
    size_fmt = "<u4" if large else "<u2"
    has_def = levels.defs is not None
    nl = levels.num_levels if has_def else 0
    header = [np.array([nl], dtype="<u2").tobytes()]
    if has_def:
        header.append(np.array([2 * nl], dtype="<u2").tobytes())
    header.append(np.array([len(b) for b in bufs], dtype=size_fmt).tobytes())
    parts: list[bytes] = []
    _pad_to8(parts, b"".join(header))
    if has_def:
        _pad_to8(parts, levels.defs[:nl].astype("<u2", copy=False).tobytes())  # type: ignore[index]
    for b in bufs:
        _pad_to8(parts, b)
    data = np.frombuffer(b"".join(parts), dtype=np.uint8)
    return data, np.array([len(data)], dtype=np.int64)


def encode_miniblock(levels: PageLevels, values: LeafValues, max_rep: int, large: bool):
    """Buffers and the PageLayout for a mini-block page.

    Raises :class:`ChunkingError` when the page cannot be chunked (too many
    invisible items between two values, or values too wide).
    """
    if _small_page(levels, values):
        assert isinstance(values, FixedValues)
        choice = _small_choice(values)
        # bit-packed and RLE chunks hold every small page; flat ones up to _initial_count values
        if choice[0] is not None or choice[2] is not None or values.n <= _initial_count(values, None):
            bitpack, rle, nbuf, data, total = _encode_single(levels, values, large, choice)
            return _finish(levels, values, max_rep, large, bitpack, rle, nbuf, data, total, None)
    var_buf = _small_variable(levels, values)
    if var_buf is not None:
        data, total = _single_chunk(levels, [var_buf], large)
        return _finish(levels, values, max_rep, large, None, False, 1, data, total, None)
    bitpack = bitpack_encode.choose(values) if isinstance(values, FixedValues) else None
    rle = False
    if isinstance(values, FixedValues) and rle_encode.eligible(values):
        # pylance weighs RLE against bit-packing whenever the type can be bit-packed
        other = values.nbytes()
        if bitpack_encode.can_pack(values):
            other = min(other, bitpack_encode.packed_bytes(values))
        rle = rle_encode.choose(values, other)
        if rle:
            bitpack = None
    plan, sizer = _plan_chunks(levels, values, large, bitpack, rle)
    uniform = (
        not bitpack
        and not rle
        and isinstance(values, FixedValues)
        and levels.rep is None
        and values.item_validity is None
        and len(plan.vs) > 1
        and (not values.is_bits or (int(plan.ve[0]) * values.bits_per_value) % 8 == 0)
        and bool(((plan.ve[:-1] - plan.vs[:-1]) == (plan.ve[0] - plan.vs[0])).all())
    )
    if uniform:
        data, total = _serialize_uniform(levels, values, plan, sizer, large)  # type: ignore[arg-type]
    else:
        data, total = _serialize_general(levels, values, plan, sizer, large)
    return _finish(levels, values, max_rep, large, bitpack, rle, sizer.nbuf, data, total, plan)


def _finish(levels, values, max_rep, large, bitpack, rle, nbuf, data, total, plan: _Plan | None):
    """The chunk metadata words and the PageLayout around serialized chunks
    (``plan`` None: a single chunk)."""
    logs = np.zeros(len(total), dtype=np.int64)
    if plan is not None:
        counts = plan.ve - plan.vs
        logs[:-1] = np.log2(counts[:-1]).astype(np.int64)
    words = (((total // 8) - 1) << 4) | logs
    meta = words.astype("<u4" if large else "<u2")

    layout = pb.PageLayout()
    mb = layout.mini_block_layout
    if levels.rep is not None:
        mb.rep_compression.CopyFrom(flat(16))
    if levels.defs is not None:
        mb.def_compression.CopyFrom(flat(16))
    if rle:
        mb.value_compression.CopyFrom(rle_encode.encoding(values.bits_per_value))
    else:
        mb.value_compression.CopyFrom(bitpack_encode.encoding(bitpack) if bitpack else values.encoding())
    mb.layers.extend(levels.layers)
    mb.num_buffers = nbuf
    mb.num_items = values.n
    if large:
        mb.has_large_chunk = True
    buffers = [meta, data]
    if levels.rep is not None:
        assert plan is not None  # pages with repetition never take the single-chunk path
        mb.repetition_index_depth = 1
        buffers.append(repetition_index(levels.rep, max_rep, plan))
    return buffers, layout
