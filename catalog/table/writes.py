"""Committing a table operation: the runner every write goes through, and the
writes that only add data or settings (create, append, overwrite, restore,
properties).

A write is two commits, which ``Table`` runs one after the other:

1. the operation: ``run(snap, build)`` builds its transaction on the version
   ``snap`` holds and hands it to ``commit.commit_operation``, which commits
   it, rebasing over compatible concurrent commits and calling ``build``
   again on the latest version when one forces a re-run;
2. index maintenance (``indexes.maintain``): zone maps over the fragments the
   operation added, committed as a second version.

Each returns the manifest of the version it committed (None: nothing to
commit).  Inside a multi-table transaction (``catalog/transaction.py``) a
``stage`` function records the transaction instead of committing it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from tessera.commit import (
    CommitHandler,
    check_app_transaction,
    commit_operation,
    commit_transaction,
    new_transaction,
    recorded_version,
    tag_app_transaction,
)
from tessera.commit.errors import CommitConflictError
from tessera.format.file import schema as lschema
from tessera.format.protos import table_pb2, transaction_pb2
from tessera.format.table import manifest as mf
from tessera.format.table import paths
from tessera.format.table.fragments import write_fragments
from tessera.stores.local import sync_round
from tessera.stores.object_store import ObjectStore

from ..errors import InvalidArgumentError, TableExistsError
from . import data as ldata
from .snapshot import TableSnapshot
from .write_progress import Tracker

DeletedRows = dict[int, np.ndarray]
"""The rows an operation deleted, by fragment id: a rebase merges them into the
deletion vector of a concurrent writer that deleted rows of the same fragment."""

Build = Callable[[TableSnapshot, DeletedRows], "transaction_pb2.Transaction | None"]
"""Builds an operation's transaction on one version (writing the files it
needs), recording the rows it deletes; None when there is nothing to commit."""

Stage = Callable[..., mf.ManifestFile]
"""Records a transaction in a multi-table transaction instead of committing it,
``stage(txn, base, **commit_options)``, and returns the manifest it will make."""

F = TypeVar("F", bound=Callable[..., Any])


def one_sync_round(fn: F) -> F:
    """Run a write in one sync round (``stores.local.sync_round``): the files it
    writes are fsynced together with its manifest, not one by one."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with sync_round():
            return fn(*args, **kwargs)

    return run  # type: ignore[return-value]


def check_writable(snap: TableSnapshot) -> None:
    """Refuse before writing anything when the table needs a newer writer or is
    coordinated by another commit store than ``snap``'s handler."""
    mf.check_flags(snap.manifest, writing=True)
    snap.handler.bind(snap.manifest, snap.uri)


def commit(
    snap: TableSnapshot,
    txn: transaction_pb2.Transaction,
    base: mf.ManifestFile,
    stage: Stage | None = None,
    deadline: float | None = None,
    **options: Any,
) -> mf.ManifestFile:
    """Commit ``txn`` built on ``base`` once (or stage it)."""
    if stage is not None:
        return stage(txn, base, **options)
    return commit_transaction(snap.store, txn, base, handler=snap.handler, deadline=deadline, **options)


def run(snap: TableSnapshot, build: Build, stage: Stage | None = None) -> mf.ManifestFile | None:
    """Build an operation's transaction on ``snap``'s version and commit it; when
    a concurrent commit forces a re-run, build again on the latest version (the
    handler's retry policy bounds it)."""
    check_writable(snap)
    deleted: DeletedRows = {}

    def attempt(base: mf.ManifestFile) -> transaction_pb2.Transaction | None:
        deleted.clear()  # this attempt's deletions only
        return build(snap.at(base), deleted)

    def commit_attempt(txn: transaction_pb2.Transaction, base: mf.ManifestFile, deadline: float) -> mf.ManifestFile:
        return commit(snap, txn, base, stage, deadline, affected_rows=deleted)

    return commit_operation(snap.store, snap.handler, snap.mfile, attempt, commit=commit_attempt)


