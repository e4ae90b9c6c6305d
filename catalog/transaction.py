"""Multi-table transactions.

``with catalog.transaction() as tx:`` hands out tables whose write operations
are staged: each builds its manifest in memory (on top of the previous staged
one), and nothing is visible until the block ends.  Leaving the block commits
every staged version of every table at once: the versions' rows are inserted in
one database transaction of the catalog's SQL manifest store, so either all of
them become visible or none does.  An exception inside the block commits
nothing.  Only tables coordinated by the catalog's own SQL store can take part;
any other table is refused when it is loaded, before anything is written.

Reads inside the block see one snapshot: the latest versions of all tables the
block loads are read in one database transaction.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING

from tessera.commit import ExternalCommitHandler, TableVersion, commit_many, list_versions, stage_version
from tessera.commit.errors import PartialTransactionError
from tessera.format.protos import transaction_pb2
from tessera.format.table import manifest as mf

from .errors import TransactionError

if TYPE_CHECKING:
    from tessera.commit import RetryPolicy
    from tessera.stores.sql_store import SqlManifestStore, SqlSnapshot

    from .catalog import Catalog, Ident
    from .table import Table

log = logging.getLogger(__name__)


@dataclass
class _Staged:
    table: Table
    versions: list[tuple[int, bytes, transaction_pb2.Transaction]] = field(default_factory=list)


class _Staging:
    """Collects one table's staged versions."""

    def __init__(self) -> None:
        self.entries: list[_Staged] = []
        self._by_table: dict[int, _Staged] = {}

    def stage(
        self,
        table: Table,
        txn: transaction_pb2.Transaction,
        base: mf.ManifestFile,
        *,
        restore_from: mf.ManifestFile | None = None,
        affected_rows: object = None,
        **_ignored: object,
    ) -> mf.ManifestFile:
        entry = self._by_table.get(id(table))
        if entry is None:
            entry = self._by_table[id(table)] = _Staged(table)
            self.entries.append(entry)
        mfile, data = stage_version(table.snapshot.handler, table.uri, txn, base, restore_from=restore_from)
        entry.versions.append((mfile.version, data, txn))
        return mfile


class CatalogTransaction:
    """A context manager committing several tables' changes atomically."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._staging = _Staging()
        self._tables: dict[str, Table] = {}
        self._snapshot_conn: SqlSnapshot | None = None
        self.committed = False

    # -- loading -----------------------------------------------------------------------

    def load_table(self, ident: Ident) -> Table:
        """The table ``ident`` as of this transaction's snapshot; its writes are staged."""
        from .models import TableRow as Row
        from .table import Table

        ns, name = self.catalog._ident(ident)
        key = f"{ns}.{name}"
        if key in self._tables:
            return self._tables[key]
        with self.catalog._session() as s:
            row = s.get(Row, (ns, name))
            if row is None:
                from .errors import NoSuchTableError

                raise NoSuchTableError(f"table {key} does not exist")
            uri, store = row.uri, row.commit_store
        if store != "catalog":
            raise TransactionError(
                f"table {key} is coordinated by {store!r}; multi-table transactions need every table "
                "on the catalog's SQL store (create it with commit_store='catalog')"
            )
        ms = self.catalog.manifest_store
        version = self._snapshot_version(ms, uri)
        table = Table.open(
            uri,
            version=version,
            commit_store=ms,
            storage_options=self.catalog.storage_options,
            retry=self.catalog.retry,
        )
        table._staging = self._staging
        self._tables[key] = table
        return table

    def _snapshot_version(self, ms: SqlManifestStore, uri: str) -> int:
        """The latest version of ``uri`` as of this transaction's snapshot."""
        from tessera.stores.uri import normalize_table_uri

        if self._snapshot_conn is None:
            self._snapshot_conn = ms.snapshot()
        row = self._snapshot_conn.latest(normalize_table_uri(uri))
        if row is None:
            from tessera.commit.errors import TableNotFoundError

            raise TableNotFoundError(f"no versions of {uri} in the catalog's manifest store")
        return int(row.version)

    # -- committing --------------------------------------------------------------------

    def __enter__(self) -> CatalogTransaction:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self._snapshot_conn is not None:
                self._snapshot_conn.close()
                self._snapshot_conn = None
            if exc_type is None:
                self.commit()
        finally:
            for t in self._tables.values():
                t._staging = None
        if exc_type is None:
            self._maintain_indices()

    def _maintain_indices(self) -> None:
        """Zone maps over the fragments the transaction added, one commit per table
        after the transaction's (catalog/table/indexes.py); a failure leaves them unindexed."""
        for e in self._staging.entries:
            if e.versions:
                try:
                    e.table.refresh()
                except Exception as exc:  # noqa: BLE001 - the transaction stands; the next write catches up
                    log.warning("%s: zone maps not updated after the transaction (%s)", e.table.uri, exc)
                    continue
                e.table._maintain_indices()

    def commit(self) -> None:
        """Commit every staged version of every table at once (``commit.multi``)."""
        entries = [e for e in self._staging.entries if e.versions]
        if not entries:
            self.committed = True
            return
        versions = []
        for e in entries:
            t = e.table
            snap = t.snapshot
            handler = snap.handler
            if not isinstance(handler, ExternalCommitHandler):  # load_table admits catalog-store tables only
                raise TransactionError(f"{t.uri} is not coordinated by the catalog's SQL store")
            scheme = snap.mfile.naming or list_versions(snap.store)[1] or mf.NamingScheme.V2
            for version, data, txn in e.versions:
                versions.append(TableVersion(snap.uri, snap.store, handler, version, data, txn, scheme))
        try:
            commit_many(self.catalog.manifest_store, versions, self._policy())
        except PartialTransactionError:
            self.committed = True
            raise
        self.committed = True

    def _policy(self) -> RetryPolicy:
        tables = [e.table for e in self._staging.entries]
        return tables[0].snapshot.handler.policy if tables else self.catalog.retry
