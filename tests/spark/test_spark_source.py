"""The ``tessera`` Spark data source against one shared local SparkSession.

UDFs used to inject failures or to hold a job are defined inside the tests so
cloudpickle ships them by value (the test modules are not importable by the
Python workers)."""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from decimal import Decimal

import pyarrow as pa
import pytest

from tessera.catalog import Table
from tessera.catalog import spark as tspark

pytestmark = pytest.mark.spark

MATRIX_SCHEMA = (
    "id long, b byte, sh short, i int, l long, f float, d double, bo boolean, s string, bin binary, "
    "dt date, ts timestamp, ntz timestamp_ntz, dec decimal(12,3), big decimal(38,10), arr array<int>, "
    "nested array<array<string>>, st struct<a:int, b:array<struct<c:string>>>, iv interval day to second"
)


def _matrix_rows(base: int = 0) -> list[tuple]:
    ts = dt.datetime(2024, 5, 1, 12, 30, 15, 123456)
    return [
        (
            base + 1,
            1,
            300,
            70000,
            2**40,
            1.5,
            2.25,
            True,
            "héllo",
            b"\x00\x01",
            dt.date(2024, 5, 1),
            ts,
            ts,
            Decimal("12.345"),
            Decimal("1234567890123456789012345678.0123456789"),
            [1, None, 3],
            [["a"], [], None],
            (7, [("x",), None]),
            dt.timedelta(days=1, microseconds=5),
        ),
        (
            base + 2,
            -128,
            -32768,
            -1,
            -(2**63),
            -0.0,
            float("inf"),
            False,
            "",
            b"",
            dt.date(1900, 1, 1),
            dt.datetime(1969, 12, 31, 23, 59, 59),
            dt.datetime(2262, 1, 1),
            Decimal("-0.001"),
            Decimal("0E-10"),
            [],
            [],
            (None, []),
            dt.timedelta(0),
        ),
        (base + 3,) + (None,) * 18,
    ]


def _sorted(rows) -> list:
    return sorted(rows, key=lambda r: r[0])


def _data_files(uri: str) -> set[str]:
    d = os.path.join(uri, "data")
    return set(os.listdir(d)) if os.path.isdir(d) else set()


def _referenced(uri: str) -> set[str]:
    t = Table.open(uri)
    out = set()
    for v in range(1, t.version + 1):
        out |= {df.path for f in t.checkout(v).fragments for df in f.files}
    return out


def test_type_matrix_round_trip_and_time_travel(spark, table_uri):
    df = spark.createDataFrame(_matrix_rows(), MATRIX_SCHEMA).repartition(2)
    df.write.format("tessera").mode("append").save(table_uri)  # creates the table
    expected = _sorted(df.collect())
    read = spark.read.format("tessera").load(table_uri)
    assert read.schema.simpleString() == df.schema.simpleString()
    assert _sorted(read.collect()) == expected

    more = spark.createDataFrame(_matrix_rows(10), MATRIX_SCHEMA)
    more.write.format("tessera").mode("append").save(table_uri)
    both = _sorted(expected + more.collect())
    assert _sorted(spark.read.format("tessera").load(table_uri).collect()) == both

    few = spark.createDataFrame(_matrix_rows(100)[:1], MATRIX_SCHEMA)
    few.write.format("tessera").mode("overwrite").save(table_uri)
    assert _sorted(spark.read.format("tessera").load(table_uri).collect()) == few.collect()

    assert Table.open(table_uri).version == 3
    at = lambda **o: _sorted(spark.read.format("tessera").options(**o).load(table_uri).collect())  # noqa: E731
    assert at(version="1") == expected
    assert at(version="2") == both
    Table.open(table_uri).tags.create("before_overwrite", 2)
    assert at(tag="before_overwrite") == both
    projected = spark.read.format("tessera").option("version", "1").option("columns", "s,id").load(table_uri)
    assert projected.columns == ["s", "id"]
    assert sorted(projected.collect(), key=lambda r: r.id) == [(r.s, r.id) for r in expected]


