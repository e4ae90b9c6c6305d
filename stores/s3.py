"""Amazon S3 (and S3-compatible) object store for ``s3://bucket/prefix`` tables.

``put_if_not_exists`` is a PUT with ``If-None-Match: *``: S3 decides which of
several concurrent creators wins, atomically.  botocore never retries that
request: an SDK-level retry of a create whose response was lost would come
back 412 on the writer's *own* object and turn a win into a reported loss.
The process's one client per set of options carries a ``needs-retry``
handler that takes a conditional create's failed attempt out of botocore's
retry loop (:func:`_one_attempt_for_conditional_creates`); Tessera retries it
itself and reports AmbiguousStoreError whenever an earlier attempt may have
landed.

Not every S3-compatible store honours ``If-None-Match``; run
:func:`stores.probe.probe_conditional_put` before trusting one.

Clients are made once per process per set of options (endpoint, region,
credentials, timeouts; botocore clients are thread-safe), from the process's
botocore session (:func:`stores.s3_options.aws_session`), so opening many
tables on one endpoint shares connection pools and a new ``Table.open`` builds
nothing.  Credentials not given in ``storage_options`` are resolved by
botocore once per process and profile.  botocore is imported when the first
S3 table is opened (this module is imported lazily by
:func:`stores.registry.open_object_store`), boto3 only for a server-side
copy of an object over 5 GiB.

Timeouts.  The ``io_timeout`` storage option (alias ``read_timeout``;
botocore's 60 s when not given) is botocore's ``read_timeout``: every wait for
S3's reply, or for the next chunk of a body, gives up after it;
``connect_timeout`` bounds opening a connection.  A request that times out
is StoreUnavailableError for a read (and for the other requests, which may be
repeated safely) and AmbiguousStoreError for a conditional create.  The bound
a caller sees, for a server that stops answering:

* reads, listings, plain PUTs, copies and deletes are retried by botocore
  (standard mode, ``max_retries`` retries, default 2): at most
  ``(max_retries + 1) * (connect_timeout + io_timeout)`` plus botocore's
  backoff (at most 1 s before the first retry, 2 s before the second ...;
  recent botocore waits 50 ms, 100 ms ... after a timeout);
  ``max_retries=0`` gives one attempt.  A stall in the middle of a body is
  not retried.
* ``put_if_not_exists`` is never retried by botocore and makes at
  most ``attempts`` (4) requests itself, each bounded by ``io_timeout``
  (+ ``connect_timeout``), with a backoff under 0.15, 0.3, 0.6 s; it stops at
  the first definite answer, so a single lost reply costs one ``io_timeout``.

A PUT with a body (``put``, ``put_if_not_exists``, parts) may first wait up to
1 s more: botocore sends ``Expect: 100-continue`` and waits that long for the
server's go-ahead before sending the body anyway.
"""

from __future__ import annotations

import builtins
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import botocore.exceptions as bexc
from botocore.config import Config

from tessera.format.file.io import RangeReader
from tessera.format.table.store import OutputStream

from .backoff import backoff
from .bucket import BucketKeysAndPool
from .errors import (
    AlreadyExistsError,
    AmbiguousStoreError,
    ConditionalWriteUnsupportedError,
    InvalidStorageOptionError,
    InvalidURIError,
    ObjectNotFoundError,
    StoreError,
    StoreUnavailableError,
)
from .s3_io import BOTO_ERRORS, PART_SIZE, S3OutputStream, S3RangeReader
from .s3_options import S3Options, aws_session
from .uri import TableURI, parse_table_uri

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

_CONDITION_FAILED = {"PreconditionFailed", "ConditionalRequestConflict"}
_ACCESS = {
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
    "AllAccessDisabled",
    "AccountProblem",
}
_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}

_lock = threading.Lock()
_clients: dict[S3Options, Any] = {}


class _OneAttempt(Exception):
    """A conditional create's failed attempt, carried out of botocore's retry
    loop: the botocore exception it met, or the error response it got."""

    def __init__(self, response: Any, exception: BaseException | None) -> None:
        super().__init__("a conditional create is not retried by botocore")
        self.response, self.exception = response, exception

    def error(self) -> BaseException:
        """What botocore raises for that attempt when it does not retry."""
        if self.exception is not None:
            return self.exception
        _, parsed = self.response
        return bexc.ClientError(parsed, "PutObject")


