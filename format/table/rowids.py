"""Move-stable row id sequences and row version sequences.

A fragment of a table with stable row ids carries a :class:`RowIdSequence`:
the row id of each of its physical rows, in order, stored as a list of
``U64Segment`` messages (``protos/rowids.proto``).  Each segment is one of

* ``range``              ``[start, end)``, every value present;
* ``range_with_holes``   ``[start, end)`` minus a sorted list of absent values;
* ``range_with_bitmap``  ``[start, end)`` with a presence bitmap (LSB first);
* ``sorted_array``       strictly increasing values;
* ``array``              values in any order;

and the arrays are ``EncodedU64Array``: ``u16``/``u32`` offsets from a base
(the minimum), or raw ``u64``, whichever is narrowest.  :meth:`RowIdSequence.from_values`
cuts a sequence into runs and gives each run its most compact segment, using
Lance's rule for sorted runs (smallest of holes / bitmap / sorted array).

Row version sequences (``RowDatasetVersionSequence``) record the table version
that created and last updated each row, as runs of ``(span, version)``; a
reader takes each run's span *length* in order, as pylance 14 does (its own
compaction writes spans holding the old fragments' offsets).

Lance documents inline sequences for small sequences (under ~200 KB,
:data:`INLINE_LIMIT`) and an external file (``ExternalFile{path, offset,
size}``, path relative to the table root) for large ones.  pylance 14.0.2,
however, writes every sequence inline however large (a 381 KB one was
observed) and cannot open a table with an external sequence ("All fragments
must have row ids").  So Tessera reads both, and writes external files only
when asked (:func:`set_sequence` ``limit``, or :data:`EXTERNAL_LIMIT`).
Everything here is bytes in, bytes out; reading an external file needs only
an object with ``read(path) -> bytes``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..errors import CorruptFileError, UnsupportedEncodingError
from ..file.container import parse_proto
from ..protos import rowids_pb2, table_pb2
from . import paths
from .manifest import check_relative_path
from .store import ObjectReader

INLINE_LIMIT = 200 * 1024  # Lance: "inline when under ~200 KB"
#: sequences over this many bytes go to an external file; None: always inline
#: (the default, because pylance 14.0.2 cannot read external sequences)
EXTERNAL_LIMIT: int | None = None
#: a strictly increasing piece is cut where a gap exceeds this many absent values
GAP_SPLIT = 256
#: pieces shorter than this are merged with their neighbours into one segment
MIN_PIECE = 16

_U16_LIMIT = 0xFFFF  # Lance: range < u16::MAX -> u16 offsets
_U32_LIMIT = 0xFFFFFFFF

SEGMENT_KINDS = ("range", "range_with_holes", "range_with_bitmap", "sorted_array", "array")
ROW_ID_FIELDS = ("inline_row_ids", "external_row_ids")
CREATED_AT_FIELDS = ("inline_created_at_versions", "external_created_at_versions")
LAST_UPDATED_AT_FIELDS = ("inline_last_updated_at_versions", "external_last_updated_at_versions")


# -- EncodedU64Array ---------------------------------------------------------------------


def encode_u64_array(values: np.ndarray) -> rowids_pb2.EncodedU64Array:
    """The narrowest encoding of ``values`` (order kept): base + u16/u32 offsets, or u64."""
    v = np.asarray(values, dtype=np.uint64)
    out = rowids_pb2.EncodedU64Array()
    lo = int(v.min()) if v.size else 0
    span = int(v.max()) - lo if v.size else 0
    if span < _U16_LIMIT:
        out.u16_array.base = lo
        out.u16_array.offsets = (v - np.uint64(lo)).astype("<u2").tobytes()
    elif span < _U32_LIMIT:
        out.u32_array.base = lo
        out.u32_array.offsets = (v - np.uint64(lo)).astype("<u4").tobytes()
    else:
        out.u64_array.values = v.astype("<u8").tobytes()
    return out


def _u64_array_nbytes(values: np.ndarray) -> int:
    if not values.size:
        return 8
    span = int(values.max()) - int(values.min())
    width = 2 if span < _U16_LIMIT else 4 if span < _U32_LIMIT else 8
    return 8 + width * values.size


def decode_u64_array(a: rowids_pb2.EncodedU64Array) -> np.ndarray:
    which = a.WhichOneof("array")
    if which == "u16_array":
        return np.uint64(a.u16_array.base) + _frombuffer(a.u16_array.offsets, "<u2")
    if which == "u32_array":
        return np.uint64(a.u32_array.base) + _frombuffer(a.u32_array.offsets, "<u4")
    if which == "u64_array":
        return _frombuffer(a.u64_array.values, "<u8")
    if which is None:
        return np.zeros(0, np.uint64)
    raise UnsupportedEncodingError(f"row id array kind {which!r} is not supported")


def _frombuffer(data: bytes, dtype: str) -> np.ndarray:
    width = np.dtype(dtype).itemsize
    if len(data) % width:
        raise CorruptFileError(None, f"row id array of {len(data)} bytes is not a multiple of {width}")
    return np.frombuffer(data, dtype).astype(np.uint64)


def u64_array_len(a: rowids_pb2.EncodedU64Array) -> int:
    which = a.WhichOneof("array")
    if which == "u16_array":
        return len(a.u16_array.offsets) // 2
    if which == "u32_array":
        return len(a.u32_array.offsets) // 4
    if which == "u64_array":
        return len(a.u64_array.values) // 8
    return 0


# -- segments ----------------------------------------------------------------------------


def range_segment(start: int, end: int) -> rowids_pb2.U64Segment:
    seg = rowids_pb2.U64Segment()
    seg.range.start = start
    seg.range.end = end
    return seg


def encode_sorted_segment(v: np.ndarray) -> rowids_pb2.U64Segment:
    """Lance's choice for strictly increasing ``v``: a range when contiguous,
    else the smallest of range-with-holes, range-with-bitmap and sorted array."""
    seg = rowids_pb2.U64Segment()
    if not v.size:
        seg.range.SetInParent()
        return seg
    lo, hi = int(v[0]), int(v[-1])
    slots = hi - lo + 1
    n_holes = slots - v.size
    if n_holes == 0:
        return range_segment(lo, hi + 1)
    holes_size = 24 + (2 if n_holes and hi - lo < _U16_LIMIT else 4) * n_holes
    bitmap_size = 24 + (slots + 7) // 8
    array_size = 16 + _u64_array_nbytes(v)
    best = min(holes_size, bitmap_size, array_size)
    if best == holes_size:
        present = np.zeros(slots, dtype=bool)
        present[(v - np.uint64(lo)).astype(np.int64)] = True
        holes = np.nonzero(~present)[0].astype(np.uint64) + np.uint64(lo)
        seg.range_with_holes.start = lo
        seg.range_with_holes.end = hi + 1
        seg.range_with_holes.holes.CopyFrom(encode_u64_array(holes))
    elif best == bitmap_size:
        present = np.zeros(slots, dtype=bool)
        present[(v - np.uint64(lo)).astype(np.int64)] = True
        seg.range_with_bitmap.start = lo
        seg.range_with_bitmap.end = hi + 1
        seg.range_with_bitmap.bitmap = np.packbits(present, bitorder="little").tobytes()
    else:
        seg.sorted_array.CopyFrom(encode_u64_array(v))
    return seg


def encode_segment(v: np.ndarray) -> rowids_pb2.U64Segment:
    """One segment for ``v``, as Lance's ``U64Segment::from_slice`` chooses."""
    v = np.asarray(v, dtype=np.uint64)
    if v.size < 2 or bool(np.all(v[1:] > v[:-1])):
        return encode_sorted_segment(v)
    seg = rowids_pb2.U64Segment()
    seg.array.CopyFrom(encode_u64_array(v))
    return seg


