"""What every commit handler is: the protocol, the identity keys and the local commit lock.

A commit handler decides how a version is won, found and repaired for one
table: natively (:mod:`.native`), through an external manifest store
(:mod:`.external`) or through a Lance Namespace (:mod:`.namespace_client`).
"""

from __future__ import annotations

import contextlib
import errno
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from tessera.format.protos import table_pb2, transaction_pb2
from tessera.format.table import manifest as mf
from tessera.format.table import paths
from tessera.stores.errors import AlreadyExistsError, IncarnationMismatchError, ObjectNotFoundError
from tessera.stores.object_store import ObjectStore

from ..lineage import CONFIG_INCARNATION, incarnation_of
from ..retry import RetryPolicy

CONFIG_COORDINATOR = "tessera.commit.coordinator"
CONFIG_STORE = "tessera.commit.store"
CONFIG_STORE_ID = "tessera.commit.store_id"
__all__ = [
    "CONFIG_COORDINATOR",
    "CONFIG_INCARNATION",
    "CONFIG_STORE",
    "CONFIG_STORE_ID",
    "CommitHandler",
    "CommitsItself",
    "VersionEntry",
]


@dataclass(frozen=True)
class VersionEntry:
    """A committed version as a Lance Namespace describes it."""

    version: int
    #: the manifest's path inside the table
    path: str
    #: the manifest's size in bytes
    size: int
    #: the commit's time (milliseconds since the epoch), when the manifest was read
    timestamp_millis: int | None = None


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

    def load_after(self, store: ObjectStore, version: int) -> list[mf.ManifestFile]:
        """The manifests of the versions committed after ``version``, ascending,
        in a constant number of round trips to the coordinator (one listing,
        or one store query) and their manifests read together: what a writer
        catching up needs, whatever the number of versions.

        Raises:
            VersionNotFoundError: one was cleaned up meanwhile."""

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

    def commit_served(
        self,
        store: ObjectStore,
        txn: transaction_pb2.Transaction,
        base: mf.ManifestFile,
        affected_rows: dict[int, np.ndarray] | None,
        deadline: float,
    ) -> mf.ManifestFile | None:
        """Have the coordinator's server commit ``txn`` built on ``base``
        (:mod:`commit.served`): the committed manifest, or None when this
        coordinator serves no commits (the writer commits itself)."""

    # -- managed versioning's server half (commit.managed) ---------------------------------

    def latest_entry(self, store: ObjectStore) -> VersionEntry | None:
        """The latest version's manifest path and size, half-done commits
        finished first (one listing, or one row); None without versions."""

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
        """Win ``version`` for the manifest ``data`` another writer staged at
        ``staged`` (checked by :func:`commit.managed.accept_staged`), publish it
        and remove the staged file.  Raises like :meth:`commit`."""


# ---------------------------------------------------------------------------- shared


class CommitsItself:
    """For handlers whose writer commits itself (native, external store):
    no server commits for it (:meth:`CommitHandler.commit_served`)."""

    def commit_served(
        self,
        store: ObjectStore,
        txn: transaction_pb2.Transaction,
        base: mf.ManifestFile,
        affected_rows: dict[int, np.ndarray] | None,
        deadline: float,
    ) -> mf.ManifestFile | None:
        return None


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


class _Bindable(Protocol):
    incarnation: str
    bound: bool


def bind_incarnation(handler: _Bindable, manifest: table_pb2.Manifest, uri: str) -> None:
    """Adopt the incarnation ``manifest`` records; refuse another one once bound."""
    inc = incarnation_of(manifest)
    if inc is None:
        return  # a table from before incarnations (or a foreign writer dropped config): adopted on write
    if handler.bound and inc != handler.incarnation:
        raise IncarnationMismatchError(
            f"{uri} version {manifest.version} belongs to incarnation {inc}, but this writer read incarnation "
            f"{handler.incarnation}: the table was dropped and recreated since; reopen it"
        )
    handler.incarnation, handler.bound = inc, True


def create_final(store: ObjectStore, staged: str, final: str, data: bytes, *, sync_staged: bool = False) -> None:
    """Create ``final`` holding ``data``, the content of the staged manifest
    ``staged`` (create-only; AlreadyExistsError when taken).  A local store
    links the staged file to the final name instead of writing the bytes
    again (creating a file costs a local disk more than anything else a
    commit does); ``sync_staged``: the staged file was written by someone
    else (pylance, through a namespace) and is fsynced first when the store
    syncs.  A staged manifest is written once, under a name of its own, and
    never again: the file linked is the one whose bytes were checked."""
    link = getattr(store, "link_if_not_exists", None)
    if link is not None:
        try:
            if sync_staged:
                link(staged, final, sync_src=True)
            else:
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
