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

import numpy as np
import pyarrow as pa

FSST_MAGIC = 0x46535354
ESCAPE = 255
MAX_SYMBOLS = 255
SYMBOL_TABLE_SIZE = 8 + 256 * 8 + 256

_SPAN_BYTES = 1 << 22  # values are decoded in spans of about this many compressed bytes
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
        raise ValueError(
            f"FSST symbol table must be {SYMBOL_TABLE_SIZE} bytes, got {raw.size}"
        )
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


def _decode_tables(symbols, lengths):
    """512-entry expansion tables: 0..255 are codes, 256+b is the literal byte b."""
    symbols = np.asarray(symbols, dtype=np.uint8).reshape(-1, 8)
    lengths = np.asarray(lengths, dtype=np.uint8).reshape(-1)
    n = lengths.size
    if n > MAX_SYMBOLS or symbols.shape[0] != n:
        raise ValueError(f"FSST symbol table has {symbols.shape[0]} symbols and {n} lengths")
    table = np.zeros((512, 8), dtype=np.uint8)
    table[:n] = symbols
    table[256:, 0] = np.arange(256, dtype=np.uint8)
    lens = np.zeros(512, dtype=np.int64)
    lens[:n] = lengths
    lens[256:] = 1
    return table.reshape(-1), lens, n


def _decode_span(seg: np.ndarray, starts: np.ndarray, table, lens, nsym):
    """Decode one span; ``starts`` are the value start positions within ``seg``.

    Returns the decoded bytes and the decoded end offset of every value.
    """
    m = seg.size
    ends = np.append(starts[1:], m)
    if m == 0:
        return np.zeros(0, dtype=np.uint8), np.zeros(starts.size, dtype=np.int64)
    esc = seg == ESCAPE
    vstart = np.zeros(m, dtype=bool)
    vstart[starts[starts < m]] = True
    prev_esc = np.zeros(m, dtype=bool)
    prev_esc[1:] = esc[:-1]
    # In a run of 255s (restarting at each value) the bytes alternate escape,
    # literal, escape, ...; a non-255 byte is a literal iff an escape precedes it.
    pos = np.arange(m, dtype=np.int64)
    run_start = np.where(esc & (~prev_esc | vstart), pos, 0)
    np.maximum.accumulate(run_start, out=run_start)
    esc_literal = esc & (((pos - run_start) & 1) == 1)
    esc_code = esc & ~esc_literal
    prev_code = np.zeros(m, dtype=bool)
    prev_code[1:] = esc_code[:-1]
    literal = esc_literal | (prev_code & ~vstart)

    nonempty = ends > starts
    if esc_code[ends[nonempty] - 1].any():
        raise ValueError("corrupt FSST data: a value ends with an escape code")
    key = seg.astype(np.int64) | (literal.astype(np.int64) << 8)
    bad = ~literal & ~esc & (seg >= nsym)
    if bad.any():
        code = int(seg[np.argmax(bad)])
        raise ValueError(f"corrupt FSST data: code {code} but the table has {nsym} symbols")
    out_len = lens[key]
    csum = np.cumsum(out_len)
    total = int(csum[-1])
    src = np.repeat(key * 8 - (csum - out_len), out_len)
    src += np.arange(total, dtype=np.int64)
    data = table[src]
    csum0 = np.concatenate(([0], csum))
    return data, csum0[ends]


def decompress(compressed, offsets, symbols, lengths, *, encoder_on: bool = True):
    """Decompress all FSST values at once.

    ``offsets`` (n+1 integers, need not start at 0) delimit the compressed
    values in ``compressed``.  Returns ``(data uint8, new_offsets int64)`` with
    ``new_offsets[0] == 0`` delimiting the decompressed values.  With
    ``encoder_on=False`` the values are copied through unchanged.
    Raises ``ValueError`` on inconsistent offsets or corrupt codes.
    """
    comp = _as_u8(compressed)
    offs = np.asarray(offsets).astype(np.int64, copy=False).reshape(-1)
    if offs.size == 0:
        raise ValueError("FSST offsets must hold at least one entry")
    n = offs.size - 1
    if offs[0] < 0 or offs[-1] > comp.size or (n and np.any(offs[1:] < offs[:-1])):
        raise ValueError(
            f"FSST offsets are not monotonic within the {comp.size}-byte compressed buffer"
        )
    base = int(offs[0])
    if not encoder_on:
        return comp[base : int(offs[-1])].copy(), offs - base
    table, lens, nsym = _decode_tables(symbols, lengths)
    new_offsets = np.zeros(n + 1, dtype=np.int64)
    if n == 0:
        return np.zeros(0, dtype=np.uint8), new_offsets
    total_in = int(offs[-1]) - base
    targets = base + np.arange(_SPAN_BYTES, total_in, _SPAN_BYTES, dtype=np.int64)
    cuts = np.unique(np.concatenate(([0], np.searchsorted(offs, targets), [n])))
    parts = []
    out_base = 0
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        if b <= a:
            continue
        seg = comp[int(offs[a]) : int(offs[b])]
        data, value_ends = _decode_span(seg, offs[a:b] - offs[a], table, lens, nsym)
        new_offsets[a + 1 : b + 1] = out_base + value_ends
        out_base += data.size
        parts.append(data)
    data = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8)
    return data, new_offsets


