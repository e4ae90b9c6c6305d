"""Repetition and definition levels of file formats 2.1/2.2.

Levels are 16-bit values stored with a compressive encoding: per mini-block
chunk (:func:`chunk_levels`, many chunks decoded together) or as one block
(:func:`block_levels`, the levels of a constant page).
"""

from __future__ import annotations

import numpy as np

from ....errors import CorruptFileError, UnsupportedEncodingError
from ....protos import encodings21_pb2 as pb
from ...encodings import fastlanes, rle
from .compressive import U16, block_values, encoding_kind, flat_bits, group_sums, no_buffer_compression
from .values import Fixed, gather, uint_at


def chunk_levels(
    enc: pb.CompressiveEncoding, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, nlev: np.ndarray, where: str
) -> np.ndarray:
    """Decode the rep or def levels of consecutive chunks; returns all levels (uint16)."""
    kind = encoding_kind(enc, where)
    w = f"{where}.{kind}"
    total = int(nlev.sum())
    if total == 0:
        return np.zeros(0, dtype=np.uint16)
    if np.any(starts + sizes > data.size):
        raise CorruptFileError(None, f"{w}: level buffer runs past its chunk")
    if kind == "flat":
        if flat_bits(enc, w) != 16:
            raise UnsupportedEncodingError(f"{w}: flat levels of {enc.flat.bits_per_value} bits")
        if np.any(sizes < nlev * 2):
            raise CorruptFileError(None, f"{w}: level buffer too small")
        return np.ascontiguousarray(gather(data, starts, nlev * 2)).view(U16).astype(np.uint16)
    if kind == "out_of_line_bitpacking":
        ool = enc.out_of_line_bitpacking
        if ool.uncompressed_bits_per_value != 16:
            raise UnsupportedEncodingError(f"{w}: levels of {ool.uncompressed_bits_per_value} bits")
        return _levels_ool(flat_bits(ool.values, w), data, starts, sizes, nlev, w)
    if kind == "inline_bitpacking":
        ib = enc.inline_bitpacking
        no_buffer_compression(ib, "values", w)
        if ib.uncompressed_bits_per_value != 16:
            raise UnsupportedEncodingError(f"{w}: levels of {ib.uncompressed_bits_per_value} bits")
        return _levels_inline(data, starts, sizes, nlev, w)
    if kind == "rle":
        if flat_bits(enc.rle.values, w) != 16 or flat_bits(enc.rle.run_lengths, w) != 8:
            raise UnsupportedEncodingError(f"{w}: RLE levels must be 16-bit values with 8-bit run lengths")
        return _levels_rle(data, starts, sizes, nlev, w)
    # anything else a block decoder knows, one chunk at a time
    parts = [
        block_levels(enc, data[s : s + n], c, where) for s, n, c in zip(starts.tolist(), sizes.tolist(), nlev.tolist())
    ]
    return np.concatenate(parts).astype(np.uint16, copy=False)


