"""The native commit handler: the manifest path itself, created with put-if-not-exists.

The manifest's final name is created with the object store's
put-if-not-exists (a hard link on local disk, ``If-None-Match`` on S3); the
directory listing is the source of truth.  Before the put the writer proves
that the version it read is still the table's (the lineage check of
:mod:`commit.lineage`), so a writer holding a dropped and recreated table's
view is refused.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
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
)
from tessera.stores.object_store import ObjectStore
from tessera.stores.probe import CONFIG_CONDITIONAL_PUT, probe_conditional_put, verdict_record

from .. import store as tstore
from ..errors import (
    BaseVersionGoneError,
    CommitConflictError,
    CommitOutcomeUnknownError,
    CoordinatorMismatchError,
    TableNotFoundError,
    VersionNotFoundError,
)
from ..lineage import CONFIG_INCARNATION, fingerprint_at, incarnation_of, transaction_uuid, transaction_uuid_of
from ..retry import DEFAULT_POLICY, RetryPolicy
from ..txn_files import repair_transaction_files
from .base import (
    CONFIG_COORDINATOR,
    CONFIG_STORE,
    CommitsItself,
    VersionEntry,
    bind_incarnation,
    create_final,
    local_commit_lock,
)

__all__ = ["NativeCommitHandler"]


class NativeCommitHandler(CommitsItself):
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
        #: why a table opened by path could not reach the store it records (said by every refused write)
        self.unreached: str | None = None

    def check_store(self, store: ObjectStore) -> None:
        """An object store's conditional put is trusted only once it has been
        seen refusing a second write: by this process (the verdict is cached per
        endpoint and bucket), or by the writer whose verdict the table's
        manifest records for this endpoint and bucket (see :mod:`stores.probe`)."""
        if store.probe_scope is not None:
            probe_conditional_put(store, self.put_recorded)
            self.put_record = verdict_record(store, self.put_recorded)

    def config(self) -> dict[str, str]:
        if self.put_record:
            return {CONFIG_INCARNATION: self.incarnation, CONFIG_CONDITIONAL_PUT: self.put_record}
        return {CONFIG_INCARNATION: self.incarnation}

    def bind(self, manifest: table_pb2.Manifest, uri: str) -> None:
        recorded = manifest.config.get(CONFIG_COORDINATOR, "native")
        if recorded != "native":
            if self.unreached:
                raise CoordinatorMismatchError(f"cannot write: {self.unreached}")
            raise CoordinatorMismatchError(
                f"{uri} is coordinated by {recorded!r} ({manifest.config.get(CONFIG_STORE)}), but this writer "
                "commits natively; mixing coordinators loses commits. Open it with commit_store=<that store's URL>."
            )
        bind_incarnation(self, manifest, uri)
        self.put_recorded = manifest.config.get(CONFIG_CONDITIONAL_PUT) or None

    def check_lineage(self, manifest: table_pb2.Manifest, uri: str) -> None:
        bind_incarnation(self, manifest, uri)

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
        staged: str | None = None,
    ) -> None:
        """``staged``: a staged manifest holding ``data`` (a namespace client's),
        given the final name instead of writing ``data`` again."""
        self.check_store(store)
        self._read_back = None  # only the rebase right after this commit may use a read-back
        if base is not None:
            self.verify_base(store, base)
        path = paths.manifest_path(version, scheme)
        for _ in range(3):
            try:
                if staged is not None:
                    create_final(store, staged, path, data, sync_staged=True)
                else:
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

    def load_after(self, store: ObjectStore, version: int) -> list[mf.ManifestFile]:
        names = store.list(paths.VERSIONS_DIR)
        newer = mf.versions_newer(names, version)
        naming = self._naming.get(store.uri)
        if not newer or naming is None:  # the scheme unknown yet: each read finds it
            return [self.load(store, v) for v in newer]
        seen, self._read_back = self._read_back, None
        known: dict[str, bytes] = {}
        if seen is not None and seen[0] == store.uri:
            known[seen[1]] = seen[2]  # the winner's manifest, read back after a lost create
        return tstore.read_manifests(store, newer, naming, known)

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

    # -- managed versioning's server half ---------------------------------------------

    def latest_entry(self, store: ObjectStore) -> VersionEntry | None:
        latest = mf.latest_manifest(store.list(paths.VERSIONS_DIR))  # one listing, one name parsed
        if latest is None:
            return None
        v, name, _ = latest
        rel = paths.version_path(name)
        return VersionEntry(v, rel, store.size(rel))

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
        """The put of the final name decides (a link of the staged file on
        local disk); the staged file's own name is then removed."""
        self.commit(store, version, data, scheme, txn_uuid, None, deadline, staged=staged)
        with contextlib.suppress(StoreError, OSError):
            store.delete(staged)
