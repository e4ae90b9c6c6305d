"""The Spark source's pure-Python parts (types, pushed filters and their
range terms, partition planning, options); pyspark is imported but no JVM is
started."""

from __future__ import annotations

import datetime as dt
import sys
import types
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pytest
from tessera_test_services import IN_CI

if not IN_CI:
    pytest.importorskip("pyspark")

from pyspark.sql import datasource as D  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

from tessera.catalog import spark as tspark  # noqa: E402
from tessera.catalog.errors import SchemaMismatchError, SparkOptionError, UnsupportedSparkTypeError  # noqa: E402
from tessera.catalog.spark.stats import range_terms_of, translate  # noqa: E402
from tessera.catalog.spark.types import (  # noqa: E402
    arrow_schema_for,
    check_append_columns,
    conform_batch,
    spark_arrow_schema,
    spark_schema_of,
    to_spark_batch,
)


def test_every_stored_arrow_type_reads_as_a_spark_type():
    schema = pa.schema(
        [
            ("u8", pa.uint8()),
            ("u16", pa.uint16()),
            ("u32", pa.uint32()),
            ("u64", pa.uint64()),
            ("h", pa.float16()),
            ("ls", pa.large_string()),
            ("lb", pa.large_binary()),
            ("fb", pa.binary(3)),
            ("d64", pa.date64()),
            ("tsn", pa.timestamp("ns")),
            ("tsz", pa.timestamp("ms", "Europe/Paris")),
            ("t32", pa.time32("ms")),
            ("dur", pa.duration("ns")),
            ("d256", pa.decimal256(30, 4)),
            ("fsl", pa.list_(pa.float32(), 2)),
            ("ll", pa.large_list(pa.string())),
            ("nul", pa.null()),
            ("st", pa.struct([pa.field("a", pa.int8(), nullable=False)])),
        ]
    )
    spark = spark_schema_of(schema)
    assert spark.simpleString() == (
        "struct<u8:smallint,u16:int,u32:bigint,u64:decimal(20,0),h:float,ls:string,lb:binary,fb:binary,d64:date,"
        "tsn:timestamp_ntz,tsz:timestamp,t32:time(6),dur:interval day to second,d256:decimal(30,4),"
        "fsl:array<float>,ll:array<string>,nul:void,st:struct<a:tinyint>>"
    )
    arrays = [
        pa.array([7], pa.uint8()),
        pa.array([7], pa.uint16()),
        pa.array([7], pa.uint32()),
        pa.array([2**64 - 1], pa.uint64()),
        pa.array([1.5], pa.float16()),
        pa.array(["x"], pa.large_string()),
        pa.array([b"x"], pa.large_binary()),
        pa.array([b"abc"], pa.binary(3)),
        pa.array([86_400_000], pa.date64()),
        pa.array([1_500], pa.timestamp("ns")),
        pa.array([1], pa.timestamp("ms", "Europe/Paris")),
        pa.array([1], pa.time32("ms")),
        pa.array([2_000], pa.duration("ns")),
        pa.array([Decimal("1.5")], pa.decimal256(30, 4)),
        pa.array([[1.0, 2.0]], pa.list_(pa.float32(), 2)),
        pa.array([["a"]], pa.large_list(pa.string())),
        pa.nulls(1),
        pa.array([{"a": 1}], schema.field("st").type),
    ]
    target = spark_arrow_schema(spark)
    batch = to_spark_batch(arrays, target)
    assert batch.schema.equals(target)
    row = batch.to_pylist()[0]
    assert row["u64"] == Decimal(2**64 - 1) and row["d64"] == dt.date(1970, 1, 2) and row["fsl"] == [1.0, 2.0]
    assert row["tsn"] == dt.datetime(1970, 1, 1, 0, 0, 0, 1)  # nanoseconds truncated to microseconds
    with pytest.raises(UnsupportedSparkTypeError, match="38 digits"):
        spark_schema_of(pa.schema([("big", pa.decimal256(40, 0))]))


