"""Which store opens a URL: a table URI's scheme names its object store, a
manifest-store URL's scheme its manifest store.  Each store's module is
imported only when a URL of its scheme is opened (opening a local table never
imports botocore, google-cloud-storage, azure-storage-blob, SQLAlchemy or
redis-py).

To add a store: its module, a class with the interface of
:class:`stores.object_store.ObjectStore` (an opener in :data:`OBJECT_STORES`
taking the parsed :class:`stores.uri.TableURI` and the ``storage_options``) or of
:class:`stores.manifest_store.ManifestStore` (a ``from_url`` classmethod),
and its schemes in the tables below.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from .errors import InvalidStorageOptionError, InvalidURIError
from .manifest_store import ManifestStore
from .object_store import ObjectStore
from .uri import TableURI, parse_table_uri


def _open_local(loc: TableURI, storage_options: dict[str, Any] | None) -> ObjectStore:
    from .local import LocalObjectStore

    return LocalObjectStore(loc.path)


def _open_s3(loc: TableURI, storage_options: dict[str, Any] | None) -> ObjectStore:
    from .s3 import S3ObjectStore

    return S3ObjectStore(loc, storage_options)


def _sdk_missing(loc: TableURI, extra: str, package: str, exc: ImportError) -> InvalidURIError:
    return InvalidURIError(
        f"opening {loc.given!r} needs {package}, which is not installed: pip install 'tessera[{extra}]' ({exc})"
    )


def _open_gcs(loc: TableURI, storage_options: dict[str, Any] | None) -> ObjectStore:
    try:
        from .gcs import GCSObjectStore
    except ImportError as exc:
        raise _sdk_missing(loc, "gcs", "google-cloud-storage", exc) from exc
    return GCSObjectStore(loc, storage_options)


def _open_azure(loc: TableURI, storage_options: dict[str, Any] | None) -> ObjectStore:
    try:
        from .azure import AzureObjectStore
    except ImportError as exc:
        raise _sdk_missing(loc, "azure", "azure-storage-blob", exc) from exc
    return AzureObjectStore(loc, storage_options)


#: a table URI's scheme (as :class:`TableURI` names it) -> its object store's opener
OBJECT_STORES: dict[str, Callable[[TableURI, dict[str, Any] | None], ObjectStore]] = {
    "file": _open_local,
    "s3": _open_s3,
    "gs": _open_gcs,
    "az": _open_azure,
    "abfs": _open_azure,
}
#: a manifest-store URL's scheme -> (module, manifest-store class)
MANIFEST_STORES: dict[str, tuple[str, str]] = {
    "redis": ("redis_store", "RedisManifestStore"),
    "rediss": ("redis_store", "RedisManifestStore"),
    "unix": ("redis_store", "RedisManifestStore"),
    "dynamodb": ("dynamodb_store", "DynamoDBManifestStore"),
}
#: SQLAlchemy dialects (a URL's scheme is ``dialect`` or ``dialect+driver``) of the SQL store
SQL_DIALECTS = ("sqlite", "postgresql", "postgres", "mysql", "mariadb")


def open_object_store(
    uri: Any, storage_options: dict[str, Any] | None = None, durability: str | None = None
) -> ObjectStore:
    """The object store for a table URI: a local path, ``file://``, ``s3://`` (``s3a://``),
    ``gs://``, ``az://`` or ``abfs[s]://container@account.dfs.core.windows.net/``.

    ``storage_options`` configure S3 (see :mod:`stores.s3_options`), GCS and
    Azure (see :mod:`stores.cloud_options`).
    ``durability`` (``"sync"``, the default, or ``"none"``) is what a local
    write makes durable before it returns (see :mod:`stores.local`); an S3
    write is durable when S3 acknowledges it, whatever the setting."""
    if durability is not None:
        from .local import check_durability

        check_durability(durability)
    loc = parse_table_uri(uri)
    opener = OBJECT_STORES.get(loc.scheme)
    if opener is None:
        raise InvalidURIError(
            f"unsupported table URI scheme {loc.scheme!r} in {loc.given!r} "
            f"(supported: local paths, file://, s3://, gs://, az://, abfs://)"
        )
    store = opener(loc, storage_options)
    if durability is not None and hasattr(store, "durability"):
        store.durability = durability
    return store


def open_manifest_store(url: str, **options: Any) -> ManifestStore:
    """Open a store by URL: ``redis://host:port/db``, ``dynamodb:///TABLE?region=..&endpoint_url=..``,
    or any SQLAlchemy URL (``sqlite:///path.db``, ``postgresql+psycopg://...``, ``mysql+pymysql://...``).

    Each store's settings - ``io_timeout`` (how long to wait for an answer:
    a write that gets none is AmbiguousStoreError, a read
    StoreUnavailableError), ``connect_timeout``, and per store
    ``busy_timeout_ms``, ``pool_size``, ``max_overflow``, ``pool_pre_ping``
    (SQL), ``prefix``, ``wait_replicas``, ``wait_timeout_ms``,
    ``max_connections`` (Redis), ``region``, ``endpoint_url``,
    ``max_attempts`` (DynamoDB) - may be given as keyword ``options`` or as
    query parameters of ``url`` (``...?io_timeout=5``).  A keyword argument
    wins over the same setting in the URL.  Tessera's query parameters are
    removed before the URL reaches the driver and never change the store's
    identity.  A bad value is InvalidURIError when it is in the URL and
    InvalidStorageOptionError when it is a keyword argument; an option the
    store does not take is InvalidStorageOptionError.  See
    :mod:`stores.store_options`."""
    if not isinstance(url, str) or "://" not in url:
        raise InvalidURIError(f"not a manifest store URL: {url!r}")
    scheme = url.split("://", 1)[0].lower()
    entry = MANIFEST_STORES.get(scheme)
    if entry is None and scheme.split("+", 1)[0] in SQL_DIALECTS:
        entry = ("sql_store", "SqlManifestStore")
    if entry is None:
        raise InvalidURIError(f"unsupported manifest store scheme {scheme!r} in {url!r}")
    module, name = entry
    opener: Callable[..., ManifestStore] = getattr(importlib.import_module(f"{__package__}.{module}"), name).from_url
    accepted = [n for n in inspect.signature(opener).parameters if n != "url"]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise InvalidStorageOptionError(
            f"{scheme} manifest store: unknown option(s) {', '.join(map(repr, unknown))} "
            f"(accepted: {', '.join(accepted)})"
        )
    return opener(url, **options)
