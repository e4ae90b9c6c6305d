"""The ``tessera`` PySpark data source (``pyspark.sql.datasource``, PySpark 4.1+).

Register it once per SparkSession, then read and write tables by URI::

    from tessera.catalog import spark as tessera_spark

    tessera_spark.register(spark)

    (df.write.format("tessera").mode("append")          # or "overwrite"
       .option("commit_store", "redis://host:6379/0")   # the table's coordinator, if any
       .option("storage.endpoint_url", "http://...")    # storage_options, prefixed
       .save("s3://bucket/events"))
    spark.read.format("tessera").option("version", 3).load("s3://bucket/events")

Only ``append`` and ``overwrite`` save modes exist (Spark's default,
``errorifexists``, is refused by Spark itself).  Writing creates the table when
there is none.

Options (keys are case-insensitive, values strings):

=======================  ========================================================
``path`` / ``load(uri)``  table URI: a local path, ``file://``, ``s3://``
``table``                 a table *name*, resolved by a name resolver (see below)
``resolver``              ``module:function`` resolving ``table`` names
``commit_store``          external manifest store URL coordinating commits
``namespace``             a Lance REST namespace URL (``tessera serve``): the
                          table is ``table``'s id (``ns.table``) or the path,
                          located by the namespace, and the job's commit goes
                          through it (no store credentials on the cluster)
``namespace.<key>``       a property of the namespace client
                          (``namespace.header.Authorization``)
``storage.<key>``         one entry of ``storage_options`` (``storage.region``...)
``version`` / ``tag``     read: time travel to a version number or a tag
``columns``               read: comma-separated columns (Spark 4.3 does not pass
                          the projection to Python sources)
``pushdown``              read: ``true``/``false`` (default ``false``); ``true``
                          is refused with :class:`SparkOptionError` on every
                          PySpark with filter pushdown so far, see below
``filter``                read: a SQL filter (``Table.scanner``'s) the source
                          applies itself: the DataFrame holds only the rows it
                          matches, and the table's zone maps skip the files and
                          row ranges that cannot (the way to prune from Spark
                          while pushdown is refused; it is part of the
                          DataFrame's options, so every query sees it)
``batch_rows``            read: rows per Arrow batch (65536)
``min_partitions``        read: tasks to aim for at least (default: the
                          session's default parallelism, see :func:`register`)
``max_partition_bytes``   read: most data file bytes per task (128 MiB)
``rows_per_partition``    read: most rows per task (no limit)
``read_stats_dir``        read: a directory (on each executor's file system)
                          where every task writes a JSON file of what it read:
                          pieces, fragments, rows, bytes read from data files
``file_version``          write, new tables: Lance file version (2.2)
``max_rows_per_file``     write: rows per data file/fragment (1048576)
``write_batch_rows``      write: rows buffered before encoding (131072)
=======================  ========================================================

Storage options reach every task inside the pickled plans, as Spark ships
all data source options; prefer credentials from the environment or instance
profiles over ``storage.aws_secret_access_key``.

Where the code runs: ``DataSource`` methods run in short-lived *planning*
Python workers that the driver JVM starts — not in the user's process — so all
state they share with tasks and with the commit is pickled plain data (URIs,
options, version numbers, serialized protobufs).  See
:mod:`tessera.catalog.spark.write` and :mod:`tessera.catalog.spark.read`.

Snapshots: each query resolves the latest version (or the one asked for) when
Spark plans it — but PySpark keeps the read plan (pickled read function and
partitions) on the loaded DataFrame's (or temporary view's) data source object
in the JVM and reuses it for later queries of that DataFrame, so ``df.count()``
repeated after another writer committed can still count the earlier snapshot
(with ``spark.sql.python.filterPushdown.enabled`` on, a query with a filter
Spark hands to Python is planned afresh).  Load a new DataFrame to see new
commits.

Filter pushdown is refused (:func:`pushdown_refusal`): a query whose filters a
source accepts replaces that one stored plan with a plan reading only the
matching rows, and every later query of the DataFrame, and every other scan of
it in the same query (a union, a self-join), then reuses it:
``df.where("x = 1").count()`` followed by ``df.count()`` counted the filtered
rows.  Those queries call no Python code at all — they run the same pickled
read function and partitions — so nothing a Python source does can tell them
apart; the only answer that is never wrong is not to push.  Seen on PySpark
4.3.0; it comes with the change that made pushdown also plan the read
(SPARK-51575, before 4.1, the first release with ``pushFilters``).  Reads stay
exact without pushdown: Spark applies every filter itself.

Addressing by name: ``.option("table", "ns.events")`` is resolved by a
:data:`NameResolver` — ``.option("resolver", "pkg.module:function")``, or the
process-wide default set with :func:`set_name_resolver`.  Because planning
workers are separate processes, a default must be installed by code those
workers import (for example the module defining the resolver calling
:func:`set_name_resolver` at import time, imported from here); the
``resolver`` option always works.
"""

