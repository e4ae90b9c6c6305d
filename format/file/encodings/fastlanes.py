"""FastLanes bit-packing as used by Lance 2.1/2.2 (``inline_bitpacking`` and
``out_of_line_bitpacking``), in vectorised numpy.

A FastLanes block holds 1024 unsigned values of ``T`` bits (T in 8/16/32/64)
packed to ``W`` bits each, i.e. ``1024 * W / 8 = 128 * W`` bytes.  The block is
viewed as ``LANES = 1024 / T`` interleaved lanes: packed word ``w`` of lane ``l``
is T-bit word ``LANES * w + l``.  Lane ``l`` holds rows ``r = 0..T-1``; row ``r``
is the W-bit field at bit ``r * W`` of the lane's little-endian bit stream and
belongs at output index ``FL_ORDER[r // 8] * 16 + (r % 8) * 128 + l``.

For a fixed row ``r`` the output indices of all lanes are contiguous and
start at a multiple of LANES, so a decoded block viewed as (T, LANES) is just a
permutation of the rows.  Decoding therefore gathers, for every output row, the
packed word holding its low bits and the one holding any spilled high bits,
then shifts and masks: a handful of numpy operations per batch of blocks.
"""

from __future__ import annotations

import functools
import struct
import sys
from types import ModuleType

import numpy as np

from . import buffers

#: the C accelerator (``_fastlanes.c``), when it was built and the host is
#: little-endian (it reads the packed words in native order); None: numpy decodes
native: ModuleType | None = None
if sys.byteorder == "little":
    try:
        from . import _fastlanes as native  # type: ignore[attr-defined, no-redef]
    except ImportError:  # built without a C compiler: the numpy path below decodes alone
        native = None

BLOCK_VALUES = 1024
FL_ORDER = (0, 4, 2, 6, 1, 5, 3, 7)
TYPE_BITS = (8, 16, 32, 64)

__all__ = [
    "BLOCK_VALUES",
    "FL_ORDER",
    "decode_inline_blocks",
    "decode_inline_levels",
    "decode_out_of_line",
    "encode_inline_blocks",
    "encode_out_of_line",
    "min_bit_width",
    "pack",
    "packed_block_bytes",
    "unpack",
    "unpack_blocks_at",
    "unpack_values_at",
]


def _check(bit_width: int, type_bits: int) -> None:
    if type_bits not in TYPE_BITS:
        raise ValueError(f"FastLanes type width must be one of {TYPE_BITS}, got {type_bits}")
    if not 0 <= bit_width <= type_bits:
        raise ValueError(f"FastLanes bit width {bit_width} is outside 0..{type_bits}")


