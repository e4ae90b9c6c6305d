"""Compressive encodings of file formats 2.1/2.2 (``CompressiveEncoding``).

An encoding is used in one of three shapes, each with its own entry point:

* mini-block: the value buffers of many chunks, decoded together
  (:func:`miniblock_values`; their levels in :mod:`.levels`);
* block: one buffer holding a whole sequence - dictionaries, the levels of
  constant pages (:func:`block_values`);
* per value: the values of a full-zip page (:func:`fixed_per_value`,
  :func:`var_per_value`).

Anything not listed for a shape raises UnsupportedEncodingError: pylance 14
only writes the ones handled here, and a guessed decoding would return wrong
values.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from ....errors import CorruptFileError, UnsupportedEncodingError
from ....protos import encodings21_pb2 as pb
from ...encodings import fastlanes, fsst, general, rle
from .layout import scheme_name
from .values import Fixed, Fsl, Packed, Var, VarPacked, as_u8, concat_bits, gather, uint_at

U16 = np.dtype("<u2")


@dataclass
class Chunks:
    """The value buffers of consecutive mini-block chunks.

    ``bufs[b]`` is the array buffer ``b`` of chunk ``k`` lives in, at
    ``starts[b][k]`` for ``sizes[b][k]`` bytes; ``counts[k]`` values per chunk.
    """

    bufs: list
    starts: list
    sizes: list
    counts: np.ndarray

    @property
    def total(self) -> int:
        return int(self.counts.sum())


def encoding_kind(enc: pb.CompressiveEncoding, where: str) -> str:
    kind = enc.WhichOneof("compression")
    if kind is None:
        raise UnsupportedEncodingError(f"{where}: missing or unknown compressive encoding")
    return kind


def no_buffer_compression(msg, fieldname: str, where: str) -> None:
    if msg.HasField(fieldname):
        raise UnsupportedEncodingError(
            f"{where}: {type(msg).__name__}.{fieldname} (per-buffer {scheme_name(getattr(msg, fieldname), where)} "
            f"compression) is not supported by this reader"
        )


def flat_bits(enc: pb.CompressiveEncoding, where: str) -> int:
    if encoding_kind(enc, where) != "flat":
        raise UnsupportedEncodingError(f"{where}: expected a flat encoding, found {encoding_kind(enc, where)}")
    no_buffer_compression(enc.flat, "data", where)
    return int(enc.flat.bits_per_value)


def general_decompress(bc: pb.BufferCompression, data, where: str) -> np.ndarray:
    """Decompress one LZ4 or ZSTD buffer written by Lance."""
    scheme = scheme_name(bc, where)
    raw = as_u8(data)
    try:
        return as_u8(general.decompress(scheme, raw))
    except ValueError as exc:
        raise CorruptFileError(None, f"{where}: {exc}") from exc


# --------------------------------------------------------------- mini-block values


def miniblock_values(enc: pb.CompressiveEncoding, ch: Chunks, where: str):
    """Decode the values of ``ch`` (all chunks at once)."""
    kind = encoding_kind(enc, where)
    w = f"{where}.{kind}"
    if kind == "flat":
        no_buffer_compression(enc.flat, "data", w)
        _need_buffers(ch, 1, w)
        return _mb_flat(int(enc.flat.bits_per_value), ch, 0, ch.counts, w)
    if kind == "variable":
        no_buffer_compression(enc.variable, "values", w)
        _need_buffers(ch, 1, w)
        bits = flat_bits(enc.variable.offsets, f"{w}.offsets")
        return _mb_variable(bits, ch, w)
    if kind == "fsst":
        inner = enc.fsst.values
        if encoding_kind(inner, f"{w}.values") != "variable":
            raise UnsupportedEncodingError(f"{w}: FSST over {encoding_kind(inner, w)} is not supported")
        v = miniblock_values(inner, ch, f"{w}.values")
        return _fsst(enc.fsst.symbol_table, v, w)
    if kind == "inline_bitpacking":
        no_buffer_compression(enc.inline_bitpacking, "values", w)
        _need_buffers(ch, 1, w)
        return _mb_inline(int(enc.inline_bitpacking.uncompressed_bits_per_value), ch, w)
    if kind == "fixed_size_list":
        return _mb_fsl(enc.fixed_size_list, ch, w)
    if kind == "rle":
        _need_buffers(ch, 2, w)
        bits = flat_bits(enc.rle.values, f"{w}.values")
        if flat_bits(enc.rle.run_lengths, f"{w}.run_lengths") != 8:
            raise UnsupportedEncodingError(f"{w}: run lengths must be 8-bit")
        return _mb_rle(bits, ch, w)
    if kind == "general":
        return _mb_general(enc.general, ch, w)
    if kind == "packed_struct":
        ps = enc.packed_struct
        rows = miniblock_values(ps.values, ch, f"{w}.values")
        return _packed(ps, rows, w)
    if kind == "byte_stream_split":
        bits = flat_bits(enc.byte_stream_split.values, f"{w}.values")
        _need_buffers(ch, 1, w)
        return _mb_bss(bits, ch, w)
    raise UnsupportedEncodingError(f"{where}: the {kind} encoding is not supported in mini-block pages")


def _unsplit(streams: np.ndarray, width: int, n: int) -> np.ndarray:
    """Undo a byte stream split of ``n`` values of ``width`` bytes: stream k
    (bytes ``k*n .. k*n+n``) holds byte k of every value."""
    return np.ascontiguousarray(streams[: width * n].reshape(width, n).T).reshape(-1)


def _mb_bss(bits: int, ch: Chunks, where: str) -> Fixed:
    """Byte stream split values: each chunk is split on its own."""
    if bits % 8 or not 8 <= bits <= 64:
        raise UnsupportedEncodingError(f"{where}: byte stream split of {bits}-bit values is not supported")
    width = bits // 8
    need = ch.counts * width
    _check_sizes(ch, 0, need, where)
    data = gather(ch.bufs[0], ch.starts[0], need)
    counts = ch.counts
    total = int(counts.sum())
    K = counts.size
    if K and np.all(counts[:-1] == counts[0]):
        # equal chunks (but maybe the last): one transpose for all of them
        C = int(counts[0])
        full = (K - 1) * C * width
        head = data[:full].reshape(K - 1, width, C).transpose(0, 2, 1).reshape(-1) if K > 1 else data[:0]
        tail = _unsplit(data[full:], width, int(counts[-1]))
        out = np.concatenate((head, tail)) if K > 1 else tail
    else:
        starts = np.cumsum(need) - need
        out = np.concatenate([_unsplit(data[s:], width, int(c)) for s, c in zip(starts.tolist(), counts.tolist())])
    return Fixed(out, bits, total)


def _packed(ps: pb.PackedStruct, rows, where: str) -> Packed:
    widths = [int(b) for b in ps.bits_per_value]
    if not isinstance(rows, Fixed) or rows.bits != sum(widths) or not widths:
        got = f"{rows.bits}-bit values" if isinstance(rows, Fixed) else type(rows).__name__
        raise UnsupportedEncodingError(f"{where}: packed_struct of {widths} bits per field over {got}")
    return Packed(rows, widths)


def miniblock_pick(enc: pb.CompressiveEncoding, ch: Chunks, where: str, pos: np.ndarray, at=None):
    """Values at positions ``pos`` of ``ch``; returns ``(values, picked)``.

    Flat, inline bit-packed and variable-width values are read one by one,
    FSST strings are picked before decompressing, so only the wanted values
    are decoded (``picked`` True); other encodings decode every value and
    leave the picking to the caller (``picked`` False).  ``at`` optionally
    gives the positions as (chunk index, position in the chunk)."""
    kind = encoding_kind(enc, where)
    if kind in ("inline_bitpacking", "flat", "variable") and len(ch.bufs) == 1 and pos.size:
        if at is not None:
            k, o = at
        else:
            first = np.cumsum(ch.counts) - ch.counts
            k = np.searchsorted(first, pos, side="right") - 1
            o = pos - first[k]
        data = ch.bufs[0]
        if kind == "variable":
            no_buffer_compression(enc.variable, "values", where)
            bits = flat_bits(enc.variable.offsets, f"{where}.offsets")
            if bits not in (32, 64):
                raise UnsupportedEncodingError(f"{where}: {bits}-bit offsets are not supported")
            return _pick_variable(bits // 8, ch, k, o, where), True
        if kind == "inline_bitpacking":
            ib = enc.inline_bitpacking
            no_buffer_compression(ib, "values", where)
            T = int(ib.uncompressed_bits_per_value)
            if T not in (8, 16, 32, 64):
                raise UnsupportedEncodingError(f"{where}: inline bit-packing of {T}-bit values is not supported")
            hdr = T // 8
            _check_sizes(ch, 0, np.full(ch.counts.size, hdr), where)
            widths = uint_at(data, ch.starts[0], hdr)
            if np.any(widths > T):
                raise CorruptFileError(None, f"{where}: bit width {int(widths.max())} exceeds {T}")
            _check_sizes(ch, 0, hdr + 128 * widths, where)
            try:
                vals = fastlanes.unpack_values_at(data, ch.starts[0][k] + hdr, widths[k], T, o)
            except ValueError as exc:
                raise CorruptFileError(None, f"{where}: {exc}") from exc
            return Fixed(vals.view(np.uint8), T, int(pos.size)), True
        no_buffer_compression(enc.flat, "data", where)
        bits = int(enc.flat.bits_per_value)
        if bits % 8 == 0 and bits > 0:
            width = bits // 8
            _check_sizes(ch, 0, ch.counts * width, where)
            at = (ch.starts[0][k] + o * width)[:, None] + np.arange(width)
            return Fixed(data[at.reshape(-1)], bits, int(pos.size)), True
    if kind == "fsst" and encoding_kind(enc.fsst.values, f"{where}.fsst.values") == "variable":
        w = f"{where}.fsst"
        v = miniblock_values(enc.fsst.values, ch, f"{w}.values")
        offs = v.offsets
        starts = offs[pos].astype(np.int64)
        lens = offs[pos + 1].astype(np.int64) - starts
        sub = Var(np.concatenate(([0], np.cumsum(lens))), gather(v.data, starts, lens))
        return _fsst(enc.fsst.symbol_table, sub, w), True
    return miniblock_values(enc, ch, where), False


def _pick_variable(ow: int, ch: Chunks, k: np.ndarray, o: np.ndarray, where: str) -> Var:
    """Values ``o`` of chunks ``k``: each chunk buffer is ``n + 1`` offsets
    (from the buffer start), then the bytes; only the wanted values' two
    offsets and bytes are read."""
    data, starts, sizes, counts = ch.bufs[0], ch.starts[0], ch.sizes[0], ch.counts
    _check_sizes(ch, 0, (counts + 1) * ow, where)
    cs = starts[k]
    at = cs + o * ow
    s = uint_at(data, at, ow)
    e = uint_at(data, at + ow, ow)
    if np.any(e < s) or np.any(s < (counts[k] + 1) * ow) or np.any(e > sizes[k]):
        raise CorruptFileError(None, f"{where}: variable-width offsets out of range in a chunk")
    lens = e - s
    total = int(lens.sum())
    offsets = np.empty(lens.size + 1, dtype=np.int32 if total < 2**31 - 1 else np.int64)
    offsets[0] = 0
    np.cumsum(lens, out=offsets[1:])
    return Var(offsets, gather(data, cs + s, lens))


def _need_buffers(ch: Chunks, n: int, where: str) -> None:
    if len(ch.bufs) != n:
        raise CorruptFileError(None, f"{where}: chunks hold {len(ch.bufs)} value buffers, the encoding uses {n}")


def _check_sizes(ch: Chunks, b: int, need: np.ndarray, where: str) -> None:
    if np.any(ch.sizes[b] < need):
        k = int(np.argmax(ch.sizes[b] < need))
        raise CorruptFileError(
            None, f"{where}: chunk buffer of {int(ch.sizes[b][k])} bytes is too small ({int(need[k])} needed)"
        )


def _mb_flat(bits: int, ch: Chunks, b: int, counts: np.ndarray, where: str) -> Fixed:
    total = int(counts.sum())
    if bits % 8 == 0 and bits > 0:
        need = counts * (bits // 8)
        _check_sizes(ch, b, need, where)
        return Fixed(gather(ch.bufs[b], ch.starts[b], need), bits, total)
    if bits == 1:
        nbytes = (counts + 7) // 8
        _check_sizes(ch, b, nbytes, where)
        if counts.size <= 1 or not np.any(counts[:-1] % 8):
            return Fixed(gather(ch.bufs[b], ch.starts[b], nbytes), 1, total)
        data = ch.bufs[b]
        pieces = [(data[s : s + nb], 0, c) for s, nb, c in zip(ch.starts[b].tolist(), nbytes.tolist(), counts.tolist())]
        bitmap, off = concat_bits(pieces)
        return Fixed(bitmap, 1, total, off)
    raise UnsupportedEncodingError(f"{where}: flat values of {bits} bits are not supported")


def _mb_variable(offset_bits: int, ch: Chunks, where: str) -> Var:
    """Each chunk buffer: ``n + 1`` offsets (from the buffer start), then the bytes."""
    if offset_bits not in (32, 64):
        raise UnsupportedEncodingError(f"{where}: {offset_bits}-bit offsets are not supported")
    ow = offset_bits // 8
    data, starts, sizes, counts = ch.bufs[0], ch.starts[0], ch.sizes[0], ch.counts
    _check_sizes(ch, 0, (counts + 1) * ow, where)
    first = uint_at(data, starts, ow)
    last = uint_at(data, starts + counts * ow, ow)
    lens = last - first
    if np.any(lens < 0) or np.any(last > sizes) or np.any(first < (counts + 1) * ow):
        raise CorruptFileError(None, f"{where}: variable-width offsets out of range in a chunk")
    total_vals = int(counts.sum())
    total_bytes = int(lens.sum())
    odt: type[np.signedinteger[Any]] = np.int32 if total_bytes < 2**31 - 1 else np.int64
    out = np.empty(total_vals + 1, dtype=odt)
    values = gather(data, starts + first, lens)
    base = np.cumsum(lens) - lens
    shift = first - base  # chunk offsets are from the chunk start: rebase onto ``values``
    # every chunk's first n offsets, back to back (the n+1-th is the next chunk's first)
    raw = gather(data, starts, counts * ow)
    words = raw.view(f"<u{ow}") if raw.flags.c_contiguous else np.frombuffer(raw.tobytes(), dtype=f"<u{ow}")
    K = counts.size
    C = int(counts[0]) if K else 0
    if K and C and np.all(counts[:-1] == C):
        # equal chunks (all but maybe the last): subtract each chunk's shift by broadcasting
        full = (K - 1) * C
        np.subtract(
            words[:full].reshape(K - 1, C), shift[:-1, None], out=out[:full].reshape(K - 1, C), casting="unsafe"
        )
        np.subtract(words[full:], shift[-1], out=out[full:-1], casting="unsafe")
    elif K:
        np.subtract(words, np.repeat(shift, counts), out=out[:-1], casting="unsafe")
    out[-1] = total_bytes
    if total_vals and np.any(out[1:] < out[:-1]):
        raise CorruptFileError(None, f"{where}: variable-width offsets are not monotonic")
    return Var(out, values)


def _fsst(table: bytes, v: Var, where: str) -> Var:
    try:
        symbols, lengths, on = fsst.parse_symbol_table(table)
        data, offsets = fsst.decompress(v.data, v.offsets, symbols, lengths, encoder_on=on, small_offsets=True)
    except ValueError as exc:
        raise CorruptFileError(None, f"{where}: {exc}") from exc
    return Var(offsets, as_u8(data))


def _mb_inline(T: int, ch: Chunks, where: str) -> Fixed:
    if T not in (8, 16, 32, 64):
        raise UnsupportedEncodingError(f"{where}: inline bit-packing of {T}-bit values is not supported")
    hdr = T // 8
    data, starts, counts = ch.bufs[0], ch.starts[0], ch.counts
    if np.any(counts > fastlanes.BLOCK_VALUES):
        raise CorruptFileError(None, f"{where}: an inline bit-packed chunk holds more than 1024 values")
    _check_sizes(ch, 0, np.full(counts.size, hdr), where)
    widths = uint_at(data, starts, hdr)
    if np.any(widths > T):
        raise CorruptFileError(None, f"{where}: bit width {int(widths.max())} exceeds {T}")
    _check_sizes(ch, 0, hdr + 128 * widths, where)
    try:
        vals = fastlanes.unpack_blocks_at(data, starts + hdr, widths, T)
    except ValueError as exc:
        raise CorruptFileError(None, f"{where}: {exc}") from exc
    total = int(counts.sum())
    if counts.size and np.all(counts[:-1] == fastlanes.BLOCK_VALUES):
        vals = vals[:total]
    else:
        mask = np.arange(fastlanes.BLOCK_VALUES)[None, :] < counts[:, None]
        vals = vals.reshape(-1, fastlanes.BLOCK_VALUES)[mask]
    return Fixed(vals.view(np.uint8), T, total)


def _mb_fsl(fsl: pb.FixedSizeList, ch: Chunks, where: str) -> Fsl:
    dim = int(fsl.items_per_value)
    if dim <= 0:
        raise CorruptFileError(None, f"{where}: fixed-size list of {dim} items")
    inner_kind = encoding_kind(fsl.values, where)
    if inner_kind != "flat":
        raise UnsupportedEncodingError(f"{where}: fixed-size list over {inner_kind} is not supported")
    bits = flat_bits(fsl.values, where)
    items = ch.counts * dim
    if fsl.has_validity:
        _need_buffers(ch, 2, where)
        nbytes = (items + 7) // 8
        _check_sizes(ch, 0, nbytes, where)
        pieces = [
            (ch.bufs[0][s : s + nb], 0, c) for s, nb, c in zip(ch.starts[0].tolist(), nbytes.tolist(), items.tolist())
        ]
        bitmap, off = concat_bits(pieces)
        if off:
            bitmap = np.packbits(
                np.unpackbits(bitmap, bitorder="little")[off : off + int(items.sum())], bitorder="little"
            )
        child = _mb_flat(bits, ch, 1, items, where)
        return Fsl(child, dim, ch.total, bitmap)
    _need_buffers(ch, 1, where)
    child = _mb_flat(bits, ch, 0, items, where)
    return Fsl(child, dim, ch.total)


def _mb_rle(bits: int, ch: Chunks, where: str) -> Fixed:
    if bits not in (8, 16, 32, 64):
        raise UnsupportedEncodingError(f"{where}: RLE of {bits}-bit values is not supported")
    w = bits // 8
    nruns = ch.sizes[1]
    _check_sizes(ch, 0, nruns * w, where)
    values = gather(ch.bufs[0], ch.starts[0], nruns * w)
    lengths = gather(ch.bufs[1], ch.starts[1], nruns)
    vals = np.frombuffer(values.tobytes(), dtype=f"<u{w}") if not values.flags.c_contiguous else values.view(f"<u{w}")
    if not np.array_equal(group_sums(lengths, nruns), ch.counts):
        raise CorruptFileError(None, f"{where}: run lengths do not add up to the chunk value counts")
    out = rle.decode_rle(vals, lengths, ch.total)
    return Fixed(out.view(np.uint8), bits, int(out.size))


def group_sums(values: np.ndarray, group_sizes: np.ndarray) -> np.ndarray:
    """Sums of ``values`` over consecutive groups of ``group_sizes`` (groups may be empty)."""
    csum = np.concatenate(([0], np.cumsum(values, dtype=np.int64)))
    ends = np.cumsum(group_sizes)
    return csum[ends] - csum[ends - group_sizes]


def _mb_general(g: pb.General, ch: Chunks, where: str):
    if not g.HasField("values"):
        raise CorruptFileError(None, f"{where}: general compression without an inner encoding")
    pieces = []
    data = ch.bufs[0]
    for s, n in zip(ch.starts[0].tolist(), ch.sizes[0].tolist()):
        pieces.append(general_decompress(g.compression, data[s : s + n], where))
    sizes = np.asarray([p.size for p in pieces], dtype=np.int64)
    starts = np.cumsum(sizes) - sizes
    joined = np.concatenate(pieces) if pieces else np.zeros(0, np.uint8)
    inner = Chunks([joined] + ch.bufs[1:], [starts] + ch.starts[1:], [sizes] + ch.sizes[1:], ch.counts)
    return miniblock_values(g.values, inner, f"{where}.values")


# --------------------------------------------------------------- block form


def block_values(enc: pb.CompressiveEncoding, data, n: int, where: str):
    """Decode a whole buffer holding ``n`` values."""
    data = as_u8(data)
    kind = encoding_kind(enc, where)
    w = f"{where}.{kind}"
    if kind == "flat":
        bits = flat_bits(enc, w)
        need = (n * bits + 7) // 8
        if data.size < need:
            raise CorruptFileError(None, f"{w}: buffer of {data.size} bytes, {need} needed")
        if bits % 8 and bits != 1:
            raise UnsupportedEncodingError(f"{w}: flat values of {bits} bits")
        return Fixed(data, bits, n)
    if kind == "variable":
        no_buffer_compression(enc.variable, "values", w)
        flat_bits(enc.variable.offsets, f"{w}.offsets")
        return _block_variable(data, n, w)
    if kind == "inline_bitpacking":
        ib = enc.inline_bitpacking
        no_buffer_compression(ib, "values", w)
        T = int(ib.uncompressed_bits_per_value)
        try:
            vals = fastlanes.decode_inline_blocks(data, T, n)
        except ValueError as exc:
            raise CorruptFileError(None, f"{w}: {exc}") from exc
        return Fixed(vals.view(np.uint8), T, n)
    if kind == "out_of_line_bitpacking":
        ool = enc.out_of_line_bitpacking
        T = int(ool.uncompressed_bits_per_value)
        W = flat_bits(ool.values, w)
        try:
            vals = fastlanes.decode_out_of_line(data, W, T, n)
        except ValueError as exc:
            raise CorruptFileError(None, f"{w}: {exc}") from exc
        return Fixed(vals.view(np.uint8), T, n)
    if kind == "rle":
        bits = flat_bits(enc.rle.values, w)
        if bits not in (8, 16, 32, 64) or flat_bits(enc.rle.run_lengths, w) != 8:
            raise UnsupportedEncodingError(f"{w}: RLE of {bits}-bit values")
        try:
            out = rle.decode_rle_block(data, f"<u{bits // 8}", np.uint8, n)
        except ValueError as exc:
            raise CorruptFileError(None, f"{w}: {exc}") from exc
        return Fixed(out.view(np.uint8), bits, n)
    if kind == "general":
        g = enc.general
        if not g.HasField("values"):
            raise CorruptFileError(None, f"{w}: general compression without an inner encoding")
        return block_values(g.values, general_decompress(g.compression, data, w), n, f"{w}.values")
    if kind == "constant":
        return _constant_fixed(enc, n, w)
    if kind == "byte_stream_split":
        bits = flat_bits(enc.byte_stream_split.values, f"{w}.values")
        if bits % 8 or not 8 <= bits <= 64:
            raise UnsupportedEncodingError(f"{w}: byte stream split of {bits}-bit values is not supported")
        if data.size < n * bits // 8:
            raise CorruptFileError(None, f"{w}: buffer of {data.size} bytes, {n * bits // 8} needed")
        return Fixed(_unsplit(data, bits // 8, n), bits, n)
    if kind == "fixed_size_list":
        fsl = enc.fixed_size_list
        if fsl.has_validity:
            raise UnsupportedEncodingError(f"{w}: a fixed-size list block with item validity")
        dim = int(fsl.items_per_value)
        inner = block_values(fsl.values, data, n * dim, f"{w}.values")
        if not isinstance(inner, Fixed):
            raise UnsupportedEncodingError(f"{w}: nested fixed-size list blocks")
        return Fsl(inner, dim, n)
    raise UnsupportedEncodingError(f"{where}: the {kind} encoding is not supported for a block")


def _block_variable(data: np.ndarray, n: int, where: str) -> Var:
    if data.size < 8:
        raise CorruptFileError(None, f"{where}: variable block truncated")
    head = data[:17].tobytes().ljust(17, b"\0")
    if head[1:4] != b"\0\0\0":  # older layout: u8 width, count, bytes start
        width = head[0]
        if width == 32:
            bytes_start, off_start = struct.unpack_from("<I", head, 5)[0], 9
        elif width == 64:
            bytes_start, off_start = struct.unpack_from("<Q", head, 9)[0], 17
        else:
            raise CorruptFileError(None, f"{where}: {width}-bit offsets")
    else:
        (width,) = struct.unpack_from("<I", head, 0)
        if width == 32:
            bytes_start, off_start = struct.unpack_from("<I", head, 4)[0], 8
        elif width == 64:
            bytes_start, off_start = struct.unpack_from("<Q", head, 8)[0], 16
        else:
            raise CorruptFileError(None, f"{where}: {width}-bit offsets")
    ow = width // 8
    if bytes_start > data.size or (bytes_start - off_start) != (n + 1) * ow:
        raise CorruptFileError(None, f"{where}: variable block holds the wrong number of offsets for {n} values")
    offs = np.frombuffer(data[off_start:bytes_start].tobytes(), dtype=f"<u{ow}").astype(np.int64)
    offs -= offs[0]
    values = data[bytes_start:]
    if offs.size > 1 and (np.any(np.diff(offs) < 0) or offs[-1] > values.size):
        raise CorruptFileError(None, f"{where}: variable block offsets out of range")
    return Var(offs, values)


# --------------------------------------------------------------- per value (full-zip)


def fixed_value_bits(enc: pb.CompressiveEncoding, where: str) -> int:
    """Bits one value takes in a full-zip page with this encoding."""
    kind = encoding_kind(enc, where)
    if kind == "flat":
        return flat_bits(enc, where)
    if kind == "fixed_size_list":
        fsl = enc.fixed_size_list
        dim = int(fsl.items_per_value)
        vb = (dim + 7) // 8 * 8 if fsl.has_validity else 0
        if encoding_kind(fsl.values, where) == "constant":
            return vb  # the items live in the encoding, not in the rows
        bits = flat_bits(fsl.values, f"{where}.fixed_size_list.values")
        return vb + dim * bits
    if kind == "constant":
        return 0
    if kind == "packed_struct":
        return sum(int(b) for b in enc.packed_struct.bits_per_value)
    raise UnsupportedEncodingError(f"{where}: the {kind} encoding is not supported for full-zip fixed-width values")


def _constant_fixed(enc: pb.CompressiveEncoding, n: int, w: str) -> Fixed:
    """``n`` copies of a constant encoding's value."""
    c = enc.constant
    if not c.HasField("value"):
        raise UnsupportedEncodingError(f"{w}: a constant encoding without a value")
    v = np.frombuffer(bytes(c.value), dtype=np.uint8)
    return Fixed(np.tile(v, n), v.size * 8, n)


