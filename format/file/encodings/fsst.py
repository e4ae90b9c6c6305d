"""FSST (Fast Static Symbol Table) string compression as used by Lance 2.1/2.2.

Symbol table blob (always 2312 = 8 + 256*8 + 256 bytes in pylance files)::

    u64 info     bits 63..32 magic "FSST" (0x46535354), bit 24 encoder switch,
                 bits 23..16 suffix_lim, bits 15..8 terminator, bits 7..0 n_symbols
    n * 8 bytes  symbols (little-endian byte order, unused tail bytes zero)
    n bytes      symbol lengths (1..8)
    zero padding to 2312 bytes

Compressed stream: code ``c < 255`` emits ``symbol[c][:length[c]]``; code 255
is an escape whose next byte is emitted literally.  When the encoder switch is
off the values are stored uncompressed.
"""

from __future__ import annotations

import struct
import threading
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

FSST_MAGIC = 0x46535354
ESCAPE = 255
MAX_SYMBOLS = 255
SYMBOL_TABLE_SIZE = 8 + 256 * 8 + 256

_ENCODE_SPAN_BYTES = 1 << 20
_SEGMENT = 64  # the encoder's greedy parse restarts every 64 input bytes of a value
_SAMPLE_BYTES = 1 << 16

__all__ = [
    "SYMBOL_TABLE_SIZE",
    "compress",
    "decompress",
    "decompress_with_table",
    "parse_symbol_table",
    "serialize_symbol_table",
]


def _as_u8(buf) -> np.ndarray:
    if isinstance(buf, np.ndarray):
        return np.ascontiguousarray(buf).reshape(-1).view(np.uint8)
    return np.frombuffer(buf, dtype=np.uint8)


# ---------------------------------------------------------------- symbol table


def parse_symbol_table(table) -> tuple[np.ndarray, np.ndarray, bool]:
    """Parse an FSST symbol table blob.

    Returns ``(symbols, lengths, encoder_on)``: ``symbols`` is uint8 of shape
    (n, 8), ``lengths`` uint8 of shape (n,).  Raises ``ValueError`` on a bad
    magic, a size other than 2312 bytes, or symbol lengths outside 1..8.
    """
    raw = _as_u8(table)
    if raw.size != SYMBOL_TABLE_SIZE:
        raise ValueError(f"FSST symbol table must be {SYMBOL_TABLE_SIZE} bytes, got {raw.size}")
    (info,) = struct.unpack_from("<Q", raw.tobytes()[:8])
    if info >> 32 != FSST_MAGIC:
        raise ValueError(f"bad FSST symbol table magic 0x{info >> 32:08x} (expected 0x46535354)")
    n = info & 0xFF
    encoder_on = bool(info & (1 << 24))
    symbols = raw[8 : 8 + 8 * n].reshape(n, 8).copy()
    lengths = raw[8 + 8 * n : 8 + 9 * n].copy()
    if n and (lengths.min() < 1 or lengths.max() > 8):
        raise ValueError(f"FSST symbol lengths must be 1..8, got {sorted(set(lengths.tolist()))}")
    return symbols, lengths, encoder_on


def serialize_symbol_table(symbols, lengths, encoder_on: bool = True) -> bytes:
    """Build the 2312-byte symbol table blob pylance reads."""
    symbols = np.asarray(symbols, dtype=np.uint8).reshape(-1, 8)
    lengths = np.asarray(lengths, dtype=np.uint8).reshape(-1)
    n = lengths.size
    if n > MAX_SYMBOLS or symbols.shape[0] != n:
        raise ValueError(f"FSST needs at most {MAX_SYMBOLS} symbols with one length each")
    if n and (lengths.min() < 1 or lengths.max() > 8):
        raise ValueError("FSST symbol lengths must be 1..8")
    clean = symbols.copy()
    clean[np.arange(8)[None, :] >= lengths[:, None]] = 0
    info = (FSST_MAGIC << 32) | (int(bool(encoder_on)) << 24) | n
    out = bytearray(SYMBOL_TABLE_SIZE)
    struct.pack_into("<Q", out, 0, info)
    out[8 : 8 + 8 * n] = clean.tobytes()
    out[8 + 8 * n : 8 + 9 * n] = lengths.tobytes()
    return bytes(out)