def test_spark_types_map_to_storable_arrow_types_or_a_typed_error():
    schema = T.StructType(
        [
            T.StructField("id", T.LongType(), False),
            T.StructField("ts", T.TimestampType()),
            T.StructField("a", T.ArrayType(T.ArrayType(T.StringType(), False))),
            T.StructField("iv", T.DayTimeIntervalType()),
        ]
    )
    assert arrow_schema_for(schema) == pa.schema(
        [
            pa.field("id", pa.int64(), False),
            ("ts", pa.timestamp("us", "UTC")),
            ("a", pa.list_(pa.field("item", pa.list_(pa.field("item", pa.string(), False))))),
            ("iv", pa.duration("us")),
        ]
    )
    bad = T.StructType(
        [T.StructField("s", T.StructType([T.StructField("m", T.MapType(T.StringType(), T.IntegerType()))]))]
    )
    with pytest.raises(UnsupportedSparkTypeError, match=r"column 's\.m' has Spark type map<string,int>.*map_entries"):
        arrow_schema_for(bad)
    with pytest.raises(UnsupportedSparkTypeError, match="interval year to month"):
        arrow_schema_for(T.StructType([T.StructField("y", T.YearMonthIntervalType())]))
    with pytest.raises(SchemaMismatchError, match="duplicate"):
        arrow_schema_for(T.StructType([T.StructField("a", T.LongType()), T.StructField("a", T.LongType())]))


def test_append_columns_are_checked_before_any_task_runs():
    # pylance's rule in Spark's types: each column of the Spark type the table's reads as
    table = pa.schema([pa.field("k", pa.int32(), False), ("st", pa.struct([("a", pa.int64())])), ("u", pa.uint8())])
    ok = T.StructType(
        [
            T.StructField("st", T.StructType([T.StructField("a", T.LongType())])),
            T.StructField("k", T.IntegerType()),
            T.StructField("u", T.ShortType()),
        ]
    )
    check_append_columns(ok, table)
    check_append_columns(T.StructType([T.StructField("k", T.IntegerType())]), table)  # nullable ones may be missing
    with pytest.raises(SchemaMismatchError, match="column 'st' is string in the data, the table has struct"):
        check_append_columns(
            T.StructType([T.StructField("st", T.StringType()), T.StructField("k", T.IntegerType())]), table
        )
    with pytest.raises(SchemaMismatchError, match="column 'st.a' is int32 in the data, the table has int64"):
        check_append_columns(
            T.StructType(
                [
                    T.StructField("st", T.StructType([T.StructField("a", T.IntegerType())])),
                    T.StructField("k", T.IntegerType()),
                ]
            ),
            table,
        )
    with pytest.raises(SchemaMismatchError, match="column 'k' is int64 in the data, the table has int32.*k int"):
        check_append_columns(T.StructType([T.StructField("k", T.LongType())]), table)  # no widening
    with pytest.raises(SchemaMismatchError, match=r"missing \['k'\]"):
        check_append_columns(T.StructType([T.StructField("u", T.ShortType())]), table)


def test_conform_batch_orders_checks_nullability_and_fits_values():
    table = pa.schema([pa.field("k", pa.int32(), False), ("v", pa.large_string()), ("u", pa.uint8())])
    batch = pa.record_batch({"v": ["a", None], "u": pa.array([1, 255], pa.int16()), "k": pa.array([1, 2], pa.int32())})
    out = conform_batch(batch, table)
    assert out.schema == table and out.to_pylist() == [{"k": 1, "v": "a", "u": 1}, {"k": 2, "v": None, "u": 255}]
    with pytest.raises(SchemaMismatchError, match="not nullable"):
        conform_batch(pa.record_batch({"v": ["a"], "k": pa.array([None], pa.int32())}), table)
    with pytest.raises(SchemaMismatchError, match="column 'u'.*uint8"):
        conform_batch(pa.record_batch({"u": pa.array([300], pa.int16()), "k": pa.array([1], pa.int32())}), table)


DATA = pa.table(
    {
        "i": pa.array([1, 5, None, 9], pa.int32()),
        "s": ["apple", "banana", None, "cherry"],
        "d": pa.array([dt.date(2024, 1, 1), None, dt.date(2024, 3, 1), dt.date(2024, 2, 1)]),
        "ts": pa.array([0, 10**6, None, 2 * 10**6], pa.timestamp("us", "UTC")),
        "dec": pa.array([Decimal("1.50"), None, Decimal("-2.00"), Decimal("3.25")], pa.decimal128(5, 2)),
        "f": [1.0, float("nan"), None, 2.0],
        "b": [b"x", b"y", None, b"z"],
    }
)
IDS = {name: i for i, name in enumerate(DATA.schema.names)}


def _rows(flt) -> list[int] | None:
    p = translate(flt, DATA.schema, IDS)
    if p is None:
        return None
    expr = p.expression(DATA.schema.field(p.column).type)
    mask = pc.fill_null(pads.dataset(DATA).to_table(columns={"m": expr}).column("m"), False)
    return [i for i, keep in enumerate(mask.to_pylist()) if keep]