def fixed_per_value(enc: pb.CompressiveEncoding, rows: np.ndarray, n: int, where: str):
    """``rows``: (n, bytes_per_value) uint8 (may be a strided view)."""
    kind = encoding_kind(enc, where)
    w = f"{where}.{kind}"
    if kind == "flat":
        bits = flat_bits(enc, w)
        if bits % 8:
            raise UnsupportedEncodingError(f"{w}: full-zip values of {bits} bits")
        return Fixed(np.ascontiguousarray(rows).reshape(-1), bits, n)
    if kind == "fixed_size_list":
        fsl = enc.fixed_size_list
        dim = int(fsl.items_per_value)
        vb = (dim + 7) // 8 if fsl.has_validity else 0
        if encoding_kind(fsl.values, w) == "constant":
            # pylance writes this for fixed-size lists whose items are all null
            # (a constant without a value): the rows hold only item validity
            child = _constant(fsl.values.constant, n * dim, f"{w}.values", allow_empty=True)
        else:
            bits = flat_bits(fsl.values, f"{w}.values")
            if bits % 8:
                raise UnsupportedEncodingError(f"{w}: full-zip items of {bits} bits")
            child = Fixed(np.ascontiguousarray(rows[:, vb:]).reshape(-1), bits, n * dim)
        if fsl.has_validity:
            vbits = np.unpackbits(np.ascontiguousarray(rows[:, :vb]), axis=1, bitorder="little")[:, :dim]
            validity = np.packbits(vbits.reshape(-1), bitorder="little")
            return Fsl(child, dim, n, validity)
        return Fsl(child, dim, n)
    if kind == "constant":
        return _constant_fixed(enc, n, w)
    if kind == "packed_struct":
        ps = enc.packed_struct
        inner = fixed_per_value(ps.values, rows, n, f"{w}.values")
        return _packed(ps, inner, w)
    raise UnsupportedEncodingError(f"{where}: the {kind} encoding is not supported for full-zip values")


