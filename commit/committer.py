"""Commit a transaction: build the manifest, win the version, retry on conflict.

A version is decided by one put-if-not-exists of its manifest.  When another
writer wins first, the transactions committed since our read version are
checked: if ours can be rebased onto them (an append after other appends, an
overwrite after anything), the manifest is rebuilt on the new latest version
and tried again; otherwise the caller gets :class:`CommitConflictError` and may
re-run the operation on the new version.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass

from format import manifest as mf
from format.protos import table_pb2, transaction_pb2
from stores.errors import AlreadyExistsError
from stores.object_store import ObjectStore

from . import store as tstore
from .builder import build_manifest
from .errors import CommitConflictError, IncompatibleTransactionError, TooMuchContentionError

log = logging.getLogger(__name__)

# Operations ours can be rebased over, per operation of ours.
_ALL = {
    "append", "delete", "overwrite", "create_index", "rewrite", "merge", "restore",
    "reserve_fragments", "update", "project", "update_config", "data_replacement",
}
_REBASE_OVER = {
    "append": {"append", "delete", "update", "create_index", "update_config", "reserve_fragments", "rewrite"},
    "overwrite": _ALL,
    "restore": _ALL,
    "update_config": _ALL - {"update_config"},
    "reserve_fragments": _ALL - {"overwrite", "restore"},
    # a delete or update only touches fragments it read; appended ones are new
    "delete": {"append", "create_index", "update_config", "reserve_fragments"},
    "update": {"append", "create_index", "update_config", "reserve_fragments"},
}


@dataclass
class RetryPolicy:
    """Bounded retries with jittered exponential backoff."""

    max_attempts: int = 100
    max_seconds: float = 120.0
    base_delay: float = 0.005
    max_delay: float = 0.5

    def delay(self, attempt: int) -> float:
        return random.uniform(0, min(self.max_delay, self.base_delay * 2**attempt))


def can_rebase(ours: str, theirs: str | None) -> bool:
    return theirs is not None and theirs in _REBASE_OVER.get(ours, set())


def commit_transaction(
    store: ObjectStore,
    txn: transaction_pb2.Transaction,
    base: mf.ManifestFile | None,
    *,
    data_format: str | None = None,
    naming: mf.NamingScheme | None = None,
    stable_row_ids: bool | None = None,
    restore_from: mf.ManifestFile | None = None,
    policy: RetryPolicy | None = None,
) -> mf.ManifestFile:
    """Commit ``txn`` (built on ``base``, None for a new table); returns the new manifest file."""
    policy = policy or RetryPolicy()
    op = txn.WhichOneof("operation")
    versions, scheme = tstore.list_versions(store)
    scheme = scheme or naming or mf.NamingScheme.V2
    tbytes = txn.SerializeToString()
    store.put(f"{tstore.TRANSACTIONS_DIR}/{mf.transaction_file_name(txn.read_version, txn.uuid)}", tbytes)
    started = time.monotonic()
    attempt = 0
    while True:
        target = (base.version if base else 0) + 1
        manifest = build_manifest(
            base.manifest if base else None,
            txn,
            target,
            data_format=data_format,
            restore_from=restore_from.manifest if restore_from else None,
            stable_row_ids=stable_row_ids,
        )
        if op == "overwrite":
            index = None
        elif op == "restore" and restore_from is not None:
            index = restore_from.index_section
        else:
            index = base.index_section if base else None
        data = mf.write_manifest(manifest, txn, index)
        try:
            store.put_if_not_exists(tstore.manifest_path(target, scheme), data)
        except AlreadyExistsError:
            attempt += 1
            if base is None:
                raise CommitConflictError(target, "the table was created concurrently")
            if attempt >= policy.max_attempts or time.monotonic() - started > policy.max_seconds:
                raise TooMuchContentionError(
                    f"gave up committing {op} to {store.uri} after {attempt} attempts in "
                    f"{time.monotonic() - started:.1f}s: other writers kept winning"
                )
            base = _rebase_target(store, base, op)
            time.sleep(policy.delay(attempt))
            continue
        tstore.write_hint(store, target)
        log.debug("committed %s as version %d of %s", op, target, store.uri)
        return mf.ManifestFile(manifest, txn, index)


def _rebase_target(store: ObjectStore, base: mf.ManifestFile, op: str) -> mf.ManifestFile:
    """The latest manifest, if ``op`` can be rebased over everything since ``base``."""
    latest = tstore.latest_version(store)
    newest = base
    for v in range(base.version + 1, latest + 1):
        newest = tstore.load_manifest(store, v)
        theirs = newest.transaction.WhichOneof("operation") if newest.transaction else None
        if not can_rebase(op, theirs):
            if theirs in ("overwrite", "restore", "merge", "project") and op == "append":
                raise IncompatibleTransactionError(
                    f"version {v} of {store.uri} was a concurrent {theirs}; the append no longer fits the table"
                )
            raise CommitConflictError(v, f"a concurrent {theirs or 'unknown operation'} conflicts with this {op}")
    return newest


def new_transaction(read_version: int) -> transaction_pb2.Transaction:
    import uuid

    return transaction_pb2.Transaction(read_version=read_version, uuid=str(uuid.uuid4()))


def fragment_live_rows(f: table_pb2.DataFragment) -> int:
    return f.physical_rows - (f.deletion_file.num_deleted_rows if f.HasField("deletion_file") else 0)
