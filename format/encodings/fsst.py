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

_SPAN_BYTES = 1 << 17  # values are decoded in spans of about this many compressed bytes
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
    lens = np.zeros(512, dtype=np.intp)
    lens[:n] = lengths
    lens[256:] = 1
    return table.reshape(-1), lens, n


def _decode_span(seg: np.ndarray, starts: np.ndarray, table, lens, nsym):
    """Decode one span; ``starts`` are the value start positions within ``seg``.

    Returns the decoded bytes and the decoded end offset of every value.  Spans
    are kept small (``_SPAN_BYTES``) so the temporaries stay in cache.
    """
    m = seg.size
    ends = np.append(starts[1:], m)
    if m == 0:
        return np.zeros(0, dtype=np.uint8), np.zeros(starts.size, dtype=np.int64)
    key = seg.astype(np.intp)
    esc = seg == ESCAPE
    if esc.any():
        vstart = np.zeros(m, dtype=bool)
        vstart[starts[starts < m]] = True
        prev_esc = np.zeros(m, dtype=bool)
        prev_esc[1:] = esc[:-1]
        # In a run of 255s (restarting at each value) the bytes alternate escape,
        # literal, escape, ...; a non-255 byte is a literal iff an escape code precedes it.
        pos = np.arange(m, dtype=np.intp)
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
        key |= literal.astype(np.intp) << 8
        bad = ~literal & ~esc & (seg >= nsym)
    else:
        bad = seg >= nsym
    if bad.any():
        code = int(seg[np.argmax(bad)])
        raise ValueError(f"corrupt FSST data: code {code} but the table has {nsym} symbols")
    out_len = lens[key]
    csum = np.cumsum(out_len, dtype=np.intp)
    key *= 8
    key -= csum
    key += out_len  # now: table row start minus the token's output start
    src = np.repeat(key, out_len)
    src += np.arange(src.size, dtype=np.intp)
    data = table[src]
    csum0 = np.zeros(m + 1, dtype=np.int64)
    csum0[1:] = csum
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
