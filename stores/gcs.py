"""Google Cloud Storage object store for ``gs://bucket/prefix`` tables, through
google-cloud-storage (the ``gcs`` extra: ``pip install tessera[gcs]``).

``put_if_not_exists`` is an upload with ``ifGenerationMatch=0``: GCS creates
the object only if no live generation exists, atomically, and answers 412 to
every other creator.  The upload is sent with the SDK's retries off (its
default policy retries exactly these conditional uploads, and a retry of a
create whose response was lost would be refused on our own object);
:class:`stores.cloud_io.CloudObjectStore` retries it itself and reports
AmbiguousStoreError whenever an earlier attempt may have landed.

Reads pin the object's generation: a range reader's GETs ask for the
generation first seen (``generation=``; in a bucket without versioning a
replaced generation is gone, 404), so a replaced object is
ObjectChangedError, never a mix of two versions.

The SDK (google-cloud-storage, google-auth, requests) is imported when the
first ``gs://`` table is opened: this module is imported lazily by
:func:`stores.registry.open_object_store`.  One client is made per process
per set of options and shared.  Settings: :mod:`stores.cloud_options`.

Timeouts: every request waits at most ``connect_timeout`` to connect and
``io_timeout`` for each reply (60 s each when not given); idempotent requests
are retried by the SDK (exponential backoff, for at most
``(max_retries + 1) * (connect_timeout + io_timeout)`` when ``max_retries``
is given; ``max_retries=0`` turns the SDK's retries off).
"""

from __future__ import annotations

import builtins
import json
import logging
import threading
from collections.abc import Mapping
from typing import IO, Any

import requests
from google.api_core import exceptions as gexc
from google.api_core.retry import Retry
from google.auth import exceptions as auth_exc
from google.cloud import storage  # type: ignore[import-untyped]
from google.cloud.storage.retry import DEFAULT_RETRY  # type: ignore[import-untyped]

from tessera.format.file.io import RangeReader

from .cloud_io import BlobRangeReader, CloudObjectStore, not_sent
from .cloud_options import GCSOptions
from .errors import (
    AlreadyExistsError,
    AmbiguousStoreError,
    InvalidStorageOptionError,
    InvalidURIError,
    ObjectChangedError,
    ObjectNotFoundError,
    StoreError,
    StoreUnavailableError,
)
from .uri import TableURI, parse_table_uri

log = logging.getLogger(__name__)

PUBLIC_ENDPOINT = "https://storage.googleapis.com"
#: what the SDK and its transport raise; anything else is a bug and propagates untouched
SDK_ERRORS = (gexc.GoogleAPIError, auth_exc.GoogleAuthError, requests.RequestException, OSError)

_lock = threading.Lock()
_clients: dict[GCSOptions, tuple[storage.Client, str]] = {}


def _client_for(opts: GCSOptions) -> tuple[storage.Client, str]:
    """The process's client for ``opts`` and the endpoint it talks to (made
    once, then shared).

    A service-account key with ``"disable_oauth": true`` means no credentials
    and its ``"gcs_base_url"`` the endpoint: the Rust ``object_store``'s (and
    so pylance's) way of naming an emulator, honoured so the same
    ``storage_options`` open the table in both."""
    with _lock:
        cached = _clients.get(opts)
        if cached is not None:
            return cached
        creds: Any = None
        project, endpoint = opts.project, opts.endpoint_url
        try:
            info: dict[str, Any] | None = None
            if opts.service_account_key:
                info = json.loads(opts.service_account_key)
            elif opts.service_account:
                with open(opts.service_account) as fh:
                    info = json.load(fh)
            if info is not None and not isinstance(info, dict):
                raise ValueError("a service-account key is a JSON object")
            if info is not None:
                endpoint = endpoint or info.get("gcs_base_url")
            if opts.skip_signature or (info is not None and info.get("disable_oauth")):
                from google.auth.credentials import AnonymousCredentials

                creds, project = AnonymousCredentials(), project or "<none>"
            elif info is not None:
                from google.oauth2 import service_account

                scopes = ["https://www.googleapis.com/auth/devstorage.read_write"]
                creds = service_account.Credentials.from_service_account_info(info, scopes=scopes)
                project = project or creds.project_id
            client_options = {"api_endpoint": endpoint} if endpoint else None
            client = storage.Client(project=project, credentials=creds, client_options=client_options)
        except (ValueError, OSError, KeyError) as exc:
            raise InvalidStorageOptionError(f"unusable GCS service account in storage_options: {exc}") from exc
        except auth_exc.DefaultCredentialsError as exc:
            raise StoreUnavailableError(
                f"no usable Google credentials: set GOOGLE_APPLICATION_CREDENTIALS, run `gcloud auth "
                f"application-default login`, or give service_account in storage_options ({exc})"
            ) from exc
        if len(_clients) >= 64:
            _clients.pop(next(iter(_clients)))
        _clients[opts] = (client, str(endpoint or PUBLIC_ENDPOINT).rstrip("/"))
        return _clients[opts]


