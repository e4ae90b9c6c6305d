"""Streaming I/O against S3: a coalescing, parallel range reader and a
multipart output stream.

Both are created by :class:`stores.s3.S3ObjectStore` (``open_reader`` and
``open_output``) and share its botocore client and thread pool.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import botocore.exceptions as bexc
import pyarrow as pa

from tessera.format.errors import TruncatedFileError

from .errors import ObjectChangedError
from .ranges import assemble, plan_requests, split_gets

if TYPE_CHECKING:
    from .s3 import S3ObjectStore

log = logging.getLogger(__name__)

#: what botocore raises; anything else is a bug and propagates untouched
BOTO_ERRORS = (bexc.BotoCoreError, bexc.ClientError)

#: multipart part size (S3 needs >= 5 MiB for every part but the last)
PART_SIZE = 16 * 1024 * 1024
#: parts uploading in the background at once; memory stays below (this + 1) parts
MAX_INFLIGHT_PARTS = 2


class S3RangeReader:
    """A :class:`format.io.RangeReader` over one S3 object.

    The size and ETag come from one HEAD when the reader is opened, or the size
    from the caller (``size_given``) and the ETag from the first GET answered;
    every GET after is conditional on that ETag, and answers to GETs sent
    before it was known must carry the same one, so a replaced object raises
    ObjectChangedError instead of mixing bytes of two versions."""

    def __init__(
        self, store: S3ObjectStore, key: str, size: int, etag: str | None, *, size_given: bool = False
    ) -> None:
        self._store = store
        self._key = key
        self._size = size
        self._etag = etag
        self._size_given = size_given
        self.path = f"s3://{store.bucket}/{key}"
        self._lock = threading.Lock()
        #: called before a GET reports the object replaced (see expect_etag)
        self._on_changed: Callable[[], None] | None = None
        #: a round trip per request: readers fetch several fields' ranges at once
        self.remote = True
        #: GET requests issued and bytes they returned (for tests and tuning)
        self.requests = 0
        self.bytes_fetched = 0

    def size(self) -> int:
        """Object size in bytes (from the HEAD at open)."""
        return self._size

    def cache_key(self) -> tuple:
        """Who this object is (endpoint, path, size): readers of the same object
        share what they parse of it, pinned to its ETag (:meth:`expect_etag`)."""
        return ("s3", self._store.endpoint_url, self.path, self._size)

    @property
    def etag(self) -> str | None:
        """The object's ETag once a HEAD or GET has told it."""
        return self._etag

    def expect_etag(self, etag: str, on_changed: Callable[[], None] | None = None) -> None:
        """Read only the object version ``etag`` names (what a reader before
        this one parsed): every GET is conditional on it, and a replaced object
        raises ObjectChangedError, after calling ``on_changed`` (the parse
        made from the old version is dropped, so reopening reads the new one)."""
        with self._lock:
            if self._etag is not None and self._etag != etag:
                if on_changed is not None:
                    on_changed()
                raise ObjectChangedError(f"{self.path} was replaced since it was last read; reopen it")
            self._etag = etag
            self._on_changed = on_changed

    def _get(self, start: int, end: int) -> bytes:
        kwargs: dict[str, Any] = {"Bucket": self._store.bucket, "Key": self._key, "Range": f"bytes={start}-{end - 1}"}
        etag = self._etag
        if etag:
            kwargs["IfMatch"] = etag
        try:
            resp = self._store._client.get_object(**kwargs)
            data = resp["Body"].read()
        except BOTO_ERRORS as exc:
            status = self._store._status(exc)
            if status == 412:
                if self._on_changed is not None:
                    self._on_changed()
                raise ObjectChangedError(f"{self.path} was replaced while being read; reopen it") from exc
            if status == 416 and self._size_given:
                raise TruncatedFileError(
                    self.path, f"the object is shorter than the {self._size} bytes its table's manifest records"
                ) from exc
            raise self._store._translate(exc, "read", self._key) from exc
        if etag is None:
            got = resp.get("ETag")
            with self._lock:
                if self._etag is None:
                    self._etag = got
                elif got != self._etag:
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

    def __enter__(self) -> S3RangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class S3OutputStream:
    """A write-only stream that becomes one S3 object when closed.

    Small objects are sent by a single PUT at close.  Once ``part_size`` bytes
    are buffered a multipart upload starts and full parts upload in the
    background (at most MAX_INFLIGHT_PARTS at once), so memory stays bounded.
    The object appears only when :meth:`close` completes; :meth:`abort` (or an
    exception inside ``with``) discards everything."""

    def __init__(self, store: S3ObjectStore, key: str, part_size: int = PART_SIZE) -> None:
        if part_size < 5 * 1024 * 1024:
            raise ValueError("S3 multipart parts must be at least 5 MiB")
        self._store = store
        self._key = key
        self._part_size = part_size
        self._buf = bytearray()
        self._pos = 0
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []
        self._inflight: deque[Future] = deque()
        self._closed = False
        self.path = f"s3://{store.bucket}/{key}"

    @property
    def closed(self) -> bool:
        """True once closed or aborted."""
        return self._closed

    def writable(self) -> bool:
        """Always True (the stream is write-only)."""
        return True

    def readable(self) -> bool:
        """Always False."""
        return False

    def seekable(self) -> bool:
        """Always False: S3 objects are written front to back."""
        return False

    def tell(self) -> int:
        """Bytes written so far."""
        return self._pos

    def flush(self) -> None:
        """No-op: bytes are sent in whole parts, and the rest at close."""

    def write(self, data: Any) -> int:
        """Buffer ``data`` (any bytes-like object); returns its length in bytes."""
        if self._closed:
            raise ValueError(f"write to closed S3 output {self.path}")
        n = memoryview(data).nbytes
        self._buf += data
        self._pos += n
        try:
            while len(self._buf) >= self._part_size:
                chunk = bytes(self._buf[: self._part_size])
                del self._buf[: self._part_size]
                self._send_part(chunk)
        except BaseException:
            self.abort()
            raise
        return n

    def _send_part(self, chunk: bytes) -> None:
        s = self._store
        if self._upload_id is None:
            try:
                resp = s._client.create_multipart_upload(Bucket=s.bucket, Key=self._key)
            except BOTO_ERRORS as exc:
                raise s._translate(exc, "start a multipart upload of", self._key) from exc
            self._upload_id = resp["UploadId"]
        number = len(self._parts) + len(self._inflight) + 1
        while len(self._inflight) >= MAX_INFLIGHT_PARTS:
            self._parts.append(self._inflight.popleft().result())
        self._inflight.append(s._submit(self._upload_part, number, chunk))

    def _upload_part(self, number: int, chunk: bytes) -> dict[str, Any]:
        s = self._store
        try:
            resp = s._client.upload_part(
                Bucket=s.bucket, Key=self._key, UploadId=self._upload_id, PartNumber=number, Body=chunk
            )
        except BOTO_ERRORS as exc:
            raise s._translate(exc, f"upload part {number} of", self._key) from exc
        return {"PartNumber": number, "ETag": resp["ETag"]}

    def close(self) -> None:
        """Send what is left and make the object visible (idempotent)."""
        if self._closed:
            return
        s = self._store
        try:
            if self._upload_id is None:
                s._put_key(self._key, bytes(self._buf))
            else:
                if self._buf:
                    self._send_part(bytes(self._buf))
                while self._inflight:
                    self._parts.append(self._inflight.popleft().result())
                parts = sorted(self._parts, key=lambda p: p["PartNumber"])
                try:
                    s._client.complete_multipart_upload(
                        Bucket=s.bucket, Key=self._key, UploadId=self._upload_id, MultipartUpload={"Parts": parts}
                    )
                except BOTO_ERRORS as exc:
                    raise s._translate(exc, "complete the multipart upload of", self._key) from exc
                self._upload_id = None
        except BaseException:
            self.abort()
            raise
        self._buf = bytearray()
        self._closed = True

    def abort(self) -> None:
        """Discard the object: nothing appears at the path."""
        self._closed = True
        self._buf = bytearray()
        for f in self._inflight:
            f.cancel()
        for f in self._inflight:
            if not f.cancelled():
                try:
                    f.result()
                except Exception:  # noqa: BLE001 - already failing; abort anyway
                    pass
        self._inflight.clear()
        upload_id, self._upload_id = self._upload_id, None
        if upload_id is not None:
            s = self._store
            try:
                s._client.abort_multipart_upload(Bucket=s.bucket, Key=self._key, UploadId=upload_id)
            except Exception as exc:  # noqa: BLE001 - a lifecycle rule must clean it up
                log.warning(
                    "could not abort the multipart upload of %s (%s); its parts linger until "
                    "a bucket lifecycle rule removes them",
                    self.path,
                    exc,
                )

    def __enter__(self) -> S3OutputStream:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self) -> None:
        # an unclosed stream never publishes its object; free the upload's parts
        if not getattr(self, "_closed", True) and getattr(self, "_upload_id", None) is not None:
            try:
                self.abort()
            except Exception:  # noqa: BLE001
                pass