def _constant(c: pb.Constant, n: int, where: str, allow_empty: bool = False) -> Fixed:
    """``n`` copies of a constant's value.  Without a value (``allow_empty``:
    only where every item is null) the values are unspecified: ``bits == 0``
    asks :func:`~format.v21.values.to_arrow` for zeros of the column's width."""
    if not c.HasField("value") or not len(c.value):
        if allow_empty:
            return Fixed(np.zeros(0, dtype=np.uint8), 0, n)
        raise UnsupportedEncodingError(f"{where}: a constant encoding without a value")
    v = np.frombuffer(bytes(c.value), dtype=np.uint8)
    return Fixed(np.tile(v, n), v.size * 8, n)


def _var_packed(vps: pb.VariablePackedStruct, offsets: np.ndarray, data: np.ndarray, where: str) -> VarPacked:
    """Per-value rows of a variable-width packed struct (how pylance 14 stores
    blob v2 descriptors): each row holds its fields back to back, a
    fixed-width field as its bytes, a variable-width one as a length and its
    bytes.  A row of no bytes is a null (its fields read as zeros)."""
    n = int(offsets.size) - 1
    starts = offsets[:-1].astype(np.int64)
    ends = offsets[1:].astype(np.int64)
    rows = np.flatnonzero(ends > starts)
    cur = starts[rows]
    row_end = ends[rows]
    fields: list = []
    for i, fe in enumerate(vps.fields):
        w = f"{where}.fields[{i}]"
        layout = fe.WhichOneof("layout")
        if layout == "bits_per_value":
            bits = int(fe.bits_per_value)
            if bits <= 0 or bits % 8 or bits > 64 or flat_bits(fe.value, w) != bits:
                raise UnsupportedEncodingError(f"{w}: packed field of {bits} bits")
            wb = bits // 8
            if np.any(cur + wb > row_end):
                raise CorruptFileError(None, f"{w}: a packed field runs past its row")
            out = np.zeros((n, wb), dtype=np.uint8)
            if rows.size:
                out[rows] = data[cur[:, None] + np.arange(wb)]
            fields.append(Fixed(out.reshape(-1), bits, n))
            cur = cur + wb
        elif layout == "bits_per_length":
            lb = int(fe.bits_per_length)
            if lb not in (8, 16, 32, 64) or encoding_kind(fe.value, w) != "variable":
                raise UnsupportedEncodingError(
                    f"{w}: variable packed field of {lb}-bit lengths over {encoding_kind(fe.value, w)}"
                )
            no_buffer_compression(fe.value.variable, "values", w)
            lw = lb // 8
            if np.any(cur + lw > row_end):
                raise CorruptFileError(None, f"{w}: a packed field's length runs past its row")
            lens = uint_at(data, cur, lw) if rows.size else np.zeros(0, dtype=np.int64)
            begin = cur + lw
            if np.any(lens < 0) or np.any(begin + lens > row_end):
                raise CorruptFileError(None, f"{w}: a packed field's bytes run past their row")
            every = np.zeros(n, dtype=np.int64)
            every[rows] = lens
            fields.append(Var(np.concatenate(([0], np.cumsum(every))), gather(data, begin, lens)))
            cur = begin + lens
        else:
            raise UnsupportedEncodingError(f"{w}: packed field layout {layout!r} is not supported")
    if np.any(cur != row_end):
        raise CorruptFileError(None, f"{where}: packed rows hold bytes past their fields")
    return VarPacked(fields, n)