from __future__ import annotations

import importlib
import itertools
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import cast
from urllib.parse import urlparse

try:
    from pyspark.sql.datasource import DataSource
except ImportError as _exc:  # pragma: no cover - pyspark is an optional dependency
    raise ImportError("the tessera Spark data source needs pyspark>=4.1: pip install 'tessera[spark]'") from _exc

from tessera.catalog.errors import SparkOptionError, TesseraError, UnknownColumnError

log = logging.getLogger(__name__)

FORMAT = "tessera"
STORAGE_PREFIX = "storage."
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"

#: the first Spark (major, minor) whose JVM keeps a filter-pushdown read plan
#: per query instead of per loaded DataFrame; None: no release is known to
#: (4.1 to 4.3 are not — the canary ``test_this_pyspark_still_needs_the_refusal``
#: in tests/spark/test_spark_pushdown.py says when that changes)
PUSHDOWN_SAFE_SINCE: tuple[int, int] | None = None


def _version_tuple(version: str) -> tuple[int, ...]:
    out = []
    for part in version.split(".")[:3]:
        digits = "".join(itertools.takewhile(str.isdigit, part))
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def pushdown_refusal(spark_version: str) -> str | None:
    """Why filter pushdown cannot be used with this Spark (PySpark) version,
    or None when it can.

    PySpark's Python data sources gained filter pushdown in 4.1.  Up to at
    least 4.3, Spark stores the read plan (pickled read function and
    partitions) that a query's pushdown produced on the data source object of
    the *loaded DataFrame* (``PythonDataSourceV2.setReadInfo``), and a scan of
    that DataFrame whose query pushes no filter to Python takes whatever plan
    is stored there without calling Python.  So once one query pushed a
    filter, later queries of the same DataFrame or temporary view — and the
    other scans of it in the same query (a union or self-join) — read only the
    rows that filter kept.  No Python code runs for those queries, so a source
    cannot detect or repair it; pushing nothing is the only correct choice."""
    v = _version_tuple(spark_version)
    if v < (4, 1):
        return (
            f"option pushdown needs PySpark 4.1 or later (filter pushdown of Python data sources); this is "
            f"{spark_version}"
        )
    if PUSHDOWN_SAFE_SINCE is None or v < PUSHDOWN_SAFE_SINCE:
        return (
            f"option pushdown is refused on PySpark {spark_version}: Spark keeps the read plan of a query that "
            "pushed filters on the loaded DataFrame and reuses it for that DataFrame's other queries (and other "
            "scans of it in the same query), which then see only the filtered rows (df.where(...).count() "
            "then df.count() returns the filtered count). Reads are exact without pushdown: drop the option"
        )
    return None


@dataclass(frozen=True)
class TableLocation:
    """Where a table lives and how its commits are coordinated."""

    uri: str
    commit_store: str | None = None
    storage_options: dict[str, str] = field(default_factory=dict)
    namespace: str | None = None  # a Lance REST namespace URL the table's commits go through
    table_id: tuple[str, ...] = ()  # the table's id in that namespace
    namespace_properties: dict[str, str] = field(default_factory=dict)  # its client's properties

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


#: maps a table name and the data source options to its location
NameResolver = Callable[[str, Mapping[str, str]], TableLocation]
_default_resolver: NameResolver | None = None


def set_name_resolver(resolver: NameResolver | None) -> None:
    """Install the default resolver for ``.option("table", name)`` in this process."""
    global _default_resolver
    _default_resolver = resolver


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
    p = urlparse(uri)
    if p.scheme.lower() == "file":
        if p.netloc not in ("", "localhost"):
            raise SparkOptionError(f"file URI {uri!r} names a host; use file:///absolute/path")
        return os.path.abspath(p.path)
    if p.scheme == "" or (len(p.scheme) == 1 and os.name == "nt"):
        return os.path.abspath(uri)
    return uri


