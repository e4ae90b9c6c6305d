"""Azure Blob Storage object store for ``az://container/prefix`` and
``abfs[s]://container@account.dfs.core.windows.net/prefix`` tables, through
azure-storage-blob (the ``azure`` extra: ``pip install tessera[azure]``).

``put_if_not_exists`` is a Put Blob with ``If-None-Match: *``: Azure creates
the blob only if none exists, atomically, and answers 409 BlobAlreadyExists
to every other creator.  It is sent by a client with the SDK's retries off (a
retry of a create whose response was lost would be refused on our own blob);
:class:`stores.cloud_io.CloudObjectStore` retries it itself and reports
AmbiguousStoreError whenever an earlier attempt may have landed.  azure-core
tells a request that never left (ServiceRequestError: refused, DNS, connect
timeout) from one whose answer was lost (ServiceResponseError), which is
exactly the line between "retry" and "ambiguous".

Reads pin the blob's ETag: a range reader's GETs carry ``If-Match``, so a
replaced blob is ObjectChangedError, never a mix of two versions.

The SDK (azure-storage-blob, azure-core, requests) is imported when the first
Azure table is opened: this module is imported lazily by
:func:`stores.registry.open_object_store`.  Clients are made once per process
per set of options and container, and shared.  Settings and credentials:
:mod:`stores.cloud_options`.

Timeouts: ``connect_timeout`` bounds opening a connection and ``io_timeout``
each wait for a reply (azure-core's 20 s and 60 s when not given); idempotent
requests are retried by the SDK ``max_retries`` times (its default: 3).
"""

from __future__ import annotations

import builtins
import importlib
import logging
import threading
from collections.abc import Mapping
from typing import IO, Any

from azure.core import MatchConditions
from azure.core import exceptions as aexc
from azure.storage.blob import ContainerClient

from tessera.format.file.io import RangeReader

from .cloud_io import BlobRangeReader, CloudObjectStore, not_sent
from .cloud_options import AzureOptions
from .errors import (
    AlreadyExistsError,
    AmbiguousStoreError,
    BucketNotFoundError,
    InvalidStorageOptionError,
    InvalidURIError,
    ObjectChangedError,
    ObjectNotFoundError,
    StoreError,
    StoreUnavailableError,
)
from .uri import TableURI, parse_table_uri

log = logging.getLogger(__name__)

#: what the SDK raises; anything else is a bug and propagates untouched
SDK_ERRORS = (aexc.AzureError,)
#: error codes of a missing container (a missing blob is BlobNotFound)
_NO_CONTAINER = {"ContainerNotFound", "ContainerBeingDeleted"}
#: a copy still running after this many seconds is reported (copies within an account are usually instant)
COPY_WAIT = 600.0

_lock = threading.Lock()
_clients: dict[tuple[AzureOptions, str, str, bool], ContainerClient] = {}


def _account_url(opts: AzureOptions, loc: TableURI) -> tuple[str, str | None]:
    """(the blob endpoint, the account name) for ``loc`` with ``opts``."""
    if opts.endpoint_url:
        return opts.endpoint_url, opts.account_name
    account = opts.account_name
    if loc.host:
        host_account = loc.host.split(".", 1)[0]
        if account and account != host_account:
            raise InvalidStorageOptionError(
                f"{loc.given!r} names account {host_account!r} but storage_options name {account!r}"
            )
        account = host_account
        # abfs names the Data Lake endpoint (dfs); blobs are served by the blob endpoint of the same account
        suffix = loc.host.split(".", 1)[1] if "." in loc.host else "dfs.core.windows.net"
        return f"https://{account}.{suffix.replace('dfs.', 'blob.', 1)}", account
    if not account:
        raise InvalidStorageOptionError(
            f"{loc.given!r} names no storage account: give account_name (or connection_string, "
            f"or endpoint_url) in storage_options, or use abfs://container@ACCOUNT.dfs.core.windows.net/path"
        )
    return f"https://{account}.blob.core.windows.net", account


