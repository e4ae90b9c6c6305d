"""The write half of the ``tessera`` Spark data source.

Where things run (see docs of :mod:`tessera.catalog.spark`):

* :func:`plan_write` runs in a planning worker when Spark calls
  ``DataSource.writer()``.  It opens the table once, records the version the
  job is based on and the schema/field ids the tasks must write, and returns a
  :class:`TesseraWriter` holding only plain data; Spark pickles it to every
  task and to the commit worker.
* :meth:`TesseraWriter.write` runs in each task: it buffers Spark's Arrow
  batches into large slices, writes Lance data files under ``data/`` through
  :class:`~tessera.format.table.fragments.FragmentWriter` (the writer of every
  write path) and returns a :class:`TesseraCommitMessage` carrying the
  serialized ``DataFragment`` protobufs.  A task that fails removes the files it
  wrote; files of killed attempts are orphans for ``Table.cleanup_orphans``.
* :meth:`TesseraWriter.commit` runs once, in a driver-side worker, with the
  messages of the successful attempts only: it commits exactly one Append or
  Overwrite version through the table's coordinator, rebasing over (or re-running
  on top of) whatever was committed since the planned version.
* :meth:`TesseraWriter.abort` deletes the files the messages name, unless a
  version already references them (a commit whose outcome was unknown).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import cast

import pyarrow as pa

try:
    from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
except ImportError as _exc:  # pragma: no cover - pyspark is an optional dependency
    raise ImportError("the tessera Spark data source needs pyspark>=4.1: pip install 'tessera[spark]'") from _exc

from tessera.catalog.errors import ReplaceWhereMismatchError, SparkOptionError, SparkWriteError
from tessera.commit import commit_operation, commit_transaction, new_transaction, open_handler
from tessera.commit.errors import CommitConflictError, TableNotFoundError
from tessera.format.file import schema as lschema
from tessera.format.file.container import normalize_version
from tessera.format.protos import file_pb2, table_pb2
from tessera.format.table import manifest as mf
from tessera.format.table.fragments import FragmentWriter
from tessera.format.table.paths import DATA_DIR
from tessera.stores.object_store import ObjectStore
from tessera.stores.registry import open_object_store

from .errors import reported
from .location import CatalogClaim, TableLocation, normalize_uri
from .options import READ_OPTIONS, RETRY_PREFIX, WRITE_OPTIONS, SparkOptions
from .types import arrow_schema_for, check_append_columns, conform_batch

log = logging.getLogger(__name__)

#: a task's data is written once this many bytes wait (or ``write_batch_rows`` rows)
FLUSH_BYTES = 64 << 20


@dataclass
class TesseraCommitMessage(WriterCommitMessage):
    """What one successful task attempt wrote: serialized ``DataFragment``s."""

    fragments: list[bytes] = field(default_factory=list)
    rows: int = 0
    bytes: int = 0
    partition: int = -1
    attempt: int = -1

    def data_files(self) -> list[str]:
        return [
            f"{DATA_DIR}/{df.path}" for f in map(table_pb2.DataFragment.FromString, self.fragments) for df in f.files
        ]


def delete_files(store: ObjectStore, paths: Sequence[str]) -> int:
    """Delete ``paths`` (relative to the table root), ignoring missing ones."""
    n = 0
    for p in paths:
        try:
            store.delete(p)
            n += 1
        except Exception as exc:  # noqa: BLE001 - best effort: orphan clean-up removes leftovers
            log.debug("could not delete %s/%s: %s", store.uri, p, exc)
    return n


@dataclass
class WritePlan:
    """Everything a task and the commit need, as plain picklable values."""

    uri: str
    commit_store: str | None
    storage_options: dict[str, str]
    overwrite: bool
    base_version: int | None  # None: the table did not exist at planning time
    schema: pa.Schema  # the table schema the tasks write (batches are conformed to it)
    field_protos: list[bytes]
    file_version: str
    naming: str
    max_rows_per_file: int
    flush_rows: int
    retry: dict[str, str] = field(default_factory=dict)  # commit.retry.* options
    job: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    namespace: str | None = None  # a Lance REST namespace URL the commit goes through
    table_id: tuple[str, ...] = ()
    namespace_properties: dict[str, str] = field(default_factory=dict)
    #: option ``replaceWhere``: the SQL predicate whose rows the job replaces
    replace_where: str | None = None
    #: a catalog table the job creates: recorded in the catalog by the commit
    claim: CatalogClaim | None = None
    #: options ``txnAppId``/``txnVersion`` (a stream: its query and batch): committed at most once
    app: tuple[str, int] | None = None
    #: option ``mergeSchema=true`` on an append: the DataFrame's new columns are committed first
    merge_schema: bool = False

    def policy(self):
        """The job's retry policy (``commit.retry.*`` options)."""
        from tessera.commit import InvalidRetryPolicyError, RetryPolicy

        try:
            return RetryPolicy.from_properties(self.retry)
        except InvalidRetryPolicyError as exc:
            raise SparkOptionError(str(exc)) from None

    def handler(self):
        """The commit handler for the driver's commit, with the job's retry policy."""
        if self.namespace is not None:
            from tessera.commit import namespace_handler

            return namespace_handler(self.namespace, list(self.table_id), self.policy(), self.namespace_properties)
        return open_handler(self.uri, self.commit_store, self.policy())

    def fields(self) -> list[lschema.LanceField]:
        return lschema.fields_from_protos(file_pb2.Field.FromString(b) for b in self.field_protos)