def _bitmap_bits(r) -> np.ndarray:
    n = r.end - r.start
    if n < 0 or len(r.bitmap) * 8 < n:
        raise CorruptFileError(None, f"row id bitmap of {len(r.bitmap)} bytes cannot cover [{r.start}, {r.end})")
    return np.unpackbits(np.frombuffer(r.bitmap, np.uint8), bitorder="little", count=n).astype(bool)


def _holes(r) -> np.ndarray:
    holes = decode_u64_array(r.holes)
    if holes.size and (int(holes.min()) < r.start or int(holes.max()) >= r.end):
        raise CorruptFileError(None, f"row id holes outside their range [{r.start}, {r.end})")
    if holes.size > 1 and not bool(np.all(holes[1:] > holes[:-1])):  # Lance writes them sorted
        holes = np.unique(holes)
    return holes


def segment_values(seg: rowids_pb2.U64Segment) -> np.ndarray:
    """The values of one segment, in order (uint64)."""
    which = seg.WhichOneof("segment")
    if which == "range":
        return np.arange(seg.range.start, seg.range.end, dtype=np.uint64)
    if which == "range_with_holes":
        r = seg.range_with_holes
        return np.delete(np.arange(r.start, r.end, dtype=np.uint64), (_holes(r) - np.uint64(r.start)).astype(np.int64))
    if which == "range_with_bitmap":
        r = seg.range_with_bitmap
        return np.arange(r.start, r.end, dtype=np.uint64)[_bitmap_bits(r)]
    if which in ("sorted_array", "array"):
        return decode_u64_array(getattr(seg, which))
    raise UnsupportedEncodingError(f"row id segment {which!r} is not supported")