def var_per_value(enc: pb.CompressiveEncoding, offsets: np.ndarray, data: np.ndarray, where: str) -> Var | VarPacked:
    kind = encoding_kind(enc, where)
    w = f"{where}.{kind}"
    if kind == "variable_packed_struct":
        return _var_packed(enc.variable_packed_struct, offsets, data, w)
    if kind == "variable":
        no_buffer_compression(enc.variable, "values", w)
        flat_bits(enc.variable.offsets, f"{w}.offsets")
        return Var(offsets, data)
    if kind == "fsst":
        if encoding_kind(enc.fsst.values, w) != "variable":
            raise UnsupportedEncodingError(f"{w}: FSST over {encoding_kind(enc.fsst.values, w)}")
        return _fsst(enc.fsst.symbol_table, Var(offsets, data), w)
    if kind == "general":
        g = enc.general
        pieces = [
            general_decompress(g.compression, data[s:e], w) for s, e in zip(offsets[:-1].tolist(), offsets[1:].tolist())
        ]
        sizes = np.asarray([p.size for p in pieces], dtype=np.int64)
        new_offs = np.concatenate(([0], np.cumsum(sizes)))
        joined = np.concatenate(pieces) if pieces else np.zeros(0, np.uint8)
        return Var(new_offs, joined)
    raise UnsupportedEncodingError(f"{where}: the {kind} encoding is not supported for full-zip variable values")