def write_options(options) -> SparkOptions:
    """``options`` checked as a write's (a :class:`SparkOptions` is kept as it is)."""
    if isinstance(options, SparkOptions):
        return options
    return SparkOptions(options, WRITE_OPTIONS, READ_OPTIONS)


def _check_delta_options(opts: SparkOptions, overwrite: bool) -> str | None:
    """Refuse the Delta-style options Tessera cannot honour as given (a
    :class:`SparkOptionError`); return the ``replaceWhere`` predicate, if any."""
    replace_where = opts.get("replaceWhere")
    if replace_where is not None:
        if not overwrite:
            raise SparkOptionError(
                "option replaceWhere replaces the rows its predicate matches, so it needs mode('overwrite'); "
                "nothing was written"
            )
        if not replace_where.strip():
            raise SparkOptionError("option replaceWhere is empty; give a SQL predicate such as \"day = '2024-01-01'\"")
    mode = opts.get("partitionOverwriteMode")
    if mode is not None and mode.strip().lower() != "static":
        raise SparkOptionError(
            f"option partitionOverwriteMode={mode!r}: Tessera tables have no partitions, so an overwrite replaces "
            "the whole table; to replace only some rows, use .option('replaceWhere', '<SQL predicate>') with "
            "mode('overwrite'). Nothing was written"
        )
    merge = opts.get("mergeSchema")
    if merge is not None and merge.strip().lower() not in ("true", "false"):
        raise SparkOptionError(f"option mergeSchema must be true or false, got {merge!r}; nothing was written")
    if merge is not None and merge.strip().lower() == "true" and overwrite:
        raise SparkOptionError(
            "option mergeSchema=true adds the DataFrame's new columns on an append (mode('append')); an overwrite "
            "takes the DataFrame's schema by itself and replaceWhere keeps the table's. Nothing was written"
        )
    replace_schema = opts.get("overwriteSchema")
    if replace_schema is not None:
        value = replace_schema.strip().lower()
        if value not in ("true", "false"):
            raise SparkOptionError(f"option overwriteSchema must be true or false, got {replace_schema!r}")
        replaces = overwrite and replace_where is None  # a plain overwrite always takes the DataFrame's schema
        if (value == "true") != replaces:
            what = (
                "a plain mode('overwrite') always replaces the table's schema with the DataFrame's"
                if replaces
                else "appends and replaceWhere keep the table's schema"
            )
            raise SparkOptionError(
                f"option overwriteSchema={replace_schema!r} cannot be honoured: {what} (schema changes on "
                "Spark writes beyond that are planned in issue 30); drop the option. Nothing was written"
            )
    return replace_where


