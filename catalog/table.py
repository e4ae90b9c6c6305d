"""``Table``: a Lance dataset with every table operation and time travel.

A Table object is pinned to one version.  Write operations build a transaction
on that version, commit it through ``commit`` (retrying on conflicts) and move
the object to the version they created.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import uuid as uuidlib
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from tessera.commit import store as tstore
from tessera.commit.committer import commit_operation, commit_transaction, fragment_live_rows, new_transaction
from tessera.commit.errors import (
    CommitConflictError,
    CoordinatorMismatchError,
    TableNotFoundError,
    VersionNotFoundError,
)
from tessera.commit.handlers import CommitHandler, ExternalCommitHandler, NativeCommitHandler
from tessera.commit.retry import RetryPolicy
from tessera.format import manifest as mf
from tessera.format import schema as lschema
from tessera.format.container import normalize_version
from tessera.format.protos import table_pb2, transaction_pb2
from tessera.format.table.fragments import DEFAULT_MAX_ROWS_PER_FILE, FragmentReader, write_fragments
from tessera.stores.manifest_store import forget_store_id, normalize_table_uri, open_manifest_store
from tessera.stores.object_store import ObjectStore, open_object_store

from . import data as ldata
from .errors import InvalidArgumentError, TableExistsError
from .names import check_location, is_table_name
from .scan import DEFAULT_BATCH_SIZE, Scan
from .tags import Tags

if TYPE_CHECKING:
    import polars as pl

    from tessera.commit.cleanup import CleanupReport, Progress
    from tessera.commit.version_cleanup import VersionCleanupReport
    from tessera.stores.manifest_store import ManifestStore

    from .arrow_dataset import TesseraDataset
    from .compaction import CompactionMetrics
    from .mutations import MergeInsertBuilder
    from .predicate import Predicate
    from .rowid_index import RowIdIndex
    from .transaction import _Staging

log = logging.getLogger(__name__)

Data = Any
"""Rows as anything :func:`tessera.catalog.data.to_reader` accepts: a pyarrow
Table, RecordBatch(Reader) or Dataset, a pandas DataFrame, a Polars frame, a
list of dicts, a dict of columns, or any Arrow C stream."""


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


def make_handler(
    uri: str, commit_store: str | ManifestStore | None = None, retry: RetryPolicy | None = None
) -> CommitHandler:
    """The commit handler for a table: native, or through an external store
    (a URL or an already opened ManifestStore), with the retry policy ``retry``."""
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise InvalidArgumentError(f"retry must be a commit.retry.RetryPolicy, got {type(retry).__name__}")
    if commit_store is None:
        return NativeCommitHandler(retry)
    ms = shared_manifest_store(commit_store) if isinstance(commit_store, str) else commit_store
    return ExternalCommitHandler(ms, normalize_table_uri(uri), policy=retry)


_shared_stores: dict[str, ManifestStore] = {}
_shared_lock = threading.Lock()


def shared_manifest_store(url: str) -> ManifestStore:
    """The process's store for ``url``, opened (and its schema checked) once:
    a ``Table.open`` by URL then costs no new connection pool, TCP connect,
    login or schema reflection (a SQL store's check is 11 queries).  Stores
    are thread-safe, and closing one only empties its connection pool (the
    next use reconnects).  A store that later finds its schema changed still
    raises StoreSchemaError on the statement that meets it, and its store id
    is read again on every open (a store recreated at the address is refused)."""
    with _shared_lock:
        ms = _shared_stores.get(url)
        if ms is None or getattr(ms, "replaced", lambda: False)():  # a SQLite file deleted or replaced
            ms = _shared_stores[url] = open_manifest_store(url)
        else:
            forget_store_id(ms)  # one small read per open: a recreated store is refused
        return ms


class Table:
    """A Lance table at one version."""

    _staging: _Staging | None = None  # set while a multi-table transaction holds this table
    _affected: dict[int, np.ndarray] | None = None  # rows a mutation deleted, per fragment (for rebase)

    def __init__(
        self,
        store: ObjectStore,
        mfile: mf.ManifestFile,
        *,
        handler: CommitHandler | None = None,
        max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    ) -> None:
        self._store = store
        self._mfile = mfile
        self._handler = handler or NativeCommitHandler()
        self.max_rows_per_file = max_rows_per_file
        self._load_schema()

    # -- construction -------------------------------------------------------------------

    @classmethod
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
    ) -> Table:
        """Create a table from data (Arrow, pandas, ...) or from a pyarrow schema.

        ``commit_store`` names an external manifest store (``redis://...``,
        ``dynamodb:///TABLE?...``, a SQLAlchemy URL) that coordinates commits;
        without it, the object store's own put-if-not-exists does.
        ``mode="create"`` refuses an existing table; ``"overwrite"`` replaces it.
        ``retry`` bounds retries and read-backs (default :class:`RetryPolicy`).

        ``uri`` is a location: a URI, an absolute path, or a relative path
        with a separator (``"warehouse/events"``, ``"./t2"``).  A bare name
        (``"ns.t2"``, ``"t2"``) is a table *name* and is refused with
        :class:`TableNameError` (see :mod:`tessera.catalog.names`): create
        catalog tables with ``tessera.connect(...).create_table(name, ...)``."""
        check_location(uri, catalog_hint=_CREATE_HINT)
        store = open_object_store(uri, storage_options)
        handler = make_handler(uri, commit_store, retry)
        handler.check_store(store)  # refuse an untrustworthy store before writing anything
        version = normalize_version(file_version)
        scheme = _naming(naming)
        if mode not in ("create", "overwrite"):
            raise InvalidArgumentError(f"mode must be 'create' or 'overwrite', got {mode!r}")
        if tstore.list_versions(store)[0] or handler.table_exists(store):
            if mode == "create":
                raise TableExistsError(f"a table already exists at {store.uri}; open it, or pass mode='overwrite'")
            table = cls.open(uri, commit_store=commit_store, storage_options=storage_options, retry=retry)
            table.overwrite(data_or_schema)
            return table
        batches: Iterable[pa.RecordBatch]
        if isinstance(data_or_schema, pa.Schema):
            schema, batches = data_or_schema, []
        else:
            reader = ldata.to_reader(data_or_schema)
            schema, batches = reader.schema, ldata.iter_batches(reader)
        fields = lschema.fields_from_arrow(schema)
        frags = write_fragments(store, batches, schema, fields, version, max_rows_per_file)
        txn = new_transaction(0)
        txn.overwrite.fragments.extend(frags)
        txn.overwrite.schema.extend(lschema.fields_to_protos(fields))
        for k, v in (schema.metadata or {}).items():
            txn.overwrite.schema_metadata[k.decode()] = v
        for k, v in handler.config().items():
            txn.overwrite.config_upsert_values[k] = v
        try:
            mfile = commit_transaction(
                store, txn, None, handler=handler, data_format=version, naming=scheme, stable_row_ids=stable_row_ids
            )
        except CommitConflictError as exc:
            raise TableExistsError(f"a table was created at {store.uri} concurrently") from exc
        handler.bind(mfile.manifest, store.uri)
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
    ) -> Table:
        """Open the latest version, a version number, or a tag name.

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
        (``tessera.connect(...).load_table(name)``) or its namespace."""
        if namespace is not None:
            if commit_store is not None:
                raise InvalidArgumentError("a table opened through a namespace commits through it: no commit_store")
            return cls._open_in_namespace(namespace, uri, version, storage_options, retry, namespace_properties)
        if not isinstance(uri, str):
            raise InvalidArgumentError(f"a table URI is a string (a list is a table id: pass namespace=), got {uri!r}")
        check_location(uri, catalog_hint=_OPEN_HINT)
        store = open_object_store(uri, storage_options)
        handler = make_handler(uri, commit_store, retry)
        try:
            mfile = handler.load(store, Tags(store).version_of(version) if version is not None else None)
        except TableNotFoundError:
            if handler.kind != "native" and tstore.list_versions(store)[0]:
                # a table is on storage, but the store has no rows for it: say whose it is
                handler.bind(tstore.load_manifest(store).manifest, store.uri)
                raise CoordinatorMismatchError(
                    f"{store.uri} has versions on storage, but the {handler.kind} store at "
                    f"{handler.config().get('tessera.commit.store')} has no rows for it "
                    "(the table was committed without this store, "
                    "or the store lost them); open it without commit_store, or with its own store"
                ) from None
            raise
        try:
            handler.bind(mfile.manifest, store.uri)
        except CoordinatorMismatchError:
            pass  # reading is allowed; every write binds again and is refused
        return cls(store, mfile, handler=handler)

    @classmethod
    def _open_in_namespace(
        cls,
        namespace: Any,
        table_id: str | Sequence[str],
        version: int | str | None,
        storage_options: dict[str, str] | None,
        retry: RetryPolicy | None,
        properties: dict[str, str] | None = None,
    ) -> Table:
        from lance_namespace import DescribeTableRequest

        from tessera.commit.namespace_client import NamespaceCommitHandler, _call, connect_namespace

        try:
            ns = connect_namespace(namespace, properties)
        except ValueError as exc:
            raise InvalidArgumentError(str(exc)) from None
        if isinstance(table_id, str) and table_id and not is_table_name(table_id):
            raise InvalidArgumentError(
                f"{table_id!r} is a path or URI, but a table opened through a namespace is named by its id "
                "('namespace.table'); open a path without namespace="
            )
        parts = table_id.split(".") if isinstance(table_id, str) else list(table_id)
        if not parts or not all(isinstance(p, str) and p for p in parts):
            raise InvalidArgumentError(f"a table id is 'namespace.table' or a list of parts, got {table_id!r}")
        handler = NamespaceCommitHandler(ns, parts, retry)
        described = _call(ns, "describe_table", DescribeTableRequest, id=parts)
        location = described.get("location") or described.get("table_uri")
        if not location:
            raise TableNotFoundError(f"the namespace names no location for {'.'.join(parts)}")
        opts = {**(described.get("storage_options") or {}), **(storage_options or {})}
        store = open_object_store(str(location), opts or None)
        mfile = handler.load(store, Tags(store).version_of(version) if version is not None else None)
        return cls(store, mfile, handler=handler)

    # -- state ---------------------------------------------------------------------------

    def _load_schema(self) -> None:
        m = self._mfile.manifest
        self._fields = lschema.fields_from_protos(m.fields)
        meta = {k: v for k, v in m.schema_metadata.items()}
        self._schema = lschema.to_arrow_schema(self._fields, meta)

    @property
    def uri(self) -> str:
        return self._store.uri

    @property
    def store(self) -> ObjectStore:
        return self._store

    @property
    def version(self) -> int:
        return self._mfile.version

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    @property
    def manifest(self) -> table_pb2.Manifest:
        return self._mfile.manifest

    @property
    def file_version(self) -> str:
        return self.manifest.data_format.version or "2.0"

    @property
    def stable_row_ids(self) -> bool:
        return bool(self.manifest.reader_feature_flags & mf.FLAG_STABLE_ROW_IDS)

    @property
    def fragments(self) -> list[table_pb2.DataFragment]:
        return list(self.manifest.fragments)

    @property
    def tags(self) -> Tags:
        return Tags(self._store)

    def latest_version(self) -> int:
        return self._handler.latest_version(self._store)

    def refresh(self) -> Table:
        """Move this object to the latest version."""
        self._mfile = self._handler.load(self._store)
        self._load_schema()
        return self

    def repair(self) -> list[str]:
        """Finish half-done commits (external stores); returns what could not be finished."""
        return self._handler.repair(self._store)

    def checkout(self, version: int | str) -> Table:
        """A new Table at ``version`` (a number or a tag)."""
        return Table(
            self._store,
            self._handler.load(self._store, self.tags.version_of(version)),
            handler=self._handler,
            max_rows_per_file=self.max_rows_per_file,
        )

    def __repr__(self) -> str:
        return f"Table({self.uri!r}, version={self.version}, rows={self.count_rows()})"

    # -- committing ----------------------------------------------------------------------

    def _check_writable(self) -> None:
        """Refuse before writing anything when the table needs a newer writer."""
        mf.check_flags(self.manifest, writing=True)

    def _commit_txn(
        self, txn: transaction_pb2.Transaction, base: mf.ManifestFile, deadline: float | None = None, **kw: Any
    ) -> mf.ManifestFile:
        staging = self._staging
        if staging is not None:  # inside a multi-table transaction: record, commit later
            return staging.stage(self, txn, base, **kw)
        return commit_transaction(self._store, txn, base, handler=self._handler, deadline=deadline, **kw)

    def _commit(self, txn: transaction_pb2.Transaction, base: mf.ManifestFile, **kw: Any) -> None:
        self._mfile = self._commit_txn(txn, base, **kw)
        self._load_schema()

    def close(self) -> None:
        """Release the connections of this table's manifest store (if any)
        and the data files its takes keep open."""
        self._handler.close()
        cache = self.__dict__.pop("_file_reader_cache", None)
        if cache is not None:
            cache.close()

    def _run(self, build: Callable[[Table, mf.ManifestFile], transaction_pb2.Transaction | None]) -> None:
        """Build a transaction on this version and commit it; when a concurrent
        commit conflicts, re-run ``build`` on the latest version (the handler's
        retry policy bounds it)."""
        self._check_writable()
        self._handler.bind(self.manifest, self.uri)
        affected: dict[str, dict[int, np.ndarray] | None] = {}

        def make(base: mf.ManifestFile) -> transaction_pb2.Transaction | None:
            view = (
                self
                if base is self._mfile
                else Table(self._store, base, handler=self._handler, max_rows_per_file=self.max_rows_per_file)
            )
            view._affected = {}
            txn = build(view, base)
            affected["rows"] = view._affected
            return txn

        def commit(txn: transaction_pb2.Transaction, base: mf.ManifestFile, deadline: float) -> mf.ManifestFile:
            return self._commit_txn(txn, base, deadline, affected_rows=affected.get("rows"))

        mfile = commit_operation(self._store, self._handler, self._mfile, make, commit=commit)
        if mfile is not None:
            self._mfile = mfile
            self._load_schema()

    def _write(
        self, data: Data, schema: pa.Schema | None = None, fields: list[lschema.LanceField] | None = None
    ) -> list[table_pb2.DataFragment]:
        reader = ldata.to_reader(data, schema)
        schema = schema or self._schema
        return write_fragments(
            self._store,
            ldata.iter_batches(reader),
            schema,
            fields or self._fields,
            self.file_version,
            self.max_rows_per_file,
            data_schema=reader.schema,  # pylance's write rule, checked before anything is written
        )

    # -- writes --------------------------------------------------------------------------

    def append(self, data: Data) -> Table:
        """Append rows; their columns must match the table's (by name)."""
        self._check_writable()
        self._handler.bind(self.manifest, self.uri)
        frags = self._write(data)
        if not frags:
            return self

        def build(view: Table, base: mf.ManifestFile) -> transaction_pb2.Transaction:
            txn = new_transaction(base.version)
            txn.append.fragments.extend(frags)
            return txn

        self._run(build)
        self._after_write()
        return self

    def overwrite(self, data: Data | pa.Schema) -> Table:
        """Replace every row; the new data may have a new schema."""
        self._check_writable()
        self._handler.bind(self.manifest, self.uri)
        source: Iterable[pa.RecordBatch]
        if isinstance(data, pa.Schema):
            schema, source = data, []
        else:
            reader = ldata.to_reader(data)
            schema, source = reader.schema, ldata.iter_batches(reader)
        fields = lschema.fields_from_arrow(schema)
        frags = write_fragments(self._store, source, schema, fields, self.file_version, self.max_rows_per_file)
        txn = new_transaction(self.version)
        txn.overwrite.fragments.extend(frags)
        txn.overwrite.schema.extend(lschema.fields_to_protos(fields))
        for k, v in (schema.metadata or {}).items():
            txn.overwrite.schema_metadata[k.decode()] = v
        self._commit(txn, self._mfile)
        self._after_write()
        return self

    def delete(self, predicate: Predicate) -> Table:
        """Delete the rows matching ``predicate`` (SQL text or a pyarrow expression)."""
        from .mutations import build_delete

        self._run(lambda view, base: build_delete(view, predicate))
        return self

    def update(self, values: dict[str, Any], where: Predicate | None = None) -> Table:
        """Set columns to values or expressions (SQL strings or pyarrow
        expressions) on the rows matching ``where`` (all rows when None)."""
        from .mutations import build_update

        self._run(lambda view, base: build_update(view, values, where))
        self._after_write()
        return self

    def merge_insert(
        self,
        data: Data | str | Sequence[str],
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

        ``t.merge_insert("id")`` (the key columns only) returns pylance's
        builder instead: ``.when_matched_update_all().when_not_matched_insert_all().execute(data)``."""
        from .mutations import MergeInsertBuilder, build_merge_insert

        if on is None:
            if isinstance(data, str) or (isinstance(data, (list, tuple)) and all(isinstance(c, str) for c in data)):
                return MergeInsertBuilder(self, data)
            raise InvalidArgumentError("merge_insert needs the key columns: merge_insert(data, on=...)")

        source = ldata.to_table(data)
        stats: dict[str, int] = {}
        self._run(
            lambda view, base: build_merge_insert(
                view,
                source,
                [on] if isinstance(on, str) else list(on),
                when_matched_update_all,
                when_not_matched_insert_all,
                when_not_matched_by_source_delete,
                stats,
            )
        )
        self._after_write()
        return stats

    def add_columns(self, columns: dict[str, Predicate] | Data) -> Table:
        """Add columns computed from expressions ({name: SQL or pyarrow
        expression}) or given as data (a table with one row per live row)."""
        from .mutations import build_add_columns

        self._run(lambda view, base: build_add_columns(view, columns))
        self._after_write()
        return self

    def drop_columns(self, names: Sequence[str]) -> Table:
        from .mutations import build_drop_columns

        self._run(lambda view, base: build_drop_columns(view, [names] if isinstance(names, str) else list(names)))
        return self

    def rename_column(self, old: str, new: str) -> Table:
        from .mutations import build_rename_column

        self._run(lambda view, base: build_rename_column(view, old, new))
        return self

    # -- properties and indices ----------------------------------------------------------

    @property
    def properties(self) -> dict[str, str]:
        """The table's properties (the manifest's config), e.g. ``tessera.zonemap.columns``."""
        return dict(self.manifest.config)

    def set_properties(self, values: dict[str, str] | None = None, *, remove: Sequence[str] = ()) -> Table:
        """Set (and ``remove``) table properties in one commit.  ``tessera.zonemap.columns``
        (comma-separated column names) names the columns whose zone maps every
        write keeps current; setting it indexes those columns now.  The commit
        coordinator's own keys (``tessera.commit.*``) cannot be set."""
        from .indexes import ZONEMAP_COLUMNS, check_indexable, maintain, parse_columns

        values = dict(values or {})
        remove = [remove] if isinstance(remove, str) else list(remove)
        for k, v in values.items():
            if not isinstance(k, str) or not k or not isinstance(v, str):
                raise InvalidArgumentError(
                    f"table properties are non-empty strings mapped to strings, got {k!r}: {v!r}"
                )
        for k in [*values, *remove]:
            if not isinstance(k, str) or k.startswith("tessera.commit."):
                raise InvalidArgumentError(f"{k!r} is not a property a user can set (the commit coordinator owns it)")
        for c in parse_columns(values.get(ZONEMAP_COLUMNS)):
            check_indexable(self, c)
        if not values and not remove:
            return self

        def build(view: Table, base: mf.ManifestFile) -> transaction_pb2.Transaction:
            txn = new_transaction(base.version)
            for k, v in values.items():
                txn.update_config.upsert_values[k] = v
            txn.update_config.delete_keys.extend(remove)
            return txn

        self._run(build)
        if ZONEMAP_COLUMNS in values:
            maintain(self)
        return self

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
        from .indexes import INDEX_TYPES, ZONEMAP_COLUMNS, build_index_transaction, check_indexable, configured_columns

        if not isinstance(index_type, str) or index_type.lower() not in INDEX_TYPES:
            raise InvalidArgumentError(f"unsupported index type {index_type!r}; Tessera builds {list(INDEX_TYPES)}")
        if rows_per_zone is not None and (
            isinstance(rows_per_zone, bool) or not isinstance(rows_per_zone, int) or rows_per_zone < 1
        ):
            raise InvalidArgumentError(f"rows_per_zone must be a positive integer, got {rows_per_zone!r}")
        if name is not None and (not isinstance(name, str) or not name):
            raise InvalidArgumentError(f"an index name is a non-empty string, got {name!r}")
        check_indexable(self, column)
        if not self.fragments:
            cols = configured_columns(self)
            if column not in cols:
                self.set_properties({ZONEMAP_COLUMNS: ",".join([*cols, column])})
            return self
        self._run(
            lambda view, base: build_index_transaction(
                view, [column], rebuild=True, rows_per_zone=rows_per_zone, name=name
            )
        )
        return self

    def optimize_indices(self) -> Table:
        """Extend every zone map (and index every ``tessera.zonemap.columns``
        column) to cover all fragments, in one commit; writes do this themselves."""
        from .indexes import build_index_transaction, maintained_columns

        self._run(lambda view, base: build_index_transaction(view, maintained_columns(view)))
        return self

    def list_indices(self) -> list[dict[str, Any]]:
        """The table's indices (pylance's and Tessera's): name, type, columns,
        uuid, the fragments covered and the version each was built on."""
        from pyroaring import BitMap

        raw = self._mfile.index_section
        if not raw:
            return []
        by_id = {f.id: f.name for f in self._fields}
        out = []
        for m in table_pb2.IndexSection.FromString(raw).indices:
            kind = m.index_details.type_url.rsplit(".", 1)[-1].removesuffix("IndexDetails") or "unknown"
            out.append(
                {
                    "name": m.name,
                    "type": kind.upper(),
                    "columns": [by_id.get(i, f"<field {i}>") for i in m.fields],
                    "uuid": str(uuidlib.UUID(bytes=bytes(m.uuid.uuid))),
                    "fragments": sorted(BitMap.deserialize(bytes(m.fragment_bitmap))) if m.fragment_bitmap else None,
                    "dataset_version": m.dataset_version,
                }
            )
        return out

    def _after_write(self) -> None:
        """Keep the zone maps covering what a write added (a second commit; see catalog/indexes.py)."""
        from .indexes import maintain

        maintain(self)

    def restore(self, version: int | str) -> Table:
        """Make an older version (or tag) the latest, as a new version."""
        number = self.tags.version_of(version)
        self._check_writable()
        self._handler.bind(self.manifest, self.uri)
        old = self._handler.load(self._store, number)
        latest = self._handler.load(self._store)
        txn = new_transaction(latest.version)
        txn.restore.version = number
        self._commit(txn, latest, restore_from=old)
        return self

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
        scan = Scan(
            self._store,
            self.manifest.fragments,
            self._fields,
            self._schema,
            columns,
            filter,
            limit,
            offset,
            batch_size,
            with_row_address,
            with_row_id,
            readahead,
        )
        if filter is not None:
            from .pruning import pruner  # the predicate machinery: imported with the first filter

            scan.row_ranges = pruner(
                self._store, self._mfile.index_section, self._fields, self._schema, filter, scan.fragments
            )
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
        return ldata.to_pandas(self.to_arrow(**kw), self._schema.metadata)

    def to_polars(self, **kw: Any) -> pl.DataFrame | pl.Series:
        """A Polars DataFrame (``to_arrow``'s arguments select rows and columns)."""
        import polars as pl

        return pl.from_arrow(self.to_arrow(**kw))

    def to_dataset(self) -> TesseraDataset:
        """A pyarrow Dataset view (DuckDB and Polars push projection and filters into it)."""
        from .arrow_dataset import TesseraDataset

        return TesseraDataset(self)

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """This version's rows, every column, as an Arrow C stream (a PyCapsule),
        so Arrow consumers (``duckdb.sql("... from t")``, ``pa.table(t)``, Polars)
        read the table directly; a batch is read only when the consumer asks.
        ``requested_schema`` (a schema capsule) casts the columns."""
        from .arrow_dataset import BatchStream

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
        import duckdb

        if connection is None:
            default = duckdb.default_connection
            connection = default() if callable(default) else default
        elif not isinstance(connection, duckdb.DuckDBPyConnection):
            raise InvalidArgumentError(f"connection must be a duckdb connection, not {type(connection).__name__}")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise InvalidArgumentError(f"name must be a non-empty string, got {name!r}")
        ds = self.to_dataset()
        if name is None:
            return connection.from_arrow(ds)
        connection.register(name, ds)
        return connection.view(name)

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
        from tessera.format.table.fragments import file_reader_cache

        from .scan import fields_by_name

        idx = np.asarray(indices, dtype=np.int64)
        frags = list(self.manifest.fragments)
        live = np.array([fragment_live_rows(f) for f in frags], dtype=np.int64)
        total = int(live.sum())
        if idx.size and (idx.min() < 0 or idx.max() >= total):
            raise InvalidArgumentError(f"take index out of range [0, {total})")
        names = list(columns) if columns is not None else list(self._schema.names)
        fields = fields_by_name(self._fields, names)
        out_schema = pa.schema(
            [self._schema.field(n) for n in names]
            + ([pa.field("_rowaddr", pa.uint64(), False)] if with_row_address else [])
        )
        if idx.size == 0:
            return out_schema.empty_table()
        starts = np.concatenate([[0], np.cumsum(live)])
        which = np.searchsorted(starts, idx, side="right") - 1
        pieces: list[pa.Table] = []
        order: list[np.ndarray] = []
        for fi in np.unique(which):
            sel = np.nonzero(which == fi)[0]
            frag = frags[fi]
            reader = FragmentReader(self._store, frag, fields, file_cache=file_reader_cache(self))
            pos = idx[sel] - starts[fi]
            deleted = reader.deleted_rows()
            if len(deleted):
                live_rows = np.setdiff1d(np.arange(frag.physical_rows), deleted.astype(np.int64), assume_unique=True)
                phys = live_rows[pos]
            else:
                phys = pos
            arrays = reader.take(phys) if fields else []
            if with_row_address:
                arrays.append(pa.array((np.uint64(frag.id) << np.uint64(32)) + phys.astype(np.uint64)))
            reader.close()
            pieces.append(pa.Table.from_arrays(arrays, schema=out_schema))
            order.append(sel)
        table = pa.concat_tables(pieces)
        inverse = np.empty(idx.size, dtype=np.int64)
        inverse[np.concatenate(order)] = np.arange(idx.size)
        return table.take(pa.array(inverse))

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
        from tessera.format.errors import NotABlobColumnError, RowOutOfRangeError
        from tessera.format.table.fragments import file_reader_cache, take_blobs

        from .scan import fields_by_name

        given = [x for x in (indices, ids, addresses) if x is not None]
        if len(given) != 1:
            raise InvalidArgumentError("take_blobs needs exactly one of indices, ids or addresses")
        (field,) = fields_by_name(self._fields, [column])
        if field.blob is None:
            raise NotABlobColumnError(
                f"column {column!r} is not a blob column (large_binary with lance-encoding:blob metadata)"
            )
        if indices is not None:
            addr = self.take(indices, columns=[], with_row_address=True).column("_rowaddr").to_numpy()
        elif ids is not None:
            from .rowid_index import resolve

            addr, found = resolve(self, np.asarray(ids, dtype=np.uint64).ravel())
            if not found.all():
                missing = np.asarray(ids)[~found][:5].tolist()
                raise InvalidArgumentError(f"row ids not live in version {self.version}: {missing}")
        else:
            addr = np.asarray(addresses, dtype=np.uint64)
        try:
            return take_blobs(self._store, self.manifest.fragments, field, addr, file_reader_cache(self))
        except RowOutOfRangeError as exc:
            raise InvalidArgumentError(str(exc)) from exc

    # -- maintenance ---------------------------------------------------------------------

    def cleanup_orphans(self, older_than: dt.timedelta | None = None, *, dry_run: bool = False) -> CleanupReport:
        """Remove files of failed commits (unreferenced data, deletion and
        transaction files, stale staged manifests) older than ``older_than``."""
        from tessera.commit.cleanup import DEFAULT_ORPHAN_AGE, referenced_paths, remove_orphans

        versions = self._handler.versions_after(self._store, 0)
        manifests = [self._handler.load(self._store, v) for v in versions]
        protect = self._handler.pending_paths()
        return remove_orphans(
            self._store,
            referenced_paths(self._store, manifests),
            older_than if older_than is not None else DEFAULT_ORPHAN_AGE,
            protect,
            dry_run,
        )

    # -- history -------------------------------------------------------------------------

    def versions(self) -> list[dict[str, Any]]:
        """Every version: number, timestamp, operation, rows added and removed."""
        out: list[dict[str, Any]] = []
        prev: table_pb2.Manifest | None = None
        for v in self._handler.versions_after(self._store, 0):
            try:
                mfile = self._handler.load(self._store, v)
            except VersionNotFoundError:
                continue
            m = mfile.manifest
            added, removed = _row_delta(prev, m)
            ts = dt.datetime.fromtimestamp(m.timestamp.seconds + m.timestamp.nanos / 1e9, tz=dt.UTC)
            out.append(
                {
                    "version": v,
                    "timestamp": ts,
                    "operation": mfile.transaction.WhichOneof("operation") if mfile.transaction else None,
                    "rows_added": added,
                    "rows_removed": removed,
                    "rows": sum(fragment_live_rows(f) for f in m.fragments),
                }
            )
            prev = m
        return out

    # -- stable row ids, compaction, version clean-up ----------------------------------

    def row_id_index(self) -> RowIdIndex:
        """This version's row id -> row address index (built on first use, cached)."""
        from .rowid_index import index_for

        return index_for(self)

    def take_rows(
        self, row_ids: Sequence[int] | np.ndarray, columns: Sequence[str] | None = None, *, on_missing: str = "skip"
    ) -> pa.Table:
        """Rows by ``_rowid`` (the stable id; the row address without stable
        row ids), in the order given; ids not live are skipped (or raise with
        ``on_missing="raise"``)."""
        from .rowid_index import take_rows

        return take_rows(self, row_ids, columns, on_missing=on_missing)

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
        from .compaction import compact

        return compact(
            self,
            target_rows_per_fragment,
            sort_by,
            materialize_deletions=materialize_deletions,
            materialize_deletions_threshold=materialize_deletions_threshold,
            external_sequences_over=external_sequences_over,
            progress=progress,
        )

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
        from tessera.commit.version_cleanup import cleanup_old_versions

        if not isinstance(older_than, (dt.timedelta, dt.datetime)):
            raise InvalidArgumentError(f"older_than must be a timedelta or datetime, got {older_than!r}")
        if isinstance(older_than, dt.timedelta) and older_than < dt.timedelta(0):
            raise InvalidArgumentError("older_than must not be negative")
        tags = {name: int(t["version"]) for name, t in self.tags.list().items()}
        staged = self._handler.pending_paths()
        report = cleanup_old_versions(
            self._store,
            self._handler,
            older_than,
            tagged=tags,
            keep_tagged=keep_tagged,
            orphan_age=orphan_age,
            protect_staged=staged,
            dry_run=dry_run,
            progress=progress,
        )
        if not dry_run:
            for name in report.orphaned_tags:
                self.tags.delete(name)
        return report


def _row_delta(prev: table_pb2.Manifest | None, cur: table_pb2.Manifest) -> tuple[int, int]:
    before = {f.id: f for f in prev.fragments} if prev is not None else {}
    after = {f.id: f for f in cur.fragments}
    added = removed = 0
    for fid, f in after.items():
        if fid not in before:
            added += fragment_live_rows(f)
        else:
            removed += max(0, fragment_live_rows(before[fid]) - fragment_live_rows(f))
    for fid, f in before.items():
        if fid not in after:
            removed += fragment_live_rows(f)
    return added, removed


__all__ = ["Table", "TableExistsError", "TableNotFoundError", "RetryPolicy"]