def write_data(
    snap: TableSnapshot,
    data: ldata.Data,
    schema: pa.Schema | None = None,
    fields: list[lschema.LanceField] | None = None,
    track: Tracker | None = None,
) -> list[table_pb2.DataFragment]:
    """Write rows as new fragments (ids unassigned) in the table's file version;
    their columns must match the table's (pylance's write rule, checked before
    anything is written).  ``track`` tells the write's ``progress=``."""
    track = track or Tracker(None)
    reader = ldata.to_reader(data, schema)
    return write_fragments(
        snap.store,
        track.batches(ldata.iter_batches(reader)),
        schema or snap.schema,
        fields or snap.fields,
        snap.file_version,
        snap.max_rows_per_file,
        data_schema=reader.schema,
        on_open=track.on_open,
        on_finish=track.on_finish,
    )


def _overwrite(
    store: ObjectStore,
    data: ldata.Data | pa.Schema,
    file_version: str,
    max_rows_per_file: int,
    read_version: int,
    track: Tracker,
) -> transaction_pb2.Transaction:
    """Write ``data`` (or nothing, for a schema) and return an Overwrite of every row with it."""
    batches: Iterable[pa.RecordBatch]
    if isinstance(data, pa.Schema):
        schema, batches = data, []
    else:
        reader = ldata.to_reader(data)
        schema, batches = reader.schema, track.batches(ldata.iter_batches(reader))
    fields = lschema.fields_from_arrow(schema)
    frags = write_fragments(
        store,
        batches,
        schema,
        fields,
        file_version,
        max_rows_per_file,
        on_open=track.on_open,
        on_finish=track.on_finish,
    )
    txn = new_transaction(read_version)
    txn.overwrite.fragments.extend(frags)
    txn.overwrite.schema.extend(lschema.fields_to_protos(fields))
    for k, v in (schema.metadata or {}).items():
        txn.overwrite.schema_metadata[k.decode()] = v
    return txn


def create(
    store: ObjectStore,
    handler: CommitHandler,
    data: ldata.Data | pa.Schema,
    file_version: str,
    naming: mf.NamingScheme,
    stable_row_ids: bool,
    max_rows_per_file: int,
    progress: object = None,
) -> mf.ManifestFile:
    """Write a new table's first version (the handler's identity in its config)."""
    txn = _overwrite(store, data, file_version, max_rows_per_file, 0, Tracker(progress, data))
    for k, v in handler.config().items():
        txn.overwrite.config_upsert_values[k] = v
    try:
        mfile = commit_transaction(
            store, txn, None, handler=handler, data_format=file_version, naming=naming, stable_row_ids=stable_row_ids
        )
    except CommitConflictError as exc:
        raise TableExistsError(f"a table was created at {store.uri} concurrently") from exc
    handler.bind(mfile.manifest, store.uri)
    return mfile


def check_app(app_id: object, version: object, stage: Stage | None) -> tuple[str, int] | None:
    """An idempotent write's (application id, version), checked (see :mod:`tessera.commit.app_txn`)."""
    app = check_app_transaction(app_id, version)
    if app is not None and stage is not None:
        raise InvalidArgumentError("txn_app_id/txn_version are not taken inside a catalog transaction")
    return app


def already_applied(snap: TableSnapshot, app: tuple[str, int] | None) -> mf.ManifestFile | None:
    """The latest version when it already holds the idempotent write ``app`` (nothing is written then)."""
    if app is None:
        return None
    latest = snap.handler.load(snap.store)
    done = recorded_version(latest.manifest, app[0])
    return latest if done is not None and done >= app[1] else None