def _not_sent(exc: BaseException) -> bool:
    """The request never left (refused, DNS, connect timeout): safe to repeat."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    if isinstance(exc, requests.ConnectionError):
        text = repr(exc)
        return any(s in text for s in ("NewConnectionError", "NameResolutionError", "Failed to resolve"))
    return False


class GCSObjectStore(CloudObjectStore):
    """Objects under ``gs://bucket/prefix``; paths are relative to the prefix."""

    scheme = "gs"

    def __init__(
        self, uri: str | TableURI, storage_options: Mapping[str, Any] | None = None, *, max_concurrency: int = 8
    ) -> None:
        """``max_concurrency`` bounds the parallel GETs of a read."""
        loc = uri if isinstance(uri, TableURI) else parse_table_uri(uri)
        if loc.scheme != "gs":
            raise InvalidURIError(f"{loc.given!r} is not a gs:// URI")
        super().__init__(loc.bucket, loc.path, max_concurrency)
        self.options = GCSOptions.from_mapping(storage_options)
        self._client, self.endpoint_url = _client_for(self.options)
        self._bucket = self._client.bucket(self.bucket)
        self._timeout = self.options.timeout
        retries = self.options.max_retries
        self._retry: Retry | None = (
            None
            if retries == 0
            else DEFAULT_RETRY
            if retries is None
            else DEFAULT_RETRY.with_timeout((retries + 1) * sum(self._timeout))
        )

    def __repr__(self) -> str:
        return f"GCSObjectStore({self.uri!r}, endpoint={self.endpoint_url!r})"

    @property
    def probe_scope(self) -> tuple[str, str]:
        """(endpoint, bucket): the scope a conditional-put probe verdict holds for."""
        return (self.endpoint_url, self.bucket)

    # -- errors -------------------------------------------------------------

    def _translate(self, exc: BaseException, what: str, key: str, *, write: bool = False) -> StoreError:
        """The typed store error for an SDK failure while doing ``what`` to ``key``;
        ``write`` marks a write that may have been applied when its answer was lost."""
        where = self._where(key)
        if isinstance(exc, StoreError):
            return exc
        if isinstance(exc, gexc.NotFound):
            return ObjectNotFoundError(f"{where} does not exist")
        if isinstance(exc, (gexc.Forbidden, gexc.Unauthorized)):
            return StoreUnavailableError(f"access to {where} was denied ({exc}); check the credentials and IAM roles")
        if isinstance(exc, (gexc.ServerError, gexc.TooManyRequests)) or getattr(exc, "code", None) == 408:
            cls = AmbiguousStoreError if write else StoreUnavailableError
            return cls(f"cannot {what} {where}: GCS answered {exc}")
        if isinstance(exc, gexc.GoogleAPICallError):
            return StoreError(f"cannot {what} {where}: GCS answered {exc}")
        if isinstance(exc, auth_exc.GoogleAuthError):
            return StoreUnavailableError(f"no usable Google credentials to {what} {where}: {exc}")
        if _not_sent(exc):
            return not_sent(f"cannot reach {self.endpoint_url} to {what} {where}: {exc}")
        if isinstance(exc, (requests.RequestException, OSError)):  # sent, answer lost
            cls = AmbiguousStoreError if write else StoreUnavailableError
            return cls(f"lost the response while trying to {what} {where}: {exc}")
        return StoreUnavailableError(f"cannot {what} {where}: {exc}")

    def _missing(self, key: str) -> StoreError:
        """A 404 names a missing bucket as well as a missing object: tell the two apart."""
        try:
            if not self._bucket.exists(timeout=self._timeout, retry=self._retry):
                return self._no_bucket()
        except SDK_ERRORS:  # report the original miss
            pass
        return ObjectNotFoundError(f"{self._where(key)} does not exist")

    # -- reads --------------------------------------------------------------

    def _download(self, key: str, generation: int | None = None, **kwargs: Any) -> tuple[bytes, Any]:
        blob = self._bucket.blob(key, generation=generation)
        data = blob.download_as_bytes(timeout=self._timeout, retry=self._retry, checksum=None, **kwargs)
        return data, blob

    def read(self, path: str) -> bytes:
        """The whole object."""
        key = self._key(path)
        try:
            return self._download(key)[0]
        except gexc.NotFound as exc:
            raise self._missing(key) from exc
        except SDK_ERRORS as exc:
            raise self._translate(exc, "read", key) from exc

    def read_tail(self, path: str, length: int) -> tuple[bytes, int]:
        """The last ``length`` bytes and the object's size: one ranged GET, and a
        metadata GET only when the object is at least ``length`` bytes long."""
        key, n = self._key(path), max(1, int(length))
        try:
            data, blob = self._download(key, start=-n)
            if len(data) < n:
                return data, len(data)
            meta = self._bucket.get_blob(key, timeout=self._timeout, retry=self._retry)
        except gexc.RequestRangeNotSatisfiable:  # an empty object has no last byte
            return b"", 0
        except gexc.NotFound as exc:
            raise self._missing(key) from exc
        except SDK_ERRORS as exc:
            raise self._translate(exc, "read", key) from exc
        if meta is None or (blob.generation and meta.generation != blob.generation):
            raise ObjectChangedError(f"{self._where(key)} was replaced while being read; read it again")
        return data, int(meta.size)

    def _meta(self, key: str) -> Any:
        try:
            blob = self._bucket.get_blob(key, timeout=self._timeout, retry=self._retry)
        except SDK_ERRORS as exc:
            raise self._translate(exc, "inspect", key) from exc
        if blob is None:
            raise self._missing(key)
        return blob

    def size(self, path: str) -> int:
        """Object size in bytes (one metadata GET)."""
        return int(self._meta(self._key(path)).size)

    def exists(self, path: str) -> bool:
        """True if the object exists (one metadata GET; a missing bucket reads as False)."""
        key = self._key(path)
        try:
            return self._bucket.get_blob(key, timeout=self._timeout, retry=self._retry) is not None
        except gexc.NotFound:
            return False
        except SDK_ERRORS as exc:
            raise self._translate(exc, "inspect", key) from exc

    def open_reader(self, path: str, size: int | None = None) -> RangeReader:
        """A range reader doing coalesced, parallel ranged GETs pinned to one
        generation; given the ``size`` no metadata GET is sent."""
        key = self._key(path)
        if size is not None and size > 0:
            return BlobRangeReader(self, key, size, None, size_given=True)
        meta = self._meta(key)
        return BlobRangeReader(self, key, int(meta.size), str(meta.generation) if meta.generation else None)

    def _get_range(self, key: str, start: int, end: int, version: str | None) -> tuple[bytes, str | None]:
        try:
            data, blob = self._download(key, int(version) if version else None, start=start, end=end - 1)
        except (gexc.PreconditionFailed, gexc.NotFound) as exc:
            if not version:
                raise self._translate(exc, "read", key) from exc
            raise ObjectChangedError(f"{self._where(key)} was replaced while being read; reopen it") from exc
        except gexc.RequestRangeNotSatisfiable:
            return b"", version
        except SDK_ERRORS as exc:
            raise self._translate(exc, "read", key) from exc
        return data, str(blob.generation) if blob.generation else None

    def _pages(self, base: str, delimiter: str | None) -> Any:
        try:
            yield from self._client.list_blobs(
                self.bucket, prefix=base, delimiter=delimiter, timeout=self._timeout, retry=self._retry
            )
        except gexc.NotFound as exc:
            raise self._no_bucket() from exc
        except SDK_ERRORS as exc:
            raise self._translate(exc, "list", base) from exc

    def list(self, prefix: str) -> builtins.list[str]:
        """Names (not paths) of the objects directly under ``prefix/``."""
        base = self._dir(prefix)
        return [b.name[len(base) :] for b in self._pages(base, "/") if b.name[len(base) :]]

    def walk(self, prefix: str) -> builtins.list[tuple[str, int, float]]:
        """Every object under ``prefix/`` as (path relative to the root, size, mtime)."""
        base = self._dir(prefix)
        return [
            (self._relative(b.name), int(b.size), b.updated.timestamp() if b.updated else 0.0)
            for b in self._pages(base, None)
            if not b.name.endswith("/")
        ]

    # -- writes -------------------------------------------------------------

    def put(self, path: str, data: bytes) -> None:
        """Write ``data``, replacing any object at ``path`` (an upload is atomic)."""
        key = self._key(path)
        try:
            self._bucket.blob(key).upload_from_string(bytes(data), timeout=self._timeout, retry=self._retry)
        except gexc.NotFound as exc:
            raise self._no_bucket() from exc
        except SDK_ERRORS as exc:
            raise self._translate(exc, "write", key) from exc

    def _create_once(self, key: str, data: bytes) -> None:
        try:
            self._bucket.blob(key).upload_from_string(data, if_generation_match=0, timeout=self._timeout, retry=None)
        except gexc.PreconditionFailed as exc:
            raise AlreadyExistsError(f"{self._where(key)} already exists") from exc
        except gexc.NotFound as exc:
            raise self._no_bucket() from exc
        except SDK_ERRORS as exc:
            raise self._translate(exc, "create", key, write=True) from exc

    def _upload(self, key: str, stream: IO[bytes], length: int) -> None:
        try:
            self._bucket.blob(key).upload_from_file(stream, size=length, timeout=self._timeout, retry=self._retry)
        except gexc.NotFound as exc:
            raise self._no_bucket() from exc
        except SDK_ERRORS as exc:
            raise self._translate(exc, "write", key) from exc

    def copy(self, src: str, dst: str) -> None:
        """Server-side copy of ``src`` to ``dst``, replacing ``dst`` (a rewrite,
        repeated until GCS says it is done for a large object)."""
        skey, dkey = self._key(src), self._key(dst)
        source, target = self._bucket.blob(skey), self._bucket.blob(dkey)
        try:
            token, _, _ = target.rewrite(source, timeout=self._timeout, retry=self._retry)
            while token is not None:
                token, _, _ = target.rewrite(source, token=token, timeout=self._timeout, retry=self._retry)
        except gexc.NotFound as exc:
            raise self._missing(skey) from exc
        except SDK_ERRORS as exc:
            raise self._translate(exc, f"copy {self._where(skey)} to", dkey) from exc

    def delete(self, path: str) -> None:
        """Remove the object (no error if it is already gone)."""
        key = self._key(path)
        try:
            self._bucket.blob(key).delete(timeout=self._timeout, retry=self._retry)
        except gexc.NotFound:
            return
        except SDK_ERRORS as exc:
            raise self._translate(exc, "delete", key) from exc
