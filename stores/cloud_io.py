"""What the Google Cloud Storage and Azure Blob stores share: object keys under
a prefix, a thread pool for parallel GETs, the retry loop of a conditional
create that never turns an unknown outcome into a loss, a coalescing range
reader pinned to one version of an object, and an output stream that makes
its object appear whole on close.

A store built on :class:`CloudObjectStore` supplies five primitives (one
request each, every SDK error already translated to a typed store error):
``_get_range``, ``_create_once``, ``_upload``, and the URI and probe scope.
The SDK is imported by the store's own module, never here.

Conditional creates.  ``put_if_not_exists`` makes at most ``attempts``
requests, each with the SDK's own retries off: an SDK retry of a create whose
response was lost would be refused (the object is there: our own) and turn a
win into a reported loss.  A refusal after an attempt that may have landed is
AmbiguousStoreError, which the commit protocol settles by reading back.
"""

from __future__ import annotations

import builtins
import tempfile
from collections.abc import Callable
from typing import IO, Any, TypeVar

from tessera.format.table.store import OutputStream

from .backoff import backoff
from .bucket import BucketKeysAndPool, WriteOnlyOutput
from .errors import AlreadyExistsError, AmbiguousStoreError, StoreUnavailableError
from .ranges import PinnedRangeReader

T = TypeVar("T")
R = TypeVar("R")

#: an output stream keeps this much in memory, then spills to a temporary file
SPOOL_IN_MEMORY = 16 * 1024 * 1024


def not_sent(message: str) -> StoreUnavailableError:
    """The error of a request that never reached the store (connection refused,
    DNS, connect timeout): repeating it is safe, even for a conditional create
    (:meth:`CloudObjectStore.put_if_not_exists` does)."""
    err = StoreUnavailableError(message)
    err.sent = False  # type: ignore[attr-defined]
    return err


class CloudObjectStore(BucketKeysAndPool):
    """The shared half of an object store over one bucket (GCS) or container (Azure)."""

    #: one request costs a round trip: readers fetch ahead and in parallel
    remote = True
    #: the URI scheme this store's ``uri`` is written with
    scheme = ""

    def __init__(self, bucket: str, prefix: str, max_concurrency: int = 8) -> None:
        self.bucket, self.prefix = bucket, prefix
        self.uri = f"{self.scheme}://{bucket}/{prefix}" if prefix else f"{self.scheme}://{bucket}"
        self._init_pool(max_concurrency, f"tessera-{self.scheme}")

    def _where(self, key: str) -> str:
        return f"{self.scheme}://{self.bucket}/{key}"

    # -- primitives of a concrete store ---------------------------------------

    def _get_range(self, key: str, start: int, end: int, version: str | None) -> tuple[bytes, str | None]:
        """Bytes ``[start, end)`` of ``key`` and the version (GCS generation,
        Azure ETag) that answered; with ``version``, only from that version
        (ObjectChangedError otherwise).  A range past the end gives fewer bytes."""
        raise NotImplementedError

    def _create_once(self, key: str, data: bytes) -> None:
        """One conditional create, the SDK's retries off: AlreadyExistsError when
        refused, AmbiguousStoreError when it may have landed, :func:`not_sent`'s
        StoreUnavailableError when it surely did not."""
        raise NotImplementedError

    def _upload(self, key: str, stream: IO[bytes], length: int) -> None:
        """Replace ``key`` with ``length`` bytes read from ``stream``."""
        raise NotImplementedError

    # -- shared behaviour ----------------------------------------------------

    def put_if_not_exists(self, path: str, data: bytes, *, attempts: int = 4) -> None:
        """Create ``path`` only if absent.

        Raises AlreadyExistsError when another object is there (ours was not
        applied); AmbiguousStoreError when a timeout, reset or 5xx left the
        outcome unknown and a retry could not settle it (the caller must read
        the object back); StoreUnavailableError when nothing was sent."""
        key, body = self._key(path), bytes(data)
        uncertain: BaseException | None = None
        last: StoreUnavailableError | None = None
        for attempt in range(max(1, attempts)):
            if attempt:
                backoff(attempt, first=0.05, cap=2.0)
            try:
                self._create_once(key, body)
                return
            except AlreadyExistsError as exc:
                if uncertain is None:
                    raise
                raise AmbiguousStoreError(
                    f"creating {self._where(key)}: an earlier attempt failed ({uncertain}) and the object now "
                    f"exists; it may be ours or another writer's, read it back to decide"
                ) from exc
            except AmbiguousStoreError as exc:
                uncertain = exc
            except StoreUnavailableError as exc:
                if getattr(exc, "sent", True):
                    raise  # a definite refusal (access denied, ...)
                last = exc
        if uncertain is not None:
            raise AmbiguousStoreError(
                f"creating {self._where(key)}: outcome unknown after {attempts} attempts ({uncertain}); "
                f"read it back to decide"
            ) from uncertain
        assert last is not None
        raise last

    def copy_if_not_exists(self, src: str, dst: str) -> None:
        """Copy ``src`` to ``dst`` only if ``dst`` is absent (AlreadyExistsError
        otherwise): a GET and the conditional create the probe verifies.  Meant
        for small objects such as manifests (the object passes through memory)."""
        self.put_if_not_exists(dst, self.read(src))

    def read(self, path: str) -> bytes:  # pragma: no cover - overridden
        raise NotImplementedError

    def open_output(self, path: str) -> OutputStream:
        """A writable stream; the object appears (whole) when it is closed, never
        when it is aborted.  Up to SPOOL_IN_MEMORY bytes are kept in memory, the
        rest in a temporary file, and the object is uploaded at close (the SDK
        splits a large one into blocks or a resumable upload)."""
        key = self._key(path)
        return SpooledOutputStream(self._where(key), lambda stream, n: self._upload(key, stream, n))

    def list(self, prefix: str) -> builtins.list[str]:  # pragma: no cover - overridden
        raise NotImplementedError


