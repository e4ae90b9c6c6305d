"""Commit a transaction: build the manifest, win the version, rebase or retry (the rebase loop).

A version is decided by the commit handler's single put-if-not-exists (the
manifest path, or the external store's row).  When another writer wins first,
the versions committed since our base are listed *through the handler* (the
external store when there is one), each checked to be of our table's
incarnation, their transactions checked against ours in order
(``conflicts``), and ours is rebuilt on the newest one.  Retryable conflicts
go back to :func:`commit_operation`, which re-runs the operation on the latest
version; incompatible ones raise :class:`IncompatibleTransactionError`.  Every
loop is bounded by the one :class:`~commit.retry.RetryPolicy` (attempts and a
shared wall-clock deadline, jittered backoff).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

import numpy as np
from tenacity import RetryError

from tessera.format.protos import transaction_pb2
from tessera.format.table import manifest as mf
from tessera.format.table import paths
from tessera.stores.errors import ObjectNotFoundError
from tessera.stores.object_store import ObjectStore

from . import app_txn, conflicts
from . import store as tstore
from .builder import build_version
from .errors import (
    BaseVersionGoneError,
    CommitConflictError,
    IncompatibleTransactionError,
    TooMuchContentionError,
    VersionNotFoundError,
)
from .handlers.base import CommitHandler
from .handlers.native import NativeCommitHandler
from .intent import Turn
from .lineage import fingerprint
from .retry import DEFAULT_POLICY, RetryPolicy
from .txn_files import inline_transaction_bytes, write_transaction_file

log = logging.getLogger(__name__)

__all__ = ["AlreadyCommitted", "commit_operation", "commit_transaction", "new_transaction", "rebase"]


class _VersionTaken(Exception):
    pass


class AlreadyCommitted(Exception):
    """A version since the base carries this very transaction (its uuid): an
    earlier try of it won (a reply lost, a request sent again)."""

    def __init__(self, mfile: mf.ManifestFile, message: str | None = None) -> None:
        super().__init__(message or f"the transaction is version {mfile.version} already")
        self.mfile = mfile


def commit_transaction(
    store: ObjectStore,
    txn: transaction_pb2.Transaction,
    base: mf.ManifestFile | None,
    *,
    handler: CommitHandler | None = None,
    data_format: str | None = None,
    naming: mf.NamingScheme | None = None,
    stable_row_ids: bool | None = None,
    restore_from: mf.ManifestFile | None = None,
    affected_rows: dict[int, np.ndarray] | None = None,
    policy: RetryPolicy | None = None,
    deadline: float | None = None,
) -> mf.ManifestFile:
    """Commit ``txn`` built on ``base`` (None for a new table); returns the new manifest file.

    Raises:
        CommitConflictError: a concurrent commit forces the operation to be re-run
            (BaseVersionGoneError when ``base`` was cleaned up).
        IncompatibleTransactionError: a concurrent commit makes ``txn`` impossible.
        IncarnationMismatchError: the table was dropped and recreated since ``base`` was read.
        CoordinatorMismatchError: the table is coordinated by another coordinator or store.
        TooMuchContentionError: the policy's attempts or time ran out.
        CommitOutcomeUnknownError: the store did not say whether the version was won."""
    handler = handler or NativeCommitHandler()
    policy = policy or handler.policy or DEFAULT_POLICY
    deadline = deadline if deadline is not None else policy.deadline()
    op = txn.WhichOneof("operation")
    if base is not None:
        # first: binding reads what the base records (incarnation, a probe verdict) that the store check uses
        handler.bind(base.manifest, store.uri)
    handler.check_store(store)  # before anything is written
    if base is not None and app_txn.applied(base.manifest, txn):
        log.info("%s: version %d already holds write %s", store.uri, base.version, app_txn.app_of(txn))
        return base
    if base is not None and restore_from is None:
        # a coordinator that serves commits rebases and commits next to the store (commit.served)
        served = handler.commit_served(store, txn, base, affected_rows, deadline)
        if served is not None:
            return served
    if base is not None:
        # the base's own file name tells the table's scheme (one LIST fewer per commit on S3)
        scheme = base.naming or tstore.list_versions(store)[1] or naming or mf.NamingScheme.V2
    else:
        scheme = naming or mf.NamingScheme.V2
    state = {"base": base}
    result: list[mf.ManifestFile] = []
    turn = Turn(store)

    def attempt() -> None:
        turn.wait(deadline)
        cur = state["base"]
        if cur is not None and app_txn.applied(cur.manifest, txn):
            # an idempotent write the table already holds (a replay, or its twin that won the race)
            raise AlreadyCommitted(cur, f"{store.uri} version {cur.version} already holds write {app_txn.app_of(txn)}")
        target = (cur.version if cur else 0) + 1
        built, data = build_version(
            cur,
            txn,
            handler.config(),  # per attempt: a rebase may have bound the incarnation
            data_format=data_format,
            restore_from=restore_from,
            stable_row_ids=stable_row_ids,
        )
        manifest = built.manifest
        body = inline_transaction_bytes(data, manifest)
        if manifest.transaction_file and body is not None:
            # the inline copy's very bytes, before the manifest can be seen (as pylance writes it)
            write_transaction_file(store, manifest.transaction_file, body)
        try:
            handler.commit(store, target, data, scheme, txn.uuid, cur, deadline)
        except BaseVersionGoneError:
            raise
        except CommitConflictError:
            if cur is None:
                raise
            state["base"] = rebase(store, handler, txn, cur, affected_rows)
            turn.lost()
            raise _VersionTaken() from None
        try:
            tstore.write_hint(store, target)
        except Exception:  # noqa: BLE001 - the hint is advisory
            pass
        built.naming, built.fingerprint = scheme, fingerprint(data)
        result.append(built)

    try:
        with handler.commit_lock(store, deadline) as ordered, turn:
            turn.ordered = ordered
            cur = state["base"]
            if ordered and cur is not None and store.exists(paths.manifest_path(cur.version + 1, scheme)):
                # the writer that held the lock before us took our version: rebase
                # first (one existence check) rather than build a manifest bound to lose
                state["base"] = rebase(store, handler, txn, cur, affected_rows)
            # holding the local commit lock, a lost version was lost to a writer
            # outside it (already rebased on): retry at once, no jitter
            _retry(
                policy, _VersionTaken, deadline, attempt, f"committing {op} to {store.uri}", contention_wait=not ordered
            )
    except AlreadyCommitted as done:
        log.info("%s: %s", store.uri, done)
        return done.mfile
    log.debug("committed %s as version %d of %s", op, result[0].version, store.uri)
    return result[0]


def commit_operation(
    store: ObjectStore,
    handler: CommitHandler,
    base: mf.ManifestFile,
    build: Callable[[mf.ManifestFile], transaction_pb2.Transaction | None],
    *,
    commit: Callable[[transaction_pb2.Transaction, mf.ManifestFile, float], mf.ManifestFile] | None = None,
    policy: RetryPolicy | None = None,
) -> mf.ManifestFile | None:
    """Build a transaction on ``base`` and commit it; when a concurrent commit
    forces a re-run (CommitConflictError), reload the latest version and build
    again, within the policy's attempts and one wall-clock budget.

    ``build`` returns None when there is nothing to commit (then so does this).
    ``commit`` (default :func:`commit_transaction`) commits one built
    transaction on its base before the deadline."""
    policy = policy or handler.policy or DEFAULT_POLICY
    deadline = policy.deadline()

    def default_commit(txn: transaction_pb2.Transaction, on: mf.ManifestFile, until: float) -> mf.ManifestFile:
        return commit_transaction(store, txn, on, handler=handler, policy=policy, deadline=until)

    run = commit or default_commit
    state = {"base": base}
    out: list[mf.ManifestFile | None] = []

    def attempt() -> None:
        try:
            txn = build(state["base"])
        except ObjectNotFoundError:
            # a file of the version we read is gone: if the table was dropped and
            # recreated, say that (IncarnationMismatchError) instead
            handler.verify_base(store, state["base"])
            raise
        if txn is None:
            out.append(None)
            return
        try:
            out.append(run(txn, state["base"], deadline))
        except CommitConflictError as exc:
            log.info("%s: %s; re-running on the latest version", store.uri, exc)
            state["base"] = handler.load(store)
            raise

    _retry(policy, CommitConflictError, deadline, attempt, f"re-running an operation on {store.uri}")
    return out[0]


def _retry(
    policy: RetryPolicy,
    exc_type: type[BaseException],
    deadline: float,
    attempt: Callable[[], None],
    what: str,
    contention_wait: bool = True,
) -> None:
    """Run ``attempt`` until it stops raising ``exc_type``, within the policy;
    TooMuchContentionError when the attempts or the time run out."""
    try:
        for try_ in policy.retrying(exc_type, deadline, contention_wait):
            with try_:
                attempt()
    except RetryError as exc:
        raise TooMuchContentionError(
            f"gave up {what} after {exc.last_attempt.attempt_number} attempts "
            f"({time.monotonic() - deadline + policy.max_seconds:.1f} s): other writers kept winning; "
            "try again later or reduce the number of concurrent writers"
        ) from None


def rebase(
    store: ObjectStore,
    handler: CommitHandler,
    txn: transaction_pb2.Transaction,
    base: mf.ManifestFile,
    affected: dict[int, np.ndarray] | None,
) -> mf.ManifestFile:
    """Check everything committed since ``base``; return the manifest to rebuild on.

    Raises AlreadyCommitted when one of those versions is this transaction."""
    base_frags = {f.id: f for f in base.manifest.fragments}
    plan = conflicts.Rebase()
    newest = base
    try:
        # every version since the base at once: a writer far behind pays a
        # constant number of round trips, not some per version it missed
        newer = handler.load_after(store, base.version)
    except VersionNotFoundError as exc:
        raise CommitConflictError(base.version + 1, f"{exc}; re-run on the latest") from None
    versions = [m.version for m in newer]
    if versions and versions != list(range(base.version + 1, versions[-1] + 1)):
        # versions between our base and the latest were cleaned up: their
        # transactions cannot be checked, so re-run on the latest
        raise CommitConflictError(versions[-1], f"versions after {base.version} are missing; re-run on the latest")
    for newest in newer:
        v = newest.version
        handler.check_lineage(newest.manifest, store.uri)
        theirs = tstore.load_transaction(store, newest)
        if theirs is not None and txn.uuid and theirs.uuid == txn.uuid:
            raise AlreadyCommitted(newest)
        try:
            conflicts.check(txn, theirs, base_frags, plan)
        except conflicts.Incompatible as exc:
            raise IncompatibleTransactionError(f"{store.uri} version {v}: {exc}") from None
        except conflicts.RetryableConflict as exc:
            raise CommitConflictError(v, str(exc)) from None
    # what we read after our base is the table's only if our base still is (a
    # drop and recreate while we read would have replaced it)
    handler.verify_base(store, base)
    if plan.needs_merge:
        try:
            conflicts.merge_deletions(store, txn, newest.manifest, affected or {}, plan.needs_merge)
        except conflicts.RetryableConflict as exc:
            raise CommitConflictError(newest.version, str(exc)) from None
    return newest


def new_transaction(read_version: int) -> transaction_pb2.Transaction:
    return transaction_pb2.Transaction(read_version=read_version, uuid=str(uuid.uuid4()))
