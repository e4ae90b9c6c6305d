"""Where a ``tessera`` Spark job's table is: its location, coordinator,
storage options, and the catalog, namespace or resolver that named it.

:func:`resolve_location` applies the names-versus-paths rule of
:mod:`tessera.catalog.names` to the ``path`` Spark hands over: a URI, an
absolute path or a relative path with a separator is the table's location; a
bare name (``ns.t2``) is a table name, looked up in the Tessera catalog
(options ``catalog``/``warehouse``), the REST namespace (``namespace``) or by
the name resolver the options name, and refused when they name none.
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tessera.catalog.errors import SparkOptionError, SparkTableNameError
from tessera.stores.errors import InvalidURIError
from tessera.stores.uri import local_path

from .options import NAMESPACE_PREFIX, STORAGE_PREFIX, SparkOptions, any_option

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableLocation:
    """Where a table lives and how its commits are coordinated."""

    uri: str
    commit_store: str | None = None
    storage_options: dict[str, str] = field(default_factory=dict)
    namespace: str | None = None  # a Lance REST namespace URL the table's commits go through
    table_id: tuple[str, ...] = ()  # the table's id in that namespace
    namespace_properties: dict[str, str] = field(default_factory=dict)  # its client's properties
    #: a table named in a Tessera catalog that has no row there yet: what a
    #: write records when it creates the table (see :class:`CatalogClaim`)
    claim: CatalogClaim | None = None

    def open_table(self, version: int | str | None = None):
        """The table at ``version`` (latest by default), through the namespace when there is one."""
        from tessera.catalog.table import Table

        if self.namespace is not None:
            return Table.open(
                list(self.table_id),
                version,
                namespace=self.namespace,
                namespace_properties=self.namespace_properties,
                storage_options=self.storage_options,
            )
        return Table.open(self.uri, version, commit_store=self.commit_store, storage_options=self.storage_options)


@dataclass(frozen=True)
class CatalogClaim:
    """A table a write creates in a Tessera catalog: the catalog database, the
    table's name, and the coordinator recorded for it ("native", "catalog" or
    a store URL).  The commit records the name just before it creates the
    table and removes it again if the commit fails."""

    catalog_uri: str
    warehouse: str
    name: str
    location: str  # as the catalog records it (its warehouse's form)
    commit_store: str

    def catalog(self, storage_options: Mapping[str, str]):
        from tessera.catalog.catalog import Catalog

        return Catalog(self.catalog_uri, self.warehouse, storage_options=dict(storage_options), create=False)


def _load_resolver(spec: str) -> NameResolver:
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise SparkOptionError(f"option resolver must be 'module:function', got {spec!r}")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise SparkOptionError(f"cannot load the table name resolver {spec!r}: {exc}") from exc


def normalize_uri(uri: str) -> str:
    """Spark hands paths as ``/abs``, ``file:///abs`` or (from SQL) ``file:/abs``;
    local paths become absolute, other URIs are kept."""
    try:
        path = local_path(uri)
    except InvalidURIError as exc:
        raise SparkOptionError(str(exc)) from None
    return uri if path is None else path


#: how a Spark job names a table's catalog (the hint of a refused bare name)
_SPARK_CATALOG_HINT = (
    "name its catalog: .option('warehouse', DIR) and/or .option('catalog', NAME_OR_URL) (a Tessera catalog, "
    "as tessera.connect takes them), .option('namespace', URL) (a REST namespace such as tessera serve), or "
    ".option('resolver', 'module:function') (no name resolver is installed)"
)


def _single_path(opts: Mapping[str, str]) -> str | None:
    """``path``, or the one entry of ``paths`` (Spark's ``load([a, b])`` sends a JSON list)."""
    path, many = opts.get("path"), opts.get("paths")
    if many is None:
        return path
    try:
        entries = json.loads(many)
    except ValueError:
        entries = [many]
    if not isinstance(entries, list):
        entries = [entries]
    if path:
        entries = [path, *entries]
    if len(entries) != 1:
        raise SparkOptionError(
            f"a tessera read loads one table, got {len(entries)} paths {entries}; load each and union the DataFrames"
        )
    return str(entries[0])


def resolve_location(options: Mapping[str, str], *, for_write: bool = False) -> TableLocation:
    """The table a set of data source options addresses.

    A ``path`` (from ``load(...)``/``save(...)``) that is a URI, an absolute
    path or a relative path with a separator is the table's location; a bare
    name (``ns.t2``, ``t2``: see :mod:`tessera.catalog.names`) is a table
    *name*, like ``.option("table", ...)``, resolved in the catalog the
    options name (``namespace``; ``catalog``/``warehouse``; ``resolver`` or
    the default resolver) and refused (:class:`SparkTableNameError`) when they
    name none.  ``for_write``: a name missing from a Tessera catalog is a
    table the write creates (in the catalog's warehouse) rather than an error."""
    from tessera.catalog.names import bare_name_error, is_table_name

    opts = options if isinstance(options, SparkOptions) else SparkOptions(options, any_option())
    storage = opts.prefixed(STORAGE_PREFIX)
    name, path = opts.get("table") or None, _single_path(opts) or None
    if name and path:
        raise SparkOptionError(f"give either a path ({path!r}) or a table name ({name!r}), not both")
    if path is not None and is_table_name(path):
        name, path = path, None  # save("ns.t2"): a table name, never a folder
    catalogs = [k for k in ("namespace", "catalog", "warehouse", "resolver") if opts.get(k)]
    if opts.get("namespace") and len(catalogs) > 1:
        raise SparkOptionError(f"options {catalogs} each name where tables are found: give only one of them")
    if opts.get("namespace"):
        if path is not None:
            raise SparkOptionError(
                f"with option namespace the table is named by its id ('ns.table'), not a path ({path!r})"
            )
        return _in_namespace(opts["namespace"], name, opts, storage)
    if opts.get("catalog") or opts.get("warehouse"):
        if opts.get("resolver"):
            raise SparkOptionError("options catalog/warehouse and resolver both resolve table names: give one")
        if path is not None:
            raise SparkOptionError(
                f"options catalog/warehouse name a catalog, whose tables are named ('ns.table'), not paths "
                f"({path!r}); drop them to use the path, or name the table"
            )
        if not name:
            raise SparkOptionError("options catalog/warehouse name a catalog: name the table too ('ns.table')")
        return _in_catalog(name, opts, storage, for_write)
    if name:
        spec = opts.get("resolver")
        resolver = _load_resolver(spec) if spec else _default_resolver
        if resolver is None:
            err = bare_name_error(name, catalog_hint=_SPARK_CATALOG_HINT, folder_hint=repr(f"./{name}"))
            raise SparkTableNameError(str(err))
        loc = resolver(name, dict(opts))
        return TableLocation(normalize_uri(loc.uri), loc.commit_store, {**loc.storage_options, **storage})
    if not path:
        raise SparkOptionError("no table given: use .load(uri) / .save(uri) or .option('table', name)")
    return TableLocation(normalize_uri(path), opts.get("commit_store") or None, storage)


def _in_catalog(name: str, opts: Mapping[str, str], storage: dict[str, str], for_write: bool) -> TableLocation:
    """The location of table ``name`` in the Tessera catalog that options
    ``catalog`` (a config-file name or a catalog database URL) and
    ``warehouse`` name, as :func:`tessera.connect` takes them."""
    from tessera.catalog.catalog import connect
    from tessera.catalog.errors import NoSuchTableError

    if opts.get("commit_store"):
        raise SparkOptionError(
            "a catalog records each table's coordinator: drop option commit_store (to choose one for a new "
            "table, create it with Catalog.create_table(..., commit_store=...))"
        )
    cat = connect(opts.get("catalog") or None, opts.get("warehouse") or None, create=False)
    try:
        full, uri, recorded = cat._table_row(name)
        claim = None
    except NoSuchTableError:
        if not for_write:
            raise
        ns, table = cat._ident(name)
        if not cat.namespace_exists(ns):
            from tessera.catalog.errors import NamespaceNotFoundError

            raise NamespaceNotFoundError(
                f"cannot create {name!r}: namespace {ns!r} does not exist in {cat!r}; create it first "
                "(Catalog.create_namespace or `tessera namespace create`); nothing was written"
            ) from None
        full, uri = f"{ns}.{table}", cat._location(ns, table)
        recorded = cat._choose_commit_store(uri, None)
        claim = CatalogClaim(cat.uri, cat.warehouse, full, uri, recorded)
    finally:
        cat.close()
    store = None if recorded == "native" else cat.uri if recorded == "catalog" else recorded
    log.info("table %s of %r is %s (commit store %s)", full, cat, uri, recorded)
    return TableLocation(normalize_uri(uri), store, {**cat.storage_options, **storage}, claim=claim)


def _in_namespace(url: str, ident: str | None, opts: Mapping[str, str], storage: dict[str, str]) -> TableLocation:
    """The location of table ``ident`` (``ns.table``) that the REST namespace at ``url`` describes."""
    from tessera.commit import call_namespace, connect_namespace

    if not ident:
        raise SparkOptionError(
            "with option namespace, name the table: .option('table', 'ns.table') or .save('ns.table')"
        )
    if opts.get("commit_store"):
        raise SparkOptionError("a table reached through a namespace commits through it: drop option commit_store")
    props = {k[len(NAMESPACE_PREFIX) :]: v for k, v in opts.items() if k.startswith(NAMESPACE_PREFIX)}
    try:
        ns = connect_namespace(url, props)
    except ValueError as exc:
        raise SparkOptionError(str(exc)) from None
    parts = tuple(ident.split("."))
    from lance_namespace import DescribeTableRequest

    described = call_namespace(ns, "describe_table", DescribeTableRequest, id=list(parts))
    vended = {str(k): str(v) for k, v in (described.get("storage_options") or {}).items()}
    location = str(described.get("location") or described.get("table_uri") or "")
    if not location:
        raise SparkOptionError(f"the namespace at {url} names no location for {ident}")
    return TableLocation(normalize_uri(location), None, {**vended, **storage}, url, parts, props)


#: maps a table name and the data source options to its location
NameResolver = Callable[[str, Mapping[str, str]], TableLocation]

#: the process-wide resolver of ``.option("table", name)``, set by :func:`set_name_resolver`
_default_resolver: NameResolver | None = None


def set_name_resolver(resolver: NameResolver | None) -> None:
    """Install the default resolver for ``.option("table", name)`` in this process."""
    global _default_resolver
    _default_resolver = resolver