def segment_len(seg: rowids_pb2.U64Segment) -> int:
    """Number of values in a segment, without materialising it."""
    which = seg.WhichOneof("segment")
    if which == "range":
        return max(0, seg.range.end - seg.range.start)
    if which == "range_with_holes":
        r = seg.range_with_holes
        return r.end - r.start - len(_holes(r))
    if which == "range_with_bitmap":
        return int(np.count_nonzero(_bitmap_bits(seg.range_with_bitmap)))
    if which in ("sorted_array", "array"):
        return u64_array_len(getattr(seg, which))
    raise UnsupportedEncodingError(f"row id segment {which!r} is not supported")


def segment_runs(seg: rowids_pb2.U64Segment) -> tuple[np.ndarray, np.ndarray]:
    """``(first_id, length)`` of each run of consecutive ids at consecutive
    positions; ranges and ranges with holes are split without materialising."""
    which = seg.WhichOneof("segment")
    if which == "range":
        n = max(0, seg.range.end - seg.range.start)
        return np.array([seg.range.start] if n else [], np.uint64), np.array([n] if n else [], np.int64)
    if which == "range_with_holes":
        r = seg.range_with_holes
        holes = _holes(r)
        starts = np.concatenate([[np.uint64(r.start)], holes + np.uint64(1)])
        ends = np.concatenate([holes, [np.uint64(r.end)]])
        lengths = ends.astype(np.int64) - starts.astype(np.int64)
        keep = lengths > 0
        return starts[keep], lengths[keep]
    return values_runs(segment_values(seg))