def drop_unused(snap: TableSnapshot, frags: list[table_pb2.DataFragment], committed: mf.ManifestFile | None) -> None:
    """Delete the data files of ``frags`` when ``committed`` does not hold them
    (an idempotent write found already committed while it wrote)."""
    if committed is None or not frags:
        return
    held = {df.path for f in committed.manifest.fragments for df in f.files}
    if any(df.path in held for f in frags for df in f.files):
        return
    for f in frags:
        for df in f.files:
            try:
                snap.store.delete(paths.data_path(df.path))
            except Exception:  # noqa: BLE001 - what is left is an orphan, removed by cleanup_orphans
                pass


def append(
    snap: TableSnapshot,
    data: ldata.Data,
    stage: Stage | None = None,
    progress: object = None,
    app: tuple[str, int] | None = None,
) -> mf.ManifestFile | None:
    """Append rows (None: there were none).  ``app``: an idempotent write's
    (application id, version): nothing is written when the table holds it."""
    track = Tracker(progress, data)
    check_writable(snap)
    if (done := already_applied(snap, app)) is not None:
        return done
    frags = write_data(snap, data, track=track)
    if not frags and app is None:
        return None

    def build(view: TableSnapshot, deleted: DeletedRows) -> transaction_pb2.Transaction:
        txn = new_transaction(view.version)
        if frags:
            txn.append.fragments.extend(frags)
        else:  # no rows, but the write is recorded (a stream's empty micro-batch)
            txn.update_config.SetInParent()
        if app is not None:
            tag_app_transaction(txn, *app)
        return txn

    committed = run(snap, build, stage)
    if app is not None:
        drop_unused(snap, frags, committed)
    return committed


def overwrite(
    snap: TableSnapshot,
    data: ldata.Data | pa.Schema,
    stage: Stage | None = None,
    progress: object = None,
    app: tuple[str, int] | None = None,
) -> mf.ManifestFile:
    """Replace every row (and the schema, by the data's).  ``app``: as :func:`append`'s."""
    track = Tracker(progress, data)
    check_writable(snap)
    if (done := already_applied(snap, app)) is not None:
        return done
    txn = _overwrite(snap.store, data, snap.file_version, snap.max_rows_per_file, snap.version, track)
    if app is not None:
        tag_app_transaction(txn, *app)
    committed = commit(snap, txn, snap.mfile, stage)
    if app is not None:
        drop_unused(snap, list(txn.overwrite.fragments), committed)
    return committed


def restore(snap: TableSnapshot, version: int, stage: Stage | None = None) -> mf.ManifestFile:
    """Make ``version`` the latest, as a new version."""
    check_writable(snap)
    old = snap.handler.load(snap.store, version)
    latest = snap.handler.load(snap.store)
    txn = new_transaction(latest.version)
    txn.restore.version = version
    return commit(snap, txn, latest, stage, restore_from=old)


def check_properties(values: dict[str, str] | None, remove: str | Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """The properties to set and to remove, refused unless they are strings a user may set."""
    values = dict(values or {})
    removed = [remove] if isinstance(remove, str) else list(remove)
    for k, v in values.items():
        if not isinstance(k, str) or not k or not isinstance(v, str):
            raise InvalidArgumentError(f"table properties are non-empty strings mapped to strings, got {k!r}: {v!r}")
    for k in [*values, *removed]:
        if not isinstance(k, str) or k.startswith("tessera.commit."):
            raise InvalidArgumentError(f"{k!r} is not a property a user can set (the commit coordinator owns it)")
    return values, removed


def set_properties(
    snap: TableSnapshot, values: dict[str, str], remove: list[str], stage: Stage | None = None
) -> mf.ManifestFile | None:
    """Set and remove table properties (the manifest's config) in one commit."""

    def build(view: TableSnapshot, deleted: DeletedRows) -> transaction_pb2.Transaction:
        txn = new_transaction(view.version)
        for k, v in values.items():
            txn.update_config.upsert_values[k] = v
        txn.update_config.delete_keys.extend(remove)
        return txn

    return run(snap, build, stage)