class BlobRangeReader(PinnedRangeReader):
    """A :class:`format.io.RangeReader` over one object of a :class:`CloudObjectStore`,
    pinned to its version (GCS generation, Azure ETag;
    :class:`stores.ranges.PinnedRangeReader`): the size and version come from
    the metadata read when it is opened, or the size from the caller
    (``size_given``, what a manifest records) and the version from the first
    GET answered.  The GET itself is the store's ``_get_range``."""

    def __init__(
        self, store: CloudObjectStore, key: str, size: int, version: str | None, *, size_given: bool = False
    ) -> None:
        super().__init__(store, key, store._where(key), size, version, size_given=size_given)
        self._cloud = store

    def cache_key(self) -> tuple[str, ...]:
        """Who this object is (store, path, size): readers of the same object share
        what they parse of it, pinned to its version (:meth:`expect_etag`)."""
        return (self._cloud.scheme, self._cloud.uri, self.path, str(self._size))

    def _fetch(self, start: int, end: int, version: str | None) -> tuple[bytes, str | None]:
        return self._cloud._get_range(self._key, start, end, version)


class SpooledOutputStream(WriteOnlyOutput):
    """A write-only stream that becomes one object when closed: bytes are kept
    in memory up to SPOOL_IN_MEMORY, then in a temporary file, and uploaded by
    ``upload(stream, length)`` at :meth:`close`.  :meth:`abort` (or an
    exception inside ``with``) discards everything: nothing is ever sent."""

    def __init__(self, path: str, upload: Callable[[IO[bytes], int], None]) -> None:
        self.path = path
        self._upload = upload
        self._spool: Any = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)  # noqa: SIM115
        self._pos = 0
        self._closed = False

    def flush(self) -> None:
        """No-op: the object is sent at close."""

    def write(self, data: Any) -> int:
        """Buffer ``data`` (any bytes-like object); returns its length in bytes."""
        if self._closed:
            raise ValueError(f"write to closed output {self.path}")
        view = memoryview(data).cast("B")
        self._spool.write(view)
        self._pos += view.nbytes
        return view.nbytes

    def close(self) -> None:
        """Upload the object and make it visible (idempotent)."""
        if self._closed:
            return
        try:
            self._spool.seek(0)
            self._upload(self._spool, self._pos)
        finally:
            self._closed = True
            self._spool.close()

    def abort(self) -> None:
        """Discard the object: nothing appears at the path."""
        if not self._closed:
            self._closed = True
            self._spool.close()
