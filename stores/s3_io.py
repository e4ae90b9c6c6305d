"""Streaming I/O against S3: a coalescing, parallel range reader and a
multipart output stream.

Both are created by :class:`stores.s3.S3ObjectStore` (``open_reader`` and
``open_output``) and share its botocore client and thread pool.
"""

from __future__ import annotations

import logging
from collections import deque
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import botocore.exceptions as bexc

from tessera.format.errors import TruncatedFileError

from .bucket import WriteOnlyOutput
from .errors import ObjectChangedError
from .ranges import PinnedRangeReader
from .ranges import plan_requests as plan_requests  # what tests import from here

if TYPE_CHECKING:
    from .s3 import S3ObjectStore

log = logging.getLogger(__name__)

#: what botocore raises; anything else is a bug and propagates untouched
BOTO_ERRORS = (bexc.BotoCoreError, bexc.ClientError)

#: multipart part size (S3 needs >= 5 MiB for every part but the last)
PART_SIZE = 16 * 1024 * 1024
#: parts uploading in the background at once; memory stays below (this + 1) parts
MAX_INFLIGHT_PARTS = 2


class S3RangeReader(PinnedRangeReader):
    """A :class:`format.io.RangeReader` over one S3 object, pinned to its ETag
    (:class:`stores.ranges.PinnedRangeReader`): the size and ETag come from one
    HEAD when the reader is opened, or the size from the caller
    (``size_given``) and the ETag from the first GET answered."""

    def __init__(
        self, store: S3ObjectStore, key: str, size: int, etag: str | None, *, size_given: bool = False
    ) -> None:
        super().__init__(store, key, f"s3://{store.bucket}/{key}", size, etag, size_given=size_given)
        self._s3 = store

    def cache_key(self) -> tuple:
        """Who this object is (endpoint, path, size): readers of the same object
        share what they parse of it, pinned to its ETag (:meth:`expect_etag`)."""
        return ("s3", self._s3.endpoint_url, self.path, self._size)

    def _fetch(self, start: int, end: int, version: str | None) -> tuple[bytes, str | None]:
        kwargs: dict[str, Any] = {"Bucket": self._s3.bucket, "Key": self._key, "Range": f"bytes={start}-{end - 1}"}
        if version:
            kwargs["IfMatch"] = version
        try:
            resp = self._s3._client.get_object(**kwargs)
            data = resp["Body"].read()
        except BOTO_ERRORS as exc:
            status = self._s3._status(exc)
            if status == 412:
                raise ObjectChangedError(f"{self.path} was replaced while being read; reopen it") from exc
            if status == 416 and self._size_given:
                raise TruncatedFileError(
                    self.path, f"the object is shorter than the {self._size} bytes its table's manifest records"
                ) from exc
            raise self._s3._translate(exc, "read", self._key) from exc
        return data, resp.get("ETag")


class S3OutputStream(WriteOnlyOutput):
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

    def __del__(self) -> None:
        # an unclosed stream never publishes its object; free the upload's parts
        if not getattr(self, "_closed", True) and getattr(self, "_upload_id", None) is not None:
            try:
                self.abort()
            except Exception:  # noqa: BLE001
                pass