def values_runs(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(first_id, length)`` of each run of consecutive values in ``v``."""
    if not v.size:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    step = v[1:] - v[:-1]
    if not bool(np.any(step == 1)):  # no two consecutive ids: every value is its own run
        return v, np.ones(v.size, np.int64)
    cut = np.flatnonzero(step != 1) + 1
    starts = np.concatenate([[0], cut])
    lengths = np.diff(np.concatenate([starts, [v.size]]))
    return v[starts], lengths.astype(np.int64)


# -- RowIdSequence -----------------------------------------------------------------------


class RowIdSequence:
    """The row ids of a fragment's physical rows, as a list of segments."""

    __slots__ = ("segments",)

    def __init__(self, segments: list[rowids_pb2.U64Segment] | None = None) -> None:
        self.segments = list(segments or [])

    @classmethod
    def from_range(cls, start: int, end: int) -> RowIdSequence:
        return cls([range_segment(start, end)])

    @classmethod
    def from_bytes(cls, data: bytes, path: str | None = None) -> RowIdSequence:
        msg = parse_proto(rowids_pb2.RowIdSequence, data, path, "RowIdSequence")
        return cls(list(msg.segments))

    @classmethod
    def from_values(cls, values) -> RowIdSequence:
        """The most compact encoding of ``values``: cut into strictly increasing
        pieces (at descents and at gaps over :data:`GAP_SPLIT`), merge short
        pieces into one segment, encode each with Lance's rule; never larger
        than Lance's single-segment encoding."""
        v = np.ascontiguousarray(values, dtype=np.uint64)
        n = v.size
        if n == 0:
            return cls([])
        up = v[1:] > v[:-1]
        step = v[1:] - v[:-1]  # meaningful where ``up``
        if bool(np.all(up & (step == 1))):
            return cls.from_range(int(v[0]), int(v[-1]) + 1)
        cut = np.nonzero(~up | (step > GAP_SPLIT + 1))[0] + 1
        starts = np.concatenate([[0], cut])
        ends = np.concatenate([cut, [n]])
        long = (ends - starts) >= MIN_PIECE
        segs: list[rowids_pb2.U64Segment] = []
        # long pieces each get a segment; a stretch of short pieces shares one
        change = np.nonzero(long[1:] != long[:-1])[0] + 1
        bounds = np.concatenate([[0], change, [len(starts)]]).tolist()
        for a, b in zip(bounds[:-1], bounds[1:]):
            if long[a]:
                segs.extend(encode_sorted_segment(v[starts[j] : ends[j]]) for j in range(a, b))
            else:
                segs.append(encode_segment(v[starts[a] : ends[b - 1]]))
        seq = cls(segs)
        single = cls([encode_segment(v)])
        return seq if len(seq.to_bytes()) <= len(single.to_bytes()) else single

    def to_bytes(self) -> bytes:
        return rowids_pb2.RowIdSequence(segments=self.segments).SerializeToString()

    def __len__(self) -> int:
        return sum(segment_len(s) for s in self.segments)

    def values(self) -> np.ndarray:
        parts = [segment_values(s) for s in self.segments]
        return np.concatenate(parts) if parts else np.zeros(0, np.uint64)

    def kinds(self) -> list[str]:
        return [s.WhichOneof("segment") for s in self.segments]

    def runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(position, first_id, length)`` of each run of consecutive ids at
        consecutive positions, positions counted from the fragment's row 0."""
        ids, lens = [], []
        for s in self.segments:
            a, b = segment_runs(s)
            ids.append(a)
            lens.append(b)
        if not ids:
            z = np.zeros(0, np.int64)
            return z, np.zeros(0, np.uint64), z
        first = ids[0] if len(ids) == 1 else np.concatenate(ids)
        length = lens[0] if len(lens) == 1 else np.concatenate(lens)
        pos = np.empty(length.size, np.int64)
        if length.size:
            pos[0] = 0
            np.cumsum(length[:-1], out=pos[1:])
        return pos, np.asarray(first, np.uint64), np.asarray(length, np.int64)

    def __repr__(self) -> str:
        return f"RowIdSequence({len(self)} ids in {self.kinds()})"


# -- RowDatasetVersionSequence -----------------------------------------------------------


def encode_versions(versions) -> bytes:
    """A RowDatasetVersionSequence for per-row ``versions``: one run per stretch
    of equal versions, spans as contiguous offset ranges within the fragment."""
    v = np.asarray(versions, dtype=np.uint64)
    msg = rowids_pb2.RowDatasetVersionSequence()
    if v.size:
        cut = np.nonzero(v[1:] != v[:-1])[0] + 1
        starts = np.concatenate([[0], cut])
        ends = np.concatenate([cut, [v.size]])
        for a, b in zip(starts.tolist(), ends.tolist()):
            run = msg.runs.add()
            run.span.range.start = a
            run.span.range.end = b
            run.version = int(v[a])
    return msg.SerializeToString()


def constant_versions(n: int, version: int) -> bytes:
    """What pylance 14 writes for a new fragment: rows ``[0, n)`` at ``version``."""
    msg = rowids_pb2.RowDatasetVersionSequence()
    run = msg.runs.add()
    run.span.range.end = n
    run.version = version
    return msg.SerializeToString()


def decode_versions(data: bytes, path: str | None = None) -> np.ndarray:
    """Per-row versions: each run covers as many rows as its span holds, in order."""
    msg = parse_proto(rowids_pb2.RowDatasetVersionSequence, data, path, "RowDatasetVersionSequence")
    lens = np.array([segment_len(r.span) for r in msg.runs], dtype=np.int64)
    vers = np.array([r.version for r in msg.runs], dtype=np.uint64)
    return np.repeat(vers, lens)


# -- fragments -----------------------------------------------------------------------------


def external_path() -> str:
    """A fresh path (relative to the table root) for an external sequence file."""
    return paths.new_sequence_path()


def read_sequence_bytes(
    source: ObjectReader | None, frag: table_pb2.DataFragment, fields: tuple[str, str]
) -> bytes | None:
    """The raw bytes of the inline or external sequence named by ``fields``."""
    inline, external = fields
    which = frag.WhichOneof(_ONEOF[inline])
    if which is None:
        return None
    if which == inline:
        return getattr(frag, inline)
    ext = getattr(frag, external)
    if source is None:
        raise CorruptFileError(ext.path, "an external sequence needs a store to read it from")
    check_relative_path(ext.path, f"fragment {frag.id}: {external}.path")
    data = source.read(ext.path)
    end = ext.offset + ext.size if ext.size else len(data)
    if end > len(data) or ext.offset > end:
        raise CorruptFileError(ext.path, f"sequence [{ext.offset}, {end}) runs past the file ({len(data)} bytes)")
    return data[ext.offset : end]


_ONEOF = {
    "inline_row_ids": "row_id_sequence",
    "inline_created_at_versions": "created_at_version_sequence",
    "inline_last_updated_at_versions": "last_updated_at_version_sequence",
}


def read_row_id_sequence(source: ObjectReader | None, frag: table_pb2.DataFragment) -> RowIdSequence | None:
    """The fragment's row id sequence (None without stable row ids)."""
    data = read_sequence_bytes(source, frag, ROW_ID_FIELDS)
    if data is None:
        return None
    return RowIdSequence.from_bytes(data, f"row ids of fragment {frag.id}")


def decode_row_ids(source: ObjectReader | None, frag: table_pb2.DataFragment) -> np.ndarray | None:
    """The fragment's stable row ids, one per physical row (None without them)."""
    seq = read_row_id_sequence(source, frag)
    if seq is None:
        return None
    out = seq.values()
    if out.size != frag.physical_rows:
        raise CorruptFileError(None, f"fragment {frag.id} has {frag.physical_rows} rows but {out.size} row ids")
    return out


def read_versions(
    source: ObjectReader | None, frag: table_pb2.DataFragment, fields: tuple[str, str]
) -> np.ndarray | None:
    """Per-row created-at (``CREATED_AT_FIELDS``) or last-updated-at versions."""
    data = read_sequence_bytes(source, frag, fields)
    if data is None:
        return None
    out = decode_versions(data, f"versions of fragment {frag.id}")
    if out.size != frag.physical_rows:
        raise CorruptFileError(None, f"fragment {frag.id} has {frag.physical_rows} rows but {out.size} row versions")
    return out


def set_sequence(
    frag: table_pb2.DataFragment,
    fields: tuple[str, str],
    data: bytes,
    put: Callable[[str, bytes], None] | None = None,
    limit: int | None = None,
) -> str | None:
    """Store ``data`` inline, or, when it is over ``limit`` bytes (default
    :data:`EXTERNAL_LIMIT`; None means always inline) and ``put`` is given, in
    a new external file; returns the external file's path, if one was written."""
    inline, external = fields
    limit = EXTERNAL_LIMIT if limit is None else limit
    if limit is None or put is None or len(data) <= limit:
        setattr(frag, inline, data)
        return None
    path = external_path()
    put(path, data)
    ext = getattr(frag, external)
    ext.path = path
    ext.offset = 0
    ext.size = len(data)
    return path
