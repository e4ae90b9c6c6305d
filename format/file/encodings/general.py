"""General-purpose buffer compression (``general`` / ``BufferCompression``) of Lance 2.1/2.2.

Framing as written by pylance 14:

* LZ4:  ``u32 LE uncompressed size`` followed by one raw LZ4 *block*.
* ZSTD: ``u64 LE uncompressed size`` followed by one zstd frame.  pylance
  also reads an older form that is a bare zstd frame (it starts with the zstd
  magic ``28 b5 2f fd`` and has bit 4 of the frame header descriptor clear); so do we.

Schemes are given as the ``CompressionScheme`` enum value (1 = LZ4, 2 = ZSTD)
or a name (``"lz4"``, ``"zstd"``).
"""

from __future__ import annotations

import struct

import pyarrow as pa

LZ4 = 1
ZSTD = 2
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

__all__ = ["LZ4", "ZSTD", "compress", "decompress", "scheme_id"]


def scheme_id(scheme) -> int:
    """Normalise an enum value or a name to 1 (LZ4) or 2 (ZSTD); ``ValueError`` otherwise."""
    if isinstance(scheme, str):
        name = scheme.lower().removeprefix("compression_algorithm_")
        if name == "lz4":
            return LZ4
        if name == "zstd":
            return ZSTD
        raise ValueError(f"unsupported general compression scheme {scheme!r}")
    if int(scheme) in (LZ4, ZSTD):
        return int(scheme)
    raise ValueError(f"unsupported general compression scheme {scheme!r}")


def _is_bare_zstd_frame(view: memoryview) -> bool:
    # A length prefix whose low bytes happen to equal the magic is told apart
    # by bit 4 of the frame header descriptor (byte 4), which a frame written
    # today keeps clear; pylance tests the same bit, so we agree with it.
    return len(view) >= 8 and bytes(view[:4]) == _ZSTD_MAGIC and not view[4] & 0x10


def decompress(scheme, buf) -> pa.Buffer:
    """Decompress one ``general``-compressed buffer; returns a ``pyarrow.Buffer``.

    Raises ``ValueError`` on a truncated header, an unknown scheme, or when
    the codec fails or yields a size other than the declared one.
    """
    sid = scheme_id(scheme)
    view = memoryview(buf).cast("B")
    if sid == LZ4:
        if len(view) < 4:
            raise ValueError(f"LZ4 buffer of {len(view)} bytes is shorter than its 4-byte size")
        (size,) = struct.unpack_from("<I", view, 0)
        if size == 0:
            return pa.py_buffer(b"")
        try:
            out = pa.Codec("lz4_raw").decompress(view[4:], decompressed_size=size)
        except (pa.ArrowException, OSError) as exc:
            raise ValueError(f"corrupt LZ4 block: {exc}") from exc
    else:
        if len(view) == 0:
            return pa.py_buffer(b"")
        if _is_bare_zstd_frame(view):
            try:
                stream = pa.CompressedInputStream(pa.BufferReader(pa.py_buffer(view)), "zstd")
                return stream.read_buffer()
            except (pa.ArrowException, OSError) as exc:
                raise ValueError(f"corrupt zstd frame: {exc}") from exc
        if len(view) < 8:
            raise ValueError(f"ZSTD buffer of {len(view)} bytes is shorter than its 8-byte size")
        (size,) = struct.unpack_from("<Q", view, 0)
        if size == 0:
            return pa.py_buffer(b"")
        try:
            out = pa.Codec("zstd").decompress(view[8:], decompressed_size=size)
        except (pa.ArrowException, OSError) as exc:
            raise ValueError(f"corrupt zstd frame: {exc}") from exc
    if out.size != size:
        raise ValueError(f"decompressed {out.size} bytes, header declares {size}")
    return out


def compress(scheme, data, level: int | None = None) -> bytes:
    """Compress ``data`` with the framing pylance writes (see the module docstring)."""
    sid = scheme_id(scheme)
    raw = memoryview(data).cast("B")
    if sid == LZ4:
        if len(raw) >= 1 << 32:
            raise ValueError("LZ4 general compression is limited to buffers under 4 GiB")
        body = pa.Codec("lz4_raw").compress(raw, asbytes=True) if len(raw) else b""
        return struct.pack("<I", len(raw)) + body
    codec = pa.Codec("zstd", level) if level is not None else pa.Codec("zstd")
    return struct.pack("<Q", len(raw)) + codec.compress(raw, asbytes=True)
