"""Commit handlers: how a version is won, found and repaired.

* :class:`NativeCommitHandler`: the manifest path itself is created with the
  object store's put-if-not-exists (a hard link on local disk, ``If-None-Match``
  on S3).  The directory listing is the source of truth.  Before the put the
  writer proves that the version it read is still the table's (the lineage
  check of :mod:`commit.lineage`), so a writer holding a dropped and recreated
  table's view is refused.
* :class:`ExternalCommitHandler`: the manifest is staged as
  ``{final}-{uuid}``, the version is reserved in an external manifest store
  (the commit point), then *published*: created at its final name with
  put-if-not-exists, the row flipped to the final path and the staged object
  deleted.  Every step after the reservation is repair: idempotent, and run by
  whoever gets there first (readers included).

Writers outside the store (pylance by URI) create final names directly.  Every
step that finds a final manifest already there compares its transaction uuid
with the row's: the same -> ours, finished by someone else; another -> the
version belongs to that writer, and the row is *adopted* for it (it now points
to their manifest and their transaction).  A writer whose version was adopted
away rebases and retries at the next version; it never acknowledges a commit
whose manifest is not the one at the final name.  Readers also adopt foreign
versions committed past the store's latest row.

An ambiguous store error never deletes a staged manifest: the outcome is read
back with the retry policy's patience (:meth:`RetryPolicy.read_back`), and is
ours, theirs, or unknown (:class:`CommitOutcomeUnknownError`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

from tessera.format import manifest as mf
from tessera.format.protos import table_pb2
from tessera.format.table import paths
from tessera.stores.errors import (
    AlreadyExistsError,
    AmbiguousStoreError,
    IncarnationMismatchError,
    ObjectNotFoundError,
    StoreError,
    StoreUnavailableError,
    VersionExistsError,
)
from tessera.stores.manifest_store import ManifestStore, VersionRecord
from tessera.stores.object_store import ObjectStore
from tessera.stores.probe import CONFIG_CONDITIONAL_PUT, probe_conditional_put, verdict_record

from . import faults
from . import store as tstore
from .errors import (
    BaseVersionGoneError,
    CommitConflictError,
    CommitOutcomeUnknownError,
    CoordinatorMismatchError,
    StoreIdentityMismatchError,
    TableNotFoundError,
    UnrecoverableCommitError,
    VersionNotFoundError,
)
from .lineage import CONFIG_INCARNATION, fingerprint_at, incarnation_of, transaction_uuid, transaction_uuid_of
from .retry import DEFAULT_POLICY, RetryPolicy
from .txn_files import repair_transaction_files

log = logging.getLogger(__name__)

CONFIG_COORDINATOR = "tessera.commit.coordinator"
CONFIG_STORE = "tessera.commit.store"
CONFIG_STORE_ID = "tessera.commit.store_id"
__all__ = [
    "CONFIG_COORDINATOR",
    "CONFIG_INCARNATION",
    "CONFIG_STORE",
    "CONFIG_STORE_ID",
    "CommitHandler",
    "ExternalCommitHandler",
    "NativeCommitHandler",
]


@runtime_checkable
class CommitHandler(Protocol):
    """Everything the commit path and the catalog need from a coordinator.

    A handler serves one table.  It is *bound* to the table's identity (its
    incarnation, and for an external store the store's id) by :meth:`bind`
    when a manifest is loaded, and refuses writers whose view disagrees."""

    #: "native", or the external store's kind ("sql", "redis", "dynamodb")
    kind: str
    #: the table's key in an external store (its normalised URI)
    table_key: str
    #: the table incarnation this handler writes (random until bound)
    incarnation: str
    #: retries, the shared wall-clock budget and read-back patience
    policy: RetryPolicy

    def check_store(self, store: ObjectStore) -> None:
        """Refuse an object store that cannot decide commits, before anything is written.

        Raises:
            ConditionalWriteUnsupportedError: the store ignores put-if-not-exists."""

    def config(self) -> dict[str, str]:
        """The identity entries every manifest this handler writes carries:
        coordinator, store id and URL, incarnation."""

    def bind(self, manifest: table_pb2.Manifest, uri: str) -> None:
        """Check that ``manifest`` is coordinated by this handler and adopt its identity.

        Raises:
            CoordinatorMismatchError: another coordinator (or another store) owns the table.
            StoreIdentityMismatchError: the store at this address is not the recorded one.
            IncarnationMismatchError: the handler is bound to another incarnation."""

    def commit(
        self,
        store: ObjectStore,
        version: int,
        data: bytes,
        scheme: mf.NamingScheme,
        txn_uuid: str,
        base: mf.ManifestFile | None,
        deadline: float | None = None,
    ) -> None:
        """Create ``version`` from the manifest bytes ``data`` built on ``base``.

        Returns only when the manifest at the final name is this writer's.

        Raises:
            CommitConflictError: another writer has the version (rebase and retry).
            BaseVersionGoneError: ``base`` was cleaned up (re-run on the latest).
            IncarnationMismatchError: the table was dropped and recreated since ``base`` was read.
            CommitOutcomeUnknownError: the store did not answer within the read-back window;
                nothing was deleted and a later open finishes the commit if it happened."""

    def verify_base(self, store: ObjectStore, base: mf.ManifestFile) -> None:
        """Check that ``base`` is still the table's version ``base.version``
        (raises like :meth:`commit`)."""

    def check_lineage(self, manifest: table_pb2.Manifest, uri: str) -> None:
        """Refuse a manifest of another incarnation met while rebasing
        (IncarnationMismatchError); adopt the incarnation when unbound."""

    def latest_version(self, store: ObjectStore) -> int:
        """The latest committed version (finishing a half-done commit).

        Raises:
            TableNotFoundError: no table."""

    def versions_after(self, store: ObjectStore, version: int) -> list[int]:
        """Committed versions newer than ``version``, ascending."""

    def load(self, store: ObjectStore, version: int | None = None) -> mf.ManifestFile:
        """The manifest of ``version`` (default: latest), repaired if needed.

        Raises:
            TableNotFoundError, VersionNotFoundError, UnrecoverableCommitError."""

    def table_exists(self, store: ObjectStore) -> bool:
        """Whether the coordinator knows any version of the table."""

    def repair(self, store: ObjectStore) -> list[str]:
        """Finish every half-done commit; describe those that cannot be finished."""

    def pending_paths(self) -> set[str]:
        """Staged manifests that a clean-up must keep (rows not yet finished)."""

    def close(self) -> None:
        """Release connections held for this table."""

    def commit_lock(self, store: ObjectStore, deadline: float | None) -> AbstractContextManager[bool]:
        """A context that orders this machine's writers of the table around
        one commit (yields True when held; False: go on without it).  For
        speed only: the put decides who wins a version."""


# ---------------------------------------------------------------------------- shared

#: the longest a commit waits for this machine's commit lock before going on without it (seconds)
COMMIT_LOCK_WAIT = 5.0


def local_commit_lock(store: ObjectStore, deadline: float | None) -> AbstractContextManager[bool]:
    """The advisory commit lock of a table on local disk (``_versions/`` holds
    its file), else none.  Writers that take it do not race one another for a
    version: one builds and puts its manifest while the others wait, instead
    of all building on the same base, all but one losing, rebasing and
    sleeping a jitter.  Waited for :data:`COMMIT_LOCK_WAIT` at most (never
    past ``deadline``)."""
    lock = getattr(store, "advisory_lock", None)
    if lock is None:
        return contextlib.nullcontext(False)
    wait = COMMIT_LOCK_WAIT
    if deadline is not None:
        wait = max(0.0, min(wait, deadline - time.monotonic()))
    return lock(paths.COMMIT_LOCK_FILE, wait)


def _bind_incarnation(
    handler: NativeCommitHandler | ExternalCommitHandler, manifest: table_pb2.Manifest, uri: str
) -> None:
    inc = incarnation_of(manifest)
    if inc is None:
        return  # a table from before incarnations (or a foreign writer dropped config): adopted on write
    if handler.bound and inc != handler.incarnation:
        raise IncarnationMismatchError(
            f"{uri} version {manifest.version} belongs to incarnation {inc}, but this writer read incarnation "
            f"{handler.incarnation}: the table was dropped and recreated since; reopen it"
        )
    handler.incarnation, handler.bound = inc, True


class NativeCommitHandler:
    """Put-if-not-exists of the manifest path itself."""

    kind = "native"
    table_key = ""

    def __init__(self, policy: RetryPolicy | None = None) -> None:
        self.policy = policy or DEFAULT_POLICY
        self.incarnation = uuid.uuid4().hex
        self.bound = False
        #: table URI -> the manifest naming scheme last read there
        self._naming: dict[str, mf.NamingScheme] = {}
        #: (table URI, path, bytes) of the manifest last read back after a lost create
        self._read_back: tuple[str, str, bytes] | None = None
        #: the bound manifest's recorded probe verdict, and the one this writer's manifests record
        self.put_recorded: str | None = None
        self.put_record: str | None = None

    def check_store(self, store: ObjectStore) -> None:
        """An object store's conditional put is trusted only once it has been
        seen refusing a second write: by this process (the verdict is cached per
        endpoint and bucket), or by the writer whose verdict the table's
        manifest records for this endpoint and bucket (see :mod:`stores.probe`)."""
        if getattr(store, "probe_scope", None) is not None:
            probe_conditional_put(store, self.put_recorded)
            self.put_record = verdict_record(store, self.put_recorded)

    def config(self) -> dict[str, str]:
        if self.put_record:
            return {CONFIG_INCARNATION: self.incarnation, CONFIG_CONDITIONAL_PUT: self.put_record}
        return {CONFIG_INCARNATION: self.incarnation}

    def bind(self, manifest: table_pb2.Manifest, uri: str) -> None:
        recorded = manifest.config.get(CONFIG_COORDINATOR, "native")
        if recorded != "native":
            raise CoordinatorMismatchError(
                f"{uri} is coordinated by {recorded!r} ({manifest.config.get(CONFIG_STORE)}), but this writer "
                "commits natively; mixing coordinators loses commits. Open it with commit_store=<that store's URL>."
            )
        _bind_incarnation(self, manifest, uri)
        self.put_recorded = manifest.config.get(CONFIG_CONDITIONAL_PUT) or None

    def check_lineage(self, manifest: table_pb2.Manifest, uri: str) -> None:
        _bind_incarnation(self, manifest, uri)

    # -- writing -----------------------------------------------------------------------

    def verify_base(self, store: ObjectStore, base: mf.ManifestFile) -> None:
        scheme = base.naming or tstore.list_versions(store)[1] or mf.NamingScheme.V2
        path = paths.manifest_path(base.version, scheme)
        found = self.policy.read_back(lambda: fingerprint_at(store, path))
        if found is not None and (base.fingerprint is None or found == base.fingerprint):
            if base.fingerprint is not None:
                return
            # no fingerprint kept: compare whose manifest it is
            current = tstore.load_manifest(store, base.version)
            if transaction_uuid(current) == transaction_uuid(base) and transaction_uuid(base) is not None:
                return
        if found is None:
            self._base_gone(store, base)
        raise IncarnationMismatchError(
            f"version {base.version} of {store.uri} is not the manifest this writer read: the table was dropped "
            "and recreated since (nothing was written); reopen it"
        )

    def _base_gone(self, store: ObjectStore, base: mf.ManifestFile) -> None:
        """The version we read is gone: cleaned up (same table: re-run on the
        latest) or dropped with the table (refused)."""
        try:
            latest = tstore.load_manifest(store)
        except TableNotFoundError:
            raise IncarnationMismatchError(
                f"{store.uri} was dropped since this writer read version {base.version} (nothing was written)"
            ) from None
        inc = incarnation_of(latest.manifest)
        if inc is not None and self.bound and inc == self.incarnation and latest.version > base.version:
            raise BaseVersionGoneError(
                latest.version, f"version {base.version}, which this writer read, was cleaned up; re-run on the latest"
            )
        raise IncarnationMismatchError(
            f"version {base.version} of {store.uri}, which this writer read, is gone and the table's latest "
            f"version {latest.version} is of incarnation {inc}, not {self.incarnation if self.bound else 'unknown'}: "
            "the table was dropped and recreated since (nothing was written); reopen it"
        )

    def commit(
        self,
        store: ObjectStore,
        version: int,
        data: bytes,
        scheme: mf.NamingScheme,
        txn_uuid: str,
        base: mf.ManifestFile | None,
        deadline: float | None = None,
    ) -> None:
        self.check_store(store)
        self._read_back = None  # only the rebase right after this commit may use a read-back
        if base is not None:
            self.verify_base(store, base)
        path = paths.manifest_path(version, scheme)
        for _ in range(3):
            try:
                store.put_if_not_exists(path, data)
                return
            except AlreadyExistsError as exc:
                theirs = self._owner(store, path, deadline)
                if theirs == txn_uuid:
                    return  # an earlier attempt of ours whose reply was lost
                raise CommitConflictError(version) from exc
            except (AmbiguousStoreError, StoreUnavailableError) as exc:
                # the create may have happened: read the object back and compare
                theirs = self._owner(store, path, deadline, exc)
                if theirs == txn_uuid:
                    return
                if theirs is not None:
                    raise CommitConflictError(version) from exc
                # not there: it did not happen (a lost create would be visible now); try again
        raise CommitOutcomeUnknownError(f"creating {store.uri}/{path} kept failing; check the table's history")

    def _owner(
        self, store: ObjectStore, path: str, deadline: float | None, cause: BaseException | None = None
    ) -> str | None:
        """The transaction uuid of the manifest at ``path`` (None: absent;
        "?" when it exists but names none)."""

        def read() -> str | None:
            try:
                data = store.read(path)
            except ObjectNotFoundError:
                return None
            # the winner's manifest: the rebase that follows reads this very
            # version first, and a committed manifest never changes
            self._read_back = (store.uri, path, data)
            return transaction_uuid_of(data) or "?"

        try:
            return self.policy.read_back(read, deadline)
        except (AmbiguousStoreError, StoreUnavailableError) as exc:
            raise CommitOutcomeUnknownError(
                f"creating {store.uri}/{path}: {cause or exc}; reading it back failed too ({exc})"
            ) from exc

    # -- reading -----------------------------------------------------------------------

    def latest_version(self, store: ObjectStore) -> int:
        return tstore.latest_version(store)

    def versions_after(self, store: ObjectStore, version: int) -> list[int]:
        return mf.versions_newer(store.list(paths.VERSIONS_DIR), version)

    def load(self, store: ObjectStore, version: int | None = None) -> mf.ManifestFile:
        # a given version is read by name in the scheme last seen for this
        # table (a rebase reads each version after its base: no listing each)
        naming = self._naming.get(store.uri) if version is not None else None
        seen, self._read_back = self._read_back, None
        if seen is not None and naming is not None and version is not None:
            uri, path, data = seen
            if uri == store.uri and path == paths.manifest_path(version, naming):
                return tstore.checked_manifest(store, path, data, version)  # read back after a lost create
        mfile = tstore.load_manifest(store, version, naming)
        if mfile.naming is not None:
            self._naming[store.uri] = mfile.naming
        return mfile

    def table_exists(self, store: ObjectStore) -> bool:
        return bool(tstore.list_versions(store)[0])

    def repair(self, store: ObjectStore) -> list[str]:
        """A native commit is one put: nothing is ever half done.  Transaction
        files a power loss emptied are rewritten from their manifests."""
        names, naming = tstore.list_versions(store)

        def manifests() -> Iterator[mf.ManifestFile]:
            for v in sorted(names):
                with contextlib.suppress(VersionNotFoundError):  # cleaned up meanwhile
                    yield tstore.load_manifest(store, v, naming)

        repair_transaction_files(store, manifests())
        return []

    def pending_paths(self) -> set[str]:
        return set()

    def close(self) -> None:
        pass

    def commit_lock(self, store: ObjectStore, deadline: float | None) -> AbstractContextManager[bool]:
        return local_commit_lock(store, deadline)


class ExternalCommitHandler:
    """Stage, reserve in a manifest store, publish (create-only), flip, delete staged."""

    def __init__(
        self,
        manifest_store: ManifestStore,
        table_key: str,
        incarnation: str | None = None,
        policy: RetryPolicy | None = None,
    ) -> None:
        self.ms = manifest_store
        self.kind = manifest_store.kind
        self.table_key = table_key
        self.incarnation = incarnation or uuid.uuid4().hex
        self.bound = incarnation is not None
        self.policy = policy or DEFAULT_POLICY

    def check_store(self, store: ObjectStore) -> None:
        """Nothing to probe: the external store decides commits."""

    def config(self) -> dict[str, str]:
        return {
            CONFIG_COORDINATOR: self.kind,
            CONFIG_STORE: self.ms.identity(),
            CONFIG_STORE_ID: self.ms.store_id(),
            CONFIG_INCARNATION: self.incarnation,
        }

    def bind(self, manifest: table_pb2.Manifest, uri: str) -> None:
        cfg = manifest.config
        if CONFIG_COORDINATOR not in cfg and self._bind_unmarked(manifest, uri):
            return
        recorded = cfg.get(CONFIG_COORDINATOR, "native")
        if recorded != self.kind:
            raise CoordinatorMismatchError(
                f"{uri} is coordinated by {recorded!r}"
                + (f" ({cfg.get(CONFIG_STORE)})" if recorded != "native" else "")
                + f", but this writer uses {self.kind!r}; mixing coordinators loses commits. "
                + (
                    "Open it with commit_store=<that store's URL>."
                    if recorded != "native"
                    else "Open it without commit_store."
                )
            )
        self.check_store_identity(cfg, uri)
        _bind_incarnation(self, manifest, uri)

    def _bind_unmarked(self, manifest: table_pb2.Manifest, uri: str) -> bool:
        """A manifest without Tessera's identity entries that this store
        recorded (pylance committing through Tessera's Lance Namespace writes
        them so): the store coordinates the table, and its row says the
        incarnation.  False when the store has no such row."""
        row = self.ms.get(self.table_key, manifest.version)
        if row is None:
            return False
        if self.bound and row.incarnation != self.incarnation:
            raise IncarnationMismatchError(
                f"{uri} version {manifest.version} belongs to incarnation {row.incarnation}, but this writer read "
                f"incarnation {self.incarnation}: the table was dropped and recreated since; reopen it"
            )
        self.incarnation, self.bound = row.incarnation, True
        return True

    def check_store_identity(self, cfg, uri: str) -> None:
        """The store's own id must be the recorded one; tables from before
        store ids were recorded by URL, which must then match (they record
        the id on their next write)."""
        recorded_id = cfg.get(CONFIG_STORE_ID)
        if recorded_id:
            mine = self.ms.store_id()
            if recorded_id != mine:
                raise StoreIdentityMismatchError(uri, recorded_id, cfg.get(CONFIG_STORE), mine, self.ms.identity())
            return
        recorded_url = cfg.get(CONFIG_STORE)
        if recorded_url and recorded_url != self.ms.identity():
            raise CoordinatorMismatchError(
                f"{uri} is coordinated by the {self.kind} store {recorded_url}, not {self.ms.identity()}"
            )

    def check_lineage(self, manifest: table_pb2.Manifest, uri: str) -> None:
        _bind_incarnation(self, manifest, uri)

    def verify_base(self, store: ObjectStore, base: mf.ManifestFile) -> None:
        """The store's row of ``base.version`` must still be the one read (a
        reservation also checks its predecessor's incarnation, so commits
        need not call this; rebases and failed reads do)."""
        row = self.policy.read_back(lambda: self.ms.get(self.table_key, base.version))
        mine = transaction_uuid(base)
        if (
            row is not None
            and (not self.bound or row.incarnation == self.incarnation)
            and (mine is None or row.transaction_uuid == mine)
        ):
            return
        raise IncarnationMismatchError(
            f"version {base.version} of {self.table_key} is not the one this writer read "
            + (
                "(it is gone)"
                if row is None
                else f"(incarnation {row.incarnation}, transaction {row.transaction_uuid})"
            )
            + ": the table was dropped and recreated since (nothing was written); reopen it"
        )

    # -- writing -----------------------------------------------------------------------

    def commit(
        self,
        store: ObjectStore,
        version: int,
        data: bytes,
        scheme: mf.NamingScheme,
        txn_uuid: str,
        base: mf.ManifestFile | None,
        deadline: float | None = None,
    ) -> None:
        final = paths.manifest_path(version, scheme)
        record = self.stage(store, version, data, scheme, txn_uuid)
        self.reserve(store, record, deadline)
        faults.point(faults.RESERVED)
        self.complete(store, record, final, data, deadline)

    def stage(
        self, store: ObjectStore, version: int, data: bytes, scheme: mf.NamingScheme, txn_uuid: str
    ) -> VersionRecord:
        """Write the staged manifest; the record to reserve for it."""
        final = paths.manifest_path(version, scheme)
        staged = paths.staged_manifest_path(final)
        store.put(staged, data)
        faults.point(faults.STAGED)
        return VersionRecord(self.table_key, version, staged, len(data), txn_uuid, self.incarnation)

    def complete(
        self, store: ObjectStore, record: VersionRecord, final: str, data: bytes, deadline: float | None = None
    ) -> None:
        """After our reservation: publish, flip, delete staged.  Raises
        CommitConflictError when a foreign writer's manifest took the final
        name (the row is adopted for it), CommitOutcomeUnknownError when the
        manifest could not be published within the read-back window."""
        if not self.publish(store, record, final, data, deadline):
            raise CommitConflictError(record.version, "a writer outside the manifest store committed it first")
        faults.point(faults.COPIED)
        try:
            self.ms.flip(record.table_key, record.version, record.path, final)
            faults.point(faults.FLIPPED)
            store.delete(record.path)
        except (StoreError, OSError) as exc:
            # the final manifest is ours and in place: a later open flips the row
            log.warning(
                "%s: version %d committed; flipping its row failed (%s), a later open finishes it",
                store.uri,
                record.version,
                exc,
            )

    def reserve(self, store: ObjectStore, record: VersionRecord, deadline: float | None = None) -> None:
        """Reserve ``record``; on an ambiguous answer, read it back with patience."""
        attempts = 0
        while True:
            attempts += 1
            try:
                self.ms.reserve(record)
                return
            except VersionExistsError as exc:
                row = self._read_back(record, deadline, exc)
                if row is not None and row.transaction_uuid == record.transaction_uuid:
                    return  # our own earlier attempt (a lost response) won
                store.delete(record.path)  # unambiguous: another writer holds the version
                raise CommitConflictError(record.version) from exc
            except IncarnationMismatchError:
                store.delete(record.path)
                raise
            except (AmbiguousStoreError, StoreUnavailableError) as exc:
                row = self._read_back(record, deadline, exc)
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

    def _read_back(self, record: VersionRecord, deadline: float | None, cause: BaseException) -> VersionRecord | None:
        try:
            return self.policy.read_back(lambda: self.ms.get(record.table_key, record.version), deadline)
        except (AmbiguousStoreError, StoreUnavailableError) as exc:
            raise CommitOutcomeUnknownError(
                f"cannot read back version {record.version} of {self.table_key} to learn whether it was committed "
                f"({cause}; then {exc}); the staged manifest {record.path} is kept and a later open finishes the "
                "commit if it happened"
            ) from exc

    def publish(
        self, store: ObjectStore, record: VersionRecord, final: str, data: bytes | None, deadline: float | None = None
    ) -> bool:
        """Create the row's manifest at ``final`` (create-only).  True when the
        manifest there is the row's; False when it is a foreign writer's (the
        row is then adopted for that writer and our staged copy deleted)."""

        def attempt() -> str:
            if data is not None:
                try:
                    _create_final(store, record.path, final, data)
                    return record.transaction_uuid
                except AlreadyExistsError:
                    pass
                except AmbiguousStoreError:
                    pass  # read what is there
                except OSError as exc:  # a local disk error: nothing was created, try again
                    raise StoreUnavailableError(f"cannot write {store.uri}/{final}: {exc}") from exc
            try:
                existing = store.read(final)
            except ObjectNotFoundError:
                if data is None:
                    raise UnrecoverableCommitError(record.version, record.path, store.uri) from None
                raise AmbiguousStoreError(f"{store.uri}/{final} is not there yet") from None
            return transaction_uuid_of(existing) or _foreign_id(existing)

        try:
            owner = self.policy.read_back(attempt, deadline)
        except (AmbiguousStoreError, StoreUnavailableError) as exc:
            raise CommitOutcomeUnknownError(
                f"version {record.version} of {self.table_key} is reserved, but its manifest could not be "
                f"published at {store.uri}/{final} ({exc}); the staged manifest {record.path} is kept and a later "
                "open finishes the commit"
            ) from exc
        if owner == record.transaction_uuid:
            return True
        self._adopt_row(store, record, final, owner)
        return False

    def _adopt_row(self, store: ObjectStore, record: VersionRecord, final: str, owner: str) -> None:
        adopted = self.ms.adopt(record.table_key, record.version, record.path, final, owner)
        log.warning(
            "%s: version %d was committed by a writer outside the manifest store (transaction %s); "
            "the store now records it as theirs%s",
            store.uri,
            record.version,
            owner,
            "" if adopted else " (someone else recorded it first)",
        )
        try:
            store.delete(record.path)
        except (StoreError, OSError):
            pass  # an orphan: removed by clean-up

    # -- reading -----------------------------------------------------------------------

    def _final_path(self, store: ObjectStore, record: VersionRecord) -> str:
        """The final manifest path of a row, finishing its commit when needed."""
        if record.is_final:
            return record.path
        final = paths.final_manifest_path(record.path)
        if final is None:
            raise UnrecoverableCommitError(record.version, record.path, store.uri)
        try:
            data: bytes | None = store.read(record.path)
        except ObjectNotFoundError:
            data = None
        if self.publish(store, record, final, data):
            faults.point(faults.COPIED)
            self.ms.flip(record.table_key, record.version, record.path, final)
            faults.point(faults.FLIPPED)
            if data is not None:
                store.delete(record.path)
        return final

    def _latest_row(self, store: ObjectStore) -> VersionRecord:
        """The latest row, finished, after adopting versions that writers
        outside the store committed past it."""
        row = self.ms.latest(self.table_key)
        if row is None:
            raise TableNotFoundError(f"no table {self.table_key} in the manifest store {self.ms.identity()}")
        final = self._final_path(store, row)
        scheme = mf.parse_manifest_name(final.rsplit("/", 1)[-1])
        naming = scheme[1] if scheme else mf.NamingScheme.V2
        while True:
            nxt = paths.manifest_path(row.version + 1, naming)
            try:
                data = store.read(nxt)
            except ObjectNotFoundError:
                return row
            owner = transaction_uuid_of(data) or _foreign_id(data)
            found = VersionRecord(self.table_key, row.version + 1, nxt, len(data), owner, row.incarnation)
            # a Tessera writer reserves its row before it publishes the final
            # name, so a row there now is no foreign commit: the latest row was
            # read before that writer's reservation (finished below)
            got = self.ms.get(self.table_key, found.version)
            if got is None:
                try:
                    if self.ms.reserve(found):  # False: another reader recorded it first (and said so)
                        log.warning(
                            "%s: version %d was committed by a writer outside the manifest store (transaction %s); "
                            "recorded it",
                            store.uri,
                            found.version,
                            owner,
                        )
                except VersionExistsError:
                    pass  # a writer reserved it meanwhile: its row is read below (and finished)
                except StoreError as exc:
                    log.warning(
                        "%s: cannot record version %d committed outside the store (%s)", store.uri, found.version, exc
                    )
                    return row
                got = self.ms.get(self.table_key, found.version)
            if got is None:
                return row
            self._final_path(store, got)
            row = got

    def latest_version(self, store: ObjectStore) -> int:
        return self._latest_row(store).version

    def versions_after(self, store: ObjectStore, version: int) -> list[int]:
        rows = self.ms.versions_after(self.table_key, version)
        for row in rows:
            self._final_path(store, row)
        return [r.version for r in rows]

    def load(self, store: ObjectStore, version: int | None = None) -> mf.ManifestFile:
        if version is None:
            row: VersionRecord | None = self._latest_row(store)
        else:
            row = self.ms.get(self.table_key, version)
            if row is None:
                latest = self.ms.latest(self.table_key)
                if latest is not None and version > latest.version:
                    self._latest_row(store)  # adopt foreign versions, then look again
                    row = self.ms.get(self.table_key, version)
        if row is None:
            raise VersionNotFoundError(f"version {version} of {self.table_key} does not exist")
        if row.incarnation != self.incarnation and self.bound:
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
        from .lineage import fingerprint

        mfile.fingerprint = fingerprint(data)
        return mfile

    def table_exists(self, store: ObjectStore) -> bool:
        return self.ms.latest(self.table_key) is not None

    def repair(self, store: ObjectStore) -> list[str]:
        """Finish every half-done commit; report rows that cannot be finished."""
        problems = []
        finished = []
        for row in self.ms.versions_after(self.table_key, 0):
            try:
                self._final_path(store, row)
                finished.append(row.version)
            except UnrecoverableCommitError as exc:
                problems.append(str(exc))
        # transaction files a power loss emptied, rewritten from their manifests
        repair_transaction_files(store, (m for v in finished if (m := self._load_quiet(store, v)) is not None))
        return problems

    def _load_quiet(self, store: ObjectStore, version: int) -> mf.ManifestFile | None:
        try:
            return self.load(store, version)
        except (VersionNotFoundError, IncarnationMismatchError):
            return None  # recorded but cleaned up behind the store: nothing to repair

    def pending_paths(self) -> set[str]:
        return {r.path for r in self.ms.versions_after(self.table_key, 0) if not r.is_final}

    def close(self) -> None:
        self.ms.close()

    def commit_lock(self, store: ObjectStore, deadline: float | None) -> AbstractContextManager[bool]:
        return local_commit_lock(store, deadline)


def _foreign_id(data: bytes) -> str:
    """An id for a foreign manifest that names no transaction (content hash)."""
    return "foreign-" + hashlib.sha256(data).hexdigest()[:40]


def _create_final(store: ObjectStore, staged: str, final: str, data: bytes) -> None:
    """Create ``final`` holding ``data`` (create-only; AlreadyExistsError when taken).
    A local store links the staged file (``data``, already written and fsynced)
    to the final name instead of writing and fsyncing the bytes again."""
    link = getattr(store, "link_if_not_exists", None)
    if link is not None:
        try:
            link(staged, final)
            return
        except ObjectNotFoundError:
            pass  # the staged file is gone (cleaned up by a reader that finished the commit?): write it
        except AlreadyExistsError:
            raise
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
                raise
    store.put_if_not_exists(final, data)