def test_overwrite_replaces_schema_and_empty_writes(spark, table_uri):
    spark.range(0).write.format("tessera").mode("append").save(table_uri)  # empty: creates the table
    t = Table.open(table_uri)
    assert (t.version, t.count_rows(), t.schema.names) == (1, 0, ["id"])
    spark.range(0).write.format("tessera").mode("append").save(table_uri)  # nothing to append: no version
    assert Table.open(table_uri).version == 1
    spark.range(5).selectExpr("id", "id * 2 AS twice").write.format("tessera").mode("overwrite").save(table_uri)
    t = Table.open(table_uri)
    assert t.version == 2 and t.schema.names == ["id", "twice"]
    assert sorted(t.to_arrow().column("twice").to_pylist()) == [0, 2, 4, 6, 8]
    spark.range(0).selectExpr("id", "id AS twice").write.format("tessera").mode("overwrite").save(table_uri)
    assert Table.open(table_uri).count_rows() == 0


def test_append_casts_to_the_table_schema(spark, table_uri):
    # each column of the Spark type the table's column reads as (int32: int; large_string: string)
    Table.create(table_uri, pa.table({"k": pa.array([1], pa.int32()), "v": pa.array(["a"], pa.large_string())}))
    spark.createDataFrame([("b", 2)], "v string, k int").write.format("tessera").mode("append").save(table_uri)
    t = Table.open(table_uri)
    assert t.schema == pa.schema([("k", pa.int32()), ("v", pa.large_string())])
    assert sorted(t.to_arrow().to_pylist(), key=lambda r: r["k"]) == [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}]
    assert sorted(spark.read.format("tessera").load(table_uri).collect()) == [(1, "a"), (2, "b")]


def test_unwritable_type_and_wrong_columns_are_typed_errors(spark, table_uri):
    bad = spark.createDataFrame([(1, {"a": 1})], "id long, m map<string,int>")
    with pytest.raises(Exception, match="UnsupportedSparkTypeError.*'m'.*map<string,int>"):
        bad.write.format("tessera").mode("append").save(table_uri)
    assert not os.path.exists(table_uri)
    spark.range(3).write.format("tessera").mode("append").save(table_uri)
    with pytest.raises(Exception, match="SchemaMismatchError.*missing \\['id'\\], unknown \\['x'\\]"):
        spark.range(3).withColumnRenamed("id", "x").write.format("tessera").mode("append").save(table_uri)
    with pytest.raises(Exception, match="SparkOptionError"):
        spark.range(3).write.format("tessera").mode("append").option("version", "1").save(table_uri)
    with pytest.raises(Exception, match="TableNotFoundError"):
        spark.read.format("tessera").load(table_uri + "-missing").collect()
    assert Table.open(table_uri).version == 1


def test_spark_and_python_append_at_the_same_time(spark, table_uri, tmp_path):
    Table.create(table_uri, pa.table({"id": pa.array([0], pa.int64()), "src": ["init"]}))
    started, go = str(tmp_path / "started"), str(tmp_path / "go")

    def gated(batches):  # holds every Spark task until the Python append has committed
        import os as _os
        import time as _time

        open(started, "a").close()
        deadline = _time.time() + 60
        while not _os.path.exists(go) and _time.time() < deadline:
            _time.sleep(0.02)
        yield from batches

    df = (
        spark.range(1, 2001, numPartitions=2)
        .selectExpr("id", "'spark' AS src")
        .mapInArrow(gated, "id long, src string")
    )
    errors: list[BaseException] = []

    def run() -> None:
        try:
            tspark.activate(spark)  # the JVM's active session is per thread
            df.write.format("tessera").mode("append").save(table_uri)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    job = threading.Thread(target=run)
    job.start()
    deadline = time.time() + 60
    while not os.path.exists(started) and not errors and time.time() < deadline:
        time.sleep(0.02)
    assert os.path.exists(started), f"the Spark job never started: {[str(e)[:3000] for e in errors]}"
    py = Table.open(table_uri)
    py.append(pa.table({"id": pa.array(range(5001, 5101), pa.int64()), "src": ["python"] * 100}))
    assert py.version == 2  # committed while the Spark job (based on version 1) is running
    open(go, "w").close()
    job.join(120)
    assert not errors, errors
    t = Table.open(table_uri)
    assert t.version == 3
    ops = [h["operation"] for h in t.versions()]
    assert ops == ["overwrite", "append", "append"]
    data = t.to_arrow()
    assert sorted(data.column("id").to_pylist()) == [0] + list(range(1, 2001)) + list(range(5001, 5101))
    assert data.column("src").to_pylist().count("spark") == 2000