def _levels_ool(W: int, data, starts, sizes, nlev, where) -> np.ndarray:
    if not 0 <= W <= 16:
        raise CorruptFileError(None, f"{where}: level bit width {W}")
    bb = 128 * W
    B = fastlanes.BLOCK_VALUES
    nfull = nlev // B
    tail = nlev % B
    rem = sizes - nfull * bb
    raw_tail = (tail > 0) & (rem == tail * 2) & (W < 16)
    packed_tail = (tail > 0) & ~raw_tail
    if np.any(rem < 0) or np.any(packed_tail & (rem < bb)):
        raise CorruptFileError(None, f"{where}: out-of-line bit-packed levels truncated")
    nblocks = nfull + packed_tail
    nb_total = int(nblocks.sum())
    if nb_total:
        first = np.cumsum(nblocks) - nblocks
        j = np.arange(nb_total, dtype=np.int64) - np.repeat(first, nblocks)
        bstarts = np.repeat(starts, nblocks) + j * bb
        vals = fastlanes.unpack_blocks_at(data, bstarts, np.full(nb_total, W), 16).reshape(nb_total, B)
        keep = np.where(j < np.repeat(nfull, nblocks), B, np.repeat(tail, nblocks))
    else:
        vals = np.zeros((0, B), dtype=np.uint16)
        keep = np.zeros(0, dtype=np.int64)
    if np.all(keep == B):
        packed = vals.reshape(-1)
    else:
        packed = vals[np.arange(B)[None, :] < keep[:, None]]
    if not raw_tail.any():
        return packed
    total = int(nlev.sum())
    out = np.empty(total, dtype=np.uint16)
    rk = np.flatnonzero(raw_tail)
    rlen = tail[rk]
    rout = (np.cumsum(nlev) - nlev)[rk] + nfull[rk] * B
    roff = np.cumsum(rlen) - rlen
    raw_idx = np.repeat(rout - roff, rlen) + np.arange(int(rlen.sum()), dtype=np.int64)
    mask = np.ones(total, dtype=bool)
    mask[raw_idx] = False
    out[mask] = packed
    out[raw_idx] = np.ascontiguousarray(gather(data, starts[rk] + nfull[rk] * bb, rlen * 2)).view(U16)
    return out


def _levels_inline(data, starts, sizes, nlev, where) -> np.ndarray:
    B = fastlanes.BLOCK_VALUES
    nblk = (nlev + B - 1) // B
    ends = starts + sizes
    pos = starts.copy()
    rec_k, rec_j, rec_s, rec_w = [], [], [], []
    for j in range(int(nblk.max()) if nblk.size else 0):
        sel = np.flatnonzero(nblk > j)
        p = pos[sel]
        if np.any(p + 2 > ends[sel]):
            raise CorruptFileError(None, f"{where}: inline bit-packed levels truncated")
        wdt = u16(data, p)
        if np.any(wdt > 16):
            raise CorruptFileError(None, f"{where}: level bit width {int(wdt.max())}")
        nxt = p + 2 + 128 * wdt
        if np.any(nxt > ends[sel]):
            raise CorruptFileError(None, f"{where}: inline bit-packed levels truncated")
        rec_k.append(sel)
        rec_j.append(np.full(sel.size, j))
        rec_s.append(p + 2)
        rec_w.append(wdt)
        pos[sel] = nxt
    k = np.concatenate(rec_k)
    jj = np.concatenate(rec_j)
    order = np.lexsort((jj, k))
    s = np.concatenate(rec_s)[order]
    wd = np.concatenate(rec_w)[order]
    k, jj = k[order], jj[order]
    vals = fastlanes.unpack_blocks_at(data, s, wd, 16).reshape(-1, B)
    keep = np.minimum(B, nlev[k] - jj * B)
    if np.all(keep == B):
        return vals.reshape(-1)
    return vals[np.arange(B)[None, :] < keep[:, None]]


def u16(data: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return uint_at(data, pos, 2)


def _levels_rle(data, starts, sizes, nlev, where) -> np.ndarray:
    if np.any(sizes < 8):
        raise CorruptFileError(None, f"{where}: RLE levels truncated")
    vbytes = uint_at(data, starts, 8)
    nruns = vbytes // 2
    if np.any(vbytes % 2) or np.any(8 + vbytes + nruns > sizes):
        raise CorruptFileError(None, f"{where}: RLE levels truncated")
    v = np.ascontiguousarray(gather(data, starts + 8, vbytes)).view(U16)
    lens = gather(data, starts + 8 + vbytes, nruns)
    if not np.array_equal(group_sums(lens, nruns), nlev):
        raise CorruptFileError(None, f"{where}: RLE run lengths do not match the level counts")
    return rle.decode_rle(v, lens, int(nlev.sum())).astype(np.uint16, copy=False)


def block_levels(enc: pb.CompressiveEncoding, data, n: int, where: str) -> np.ndarray:
    v = block_values(enc, data, n, where)
    if not isinstance(v, Fixed) or v.bits != 16:
        raise UnsupportedEncodingError(f"{where}: levels must decode to 16-bit values")
    return v.typed()