def _container_for(opts: AzureOptions, loc: TableURI, conditional: bool) -> ContainerClient:
    """The process's container client for ``opts`` and ``loc``'s container
    (made once, then shared; azure-core's pipelines are thread-safe);
    ``conditional`` ones never retry by themselves."""
    endpoint = opts.connection_string or _account_url(opts, loc)[0]
    cache_key = (opts, endpoint, loc.bucket, conditional)
    with _lock:
        client = _clients.get(cache_key)
        if client is not None:
            return client
        kwargs: dict[str, Any] = {}
        if conditional:
            kwargs["retry_total"] = 0
        elif opts.max_retries is not None:
            kwargs["retry_total"] = opts.max_retries
        if opts.connect_timeout is not None:
            kwargs["connection_timeout"] = opts.connect_timeout
        if opts.read_timeout is not None:
            kwargs["read_timeout"] = opts.read_timeout
        try:
            if opts.connection_string:
                client = ContainerClient.from_connection_string(opts.connection_string, loc.bucket, **kwargs)
            else:
                url, account = _account_url(opts, loc)
                credential: Any = None
                if opts.account_key:
                    credential = {"account_name": account or "", "account_key": opts.account_key}
                elif opts.sas_token:
                    credential = opts.sas_token
                else:
                    try:  # optional: Entra ID (managed identity, az login, environment)
                        identity = importlib.import_module("azure.identity")
                    except ImportError:
                        log.info("azure-identity is not installed: opening %s without credentials", loc.given)
                    else:
                        credential = identity.DefaultAzureCredential()
                client = ContainerClient(url, loc.bucket, credential=credential, **kwargs)
        except ValueError as exc:
            raise InvalidStorageOptionError(f"cannot configure an Azure client from storage_options: {exc}") from exc
        if len(_clients) >= 64:
            _clients.pop(next(iter(_clients)))
        _clients[cache_key] = client
        return client