@pytest.mark.parametrize(
    "flt, rows",
    [
        (D.GreaterThan(("i",), 4), [1, 3]),
        (D.Not(D.EqualTo(("i",), 5)), [0, 3]),  # NULL stays out, as in Spark
        (D.Not(D.In(("i",), [1, 9])), [1]),
        (D.In(("i",), [1, 9]), [0, 3]),
        (D.EqualNullSafe(("i",), 5), [1]),
        (D.Not(D.EqualNullSafe(("i",), 5)), [0, 2, 3]),
        (D.EqualNullSafe(("i",), None), [2]),
        (D.IsNull(("s",)), [2]),
        (D.Not(D.IsNull(("s",))), [0, 1, 3]),
        (D.StringStartsWith(("s",), "ba"), [1]),
        (D.Not(D.StringContains(("s",), "an")), [0, 3]),
        (D.LessThan(("d",), dt.date(2024, 2, 15)), [0, 3]),
        (D.GreaterThanOrEqual(("ts",), dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC)), [1, 3]),
        (D.LessThanOrEqual(("dec",), Decimal("1.5")), [0, 2]),
        (D.EqualTo(("b",), b"y"), [1]),
        (D.GreaterThan(("f",), 1.0), None),  # floats: NaN ordering differs, Spark keeps it
        (D.GreaterThan(("b",), b"x"), None),  # binary: equality only
        (D.In(("s",), ["a", None]), None),  # NULL in an IN list
        (D.EqualTo(("i",), 2**40), None),  # not an int32
        (D.EqualTo(("dec",), Decimal("1.555")), None),  # does not fit decimal(5,2)
        (D.EqualTo(("st", "a"), 1), None),  # nested
    ],
)
def test_pushed_filters_are_exact_or_handed_back(flt, rows):
    assert _rows(flt) == rows


@pytest.mark.parametrize(
    "flt, term",
    [
        (D.GreaterThan(("i",), 4), ("i", ">", [4])),
        (D.LessThanOrEqual(("i",), 5), ("i", "<=", [5])),
        (D.In(("i",), [1, 9]), ("i", "in", [1, 9])),
        (D.EqualNullSafe(("i",), 5), ("i", "=", [5])),
        (D.EqualTo(("s",), "banana"), ("s", "=", ["banana"])),
        (D.StringStartsWith(("s",), "ba"), ("s", ">=", ["ba"])),
        (D.LessThan(("d",), dt.date(2024, 2, 15)), ("d", "<", [dt.date(2024, 2, 15)])),
        (
            D.GreaterThanOrEqual(("ts",), dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC)),
            ("ts", ">=", [dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC)]),
        ),
        (D.LessThanOrEqual(("dec",), Decimal("1.5")), ("dec", "<=", [Decimal("1.50")])),
        (D.Not(D.EqualTo(("i",), 5)), None),  # negations, NULL tests, suffixes, binary: no term
        (D.Not(D.In(("i",), [1, 9])), None),
        (D.EqualNullSafe(("i",), None), None),
        (D.IsNull(("s",)), None),
        (D.Not(D.IsNull(("s",))), None),
        (D.StringEndsWith(("s",), "na"), None),
        (D.StringContains(("s",), "an"), None),
        (D.StringStartsWith(("s",), ""), None),
        (D.EqualTo(("b",), b"y"), None),
    ],
)
def test_pushed_filters_give_range_terms_every_kept_row_satisfies(flt, term):
    """The range terms zone maps prune with: a row the pushed filter keeps
    always satisfies its term (so pruning never drops a row Spark would get)."""
    p = translate(flt, DATA.schema, IDS)
    assert p is not None
    terms = range_terms_of([p], DATA.schema)
    assert [(t.column, t.op, [v.as_py() for v in t.values]) for t in terms] == ([term] if term else [])
    kept = _rows(flt)
    ops = {"=": pc.equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}
    for t in terms:
        col = DATA.column(t.column)
        assert t.values[0].type == col.type
        if t.op == "in":
            holds = pc.is_in(col, value_set=pa.array([v.as_py() for v in t.values], col.type))
        else:
            holds = ops[t.op](col, t.values[0])
        holds = pc.fill_null(holds, False).to_pylist()
        assert all(holds[i] for i in kept), (flt, t)