def decompress_with_table(table, compressed, offsets):
    """Parse ``table`` (the ``Fsst.symbol_table`` bytes) and decompress."""
    symbols, lengths, on = parse_symbol_table(table)
    return decompress(compressed, offsets, symbols, lengths, encoder_on=on)


# ------------------------------------------------------------------ encoding


def _windows(data: np.ndarray) -> np.ndarray:
    """u64 little-endian window of the (up to) 8 bytes starting at each position."""
    padded = np.zeros(data.size + 8, dtype=np.uint8)
    padded[: data.size] = data
    win = np.zeros(data.size, dtype=np.uint64)
    for j in range(8):
        win |= padded[j : j + data.size].astype(np.uint64) << np.uint64(8 * j)
    return win


_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
_HASH_BITS = 16
_HASH_MUL = np.uint64(0x9E3779B97F4A7C15)


class _Matcher:
    """Longest-symbol lookup for a symbol table (direct tables for 1-2 bytes, hashes above)."""

    def __init__(self, keys: np.ndarray, lens: np.ndarray):
        self.code1 = np.full(256, -1, dtype=np.int64)
        self.code2 = np.full(1 << 16, -1, dtype=np.int64)
        self.hashed = {}
        for k in range(8, 0, -1):
            idx = np.flatnonzero(lens == k)
            if idx.size == 0:
                continue
            if k == 1:
                self.code1[keys[idx].astype(np.int64)] = idx
            elif k == 2:
                self.code2[keys[idx].astype(np.int64)] = idx
            else:
                slots = self._slot(keys[idx])
                tab_key = np.zeros(1 << _HASH_BITS, dtype=np.uint64)
                tab_code = np.full(1 << _HASH_BITS, -1, dtype=np.int64)
                # on a slot collision the later (lower-priority) symbol is dropped
                tab_key[slots[::-1]] = keys[idx][::-1]
                tab_code[slots[::-1]] = idx[::-1]
                self.hashed[k] = (tab_key, tab_code)

    @staticmethod
    def _slot(keys: np.ndarray) -> np.ndarray:
        return ((keys * _HASH_MUL) >> np.uint64(64 - _HASH_BITS)).astype(np.int64)

    def longest(self, win: np.ndarray, room: np.ndarray):
        """Code and length of the longest symbol at each position (-1/0 when none)."""
        code = self.code1[(win & np.uint64(0xFF)).astype(np.int64)]
        length = (code >= 0).astype(np.int64)
        c2 = self.code2[(win & np.uint64(0xFFFF)).astype(np.int64)]
        hit = (c2 >= 0) & (room >= 2)
        code[hit], length[hit] = c2[hit], 2
        for k in sorted(self.hashed):
            tab_key, tab_code = self.hashed[k]
            cand = np.flatnonzero(room >= k)
            key = win[cand] & _MASKS[k]
            slot = self._slot(key)
            ok = (tab_code[slot] >= 0) & (tab_key[slot] == key)
            code[cand[ok]] = tab_code[slot[ok]]
            length[cand[ok]] = k
        return code, length


