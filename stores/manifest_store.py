"""External manifest stores: the interface every implementation follows.

A row is keyed by (table key, version).  The table key is the normalised full
table URI (scheme, bucket, path; no trailing slash).  Each row also carries the
table's incarnation id, so a writer holding a dropped-and-recreated table's old
identity is refused.

The only writes are:

* ``reserve``: put-if-not-exists of (key, version) -> staged path, size and
  transaction uuid.  It is the commit point.  Beyond version 1 it also
  requires the row of ``version - 1`` to exist and carry the same
  incarnation: a writer still holding a dropped table's identity can neither
  extend a recreated table (its predecessor row has the new incarnation) nor
  write past it (its predecessor row is gone), whatever the new table's
  length.  Versions are therefore dense from 1.
* ``flip``: the single allowed update, staged path -> final path, applied only
  while the row still holds the staged path.  Idempotent.
* ``delete_table``: drop every row of a table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable
from urllib.parse import urlparse, urlunparse

from .errors import InvalidURIError


@dataclass(frozen=True)
class VersionRecord:
    """One (table, version) row."""

    table_key: str
    version: int
    path: str  # staged ("...manifest-{uuid}") or final ("...manifest"), relative to the table root
    size: int
    transaction_uuid: str
    incarnation: str

    @property
    def is_final(self) -> bool:
        return self.path.endswith(".manifest")


@runtime_checkable
class ManifestStore(Protocol):
    """What the commit coordinator needs from an external store."""

    #: "dynamodb", "redis" or "sql"
    kind: str

    def identity(self) -> str:
        """A credential-free description of the store (host, database, table),
        recorded in the tables it coordinates."""
        ...

    def store_id(self) -> str:
        """The store's own id: a random id (uuid4 hex) created once, when the
        store is provisioned or first used, and kept inside the store's data
        (SQL: a row of ``tessera_store_meta``; Redis: the ``{prefix}:store``
        hash; DynamoDB: the item ``tessera#store`` / version 0), so the same
        store reached through another address gives the same id and an empty
        store answering at a known address gives a new one.  Concurrent first
        uses converge on one id; later calls return it from a cache.  Never
        seen or removed by the per-table methods.

        Raises StoreSchemaError when the store's schema or its id record is
        not Tessera's, StoreUnavailableError when unreachable,
        AmbiguousStoreError when creating the id had an unknown outcome and it
        cannot be read back (call again)."""
        ...

    def reserve(self, record: VersionRecord) -> bool:
        """Insert ``record`` if (table_key, version) is free and, beyond
        version 1, the previous version's row exists with the same incarnation.

        Returns True when this call inserted the row, False when the row
        already held this very record's transaction (an earlier attempt whose
        reply was lost, or another caller recording the same foreign commit).

        Raises VersionExistsError when the row exists, IncarnationMismatchError
        when the predecessor is missing or belongs to another incarnation, AmbiguousStoreError
        when the outcome is unknown, StoreUnavailableError when unreachable."""
        ...

    def flip(self, table_key: str, version: int, staged_path: str, final_path: str) -> bool:
        """Set the row's path to ``final_path`` if it still holds ``staged_path``.
        Returns True if the row now holds ``final_path`` (also when it already
        did), False if it holds something else or does not exist."""
        ...

    def adopt(self, table_key: str, version: int, expected_path: str, final_path: str, transaction_uuid: str) -> bool:
        """Record that ``version`` belongs to a writer outside the store whose
        manifest is at ``final_path``: set the row's path and transaction uuid
        if the row still holds ``expected_path`` (the staged path of the
        writer that reserved it).  Returns True if the row now holds
        ``final_path`` and ``transaction_uuid`` (also when it already did)."""
        ...

    def get(self, table_key: str, version: int) -> VersionRecord | None:
        """The row of ``version`` (strongly consistent), or None."""
        ...

    def latest(self, table_key: str) -> VersionRecord | None:
        """The row with the highest version, or None."""
        ...

    def versions_after(self, table_key: str, version: int) -> list[VersionRecord]:
        """Rows with a version greater than ``version``, ascending."""
        ...

    def delete_table(self, table_key: str) -> int:
        """Remove every row of a table; returns how many were removed."""
        ...

    def check(self) -> None:
        """Verify the store is reachable and its schema is the expected one
        (StoreSchemaError / StoreUnavailableError otherwise)."""
        ...

    def close(self) -> None: ...


def predecessor_error(what: str, record: VersionRecord, pred_incarnation: str | None) -> Exception:
    """The IncarnationMismatchError for a reservation refused by its predecessor check."""
    from .errors import IncarnationMismatchError

    if not pred_incarnation:
        why = (
            f"version {record.version - 1} is not in the store (the table was dropped since this writer "
            "read it, or the version is not the next one)"
        )
    else:
        why = (
            f"version {record.version - 1} belongs to incarnation {pred_incarnation}, not {record.incarnation} "
            "(the table was dropped and recreated since this writer read it)"
        )
    return IncarnationMismatchError(f"{what}: {why}; reload the table")


def normalize_table_uri(uri: str) -> str:
    """The key of a table in a manifest store: scheme, bucket (host) and path,
    lower-cased scheme, no trailing slash, no query or credentials.

    Local paths become ``file:///abs/path``."""
    import os

    if not isinstance(uri, str) or not uri.strip():
        raise InvalidURIError(f"table URI must be a non-empty string, got {uri!r}")
    if "\x00" in uri:
        raise InvalidURIError(f"table URI {uri!r} contains a NUL byte")
    p = urlparse(uri)
    scheme = p.scheme.lower()
    if scheme in ("", "file"):
        path = p.path if scheme == "file" else uri
        return "file://" + os.path.abspath(path).rstrip("/")
    if scheme in ("s3", "s3a", "gs", "az", "abfs"):
        if not p.netloc:
            raise InvalidURIError(f"table URI {uri!r} has no bucket")
        host = p.hostname or ""
        if p.username or p.password:
            raise InvalidURIError(f"table URI {uri!r} must not carry credentials; use storage_options")
        path = "/".join(s for s in p.path.split("/") if s)
        return urlunparse(("s3" if scheme == "s3a" else scheme, host, "/" + path if path else "", "", "", "")).rstrip(
            "/"
        )
    raise InvalidURIError(f"unsupported table URI scheme {scheme!r} in {uri!r}")


