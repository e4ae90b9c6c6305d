"""Multi-table commits: several tables' next versions, all or none.

Every table must be coordinated by the same SQL manifest store, whose
``reserve_many`` inserts every row in ONE database transaction: that is the
commit point of the whole set.  The steps:

1. write each version's transaction file (unsynced, see :mod:`commit.txn_files`)
   and staged manifest;
2. reserve every row at once.  VersionExistsError means another writer took
   one of the versions: nothing was reserved, the staged manifests are
   deleted, CommitConflictError.  An ambiguous answer is read back with the
   retry policy's patience: all rows ours = committed (a lost reply); any row
   another writer's = conflict; none = try again (at most 3 times), then
   CommitOutcomeUnknownError (nothing is deleted; a later open finishes
   whatever was decided);
3. publish each table's manifest (create-only), flip its row, delete its
   staged manifest - the same repair a reader does, so a crash between two
   tables leaves the rest to the next open.

A writer outside the store (pylance by URI) can take one table's final name
between steps 2 and 3; that version is then adopted as theirs and the
transaction is reported as :class:`PartialTransactionError`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from tessera.format.protos import transaction_pb2
from tessera.format.table import manifest as mf
from tessera.format.table import paths
from tessera.stores.errors import (
    AmbiguousStoreError,
    IncarnationMismatchError,
    StoreUnavailableError,
    VersionExistsError,
)
from tessera.stores.manifest_store import ManifestStore, VersionRecord
from tessera.stores.object_store import ObjectStore

from . import faults
from . import store as tstore
from .builder import build_version
from .errors import CommitConflictError, CommitOutcomeUnknownError, PartialTransactionError
from .handlers.base import CommitHandler
from .handlers.external import ExternalCommitHandler
from .retry import DEFAULT_POLICY, RetryPolicy
from .txn_files import inline_transaction_bytes, write_transaction_file

log = logging.getLogger(__name__)


class MultiTableStore(ManifestStore, Protocol):
    """A manifest store that can reserve rows of several tables atomically."""

    def reserve_many(self, records: list[VersionRecord]) -> None:
        """Insert every record or none (VersionExistsError, IncarnationMismatchError,
        AmbiguousStoreError, StoreUnavailableError as for ``reserve``)."""
        ...


@dataclass
class TableVersion:
    """One table's next version in a multi-table commit."""

    label: str  # the table's name, for messages
    store: ObjectStore
    handler: ExternalCommitHandler
    version: int
    data: bytes  # the manifest file
    txn: transaction_pb2.Transaction
    scheme: mf.NamingScheme


def stage_version(
    handler: CommitHandler,
    uri: str,
    txn: transaction_pb2.Transaction,
    base: mf.ManifestFile,
    *,
    restore_from: mf.ManifestFile | None = None,
) -> tuple[mf.ManifestFile, bytes]:
    """The manifest file ``txn`` makes as the version after ``base`` of the
    table at ``uri``, and its bytes, to commit later with :func:`commit_many`
    (the handler is bound to ``base``'s identity first, as a commit binds it)."""
    handler.bind(base.manifest, uri)
    return build_version(base, txn, handler.config(), restore_from=restore_from)


def commit_many(ms: MultiTableStore, versions: list[TableVersion], policy: RetryPolicy | None = None) -> None:
    """Commit every version or none; see the module docstring for the steps and errors."""
    if not versions:
        return
    policy = policy or DEFAULT_POLICY
    deadline = policy.deadline()
    records: list[VersionRecord] = []
    for v in versions:
        # the transaction file first (the manifest's inline bytes), as a single-table commit writes it
        manifest = mf.read_manifest(v.data).manifest
        body = inline_transaction_bytes(v.data, manifest)
        if manifest.transaction_file and body is not None:
            write_transaction_file(v.store, manifest.transaction_file, body)
        records.append(v.handler.stage(v.store, v.version, v.data, v.scheme, v.txn.uuid))
    _reserve_all(ms, versions, records, policy, deadline)
    faults.point(faults.RESERVED)
    lost, unknown = [], []
    for v, rec in zip(versions, records):
        final = paths.manifest_path(v.version, v.scheme)
        try:
            v.handler.complete(v.store, rec, final, v.data, deadline)
        except CommitConflictError:
            lost.append(v.label)
        except CommitOutcomeUnknownError as exc:
            log.warning(
                "%s: version %d is committed; publishing it failed (%s), a later open finishes it",
                v.label,
                v.version,
                exc,
            )
            unknown.append(v.label)
        else:
            tstore.write_hint(v.store, v.version)
    if lost:
        raise PartialTransactionError([v.label for v in versions if v.label not in lost], lost)
    if unknown:
        raise CommitOutcomeUnknownError(
            f"the transaction is decided, but the manifests of {unknown} could not be published yet; the next "
            "open of those tables finishes them unless a writer outside the store takes their versions first"
        )


def _reserve_all(
    ms: MultiTableStore,
    versions: list[TableVersion],
    records: list[VersionRecord],
    policy: RetryPolicy,
    deadline: float,
) -> None:
    def drop_staged() -> None:
        for v, rec in zip(versions, records):
            v.store.delete(rec.path)

    def read_back(cause: BaseException) -> list[VersionRecord | None]:
        try:
            return policy.read_back(lambda: [ms.get(r.table_key, r.version) for r in records], deadline)
        except (AmbiguousStoreError, StoreUnavailableError) as exc:
            raise CommitOutcomeUnknownError(
                f"cannot read back the multi-table transaction's rows ({cause}; then {exc}); the staged manifests "
                "are kept and the next open of each table finishes the commit if it happened"
            ) from exc

    for attempt in range(1, 4):
        try:
            ms.reserve_many(records)
            return
        except VersionExistsError as exc:
            rows = read_back(exc)
            if all(row is not None and row.transaction_uuid == r.transaction_uuid for row, r in zip(rows, records)):
                return  # an earlier attempt of ours landed
            drop_staged()
            taken = [
                v.label
                for v, row, r in zip(versions, rows, records)
                if row is not None and row.transaction_uuid != r.transaction_uuid
            ]
            raise CommitConflictError(records[0].version, f"tables {taken} changed concurrently") from exc
        except IncarnationMismatchError:
            drop_staged()
            raise
        except (AmbiguousStoreError, StoreUnavailableError) as exc:
            rows = read_back(exc)
            ours = [row is not None and row.transaction_uuid == r.transaction_uuid for row, r in zip(rows, records)]
            if all(ours):
                return
            if any(row is not None and not mine for row, mine in zip(rows, ours)):
                drop_staged()
                raise CommitConflictError(
                    records[0].version, "a table in the transaction changed concurrently"
                ) from exc
            if any(ours):  # cannot happen with one database transaction
                raise CommitOutcomeUnknownError(f"only some rows of the transaction are visible: {ours}") from exc
            if attempt == 3:
                raise CommitOutcomeUnknownError(
                    f"reserving the multi-table transaction: {exc}; the staged manifests are kept and the next "
                    "open of each table finishes the commit if it happened"
                ) from exc
