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

The stores subclass :class:`ManifestStore`, which declares what a caller may
ask of any store beyond the rows (``replaced``, ``forget_store_id``) with the
answers of a store on a server.  Stores are opened by
:func:`stores.registry.open_manifest_store`; the key of a table is
:attr:`stores.uri.TableURI.key`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .errors import IncarnationMismatchError


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
    #: the store id once read (:meth:`store_id` caches it here)
    _store_id: str | None = None

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

    def replaced(self) -> bool:
        """Whether the store was replaced under its address since it was
        opened (a SQLite file deleted or swapped): then open the URL anew
        instead of using this object.  Never for a store on a server."""
        return False

    def forget_store_id(self) -> None:
        """Make the next :meth:`store_id` read the id from the store again:
        a store deleted and recreated at the same address must be noticed by
        the next table opened through it."""
        self._store_id = None


def predecessor_error(what: str, record: VersionRecord, pred_incarnation: str | None) -> Exception:
    """The IncarnationMismatchError for a reservation refused by its predecessor check."""
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