def test_range_terms_skip_columns_the_schema_lacks():
    p = translate(D.GreaterThan(("i",), 4), DATA.schema, IDS)
    assert range_terms_of([p], pa.schema([("other", pa.int32())])) == []


def _frag(rows: int, size: int, deleted: int = 0):
    from tessera.format.protos import table_pb2

    f = table_pb2.DataFragment(physical_rows=rows)
    f.files.add(path="x.lance", fields=[0], file_size_bytes=size)
    if deleted:
        f.deletion_file.num_deleted_rows = deleted
        f.deletion_file.file_type = table_pb2.ARROW_ARRAY
    return f


def test_read_partitions_keep_every_core_busy_with_few_tasks():
    from tessera.catalog.spark.read import PartitionSizing, plan_partitions

    MB = 1 << 20
    # Spark's bench table: 4 tasks wrote a 1M-row and a 250k-row file each
    frags = [_frag(1_000_000, 37 * MB), _frag(250_000, 9 * MB)] * 4
    two = plan_partitions(frags, PartitionSizing(min_partitions=2))
    assert [[i for i, _, _ in t] for t in two] == [[0, 1, 2, 3], [4, 5, 6, 7]]  # two tasks, in table order
    assert all(start == 0 and stop == frags[i].physical_rows for t in two for i, start, stop in t)
    # more cores: more tasks, no task reads more than a split
    eight = plan_partitions(frags, PartitionSizing(min_partitions=8))
    assert len(eight) >= 8
    for i in range(8):  # every row of every fragment read exactly once
        ranges = sorted((a, b) for t in eight for j, a, b in t if j == i)
        assert ranges[0][0] == 0 and ranges[-1][1] == frags[i].physical_rows
        assert all(p[1] == q[0] for p, q in zip(ranges, ranges[1:]))
    # a large fragment is split into row ranges of at most max_partition_bytes
    big = plan_partitions([_frag(10_000, 1000 * MB)], PartitionSizing(min_partitions=1))
    assert len(big) == 8 and [t[0][1:] for t in big][:2] == [(0, 1250), (1250, 2500)]
    # a row cap splits and stops packing; empty and fully deleted fragments get no task
    capped = plan_partitions(
        [_frag(10_000, 10_000), _frag(0, 0), _frag(5, 100, deleted=5)], PartitionSizing(rows_per_partition=3000)
    )
    assert [t for t in capped] == [[(0, 0, 2500)], [(0, 2500, 5000)], [(0, 5000, 7500)], [(0, 7500, 10_000)]]
    # small fragments, one core: one task, until their open costs fill a split (as Spark packs files)
    assert len(plan_partitions([_frag(100, 1000)] * 20, PartitionSizing(min_partitions=1))) == 1
    assert len(plan_partitions([_frag(100, 1000)] * 50, PartitionSizing(min_partitions=1))) == 2
    assert plan_partitions([], PartitionSizing()) == []


def test_read_partitions_take_only_the_row_ranges_zone_maps_left():
    from tessera.catalog.errors import TesseraError
    from tessera.catalog.spark.read import PartitionSizing, plan_partitions

    frags = [_frag(10_000, 80_000) for _ in range(4)]
    whole = plan_partitions(frags, PartitionSizing(min_partitions=2))
    # fragment 0 whole, 1 skipped, 2 two zones (overlapping and unsorted ranges merge, clip to the rows), 3 none left
    ranges = [None, [], [(9_000, 12_000), (1_000, 2_000), (1_500, 3_000)], []]
    tasks = plan_partitions(frags, PartitionSizing(min_partitions=2), ranges)
    pieces = sorted((i, a, b) for t in tasks for i, a, b in t)
    assert {i for i, _, _ in pieces} == {0, 2}
    assert [(a, b) for i, a, b in pieces if i == 2] == [(1_000, 3_000), (9_000, 10_000)]
    assert sum(b - a for i, a, b in pieces if i == 0) == 10_000
    assert sum(b - a for t in whole for _, a, b in t) == 40_000
    # the estimate follows the rows left: 13,000 rows of 4 fragments fit the tasks 2 cores need
    assert len(tasks) <= 2
    # a large fragment's zones are still split into tasks of at most a split
    big = plan_partitions([_frag(10_000, 1000 << 20)], PartitionSizing(), [[(0, 1000), (5000, 6000)]])
    assert [p for t in big for p in t] == [(0, 0, 1000), (0, 5000, 6000)]
    assert plan_partitions(frags, PartitionSizing(), [[], [], [], []]) == []
    with pytest.raises(TesseraError, match="row range lists"):
        plan_partitions(frags, PartitionSizing(), [None])