class AzureObjectStore(CloudObjectStore):
    """Blobs under ``az://container/prefix``; paths are relative to the prefix."""

    scheme = "az"

    def __init__(
        self, uri: str | TableURI, storage_options: Mapping[str, Any] | None = None, *, max_concurrency: int = 8
    ) -> None:
        """``max_concurrency`` bounds the parallel GETs of a read and of an upload."""
        loc = uri if isinstance(uri, TableURI) else parse_table_uri(uri)
        if loc.scheme not in ("az", "abfs"):
            raise InvalidURIError(f"{loc.given!r} is not an az:// or abfs:// URI")
        self.scheme = loc.scheme
        super().__init__(f"{loc.bucket}@{loc.host}" if loc.host else loc.bucket, loc.path, max_concurrency)
        self.container = loc.bucket
        self.options = AzureOptions.from_mapping(storage_options)
        self._loc = loc
        self._client = _container_for(self.options, loc, conditional=False)
        self._cond: ContainerClient | None = None
        self.endpoint_url: str = self._client.primary_endpoint.rsplit("/", 1)[0]

    def __repr__(self) -> str:
        return f"AzureObjectStore({self.uri!r}, endpoint={self.endpoint_url!r})"

    @property
    def _cond_client(self) -> ContainerClient:
        """The client of conditional creates (SDK retries off), made on first use."""
        if self._cond is None:
            self._cond = _container_for(self.options, self._loc, conditional=True)
        return self._cond

    @property
    def probe_scope(self) -> tuple[str, str]:
        """(endpoint, container): the scope a conditional-put probe verdict holds for."""
        return (self.endpoint_url, self.container)

    # -- errors -------------------------------------------------------------

    def _translate(self, exc: BaseException, what: str, key: str, *, write: bool = False) -> StoreError:
        """The typed store error for an SDK failure while doing ``what`` to ``key``;
        ``write`` marks a write that may have been applied when its answer was lost."""
        where = self._where(key)
        if isinstance(exc, StoreError):
            return exc
        code = str(getattr(exc, "error_code", "") or "")
        status = getattr(exc, "status_code", None)
        if code in _NO_CONTAINER:
            return self._no_container()
        if isinstance(exc, aexc.ResourceNotFoundError):
            return ObjectNotFoundError(f"{where} does not exist")
        if isinstance(exc, aexc.ClientAuthenticationError) or status == 403:
            return StoreUnavailableError(f"access to {where} was denied ({code or exc}); check the credentials")
        if isinstance(exc, aexc.ServiceRequestError):  # never sent: refused, DNS, connect timeout
            return not_sent(f"cannot reach {self.endpoint_url} to {what} {where}: {exc}")
        if isinstance(exc, aexc.ServiceResponseError):  # sent, answer lost
            cls = AmbiguousStoreError if write else StoreUnavailableError
            return cls(f"lost the response while trying to {what} {where}: {exc}")
        if status is not None and (status >= 500 or status in (408, 429)):
            cls = AmbiguousStoreError if write else StoreUnavailableError
            return cls(f"cannot {what} {where}: Azure answered {status} {code}")
        if isinstance(exc, aexc.HttpResponseError):
            return StoreError(f"cannot {what} {where}: Azure answered {status} {code}: {exc.message}")
        return StoreUnavailableError(f"cannot {what} {where}: {exc}")

    def _no_container(self) -> BucketNotFoundError:
        return BucketNotFoundError(
            f"container {self.container!r} does not exist at {self.endpoint_url}; create it or fix the table URI"
        )

    # -- reads --------------------------------------------------------------

    def read(self, path: str) -> bytes:
        """The whole blob."""
        key = self._key(path)
        try:
            return bytes(self._client.download_blob(key).readall())
        except SDK_ERRORS as exc:
            raise self._translate(exc, "read", key) from exc

    def read_tail(self, path: str, length: int) -> tuple[bytes, int]:
        """The last ``length`` bytes and the blob's size: one ranged GET from the
        start (Azure has no suffix ranges), and a second one pinned to the same
        ETag only when the blob is longer than ``length``."""
        key, n = self._key(path), max(1, int(length))
        try:
            first = self._client.download_blob(key, offset=0, length=n)
            total = str(first.properties.content_range or "").rpartition("/")[2]  # "bytes 0-9/200"
            size, etag = (int(total) if total.isdigit() else int(first.size)), first.properties.etag
            if size <= n:
                return bytes(first.readall()), size
            tail = self._client.download_blob(
                key, offset=size - n, length=n, etag=etag, match_condition=MatchConditions.IfNotModified
            )
            return bytes(tail.readall()), size
        except aexc.ResourceModifiedError as exc:
            raise ObjectChangedError(f"{self._where(key)} was replaced while being read; read it again") from exc
        except aexc.HttpResponseError as exc:
            if exc.status_code == 416:  # an empty blob has no first byte
                return b"", 0
            raise self._translate(exc, "read", key) from exc
        except SDK_ERRORS as exc:
            raise self._translate(exc, "read", key) from exc

    def _props(self, key: str) -> Any:
        try:
            return self._client.get_blob_client(key).get_blob_properties()
        except SDK_ERRORS as exc:
            raise self._translate(exc, "inspect", key) from exc

    def size(self, path: str) -> int:
        """Blob size in bytes (one HEAD)."""
        return int(self._props(self._key(path)).size)

    def exists(self, path: str) -> bool:
        """True if the blob exists (one HEAD; a missing container reads as False)."""
        key = self._key(path)
        try:
            self._client.get_blob_client(key).get_blob_properties()
            return True
        except aexc.ResourceNotFoundError:
            return False
        except SDK_ERRORS as exc:
            raise self._translate(exc, "inspect", key) from exc

    def open_reader(self, path: str, size: int | None = None) -> RangeReader:
        """A range reader doing coalesced, parallel ranged GETs pinned to one
        ETag; given the ``size`` no HEAD is sent."""
        key = self._key(path)
        if size is not None and size > 0:
            return BlobRangeReader(self, key, size, None, size_given=True)
        props = self._props(key)
        return BlobRangeReader(self, key, int(props.size), props.etag)

    def _get_range(self, key: str, start: int, end: int, version: str | None) -> tuple[bytes, str | None]:
        kwargs: dict[str, Any] = {"offset": start, "length": end - start}
        if version:
            kwargs.update(etag=version, match_condition=MatchConditions.IfNotModified)
        try:
            got = self._client.download_blob(key, **kwargs)
            return bytes(got.readall()), got.properties.etag
        except aexc.ResourceModifiedError as exc:
            raise ObjectChangedError(f"{self._where(key)} was replaced while being read; reopen it") from exc
        except aexc.HttpResponseError as exc:
            if exc.status_code == 416:
                return b"", version
            raise self._translate(exc, "read", key) from exc
        except SDK_ERRORS as exc:
            raise self._translate(exc, "read", key) from exc

    def list(self, prefix: str) -> builtins.list[str]:
        """Names (not paths) of the blobs directly under ``prefix/``."""
        base = self._dir(prefix)
        try:
            return [
                item.name[len(base) :]
                for item in self._client.walk_blobs(name_starts_with=base or None, delimiter="/")
                if not item.name.endswith("/") and item.name[len(base) :]
            ]
        except SDK_ERRORS as exc:
            raise self._translate(exc, "list", base) from exc

    def walk(self, prefix: str) -> builtins.list[tuple[str, int, float]]:
        """Every blob under ``prefix/`` as (path relative to the root, size, mtime)."""
        base = self._dir(prefix)
        try:
            return [
                (self._relative(b.name), int(b.size), b.last_modified.timestamp() if b.last_modified else 0.0)
                for b in self._client.list_blobs(name_starts_with=base or None)
                if not b.name.endswith("/")
            ]
        except SDK_ERRORS as exc:
            raise self._translate(exc, "list", base) from exc

    # -- writes -------------------------------------------------------------

    def put(self, path: str, data: bytes) -> None:
        """Write ``data``, replacing any blob at ``path`` (a Put Blob is atomic)."""
        key = self._key(path)
        try:
            self._client.upload_blob(key, bytes(data), overwrite=True)
        except SDK_ERRORS as exc:
            raise self._translate(exc, "write", key) from exc

    def _create_once(self, key: str, data: bytes) -> None:
        try:
            self._cond_client.upload_blob(key, data, overwrite=False)
        except (aexc.ResourceExistsError, aexc.ResourceModifiedError) as exc:
            if str(getattr(exc, "error_code", "") or "") in _NO_CONTAINER:
                raise self._no_container() from exc
            raise AlreadyExistsError(f"{self._where(key)} already exists") from exc
        except SDK_ERRORS as exc:
            raise self._translate(exc, "create", key, write=True) from exc

    def _upload(self, key: str, stream: IO[bytes], length: int) -> None:
        try:
            self._client.upload_blob(key, stream, length=length, overwrite=True, max_concurrency=self.max_concurrency)
        except SDK_ERRORS as exc:
            raise self._translate(exc, "write", key) from exc

    def copy(self, src: str, dst: str) -> None:
        """Server-side copy of ``src`` to ``dst``, replacing ``dst`` (waits for
        a copy Azure runs in the background)."""
        import time

        skey, dkey = self._key(src), self._key(dst)
        target = self._client.get_blob_client(dkey)
        try:
            props = target.start_copy_from_url(self._client.get_blob_client(skey).url)
            status, deadline = props.get("copy_status"), time.monotonic() + COPY_WAIT
            while status == "pending":
                if time.monotonic() > deadline:
                    raise StoreUnavailableError(f"copy of {self._where(skey)} to {self._where(dkey)} still pending")
                time.sleep(0.1)
                status = target.get_blob_properties().copy.status
            if status not in (None, "success"):
                raise StoreError(f"copy of {self._where(skey)} to {self._where(dkey)} ended {status}")
        except aexc.ResourceNotFoundError as exc:
            if str(getattr(exc, "error_code", "") or "") in _NO_CONTAINER:
                raise self._no_container() from exc
            raise ObjectNotFoundError(f"{self._where(skey)} does not exist") from exc
        except SDK_ERRORS as exc:
            raise self._translate(exc, f"copy {self._where(skey)} to", dkey) from exc

    def delete(self, path: str) -> None:
        """Remove the blob (no error if it is already gone)."""
        key = self._key(path)
        try:
            self._client.delete_blob(key)
        except aexc.ResourceNotFoundError as exc:
            if str(getattr(exc, "error_code", "") or "") in _NO_CONTAINER:
                raise self._no_container() from exc
        except SDK_ERRORS as exc:
            raise self._translate(exc, "delete", key) from exc
