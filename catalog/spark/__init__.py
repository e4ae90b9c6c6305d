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

Options (keys are case-insensitive, values strings).  These are all there
are: any other key is refused with :class:`SparkOptionError`, naming the
nearest known option, before anything is read or written (the lists are
:data:`READ_OPTIONS` and :data:`WRITE_OPTIONS`; see
:mod:`tessera.catalog.spark.options`).  Of the keys Spark sets itself,
only ``path`` and ``paths`` reach a Python source (``saveAsTable``,
``insertInto`` and ``spark.datasource.tessera.*`` session settings pass
nothing: checked on PySpark 4.3).

========================== ========================================================
``path`` / ``load(uri)``   the table: a URI (``s3://``, ``file://``), an absolute
                           path or a relative path with a separator (``./t``);
                           a bare name (``ns.t2``) is a table *name*, as
                           ``table`` (see :mod:`tessera.catalog.names`)
``paths``                  set by Spark's ``load([uri])``: one table only
``table``                  a table *name*, resolved in the catalog the options
                           name: ``namespace``, ``catalog``/``warehouse`` or a
                           name resolver (see below); refused with
                           :class:`SparkTableNameError` when they name none
``catalog``                a Tessera catalog, as :func:`tessera.connect` takes
                           it: a config-file catalog name or the catalog
                           database's URL
``warehouse``              that catalog's warehouse (a SQLite catalog under it
                           when ``catalog`` is not given).  A write to a name
                           the catalog lacks creates the table in its namespace
                           (recorded when the job commits)
``resolver``               ``module:function`` resolving ``table`` names
``commit_store``           external manifest store URL coordinating commits (a
                           table by path; a catalog records its own)
``namespace``              a Lance REST namespace URL (``tessera serve``): the
                           table is ``table``'s id (``ns.table``) or the path,
                           located by the namespace, and the job's commit goes
                           through it (no store credentials on the cluster)
``namespace.<key>``        a property of the namespace client
                           (``namespace.header.Authorization``)
``storage.<key>``          one entry of ``storage_options`` (``storage.region``...)
``version`` / ``tag``      read: time travel to a version number or a tag
``columns``                read: comma-separated columns (Spark 4.3 does not pass
                           the projection to Python sources)
``pushdown``               read: ``true``/``false`` (default ``false``); ``true``
                           is refused with :class:`SparkOptionError` on every
                           PySpark with filter pushdown so far, see below
