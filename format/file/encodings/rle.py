"""Run-length encoding as used by Lance 2.1/2.2 (``rle`` compressive encoding).

Mini-block form: two value buffers, the run values (``flat`` of the column's
width) and the run lengths (u8 in pylance 14; runs over 255 are split).
Block form (2.2 rep/def levels)::

    u64 values_byte_len | run values | run lengths (to the end of the buffer)
"""

from __future__ import annotations

import struct

import numpy as np

__all__ = ["decode_rle", "decode_rle_block", "decode_rle_block_levels", "encode_rle", "encode_rle_block"]


def _as_u8(buf) -> np.ndarray:
    if isinstance(buf, np.ndarray):
        return np.ascontiguousarray(buf).reshape(-1).view(np.uint8)
    return np.frombuffer(buf, dtype=np.uint8)


def decode_rle(values: np.ndarray, run_lengths: np.ndarray, num_values: int | None = None) -> np.ndarray:
    """Expand runs: ``values[i]`` repeated ``run_lengths[i]`` times.

    ``run_lengths`` may be any unsigned integer array (u8 in pylance 14).  If
    ``num_values`` is given the expansion must produce exactly that many
    values, else ``ValueError``.
    """
    values = np.asarray(values).reshape(-1)
    run_lengths = np.asarray(run_lengths).reshape(-1)
    if values.size != run_lengths.size:
        raise ValueError(f"RLE has {values.size} run values but {run_lengths.size} run lengths")
    if run_lengths.dtype.kind == "i" and run_lengths.size and run_lengths.min() < 0:
        raise ValueError("RLE run lengths must not be negative")
    if num_values is not None:
        total = int(run_lengths.sum(dtype=np.int64))
        if total != num_values:
            raise ValueError(f"RLE runs cover {total} values, expected {num_values}")
    return np.repeat(values, run_lengths.astype(np.intp, copy=False))


def encode_rle(values: np.ndarray, max_run: int = 255) -> tuple[np.ndarray, np.ndarray]:
    """Split ``values`` into runs; returns ``(run_values, run_lengths)``.

    Runs longer than ``max_run`` are split into several runs of the same value
    (pylance's u8 compatibility rule).  Run lengths are u8 when ``max_run`` is
    255, else u16 (<= 65535) or u32.
    """
    values = np.asarray(values).reshape(-1)
    len_dtype = np.uint8 if max_run <= 0xFF else np.uint16 if max_run <= 0xFFFF else np.uint32
    if values.size == 0:
        return values[:0].copy(), np.zeros(0, dtype=len_dtype)
    if values.dtype.kind == "f":
        # compare bit patterns so NaNs and -0.0 keep their exact bytes
        bits = values.view(f"u{values.dtype.itemsize}")
    else:
        bits = values
    change = np.flatnonzero(bits[1:] != bits[:-1]) + 1
    starts = np.concatenate(([0], change))
    lengths = np.diff(np.append(starts, values.size))
    pieces = -(-lengths // max_run)
    run_values = np.repeat(values[starts], pieces)
    # every piece is max_run long except the last piece of each run
    run_lengths = np.full(int(pieces.sum()), max_run, dtype=np.int64)
    last_piece = np.cumsum(pieces) - 1
    run_lengths[last_piece] = lengths - (pieces - 1) * max_run
    return run_values, run_lengths.astype(len_dtype)


def decode_rle_block(buf, value_dtype, length_dtype=np.uint8, num_values: int | None = None) -> np.ndarray:
    """Decode the block form ``u64 values_byte_len | values | run lengths``."""
    raw = _as_u8(buf)
    value_dtype = np.dtype(value_dtype).newbyteorder("<")
    length_dtype = np.dtype(length_dtype).newbyteorder("<")
    if raw.size < 8:
        raise ValueError(f"RLE block of {raw.size} bytes is shorter than its 8-byte header")
    (values_len,) = struct.unpack("<Q", raw[:8].tobytes())
    if values_len > raw.size - 8 or values_len % value_dtype.itemsize:
        raise ValueError(
            f"RLE block declares {values_len} bytes of {value_dtype.itemsize}-byte values "
            f"but holds {raw.size - 8} bytes after its header"
        )
    lengths_raw = raw[8 + values_len :]
    if lengths_raw.size % length_dtype.itemsize:
        raise ValueError("RLE block run-length bytes are not a whole number of lengths")
    values = raw[8 : 8 + values_len].view(value_dtype)
    lengths = lengths_raw.view(length_dtype)
    out = decode_rle(values, lengths, num_values)
    return out.astype(value_dtype.newbyteorder("="), copy=False)


def decode_rle_block_levels(buf, num_levels: int | None = None) -> np.ndarray:
    """Decode 2.2 rep/def levels in RLE block form (u16 values, u8 run lengths)."""
    return decode_rle_block(buf, np.uint16, np.uint8, num_levels)


def encode_rle_block(values: np.ndarray, max_run: int = 255) -> bytes:
    """Encode ``values`` in RLE block form (inverse of :func:`decode_rle_block`)."""
    run_values, run_lengths = encode_rle(values, max_run)
    vbytes = run_values.astype(run_values.dtype.newbyteorder("<"), copy=False).tobytes()
    lbytes = run_lengths.astype(run_lengths.dtype.newbyteorder("<"), copy=False).tobytes()
    return struct.pack("<Q", len(vbytes)) + vbytes + lbytes
