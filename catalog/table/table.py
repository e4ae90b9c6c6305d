"""``Table``: a Lance dataset at one version, what users open, create, read,
write and travel in time with.

A Table holds the :class:`TableSnapshot` of the version it is pinned to.
Each operation is one call into the module that does it (``writes``,
``mutations``, ``schema_ops``, ``indexes``, ``compaction``, ``maintenance``,
``takes``), which takes the snapshot and returns the version it committed;
the Table then moves to it.  A write that adds fragments is followed, as an
explicit second step, by the commit of the zone maps that cover them
(:meth:`Table._maintain_indices`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa

from tessera.commit import (
    CleanupReport,
    CommitHandler,
    NativeCommitHandler,
    Progress,
    RetryPolicy,
    VersionCleanupReport,
    fragment_live_rows,
    list_versions,
    open_handler,
)
from tessera.commit.errors import TableNotFoundError
from tessera.format.file.container import normalize_version
from tessera.format.protos import table_pb2
from tessera.format.table import manifest as mf
from tessera.format.table.file_cache import FileReaderCache
from tessera.format.table.fragments import DEFAULT_MAX_ROWS_PER_FILE
from tessera.stores.local import check_durability
from tessera.stores.object_store import ObjectStore
from tessera.stores.registry import open_object_store

from ..errors import InvalidArgumentError, TableExistsError
from ..names import check_location
from ..query.scan import DEFAULT_BATCH_SIZE, Scan
from . import auto_maintenance, compaction, coordinator, indexes, maintenance, schema_evolution, takes, writes
from . import data as ldata
from .compaction import CompactionMetrics
from .data import Data
from .rowid_index import RowIdIndex
from .snapshot import TableSnapshot
from .tags import Tags
from .write_progress import WriteProgress

if TYPE_CHECKING:
    import polars as pl

    from tessera.stores.manifest_store import ManifestStore

    from ..query.arrow_dataset import TesseraDataset
    from ..query.predicate import Predicate
    from .mutations import MergeInsertBuilder
    from .stats import TableStats
    from .verify import VerifyReport


_OPEN_HINT = (
    "open it from its catalog with tessera.connect(warehouse=...).load_table({name}) "
    "or from a namespace with Table.open({name}, namespace=...)"
)
_CREATE_HINT = "create it with tessera.connect(warehouse=...).create_table({name}, data)"


def _naming(naming: str | mf.NamingScheme) -> mf.NamingScheme:
    try:
        return mf.NamingScheme(str(naming.value if isinstance(naming, mf.NamingScheme) else naming).upper())
    except ValueError as exc:
        raise InvalidArgumentError(f"naming scheme must be 'V1' or 'V2', got {naming!r}") from exc


class Table:
    """A Lance table at one version."""

    #: set while a multi-table transaction holds this table (catalog/transaction.py):
    #: its ``stage(table, txn, base, ...)`` records each commit instead
    _staging: Any = None
    #: set while the maintenance the table's properties ask for runs (its own commits start none)
    _maintaining: bool = False

    def __init__(
        self,
        store: ObjectStore,
        mfile: mf.ManifestFile,
        *,
        handler: CommitHandler | None = None,
        max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    ) -> None:
        handler = handler or NativeCommitHandler()
        self._snap = TableSnapshot(store, mfile, handler, max_rows_per_file, files=FileReaderCache(store))

    # -- construction -------------------------------------------------------------------

    @classmethod
    @writes.one_sync_round
    def create(
        cls,
        uri: str,
        data_or_schema: Data | pa.Schema,
        *,
        file_version: str = "2.2",
        naming: str = "V2",
        mode: str = "create",
        stable_row_ids: bool = False,
        max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
        commit_store: str | ManifestStore | None = None,
        storage_options: dict[str, str] | None = None,
        retry: RetryPolicy | None = None,
        durability: str | None = None,
        progress: WriteProgress | None = None,
    ) -> Table:
        """Create a table from data (Arrow, pandas, ...) or from a pyarrow schema.

        ``durability`` (local disk): ``"sync"`` (the default) makes every
        acknowledged write survive a power loss; ``"none"`` skips every
        fsync, as pylance does (see :attr:`durability`).

        ``commit_store`` names an external manifest store (``redis://...``,
        ``dynamodb:///TABLE?...``, a SQLAlchemy URL) that coordinates commits;
        without it, the object store's own put-if-not-exists does.
        ``mode="create"`` refuses an existing table; ``"overwrite"`` replaces it.
        ``retry`` bounds retries and read-backs (default :class:`RetryPolicy`).
        ``progress``: told the rows written (see :mod:`tessera.catalog.table.write_progress`).

        ``uri`` is a location: a URI, an absolute path, or a relative path
        with a separator (``"warehouse/events"``, ``"./t2"``).  A bare name
        (``"ns.t2"``, ``"t2"``) is a table *name* and is refused with
        :class:`TableNameError` (see :mod:`tessera.catalog.names`): create
        catalog tables with ``tessera.connect(...).create_table(name, ...)``."""
        check_location(uri, catalog_hint=_CREATE_HINT)
        store = open_object_store(uri, storage_options, durability)
        handler = open_handler(uri, commit_store, retry)
        handler.check_store(store)  # refuse an untrustworthy store before writing anything
        version = normalize_version(file_version)
        scheme = _naming(naming)
        if mode not in ("create", "overwrite"):
            raise InvalidArgumentError(f"mode must be 'create' or 'overwrite', got {mode!r}")
        if list_versions(store)[0] or handler.table_exists(store):
            if mode == "create":
                raise TableExistsError(f"a table already exists at {store.uri}; open it, or pass mode='overwrite'")
            table = cls.open(
                uri, commit_store=commit_store, storage_options=storage_options, retry=retry, durability=durability
            )
            table.overwrite(data_or_schema, progress=progress)
            return table
        mfile = writes.create(
            store, handler, data_or_schema, version, scheme, stable_row_ids, max_rows_per_file, progress
        )
        return cls(store, mfile, handler=handler, max_rows_per_file=max_rows_per_file)

    @classmethod
    def open(
        cls,
        uri: str | list[str],
        version: int | str | None = None,
        *,
        commit_store: str | ManifestStore | None = None,
        storage_options: dict[str, str] | None = None,
        retry: RetryPolicy | None = None,
        namespace: Any = None,
        namespace_properties: dict[str, str] | None = None,
        durability: str | None = None,
    ) -> Table:
        """Open the latest version, a version number, or a tag name.

        ``durability``: what this table's writes make durable on local disk
        (``"sync"``, the default, or ``"none"``; see :attr:`durability`).

        ``retry`` bounds the retries and read-backs of this table's commits.
        With ``namespace`` (a Lance Namespace client, or the ``http(s)://``
        URL of a REST namespace such as ``tessera serve``), ``uri`` is the
        table's id in it (``"sales.orders"`` or a list of parts) and every
        commit goes through the namespace's ``create_table_version``;
        ``namespace_properties`` configure a URL's client
        (``{"header.Authorization": "Bearer TOKEN"}``).

        Without ``namespace``, ``uri`` is a location: a URI, an absolute
        path, or a relative path with a separator (``"warehouse/events"``,
        ``"./t2"``).  A bare name (``"ns.t2"``, ``"t2"``) is a table *name*
        and is refused with :class:`TableNameError` (see
        :mod:`tessera.catalog.names`): open it from its catalog
        (``tessera.connect(...).load_table(name)``) or its namespace.

        Without ``commit_store``, a table whose manifest records an external
        manifest store is opened through it: a URL of the configuration's
        ``commit_stores`` with that store's identity, else the recorded
        credential-free address (see :mod:`tessera.catalog.table.coordinator`);
        when neither can be used the table is readable and every write is
        refused with CoordinatorMismatchError saying why."""
        if namespace is not None:
            if commit_store is not None:
                raise InvalidArgumentError("a table opened through a namespace commits through it: no commit_store")
            ns_store, mfile, ns_handler = coordinator.open_in_namespace(
                namespace, uri, version, storage_options, retry, namespace_properties
            )
            table = cls(ns_store, mfile, handler=ns_handler)
            if durability is not None:
                table.durability = durability
            return table
        if not isinstance(uri, str):
            raise InvalidArgumentError(f"a table URI is a string (a list is a table id: pass namespace=), got {uri!r}")
        check_location(uri, catalog_hint=_OPEN_HINT)
        store = open_object_store(uri, storage_options, durability)
        mfile, handler = coordinator.open_by_path(uri, store, version, commit_store, retry)
        return cls(store, mfile, handler=handler)

    # -- state ---------------------------------------------------------------------------

    @property
    def snapshot(self) -> TableSnapshot:
        """The version this object is pinned to, as an immutable value."""
        return self._snap

    # the handler under the name Table's state had (tests read it and one swaps it;
    # code outside catalog/table/ reads `snapshot`)

    @property
    def _handler(self) -> CommitHandler:
        return self._snap.handler

    @_handler.setter
    def _handler(self, handler: CommitHandler) -> None:
        self._snap = dataclasses.replace(self._snap, handler=handler)

    @property
    def durability(self) -> str:
        """What this table's writes make durable before they return, on local
        disk: ``"sync"`` (the default: data files, the manifest and its name
        are fsynced, so an acknowledged commit survives a power loss) or
        ``"none"`` (no fsync, as pylance: a crash of the process loses
        nothing, a power loss may lose the latest acknowledged commits).
        ``with tessera.durability("none"):`` sets it for the calls in the
        block.  S3 writes are durable when acknowledged, whatever the setting."""
        return getattr(self.store, "durability", "sync")

    @durability.setter
    def durability(self, mode: str) -> None:
        check_durability(mode)
        if hasattr(self.store, "durability"):
            self.store.durability = mode

    @property
    def max_rows_per_file(self) -> int:
        return self._snap.max_rows_per_file

    @max_rows_per_file.setter
    def max_rows_per_file(self, rows: int) -> None:
        self._snap = dataclasses.replace(self._snap, max_rows_per_file=rows)

    @property
    def uri(self) -> str:
        return self._snap.uri

    @property
    def store(self) -> ObjectStore:
        return self._snap.store

    @property
    def version(self) -> int:
        return self._snap.version

    @property
    def schema(self) -> pa.Schema:
        return self._snap.schema

    @property
    def manifest(self) -> table_pb2.Manifest:
        return self._snap.manifest

    @property
    def file_version(self) -> str:
        return self._snap.file_version

    @property
    def stable_row_ids(self) -> bool:
        return self._snap.stable_row_ids

    @property
    def fragments(self) -> list[table_pb2.DataFragment]:
        return self._snap.fragments

    @property
    def tags(self) -> Tags:
        return Tags(self._snap.store)

    def latest_version(self) -> int:
        return self._handler.latest_version(self._snap.store)

    def refresh(self) -> Table:
        """Move this object to the latest version."""
        self._snap = self._snap.at(self._handler.load(self._snap.store))
        return self

    def repair(self) -> list[str]:
        """Finish half-done commits (external stores); returns what could not be finished."""
        return self._handler.repair(self._snap.store)

    def checkout(self, version: int | str) -> Table:
        """A new Table at ``version`` (a number or a tag)."""
        return Table(
            self._snap.store,
            self._handler.load(self._snap.store, self.tags.version_of(version)),
            handler=self._handler,
            max_rows_per_file=self.max_rows_per_file,
        )

    checkout_version = checkout  # pylance's name

    def __repr__(self) -> str:
        return f"Table({self.uri!r}, version={self.version}, rows={self.count_rows()})"

    def close(self) -> None:
        """Release the connections of this table's manifest store (if any)
        and the data files its takes keep open."""
        self._handler.close()
        if self._snap.files is not None:
            self._snap.files.close()

    # -- committing ----------------------------------------------------------------------

    def _stage(self) -> writes.Stage | None:
        """Inside a multi-table transaction, what records this table's commits there."""
        staging = self._staging
        return None if staging is None else functools.partial(staging.stage, self)

    def _move_to(self, mfile: mf.ManifestFile | None) -> None:
        """Move to the version an operation committed (None: it committed
        nothing), then run the maintenance the table's properties ask for after
        a commit (``auto_maintenance.after_commit``: automatic clean-up and
        compaction; never raises).  Inside a multi-table transaction nothing
        is committed yet: the maintenance waits for the next write."""
        if mfile is None:
            return
        before = self._snap.version
        self._snap = self._snap.at(mfile)
        if self._staging is None and not self._maintaining and self._snap.version > before:
            self._maintaining = True
            try:
                auto_maintenance.after_commit(self, before)
            finally:
                self._maintaining = False

    def _maintain_indices(self, columns: Sequence[str] | None = None) -> None:
        """The second step of a write that added fragments: a commit of the zone
        maps covering them (``indexes.maintain``).  Inside a multi-table
        transaction it waits: the transaction runs it for each table after
        committing (catalog/transaction.py)."""
        if self._staging is None:
            self._move_to(indexes.maintain(self._snap, columns))

    # -- writes --------------------------------------------------------------------------

    @writes.one_sync_round
    def append(
        self,
        data: Data,
        *,
        progress: WriteProgress | None = None,
        txn_app_id: str | None = None,
        txn_version: int | None = None,
        schema_mode: Literal["merge"] | None = None,
    ) -> Table:
        """Append rows; their columns must match the table's (by name), or add theirs: ``schema_mode="merge"``.
        ``progress``: told the rows written (see :mod:`tessera.catalog.table.write_progress`).
        ``txn_app_id``/``txn_version`` make the write idempotent, as Delta's: a version of the
        application the table already holds writes nothing (see :mod:`tessera.commit.app_txn`)."""
        app = writes.check_app(txn_app_id, txn_version, self._staging)
        written = schema_evolution.append(self._snap, data, self._stage(), progress, app, schema_mode)
        if written is not None:  # no rows: no version
            self._move_to(written)
            self._maintain_indices()
        return self

    @writes.one_sync_round
    def overwrite(
        self,
        data: Data | pa.Schema,
        *,
        progress: WriteProgress | None = None,
        txn_app_id: str | None = None,
        txn_version: int | None = None,
    ) -> Table:
        """Replace every row; the new data may have a new schema.  ``progress``,
        ``txn_app_id`` and ``txn_version`` as :meth:`append` takes them."""
        app = writes.check_app(txn_app_id, txn_version, self._staging)
        self._move_to(writes.overwrite(self._snap, data, self._stage(), progress, app))
        self._maintain_indices()
        return self

    @writes.one_sync_round
    def delete(self, predicate: Predicate) -> Table:
        """Delete the rows matching ``predicate`` (SQL text or a pyarrow expression)."""
        from . import mutations  # the predicate machinery (sqlglot): imported with the first mutation

        self._move_to(mutations.delete(self._snap, predicate, self._stage()))
        return self

    @writes.one_sync_round
    def update(self, values: dict[str, Any], where: Predicate | None = None) -> Table:
        """Set columns to values or expressions (SQL strings or pyarrow
        expressions) on the rows matching ``where`` (all rows when None)."""
        from . import mutations

        self._move_to(mutations.update(self._snap, values, where, self._stage()))
        self._maintain_indices()
        return self

    @writes.one_sync_round
    def merge_insert(
        self,
        data: Data | str | Sequence[str] | None = None,
        on: str | Sequence[str] | None = None,
        *,
        when_matched_update_all: bool = True,
        when_not_matched_insert_all: bool = True,
        when_not_matched_by_source_delete: bool = False,
    ) -> dict[str, int] | MergeInsertBuilder:
        """Upsert ``data`` by the key columns ``on``; returns counts of rows
        updated, inserted and deleted (pylance's semantics: every matched
        target row is updated, a target row matched by two source rows is an
        error, NULL keys never match).

        ``t.merge_insert("id")`` or ``t.merge_insert(on="id")`` (the key columns only) returns pylance's
        builder instead: ``.when_matched_update_all().when_not_matched_insert_all().execute(data)``."""
        from . import mutations

        if data is None and on is not None:
            return mutations.MergeInsertBuilder(self, on)
        if on is None:
            if isinstance(data, str) or (isinstance(data, (list, tuple)) and all(isinstance(c, str) for c in data)):
                return mutations.MergeInsertBuilder(self, data)
            raise InvalidArgumentError("merge_insert needs the key columns: merge_insert(data, on=...)")
        mfile, stats = mutations.merge_insert(
            self._snap,
            data,
            on,
            when_matched_update_all,
            when_not_matched_insert_all,
            when_not_matched_by_source_delete,
            self._stage(),
        )
        self._move_to(mfile)
        self._maintain_indices()
        return stats

    @writes.one_sync_round
    def add_columns(self, columns: dict[str, Predicate] | Data) -> Table:
        """Add columns computed from expressions ({name: SQL or pyarrow
        expression}) or given as data (a table with one row per live row)."""
        from . import schema_ops  # the predicate machinery (sqlglot)

        self._move_to(schema_ops.add_columns(self._snap, columns, self._stage()))
        self._maintain_indices()
        return self

    @writes.one_sync_round
    def drop_columns(self, names: Sequence[str]) -> Table:
        from . import schema_ops

        self._move_to(schema_ops.drop_columns(self._snap, names, self._stage()))
        return self

    def rename_column(self, old: str, new: str) -> Table:
        return self.alter_columns({"path": old, "name": new})

    @writes.one_sync_round
    def alter_columns(self, *alterations: schema_evolution.AlterColumn) -> Table:
        """Rename, set the nullability of or widen columns at any depth in one commit, with pylance's arguments
        (``{"path": "s.b", "name": ..., "nullable": ..., "data_type": pa.int64()}``; :mod:`.schema_evolution`)."""
        self._move_to(schema_evolution.alter_columns(self._snap, alterations, self._stage()))
        self._maintain_indices()
        return self

    @writes.one_sync_round
    def restore(self, version: int | str) -> Table:
        """Make an older version (or tag) the latest, as a new version."""
        self._move_to(writes.restore(self._snap, self.tags.version_of(version), self._stage()))
        return self

    # -- properties and indices ----------------------------------------------------------

    @property
    def properties(self) -> dict[str, str]:
        """The table's properties (the manifest's config), e.g. ``tessera.zonemap.columns``."""
        return dict(self.manifest.config)

    @writes.one_sync_round
    def set_properties(self, values: dict[str, str] | None = None, *, remove: Sequence[str] = ()) -> Table:
        """Set (and ``remove``) table properties in one commit.  ``tessera.zonemap.columns``
        (comma-separated column names) names the columns whose zone maps every
        write keeps current; setting it indexes those columns now.  The commit
        coordinator's own keys (``tessera.commit.*``) cannot be set."""
        values, removed = writes.check_properties(values, remove)
        for c in indexes.parse_columns(values.get(indexes.ZONEMAP_COLUMNS)):
            indexes.check_indexable(self._snap, c)
        if not values and not removed:
            return self
        self._move_to(writes.set_properties(self._snap, values, removed, self._stage()))
        if indexes.ZONEMAP_COLUMNS in values:
            self._maintain_indices()
        return self

    @writes.one_sync_round
    def create_index(
        self,
        column: str,
        index_type: str = "zonemap",
        *,
        name: str | None = None,
        rows_per_zone: int | None = None,
    ) -> Table:
        """Build a ZONEMAP index (pylance 14's, per-zone min/max/null/NaN counts)
        on ``column`` over every fragment, replacing any zone map it has; from
        then on every write keeps it covering its new fragments.  Scans with a
        range filter on the column skip the fragments and row ranges no zone
        can match (pylance does too).  On a table without rows the column is
        recorded in ``tessera.zonemap.columns`` and indexed by the first write."""
        indexes.check_index_request(self._snap, column, index_type, name, rows_per_zone)
        if self.fragments:
            self._move_to(indexes.create_index(self._snap, column, name, rows_per_zone, self._stage()))
            return self
        configured = indexes.configured_columns(self._snap)
        if column not in configured:
            self.set_properties({indexes.ZONEMAP_COLUMNS: ",".join([*configured, column])})
        return self

    @writes.one_sync_round
    def optimize_indices(self) -> Table:
        """Extend every zone map (and index every ``tessera.zonemap.columns``
        column) to cover all fragments, in one commit; writes do this themselves."""
        self._move_to(indexes.optimize(self._snap, self._stage()))
        return self

    def list_indices(self) -> list[dict[str, Any]]:
        """The table's indices (pylance's and Tessera's): name, type, columns,
        uuid, the fragments covered and the version each was built on."""
        return indexes.list_indices(self._snap)

    def stats(self) -> TableStats:
        """This version's statistics: rows, deleted rows, fragments (small
        ones as pylance counts them), files, bytes, versions, per-column NULL
        counts and value bounds where zone maps cover the version, and each
        index's coverage (see :mod:`tessera.catalog.table.stats`)."""
        from .stats import table_stats  # zone maps and the predicate machinery: imported when asked

        return table_stats(self._snap)

    # -- reads ---------------------------------------------------------------------------

    def scanner(
        self,
        columns: Sequence[str] | None = None,
        filter: Predicate | None = None,
        limit: int | None = None,
        offset: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        with_row_address: bool = False,
        with_row_id: bool = False,
        readahead: int | None = None,
    ) -> Scan:
        """A scan of this version; ``readahead`` (default 8) fragments are read
        at once on a remote store such as S3 (1: one at a time)."""
        if readahead is not None and (isinstance(readahead, bool) or not isinstance(readahead, int) or readahead < 1):
            raise InvalidArgumentError(f"readahead must be a positive integer, got {readahead!r}")
        snap = self._snap
        scan = Scan(
            snap.store,
            snap.manifest.fragments,
            snap.fields,
            snap.schema,
            columns,
            filter,
            limit,
            offset,
            batch_size,
            with_row_address,
            with_row_id,
            readahead,
            file_cache=snap.files,
        )
        if filter is not None:
            from ..query.pruning import pruner  # the predicate machinery: imported with the first filter

            scan.row_ranges = pruner(snap.store, snap.index_section, snap.fields, snap.schema, filter, scan.fragments)
        return scan

    def to_arrow(
        self,
        columns: Sequence[str] | None = None,
        filter: Predicate | None = None,
        limit: int | None = None,
        offset: int | None = None,
        *,
        with_row_address: bool = False,
        with_row_id: bool = False,
    ) -> pa.Table:
        return self.scanner(
            columns, filter, limit, offset, with_row_address=with_row_address, with_row_id=with_row_id
        ).to_table()

    to_table = to_arrow  # pylance's name (LanceDataset.to_table: columns, filter, limit, offset)

    def to_batches(
        self,
        columns: Sequence[str] | None = None,
        filter: Predicate | None = None,
        limit: int | None = None,
        offset: int | None = None,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        with_row_address: bool = False,
        with_row_id: bool = False,
    ) -> pa.RecordBatchReader:
        return self.scanner(columns, filter, limit, offset, batch_size, with_row_address, with_row_id).reader()

    def to_pandas(self, **kw: Any) -> Any:
        """A pandas DataFrame (``to_arrow``'s arguments select rows and columns)."""
        return ldata.to_pandas(self.to_arrow(**kw), self.schema.metadata)

    def to_polars(self, **kw: Any) -> pl.DataFrame | pl.Series:
        """A Polars DataFrame (``to_arrow``'s arguments select rows and columns)."""
        import polars as pl

        return pl.from_arrow(self.to_arrow(**kw))

    def to_dataset(self) -> TesseraDataset:
        """A pyarrow Dataset view (DuckDB and Polars push projection and filters into it)."""
        from ..query.arrow_dataset import TesseraDataset

        return TesseraDataset(self)

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """This version's rows, every column, as an Arrow C stream (a PyCapsule),
        so Arrow consumers (``duckdb.sql("... from t")``, ``pa.table(t)``, Polars)
        read the table directly; a batch is read only when the consumer asks.
        ``requested_schema`` (a schema capsule) casts the columns."""
        from ..query.stream import BatchStream

        stream = BatchStream(self.scanner())
        try:
            return stream.to_reader().__arrow_c_stream__(requested_schema)
        except (TypeError, ValueError, pa.ArrowException) as e:
            stream.close()
            raise InvalidArgumentError(f"cannot stream {self.uri} as the requested schema: {e}") from None

    def to_duckdb(self, name: str | None = None, connection: Any = None) -> Any:
        """A DuckDB relation over this version (the :meth:`to_dataset` view:
        DuckDB pushes projections and filters into Tessera).  With ``name`` the
        view is also registered under that name for SQL on ``connection``
        (DuckDB's default connection when not given)."""
        return ldata.to_duckdb(self.to_dataset(), name, connection)

    def head(self, n: int = 5, columns: Sequence[str] | None = None, filter: Predicate | None = None) -> pa.Table:
        """The first ``n`` rows (of those matching ``filter``)."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise InvalidArgumentError(f"head needs a non-negative row count, got {n!r}")
        return self.to_arrow(columns, filter, limit=int(n))

    def count_rows(self, filter: Predicate | None = None) -> int:
        if filter is None:
            return sum(fragment_live_rows(f) for f in self.manifest.fragments)
        scan = self.scanner(columns=[], filter=filter)
        return sum(b.num_rows for b in scan.batches())

    def take(
        self, indices: Sequence[int], columns: Sequence[str] | None = None, *, with_row_address: bool = False
    ) -> pa.Table:
        """Rows by position among the live rows (0 .. count_rows()-1)."""
        return takes.take(self._snap, self._snap.files, indices, columns, with_row_address=with_row_address)

    def take_blobs(
        self,
        column: str,
        indices: Sequence[int] | None = None,
        *,
        ids: Sequence[int] | None = None,
        addresses: Sequence[int] | None = None,
    ) -> list[Any]:
        """Values of blob column ``column`` as read-only, seekable file-like
        objects (pylance's ``take_blobs``): each reads only the bytes asked
        for, from the data file (or sidecar) holding the value; None for a
        null value.  Select rows by exactly one of ``indices`` (positions
        among the live rows, as :meth:`take`), ``ids`` (``_rowid``) or
        ``addresses`` (``_rowaddr``).  Close the files when done.

        Raises:
            InvalidArgumentError: not exactly one selection, or a row that is not live.
            NotABlobColumnError: ``column`` is not a blob column.
            UnsupportedEncodingError: a value is an external blob (outside the table).
        """
        return takes.take_blobs(self._snap, self.row_id_index, self._snap.files, column, indices, ids, addresses)

    def row_id_index(self) -> RowIdIndex:
        """This version's row id -> row address index (built on first use, cached)."""
        cached = self.__dict__.get("_rowid_index_cache")
        if cached is None or cached[0] is not self._snap.mfile:
            index = RowIdIndex.build(self._snap.store, self.manifest.fragments)
            cached = self.__dict__["_rowid_index_cache"] = (self._snap.mfile, index)
        return cached[1]

    def take_rows(
        self, row_ids: Sequence[int] | np.ndarray, columns: Sequence[str] | None = None, *, on_missing: str = "skip"
    ) -> pa.Table:
        """Rows by ``_rowid`` (the stable id; the row address without stable
        row ids), in the order given; ids not live are skipped (or raise with
        ``on_missing="raise"``)."""
        return takes.take_rows(self._snap, self.row_id_index, self._snap.files, row_ids, columns, on_missing=on_missing)

    # -- history and maintenance ---------------------------------------------------------

    def versions(self) -> list[dict[str, Any]]:
        """Every version: number, timestamp, operation, rows added and removed."""
        return maintenance.versions(self._snap)

    def changes(
        self, start_version: int, end_version: int | None = None, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """The rows versions ``start_version`` to ``end_version`` (default: this
        one) inserted, updated and deleted, with Delta's ``_change_type``,
        ``_commit_version`` and ``_commit_timestamp`` (see :mod:`tessera.catalog.table.changes`)."""
        from .changes import changes

        return changes(self._snap, start_version, end_version, columns)

    @writes.one_sync_round
    def compact(
        self,
        target_rows_per_fragment: int = 1024 * 1024,
        sort_by: str | Sequence[str] | None = None,
        *,
        materialize_deletions: bool = True,
        materialize_deletions_threshold: float = 0.1,
        external_sequences_over: int | None = None,
        progress: Progress | None = None,
    ) -> CompactionMetrics:
        """Merge small fragments and materialise deletions (row ids are kept);
        ``sort_by`` (column names) also sorts the rows.  Returns CompactionMetrics.
        ``progress(phase, done, total)`` is told how many fragments are rewritten."""
        metrics, mfile = compaction.compact(
            self._snap,
            target_rows_per_fragment,
            sort_by,
            materialize_deletions=materialize_deletions,
            materialize_deletions_threshold=materialize_deletions_threshold,
            external_sequences_over=external_sequences_over,
            progress=progress,
            stage=self._stage(),
        )
        self._move_to(mfile)
        if metrics.groups:
            self._maintain_indices(compaction.zonemap_columns(self._snap, sort_by))
        return metrics

    def cleanup(
        self,
        older_than: dt.timedelta | dt.datetime = dt.timedelta(days=14),
        *,
        keep_tagged: bool = True,
        orphan_age: dt.timedelta | None = dt.timedelta(days=1),
        dry_run: bool = False,
        progress: Progress | None = None,
    ) -> VersionCleanupReport:
        """Delete versions older than ``older_than`` (except the latest and, with
        ``keep_tagged``, tagged ones; the tags of removed versions are deleted)
        and every file only they needed, then failed commits' orphans older than
        ``orphan_age``.  Returns a VersionCleanupReport; ``progress(phase, done,
        total)`` is told how far the reading of versions and the deleting are."""
        return maintenance.cleanup(self._snap, older_than, keep_tagged, orphan_age, dry_run, progress)

    def verify(self, *, all_versions: bool = False, progress: Progress | None = None) -> VerifyReport:
        """Check every byte of this version's data and index files (``all_versions``:
        of every version on storage) against the checksums Tessera writes into
        them; files of other writers have none (see :mod:`tessera.catalog.table.verify`)."""
        from .verify import verify

        return verify(self._snap, all_versions, progress)

    def cleanup_orphans(self, older_than: dt.timedelta | None = None, *, dry_run: bool = False) -> CleanupReport:
        """Remove files of failed commits (unreferenced data, deletion and
        transaction files, stale staged manifests) older than ``older_than``."""
        return maintenance.cleanup_orphans(self._snap, older_than, dry_run)


__all__ = ["Table", "TableExistsError", "TableNotFoundError", "RetryPolicy"]