# ------------------------------------------------------------------ decoding
#
# Codes are decoded two at a time.  Every code pair, read as one little-endian
# u16, indexes a 65536-entry Arrow binary "pair dictionary" holding the pair's
# expansion (up to 16 bytes).  One ``take`` of the dictionary by those u16
# keys then writes the whole decompressed stream as the data buffer of its
# result, in C++, and its offsets are the output position of every pair - the
# value offsets follow from them.  No per-byte index is ever built.
#
# Escapes (code 255, then a literal byte) and codes past the table are rare:
# the pairs holding them get dictionary entries of their own, appended after
# the 65536, and their keys are redirected there (as does an odd last code).
# Dictionaries are themselves built by ``take`` from a 512-entry code
# dictionary (codes, then 256 + b for literal byte b) and cached per symbol
# table.  Short inputs (a few chunks, as ``take`` reads them) skip the pair
# dictionary and look codes up one by one.

_PAIR_CACHE: dict[bytes, tuple] = {}
_CACHE_LOCK = threading.Lock()
_BAD = 0xFF  # length of unknown codes (and of 255) in the code-length table


def _binary_from(items: np.ndarray, lens: np.ndarray, large: bool) -> pa.Array:
    """Arrow binary array whose value i is ``items[i, :lens[i]]``."""
    keep = np.arange(items.shape[1])[None, :] < lens[:, None]
    values = items[keep]
    odt = np.int64 if large else np.int32
    offs = np.zeros(lens.size + 1, dtype=odt)
    np.cumsum(lens, out=offs[1:])
    t = pa.large_binary() if large else pa.binary()
    return pa.Array.from_buffers(t, lens.size, [None, pa.py_buffer(offs), pa.py_buffer(values)])


def _pair_tables(symbols, lengths):
    """(code lengths u8[256] with ``_BAD`` for unknown codes and 255, code
    words u64[256], {large: pair dictionary}) for a symbol table; cached."""
    symbols = np.asarray(symbols, dtype=np.uint8).reshape(-1, 8)
    lengths = np.asarray(lengths, dtype=np.uint8).reshape(-1)
    n = lengths.size
    if n > MAX_SYMBOLS or symbols.shape[0] != n:
        raise ValueError(f"FSST symbol table has {symbols.shape[0]} symbols and {n} lengths")
    key = symbols.tobytes() + lengths.tobytes()
    hit = _PAIR_CACHE.get(key)
    if hit is not None:
        return hit
    clen = np.full(256, _BAD, dtype=np.uint8)
    clen[:n] = lengths
    sym = np.zeros((256, 8), dtype=np.uint8)
    sym[:n] = symbols
    sym[np.arange(8)[None, :] >= np.minimum(clen, 8)[:, None]] = 0  # zero padded words
    cword = sym.view("<u8").reshape(-1)
    out = (clen, cword, {})
    with _CACHE_LOCK:  # pages may be decoded on several threads
        while len(_PAIR_CACHE) >= 16:
            _PAIR_CACHE.pop(next(iter(_PAIR_CACHE)))
        _PAIR_CACHE[key] = out
    return out