def resolve_location(options: Mapping[str, str]) -> TableLocation:
    """The table a set of data source options addresses."""
    opts = {k.lower(): v for k, v in options.items()}
    storage = {k[len(STORAGE_PREFIX) :]: v for k, v in opts.items() if k.startswith(STORAGE_PREFIX)}
    name, path = opts.get("table"), opts.get("path")
    if opts.get("namespace"):
        return _in_namespace(opts["namespace"], name or path, opts, storage)
    if name and path:
        raise SparkOptionError(f"give either a path ({path!r}) or a table name ({name!r}), not both")
    if name:
        spec = opts.get("resolver")
        resolver = _load_resolver(spec) if spec else _default_resolver
        if resolver is None:
            raise SparkOptionError(
                f"cannot resolve table name {name!r}: no name resolver is installed; load/save by URI, "
                "or pass .option('resolver', 'module:function')"
            )
        loc = resolver(name, opts)
        return TableLocation(normalize_uri(loc.uri), loc.commit_store, {**loc.storage_options, **storage})
    if not path:
        raise SparkOptionError("no table given: use .load(uri) / .save(uri) or .option('table', name)")
    return TableLocation(normalize_uri(path), opts.get("commit_store") or None, storage)


def _in_namespace(url: str, ident: str | None, opts: Mapping[str, str], storage: dict[str, str]) -> TableLocation:
    """The location of table ``ident`` (``ns.table``) that the REST namespace at ``url`` describes."""
    from tessera.commit.namespace_client import _call, connect_namespace

    if not ident:
        raise SparkOptionError(
            "with option namespace, name the table: .option('table', 'ns.table') or .save('ns.table')"
        )
    if opts.get("commit_store"):
        raise SparkOptionError("a table reached through a namespace commits through it: drop option commit_store")
    props = {k[len("namespace.") :]: v for k, v in opts.items() if k.startswith("namespace.")}
    try:
        ns = connect_namespace(url, props)
    except ValueError as exc:
        raise SparkOptionError(str(exc)) from None
    parts = tuple(ident.split("."))
    from lance_namespace import DescribeTableRequest

    described = _call(ns, "describe_table", DescribeTableRequest, id=list(parts))
    vended = {str(k): str(v) for k, v in (described.get("storage_options") or {}).items()}
    location = str(described.get("location") or described.get("table_uri") or "")
    if not location:
        raise SparkOptionError(f"the namespace at {url} names no location for {ident}")
    return TableLocation(normalize_uri(location), None, {**vended, **storage}, url, parts, props)


def _int_option(opts: Mapping[str, str], key: str, default: int | None) -> int | None:
    raw = opts.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SparkOptionError(f"option {key} must be an integer, got {raw!r}") from None
    if value < 0 or (value == 0 and key != "version"):
        raise SparkOptionError(f"option {key} must be positive, got {raw!r}")
    return value