def _row_base(row: int) -> int:
    return FL_ORDER[row // 8] * 16 + (row % 8) * 128


def _native(type_bits: int) -> np.dtype:
    return np.dtype(f"u{type_bits // 8}")


def _le(type_bits: int) -> np.dtype:
    return np.dtype(f"<u{type_bits // 8}")


def _as_u8(buf) -> np.ndarray:
    if isinstance(buf, np.ndarray):
        return np.ascontiguousarray(buf).reshape(-1).view(np.uint8)
    return np.frombuffer(buf, dtype=np.uint8)


def packed_block_bytes(bit_width: int) -> int:
    """Bytes taken by one packed 1024-value block of ``bit_width`` bits."""
    return 128 * bit_width


@functools.cache
def _row_plan(bit_width: int, type_bits: int):
    """Per output row slot: (low word index, high word index, shift) as arrays.

    Output slot k (values ``k*LANES .. k*LANES+LANES``) holds row ``r`` with
    ``base(r) == k * LANES``; every base is a multiple of LANES.
    """
    lanes = BLOCK_VALUES // type_bits
    rows = np.empty(type_bits, dtype=np.int64)
    for r in range(type_bits):
        rows[_row_base(r) // lanes] = r
    bits = rows * bit_width
    lo = bits // type_bits
    hi = np.minimum(lo + 1, bit_width - 1)
    shift = (bits % type_bits).astype(_native(type_bits))[:, None]
    return lo, hi, shift


_BATCH_BLOCKS = 128  # keeps the temporaries of one batch cache-sized


def _unpack_into(words: np.ndarray, out: np.ndarray, bit_width: int, type_bits: int) -> None:
    """Unpack ``words`` (blocks, W, LANES) into ``out`` (blocks, 1024), same dtype."""
    if (
        native is not None
        and bit_width
        and words.flags.c_contiguous
        and out.flags.c_contiguous
        and out.flags.aligned
        and out.flags.writeable
    ):
        native.unpack(words, out, type_bits, bit_width, words.shape[0])
        return
    _unpack_into_numpy(words, out, bit_width, type_bits)


def _unpack_into_numpy(words: np.ndarray, out: np.ndarray, bit_width: int, type_bits: int) -> None:
    W, T = bit_width, type_bits
    num_blocks = words.shape[0]
    out3 = out.reshape(num_blocks, T, BLOCK_VALUES // T)
    if W == T:
        lo, _, _ = _row_plan(W, T)
        out3[...] = words[:, lo, :]
        return
    lo, hi, shift = _row_plan(W, T)
    # only rows whose bits run past their low word take bits from the high one
    # (for any other row those bits land above W and the mask drops them)
    spilling = np.flatnonzero(shift[:, 0].astype(np.int64) + W > T)
    one = out.dtype.type(1)
    # most rows spill: a plain pass over all of them is cheaper than picking
    rows: np.ndarray | slice = slice(None) if 2 * spilling.size > T else spilling
    spill = out.dtype.type(T - 1) - shift[rows]  # high word goes up by T - shift, done in two steps
    hi = hi[rows]
    mask = out.dtype.type((1 << W) - 1)
    for start in range(0, num_blocks, _BATCH_BLOCKS):
        wb = words[start : start + _BATCH_BLOCKS]
        dst = out3[start : start + _BATCH_BLOCKS]
        np.right_shift(wb[:, lo, :], shift, out=dst)
        if hi.size:
            # two shifts keep each amount below T (a shift by T is not portable)
            dst[:, rows, :] |= (wb[:, hi, :] << one) << spill
        dst &= mask


def unpack(packed, bit_width: int, type_bits: int, num_blocks: int) -> np.ndarray:
    """Decode ``num_blocks`` consecutive FastLanes blocks.

    ``packed`` (bytes-like or ndarray) must hold at least ``num_blocks * 128 *
    bit_width`` bytes; extra trailing bytes are ignored.  Returns a
    ``uint{type_bits}`` array of ``num_blocks * 1024`` values (all zero when
    ``bit_width`` is 0).
    """
    _check(bit_width, type_bits)
    dtype = _native(type_bits)
    if num_blocks < 0:
        raise ValueError(f"negative FastLanes block count {num_blocks}")
    if bit_width == 0 or num_blocks == 0:
        return np.zeros(num_blocks * BLOCK_VALUES, dtype=dtype)
    raw = _as_u8(packed)
    need = num_blocks * packed_block_bytes(bit_width)
    if raw.size < need:
        raise ValueError(
            f"FastLanes buffer too short: {num_blocks} blocks of {bit_width} bits need {need} bytes, got {raw.size}"
        )
    words = raw[:need].view(_le(type_bits)).astype(dtype, copy=False)
    words = words.reshape(num_blocks, bit_width, BLOCK_VALUES // type_bits)
    out = np.empty((num_blocks, BLOCK_VALUES), dtype=dtype)
    _unpack_into(words, out, bit_width, type_bits)
    return out.reshape(-1)


def pack(values: np.ndarray, bit_width: int) -> bytes:
    """Pack ``values`` (length a multiple of 1024) into FastLanes blocks of ``bit_width`` bits.

    The dtype of ``values`` gives T (signed dtypes are reinterpreted as
    unsigned).  Raises ``ValueError`` if a value does not fit in ``bit_width`` bits.
    """
    values = np.asarray(values)
    if values.dtype.kind not in "ui":
        raise ValueError(f"FastLanes packs integer arrays, got dtype {values.dtype}")
    type_bits = values.dtype.itemsize * 8
    _check(bit_width, type_bits)
    dtype = _native(type_bits)
    values = values.reshape(-1).view(dtype) if values.dtype.kind == "i" else values.reshape(-1)
    if values.size % BLOCK_VALUES:
        raise ValueError(f"FastLanes packs whole blocks of 1024 values, got {values.size} values")
    if values.size and bit_width < type_bits and int(values.max()) >> bit_width:
        raise ValueError(f"value {int(values.max())} does not fit in {bit_width} bits")
    num_blocks = values.size // BLOCK_VALUES
    if bit_width == 0 or num_blocks == 0:
        return b""
    W, T = bit_width, type_bits
    if native is not None and getattr(native, "pack", None) is not None:
        src = np.ascontiguousarray(values.astype(dtype, copy=False))
        out = bytearray(num_blocks * 128 * W)
        native.pack(src, out, T, W, num_blocks)
        return bytes(out)
    lanes = BLOCK_VALUES // T
    perm, shift, word_starts, spill, spill_to, spill_shift = _pack_plan(W, T)
    # rows in packing order: row r of a block is its values [base(r), base(r) + LANES)
    rows = values.astype(dtype, copy=False).reshape(num_blocks, T, lanes)[:, perm, :]
    # row r's low bits go to word r*W // T (non-decreasing in r, every word has a row): OR each run of rows
    words = np.bitwise_or.reduceat(rows << shift, word_starts, axis=1)
    if spill.size:  # a row straddling a word boundary: its high bits start the next word (one row per word)
        words[:, spill_to, :] |= rows[:, spill, :] >> spill_shift
    return words.astype(_le(type_bits), copy=False).tobytes()


@functools.cache
def _pack_plan(bit_width: int, type_bits: int):
    """For :func:`pack`: the block's rows in packing order, each row's shift,
    the first row of each word, and the rows that spill into the next word
    (with that word and the right shift of their high bits)."""
    W, T = bit_width, type_bits
    lanes = BLOCK_VALUES // T
    r = np.arange(T)
    perm = np.array([_row_base(i) // lanes for i in range(T)])
    w0 = r * W // T
    shift = (r * W % T).astype(_native(T))
    word_starts = np.flatnonzero(np.r_[True, w0[1:] != w0[:-1]])
    spill = np.flatnonzero(shift.astype(np.int64) + W > T)
    return perm, shift[:, None], word_starts, spill, w0[spill] + 1, (T - shift[spill]).astype(_native(T))[:, None]


def unpack_blocks_at(data, starts, bit_widths, type_bits: int) -> np.ndarray:
    """Decode one FastLanes block at each byte offset in ``starts`` of ``data``.

    ``bit_widths[i]`` is the width of the block at ``starts[i]``.  Blocks of
    equal width are decoded together, so a whole page of mini-block chunks can
    be decoded with one call.  Returns ``len(starts) * 1024`` values.
    """
    _check(0, type_bits)
    raw = _as_u8(data)
    starts = np.asarray(starts, dtype=np.int64).reshape(-1)
    widths = np.asarray(bit_widths, dtype=np.int64).reshape(-1)
    if starts.shape != widths.shape:
        raise ValueError("starts and bit_widths must have the same length")
    dtype = _native(type_bits)
    out = buffers.empty((starts.size, BLOCK_VALUES), dtype=dtype)  # every block is written below
    if starts.size == 0:
        return out.reshape(-1)
    if native is not None and raw.flags.c_contiguous and out.flags.c_contiguous:
        # every block straight from its offset (sizes, widths and offsets checked there)
        native.unpack_at(raw, np.ascontiguousarray(starts), np.ascontiguousarray(widths), out, type_bits)
        return out.reshape(-1)
    lanes = BLOCK_VALUES // type_bits
    for W in np.unique(widths).tolist():
        _check(W, type_bits)
        if W == 0:
            out[widths == 0] = 0
            continue
        sel = np.flatnonzero(widths == W)
        nbytes = packed_block_bytes(W)
        s = starts[sel]
        if s.min() < 0 or s.max() + nbytes > raw.size:
            raise ValueError(
                f"FastLanes block of {W} bits ({nbytes} bytes) runs past the end of a {raw.size}-byte buffer"
            )
        if sel.size == 1 or np.all(np.diff(s) == nbytes):
            block_bytes = raw[s[0] : s[0] + nbytes * sel.size]  # contiguous run: no gather
        else:
            windows = np.lib.stride_tricks.sliding_window_view(raw, nbytes)
            block_bytes = windows[s]
        flat_words = np.ascontiguousarray(block_bytes).reshape(-1).view(_le(type_bits))
        words = flat_words.astype(dtype, copy=False).reshape(sel.size, W, lanes)
        if sel.size == starts.size:
            _unpack_into(words, out, W, type_bits)
        else:
            tmp = np.empty((sel.size, BLOCK_VALUES), dtype=dtype)
            _unpack_into(words, tmp, W, type_bits)
            out[sel] = tmp
    return out.reshape(-1)


@functools.cache
def _slot_of(type_bits: int):
    """Per output index of a block: its (row, lane)."""
    lanes = BLOCK_VALUES // type_bits
    row = np.empty(BLOCK_VALUES, dtype=np.int64)
    lane = np.empty(BLOCK_VALUES, dtype=np.int64)
    for r in range(type_bits):
        b = _row_base(r)
        row[b : b + lanes] = r
        lane[b : b + lanes] = np.arange(lanes)
    return row, lane


def unpack_values_at(data, block_starts, bit_widths, type_bits: int, index_in_block) -> np.ndarray:
    """Single values out of FastLanes blocks, without unpacking whole blocks.

    Value ``i`` is output index ``index_in_block[i]`` (0..1023) of the block at
    byte ``block_starts[i]`` of ``data``, packed to ``bit_widths[i]`` bits.
    Returns ``uint{type_bits}`` values.
    """
    _check(0, type_bits)
    raw = _as_u8(data)
    T = type_bits
    dtype = _native(T)
    lanes = BLOCK_VALUES // T
    starts = np.asarray(block_starts, dtype=np.int64).reshape(-1)
    W = np.asarray(bit_widths, dtype=np.int64).reshape(-1)
    o = np.asarray(index_in_block, dtype=np.int64).reshape(-1)
    if starts.size == 0:
        return np.zeros(0, dtype=dtype)
    if np.any(W > T) or np.any(W < 0) or np.any((o < 0) | (o >= BLOCK_VALUES)):
        raise ValueError("FastLanes bit width or value index out of range")
    if starts.min() < 0 or int((starts + packed_block_bytes(1) * W).max()) > raw.size:
        raise ValueError(f"FastLanes block runs past the end of a {raw.size}-byte buffer")
    out = np.zeros(starts.size, dtype=dtype)
    act = np.flatnonzero(W > 0)  # width-0 blocks are all zeros and hold no bytes
    if act.size == 0:
        return out
    starts, W, o = starts[act], W[act], o[act]
    row_of, lane_of = _slot_of(T)
    r, lane = row_of[o], lane_of[o]
    bit = r * W
    w0, sh = bit // T, bit % T
    width = T // 8
    lo_at = starts + (w0 * lanes + lane) * width
    spill = sh + W > T
    hi_at = lo_at[spill] + lanes * width
    # little-endian words at any alignment: gather their bytes, read them back
    steps = np.arange(width, dtype=np.int64)
    words_lo = raw[lo_at[:, None] + steps].view(_le(T))[:, 0].astype(np.uint64)
    words_hi = raw[hi_at[:, None] + steps].view(_le(T))[:, 0].astype(np.uint64)
    sh64 = sh.astype(np.uint64)
    val = words_lo >> sh64
    # the spilled high part goes up by T - sh: two shifts keep each below 64
    val[spill] |= (words_hi << np.uint64(1)) << (np.uint64(T - 1) - sh64[spill])
    full = W >= 64
    val[~full] &= (np.uint64(1) << W[~full].astype(np.uint64)) - np.uint64(1)
    if T < 64:
        val &= np.uint64((1 << T) - 1)
    out[act] = val.astype(dtype)
    return out


def decode_inline_blocks(buf, type_bits: int, num_values: int) -> np.ndarray:
    """Decode Lance ``inline_bitpacking``: blocks of ``[W as a T-bit LE int][128*W bytes]``.

    Reads ``ceil(num_values / 1024)`` blocks and returns the first
    ``num_values`` values as ``uint{type_bits}``.
    """
    _check(0, type_bits)
    raw = _as_u8(buf)
    hdr = type_bits // 8
    fmt = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}[hdr]
    mv = memoryview(raw)  # type: ignore[arg-type]  # numpy stubs: ndarray.__buffer__ only for Python >= 3.12
    num_blocks = -(-num_values // BLOCK_VALUES)
    starts = np.empty(num_blocks, dtype=np.int64)
    widths = np.empty(num_blocks, dtype=np.int64)
    pos = 0
    # Block sizes depend on each header, so locating the blocks is sequential;
    # the unpacking itself is batched.
    for i in range(num_blocks):
        if pos + hdr > raw.size:
            raise ValueError(f"inline bit-packing buffer truncated: block {i} header at byte {pos} of {raw.size}")
        (w,) = struct.unpack_from(fmt, mv, pos)
        if w > type_bits:
            raise ValueError(f"inline bit-packing block {i} has bit width {w} > {type_bits}")
        starts[i] = pos + hdr
        widths[i] = w
        pos += hdr + packed_block_bytes(w)
    if pos > raw.size:
        raise ValueError(f"inline bit-packing buffer truncated: need {pos} bytes, got {raw.size}")
    return unpack_blocks_at(raw, starts, widths, type_bits)[:num_values]


def decode_inline_levels(buf, num_levels: int) -> np.ndarray:
    """Decode rep/def levels stored as inline bit-packing (``[u16 W][128*W bytes]`` blocks)."""
    return decode_inline_blocks(buf, 16, num_levels)


def min_bit_width(values: np.ndarray) -> int:
    """Smallest W such that every (unsigned) value fits in W bits."""
    values = np.asarray(values)
    if values.size == 0:
        return 0
    if values.dtype.kind == "i":
        values = values.view(f"u{values.dtype.itemsize}")
    return int(values.max()).bit_length()


def _block_bit_widths(blocks: np.ndarray) -> np.ndarray:
    maxes = blocks.max(axis=1)
    widths = np.zeros(maxes.size, dtype=np.int64)
    for b in range(blocks.dtype.itemsize * 8):
        widths += (maxes >> b) != 0
    return widths


def encode_inline_blocks(values: np.ndarray, type_bits: int) -> bytes:
    """Encode ``values`` as Lance ``inline_bitpacking`` blocks, minimal W per block.

    The last block is padded with zeros to 1024 values (as pylance does).
    """
    _check(0, type_bits)
    dtype = _native(type_bits)
    values = np.asarray(values).reshape(-1)
    if values.dtype.kind == "i":
        values = values.view(f"u{values.dtype.itemsize}")
    if values.dtype.kind != "u" or values.dtype.itemsize * 8 > type_bits:
        raise ValueError(f"cannot inline-bit-pack {values.dtype} values as {type_bits}-bit words")
    n = values.size
    num_blocks = -(-n // BLOCK_VALUES)
    if num_blocks == 0:
        return b""
    blocks = np.zeros(num_blocks * BLOCK_VALUES, dtype=dtype)
    blocks[:n] = values
    blocks = blocks.reshape(num_blocks, BLOCK_VALUES)
    widths = _block_bit_widths(blocks)
    hdr_words = 1
    words_per_block = hdr_words + widths * (BLOCK_VALUES // type_bits)  # in T-bit words
    word_starts = np.concatenate(([0], np.cumsum(words_per_block)[:-1]))
    out = np.zeros(int(words_per_block.sum()), dtype=dtype)
    out[word_starts] = widths
    for W in np.unique(widths).tolist():
        if W == 0:
            continue
        sel = np.flatnonzero(widths == W)
        packed = np.frombuffer(pack(blocks[sel].reshape(-1), W), dtype=_le(type_bits))
        nwords = W * (BLOCK_VALUES // type_bits)
        idx = (word_starts[sel] + hdr_words)[:, None] + np.arange(nwords)
        out[idx.reshape(-1)] = packed
    return out.astype(_le(type_bits), copy=False).tobytes()


def decode_out_of_line(buf, bit_width: int, type_bits: int, num_values: int) -> np.ndarray:
    """Decode Lance ``out_of_line_bitpacking`` with a fixed ``bit_width``.

    The buffer holds ``num_values // 1024`` whole packed blocks followed, when
    ``num_values % 1024`` is not zero, by a tail that is either one more
    zero-padded packed block or the tail values raw as T-bit words.  The two
    are told apart by length: exactly ``tail * T/8`` remaining bytes means raw.
    """
    _check(bit_width, type_bits)
    raw = _as_u8(buf)
    num_full, tail = divmod(num_values, BLOCK_VALUES)
    full_bytes = num_full * packed_block_bytes(bit_width)
    if raw.size < full_bytes:
        raise ValueError(
            f"out-of-line bit-packing buffer too short: {num_full} blocks of {bit_width} bits "
            f"need {full_bytes} bytes, got {raw.size}"
        )
    out = np.empty(num_values, dtype=_native(type_bits))
    out[: num_full * BLOCK_VALUES] = unpack(raw[:full_bytes], bit_width, type_bits, num_full)
    if tail:
        rest = raw[full_bytes:]
        word_bytes = type_bits // 8
        if rest.size == tail * word_bytes:
            out[num_full * BLOCK_VALUES :] = rest.view(_le(type_bits))
        elif rest.size >= packed_block_bytes(bit_width):
            out[num_full * BLOCK_VALUES :] = unpack(rest, bit_width, type_bits, 1)[:tail]
        else:
            raise ValueError(
                f"out-of-line bit-packing tail of {tail} values has {rest.size} bytes: neither "
                f"raw ({tail * word_bytes}) nor a packed block ({packed_block_bytes(bit_width)})"
            )
    return out


def encode_out_of_line(values: np.ndarray, bit_width: int | None = None) -> tuple[bytes, int]:
    """Encode ``values`` as ``out_of_line_bitpacking``; returns ``(buffer, bit_width)``.

    Whole blocks are packed; the tail is packed into a padded block only when
    the padding costs fewer bits than packing saves, else stored raw (pylance's rule).
    """
    values = np.asarray(values).reshape(-1)
    if values.dtype.kind == "i":
        values = values.view(f"u{values.dtype.itemsize}")
    type_bits = values.dtype.itemsize * 8
    if bit_width is None:
        bit_width = min_bit_width(values)
    _check(bit_width, type_bits)
    num_full, tail = divmod(values.size, BLOCK_VALUES)
    parts = [pack(values[: num_full * BLOCK_VALUES], bit_width)]
    if tail:
        padding_cost = bit_width * (BLOCK_VALUES - tail)
        savings = (type_bits - bit_width) * tail
        rest = values[num_full * BLOCK_VALUES :]
        if padding_cost < savings:
            padded = np.zeros(BLOCK_VALUES, dtype=values.dtype)
            padded[:tail] = rest
            parts.append(pack(padded, bit_width))
        else:
            parts.append(rest.astype(_le(type_bits), copy=False).tobytes())
    return b"".join(parts), bit_width
