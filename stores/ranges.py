"""Planning the GETs of a batch of byte ranges, for every remote store: nearby
ranges coalesced into one request, large ones split so a scan still fans out
(:class:`stores.s3_io.S3RangeReader`, :class:`stores.cloud_io.BlobRangeReader`),
and :class:`PinnedRangeReader`, the range reader they both are."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, Self, TypeVar

import pyarrow as pa

from tessera.format.errors import TruncatedFileError

from .errors import ObjectChangedError

T = TypeVar("T")
R = TypeVar("R")

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


class _Mapper(Protocol):
    def _map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]: ...


class PinnedRangeReader:
    """A :class:`format.io.RangeReader` over one object of a remote store,
    pinned to one version of it (S3 ETag, GCS generation, Azure ETag).

    The size and version come from the metadata read when the reader is
    opened, or the size from the caller (``size_given``, what a manifest
    records) and the version from the first GET answered; every GET after is
    conditional on that version, and answers to GETs sent before it was known
    must carry the same one, so a replaced object raises ObjectChangedError
    instead of mixing bytes of two versions.

    A store's reader supplies :meth:`_fetch` (one GET, its errors translated)
    and :meth:`cache_key`; GETs run on the store's pool (``store._map``)."""

    def __init__(
        self, store: _Mapper, key: str, path: str, size: int, version: str | None, *, size_given: bool = False
    ) -> None:
        self._store = store
        self._key = key
        self._size = size
        self._version = version
        self._size_given = size_given
        self.path = path
        self._lock = threading.Lock()
        #: called before a GET reports the object replaced (see expect_etag)
        self._on_changed: Callable[[], None] | None = None
        #: a round trip per request: readers fetch several fields' ranges at once
        self.remote = True
        #: GET requests issued and bytes they returned (for tests and tuning)
        self.requests = 0
        self.bytes_fetched = 0

    def _fetch(self, start: int, end: int, version: str | None) -> tuple[bytes, str | None]:
        """Bytes ``[start, end)`` and the version that answered; with ``version``,
        only from that version (ObjectChangedError otherwise)."""
        raise NotImplementedError

    def size(self) -> int:
        """Object size in bytes."""
        return self._size

    @property
    def etag(self) -> str | None:
        """The object's version once metadata or a GET has told it."""
        return self._version

    def expect_etag(self, etag: str, on_changed: Callable[[], None] | None = None) -> None:
        """Read only the object version ``etag`` names (what a reader before
        this one parsed): every GET is conditional on it, and a replaced object
        raises ObjectChangedError, after calling ``on_changed`` (the parse
        made from the old version is dropped, so reopening reads the new one)."""
        with self._lock:
            if self._version is not None and self._version != etag:
                if on_changed is not None:
                    on_changed()
                raise ObjectChangedError(f"{self.path} was replaced since it was last read; reopen it")
            self._version = etag
            self._on_changed = on_changed

    def _get(self, start: int, end: int) -> bytes:
        version = self._version
        try:
            data, got = self._fetch(start, end, version)
        except ObjectChangedError:
            if self._on_changed is not None:
                self._on_changed()
            raise
        if version is None:
            with self._lock:
                if self._version is None:
                    self._version = got
                elif got != self._version:
                    raise ObjectChangedError(f"{self.path} was replaced while being read; reopen it")
        if len(data) != end - start:
            if self._size_given:
                raise TruncatedFileError(
                    self.path,
                    f"asked for bytes {start}..{end}, got {len(data)}: the object is not the "
                    f"{self._size} bytes its table's manifest records",
                )
            raise ObjectChangedError(
                f"{self.path}: asked for bytes {start}..{end}, got {len(data)} bytes; the object changed, reopen it"
            )
        with self._lock:
            self.requests += 1
            self.bytes_fetched += len(data)
        return data

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[pa.Buffer]:
        """One buffer per ``(offset, length)``, in the order asked; nearby ranges
        are coalesced and the GETs run in parallel."""
        for off, length in ranges:
            if off < 0 or length < 0 or off + length > self._size:
                raise TruncatedFileError(
                    self.path, f"byte range [{off}, {off + length}) lies outside the object of {self._size} bytes"
                )
        plan = plan_requests(ranges)
        gets = split_gets(plan)
        datas = self._store._map(lambda g: self._get(g[1], g[2]), gets)
        return assemble(ranges, plan, gets, datas)

    def close(self) -> None:
        """Nothing to release: the client and pool belong to the store."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