def test_task_retried_after_failure_commits_once(spark, table_uri, tmp_path):
    marker = str(tmp_path / "failed-once")

    def flaky(batches):  # partition 1 fails once, after its writer has finished files
        import os as _os

        from pyspark import TaskContext

        yield from batches
        if TaskContext.get().partitionId() == 1 and not _os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("injected task failure")

    spark.range(10).write.format("tessera").mode("append").save(table_uri)
    df = spark.range(100, 4100, numPartitions=2).mapInArrow(flaky, "id long")
    df.write.format("tessera").mode("append").option("max_rows_per_file", "500").save(table_uri)
    assert os.path.exists(marker)
    t = Table.open(table_uri)
    assert t.version == 2
    ids = t.to_arrow().column("id").to_pylist()
    assert len(ids) == len(set(ids)) == 4010
    assert sorted(ids) == list(range(10)) + list(range(100, 4100))
    # the failed attempt removed what it had written
    assert _data_files(table_uri) == _referenced(table_uri)


def test_job_failing_for_good_commits_nothing_and_cleanup_removes_its_files(spark, table_uri):
    import datetime as _dt

    def crash(batches):  # the worker of partition 0 dies, every attempt; partition 1 succeeds
        import os as _os

        from pyspark import TaskContext

        yield from batches
        if TaskContext.get().partitionId() == 0:
            _os._exit(3)

    spark.range(10).write.format("tessera").mode("append").save(table_uri)
    before = _data_files(table_uri)
    df = spark.range(0, 4000, numPartitions=2).mapInArrow(crash, "id long")
    with pytest.raises(Exception):  # noqa: B017 - the task failure reaches the driver as a Spark error
        (
            df.write.format("tessera")
            .mode("append")
            .option("max_rows_per_file", "500")
            .option("write_batch_rows", "100")
            .save(table_uri)
        )
    t = Table.open(table_uri)
    assert t.version == 1 and t.count_rows() == 10
    t.cleanup_orphans(older_than=_dt.timedelta(0))
    assert _data_files(table_uri) == before
    txns = os.path.join(table_uri, "_transactions")  # only the first commit's: the failed job wrote none
    assert not os.path.exists(txns) or all(name.startswith("0-") for name in os.listdir(txns))


def test_pylance_reads_what_spark_wrote_and_spark_reads_pylance(spark, lance, tmp_path):
    uri = str(tmp_path / "from_spark")
    df = spark.createDataFrame(_matrix_rows(), MATRIX_SCHEMA).drop("iv", "ntz")
    df.write.format("tessera").mode("overwrite").save(uri)
    ds = lance.dataset(uri)
    got = sorted(ds.to_table().to_pylist(), key=lambda r: r["id"])
    want = sorted(spark.read.format("tessera").load(uri).toArrow().to_pylist(), key=lambda r: r["id"])
    assert got == want and len(got) == 3

    uri2 = str(tmp_path / "from_pylance")
    data = pa.table(
        {
            "k": pa.array(range(1000), pa.int64()),
            "name": [f"n{i}" for i in range(1000)],
            "u": pa.array(range(1000), pa.uint32()),
            "ts": pa.array([i * 1_000_000_000 for i in range(1000)], pa.timestamp("ns")),
            "tags": [[i, i + 1] if i % 3 else None for i in range(1000)],
            "pt": [{"x": float(i), "y": None if i % 2 else -1.0} for i in range(1000)],
        }
    )
    lance.write_dataset(data, uri2, max_rows_per_file=300)
    back = spark.read.format("tessera").option("min_partitions", "64").load(uri2)  # a task per fragment
    assert back.schema.simpleString() == (
        "struct<k:bigint,name:string,u:bigint,ts:timestamp_ntz,tags:array<bigint>,pt:struct<x:double,y:double>>"
    )
    rows = back.filter("k >= 600").orderBy("k").collect()
    assert back.filter("k >= 600").rdd.getNumPartitions() == 4  # pylance files have no statistics
    assert [r.k for r in rows] == list(range(600, 1000))
    assert rows[0].ts == dt.datetime(1970, 1, 1, 0, 10) and rows[1].tags == [601, 602] and rows[0].tags is None


