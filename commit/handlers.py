"""Commit handlers: how a version is won, found and repaired.

* :class:`NativeCommitHandler`: the manifest path itself is created with the
  object store's put-if-not-exists (a hard link on local disk, ``If-None-Match``
  on S3).  The directory listing is the source of truth.
* :class:`ExternalCommitHandler`: the manifest is staged as
  ``{final}-{uuid}``, the version is reserved in an external manifest store (the
  commit point), then copied to its final name, the row flipped to the final
  path and the staged object deleted.  Every step after the reservation is
  repair: idempotent, and run by whoever gets there first (readers included).
"""

from __future__ import annotations

import logging
import uuid
from typing import Protocol

from format import manifest as mf
from stores.errors import (
    AlreadyExistsError,
    AmbiguousStoreError,
    IncarnationMismatchError,
    ObjectNotFoundError,
    StoreError,
    StoreUnavailableError,
    VersionExistsError,
)
from stores.manifest_store import ManifestStore, VersionRecord
from stores.object_store import ObjectStore

from . import faults
from . import store as tstore
from .errors import (
    CommitConflictError,
    CommitOutcomeUnknownError,
    TableNotFoundError,
    UnrecoverableCommitError,
    VersionNotFoundError,
)

log = logging.getLogger(__name__)

CONFIG_COORDINATOR = "tessera.commit.coordinator"
CONFIG_STORE = "tessera.commit.store"
CONFIG_INCARNATION = "tessera.commit.incarnation"


class CommitHandler(Protocol):
    kind: str

    def commit(self, store: ObjectStore, version: int, data: bytes, scheme: mf.NamingScheme, txn_uuid: str) -> None:
        """Create ``version``; CommitConflictError if another writer has it."""

    def latest_version(self, store: ObjectStore) -> int:
        """The latest committed version (finishing a half-done commit)."""

    def versions_after(self, store: ObjectStore, version: int) -> list[int]:
        """Committed versions newer than ``version``, ascending."""

    def load(self, store: ObjectStore, version: int | None = None) -> mf.ManifestFile:
        """The manifest of ``version`` (default: latest), repaired if needed."""

    def config(self) -> dict[str, str]:
        """Entries recorded in a new table's config naming this coordinator."""


def _txn_uuid_of(data: bytes) -> str | None:
    try:
        m = mf.read_manifest(data)
    except Exception:  # noqa: BLE001 - unreadable means "cannot tell"
        return None
    return m.transaction.uuid if m.transaction is not None else None


class NativeCommitHandler:
    """Put-if-not-exists of the manifest path itself."""

    kind = "native"

    def check_store(self, store: ObjectStore) -> None:
        """An object store's conditional put is trusted only once it has been
        seen refusing a second write (the verdict is cached per endpoint and bucket)."""
        if getattr(store, "probe_scope", None) is not None:
            from stores.probe import probe_conditional_put

            probe_conditional_put(store)

    def commit(self, store: ObjectStore, version: int, data: bytes, scheme: mf.NamingScheme, txn_uuid: str) -> None:
        self.check_store(store)
        path = tstore.manifest_path(version, scheme)
        try:
            store.put_if_not_exists(path, data)
        except AlreadyExistsError as exc:
            raise CommitConflictError(version) from exc
        except AmbiguousStoreError as exc:
            # the create may have happened: read the object back and compare
            try:
                theirs = _txn_uuid_of(store.read(path))
            except ObjectNotFoundError:
                theirs = None
                # not there: it did not happen (a lost create would be visible now)
                try:
                    store.put_if_not_exists(path, data)
                    return
                except AlreadyExistsError as again:
                    theirs = _txn_uuid_of(store.read(path))
                    if theirs != txn_uuid:
                        raise CommitConflictError(version) from again
                    return
            if theirs == txn_uuid:
                return
            if theirs is None:
                raise CommitOutcomeUnknownError(f"creating {store.uri}/{path}: {exc}") from exc
            raise CommitConflictError(version) from exc

    def latest_version(self, store: ObjectStore) -> int:
        return tstore.latest_version(store)

    def versions_after(self, store: ObjectStore, version: int) -> list[int]:
        versions, _ = tstore.list_versions(store)
        return sorted(v for v in versions if v > version)

    def load(self, store: ObjectStore, version: int | None = None) -> mf.ManifestFile:
        return tstore.load_manifest(store, version)

    def config(self) -> dict[str, str]:
        return {}