def plan_write(location: TableLocation, spark_schema, overwrite: bool, options) -> TesseraWriter:
    """Open the table (if any) and fix the base version and the schema to write.

    ``options`` are the write's (unknown ones refused: :data:`WRITE_OPTIONS`).
    With ``replaceWhere`` (mode overwrite only) the job replaces the rows its
    predicate matches: the tasks write the DataFrame's rows with the table's
    schema, each row checked against the predicate, and the commit deletes
    the matching rows and adds the new ones in one version."""
    options = write_options(options)
    replace_where = _check_delta_options(options, overwrite)
    try:
        table = location.open_table()
    except TableNotFoundError:
        table = None
    if table is not None:
        mf.check_flags(table.manifest, writing=True)
        file_version = normalize_version(table.file_version)
    else:
        file_version = normalize_version(options.get("file_version", "2.2"))
    naming = options.get("naming", "V2").upper()
    if naming not in ("V1", "V2"):
        raise SparkOptionError(f"option naming must be V1 or V2, got {naming!r}")
    merge_schema = False
    if table is not None and (not overwrite or replace_where is not None):
        fields = lschema.fields_from_protos(table.manifest.fields)
        schema = table.schema
        merge_schema = (options.get("mergeSchema") or "").strip().lower() == "true"
        if merge_schema:  # new columns first (write._evolved)
            from tessera.catalog.table.schema_evolution import merge_fields, next_field_id

            new = arrow_schema_for(spark_schema)
            fields, _ = merge_fields(fields, new, next_field_id(table.snapshot), existing="keep")
            schema = lschema.to_arrow_schema(fields, schema.metadata)
        check_append_columns(spark_schema, schema)
    else:
        schema = arrow_schema_for(spark_schema)
        fields = lschema.fields_from_arrow(schema)
    plan = WritePlan(
        uri=location.uri,
        commit_store=location.commit_store,
        storage_options=dict(location.storage_options),
        overwrite=overwrite,
        base_version=table.version if table is not None else None,
        schema=schema,
        field_protos=[p.SerializeToString() for p in lschema.fields_to_protos(fields)],
        file_version=file_version,
        naming=naming,
        max_rows_per_file=_positive(options, "max_rows_per_file", 1024 * 1024),
        flush_rows=_positive(options, "write_batch_rows", 128 * 1024),
        retry={RETRY_PREFIX + k: v for k, v in options.prefixed(RETRY_PREFIX).items()},
        namespace=location.namespace,
        table_id=tuple(location.table_id),
        namespace_properties=dict(location.namespace_properties),
        replace_where=replace_where,
        claim=location.claim,
        app=_app_options(options),
        merge_schema=merge_schema,
    )
    plan.policy()  # a bad commit.retry.* option fails the job before any task runs
    if replace_where is not None:
        _replace_where_expression(replace_where, schema)  # a bad predicate fails before any task runs
    log.info(
        "tessera write job %s: %s %s based on version %s",
        plan.job,
        "overwrite" if overwrite and replace_where is None else "append" if not overwrite else "replaceWhere",
        plan.uri,
        plan.base_version,
    )
    return TesseraWriter(plan)


def _app_options(options: SparkOptions) -> tuple[str, int] | None:
    """Options ``txnAppId`` and ``txnVersion``: an idempotent write (both or neither)."""
    from tessera.commit import InvalidAppTransactionError, check_app_transaction

    app_id, raw = options.get("txnAppId"), options.get("txnVersion")
    try:
        version = int(raw) if raw is not None else None
    except ValueError:
        raise SparkOptionError(f"option txnVersion must be a non-negative integer, got {raw!r}") from None
    try:
        return check_app_transaction(app_id, version)
    except InvalidAppTransactionError as exc:
        raise SparkOptionError(f"options txnAppId/txnVersion: {exc}") from None


def _replace_where_expression(sql: str, schema: pa.Schema):
    """The ``replaceWhere`` predicate as an expression over ``schema`` (the
    table's: Tessera's SQL, as the ``filter`` option); SparkOptionError when it
    does not parse or type-check."""
    from tessera.catalog.errors import TesseraError
    from tessera.catalog.query import predicate

    try:
        return predicate.to_expression(sql, schema)
    except TesseraError as exc:
        raise SparkOptionError(f"option replaceWhere {sql!r}: {exc}; nothing was written") from exc


