"""The external-store commit handler: stage, reserve, publish, flip, delete staged.

The manifest is staged as ``{final}-{uuid}``, the version is reserved in an
external manifest store (the commit point), then *published*: created at its
final name with put-if-not-exists, the row flipped to the final path and the
staged object deleted.  Every step after the reservation is repair:
idempotent, and run by whoever gets there first (readers included).

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
import dataclasses
import hashlib
import logging
import threading
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager

from tessera.format.protos import table_pb2
from tessera.format.table import manifest as mf
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
from tessera.stores.local import durability
from tessera.stores.manifest_store import ManifestStore, VersionRecord
from tessera.stores.object_store import ObjectStore

from .. import faults
from .. import store as tstore
from ..errors import (
    CommitConflictError,
    CommitOutcomeUnknownError,
    CoordinatorMismatchError,
    StoreIdentityMismatchError,
    TableNotFoundError,
    UnrecoverableCommitError,
    VersionNotFoundError,
)
from ..lineage import (
    CONFIG_INCARNATION,
    FragmentSample,
    foreign_base,
    fragment_sample,
    transaction_uuid,
    transaction_uuid_of,
)
from ..retry import DEFAULT_POLICY, RetryPolicy
from ..txn_files import repair_transaction_files
from .base import (
    CONFIG_COORDINATOR,
    CONFIG_STORE,
    CONFIG_STORE_ID,
    CommitsItself,
    VersionEntry,
    bind_incarnation,
    create_final,
    local_commit_lock,
)

__all__ = ["ExternalCommitHandler"]

log = logging.getLogger(__name__)

#: tables whose foreign versions were reported at WARNING in this process (then DEBUG)
_FOREIGN_REPORTED: set[str] = set()
_FOREIGN_LOCK = threading.Lock()


@dataclasses.dataclass(frozen=True)
class _Seen:
    """A table's latest version as this process last read or committed it
    through a store: its incarnation and, when this process committed it
    from a manifest without Tessera's entries, its first fragments
    (:func:`lineage.fragment_sample`)."""

    incarnation: str
    version: int
    files: FragmentSample | None = None


#: by (store identity, table key): what a staged manifest without Tessera's
#: entries is checked against and claims (see :meth:`ExternalCommitHandler.claim_staged`)
_SEEN: dict[tuple[str, str], _Seen] = {}
_SEEN_MAX = 4096


def _saw(ms: ManifestStore, table_key: str, seen: _Seen) -> None:
    key = (ms.identity(), table_key)
    old = _SEEN.get(key)
    if old is not None and seen.files is None and (old.incarnation, old.version) == (seen.incarnation, seen.version):
        return  # the version committed here, listed since: its files are still known
    if len(_SEEN) >= _SEEN_MAX:
        _SEEN.clear()
    _SEEN[key] = seen


def _report_foreign(uri: str, message: str, *args: object) -> None:
    """A version committed outside the manifest store, recorded: WARNING the
    first time for a table in this process, DEBUG after (a pylance writer
    beside Tessera's makes one per version, each seen by every reader)."""
    with _FOREIGN_LOCK:
        first = uri not in _FOREIGN_REPORTED
        _FOREIGN_REPORTED.add(uri)
    if first:
        log.warning(message + "; later ones of this table are logged at DEBUG", uri, *args)
    else:
        log.debug(message, uri, *args)


class ExternalCommitHandler(CommitsItself):
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
        bind_incarnation(self, manifest, uri)

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
        bind_incarnation(self, manifest, uri)

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
        record = self.stage(store, version, data, scheme, txn_uuid)
        self.commit_staged(store, version, record.path, data, scheme, txn_uuid, deadline)

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

    def reserve(
        self, store: ObjectStore, record: VersionRecord, deadline: float | None = None, *, keep_refused: bool = False
    ) -> None:
        """Reserve ``record``; on an ambiguous answer, read it back with patience.
        ``keep_refused``: when the store refuses the record's predecessor
        (missing, or another incarnation's), keep the staged manifest (the
        caller looks closer before it gives up)."""
        attempts = 0
        # a store that syncs its own writes (SQLite) follows the table's durability
        unsynced = durability("none") if not getattr(store, "syncs", True) else contextlib.nullcontext()
        while True:
            attempts += 1
            try:
                with unsynced:
                    self.ms.reserve(record)
                return
            except VersionExistsError as exc:
                row = self._read_back(record, deadline, exc)
                if row is not None and row.transaction_uuid == record.transaction_uuid:
                    return  # our own earlier attempt (a lost response) won
                store.delete(record.path)  # unambiguous: another writer holds the version
                raise CommitConflictError(record.version) from exc
            except IncarnationMismatchError:
                if not keep_refused:
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
                    create_final(store, record.path, final, data)
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
        _report_foreign(
            store.uri,
            "%s: version %d was committed by a writer outside the manifest store (transaction %s); "
            "the store now records it as theirs%s",
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
        _saw(self.ms, self.table_key, _Seen(row.incarnation, row.version))
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
            # name, so a row there now is no foreign commit: it was reserved
            # after the latest row was read, which is the answer (the latest
            # when read; chasing writers that commit faster than this store
            # answers would never end)
            if self.ms.get(self.table_key, found.version) is not None:
                return row
            try:
                if self.ms.reserve(found):  # False: another reader recorded it first (and said so)
                    _report_foreign(
                        store.uri,
                        "%s: version %d was committed by a writer outside the manifest store (transaction %s); "
                        "recorded it",
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

    def load_after(self, store: ObjectStore, version: int) -> list[mf.ManifestFile]:
        """One store query for the rows after ``version``; their manifests read together."""
        rows = self.ms.versions_after(self.table_key, version)
        for row in rows:
            self._check_incarnation(row)
        finals = [self._final_path(store, row) for row in rows]
        try:
            datas = tstore.read_all(store, finals)
        except ObjectNotFoundError as exc:
            raise VersionNotFoundError(
                f"a version of {self.table_key} after {version} is recorded but its manifest is gone "
                f"(removed by version clean-up): {exc}"
            ) from exc
        return [tstore.parsed_manifest(store, path, data) for path, data in zip(finals, datas, strict=True)]

    def _check_incarnation(self, row: VersionRecord) -> None:
        if row.incarnation != self.incarnation and self.bound:
            raise IncarnationMismatchError(
                f"{self.table_key} was dropped and recreated (incarnation {row.incarnation}, "
                f"this handle has {self.incarnation}); reopen the table"
            )

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
        self._check_incarnation(row)
        path = self._final_path(store, row)
        try:
            data = store.read(path)
        except ObjectNotFoundError as exc:
            raise VersionNotFoundError(
                f"version {row.version} of {self.table_key} is recorded but its manifest {path} is gone "
                "(removed by version clean-up)"
            ) from exc
        return tstore.parsed_manifest(store, path, data)

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

    # -- managed versioning's server half ---------------------------------------------

    def latest_entry(self, store: ObjectStore) -> VersionEntry | None:
        try:
            row = self._latest_row(store)
        except TableNotFoundError:
            return None
        # _latest_row finished the row's commit; a row read before that still names the staged file
        rel = row.path if row.is_final else (paths.final_manifest_path(row.path) or row.path)
        return VersionEntry(row.version, rel, row.size)

    def commit_staged(
        self,
        store: ObjectStore,
        version: int,
        staged: str,
        data: bytes,
        scheme: mf.NamingScheme,
        txn_uuid: str,
        deadline: float | None = None,
    ) -> None:
        """Reserve the row for the staged file (the commit point), then publish, flip and delete it."""
        record = VersionRecord(self.table_key, version, staged, len(data), txn_uuid, self.incarnation)
        self.reserve(store, record, deadline)
        faults.point(faults.RESERVED)
        self.complete(store, record, paths.manifest_path(version, scheme), data, deadline)

    def claim_staged(
        self,
        store: ObjectStore,
        staged: str,
        data: bytes,
        mfile: mf.ManifestFile,
        scheme: mf.NamingScheme,
        txn_uuid: str,
        uri: str,
        on_ask: Callable[[], None] | None = None,
    ) -> bool:
        """Managed versioning's short way for a staged manifest of version 2
        or later: reserve its row straight away (then publish and flip), the
        store checking in that one atomic request what the long way reads the
        latest row and manifest for: the version is free and its predecessor
        exists and is the claimed incarnation's.  The incarnation claimed is
        the staged manifest's own (pylance keeps the config of the manifest it
        built on; its coordinator and store are checked first, as ``bind``
        checks them).  A manifest without Tessera's entries (a table pylance
        created) claims the incarnation of the version this process committed
        last, when that is the predecessor and the manifest keeps its
        fragments (:func:`lineage.foreign_base`: a table recreated under the
        writer is told by its data files).

        False, with nothing written and the staged manifest kept, when the
        store refused the predecessor (out of order, another incarnation) or
        nothing known here lets the short way decide: the caller takes the
        long way, which reads the latest version and says what is wrong.  A
        version already taken is a :class:`CommitConflictError` (unless it is
        this very manifest's: a re-send finishes it); otherwise raises what
        :meth:`commit_staged` raises."""
        manifest = mfile.manifest
        was = self.incarnation, self.bound
        if CONFIG_COORDINATOR in manifest.config:
            if manifest.config.get(CONFIG_INCARNATION) is None:
                return False
            try:
                self.bind(manifest, uri)  # the coordinator and store it names must be this handler's
            except (CoordinatorMismatchError, StoreIdentityMismatchError, IncarnationMismatchError):
                self.incarnation, self.bound = was
                return False  # the long way checks the latest manifest, and says what is wrong
        else:
            seen = _SEEN.get((self.ms.identity(), self.table_key))
            if seen is None or seen.files is None or seen.version != manifest.version - 1:
                return False
            if foreign_base(mfile, seen.files) is not None:
                return False  # the long way reads the latest manifest and refuses it
            self.incarnation, self.bound = seen.incarnation, True
        version = manifest.version
        record = VersionRecord(self.table_key, version, staged, len(data), txn_uuid, self.incarnation)
        faults.point(faults.CHECKED)
        if on_ask is not None:
            on_ask()
        try:
            self.reserve(store, record, keep_refused=True)
        except IncarnationMismatchError:
            self.incarnation, self.bound = was
            return False
        faults.point(faults.RESERVED)
        self.complete(store, record, paths.manifest_path(version, scheme), data)
        self.remember_accepted(mfile)
        return True

    def remember_accepted(self, mfile: mf.ManifestFile) -> None:
        """``mfile`` is now this table's version (committed here): what the
        short way of the next staged manifest checks it against."""
        manifest = mfile.manifest
        sample = None if CONFIG_COORDINATOR in manifest.config else fragment_sample(manifest)
        _saw(self.ms, self.table_key, _Seen(self.incarnation, manifest.version, sample))


def _foreign_id(data: bytes) -> str:
    """An id for a foreign manifest that names no transaction (content hash)."""
    return "foreign-" + hashlib.sha256(data).hexdigest()[:40]
