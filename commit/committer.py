"""Commit a transaction: build the manifest, win the version, rebase or retry.

A version is decided by the commit handler's single put-if-not-exists (the
manifest path, or the external store's row).  When another writer wins first,
the versions committed since our base are listed *through the handler* (the
external store when there is one), their transactions checked against ours in
order (``conflicts``), and ours is rebuilt on the newest one.  Retryable
conflicts go back to the caller as :class:`CommitConflictError` so it can re-run
the operation; incompatible ones raise :class:`IncompatibleTransactionError`.
Retries are bounded by attempts and wall-clock time, with jittered backoff.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

import numpy as np
from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt, stop_after_delay
from tenacity import wait_random_exponential

from format import manifest as mf
from format.protos import table_pb2, transaction_pb2
from stores.object_store import ObjectStore

from . import conflicts
from . import store as tstore
from .builder import build_manifest
from .errors import CommitConflictError, CoordinatorMismatchError, IncompatibleTransactionError, TooMuchContentionError
from .handlers import CONFIG_COORDINATOR, CONFIG_INCARNATION, CONFIG_STORE, CommitHandler, NativeCommitHandler

log = logging.getLogger(__name__)


@dataclass
class RetryPolicy:
    """Bounds on retries: attempts, wall-clock seconds, and backoff."""

    max_attempts: int = 200
    max_seconds: float = 120.0
    base_delay: float = 0.01
    max_delay: float = 1.0

    def retrying(self, exc_types) -> Retrying:
        return Retrying(
            stop=stop_after_attempt(self.max_attempts) | stop_after_delay(self.max_seconds),
            wait=wait_random_exponential(multiplier=self.base_delay, max=self.max_delay),
            retry=retry_if_exception_type(exc_types),
            reraise=False,
        )


class _VersionTaken(Exception):
    pass


def check_coordinator(manifest: table_pb2.Manifest, handler: CommitHandler, uri: str) -> None:
    """Refuse to write a table coordinated by a different coordinator."""
    recorded = manifest.config.get(CONFIG_COORDINATOR, "native")
    if recorded != handler.kind:
        raise CoordinatorMismatchError(
            f"{uri} is coordinated by {recorded!r}"
            + (f" ({manifest.config.get(CONFIG_STORE)})" if recorded != "native" else "")
            + f", but this writer uses {handler.kind!r}; mixing coordinators loses commits. "
            + ("Open it with commit_store=<that store's URL>." if recorded != "native" else "Open it without commit_store.")
        )
    if recorded != "native":
        identity = manifest.config.get(CONFIG_STORE)
        mine = handler.config().get(CONFIG_STORE)
        if identity and mine and identity != mine:
            raise CoordinatorMismatchError(
                f"{uri} is coordinated by the {recorded} store {identity}, not {mine}"
            )
        inc = manifest.config.get(CONFIG_INCARNATION)
        if inc and hasattr(handler, "adopt"):
            handler.adopt(inc)


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
) -> mf.ManifestFile:
    """Commit ``txn`` built on ``base`` (None for a new table); returns the new manifest file."""
    handler = handler or NativeCommitHandler()
    policy = policy or RetryPolicy()
    op = txn.WhichOneof("operation")
    handler.check_store(store)  # before anything is written
    if base is not None:
        check_coordinator(base.manifest, handler, store.uri)
        # the base's own file name tells the table's scheme (one LIST fewer per commit on S3)
        scheme = base.naming or tstore.list_versions(store)[1] or naming or mf.NamingScheme.V2
    else:
        scheme = naming or mf.NamingScheme.V2
    txn_path = f"{tstore.TRANSACTIONS_DIR}/{mf.transaction_file_name(txn.read_version, txn.uuid)}"
    state = {"base": base}
    result: list[mf.ManifestFile] = []

    def attempt() -> None:
        cur = state["base"]
        target = (cur.version if cur else 0) + 1
        manifest = build_manifest(
            cur.manifest if cur else None, txn, target, data_format=data_format,
            restore_from=restore_from.manifest if restore_from else None, stable_row_ids=stable_row_ids,
        )
        if op == "overwrite":
            index = None
        elif op == "restore" and restore_from is not None:
            index = restore_from.index_section
        else:
            index = cur.index_section if cur else None
        store.put(txn_path, txn.SerializeToString())
        data = mf.write_manifest(manifest, txn, index)
        try:
            handler.commit(store, target, data, scheme, txn.uuid)
        except CommitConflictError:
            if cur is None:
                raise
            state["base"] = _rebase(store, handler, txn, cur, affected_rows)
            raise _VersionTaken() from None
        try:
            tstore.write_hint(store, target)
        except Exception:  # noqa: BLE001 - the hint is advisory
            pass
        result.append(mf.ManifestFile(manifest, txn, index, scheme))

    try:
        for try_ in policy.retrying(_VersionTaken):
            with try_:
                attempt()
    except RetryError as exc:
        raise TooMuchContentionError(
            f"gave up committing {op} to {store.uri} after {exc.last_attempt.attempt_number} attempts: "
            "other writers kept winning; try again later or reduce the number of concurrent writers"
        ) from None
    log.debug("committed %s as version %d of %s", op, result[0].version, store.uri)
    return result[0]


def _rebase(store: ObjectStore, handler: CommitHandler, txn: transaction_pb2.Transaction,
            base: mf.ManifestFile, affected: dict[int, np.ndarray] | None) -> mf.ManifestFile:
    """Check everything committed since ``base``; return the manifest to rebuild on."""
    base_frags = {f.id: f for f in base.manifest.fragments}
    plan = conflicts.Rebase()
    newest = base
    newer = handler.versions_after(store, base.version)
    if newer and newer != list(range(base.version + 1, newer[-1] + 1)):
        # versions between our base and the latest were cleaned up: their
        # transactions cannot be checked, so re-run on the latest
        raise CommitConflictError(newer[-1], f"versions after {base.version} are missing; re-run on the latest")
    for v in newer:
        newest = handler.load(store, v)
        try:
            conflicts.check(txn, newest.transaction, base_frags, plan)
        except conflicts.Incompatible as exc:
            raise IncompatibleTransactionError(f"{store.uri} version {v}: {exc}") from None
        except conflicts.RetryableConflict as exc:
            raise CommitConflictError(v, str(exc)) from None
    if plan.needs_merge:
        try:
            conflicts.merge_deletions(store, txn, newest.manifest, affected or {}, plan.needs_merge)
        except conflicts.RetryableConflict as exc:
            raise CommitConflictError(newest.version, str(exc)) from None
    return newest


def new_transaction(read_version: int) -> transaction_pb2.Transaction:
    return transaction_pb2.Transaction(read_version=read_version, uuid=str(uuid.uuid4()))


def fragment_live_rows(f: table_pb2.DataFragment) -> int:
    return f.physical_rows - (f.deletion_file.num_deleted_rows if f.HasField("deletion_file") else 0)