def _greedy_parse(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, matcher: _Matcher):
    """Greedy longest-match tokenisation of every value at once.

    Returns the token positions (sorted), their codes (-1 = escape) and lengths.
    """
    m = data.size
    if m == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    lens = ends - starts
    owner_start = np.repeat(starts, lens)
    owner_end = np.repeat(ends, lens)
    pos = np.arange(m, dtype=np.int64)
    seg_end = np.minimum(owner_end, owner_start + ((pos - owner_start) // _SEGMENT + 1) * _SEGMENT)
    code, length = matcher.longest(_windows(data), seg_end - pos)
    step = np.maximum(length, 1)
    on_token = np.zeros(m, dtype=bool)
    cur = np.flatnonzero((pos - owner_start) % _SEGMENT == 0)
    # walk every segment in lock-step: at most _SEGMENT iterations
    while cur.size:
        on_token[cur] = True
        nxt = cur + step[cur]
        cur = nxt[nxt < seg_end[cur]]
    tok = np.flatnonzero(on_token)
    return tok, code[tok], length[tok]


def _value_bounds(arr: pa.Array):
    """(data bytes, start offsets, end offsets) of a string/binary array."""
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    if not (large or pa.types.is_string(arr.type) or pa.types.is_binary(arr.type)):
        raise ValueError(f"FSST compresses string/binary arrays, got {arr.type}")
    bufs = arr.buffers()
    odt = np.int64 if large else np.int32
    offs = np.frombuffer(bufs[1], dtype=odt)[arr.offset : arr.offset + len(arr) + 1]
    offs = offs.astype(np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return data, offs, large


def _gather(data, starts, ends):
    lens = ends - starts
    total = int(lens.sum())
    csum = np.cumsum(lens)
    src = np.repeat(starts - (csum - lens), lens) + np.arange(total, dtype=np.int64)
    return data[src], np.concatenate(([0], csum))


def _learn_table(sample: np.ndarray, offs: np.ndarray):
    """Pick up to 255 symbols by a few rounds of parse / count / select (FSST-style)."""
    starts, ends = offs[:-1], offs[1:]
    keys = np.zeros(0, dtype=np.uint64)
    lens = np.zeros(0, dtype=np.int64)
    best = (sample.size * 2 + 1, keys, lens)
    win = _windows(sample)
    value_of = np.repeat(np.arange(starts.size), ends - starts)
    for _round in range(5):
        tok, code, tlen = _greedy_parse(sample, starts, ends, _Matcher(keys, lens))
        size = tok.size + int((code < 0).sum())
        if size < best[0]:
            best = (size, keys, lens)
        tlen = np.maximum(tlen, 1)
        tkey = win[tok] & _MASKS[tlen]
        # candidates: every token, and every pair of adjacent tokens in one value
        same = value_of[tok[1:]] == value_of[tok[:-1]]
        plen = np.minimum(tlen[:-1] + tlen[1:], 8)[same]
        pkey = win[tok[:-1]][same] & _MASKS[plen]
        ckey = np.concatenate((tkey, pkey))
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
        keys, lens = ukey[top], ulen[top]
    tok, code, _ = _greedy_parse(sample, starts, ends, _Matcher(keys, lens))
    if tok.size + int((code < 0).sum()) < best[0]:
        best = (0, keys, lens)
    return best[1], best[2]


def compress(values, *, seed: int = 0):
    """FSST-compress a pyarrow string/binary (or large_*) array.

    Returns ``(symbol_table_bytes, compressed_bytes, offsets)``: the 2312-byte
    table, the compressed values back to back and ``len(values)+1`` offsets
    (int32, or int64 for large types) delimiting them, starting at 0.  When
    compression does not pay off the table's encoder switch is off and the
    values are returned unchanged.
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    data, offs, large = _value_bounds(values)
    odt = np.int64 if large else np.int32
    starts, ends = offs[:-1], offs[1:]
    raw, raw_offs = _gather(data, starts, ends)

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
    sample, sample_offs = _gather(data, starts[take], ends[take])
    keys, sym_lens = _learn_table(sample, sample_offs)
    if keys.size == 0:
        return passthrough()

    matcher = _Matcher(keys, sym_lens)
    out_parts, value_sizes = [], np.zeros(n, dtype=np.int64)
    raw_starts, raw_ends = raw_offs[:-1], raw_offs[1:]
    targets = np.arange(_SPAN_BYTES, raw.size, _SPAN_BYTES)
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
        tok_value = np.searchsorted(raw_starts[a:b] - lo, tok, side="right") - 1
        value_sizes[a:b] = np.bincount(tok_value, weights=width, minlength=b - a).astype(np.int64)
        out_parts.append(out)
    compressed = np.concatenate(out_parts) if out_parts else np.zeros(0, np.uint8)
    if compressed.size + SYMBOL_TABLE_SIZE >= raw.size:
        return passthrough()
    new_offs = np.concatenate(([0], np.cumsum(value_sizes)))
    if new_offs[-1] > np.iinfo(odt).max:
        odt = np.int64
    symbols = np.zeros((keys.size, 8), dtype=np.uint8)
    symbols[:] = keys.astype("<u8").view(np.uint8).reshape(-1, 8)
    table = serialize_symbol_table(symbols, sym_lens.astype(np.uint8), True)
    return table, compressed.tobytes(), new_offs.astype(odt)
