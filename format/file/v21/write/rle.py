"""Run-length encoding of mini-block values (2.1/2.2 writer).

``rle{values: flat{T}, run_lengths: flat{8}}`` gives each chunk two value
buffers: the run values (T bits each) and one u8 length per run.  Runs never
cross a chunk boundary and runs longer than 255 are split into pieces of 255
(plus the remainder), as pylance 14 writes them.

Selection (observed from pylance 14, see ``docs/reference/rle-write.md``):
values of 8, 16, 32 or 64 bits (integers, dates, times, timestamps, floats;
not booleans, fixed-size lists or packed structs) are run-length encoded when
``runs * (T / 8 + 1)`` bytes is smaller than what the page would otherwise
take (bit-packed blocks where bit-packing applies, flat values otherwise).

Everything is vectorised: run starts come from one ``!=`` over the values.
"""

from __future__ import annotations

import numpy as np

from ....protos import encodings21_pb2 as pb
from .values import FixedValues, flat

MAX_RUN = 255
#: switch for tests and benchmarks
ENABLED = True


def eligible(values: FixedValues) -> bool:
    return (
        ENABLED
        and not values.is_bits
        and values.dim is None
        and values.packed is None
        and values.bits_per_value in (8, 16, 32, 64)
    )


def _unsigned(values: FixedValues) -> np.ndarray:
    return values.data.view(f"<u{values.width}")


def _segments(u: np.ndarray, cuts: np.ndarray | None = None) -> np.ndarray:
    """Start of every run (int64), also starting a run at each of ``cuts``."""
    n = len(u)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(u[1:] != u[:-1]) + 1
    starts = np.concatenate([np.zeros(1, dtype=np.int64), starts.astype(np.int64)])
    if cuts is not None and len(cuts):
        starts = np.union1d(starts, cuts.astype(np.int64))
    return starts


def _pieces(starts: np.ndarray, n: int) -> np.ndarray:
    """Pieces per run once runs over :data:`MAX_RUN` are split."""
    lengths = np.diff(np.concatenate([starts, [n]]))
    return (lengths + MAX_RUN - 1) // MAX_RUN


def estimated_bytes(values: FixedValues) -> int:
    """Value bytes of the whole page as RLE (chunk boundaries ignored)."""
    u = _unsigned(values)
    return int(_pieces(_segments(u), len(u)).sum()) * (values.width + 1)


def choose(values: FixedValues, alternative_bytes: int) -> bool:
    """True when RLE beats ``alternative_bytes`` (the page's bit-packed or flat value size)."""
    if not eligible(values) or values.n == 0:
        return False
    return estimated_bytes(values) < alternative_bytes


def _chunk_runs(values: FixedValues, vs: np.ndarray, ve: np.ndarray):
    """``(starts, pieces, piece counts per chunk)`` with runs cut at chunk starts."""
    u = _unsigned(values)
    starts = _segments(u, vs)
    pieces = _pieces(starts, len(u))
    chunk_of = np.searchsorted(vs, starts, "right") - 1
    per_chunk = np.bincount(chunk_of, weights=pieces, minlength=len(vs)).astype(np.int64)
    return starts, pieces, per_chunk


def chunk_sizes(values: FixedValues, vs: np.ndarray, ve: np.ndarray) -> list[np.ndarray]:
    """Per chunk: bytes of run values, bytes of run lengths."""
    _, _, per_chunk = _chunk_runs(values, vs, ve)
    return [per_chunk * values.width, per_chunk]


def run_pieces(u: np.ndarray, starts: np.ndarray, pieces: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The runs of ``u`` starting at ``starts``, split in pieces of at most
    :data:`MAX_RUN`: ``(piece values as u8, piece lengths as u8)``."""
    lengths = np.diff(np.concatenate([starts, [len(u)]]))
    if pieces is None:
        pieces = (lengths + MAX_RUN - 1) // MAX_RUN
    run_vals = np.repeat(u[starts], pieces)
    # every piece is MAX_RUN long but the last of its run, which takes the remainder
    piece_len = np.full(len(run_vals), MAX_RUN, dtype=np.int64)
    piece_len[np.cumsum(pieces) - 1] = lengths - (pieces - 1) * MAX_RUN
    return np.ascontiguousarray(run_vals).view(np.uint8), piece_len.astype(np.uint8)


def chunk_buffers(values: FixedValues, vs: np.ndarray, ve: np.ndarray):
    """``(run values as u8, run lengths as u8, first piece of each chunk, pieces per chunk)``."""
    starts, pieces, per_chunk = _chunk_runs(values, vs, ve)
    run_vals, piece_len = run_pieces(_unsigned(values), starts, pieces)
    first = np.cumsum(per_chunk) - per_chunk
    return run_vals, piece_len, first, per_chunk


def encoding(bits: int) -> pb.CompressiveEncoding:
    """``rle{values: flat{bits}, run_lengths: flat{8}}``."""
    enc = pb.CompressiveEncoding()
    enc.rle.values.CopyFrom(flat(bits))
    enc.rle.run_lengths.CopyFrom(flat(8))
    return enc