def check_replace_where(batch: pa.RecordBatch, expr, sql: str) -> None:
    """Refuse ``batch`` (ReplaceWhereMismatchError) when one of its rows does
    not match the ``replaceWhere`` predicate (a NULL result does not match,
    as a NULL row is not deleted by it either)."""
    from tessera.catalog.query.scan import mask_of

    ok = mask_of(expr, batch)
    if ok.all():
        return
    bad = int((~ok).argmax())
    row = batch.slice(bad, 1).to_pylist()[0]
    shown = repr(row)
    if len(shown) > 300:
        shown = shown[:300] + "...}"
    raise ReplaceWhereMismatchError(
        f"Data written out does not match replaceWhere {sql!r}: {int((~ok).sum())} row(s) of this task do not "
        f"match it, for example {shown}. Every row written with replaceWhere must match its predicate (the rows "
        "it replaces); filter the DataFrame or widen the predicate. Nothing was committed"
    )


def _positive(options, key: str, default: int) -> int:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise SparkOptionError(f"option {key} must be a positive integer, got {raw!r}")
    return value


class TesseraWriter(DataSourceArrowWriter):
    """Tasks write data files; the driver commits one version (see module docs)."""

    def __init__(self, plan: WritePlan) -> None:
        self.plan = plan

    # -- executors ------------------------------------------------------------------------

    @reported
    def write(self, iterator: Iterator[pa.RecordBatch]) -> TesseraCommitMessage:
        from pyspark import TaskContext

        from .worker_memory import keep_freed_memory

        keep_freed_memory()
        ctx = TaskContext.get()
        p = self.plan
        store = open_object_store(p.uri, p.storage_options)
        sink = FragmentWriter(
            store, p.schema, p.fields(), p.file_version, p.max_rows_per_file, p.flush_rows, FLUSH_BYTES
        )
        where = _replace_where_expression(p.replace_where, p.schema) if p.replace_where is not None else None
        try:
            for batch in iterator:
                conformed = conform_batch(batch, p.schema)
                if where is not None:  # checked here, where the rows are: no second pass over the data
                    check_replace_where(conformed, where, p.replace_where or "")
                sink.add(conformed)
            frags = sink.finish()
        except BaseException:
            sink.discard()
            raise
        return TesseraCommitMessage(
            fragments=[f.SerializeToString() for f in frags],
            rows=sink.rows,
            bytes=sink.bytes,
            partition=ctx.partitionId() if ctx else -1,
            attempt=ctx.attemptNumber() if ctx else -1,
        )

    # -- driver -----------------------------------------------------------------------------

    @reported
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        frags = [table_pb2.DataFragment.FromString(b) for m in _ours(messages) for b in m.fragments]
        p = self.plan
        store = open_object_store(p.uri, p.storage_options)
        handler = p.handler()
        rows = sum(f.physical_rows for f in frags)
        if p.app is not None and self._holds_app(store, handler):
            n = delete_files(store, [x for m in _ours(messages) for x in m.data_files()])
            log.info(
                "tessera write job %s: %s already holds write %s; removed the job's %d files", p.job, p.uri, p.app, n
            )
            return
        if p.base_version is None:
            version = self._create_claimed(store, handler, frags) if p.claim else self._create(store, handler, frags)
        elif not frags and not p.overwrite and p.app is None:
            log.info("tessera write job %s: nothing to append to %s", p.job, p.uri)
            return
        else:
            found = self._commit_on(store, handler, self._evolved(store, handler), frags)
            if found is None:
                log.info("tessera write job %s: replaceWhere matched no rows and the job wrote none", p.job)
                return
            version = found
        log.info(
            "tessera write job %s: committed version %d of %s (%d fragments, %d rows)",
            p.job,
            version,
            p.uri,
            len(frags),
            rows,
        )
        if frags:
            self._maintain_indices(store, handler)

    def _evolved(self, store, handler):
        """The version the job commits on: the base, or (option mergeSchema) the
        version adding the DataFrame's new columns to it, a Merge committed first
        as Table.append(schema_mode="merge") commits it."""
        from tessera.catalog.table.schema_evolution import commit_schema
        from tessera.catalog.table.snapshot import TableSnapshot

        base = handler.load(store, self.plan.base_version)
        if not self.plan.merge_schema:  # an overwrite's fields are the DataFrame's: they replace the schema
            return base
        return commit_schema(TableSnapshot(store, base, handler), self.plan.fields())

    def _holds_app(self, store, handler) -> bool:
        """Whether the table already holds this job's idempotent write (option txnAppId)."""
        from tessera.commit import recorded_version

        app = self.plan.app
        assert app is not None
        try:
            latest = handler.load(store)
        except TableNotFoundError:
            return False
        done = recorded_version(latest.manifest, app[0])
        return done is not None and done >= app[1]

    def _tagged(self, txn):
        if self.plan.app is not None:
            from tessera.commit import tag_app_transaction

            tag_app_transaction(txn, *self.plan.app)
        return txn

    def _maintain_indices(self, store, handler) -> None:
        """Zone maps covering the job's fragments, in a second commit (catalog/table/indexes.py);
        a failure there is logged and leaves the job's commit standing."""
        from tessera.catalog.table.indexes import maintain
        from tessera.catalog.table.snapshot import TableSnapshot

        try:
            table = TableSnapshot(store, handler.load(store), handler)
        except Exception as exc:  # noqa: BLE001 - the job's commit stands; the next write catches up
            log.warning("tessera write job %s: zone maps not updated (%s)", self.plan.job, exc)
            return
        maintain(table)

    def _overwrite_txn(self, read_version: int, frags):
        txn = self._tagged(new_transaction(read_version))
        txn.overwrite.fragments.extend(frags)
        txn.overwrite.schema.extend(file_pb2.Field.FromString(b) for b in self.plan.field_protos)
        for k, v in (self.plan.schema.metadata or {}).items():
            txn.overwrite.schema_metadata[k.decode()] = v
        return txn

    def _create_claimed(self, store, handler, frags) -> int:
        """Create a table named in a Tessera catalog: record its name there
        (as ``Catalog.declare_table`` does), create it, and remove the name
        again when the create fails."""
        from tessera.catalog.errors import TableExistsError

        p = self.plan
        claim = p.claim
        assert claim is not None  # called only for a job that creates a catalog table
        cat = claim.catalog(p.storage_options)
        try:
            try:
                cat.declare_table(claim.name, location=claim.location, commit_store=claim.commit_store)
                claimed = True
            except TableExistsError:  # declared by another writer since the job was planned
                _, uri, recorded = cat._table_row(claim.name)
                if normalize_uri(uri) != p.uri or recorded != claim.commit_store:
                    raise SparkWriteError(
                        f"{claim.name} was created in the catalog while this job ran, at {uri} (commit store "
                        f"{recorded}); the job's files are removed. Run the job again."
                    ) from None
                claimed = False
            try:
                return self._create(store, handler, frags)
            except BaseException:
                if claimed:
                    try:
                        cat.drop_table(claim.name)
                    except Exception as exc:  # noqa: BLE001 - the commit's own error is the one to raise
                        log.warning(
                            "tessera write job %s: could not remove %s from the catalog: %s", p.job, claim.name, exc
                        )
                raise
        finally:
            cat.close()

    def _create(self, store, handler, frags) -> int:
        """Create the table; when another writer created it first, commit on top of theirs."""
        p = self.plan
        txn = self._overwrite_txn(0, frags)
        for k, v in handler.config().items():
            txn.overwrite.config_upsert_values[k] = v
        try:
            return commit_transaction(
                store, txn, None, handler=handler, data_format=p.file_version, naming=mf.NamingScheme(p.naming)
            ).version
        except CommitConflictError:
            pass
        latest = handler.load(store)
        handler.bind(latest.manifest, store.uri)
        if p.overwrite and p.replace_where is None:
            found = self._commit_on(store, handler, latest, frags)
            assert found is not None  # an overwrite always commits
            return found
        theirs = [(f.id, f.name, f.logical_type, f.parent_id) for f in latest.manifest.fields]
        mine = [(f.id, f.name, f.logical_type, f.parent_id) for f in map(file_pb2.Field.FromString, p.field_protos)]
        if theirs != mine or (latest.manifest.data_format.version or "2.0") != p.file_version:
            raise SparkWriteError(
                f"{p.uri} was created by another writer while this job ran, with a different schema or file "
                "version; the job's files are removed. Run the job again to append to the new table."
            )
        found = self._commit_on(store, handler, latest, frags)
        return found if found is not None else latest.version

    def _commit_on(self, store, handler, base, frags) -> int | None:
        """Commit this job's Append, Overwrite or replaceWhere on ``base``:
        compatible commits since then are rebased over by the coordinator; a
        retryable conflict re-runs it on the latest version (the handler's
        retry policy bounds it); incompatible ones raise.  None: a
        replaceWhere that matched no rows and had none to add (no version)."""
        handler.bind(base.manifest, store.uri)
        if self.plan.replace_where is not None:
            return self._replace_on(store, handler, base, frags)

        def build(on):
            if self.plan.overwrite:
                return self._overwrite_txn(on.version, frags)
            txn = self._tagged(new_transaction(on.version))
            if frags:
                txn.append.fragments.extend(frags)
            else:  # an idempotent write without rows (a stream's empty batch) is recorded all the same
                txn.update_config.SetInParent()
            return txn

        mfile = commit_operation(store, handler, base, build)
        assert mfile is not None  # build always returns a transaction
        self._drop_unless_held(store, mfile, frags)
        return mfile.version

    def _drop_unless_held(self, store, mfile, frags) -> None:
        """An idempotent write found committed by its twin while it ran: its own files go."""
        if self.plan.app is None or not frags:
            return
        held = {df.path for f in mfile.manifest.fragments for df in f.files}
        mine = [df.path for f in frags for df in f.files]
        if not any(x in held for x in mine):
            n = delete_files(store, [f"{DATA_DIR}/{x}" for x in mine])
            log.info("tessera write job %s: write %s was committed by another try; removed %d files",
                     self.plan.job, self.plan.app, n)  # fmt: skip

    def _replace_on(self, store, handler, base, frags) -> int | None:
        """``replaceWhere``: one Update transaction that deletes the rows the
        predicate matches in the version it is built on (deletion files, or
        whole fragments removed) and adds the job's fragments.  Built on
        ``base``; a concurrent commit touching the same fragments has its
        deletions merged with ours (rebase) or makes it run again on the
        latest version (``commit_operation``), so the delete always covers the
        version the commit lands on, except rows appended concurrently, which
        stay (as Lance's delete and Delta's default isolation leave them)."""
        from tessera.catalog.table.mutations import build_delete
        from tessera.catalog.table.snapshot import TableSnapshot

        where = self.plan.replace_where
        affected: dict[str, dict] = {}

        def build(on):
            affected["rows"] = {}
            deleted = build_delete(TableSnapshot(store, on, handler), where, affected["rows"])
            if deleted is None and not frags:
                return None
            txn = self._tagged(new_transaction(on.version))
            if deleted is not None:
                txn.update.updated_fragments.extend(deleted.delete.updated_fragments)
                txn.update.removed_fragment_ids.extend(deleted.delete.deleted_fragment_ids)
            txn.update.new_fragments.extend(frags)
            return txn

        def commit(txn, on, deadline):
            return commit_transaction(
                store, txn, on, handler=handler, deadline=deadline, affected_rows=affected.get("rows")
            )

        mfile = commit_operation(store, handler, base, build, commit=commit)
        if mfile is not None:
            self._drop_unless_held(store, mfile, frags)
        return mfile.version if mfile is not None else None

    @reported
    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Delete the files of the given messages that no committed version uses."""
        p = self.plan
        paths = [path for m in _ours(messages) for path in m.data_files()]
        if not paths:
            log.info("tessera write job %s aborted; no files to remove", p.job)
            return
        store = open_object_store(p.uri, p.storage_options)
        in_use = _referenced_since(store, p.handler(), p.base_version)
        keep = [x for x in paths if x in in_use]
        if keep:
            log.warning("tessera write job %s: %d files are part of a committed version and are kept", p.job, len(keep))
        n = delete_files(store, [x for x in paths if x not in in_use])
        log.info("tessera write job %s aborted; removed %d of %d files", p.job, n, len(paths))


def _ours(messages: list[WriterCommitMessage | None]) -> list[TesseraCommitMessage]:
    """The messages of the task attempts that succeeded (Spark passes None for
    the others): what :meth:`TesseraWriter.write` returned."""
    return [cast(TesseraCommitMessage, m) for m in messages if m is not None]


def _referenced_since(store: ObjectStore, handler, base_version: int | None) -> set[str]:
    """Data files referenced by versions committed after ``base_version``."""
    try:
        versions = handler.versions_after(store, base_version or 0)
    except TableNotFoundError:
        return set()
    out: set[str] = set()
    for v in versions:
        for frag in handler.load(store, v).manifest.fragments:
            out.update(f"{DATA_DIR}/{df.path}" for df in frag.files)
    return out