def _one_attempt_for_conditional_creates(request_dict: Any, response: Any, caught_exception: Any, **_: Any) -> None:
    """botocore's ``needs-retry`` event of a PutObject, seen before its retry
    handler: a create with ``If-None-Match: *`` that failed leaves the retry
    loop as :class:`_OneAttempt` (its caller decides what a retry means);
    every other request is left to botocore's retries."""
    if (request_dict.get("headers") or {}).get("If-None-Match") != "*":
        return
    if caught_exception is not None:
        raise _OneAttempt(None, caught_exception)
    if response is not None and response[0].status_code >= 300:
        raise _OneAttempt(response, None)


def _client_for(opts: S3Options) -> Any:
    """The process's S3 client for ``opts`` (made once, then shared: botocore
    clients are thread-safe; a conditional create is never retried by it)."""
    with _lock:
        client = _clients.get(opts)
        if client is not None:
            return client
        retries: dict[str, Any] = {"mode": "standard"}
        if opts.max_retries is not None:
            retries["max_attempts"] = opts.max_retries
        cfg: dict[str, Any] = {
            "retries": retries,
            "max_pool_connections": opts.max_pool_connections,
            "user_agent_extra": "tessera",
        }
        if opts.connect_timeout is not None:
            cfg["connect_timeout"] = opts.connect_timeout
        if opts.read_timeout is not None:
            cfg["read_timeout"] = opts.read_timeout
        if opts.addressing_style is not None:
            cfg["s3"] = {"addressing_style": opts.addressing_style}
        try:
            client = aws_session(opts.profile).create_client(
                "s3",
                region_name=opts.region,
                endpoint_url=opts.endpoint_url,
                aws_access_key_id=opts.access_key_id,
                aws_secret_access_key=opts.secret_access_key,
                aws_session_token=opts.session_token,
                config=Config(**cfg),
            )
        except bexc.ProfileNotFound as exc:
            raise StoreUnavailableError(f"AWS profile {opts.profile!r} is not configured: {exc}") from exc
        except (bexc.InvalidRegionError, ValueError) as exc:
            raise InvalidStorageOptionError(f"cannot configure an S3 client from these storage options: {exc}") from exc
        client.meta.events.register_first(
            "needs-retry.s3.PutObject", _one_attempt_for_conditional_creates, unique_id="tessera-conditional-create"
        )
        if len(_clients) >= 64:
            _clients.pop(next(iter(_clients)))
        _clients[opts] = client
        return client


