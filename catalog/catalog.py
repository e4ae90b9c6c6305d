"""The catalog: namespaces and tables in a SQL database, tables in a warehouse.

``connect()`` opens (and migrates) the catalog database — SQLite under the
warehouse by default, PostgreSQL or MySQL/MariaDB by URL — and hands out
:class:`~catalog.table.Table` objects.  Settings come from arguments, then the
environment (``TESSERA_CATALOG_URI``, ``TESSERA_WAREHOUSE``), then a config file
(``TESSERA_CONFIG``, else ``~/.tessera.yaml``, ``~/.tessera.yml`` or
``~/.config/tessera/config.toml``; its ``catalog`` section), as pyiceberg does
(see :mod:`tessera.catalog.config`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import difflib
import json
import logging
import os
import re
import sqlite3
import threading
import uuid
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeAlias

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError, SQLAlchemyError
from sqlalchemy.orm import Session

from tessera.stores.registry import open_object_store

from .config import config_files, read_config_file
from .errors import (
    CatalogConfigError,
    CatalogConnectionError,
    InvalidArgumentError,
    InvalidNameError,
    NamespaceExistsError,
    NamespaceNotEmptyError,
    NamespaceNotFoundError,
    NoCatalogError,
    NoSuchTableError,
    TableExistsError,
    WarehouseNotWritableError,
)
from .models import NamespaceRow, TableRow
from .table import Table
from .table.write_progress import WriteProgress
from .table.write_progress import check as check_progress

if TYPE_CHECKING:
    from tessera.commit import RetryPolicy
    from tessera.stores.sql_store import SqlManifestStore

    from .table import Data
    from .transaction import CatalogTransaction

log = logging.getLogger(__name__)

Ident: TypeAlias = "str | tuple[str, ...] | list[str]"
"""A dotted name (``"ns.orders"``) or its parts (``("ns", "orders")``)."""

_PART = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,127}$")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def split_name(ident: Ident, what: str = "table") -> tuple[str, ...]:
    parts = tuple(ident.split(".")) if isinstance(ident, str) else tuple(ident)
    if not parts or any(not isinstance(p, str) or not _PART.match(p) for p in parts):
        raise InvalidNameError(
            f"invalid {what} name {ident!r}: use dot-separated parts of letters, digits, '_' or '-', "
            "each starting with a letter or '_'"
        )
    return parts


_TOP_KEYS = {"uri", "warehouse", "default_file_version"}


def _env_config(name: str) -> dict[str, Any]:
    """``TESSERA_CATALOG__<NAME>__<KEY>`` variables: URI, WAREHOUSE,
    DEFAULT_FILE_VERSION, STORAGE_OPTIONS__<OPTION>, or a property such as
    COMMIT__RETRY__MAX_SECONDS (= ``commit.retry.max-seconds``)."""
    prefix = f"TESSERA_CATALOG__{name.upper().replace('-', '_')}__"
    out: dict[str, Any] = {}
    for key, value in os.environ.items():
        if not key.startswith(prefix):
            continue
        parts = [p.lower() for p in key[len(prefix) :].split("__") if p]
        if not parts:
            continue
        if len(parts) == 1 and parts[0] in _TOP_KEYS:
            out[parts[0]] = value
        elif parts[0] == "storage_options" and len(parts) == 2:
            out.setdefault("storage_options", {})[parts[1]] = value
        else:
            out.setdefault("properties", {})[".".join(parts[:-1] + [parts[-1].replace("_", "-")])] = value
    return out


def _load_config(name: str | None) -> dict[str, Any]:
    """The settings of catalog ``name`` (default: "default") from the config
    file(s) and the environment; a catalog named explicitly that is found
    nowhere is an error."""
    files, named_file = config_files()
    cfg: dict[str, Any] = {}
    found = False
    for path in files:
        if not named_file and not os.path.exists(path):
            continue
        data = read_config_file(path)
        section = data.get("catalog", {}).get(name or "default")
        if section is not None:
            if not isinstance(section, dict):
                raise CatalogConfigError(f"{path}: catalog {name or 'default'!r} must be a mapping of settings")
            cfg, found = dict(section), True
            break
    env = _env_config(name or "default")
    if env:
        found = True
        props = {**cfg.get("properties", {}), **env.pop("properties", {})}
        opts = {**cfg.get("storage_options", {}), **env.pop("storage_options", {})}
        cfg.update(env)
        if props:
            cfg["properties"] = props
        if opts:
            cfg["storage_options"] = opts
    if name is not None and not found:
        where = ", ".join(files)
        raise CatalogConfigError(
            f"no catalog named {name!r}: not in {where} (a 'catalog: {{{name}: {{...}}}}' section) "
            f"nor in TESSERA_CATALOG__{name.upper()}__* environment variables"
        )
    return cfg


#: the keyword arguments connect() passes on to Catalog
_CATALOG_OPTIONS = {"default_file_version", "retry", "properties"}


def connect(
    name_or_uri: str | None = None,
    warehouse: str | None = None,
    *,
    name: str | None = None,
    uri: str | None = None,
    storage_options: dict[str, str] | None = None,
    create: bool = True,
    **options: Any,
) -> Catalog:
    """Open a catalog.

    ``connect("prod")`` loads the catalog named ``prod`` from the config file
    (``~/.tessera.yaml``, ``~/.tessera.yml``, ``~/.config/tessera/config.toml``, or the file
    ``TESSERA_CONFIG`` names) and ``TESSERA_CATALOG__PROD__<KEY>`` variables,
    as pyiceberg's ``load_catalog`` does; a name found nowhere is a
    CatalogConfigError.  ``connect(uri, warehouse=...)`` takes a SQLAlchemy
    URL for the catalog database (default: a SQLite file under the
    warehouse); ``warehouse`` is where new tables go (a local path or
    ``s3://bucket/prefix``).  Arguments win over the config.  With
    ``create=False`` nothing is created or migrated (no warehouse folder, no
    database, no tables): a catalog that is not there is a NoCatalogError."""
    unknown = sorted(set(options) - _CATALOG_OPTIONS)
    if unknown:
        known = sorted(_CATALOG_OPTIONS | {"name", "uri", "warehouse", "storage_options", "create"})
        close = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(known)})"
        raise InvalidArgumentError(f"connect() got an unknown keyword argument {unknown[0]!r}{hint}")
    if name_or_uri is not None:
        if "://" in name_or_uri:
            uri = uri or name_or_uri
        elif name is None:
            name = name_or_uri
        else:
            raise InvalidArgumentError(f"connect() got two catalog names: {name_or_uri!r} and {name!r}")
    cfg = _load_config(name)
    uri = uri or os.environ.get("TESSERA_CATALOG_URI") or cfg.get("uri")
    warehouse = warehouse or os.environ.get("TESSERA_WAREHOUSE") or cfg.get("warehouse")
    if not warehouse:
        raise InvalidArgumentError("connect() needs a warehouse (argument, TESSERA_WAREHOUSE or config file)")
    storage_options = {**cfg.get("storage_options", {}), **(storage_options or {})}
    if cfg.get("properties"):
        options["properties"] = {**cfg["properties"], **(options.get("properties") or {})}
    if cfg.get("default_file_version") and "default_file_version" not in options:
        options["default_file_version"] = str(cfg["default_file_version"])
    if uri is None:
        if "://" in warehouse and not warehouse.startswith("file://"):
            raise InvalidArgumentError("an object-store warehouse needs a catalog database URL (uri=...)")
        root = warehouse[len("file://") :] if warehouse.startswith("file://") else warehouse
        if create:
            _check_local_warehouse(root)
        uri = f"sqlite:///{os.path.join(os.path.abspath(root), 'catalog.db')}"
    elif create and ("://" not in warehouse or warehouse.startswith("file://")):
        _check_local_warehouse(warehouse[len("file://") :] if warehouse.startswith("file://") else warehouse)
    return Catalog(uri, warehouse, storage_options=storage_options, create=create, **options)


def _check_local_warehouse(root: str) -> None:
    try:
        os.makedirs(root, exist_ok=True)
        probe = os.path.join(root, f".tessera-write-check-{uuid.uuid4().hex}")
        with open(probe, "wb") as f:
            f.write(b"ok")
        os.unlink(probe)
    except OSError as exc:
        raise WarehouseNotWritableError(f"the warehouse {root!r} is not writable: {exc}") from exc


class Catalog:
    """Namespaces and tables, recorded in SQL."""

    def __init__(
        self,
        uri: str,
        warehouse: str,
        *,
        storage_options: dict[str, str] | None = None,
        default_file_version: str = "2.2",
        retry: RetryPolicy | None = None,
        properties: dict[str, Any] | None = None,
        create: bool = True,
    ) -> None:
        """``retry`` (a :class:`commit.retry.RetryPolicy`) or the ``properties``
        ``commit.retry.max-attempts``, ``commit.retry.max-seconds``,
        ``commit.retry.base-delay``, ``commit.retry.max-delay`` and
        ``commit.retry.read-back-seconds`` bound the commits of every table
        this catalog opens.  ``create=False`` opens an existing catalog
        only: no database file, schema or migration is created (NoCatalogError)."""
        from tessera.commit import RetryPolicy
        from tessera.stores.sql_migrate import upgrade

        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidArgumentError(f"retry must be a commit.retry.RetryPolicy, got {type(retry).__name__}")
        self.retry = retry or RetryPolicy.from_properties(properties or {})
        self.uri = uri
        self.warehouse = warehouse.rstrip("/")
        self.storage_options = storage_options or {}
        self.default_file_version = default_file_version
        if not create:
            _refuse_missing_sqlite(uri)
        try:
            self.engine = sa.create_engine(uri, pool_pre_ping=True)
            with self.engine.connect() as c:
                c.execute(sa.text("SELECT 1"))
                existed = sa.inspect(c).has_table(TableRow.__tablename__)
            if not create and not existed:
                self.engine.dispose()
                raise NoCatalogError(f"nothing is there: {_safe(uri)} holds no catalog (nothing was created)")
            if create:
                upgrade(self.engine)  # creates or upgrades the schema through Alembic
        except NoCatalogError:
            raise
        except (OperationalError, ProgrammingError, SQLAlchemyError, OSError) as exc:
            raise CatalogConnectionError(f"cannot open the catalog database {_safe(uri)}: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - driver-specific connection failures
            if type(exc).__name__ in ("StoreUnavailableError", "StoreSchemaError"):
                raise CatalogConnectionError(f"cannot open the catalog database {_safe(uri)}: {exc}") from exc
            raise
        self._manifest_store: SqlManifestStore | None = None
        self._rows = _RowCache(uri)
        #: table names as given (tuples) -> checked (namespace, name): a name is checked once
        self._keys = _CheckedNames()
        #: this object created the catalog (its database held none): a misspelt
        #: warehouse or URL makes a new, empty catalog, which says so
        self.created = not existed
        if self.created:
            log.info("created a new, empty catalog: %s (warehouse %s)", _safe(uri), self.warehouse)

    def close(self) -> None:
        self._rows.close()
        self.engine.dispose()
        if self._manifest_store is not None:
            self._manifest_store.close()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        created = ", created=True" if self.created else ""
        return f"Catalog({_safe(self.uri)!r}, warehouse={self.warehouse!r}{created})"

    # -- helpers ---------------------------------------------------------------------

    def _session(self) -> Session:
        return Session(self.engine)

    @property
    def manifest_store(self) -> SqlManifestStore:
        """The catalog database's own manifest store (commit_store="catalog")."""
        if self._manifest_store is None:
            from tessera.stores.sql_store import SqlManifestStore

            self._manifest_store = SqlManifestStore.from_url(self.uri)
        return self._manifest_store

    def _commit_store_for(self, value: str) -> str | SqlManifestStore | None:
        if value == "native":
            return None
        if value == "catalog":
            return self.manifest_store
        return value

    # -- namespaces --------------------------------------------------------------------

    def create_namespace(self, name: str, properties: dict[str, Any] | None = None, *, exist_ok: bool = False) -> None:
        parts = split_name(name, "namespace")
        ns = ".".join(parts)
        with self._session() as s, s.begin():
            if len(parts) > 1 and s.get(NamespaceRow, ".".join(parts[:-1])) is None:
                raise NamespaceNotFoundError(f"parent namespace {'.'.join(parts[:-1])!r} does not exist")
            if s.get(NamespaceRow, ns) is not None:
                if exist_ok:
                    return
                raise NamespaceExistsError(f"namespace {ns!r} already exists")
            s.add(NamespaceRow(name=ns, properties=json.dumps(properties or {}), created_at=_now()))

    def list_namespaces(self, parent: str | None = None) -> list[str]:
        with self._session() as s:
            names = [r for (r,) in s.execute(sa.select(NamespaceRow.name).order_by(NamespaceRow.name))]
        if parent is None:
            return [n for n in names if "." not in n]
        prefix = ".".join(split_name(parent, "namespace")) + "."
        return [n for n in names if n.startswith(prefix) and "." not in n[len(prefix) :]]

    def namespace_exists(self, name: str) -> bool:
        with self._session() as s:
            return s.get(NamespaceRow, ".".join(split_name(name, "namespace"))) is not None

    def _namespace(self, s: Session, ns: str) -> NamespaceRow:
        row = s.get(NamespaceRow, ns)
        if row is None:
            raise NamespaceNotFoundError(f"namespace {ns!r} does not exist; create it with create_namespace")
        return row

    def namespace_properties(self, name: str) -> dict[str, Any]:
        ns = ".".join(split_name(name, "namespace"))
        with self._session() as s:
            return _properties(self._namespace(s, ns).properties)

    def update_namespace_properties(
        self, name: str, updates: dict[str, Any] | None = None, removals: list[str] | None = None
    ) -> dict[str, Any]:
        ns = ".".join(split_name(name, "namespace"))
        with self._session() as s, s.begin():
            row = self._namespace(s, ns)
            props = _properties(row.properties)
            props.update(updates or {})
            for k in removals or []:
                props.pop(k, None)
            row.properties = json.dumps(props)
            return props

    def drop_namespace(self, name: str) -> None:
        ns = ".".join(split_name(name, "namespace"))
        with self._session() as s, s.begin():
            row = self._namespace(s, ns)
            tables = s.execute(
                sa.select(sa.func.count()).select_from(TableRow).where(TableRow.namespace == ns)
            ).scalar()
            children = s.execute(
                sa.select(sa.func.count()).select_from(NamespaceRow).where(NamespaceRow.name.like(ns + ".%"))
            ).scalar()
            if tables or children:
                raise NamespaceNotEmptyError(
                    f"namespace {ns!r} holds {tables} table(s) and {children} namespace(s); drop them first"
                )
            s.delete(row)

    # -- tables ------------------------------------------------------------------------

    def _ident(self, ident: Ident) -> tuple[str, str]:
        parts = split_name(ident)
        if len(parts) < 2:
            raise InvalidNameError(f"table name {ident!r} needs a namespace: 'namespace.table'")
        return ".".join(parts[:-1]), parts[-1]

    def _location(self, ns: str, name: str) -> str:
        return f"{self.warehouse}/{'/'.join(ns.split('.'))}/{name}.lance"

    def _choose_commit_store(self, location: str, commit_store: str | None) -> str:
        if commit_store not in (None, "auto"):
            if commit_store in ("native", "catalog") or "://" in commit_store:
                return commit_store
            raise InvalidArgumentError(
                f"commit_store must be 'auto', 'native', 'catalog' or a store URL, got {commit_store!r}"
            )
        store = open_object_store(location, self.storage_options)
        if type(store).__name__ == "LocalObjectStore":
            return "native"
        try:
            from tessera.stores.probe import probe_conditional_put

            probe_conditional_put(store)
            return "native"
        except Exception as exc:  # noqa: BLE001 - no usable conditional put: use the catalog's store
            log.info("%s: no trustworthy conditional put (%s); commits go through the catalog database", location, exc)
            return "catalog"

    def create_table(
        self,
        ident: Ident,
        data_or_schema: Data,
        *,
        file_version: str | None = None,
        commit_store: str | None = None,
        properties: dict[str, Any] | None = None,
        location: str | None = None,
        stable_row_ids: bool = False,
        progress: WriteProgress | None = None,
    ) -> Table:
        """Create a table from data or a pyarrow schema.

        ``commit_store``: "auto" (default: native when the object store has a
        trustworthy conditional put, else the catalog's SQL store), "native",
        "catalog", or an external store URL (Redis, DynamoDB, SQL).
        ``progress``: told the rows written (see :mod:`tessera.catalog.table.write_progress`)."""
        check_progress(progress)  # refused before the name is claimed
        # claim the name first (a concurrent create fails here, before any file
        # is written), then create the table; undo the claim if that fails
        ns, name, location, chosen = self._claim(ident, location, commit_store, properties)
        try:
            return Table.create(
                location,
                data_or_schema,
                file_version=file_version or self.default_file_version,
                commit_store=self._commit_store_for(chosen),
                storage_options=self.storage_options,
                stable_row_ids=stable_row_ids,
                retry=self.retry,
                progress=progress,
            )
        except BaseException:
            with self._session() as s, s.begin():
                row = s.get(TableRow, (ns, name))
                if row is not None:
                    s.delete(row)
            raise

    def declare_table(
        self,
        ident: Ident,
        *,
        location: str | None = None,
        commit_store: str | None = None,
        properties: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Claim a table name and its location without writing anything: the
        first commit (a Lance Namespace client's ``create_table_version``)
        creates the table.  Returns :meth:`table_info`."""
        ns, name, _, _ = self._claim(ident, location, commit_store, properties)
        return self.table_info((ns, name))

    def _claim(
        self, ident: Ident, location: str | None, commit_store: str | None, properties: dict[str, Any] | None
    ) -> tuple[str, str, str, str]:
        """Record the table's row (its name, location and coordinator); (namespace, name, location, coordinator)."""
        ns, name = self._ident(ident)
        location = location or self._location(ns, name)
        chosen = self._choose_commit_store(location, commit_store)
        try:
            with self._session() as s, s.begin():
                self._namespace(s, ns)
                if s.get(TableRow, (ns, name)) is not None:
                    raise TableExistsError(f"table {ns}.{name} already exists")
                s.add(
                    TableRow(
                        namespace=ns,
                        name=name,
                        uri=location,
                        commit_store=chosen,
                        properties=json.dumps(properties or {}),
                        created_at=_now(),
                    )
                )
        except IntegrityError as exc:
            raise TableExistsError(f"table {ns}.{name} already exists") from exc
        return ns, name, location, chosen

    def _table_row(self, ident: Ident) -> tuple[str, str, str]:
        """(name, location, commit store as recorded: "native", "catalog" or a URL with its credentials)."""
        row = self._snapshot(ident)
        return f"{row.namespace}.{row.name}", row.uri, row.commit_store

    def _snapshot(self, ident: Ident) -> _TableRecord:
        """The table's row as read last, while the database has not changed
        since (:class:`_RowCache`); read again otherwise.  While it is served
        from the cache, every call returns the same record object (callers may
        key what they derive from it on its identity)."""
        if isinstance(ident, tuple) and all(type(p) is str for p in ident):
            key = self._keys.get(ident)
            if key is None:
                key = self._ident(ident)
                self._keys.remember(ident, key)
        else:
            key = self._ident(ident)
        got = self._rows.get(key)
        if got is not None:
            return got
        generation = self._rows.generation()  # before the read: a change after it is seen next time
        with self._session() as s:
            row = self._row(s, key)
            record = _TableRecord(row.namespace, row.name, row.uri, row.commit_store, row.properties, row.created_at)
        self._rows.put(key, generation, record)
        return record

    def _row(self, s: Session, ident: Ident) -> TableRow:
        ns, name = self._ident(ident)
        row = s.get(TableRow, (ns, name))
        if row is None:
            if s.get(NamespaceRow, ns) is None:
                raise NoSuchTableError(
                    f"table {ns}.{name} does not exist: there is no namespace {ns!r} "
                    f"(namespaces: {', '.join(self._namespace_names(s)) or 'none'})"
                )
            raise NoSuchTableError(f"table {ns}.{name} does not exist")
        return row

    @staticmethod
    def _namespace_names(s: Session, limit: int = 10) -> list[str]:
        names = [n for (n,) in s.execute(sa.select(NamespaceRow.name).order_by(NamespaceRow.name).limit(limit + 1))]
        return names[:limit] + (["..."] if len(names) > limit else [])

    def load_table(self, ident: Ident, version: int | str | None = None) -> Table:
        """The table ``ident`` at its latest version, a version number or a tag."""
        row = self._snapshot(ident)
        uri, store = row.uri, row.commit_store
        return Table.open(
            uri,
            version=version,
            commit_store=self._commit_store_for(store),
            storage_options=self.storage_options,
            retry=self.retry,
        )

    def table_exists(self, ident: Ident) -> bool:
        try:
            self._snapshot(ident)
            return True
        except NoSuchTableError:
            return False

    def list_tables(self, namespace: str) -> list[str]:
        ns = ".".join(split_name(namespace, "namespace"))
        with self._session() as s:
            self._namespace(s, ns)
            rows = s.execute(sa.select(TableRow.name).where(TableRow.namespace == ns).order_by(TableRow.name))
            return [f"{ns}.{n}" for (n,) in rows]

    def rename_table(self, old: Ident, new: Ident) -> None:
        """Rename in the catalog; the data stays where it is."""
        new_ns, new_name = self._ident(new)
        with self._session() as s, s.begin():
            row = self._row(s, old)
            self._namespace(s, new_ns)
            if s.get(TableRow, (new_ns, new_name)) is not None:
                raise TableExistsError(f"table {new_ns}.{new_name} already exists")
            s.add(
                TableRow(
                    namespace=new_ns,
                    name=new_name,
                    uri=row.uri,
                    commit_store=row.commit_store,
                    properties=row.properties,
                    created_at=row.created_at,
                )
            )
            s.delete(row)

    def drop_table(self, ident: Ident, *, purge: bool = False) -> None:
        """Remove the table from the catalog; with ``purge``, delete its data too."""
        with self._session() as s, s.begin():
            row = self._row(s, ident)
            uri, store = row.uri, row.commit_store
            s.delete(row)
        if purge:
            obj = open_object_store(uri, self.storage_options)
            for path, _, _ in obj.walk(""):
                obj.delete(path)
            cs = self._commit_store_for(store)
            if cs is not None:
                from tessera.stores.registry import open_manifest_store
                from tessera.stores.uri import normalize_table_uri

                ms = open_manifest_store(cs) if isinstance(cs, str) else cs
                ms.delete_table(normalize_table_uri(uri))

    def table_properties(self, ident: Ident) -> dict[str, Any]:
        return _properties(self._snapshot(ident).properties)

    def update_table_properties(
        self, ident: Ident, updates: dict[str, Any] | None = None, removals: list[str] | None = None
    ) -> dict[str, Any]:
        with self._session() as s, s.begin():
            row = self._row(s, ident)
            props = _properties(row.properties)
            props.update(updates or {})
            for k in removals or []:
                props.pop(k, None)
            row.properties = json.dumps(props)
            return props

    def table_info(self, ident: Ident) -> dict[str, Any]:
        row = self._snapshot(ident)
        return {
            "name": f"{row.namespace}.{row.name}",
            "uri": row.uri,
            "commit_store": _safe(row.commit_store),
            "properties": _properties(row.properties),
            "created_at": row.created_at,
        }

    def transaction(self) -> CatalogTransaction:
        """A multi-table transaction (see ``catalog.transaction``)."""
        from .transaction import CatalogTransaction

        return CatalogTransaction(self)


@dataclasses.dataclass(frozen=True)
class _TableRecord:
    """A table's catalog row, as read (detached from any session)."""

    namespace: str
    name: str
    uri: str
    commit_store: str
    properties: str
    created_at: Any


class _CheckedNames(dict[tuple[Any, ...], tuple[str, str]]):
    """Names already checked by :meth:`Catalog._ident` (a namespace asks for
    the same table's row several times per commit); bounded."""

    MAX = 4096

    def remember(self, ident: tuple[Any, ...], key: tuple[str, str]) -> None:
        if len(self) >= self.MAX:
            self.clear()
        self[ident] = key


class _RowCache:
    """Table rows read from the catalog database, kept while it is unchanged.

    Every managed-versioning commit asks for its table's row several times
    (pylance's describe, list and create calls), and reading it costs a
    query.  A SQLite catalog tells cheaply whether anything changed: its
    ``PRAGMA data_version``, asked on a connection of our own that never
    writes, changes whenever any other connection - in this process or any
    other - commits.  A row is served from here only while that number is
    the one seen before the row was read, so a table dropped, renamed,
    re-created or given new properties anywhere is read again.  Other
    databases have no such signal: every call reads the row."""

    MAX_ROWS = 4096

    def __init__(self, uri: str) -> None:
        self._path: str | None = None
        url = sa.engine.make_url(uri)
        if url.drivername.startswith("sqlite") and url.database not in (None, "", ":memory:"):
            self._path = url.database
        self._conn: Any = None
        self._pid = 0  # the process that opened _conn (a forked child opens its own)
        self._lock = threading.Lock()
        self._rows: dict[tuple[str, str], tuple[int, _TableRecord]] = {}

    def generation(self) -> int | None:
        """The database's change counter now (None: not known, nothing is kept)."""
        if self._path is None:
            return None
        with self._lock:
            try:
                if self._conn is None or self._pid != os.getpid():
                    self._conn = sqlite3.connect(self._path, check_same_thread=False)
                    self._pid = os.getpid()
                return int(self._conn.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error:
                self._drop_connection()
                return None

    def get(self, key: tuple[str, str]) -> _TableRecord | None:
        hit = self._rows.get(key)
        if hit is None:
            return None
        now = self.generation()
        if now is None or now != hit[0]:
            return None
        return hit[1]

    def put(self, key: tuple[str, str], generation: int | None, record: _TableRecord) -> None:
        if generation is None:
            return
        if len(self._rows) >= self.MAX_ROWS:
            self._rows.clear()
        self._rows[key] = (generation, record)

    def close(self) -> None:
        with self._lock:
            self._drop_connection()
        self._rows.clear()

    def _drop_connection(self) -> None:
        if self._conn is not None and self._pid == os.getpid():
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
        self._conn = None


def _properties(text: str) -> dict[str, Any]:
    """A properties column (JSON text) as a dict."""
    props = json.loads(text)
    if not isinstance(props, dict):
        raise CatalogConnectionError(f"catalog properties are not a JSON object: {text[:80]!r}")
    return props


def _refuse_missing_sqlite(uri: str) -> None:
    """A SQLite catalog URL whose file does not exist (opening it would create it)."""
    url = sa.engine.make_url(uri)
    if not url.drivername.startswith("sqlite"):
        return
    path = url.database or ""
    if path in ("", ":memory:") or path.startswith("file:"):
        return
    if not os.path.exists(path):
        raise NoCatalogError(f"nothing is there: no catalog database at {os.path.abspath(path)} (nothing was created)")


def _safe(url: str) -> str:
    """A URL without its password."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001
        return re.sub(r"//([^:/@]+):[^@]+@", r"//\1:***@", url)