def test_filter_pushdown_prunes_fragments_and_is_exact(spark, table_uri, pushdown_probe):
    """The pushdown machinery, through a source that bypasses its refusal
    (tests/spark/test_spark_pushdown.py covers the refusal)."""
    src = spark.range(0, 1000, numPartitions=4).selectExpr(
        "id",
        "cast(id AS string) AS s",
        "id * 0.5 AS f",
        "IF(id % 2 = 0, NULL, id) AS n",
        "date_add(DATE'2024-01-01', cast(id DIV 250 AS int)) AS d",
        "cast(id AS decimal(10,2)) AS dec",
    )
    src.write.format("tessera").mode("overwrite").save(table_uri)
    t = Table.open(table_uri)
    assert len(t.fragments) == 4
    for column in ("id", "d", "dec"):  # pruning reads the table's zone maps
        t.create_index(column)
    plain = spark.read.format("tessera").load(table_uri)  # pushdown is off by default

    def pushing():  # a fresh DataFrame per query: see tspark.pushdown_refusal
        # min_partitions: a task per fragment (instead of a few small fragments per task), so tasks count fragments
        return spark.read.format(pushdown_probe).option("min_partitions", "64").load(table_uri)

    def parts(cond: str) -> int:
        return pushing().filter(cond).rdd.getNumPartitions()

    assert parts("id >= 900") == 1
    assert parts("id < 10 OR id > 990") == 4  # a disjunction is not pushed
    assert parts("id IN (5, 905)") == 2
    assert parts("d = DATE'2024-01-03'") == 1
    assert parts("dec > 750") == 1
    assert parts("id = 123456") == 1  # no fragment: Spark's empty stand-in partition
    assert parts("f > 100.0") == 4  # floats are not pushed
    assert parts("n IS NULL AND id < 250") == 1
    conditions = [
        "id >= 900",
        "id IN (5, 905)",
        "id = 123456",
        "n IS NULL",
        "n IS NOT NULL AND id > 500",
        "NOT (n IN (1, 3, 5))",
        "n != 7",
        "n <=> 7",
        "NOT (n <=> 7)",
        "s LIKE '99%'",
        "s LIKE '%99'",
        "s LIKE '%99%'",
        "s >= '5' AND s < '6'",
        "d >= DATE'2024-01-03'",
        "dec BETWEEN 10.5 AND 20",
        "f > 100.0 AND id < 300",
        "id < 10 OR id > 990",
    ]
    from functools import reduce

    from pyspark.sql import functions as F

    def by_condition(make) -> dict[int, list[int]]:  # one Spark job for every condition
        parts = [make().filter(c).select(F.lit(i).alias("c"), "id") for i, c in enumerate(conditions)]
        out: dict[int, list[int]] = {i: [] for i in range(len(conditions))}
        for r in reduce(lambda a, b: a.unionByName(b), parts).collect():
            out[r.c].append(r.id)
        return {i: sorted(v) for i, v in out.items()}

    got, want = by_condition(pushing), by_condition(lambda: src)
    for i, cond in enumerate(conditions):
        assert got[i] == want[i], cond
    assert plain.filter("id >= 900").count() == 100
    assert pushing().filter("n IS NULL").count() == 500


def test_reusing_a_dataframe_is_safe_without_pushdown(spark, table_uri):
    spark.range(0, 1000, numPartitions=4).write.format("tessera").mode("append").save(table_uri)
    df = spark.read.format("tessera").load(table_uri)
    assert df.filter("id >= 900").count() == 100
    assert df.count() == 1000  # PySpark 4.3 reuses the read plan here: it must not be a filtered one
    assert df.filter("id < 5").count() == 5
    assert df.count() == 1000


def test_large_fragments_split_by_row_range_and_deletions(spark, table_uri, pushdown_probe):
    spark.range(0, 10_000, numPartitions=1).write.format("tessera").mode("append").save(table_uri)
    Table.open(table_uri).delete("id % 10 = 0")

    def load():  # with pushdown (refusal bypassed): a fresh DataFrame per query
        return (
            spark.read.format(pushdown_probe)
            .option("rows_per_partition", "3000")
            .option("batch_rows", "1000")
            .load(table_uri)
        )

    assert load().rdd.getNumPartitions() == 4
    ids = sorted(r.id for r in load().collect())
    assert ids == [i for i in range(10_000) if i % 10]
    assert load().filter("id >= 9000").rdd.getNumPartitions() == 4  # one fragment: ranges are not pruned
    assert load().filter("id >= 9000").count() == 900


def test_sql_temporary_view_insert_and_select(spark, table_uri):
    spark.range(3).write.format("tessera").mode("append").save(table_uri)
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW tv USING tessera OPTIONS (path 'file:{table_uri}')")
    spark.sql("INSERT INTO tv SELECT id + 10 FROM range(2)")
    assert sorted(r.id for r in spark.sql("SELECT id FROM tv WHERE id > 1").collect()) == [2, 10, 11]
    spark.sql("INSERT OVERWRITE tv SELECT 42")
    t = Table.open(table_uri)
    assert t.version == 3 and t.to_arrow().column("id").to_pylist() == [42]
    # a query with a filter is planned afresh; PySpark 4.3 reuses the view's last
    # read plan (and so its snapshot) for a query without any
    assert [r.id for r in spark.sql("SELECT * FROM tv WHERE id >= 0").collect()] == [42]