``filter``                 read: a SQL filter (``Table.scanner``'s) the source
                           applies itself: the DataFrame holds only the rows it
                           matches, and the table's zone maps skip the files and
                           row ranges that cannot (the way to prune from Spark
                           while pushdown is refused; it is part of the
                           DataFrame's options, so every query sees it)
``batch_rows``             read: rows per Arrow batch (65536)
``min_partitions``         read: tasks to aim for at least (default: the
                           session's default parallelism, see :func:`register`)
``max_partition_bytes``    read: most data file bytes per task (128 MiB)
``rows_per_partition``     read: most rows per task (no limit)
``read_stats_dir``         read: a directory (on each executor's file system)
                           where every task writes a JSON file of what it read:
                           pieces, fragments, rows, bytes read from data files
``readChangeFeed``         read: ``true`` reads the change data feed (Delta's
                           names): the rows versions ``startingVersion`` to
                           ``endingVersion`` (default: the version read)
                           inserted, updated and deleted, with
                           ``_change_type``, ``_commit_version``,
                           ``_commit_timestamp`` (see ``Table.changes``)
``startingVersion``        read, change feed: the first version (required)
``endingVersion``          read, change feed: the last version
``file_version``           write, new tables: Lance file version (2.2)
``naming``                 write, new tables: manifest naming, ``V1``/``V2`` (V2)
``max_rows_per_file``      write: rows per data file/fragment (1048576)
``write_batch_rows``       write: rows buffered before encoding (131072)
``commit.retry.<key>``     write: the commit's :class:`~tessera.commit.retry.RetryPolicy`
                           (``commit.retry.max-seconds``...)
``replaceWhere``           write, ``mode("overwrite")`` only: a SQL predicate
                           (Tessera's, as ``filter``); the rows it matches are
                           replaced by the DataFrame's in one version (one
                           Update: their deletion and the new rows), and a
                           DataFrame row it does not match fails the job
                           (:class:`ReplaceWhereMismatchError`, nothing committed)
``partitionOverwriteMode`` write: only ``static`` (tables have no partitions;
                           use ``replaceWhere``)
``mergeSchema``            write: ``true`` on an append adds the DataFrame's new
                           columns (``Table.append(schema_mode="merge")``)
``overwriteSchema``        write: ``true`` with a plain overwrite (which always
                           takes the DataFrame's schema), ``false`` otherwise
========================== ========================================================

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

Addressing by name: ``.option("table", "ns.events")`` or ``save("ns.events")``
is resolved in a Tessera catalog (``.option("warehouse", "/data/wh")``,
``.option("catalog", "prod")``), a REST namespace (``.option("namespace",
url)``) or by a :data:`NameResolver` — ``.option("resolver", "pkg.module:function")``, or the
process-wide default set with :func:`set_name_resolver`.  Because planning
workers are separate processes, a default must be installed by code those
workers import (for example the module defining the resolver calling
:func:`set_name_resolver` at import time, imported from here); the
``resolver`` option always works.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from typing import cast

try:
    from pyspark.sql.datasource import DataSource
except ImportError as _exc:  # pragma: no cover - pyspark is an optional dependency
    raise ImportError("the tessera Spark data source needs pyspark>=4.1: pip install 'tessera[spark]'") from _exc

from tessera.catalog.errors import (  # noqa: F401 - ReplaceWhereMismatchError: for the docs' cross-reference
    ReplaceWhereMismatchError,
    SparkOptionError,
    SparkTableNameError,
    SparkWorkerPythonError,
    TesseraError,
    UnknownColumnError,
)

from . import changes
from .errors import reported, unwrap
from .location import (  # noqa: F401 - re-exported: the package API
    CatalogClaim,
    NameResolver,
    TableLocation,
    normalize_uri,
    resolve_location,
    set_name_resolver,
)
from .options import (  # noqa: F401 - re-exported: the package API
    LOCATION_OPTIONS,
    LOCATION_PREFIXES,
    NAMESPACE_PREFIX,
    READ_OPTIONS,
    STORAGE_PREFIX,
    WRITE_OPTIONS,
    SparkOptions,
)

log = logging.getLogger(__name__)

FORMAT = "tessera"
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
    """``format("tessera")``: batch reads and append/overwrite writes of Tessera tables.

    Every option is checked against :data:`READ_OPTIONS` or
    :data:`WRITE_OPTIONS` when Spark plans the
    read (``schema()``/``reader()``) or the write (``writer()``), before
    anything is read or written: an unknown one is a :class:`SparkOptionError`
    naming the nearest known option."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def read_options(self) -> SparkOptions:
        """This source's options as a read's (unknown ones refused)."""
        return SparkOptions(self.options, READ_OPTIONS, WRITE_OPTIONS)

    def write_options(self) -> SparkOptions:
        """This source's options as a write's (unknown ones refused)."""
        return SparkOptions(self.options, WRITE_OPTIONS, READ_OPTIONS)

    #: push filters unless the ``pushdown`` option says otherwise (see :func:`register`)
    pushdown_default = False
    #: read tasks to aim for when the ``min_partitions`` option is not given:
    #: set by :func:`register` to the session's default parallelism, else this
    #: machine's core count (planning workers run on the driver)
    default_parallelism: int | None = None

    def _open(self, opts: SparkOptions):
        """The table's location and the table at the version the options ask for (latest by default)."""
        loc = resolve_location(opts)
        version = _int_option(opts, "version", None)
        tag = opts.get("tag")
        if version is not None and tag:
            raise SparkOptionError("give either option version or option tag, not both")
        return loc, loc.open_table(version if version is not None else tag)

    def _pushdown(self, opts: SparkOptions) -> bool:
        """Whether to push filters: the ``pushdown`` option, refused (a
        :class:`SparkOptionError`) while :meth:`_pushdown_refusal` gives a reason."""
        raw = opts.get("pushdown")
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

    def _columns(self, opts: SparkOptions, names: list[str]) -> list[str]:
        raw = opts.get("columns")
        if raw is None:
            return names
        cols = [c.strip() for c in raw.split(",") if c.strip()]
        unknown = [c for c in cols if c not in names]
        if unknown or not cols:
            raise UnknownColumnError(f"option columns names {unknown or 'nothing'}; the table has {names}")
        return cols

    def _filter(self, opts: SparkOptions, table) -> str | None:
        """The ``filter`` option, checked against the table's schema (a typed
        error naming the option at load, not a task failure later)."""
        raw = opts.get("filter")
        if raw is None:
            return None
        if not raw.strip():
            raise SparkOptionError('option filter is empty; give a SQL filter such as "ts >= 100" or drop it')
        from tessera.catalog.query import predicate

        try:
            predicate.to_expression(raw, table.schema)
        except TesseraError as exc:
            raise SparkOptionError(f"option filter {raw!r}: {exc}") from exc
        return raw

    @reported
    def schema(self):
        from pyspark.sql.types import StructType

        from .types import spark_schema_of

        opts = self.read_options()
        if changes.wants_feed(opts):
            _, table = self._open(opts)
            changes.feed_range(opts, table.version)  # options refused at load(), not at the first query
            full = spark_schema_of(table.schema)
            return StructType([full[c] for c in self._columns(opts, full.fieldNames())] + changes.change_columns())
        self._pushdown(opts)  # an option refused fails at load(), not at the first query
        _, table = self._open(opts)
        self._filter(opts, table)
        full = spark_schema_of(table.schema)
        return StructType([full[c] for c in self._columns(opts, full.fieldNames())])

    @reported
    def reader(self, schema):
        from tessera.format.file import schema as lschema

        from .read import (
            DEFAULT_MAX_PARTITION_BYTES,
            DEFAULT_READ_BATCH_ROWS,
            PartitionSizing,
            ReadPlan,
            TesseraFilteringReader,
            TesseraReader,
        )

        o = self.read_options()
        if changes.wants_feed(o):
            loc, table = self._open(o)
            first, last = changes.feed_range(o, table.version)
            added = {f.name for f in changes.change_columns()}
            plan = changes.FeedPlan(
                uri=table.uri,
                storage_options=loc.storage_options,
                first=first,
                last=last,
                columns=[c for c in schema.fieldNames() if c not in added],
                tasks=_int_option(o, "min_partitions", self.default_parallelism or os.cpu_count() or 1) or 1,
            )
            return changes.ChangeFeedReader(plan, schema)
        pushdown = self._pushdown(o)
        loc, table = self._open(o)
        names = table.schema.names
        unknown = [c for c in schema.fieldNames() if c not in names]
        if unknown:
            raise UnknownColumnError(f"{table.uri} version {table.version} has no columns {unknown}")
        plan = ReadPlan(
            uri=table.uri,
            storage_options=loc.storage_options,
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
            filter_sql=self._filter(o, table),
        )
        cls = TesseraFilteringReader if pushdown else TesseraReader
        # the index section: pushed filters prune with the version's zone maps at planning
        return cls(plan, schema, [f.SerializeToString() for f in table.fragments], table.snapshot.index_section)

    @reported
    def streamReader(self, schema):  # noqa: N802 - pyspark's name
        """Structured Streaming's source: the versions committed since the last batch (see :mod:`.stream_read`)."""
        from .stream_read import TesseraStreamReader, stream_plan

        o = self.read_options()
        loc, table = self._open(o)  # the latest version: where the stream begins
        added = {f.name for f in changes.change_columns()}
        tasks = _int_option(o, "min_partitions", self.default_parallelism or os.cpu_count() or 1) or 1
        plan = stream_plan(o, table, [c for c in schema.fieldNames() if c not in added], tasks)
        plan = dataclasses.replace(plan, storage_options=dict(loc.storage_options))
        return TesseraStreamReader(plan, schema)

    @reported
    def writer(self, schema, overwrite: bool):
        from .write import plan_write

        opts = self.write_options()
        return plan_write(resolve_location(opts, for_write=True), schema, overwrite, opts)

    @reported
    def streamWriter(self, schema, overwrite: bool):  # noqa: N802 - pyspark's name
        """Structured Streaming's sink: every micro-batch committed once (see :mod:`.stream`)."""
        from .stream import stream_writer

        opts = self.write_options()
        return stream_writer(resolve_location(opts, for_write=True), schema, overwrite, opts)


class TesseraPushdownDataSource(TesseraDataSource):
    """``format("tessera")`` with filter pushdown on by default (every read
    without ``.option("pushdown", "false")`` is refused while
    :func:`pushdown_refusal` gives a reason)."""

    pushdown_default = True


def register(spark, *, pushdown: bool = False, lift_arrow_byte_cap: bool = True, translate_errors: bool = True) -> None:
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

    Errors: a Tessera error raised where Spark runs the source (planning
    workers, tasks, the job's commit) reaches this process inside a PySpark
    exception whose text Spark starts with its own heading.  With
    ``translate_errors`` (the default) this process's PySpark exceptions that
    carry one become instances of the Tessera error class too (``except
    SchemaMismatchError`` works; ``AnalysisException``/``PythonException``
    still do), and their ``str()`` starts with it, then Spark's text:
    ``tessera.errors.SchemaMismatchError: cannot write ...`` (see
    :mod:`tessera.catalog.spark.errors`; process-wide, as PySpark's
    exception conversion is).  :func:`unwrap` gets the Tessera error back
    from any such exception either way.

    Spark looks Python data sources up in the JVM's *active* session, which is
    per thread: a job started from another Python thread fails with
    ``DATA_SOURCE_NOT_FOUND`` unless that thread calls :func:`activate` first."""
    refusal = pushdown_refusal(_spark_version(spark))
    if pushdown and refusal:
        raise SparkOptionError(f"register(spark, pushdown=True): {refusal}")
    check_worker_python(spark)
    if translate_errors:
        from .errors import install

        install()
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


#: worker interpreters that imported Tessera (checked once per process)
_WORKER_PYTHONS_OK: set[str] = set()


def check_worker_python(spark) -> None:
    """Refuse (:class:`SparkWorkerPythonError`, saying how to fix it) a
    session whose Python workers run an interpreter that cannot import
    Tessera.  Spark starts them with ``spark.pyspark.python`` or
    ``PYSPARK_PYTHON``, else ``python3`` from PATH - not the interpreter
    running this program (``.venv/bin/python job.py`` with the venv not
    activated): every job would fail with ``ModuleNotFoundError: No module
    named 'tessera'`` inside a Py4J traceback.  One subprocess per process
    and interpreter; nothing when the workers run this interpreter, or when
    there is no local SparkContext to ask (Spark Connect)."""
    try:
        exe = spark.conf.get("spark.pyspark.python", None) or spark.sparkContext.pythonExec
    except Exception:  # noqa: BLE001 - Spark Connect: the workers are the server's business
        return
    if not exe:
        return
    resolved = shutil.which(exe) or exe
    if resolved in _WORKER_PYTHONS_OK or os.path.realpath(resolved) == os.path.realpath(sys.executable):
        return
    try:
        probe = subprocess.run(  # from a neutral folder: a checkout in the current one must not answer
            [resolved, "-c", "import tessera"], capture_output=True, text=True, timeout=120, cwd=os.path.expanduser("~")
        )
        ok = probe.returncode == 0
        why = (probe.stderr.strip().splitlines() or ["no output"])[-1]
    except (OSError, subprocess.TimeoutExpired) as exc:
        ok, why = False, str(exc)
    if ok:
        _WORKER_PYTHONS_OK.add(resolved)
        return
    raise SparkWorkerPythonError(
        f"Spark's Python workers would run {exe!r} ({resolved}), which cannot import tessera ({why}); "
        f"set PYSPARK_PYTHON={sys.executable} in the environment before the SparkSession is created "
        f"(or .config('spark.pyspark.python', {sys.executable!r})), or install tessera there"
    )


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
    "LOCATION_OPTIONS",
    "READ_OPTIONS",
    "WRITE_OPTIONS",
    "CatalogClaim",
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
    "unwrap",
]