def _pairs_of(code_dict: pa.Array, parts: np.ndarray, large: bool) -> pa.Array:
    """Binary array of entries made of two code-dictionary entries each:
    ``parts`` holds the two entry indices of every pair, interleaved."""
    res = pc.take(code_dict, pa.array(parts), boundscheck=False)
    bufs = res.buffers()
    offs = np.frombuffer(bufs[1], dtype=np.int32, count=len(res) + 1, offset=res.offset * 4)[::2]
    first = int(offs[0])
    odt = np.int64 if large else np.int32
    offs = (offs - first).astype(odt)
    data = bufs[2].slice(first, int(offs[-1])) if int(offs[-1]) else pa.py_buffer(b"")
    t = pa.large_binary() if large else pa.binary()
    return pa.Array.from_buffers(t, len(res) // 2, [None, pa.py_buffer(offs), data])


def _pair_dictionary(tables, large: bool) -> pa.Array:
    """Entry ``a + 256 * b``: the expansion of code a then code b (unknown
    codes and 255 expand to nothing: such pairs get entries of their own)."""
    dicts = tables[2]
    d = dicts.get(large)
    if d is None:
        parts = np.empty(2 * 65536, dtype=np.uint16)
        parts[0::2] = np.tile(np.arange(256, dtype=np.uint16), 256)
        parts[1::2] = np.repeat(np.arange(256, dtype=np.uint16), 256)
        d = dicts[large] = _pairs_of(_code_dictionary(tables), parts, large)
    return d


def _code_dictionary(tables) -> pa.Array:
    """512 entries: code c (255 and unknown codes empty), then literal byte b at 256 + b."""
    clen, cword, dicts = tables
    d = dicts.get("codes")
    if d is None:
        lens = np.where(clen == _BAD, 0, clen).astype(np.int64)
        items = np.zeros((512, 8), dtype=np.uint8)
        items[:256] = cword.astype("<u8").view(np.uint8).reshape(256, 8)
        items[256:, 0] = np.arange(256)
        d = dicts["codes"] = _binary_from(items, np.concatenate((lens, np.ones(256, np.int64))), False)
    return d


_SMALL_CODES = 1 << 15  # below this, codes are looked up one by one (no pair dictionary)


def _escape_codes(seg: np.ndarray, p255: np.ndarray, vstarts: np.ndarray) -> np.ndarray:
    """Positions (sorted) of the 255 bytes of ``seg`` that are escape codes.

    ``p255`` lists every 255 byte.  In a run of consecutive 255s (restarting at
    each value start) the bytes alternate escape, literal, escape, ...: a run
    always begins with an escape, since the byte before it is a complete token.
    """
    if p255.size == 0:
        return p255
    new_run = np.ones(p255.size, dtype=bool)
    consec = p255[1:] == p255[:-1] + 1
    new_run[1:] = ~consec
    if consec.any():  # a run also restarts at a value start (looked up only there)
        at = np.flatnonzero(consec) + 1
        new_run[at] |= _member(p255[at], vstarts)
    run_start = np.where(new_run, np.arange(p255.size), 0)
    np.maximum.accumulate(run_start, out=run_start)
    return p255[((np.arange(p255.size) - run_start) & 1) == 0]


def _member(x: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """``x in sorted_set``, elementwise."""
    if sorted_set.size == 0 or x.size == 0:
        return np.zeros(x.size, dtype=bool)
    if x.dtype != sorted_set.dtype:  # else numpy converts the (large) sorted side per call
        if x.size and (int(x.max()) > np.iinfo(sorted_set.dtype).max or int(x.min()) < np.iinfo(sorted_set.dtype).min):
            x = x.astype(np.int64)
            sorted_set = sorted_set.astype(np.int64)
        else:
            x = x.astype(sorted_set.dtype)
    j = np.searchsorted(sorted_set, x)
    j[j >= sorted_set.size] = sorted_set.size - 1
    return sorted_set[j] == x


def _entries(seg, pos, esc, lit) -> np.ndarray:
    """Code-dictionary entry of the token part at each position ``pos``: the
    code's, an empty one for an escape code, 256 + byte for a literal."""
    e = seg[pos].astype(np.uint16)
    is_lit = _member(pos, lit)
    e[is_lit] += 256
    e[_member(pos, esc)] = ESCAPE  # code 255 expands to nothing
    return e


def _sorted_unique(x: np.ndarray) -> np.ndarray:
    if x.size < 2:
        return x
    x = np.sort(x)
    keep = np.ones(x.size, dtype=bool)
    keep[1:] = x[1:] != x[:-1]
    return x[keep]


def _decode_pairs(seg: np.ndarray, vstarts: np.ndarray, symbols, lengths):
    """Decode one buffer of codes; ``vstarts`` (sorted) are the value starts in
    ``seg``.  Returns the bytes and the value offsets (n + 1, from 0; int32
    unless the output may pass 2 GiB)."""
    tables = _pair_tables(symbols, lengths)
    clen = tables[0]
    nsym = int(np.asarray(lengths).size)
    m = seg.size
    npairs = m // 2
    large = 16 * (npairs + 1) > 2**31 - 1
    # ---- the rare tokens: 255 bytes (escapes, literals) and unknown codes
    esc = lit = lit_at = np.zeros(0, dtype=np.int64)
    rare = np.flatnonzero(seg >= nsym) if nsym < 256 else np.zeros(0, np.int64)
    if rare.size:
        rvals = seg[rare]
        esc = _escape_codes(seg, rare[rvals == ESCAPE], vstarts)
        lit = esc + 1
        if lit.size:
            # an escape code ends its value when the next value starts right after it
            lit_at = np.searchsorted(vstarts, lit.astype(vstarts.dtype))  # reused below
            inb = lit_at < vstarts.size
            if int(lit[-1]) >= m or np.any(vstarts[lit_at[inb]] == lit[inb]):
                raise ValueError("corrupt FSST data: a value ends with an escape code")
        unknown = rare[rvals != ESCAPE]
        unknown = unknown[~_member(unknown, lit)]
        if unknown.size:
            raise ValueError(f"corrupt FSST data: code {int(seg[unknown[0]])} but the table has {nsym} symbols")
    if m < _SMALL_CODES:
        return _decode_codes(seg, vstarts, tables, esc, lit)
    fix = _sorted_unique(np.concatenate((esc >> 1, lit >> 1)))
    fix = fix[fix < npairs]
    keys = seg[: 2 * npairs].view("<u2")
    dictionary = _pair_dictionary(tables, large)
    if fix.size or m % 2:
        # pairs of their own: the patched ones, then the odd last code (with nothing)
        parts = np.full(2 * (fix.size + m % 2), ESCAPE, dtype=np.uint16)
        parts[0 : 2 * fix.size : 2] = _entries(seg, 2 * fix, esc, lit)
        parts[1 : 2 * fix.size : 2] = _entries(seg, 2 * fix + 1, esc, lit)
        if m % 2:
            parts[-2] = _entries(seg, np.array([m - 1]), esc, lit)[0]
        dictionary = pa.concat_arrays([dictionary, _pairs_of(_code_dictionary(tables), parts, large)])
        idx = np.empty(npairs + m % 2, dtype=np.uint32)
        idx[:npairs] = keys
        idx[fix] = 65536 + np.arange(fix.size, dtype=np.uint32)
        if m % 2:
            idx[-1] = 65536 + fix.size
    else:
        idx = keys
    res = pc.take(dictionary, pa.array(idx), boundscheck=False)
    bufs = res.buffers()
    odt: type[np.signedinteger[Any]] = np.int64 if large else np.int32
    pair_off = np.frombuffer(bufs[1], dtype=odt, count=len(res) + 1, offset=res.offset * odt().itemsize)
    first = int(pair_off[0])
    total = int(pair_off[-1]) - first
    data = np.frombuffer(bufs[2], dtype=np.uint8, count=total, offset=first) if total else np.zeros(0, np.uint8)
    # value offsets: the offset of the value's first pair, plus that pair's
    # first part when the value starts at its second code
    new_offsets = np.empty(vstarts.size + 1, dtype=odt)
    vout = new_offsets[:-1]
    vs = vstarts.astype(odt, copy=False)
    np.take(pair_off, vs >> 1, out=vout)  # vs >> 1 <= npairs < len(pair_off)
    if m:
        odd = vs & 1
        first_part = clen[np.take(seg, vs - odd, mode="clip")]  # clip: starts at the very end (odd == 0)
        np.multiply(odd, first_part, out=odd)
        vout += odd
    even = (lit & 1) == 0
    ev = lit[even]
    if ev.size and vstarts.size:
        # ... where that first part is a literal it is one byte, whatever its code says
        n = vstarts.size
        k = lit_at[even]  # no value starts at a literal: the first start >= lit + 1
        hit = k < n
        hit[hit] = vstarts[k[hit]] == ev[hit] + 1
        k, d = k[hit], 1 - clen[seg[ev[hit]]].astype(odt)
        while k.size:  # every value starting there (empty values share a start)
            vout[k] += d
            nxt = k + 1
            more = nxt < n
            more[more] = vstarts[nxt[more]] == vstarts[k[more]]
            k, d = nxt[more], d[more]
    if first:
        vout -= first
    new_offsets[-1] = total
    return data, new_offsets


def _decode_codes(seg: np.ndarray, vstarts: np.ndarray, tables, esc: np.ndarray, lit: np.ndarray):
    """:func:`_decode_pairs` for short inputs: one dictionary entry per code."""
    idx = seg.astype(np.uint16)
    if esc.size:
        idx[lit] += 256  # literal byte b -> entry 256 + b
        idx[esc] = ESCAPE  # an empty entry
    res = pc.take(_code_dictionary(tables), pa.array(idx), boundscheck=False)
    bufs = res.buffers()
    code_off = np.frombuffer(bufs[1], dtype=np.int32, count=len(res) + 1, offset=res.offset * 4)
    first = int(code_off[0])
    total = int(code_off[-1]) - first
    data = np.frombuffer(bufs[2], dtype=np.uint8, count=total, offset=first) if total else np.zeros(0, np.uint8)
    new_offsets = np.empty(vstarts.size + 1, dtype=np.int32)
    np.take(code_off, vstarts, out=new_offsets[:-1])
    if first:
        new_offsets[:-1] -= first
    new_offsets[-1] = total
    return data, new_offsets


def decompress(compressed, offsets, symbols, lengths, *, encoder_on: bool = True, small_offsets: bool = False):
    """Decompress all FSST values at once.

    ``offsets`` (n+1 integers, need not start at 0) delimit the compressed
    values in ``compressed``.  Returns ``(data uint8, new_offsets int64)`` with
    ``new_offsets[0] == 0`` delimiting the decompressed values
    (``small_offsets``: int32 instead, unless the output could reach 2 GiB).
    ``data`` may be a read-only view of an Arrow buffer.  With
    ``encoder_on=False`` the values are copied through unchanged.  Raises
    ``ValueError`` on inconsistent offsets or corrupt codes.
    """
    comp = _as_u8(compressed)
    offs = np.asarray(offsets).reshape(-1)
    if offs.size == 0:
        raise ValueError("FSST offsets must hold at least one entry")
    if offs.dtype.kind not in "iu":
        offs = offs.astype(np.int64)
    n = offs.size - 1
    if int(offs[0]) < 0 or int(offs[-1]) > comp.size or (n and np.any(offs[1:] < offs[:-1])):
        raise ValueError(f"FSST offsets are not monotonic within the {comp.size}-byte compressed buffer")
    base = int(offs[0])
    # value starts relative to the first; int32 is enough below 2 GiB
    idt = np.int32 if int(offs[-1]) < 2**31 else np.int64
    starts = offs[:-1]
    if starts.dtype.itemsize == np.dtype(idt).itemsize and starts.dtype.kind == "u":
        starts = starts.view(idt)  # monotonic and below the limit: same values
    else:
        starts = starts.astype(idt, copy=False)
    if base:
        starts = starts - base
    if not encoder_on:
        return comp[base : int(offs[-1])].copy(), np.append(starts.astype(np.int64), int(offs[-1]) - base)
    if n == 0:
        _pair_tables(symbols, lengths)  # validates the table
        return np.zeros(0, dtype=np.uint8), np.zeros(1, dtype=np.int32 if small_offsets else np.int64)
    seg = comp[base : int(offs[-1])]
    data, new_offsets = _decode_pairs(seg, starts, symbols, lengths)
    if not small_offsets:
        new_offsets = new_offsets.astype(np.int64, copy=False)
    return data, new_offsets


def decompress_with_table(table, compressed, offsets):
    """Parse ``table`` (the ``Fsst.symbol_table`` bytes) and decompress."""
    symbols, lengths, on = parse_symbol_table(table)
    return decompress(compressed, offsets, symbols, lengths, encoder_on=on)


# ------------------------------------------------------------------ encoding


def _windows(data: np.ndarray) -> np.ndarray:
    """u64 little-endian window of the (up to) 8 bytes starting at each position."""
    m = data.size
    rows = -(-m // 8)
    padded = np.zeros(rows * 8 + 16, dtype=np.uint8)
    padded[:m] = data
    win = np.empty((rows, 8), dtype=np.uint64)
    for s in range(8):  # positions s, s+8, ... are aligned loads from padded[s:]
        win[:, s] = padded[s : s + rows * 8].view("<u8")
    return win.reshape(-1)[:m]


_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
_HASH_BITS = 12


def _hash3(words: np.ndarray) -> np.ndarray:
    """Hash of the first three bytes (``words`` may be u32 or u64 windows)."""
    prefix = (words & 0xFFFFFF).astype(np.uint32)
    return (prefix * np.uint32(0x9E3779B1)) >> np.uint32(32 - _HASH_BITS)


class _Matcher:
    """Greedy longest-symbol lookup, shaped like FSST's own encoder.

    1- and 2-byte symbols live in direct tables; longer symbols live in a hash
    table keyed on their first three bytes, one symbol per slot.  Symbols that
    lose a slot collision are dropped: ``keys``/``lens`` hold the usable
    symbols, and codes index them.
    """

    def __init__(self, keys: np.ndarray, lens: np.ndarray):
        keep = np.ones(keys.size, dtype=bool)
        long_idx = np.flatnonzero(lens >= 3)
        if long_idx.size:
            _, first = np.unique(_hash3(keys[long_idx]), return_index=True)  # earlier wins
            keep[long_idx] = False
            keep[long_idx[first]] = True
        self.keys, self.lens = keys[keep], lens[keep]
        keys, lens = self.keys, self.lens
        self.code1 = np.full(256, -1, dtype=np.int16)
        self.code2 = np.full(1 << 16, -1, dtype=np.int16)
        self.long_key = np.zeros(1 << _HASH_BITS, dtype=np.uint64)
        self.long_len = np.full(1 << _HASH_BITS, 99, dtype=np.int16)  # 99: empty slot
        self.long_code = np.full(1 << _HASH_BITS, -1, dtype=np.int16)
        for k, table in ((1, self.code1), (2, self.code2)):
            idx = np.flatnonzero(lens == k)
            table[keys[idx].astype(np.intp)] = idx
        idx = np.flatnonzero(lens >= 3)
        slots = _hash3(keys[idx]).astype(np.intp)
        self.long_key[slots], self.long_len[slots], self.long_code[slots] = keys[idx], lens[idx], idx

    def longest(self, data: np.ndarray, win: np.ndarray, room: np.ndarray):
        """Code (-1: escape) and length (0 for escapes) of the match at each position."""
        w32 = win.astype(np.uint32)
        code = self.code1[data]
        length = (code >= 0).astype(np.int16)
        c2 = self.code2[w32 & 0xFFFF]
        hit = (c2 >= 0) & (room >= 2)
        code[hit] = c2[hit]
        length[hit] = 2
        slot = _hash3(w32)
        long_len = self.long_len[slot]
        cand = np.flatnonzero(long_len <= room)
        if cand.size:
            slot = slot[cand]
            clen = long_len[cand]
            ok = (win[cand] & _MASKS[clen]) == self.long_key[slot]
            cand, slot = cand[ok], slot[ok]
            code[cand] = self.long_code[slot]
            length[cand] = clen[ok]
        return code, length


def _greedy_parse(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, matcher: _Matcher):
    """Greedy longest-match tokenisation of every value at once.

    The values must tile ``data`` in order.  Each value is cut into segments
    of ``_SEGMENT`` bytes that are parsed independently, so the lock-step walk
    below needs at most ``_SEGMENT`` iterations whatever the value lengths.
    Returns the token positions (sorted), their codes (-1 = escape) and lengths.
    """
    m = data.size
    if m == 0:
        z = np.zeros(0, dtype=np.int32)
        return z, z, z
    starts = starts.astype(np.int32)
    ends = ends.astype(np.int32)
    nseg = (ends - starts + (_SEGMENT - 1)) // _SEGMENT
    first_seg = np.cumsum(nseg) - nseg
    seg_rank = np.arange(int(nseg.sum()), dtype=np.int32) - np.repeat(first_seg, nseg)
    seg_start = np.repeat(starts, nseg) + seg_rank * _SEGMENT
    seg_end = np.minimum(seg_start + _SEGMENT, np.repeat(ends, nseg))
    limit = np.repeat(seg_end, seg_end - seg_start)
    code, length = matcher.longest(data, _windows(data), limit - np.arange(m, dtype=np.int32))
    step = np.maximum(length, 1).astype(np.int32)
    on_token = np.zeros(m, dtype=bool)
    cur = seg_start
    while cur.size:
        on_token[cur] = True
        nxt = cur + step[cur]
        cur = nxt[nxt < limit[cur]]
    tok = np.flatnonzero(on_token)
    return tok, code[tok], length[tok]


def _value_bounds(arr: pa.Array):
    """(data bytes, n+1 int64 offsets into them, is-large-type) of a string/binary array."""
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    if not (large or pa.types.is_string(arr.type) or pa.types.is_binary(arr.type)):
        raise ValueError(f"FSST compresses string/binary arrays, got {arr.type}")
    bufs = arr.buffers()
    odt = np.int64 if large else np.int32
    offs = np.frombuffer(bufs[1], dtype=odt)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return data, offs, large


def _encoded_size(sample, starts, ends, matcher) -> int:
    _, code, _ = _greedy_parse(sample, starts, ends, matcher)
    return code.size + int((code < 0).sum())


def _learn_table(sample: np.ndarray, offs: np.ndarray) -> _Matcher:
    """Pick up to 255 symbols by rounds of parse / count / select (FSST-style).

    Candidates are the tokens of the current parse and the concatenations of
    adjacent token pairs (cut to 8 bytes), ranked by bytes covered.  The table
    that compresses the sample best over all rounds wins.
    """
    starts, ends = offs[:-1], offs[1:]
    matcher = _Matcher(np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64))
    win = _windows(sample)
    value_of = np.repeat(np.arange(starts.size), ends - starts)
    best, best_size = matcher, sample.size * 2 + 1
    for _round in range(5):
        tok, _, tlen = _greedy_parse(sample, starts, ends, matcher)
        tlen = np.maximum(tlen, 1).astype(np.intp)  # an escaped byte counts as a 1-byte token
        same = value_of[tok[1:]] == value_of[tok[:-1]]
        plen = np.minimum(tlen[:-1] + tlen[1:], 8)[same]
        ckey = np.concatenate((win[tok] & _MASKS[tlen], win[tok[:-1]][same] & _MASKS[plen]))
        clen = np.concatenate((tlen, plen))
        order = np.lexsort((ckey, clen))
        ckey, clen = ckey[order], clen[order]
        first = np.ones(ckey.size, dtype=bool)
        first[1:] = (ckey[1:] != ckey[:-1]) | (clen[1:] != clen[:-1])
        idx = np.flatnonzero(first)
        counts = np.diff(np.append(idx, ckey.size))
        ukey, ulen = ckey[idx], clen[idx]
        # single bytes are boosted (as FSST does) since escaping one costs 2 bytes
        gain = counts * np.where(ulen == 1, 8, ulen)
        gain[(ulen > 1) & (counts < 2)] = 0
        top = np.argsort(-gain, kind="stable")[:MAX_SYMBOLS]
        top = top[gain[top] > 0]
        matcher = _Matcher(ukey[top], ulen[top])
        size = _encoded_size(sample, starts, ends, matcher)
        if size < best_size:
            best, best_size = matcher, size
    return best


def compress(values, *, seed: int = 0):
    """FSST-compress a pyarrow string/binary (or large_*) array.

    Returns ``(symbol_table_bytes, compressed_bytes, offsets)``: the 2312-byte
    table, the compressed values back to back and ``len(values)+1`` offsets
    (int32, or int64 for large types) delimiting them, starting at 0.  When
    compression does not pay off the table's encoder switch is off and the
    values are returned unchanged.  Validity is ignored: null slots are
    compressed like any other value (they are normally empty).
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    data, offs, large = _value_bounds(values)
    odt = np.int64 if large else np.int32
    starts, ends = offs[:-1], offs[1:]
    raw = data[int(offs[0]) : int(offs[-1])]  # arrow values are contiguous
    raw_offs = offs - offs[0]

    def passthrough():
        return serialize_symbol_table(np.zeros((0, 8)), [], False), raw.tobytes(), raw_offs.astype(odt)

    if raw.size == 0:
        return passthrough()
    n = starts.size
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    lens = (ends - starts)[order]
    take = order[: int(np.searchsorted(np.cumsum(lens), _SAMPLE_BYTES)) + 1]
    take.sort()
    lens = ends[take] - starts[take]
    csum = np.cumsum(lens)
    src = np.repeat(starts[take] - (csum - lens), lens) + np.arange(int(csum[-1]), dtype=np.int64)
    matcher = _learn_table(data[src], np.concatenate(([0], csum)))
    if matcher.keys.size == 0:
        return passthrough()
    out_parts, value_sizes = [], np.zeros(n, dtype=np.int64)
    raw_starts, raw_ends = raw_offs[:-1], raw_offs[1:]
    targets = np.arange(_ENCODE_SPAN_BYTES, raw.size, _ENCODE_SPAN_BYTES)
    cuts = np.unique(np.concatenate(([0], np.searchsorted(raw_offs, targets), [n])))
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        lo, hi = int(raw_offs[a]), int(raw_offs[b])
        seg = raw[lo:hi]
        tok, code, _ = _greedy_parse(seg, raw_starts[a:b] - lo, raw_ends[a:b] - lo, matcher)
        width = np.where(code < 0, 2, 1)
        wsum = np.cumsum(width)
        out = np.empty(int(wsum[-1]) if wsum.size else 0, dtype=np.uint8)
        at = wsum - width
        out[at] = np.where(code < 0, ESCAPE, code).astype(np.uint8)
        escaped = np.flatnonzero(code < 0)
        out[at[escaped] + 1] = seg[tok[escaped]]
        out_at = np.concatenate(([0], wsum))[np.searchsorted(tok, raw_starts[a:b] - lo)]
        value_sizes[a:b] = np.diff(out_at, append=out.size)
        out_parts.append(out)
    compressed = np.concatenate(out_parts) if out_parts else np.zeros(0, np.uint8)
    if compressed.size + SYMBOL_TABLE_SIZE >= raw.size:
        return passthrough()
    new_offs = np.concatenate(([0], np.cumsum(value_sizes)))
    if new_offs[-1] > np.iinfo(odt).max:
        odt = np.int64
    symbols = matcher.keys.astype("<u8").view(np.uint8).reshape(-1, 8)
    table = serialize_symbol_table(symbols, matcher.lens.astype(np.uint8), True)
    return table, compressed.tobytes(), new_offs.astype(odt)