class ExternalCommitHandler:
    """Stage, reserve in a manifest store, copy, flip, delete staged."""

    def __init__(self, manifest_store: ManifestStore, table_key: str, incarnation: str | None = None) -> None:
        self.ms = manifest_store
        self.kind = manifest_store.kind
        self.table_key = table_key
        self.incarnation = incarnation or uuid.uuid4().hex

    def check_store(self, store: ObjectStore) -> None:
        """Nothing to probe: the external store decides commits."""

    def config(self) -> dict[str, str]:
        return {
            CONFIG_COORDINATOR: self.kind,
            CONFIG_STORE: self.ms.identity(),
            CONFIG_INCARNATION: self.incarnation,
        }

    # -- writing -----------------------------------------------------------------------

    def commit(self, store: ObjectStore, version: int, data: bytes, scheme: mf.NamingScheme, txn_uuid: str) -> None:
        final = tstore.manifest_path(version, scheme)
        staged = f"{final}-{uuid.uuid4()}"
        store.put(staged, data)
        faults.point(faults.STAGED)
        record = VersionRecord(self.table_key, version, staged, len(data), txn_uuid, self.incarnation)
        self._reserve(store, record)
        faults.point(faults.RESERVED)
        try:
            self._finish(store, record, final)
        except (StoreError, OSError) as exc:
            # the version is ours: a later reader or writer finishes the repair
            log.warning("%s: version %d committed; finishing it failed (%s), a later open repairs it",
                        store.uri, version, exc)

    def _reserve(self, store: ObjectStore, record: VersionRecord) -> None:
        attempts = 0
        while True:
            attempts += 1
            try:
                self.ms.reserve(record)
                return
            except VersionExistsError as exc:
                row = self._read_back(record)
                if row is not None and row.transaction_uuid == record.transaction_uuid:
                    return  # our own earlier attempt (a lost response) won
                store.delete(record.path)  # unambiguous: another writer holds the version
                raise CommitConflictError(record.version) from exc
            except IncarnationMismatchError:
                store.delete(record.path)
                raise
            except (AmbiguousStoreError, StoreUnavailableError) as exc:
                row = self._read_back(record)
                if row is not None and row.transaction_uuid == record.transaction_uuid:
                    return
                if row is not None:
                    store.delete(record.path)
                    raise CommitConflictError(record.version) from exc
                if attempts >= 3:
                    # never delete the staged manifest after an ambiguous error
                    raise CommitOutcomeUnknownError(
                        f"reserving version {record.version} of {self.table_key}: {exc}; the staged manifest "
                        f"{record.path} is kept and a later open finishes the commit if it happened"
                    ) from exc

    def _read_back(self, record: VersionRecord) -> VersionRecord | None:
        for _ in range(3):
            try:
                return self.ms.get(record.table_key, record.version)
            except (AmbiguousStoreError, StoreUnavailableError):
                continue
        raise CommitOutcomeUnknownError(
            f"cannot read back version {record.version} of {self.table_key} to learn whether it was committed"
        )

    def _finish(self, store: ObjectStore, record: VersionRecord, final: str) -> None:
        """Copy staged -> final, flip the row, delete staged.  Idempotent."""
        if not store.exists(final):
            try:
                store.copy(record.path, final)
            except ObjectNotFoundError:
                if not store.exists(final):
                    raise UnrecoverableCommitError(record.version, record.path, store.uri)
        faults.point(faults.COPIED)
        self.ms.flip(record.table_key, record.version, record.path, final)
        faults.point(faults.FLIPPED)
        store.delete(record.path)

    # -- reading -----------------------------------------------------------------------

    def _final_path(self, store: ObjectStore, record: VersionRecord) -> str:
        """The final manifest path of a row, finishing its commit when needed."""
        if record.is_final:
            return record.path
        cut = record.path.rfind(".manifest-")
        if cut < 0:
            raise UnrecoverableCommitError(record.version, record.path, store.uri)
        final = record.path[: cut + len(".manifest")]
        if not store.exists(record.path) and not store.exists(final):
            raise UnrecoverableCommitError(record.version, record.path, store.uri)
        self._finish(store, record, final)
        return final

    def latest_version(self, store: ObjectStore) -> int:
        row = self.ms.latest(self.table_key)
        if row is None:
            raise TableNotFoundError(f"no table {self.table_key} in the manifest store {self.ms.identity()}")
        self._final_path(store, row)
        return row.version

    def versions_after(self, store: ObjectStore, version: int) -> list[int]:
        rows = self.ms.versions_after(self.table_key, version)
        for row in rows:
            self._final_path(store, row)
        return [r.version for r in rows]

    def load(self, store: ObjectStore, version: int | None = None) -> mf.ManifestFile:
        row = self.ms.latest(self.table_key) if version is None else self.ms.get(self.table_key, version)
        if row is None:
            if version is None:
                raise TableNotFoundError(f"no table {self.table_key} in the manifest store {self.ms.identity()}")
            raise VersionNotFoundError(f"version {version} of {self.table_key} does not exist")
        if row.incarnation != self.incarnation and self.incarnation_known:
            raise IncarnationMismatchError(
                f"{self.table_key} was dropped and recreated (incarnation {row.incarnation}, "
                f"this handle has {self.incarnation}); reopen the table"
            )
        path = self._final_path(store, row)
        try:
            data = store.read(path)
        except ObjectNotFoundError as exc:
            raise VersionNotFoundError(
                f"version {row.version} of {self.table_key} is recorded but its manifest {path} is gone "
                "(removed by version clean-up)"
            ) from exc
        mfile = mf.read_manifest(data, f"{store.uri}/{path}")
        mf.check_flags(mfile.manifest, writing=False)
        return mfile

    incarnation_known = False

    def adopt(self, incarnation: str) -> None:
        """Bind this handler to an existing table's incarnation."""
        self.incarnation = incarnation
        self.incarnation_known = True

    def repair(self, store: ObjectStore) -> list[str]:
        """Finish every half-done commit; report rows that cannot be finished."""
        problems = []
        for row in self.ms.versions_after(self.table_key, 0):
            try:
                self._final_path(store, row)
            except UnrecoverableCommitError as exc:
                problems.append(str(exc))
        return problems
