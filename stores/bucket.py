"""What every bucket-backed object store (S3, Google Cloud Storage, Azure
Blob) does the same way: object keys under a prefix of one bucket or
container, and a lazily started thread pool for parallel requests."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Self, TypeVar

from .errors import BucketNotFoundError, InvalidURIError

T = TypeVar("T")
R = TypeVar("R")


class BucketKeysAndPool:
    """Keys under ``prefix`` (``_key``, ``_dir``, ``_relative``) and the worker
    pool (``_submit``, ``_map``, ``close``); a store sets ``bucket``, ``prefix``
    and ``uri`` and calls :meth:`_init_pool` in its ``__init__``."""

    bucket: str
    prefix: str
    uri: str
    endpoint_url: str

    def _no_bucket(self) -> BucketNotFoundError:
        return BucketNotFoundError(
            f"bucket {self.bucket!r} does not exist at {self.endpoint_url}; create it or fix the table URI"
        )

    def _init_pool(self, max_concurrency: int, thread_name_prefix: str) -> None:
        self.max_concurrency = max(1, max_concurrency)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._thread_name_prefix = thread_name_prefix

    # -- keys ---------------------------------------------------------------

    def _key(self, path: str, *, allow_root: bool = False) -> str:
        if not isinstance(path, str):
            raise InvalidURIError(f"object path must be a string, got {type(path).__name__}")
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if ".." in parts or path.startswith("/"):
            raise InvalidURIError(f"path {path!r} escapes the store root {self.uri}")
        if not parts and not allow_root:
            raise InvalidURIError(f"empty object path under {self.uri}")
        return "/".join(([self.prefix] if self.prefix else []) + parts)

    def _dir(self, prefix: str) -> str:
        key = self._key(prefix, allow_root=True)
        return key + "/" if key else ""

    def _relative(self, key: str) -> str:
        return key[len(self.prefix) + 1 :] if self.prefix else key

    # -- thread pool ----------------------------------------------------------

    def _submit(self, fn: Callable[..., R], *args: Any) -> Future[R]:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.max_concurrency, thread_name_prefix=self._thread_name_prefix)
            return self._pool.submit(fn, *args)

    def _map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """``fn`` over ``items`` in parallel (inline for a single item); the first error is raised."""
        items = list(items)
        if len(items) <= 1:
            return [fn(i) for i in items]
        futures = [self._submit(fn, i) for i in items]
        try:
            return [f.result() for f in futures]
        finally:
            for f in futures:
                f.cancel()

    def close(self) -> None:
        """Stop the store's worker threads (the cached client stays usable)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


class WriteOnlyOutput:
    """The file-like answers of an output stream that becomes one object when
    closed (:class:`stores.s3_io.S3OutputStream`,
    :class:`stores.cloud_io.SpooledOutputStream`); the stream keeps ``_closed``
    and ``_pos`` (bytes written) and supplies ``close`` (publish the object)
    and ``abort`` (discard it, what an exception inside ``with`` does)."""

    _closed: bool
    _pos: int

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
        """Always False: objects are written front to back."""
        return False

    def tell(self) -> int:
        """Bytes written so far."""
        return self._pos

    def close(self) -> None:  # pragma: no cover - supplied by the stream
        raise NotImplementedError

    def abort(self) -> None:  # pragma: no cover - supplied by the stream
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