def test_register_records_the_sessions_parallelism_for_planning_workers():
    from pyspark import cloudpickle

    class Session:  # what register touches of a classic SparkSession
        class sparkContext:  # noqa: N801
            defaultParallelism = 7

        class dataSource:  # noqa: N801
            registered = []

            @classmethod
            def register(cls, ds):
                cls.registered.append(ds)

        class conf:  # noqa: N801
            @staticmethod
            def set(key, value):
                pass

            @staticmethod
            def get(key, default=None):
                return default

    tspark.register(Session)
    ds = Session.dataSource.registered[-1]
    assert issubclass(ds, tspark.TesseraDataSource) and ds.name() == "tessera" and not ds.pushdown_default
    clone = cloudpickle.loads(cloudpickle.dumps(ds))  # as Spark ships it to a planning worker
    assert clone.default_parallelism == 7 and clone.name() == "tessera"
    assert tspark.TesseraDataSource.default_parallelism is None  # the importable classes are untouched


def test_pushdown_is_refused_on_pysparks_that_reuse_pushed_read_plans(monkeypatch):
    for version in ("4.3.0", "4.1.0", "4.2.1", "4.3.0.dev0", "5.0.0-preview1"):
        assert "refused on PySpark" in tspark.pushdown_refusal(version)
    assert "needs PySpark 4.1" in tspark.pushdown_refusal("3.5.1")
    assert "needs PySpark 4.1" in tspark.pushdown_refusal("4.0.0")

    conf: dict = {}

    class Session:  # what register touches of a classic SparkSession
        version = "4.3.0"
        sparkContext = None

        class dataSource:  # noqa: N801
            registered = []

            @classmethod
            def register(cls, ds):
                cls.registered.append(ds)

        class conf:  # noqa: N801
            @staticmethod
            def set(key, value):
                conf[key] = value

            @staticmethod
            def get(key, default=None):
                return conf.get(key, default)

    with pytest.raises(SparkOptionError, match="pushdown=True.*refused on PySpark 4.3.0"):
        tspark.register(Session, pushdown=True)
    assert Session.dataSource.registered == [] and conf == {}  # refused before changing anything
    tspark.register(Session)
    assert not Session.dataSource.registered[-1].pushdown_default
    assert tspark.PUSHDOWN_CONF not in conf  # Tessera's readers do not need it: the session's value stays

    ds = tspark.TesseraDataSource({"path": "/nowhere", "pushdown": "true"})
    with pytest.raises(SparkOptionError, match="refused"):
        ds.schema()  # before looking for the table
    with pytest.raises(SparkOptionError, match="must be true or false"):
        tspark.TesseraDataSource({"path": "/nowhere", "pushdown": "1"}).schema()

    # a Spark known to keep pushed plans per query: allowed, and register turns the conf on
    monkeypatch.setattr(tspark, "PUSHDOWN_SAFE_SINCE", (4, 4))
    assert tspark.pushdown_refusal("4.3.9") and tspark.pushdown_refusal("4.4.0") is None
    assert tspark.pushdown_refusal("5.0.0-preview1") is None
    Session.version = "4.4.0"
    tspark.register(Session, pushdown=True)
    assert Session.dataSource.registered[-1].pushdown_default and conf[tspark.PUSHDOWN_CONF] == "true"


def test_pyspark_discovers_the_source_without_register():
    """PySpark's own module scan (the worker a JVM runs once) finds and pickles ``tessera``."""
    import io

    from pyspark.serializers import UTF8Deserializer, read_int
    from pyspark.sql.worker import lookup_data_sources
    from pyspark.worker_util import pickleSer

    out = io.BytesIO()
    lookup_data_sources._main(io.BytesIO(), out)
    out.seek(0)
    found = {}
    for _ in range(read_int(out)):
        name = UTF8Deserializer().loads(out)
        found[name] = pickleSer._read_with_length(out)
    assert found["tessera"] is tspark.TesseraDataSource