def forget_store_id(ms: ManifestStore) -> None:
    """Make ``ms`` read its store id again at its next ``store_id()``: every
    store caches it (``_store_id``), and a store deleted and recreated at the
    same address must be noticed by the next table opened through it."""
    vars(ms).pop("_store_id", None)


def open_manifest_store(url: str, **options) -> ManifestStore:
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
    opener: Callable[..., ManifestStore] | None = None
    if scheme in ("redis", "rediss", "unix"):
        from .redis_store import RedisManifestStore

        opener = RedisManifestStore.from_url
    elif scheme == "dynamodb":
        from .dynamodb_store import DynamoDBManifestStore

        opener = DynamoDBManifestStore.from_url
    elif scheme.split("+", 1)[0] in ("sqlite", "postgresql", "postgres", "mysql", "mariadb"):
        from .sql_store import SqlManifestStore

        opener = SqlManifestStore.from_url
    if opener is not None:
        import inspect

        from .errors import InvalidStorageOptionError

        accepted = [n for n in inspect.signature(opener).parameters if n != "url"]
        unknown = sorted(set(options) - set(accepted))
        if unknown:
            raise InvalidStorageOptionError(
                f"{scheme} manifest store: unknown option(s) {', '.join(map(repr, unknown))} "
                f"(accepted: {', '.join(accepted)})"
            )
        return opener(url, **options)
    raise InvalidURIError(f"unsupported manifest store scheme {scheme!r} in {url!r}")