def test_types_spark_lacks_are_widened_on_read_and_round_trip(spark, table_uri):
    Table.create(
        table_uri,
        pa.table(
            {
                "k": [1, 2],
                "t": pa.array([1_000_000, None], pa.time64("us")),
                "u": pa.array([2**64 - 1, 3], pa.uint64()),
                "du": pa.array([5, None], pa.duration("ms")),
                "h": pa.array([1.5, None], pa.float16()),
                "fl": pa.array([[1, 2], None], pa.list_(pa.int16(), 2)),
            }
        ),
    )
    df = spark.read.format("tessera").load(table_uri)
    assert df.schema.simpleString() == (
        "struct<k:bigint,t:time(6),u:decimal(20,0),du:interval day to second,h:float,fl:array<smallint>>"
    )
    want = [
        (1, dt.time(0, 0, 1), Decimal(2**64 - 1), dt.timedelta(milliseconds=5), 1.5, [1, 2]),
        (2, None, Decimal(3), None, None, None),
    ]
    assert df.orderBy("k").collect() == want
    copy = table_uri + "-copy"
    df.write.format("tessera").mode("overwrite").save(copy)
    assert str(Table.open(copy).schema.field("u").type) == "decimal128(20, 0)"
    assert spark.read.format("tessera").load(copy).orderBy("k").collect() == want


def test_register_lifts_the_per_row_arrow_byte_cap_unless_the_session_set_one(spark, table_uri):
    key = tspark.ARROW_MAX_BYTES_CONF
    assert spark.conf.get(key) == tspark.ARROW_NO_BYTE_LIMIT  # the shared session, registered by the fixture
    fresh, kept, mine = spark.newSession(), spark.newSession(), spark.newSession()
    mine.conf.set(key, "2k")
    try:
        tspark.register(fresh)
        tspark.register(kept, lift_arrow_byte_cap=False)
        tspark.register(mine)
        assert fresh.conf.get(key) == tspark.ARROW_NO_BYTE_LIMIT
        assert kept.conf.get(key) == "67108864b"  # Spark's default, left alone
        assert mine.conf.get(key) in ("2k", "2048b")  # the session's own value wins
        # with a 2 KiB cap Spark cuts its batches by bytes: the writer gets many tiny ones and loses none
        rows = mine.range(0, 5000, numPartitions=2).selectExpr("id", "repeat('x', 100) AS s")
        rows.write.format("tessera").mode("append").save(table_uri)
        t = Table.open(table_uri)
        assert t.count_rows() == 5000 and len(t.fragments) == 2
        assert sorted(t.to_arrow().column("id").to_pylist()) == list(range(5000))
    finally:
        tspark.activate(spark)


def test_spark_reads_a_categorical_column_as_its_values(spark, tmp_path):
    import pandas as pd

    uri = str(tmp_path / "cat")
    df = pd.DataFrame({"id": [1, 2, 3, 4], "g": pd.Categorical(["lo", "hi", None, "lo"])})
    t = Table.create(uri, df)
    assert pa.types.is_dictionary(t.schema.field("g").type)
    back = spark.read.format("tessera").load(uri)
    assert dict(back.dtypes)["g"] == "string"
    assert sorted((r.id, r.g) for r in back.collect()) == [(1, "lo"), (2, "hi"), (3, None), (4, "lo")]
    assert back.where("g = 'lo'").count() == 2
    # Spark appends its strings to the Categorical column (dictionary-encoded as they are written)
    spark.createDataFrame([(5, "hi"), (6, None), (7, "new")], "id long, g string").write.format("tessera").mode(
        "append"
    ).save(uri)
    t = Table.open(uri)
    assert pa.types.is_dictionary(t.schema.field("g").type)
    got = dict(zip(t.to_arrow().column("id").to_pylist(), t.to_arrow().column("g").to_pylist()))
    assert got == {1: "lo", 2: "hi", 3: None, 4: "lo", 5: "hi", 6: None, 7: "new"}
    assert t.to_pandas()["g"].dtype.name == "category"