class S3ObjectStore(BucketKeysAndPool):
    """Objects under ``s3://bucket/prefix``; paths are relative to the prefix."""

    #: one request costs a round trip: readers fetch ahead and in parallel
    remote = True

    def __init__(
        self,
        uri: str | TableURI,
        storage_options: Mapping[str, Any] | None = None,
        *,
        max_concurrency: int = 8,
        part_size: int = PART_SIZE,
    ) -> None:
        """``max_concurrency`` bounds the parallel GETs of a read and the
        background part uploads; ``part_size`` is the multipart part size."""
        loc = uri if isinstance(uri, TableURI) else parse_table_uri(uri)
        if loc.scheme != "s3":
            raise InvalidURIError(f"{loc.given!r} is not an s3:// URI")
        self.bucket, self.prefix = loc.bucket, loc.path
        self.uri = f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        self.options = S3Options.from_mapping(storage_options)
        self._client = _client_for(self.options)
        self.endpoint_url: str = self._client.meta.endpoint_url
        self._init_pool(max_concurrency, "tessera-s3")
        self.part_size = part_size
        #: keys per LIST page (None: the server's default, 1000 on S3)
        self.list_page_size: int | None = None

    def __repr__(self) -> str:
        return f"S3ObjectStore({self.uri!r}, endpoint={self.endpoint_url!r})"

    @property
    def probe_scope(self) -> tuple[str, str]:
        """(endpoint, bucket): the scope a conditional-put probe verdict holds for."""
        return (self.endpoint_url, self.bucket)

    # -- errors -------------------------------------------------------------

    @staticmethod
    def _status(exc: BaseException) -> int | None:
        if isinstance(exc, bexc.ClientError):
            return exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return None

    @staticmethod
    def _code(exc: BaseException) -> str:
        if isinstance(exc, bexc.ClientError):
            return str(exc.response.get("Error", {}).get("Code", ""))
        return ""

    def _translate(self, exc: BaseException, what: str, key: str, *, write: bool = False) -> StoreError:
        """The typed store error for a botocore failure while doing ``what`` to ``key``.

        ``write`` marks a non-idempotent write: a failure after the request may
        have been applied becomes AmbiguousStoreError."""
        where = f"s3://{self.bucket}/{key}"
        if isinstance(exc, StoreError):
            return exc
        code, status = self._code(exc), self._status(exc)
        if isinstance(exc, bexc.ClientError):
            msg = exc.response.get("Error", {}).get("Message", "")
            if code == "NoSuchBucket":
                return self._no_bucket()
            if code in _NOT_FOUND:
                return ObjectNotFoundError(f"{where} does not exist")
            if code in _ACCESS or status == 403:
                return StoreUnavailableError(
                    f"access to {where} was denied ({code}: {msg}); check the credentials and the bucket policy"
                )
            if status is not None and (status >= 500 or code in ("SlowDown", "RequestTimeout")):
                cls = AmbiguousStoreError if write else StoreUnavailableError
                return cls(f"cannot {what} {where}: S3 answered {status} {code} ({msg})")
            return StoreError(f"cannot {what} {where}: S3 answered {status} {code}: {msg}")
        if isinstance(exc, (bexc.NoCredentialsError, bexc.PartialCredentialsError)):
            return StoreUnavailableError(
                f"no usable AWS credentials for {where}: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, "
                f"or aws_access_key_id/aws_secret_access_key in storage_options ({exc})"
            )
        if isinstance(exc, bexc.ConnectionError):  # never sent: refused, DNS, connect timeout, TLS
            return StoreUnavailableError(f"cannot reach {self.endpoint_url} to {what} {where}: {exc}")
        if isinstance(exc, (bexc.HTTPClientError, bexc.IncompleteReadError)):  # sent, answer lost
            cls = AmbiguousStoreError if write else StoreUnavailableError
            return cls(f"lost the response while trying to {what} {where}: {exc}")
        return StoreUnavailableError(f"cannot {what} {where}: {exc}")

    def _missing(self, key: str) -> StoreError:
        """HEAD gives a bare 404 for a missing bucket too: tell the two apart."""
        try:
            self._client.head_bucket(Bucket=self.bucket)
        except bexc.ClientError as bucket_exc:
            if self._status(bucket_exc) == 404:
                return self._no_bucket()
        except BOTO_ERRORS:  # report the original miss
            pass
        return ObjectNotFoundError(f"s3://{self.bucket}/{key} does not exist")

    # -- reads --------------------------------------------------------------

    def read(self, path: str) -> bytes:
        """The whole object."""
        key = self._key(path)
        try:
            return self._client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except BOTO_ERRORS as exc:
            raise self._translate(exc, "read", key) from exc

    def read_tail(self, path: str, length: int) -> tuple[bytes, int]:
        """The last ``length`` bytes and the object's size: one ranged GET."""
        key = self._key(path)
        try:
            resp = self._client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes=-{max(1, int(length))}")
            body = resp["Body"].read()
        except BOTO_ERRORS as exc:
            if self._status(exc) == 416:  # an empty object has no last byte
                return b"", 0
            raise self._translate(exc, "read", key) from exc
        total = str(resp.get("ContentRange") or "").rpartition("/")[2]
        return body, int(total) if total.isdigit() else len(body)

    def _head(self, key: str) -> dict[str, Any]:
        try:
            return self._client.head_object(Bucket=self.bucket, Key=key)
        except BOTO_ERRORS as exc:
            if self._status(exc) == 404:
                raise self._missing(key) from exc
            raise self._translate(exc, "inspect", key) from exc

    def size(self, path: str) -> int:
        """Object size in bytes (one HEAD)."""
        return int(self._head(self._key(path))["ContentLength"])

    def exists(self, path: str) -> bool:
        """True if the object exists (one HEAD; a missing bucket reads as False)."""
        key = self._key(path)
        try:
            self._client.head_object(Bucket=self.bucket, Key=key)
            return True
        except BOTO_ERRORS as exc:
            if self._status(exc) == 404:
                return False
            raise self._translate(exc, "inspect", key) from exc

    def open_reader(self, path: str, size: int | None = None) -> RangeReader:
        """A range reader doing coalesced, parallel ranged GETs. Its size and
        ETag come from one HEAD; given the ``size`` (a manifest records its data
        files' sizes) no HEAD is sent, and the ETag of the first GET answered
        guards the later ones."""
        key = self._key(path)
        if size is not None and size > 0:
            return S3RangeReader(self, key, size, None, size_given=True)
        head = self._head(key)
        return S3RangeReader(self, key, int(head["ContentLength"]), head.get("ETag"))

    def _pages(self, **kwargs: Any) -> Iterable[dict[str, Any]]:
        paginator = self._client.get_paginator("list_objects_v2")
        if self.list_page_size:
            kwargs["PaginationConfig"] = {"PageSize": self.list_page_size}
        try:
            yield from paginator.paginate(Bucket=self.bucket, **kwargs)
        except BOTO_ERRORS as exc:
            raise self._translate(exc, "list", kwargs.get("Prefix", "")) from exc

    def list(self, prefix: str) -> list[str]:
        """Names (not paths) of the objects directly under ``prefix/``."""
        base = self._dir(prefix)
        names = []
        for page in self._pages(Prefix=base, Delimiter="/"):
            for obj in page.get("Contents", []):
                name = obj["Key"][len(base) :]
                if name:
                    names.append(name)
        return names

    def walk(self, prefix: str) -> builtins.list[tuple[str, int, float]]:  # `list` is the method here
        """Every object under ``prefix/`` as (path relative to the root, size, mtime)."""
        base = self._dir(prefix)
        out = []
        for page in self._pages(Prefix=base):
            for obj in page.get("Contents", []):
                if obj["Key"].endswith("/"):
                    continue  # a console "folder" marker, not an object of ours
                out.append((self._relative(obj["Key"]), int(obj["Size"]), obj["LastModified"].timestamp()))
        return out

    # -- writes -------------------------------------------------------------

    def _put_key(self, key: str, data: bytes) -> None:
        try:
            self._client.put_object(Bucket=self.bucket, Key=key, Body=data)
        except BOTO_ERRORS as exc:
            raise self._translate(exc, "write", key) from exc

    def put(self, path: str, data: bytes) -> None:
        """Write ``data``, replacing any object at ``path`` (a single PUT is atomic)."""
        self._put_key(self._key(path), bytes(data))

    def put_if_not_exists(self, path: str, data: bytes, *, attempts: int = 4) -> None:
        """Create ``path`` only if absent (``If-None-Match: *``).

        Raises AlreadyExistsError when another object is there (412) or another
        conditional write to it is in flight (409): in both cases ours was not
        applied.  Raises ConditionalWriteUnsupportedError (and makes the
        process distrust any recorded probe verdict for this bucket, see
        :mod:`stores.probe`) when the store answers that it does not implement
        the condition.  Raises AmbiguousStoreError when a timeout, reset or 5xx left
        the outcome unknown and a retry could not settle it; the caller must
        read the object back.  StoreUnavailableError means nothing was sent."""
        key, body = self._key(path), bytes(data)
        uncertain: BaseException | None = None
        last: BaseException | None = None
        for attempt in range(max(1, attempts)):
            if attempt:
                backoff(attempt, first=0.05, cap=2.0)
            try:
                try:
                    self._client.put_object(Bucket=self.bucket, Key=key, Body=body, IfNoneMatch="*")
                    return
                except _OneAttempt as once:
                    raise once.error() from None
            except BOTO_ERRORS as exc:
                if self._condition_unsupported(exc):
                    from .probe import distrust

                    msg = (
                        f"{self!r} does not support If-None-Match on PUT (it answered {self._status(exc)} "
                        f"{self._code(exc)} creating s3://{self.bucket}/{key}): it cannot decide commits; nothing "
                        "was written. Use a store that honours conditional writes, or an external manifest store"
                    )
                    distrust(self, msg)
                    raise ConditionalWriteUnsupportedError(msg) from exc
                if self._code(exc) in _CONDITION_FAILED or self._status(exc) in (409, 412):
                    if uncertain is None:
                        raise AlreadyExistsError(f"s3://{self.bucket}/{key} already exists") from exc
                    raise AmbiguousStoreError(
                        f"creating s3://{self.bucket}/{key}: an earlier attempt failed ({uncertain}) and the object "
                        f"now exists; it may be ours or another writer's, read it back to decide"
                    ) from exc
                err = self._translate(exc, "create", key, write=True)
                if isinstance(err, AmbiguousStoreError):
                    uncertain = exc  # sent, answer lost or 5xx: it may have been applied
                elif isinstance(exc, bexc.ConnectionError):
                    last = exc  # never sent (refused, DNS, connect timeout): safe to retry
                else:
                    raise err from exc  # a definite refusal: missing bucket, access denied, ...
                log.debug("create of s3://%s/%s failed (attempt %d): %s", self.bucket, key, attempt + 1, exc)
        if uncertain is not None:
            raise AmbiguousStoreError(
                f"creating s3://{self.bucket}/{key}: outcome unknown after {attempts} attempts ({uncertain}); "
                f"read it back to decide"
            ) from uncertain
        assert last is not None
        raise self._translate(last, "create", key) from last

    def _condition_unsupported(self, exc: BaseException) -> bool:
        """An answer saying the store does not implement ``If-None-Match`` on
        PUT (S3 before August 2024: 501 NotImplemented, "a header you provided
        implies functionality that is not implemented")."""
        if not isinstance(exc, bexc.ClientError):
            return False
        msg = str(exc.response.get("Error", {}).get("Message", "")).lower()
        return (
            self._status(exc) == 501
            or self._code(exc) == "NotImplemented"
            or (self._status(exc) == 400 and "if-none-match" in msg)
        )

    def copy(self, src: str, dst: str) -> None:
        """Server-side copy of ``src`` to ``dst``, replacing ``dst``."""
        skey, dkey = self._key(src), self._key(dst)
        source = {"Bucket": self.bucket, "Key": skey}
        try:
            self._client.copy_object(Bucket=self.bucket, Key=dkey, CopySource=source)
        except bexc.ClientError as exc:
            if self._code(exc) == "InvalidRequest" and "larger than" in str(exc):  # > 5 GiB: multipart copy
                try:
                    # boto3's managed (multipart) copy, imported only here: the one use of boto3
                    from boto3.s3.inject import copy as managed_copy

                    managed_copy(self._client, source, self.bucket, dkey)
                    return
                except BOTO_ERRORS as exc2:
                    raise self._translate(exc2, "copy to", dkey) from exc2
            raise self._translate(exc, f"copy s3://{self.bucket}/{skey} to", dkey) from exc
        except BOTO_ERRORS as exc:
            raise self._translate(exc, f"copy s3://{self.bucket}/{skey} to", dkey) from exc

    def copy_if_not_exists(self, src: str, dst: str) -> None:
        """Copy ``src`` to ``dst`` only if ``dst`` is absent (AlreadyExistsError otherwise).

        Done as GET + conditional PUT, not ``CopyObject If-None-Match``: that
        condition is ignored by moto and by several S3-compatible stores, and
        only the conditional PUT is what the probe verifies.  Meant for small
        objects such as manifests (the object passes through memory)."""
        self.put_if_not_exists(dst, self.read(src))

    def open_output(self, path: str) -> OutputStream:
        """A writable stream; the object appears (whole) when it is closed.
        Objects of ``part_size`` or more go up as a multipart upload."""
        return S3OutputStream(self, self._key(path), self.part_size)

    def delete(self, path: str) -> None:
        """Remove the object (no error if it is already gone)."""
        key = self._key(path)
        try:
            self._client.delete_object(Bucket=self.bucket, Key=key)
        except BOTO_ERRORS as exc:
            if self._code(exc) in _NOT_FOUND:
                return
            raise self._translate(exc, "delete", key) from exc