def test_locations_from_options(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    loc = tspark.resolve_location({"path": "rel/t", "commit_store": "redis://h:1/0", "storage.Region": "eu"})
    assert loc == tspark.TableLocation(str(tmp_path / "rel" / "t"), "redis://h:1/0", {"region": "eu"})
    assert tspark.resolve_location({"path": "file:/a/b"}).uri == "/a/b"
    assert tspark.resolve_location({"path": "file:///a/b"}).uri == "/a/b"
    assert tspark.resolve_location({"path": "s3://bucket/t"}).uri == "s3://bucket/t"
    with pytest.raises(SparkOptionError, match="no table given"):
        tspark.resolve_location({})
    with pytest.raises(SparkOptionError, match="no name resolver"):
        tspark.resolve_location({"table": "ns.t"})

    module = types.ModuleType("tessera_test_resolver")
    module.resolve = lambda name, opts: tspark.TableLocation(
        f"s3://wh/{name.replace('.', '/')}", "redis://r/0", {"region": "us"}
    )
    monkeypatch.setitem(sys.modules, "tessera_test_resolver", module)
    loc = tspark.resolve_location(
        {"table": "ns.t", "resolver": "tessera_test_resolver:resolve", "storage.endpoint_url": "http://x"}
    )
    assert loc == tspark.TableLocation("s3://wh/ns/t", "redis://r/0", {"region": "us", "endpoint_url": "http://x"})
    monkeypatch.setattr("tessera.catalog.spark.location._default_resolver", module.resolve)
    assert tspark.resolve_location({"table": "a.b"}).uri == "s3://wh/a/b"
    with pytest.raises(SparkOptionError, match="not both"):
        tspark.resolve_location({"table": "a.b", "path": "/x"})
    with pytest.raises(SparkOptionError, match="cannot load"):
        tspark.resolve_location({"table": "a.b", "resolver": "no_such_module_xyz:f"})


def test_writer_tasks_commit_and_abort_in_process(tmp_path):
    """The writer's methods called directly (as Spark's workers would)."""
    import os

    from tessera.catalog import Table
    from tessera.catalog.spark.write import plan_write

    loc = tspark.TableLocation(str(tmp_path / "t"))
    schema = T.StructType([T.StructField("id", T.LongType(), False), T.StructField("s", T.StringType())])

    def batches(lo: int, hi: int):
        yield pa.record_batch({"id": pa.array(range(lo, hi), pa.int64()), "s": [str(i) for i in range(lo, hi)]})

    w = plan_write(loc, schema, False, {"max_rows_per_file": "3"})
    msgs = [w.write(batches(0, 5)), w.write(batches(5, 7)), w.write(iter([]))]
    assert [len(m.fragments) for m in msgs] == [2, 1, 0]
    w.commit(msgs + [None])
    t = Table.open(loc.uri)
    assert (t.version, t.count_rows(), len(t.fragments)) == (1, 7, 3)
    files = set(os.listdir(os.path.join(loc.uri, "data")))

    w.abort(msgs)  # as after a commit whose outcome was unknown: committed files stay
    assert set(os.listdir(os.path.join(loc.uri, "data"))) == files
    w2 = plan_write(loc, schema, False, {})
    lost = w2.write(batches(10, 12))
    assert len(set(os.listdir(os.path.join(loc.uri, "data")))) == len(files) + 1
    w2.abort([None, lost])
    assert set(os.listdir(os.path.join(loc.uri, "data"))) == files
    assert Table.open(loc.uri).version == 1

    def failing():
        yield from batches(20, 30)
        raise RuntimeError("upstream failure")

    with pytest.raises(RuntimeError):
        plan_write(loc, schema, False, {"max_rows_per_file": "4", "write_batch_rows": "2"}).write(failing())
    assert set(os.listdir(os.path.join(loc.uri, "data"))) == files  # the task removed its own files

    over = plan_write(loc, T.StructType([T.StructField("x", T.DoubleType())]), True, {})
    over.commit([over.write(iter([pa.record_batch({"x": [1.5]})]))])
    t = Table.open(loc.uri)
    assert t.version == 2 and t.to_arrow().to_pylist() == [{"x": 1.5}]


def test_commit_retry_options_set_the_drivers_policy(tmp_path):
    from tessera.catalog import errors as E
    from tessera.catalog.spark.write import plan_write
    from tessera.commit.retry import RetryPolicy

    loc = tspark.TableLocation(str(tmp_path / "t"))
    schema = T.StructType([T.StructField("id", T.LongType(), False)])
    w = plan_write(loc, schema, False, {"commit.retry.max-seconds": "7", "commit.retry.read-back-seconds": "0.5"})
    assert w.plan.handler().policy == RetryPolicy(max_seconds=7, read_back_seconds=0.5)
    with pytest.raises(E.SparkOptionError, match="max-seconds"):
        plan_write(loc, schema, False, {"commit.retry.max-seconds": "later"})
