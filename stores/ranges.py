"""Planning the GETs of a batch of byte ranges, for every remote store: nearby
ranges coalesced into one request, large ones split so a scan still fans out
(:class:`stores.s3_io.S3RangeReader`, :class:`stores.cloud_io.BlobRangeReader`)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

#: ranges closer than this are fetched by one GET (the bytes between are discarded)
COALESCE_GAP = 1024 * 1024
#: a merged request grows no larger than this, so large scans still fan out
MAX_COALESCED = 16 * 1024 * 1024
#: a single range larger than MAX_COALESCED is split into GETs of this size
SPLIT_SIZE = 8 * 1024 * 1024


def plan_requests(
    ranges: Sequence[tuple[int, int]], gap: int = COALESCE_GAP, max_size: int = MAX_COALESCED
) -> list[tuple[int, int, list[int]]]:
    """Group ``(offset, length)`` ranges into GETs ``(start, end, [range indices])``.

    Ranges that overlap or lie within ``gap`` bytes of each other share a GET,
    as long as the GET stays within ``max_size`` (a single larger range gets a
    GET of its own).  Zero-length ranges need no GET and are left out."""
    order = sorted((i for i, r in enumerate(ranges) if r[1] > 0), key=lambda i: ranges[i][0])
    out: list[tuple[int, int, list[int]]] = []
    for i in order:
        off, length = ranges[i]
        end = off + length
        if out:
            start, cur_end, members = out[-1]
            if off <= cur_end + gap and max(end, cur_end) - start <= max_size:
                out[-1] = (start, max(end, cur_end), members + [i])
                continue
        out.append((off, end, [i]))
    return out


def split_gets(plan: list[tuple[int, int, list[int]]]) -> list[tuple[int, int, int]]:
    """The GETs of ``plan`` as ``(plan index, start, end)``, requests larger than
    MAX_COALESCED split into SPLIT_SIZE pieces, so no pool task waits on another."""
    return [
        (p, a, min(a + SPLIT_SIZE, end) if end - start > MAX_COALESCED else end)
        for p, (start, end, _m) in enumerate(plan)
        for a in (range(start, end, SPLIT_SIZE) if end - start > MAX_COALESCED else (start,))
    ]


def assemble(
    ranges: Sequence[tuple[int, int]],
    plan: list[tuple[int, int, list[int]]],
    gets: list[tuple[int, int, int]],
    datas: Sequence[bytes],
) -> list[pa.Buffer]:
    """One buffer per range of ``ranges``, cut (zero-copy where a GET was not
    split) from the bytes ``datas`` the GETs ``gets`` of ``plan`` returned."""
    pieces: list[list[tuple[int, bytes]]] = [[] for _ in plan]
    for (p, a, _b), data in zip(gets, datas):
        pieces[p].append((a, data))
    result: list[pa.Buffer] = [pa.py_buffer(b"")] * len(ranges)
    for (start, end, members), got in zip(plan, pieces):
        if len(got) == 1:
            buf = pa.py_buffer(got[0][1])
        else:
            joined = bytearray(end - start)
            for a, data in got:
                joined[a - start : a - start + len(data)] = data
            buf = pa.py_buffer(joined)
        for i in members:
            off, length = ranges[i]
            result[i] = buf.slice(off - start, length)
    return result