class TesseraDataSource(DataSource):
    """``format("tessera")``: batch reads and append/overwrite writes of Tessera tables."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    @property
    def location(self) -> TableLocation:
        return resolve_location(self.options)

    #: push filters unless the ``pushdown`` option says otherwise (see :func:`register`)
    pushdown_default = False
    #: read tasks to aim for when the ``min_partitions`` option is not given:
    #: set by :func:`register` to the session's default parallelism, else this
    #: machine's core count (planning workers run on the driver)
    default_parallelism: int | None = None

    def _open(self):
        """The table at the version the options ask for (latest by default)."""
        loc = self.location
        version = _int_option(self.options, "version", None)
        tag = self.options.get("tag")
        if version is not None and tag:
            raise SparkOptionError("give either option version or option tag, not both")
        return loc.open_table(version if version is not None else tag)

    def _pushdown(self) -> bool:
        """Whether to push filters: the ``pushdown`` option, refused (a
        :class:`SparkOptionError`) while :meth:`_pushdown_refusal` gives a reason."""
        raw = self.options.get("pushdown")
        if raw is None:
            wanted = self.pushdown_default
        elif raw.lower() not in ("true", "false"):
            raise SparkOptionError(f"option pushdown must be true or false, got {raw!r}")
        else:
            wanted = raw.lower() == "true"
        if wanted:
            reason = self._pushdown_refusal()
            if reason:
                raise SparkOptionError(reason)
        return wanted

    def _pushdown_refusal(self) -> str | None:
        """:func:`pushdown_refusal` for the PySpark this planning worker runs
        (the one shipped with the cluster's Spark).  Tests of the pushdown
        machinery override it, loading a fresh DataFrame for every query."""
        import pyspark

        return pushdown_refusal(pyspark.__version__)

    def _columns(self, names: list[str]) -> list[str]:
        raw = self.options.get("columns")
        if raw is None:
            return names
        cols = [c.strip() for c in raw.split(",") if c.strip()]
        unknown = [c for c in cols if c not in names]
        if unknown or not cols:
            raise UnknownColumnError(f"option columns names {unknown or 'nothing'}; the table has {names}")
        return cols

    def _filter(self, table) -> str | None:
        """The ``filter`` option, checked against the table's schema (a typed
        error naming the option at load, not a task failure later)."""
        raw = self.options.get("filter")
        if raw is None:
            return None
        if not raw.strip():
            raise SparkOptionError('option filter is empty; give a SQL filter such as "ts >= 100" or drop it')
        from tessera.catalog import predicate

        try:
            predicate.to_expression(raw, table.schema)
        except TesseraError as exc:
            raise SparkOptionError(f"option filter {raw!r}: {exc}") from exc
        return raw

    def schema(self):
        from pyspark.sql.types import StructType

        from .types import spark_schema_of

        self._pushdown()  # an option refused fails at load(), not at the first query
        table = self._open()
        self._filter(table)
        full = spark_schema_of(table.schema)
        return StructType([full[c] for c in self._columns(full.fieldNames())])

    def reader(self, schema):
        from tessera.format import schema as lschema

        from .read import (
            DEFAULT_MAX_PARTITION_BYTES,
            DEFAULT_READ_BATCH_ROWS,
            PartitionSizing,
            ReadPlan,
            TesseraFilteringReader,
            TesseraReader,
        )

        pushdown = self._pushdown()
        table = self._open()
        names = table.schema.names
        unknown = [c for c in schema.fieldNames() if c not in names]
        if unknown:
            raise UnknownColumnError(f"{table.uri} version {table.version} has no columns {unknown}")
        o = self.options
        plan = ReadPlan(
            uri=table.uri,
            storage_options=self.location.storage_options,
            version=table.version,
            field_protos=[
                p.SerializeToString()
                for p in lschema.fields_to_protos(lschema.fields_from_protos(table.manifest.fields))
            ],
            schema_metadata=dict(table.manifest.schema_metadata),
            columns=schema.fieldNames(),
            batch_rows=_int_option(o, "batch_rows", DEFAULT_READ_BATCH_ROWS),
            sizing=PartitionSizing(
                min_partitions=_int_option(o, "min_partitions", self.default_parallelism or os.cpu_count() or 1),
                max_partition_bytes=_int_option(o, "max_partition_bytes", DEFAULT_MAX_PARTITION_BYTES),
                rows_per_partition=_int_option(o, "rows_per_partition", None),
            ),
            read_stats_dir=o.get("read_stats_dir") or None,
            filter_sql=self._filter(table),
        )
        cls = TesseraFilteringReader if pushdown else TesseraReader
        # the index section: pushed filters prune with the version's zone maps at planning
        return cls(plan, schema, [f.SerializeToString() for f in table.fragments], table._mfile.index_section)

    def writer(self, schema, overwrite: bool):
        from .write import plan_write

        if self.options.get("version") or self.options.get("tag"):
            raise SparkOptionError("options version and tag are for reads; writes always go to the latest version")
        return plan_write(self.location, schema, overwrite, self.options)


class TesseraPushdownDataSource(TesseraDataSource):
    """``format("tessera")`` with filter pushdown on by default (every read
    without ``.option("pushdown", "false")`` is refused while
    :func:`pushdown_refusal` gives a reason)."""

    pushdown_default = True


def register(spark, *, pushdown: bool = False, lift_arrow_byte_cap: bool = True) -> None:
    """Make ``format("tessera")`` available in ``spark`` (per session).

    Writes: Spark hands a Python writer its rows in Arrow batches of at most
    ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows (10,000) and, unless
    ``spark.sql.execution.arrow.maxBytesPerBatch`` is exactly 2147483647, also
    of at most that many bytes (64 MiB by default).  Enforcing the byte cap
    costs the JVM a size computation *per row* (over half of the JVM's CPU
    time in a write of narrow rows, measured with Java Flight Recorder), so
    with ``lift_arrow_byte_cap`` (the default) this sets it to 2147483647,
    Spark's "no byte limit" value, unless the session already has a value of
    its own.  Batches stay capped by row count; a session whose rows are so
    wide that 10,000 of them do not fit in a Python worker's memory should
    pass ``lift_arrow_byte_cap=False`` or lower ``maxRecordsPerBatch``.  The
    setting is session-wide: it applies to every Arrow batch sent to Python
    (pandas UDFs, ``mapInArrow``) in this session.

    ``pushdown=True`` would push filters by default (each read can still
    choose with the ``pushdown`` option); it raises :class:`SparkOptionError`,
    changing nothing, while :func:`pushdown_refusal` refuses ``spark.version``
    — on every PySpark so far, whose JVM reuses the read plan of a query that
    pushed filters for the other queries of the same DataFrame or temporary
    view (``df.filter("id > 5").count()`` followed by ``df.count()`` returned
    the filtered count).  Where pushdown is allowed, this also sets
    ``spark.sql.python.filterPushdown.enabled``, which it needs; elsewhere the
    session conf is left as it is (Tessera's readers then have no
    ``pushFilters``, and Spark applies every filter itself).

    Reads aim for the session's default parallelism in tasks (recorded here:
    planning workers cannot ask the session); the ``min_partitions`` option
    overrides it per read.

    Spark looks Python data sources up in the JVM's *active* session, which is
    per thread: a job started from another Python thread fails with
    ``DATA_SOURCE_NOT_FOUND`` unless that thread calls :func:`activate` first."""
    refusal = pushdown_refusal(_spark_version(spark))
    if pushdown and refusal:
        raise SparkOptionError(f"register(spark, pushdown=True): {refusal}")
    base = TesseraPushdownDataSource if pushdown else TesseraDataSource
    parallelism = _default_parallelism(spark)
    if parallelism is not None and parallelism != base.default_parallelism:
        # a subclass that Spark pickles by value to its planning workers, carrying the session's parallelism
        base = cast(  # type() builds a subclass of base
            type[TesseraDataSource],
            type(
                base.__name__,
                (base,),
                {
                    "default_parallelism": parallelism,
                    "__module__": __name__,
                    "__qualname__": f"{base.__qualname__}[parallelism={parallelism}]",
                },
            ),
        )
    spark.dataSource.register(base)
    if refusal is None:
        spark.conf.set(PUSHDOWN_CONF, "true")
    if lift_arrow_byte_cap:
        _lift_arrow_byte_cap(spark)
    activate(spark)


ARROW_MAX_BYTES_CONF = "spark.sql.execution.arrow.maxBytesPerBatch"
#: the value at which Spark skips its per-row byte accounting
ARROW_NO_BYTE_LIMIT = str((1 << 31) - 1)
_SPARK_DEFAULT_MAX_BYTES = ("67108864b", "67108864", "64m", "64mb")


def _lift_arrow_byte_cap(spark) -> bool:
    """Set ``maxBytesPerBatch`` to "no limit" unless the session set it; True when set."""
    try:
        explicit = bool(spark._jsparkSession.sessionState().conf().contains(ARROW_MAX_BYTES_CONF))
    except Exception:  # Spark Connect: no JVM here; compare with Spark's default instead
        current = spark.conf.get(ARROW_MAX_BYTES_CONF, None)
        explicit = current is not None and str(current).strip().lower() not in _SPARK_DEFAULT_MAX_BYTES
    if explicit:
        log.info("keeping the session's %s", ARROW_MAX_BYTES_CONF)
        return False
    spark.conf.set(ARROW_MAX_BYTES_CONF, ARROW_NO_BYTE_LIMIT)
    return True


def _spark_version(spark) -> str:
    """The session's Spark version (the JVM's, also through Spark Connect)."""
    version = getattr(spark, "version", None)
    if isinstance(version, str) and version:
        return version
    import pyspark

    return pyspark.__version__


def _default_parallelism(spark) -> int | None:
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect sessions have no SparkContext here
        return None


def activate(spark) -> None:
    """Make ``spark`` the active session of the calling thread (needed before
    using ``format("tessera")`` from a thread other than the registering one)."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is not None:  # classic PySpark; Spark Connect sessions have no JVM here
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)


__all__ = [
    "FORMAT",
    "PUSHDOWN_SAFE_SINCE",
    "NameResolver",
    "TableLocation",
    "TesseraDataSource",
    "TesseraPushdownDataSource",
    "activate",
    "pushdown_refusal",
    "register",
    "resolve_location",
    "set_name_resolver",
]
