"""Options of the ``tessera`` Spark source: every key is implemented or refused
(before anything is written), ``replaceWhere`` replaces exactly the rows its
predicate matches in one version, Delta's partition/schema options are
refused, and a bare name given to ``save``/``load`` is a table name (resolved
in the catalog the options name), never a folder.

UDFs are defined inside the tests, so cloudpickle ships them by value."""

from __future__ import annotations

import os
import shutil
import uuid

import pyarrow as pa
import pytest

import tessera
from tessera.catalog import Table
from tessera.catalog import spark as tspark
from tessera.catalog.errors import SparkOptionError

pytestmark = pytest.mark.spark


def _files(uri: str) -> set[str]:
    """Every file under the table's folder (data, deletions, versions, indices)."""
    out = set()
    for root, _, names in os.walk(uri):
        out.update(os.path.relpath(os.path.join(root, n), uri) for n in names)
    return out


def _table(uri: str, n: int = 20, per_file: int = 8) -> Table:
    return Table.create(
        uri,
        pa.table({"id": pa.array(range(n), pa.int64()), "s": [f"old{i}" for i in range(n)]}),
        max_rows_per_file=per_file,
    )


def _rows(uri: str) -> dict[int, str]:
    return {r["id"]: r["s"] for r in Table.open(uri).to_arrow().to_pylist()}


# -- unknown options -----------------------------------------------------------------------


def test_misspelt_write_option_is_refused_naming_the_nearest_and_writes_nothing(spark, table_uri, tmp_path):
    _table(table_uri)
    before, files = Table.open(table_uri).version, _files(table_uri)
    df = spark.createDataFrame([(100, "x")], "id long, s string")
    with pytest.raises(Exception, match="SparkOptionError.*'comit_store'.*Did you mean 'commit_store'"):
        df.write.format("tessera").mode("append").option("comit_store", "redis://127.0.0.1:1/0").save(table_uri)
    with pytest.raises(Exception, match="SparkOptionError.*'max_row_per_file'.*Did you mean 'max_rows_per_file'"):
        df.write.format("tessera").mode("overwrite").option("max_row_per_file", "5").save(table_uri)
    # an option of the other direction names that direction
    with pytest.raises(Exception, match="SparkOptionError.*'version' is a read option"):
        df.write.format("tessera").mode("append").option("version", "1").save(table_uri)
    assert Table.open(table_uri).version == before and _files(table_uri) == files
    # a new table: not even its folder appears
    fresh = str(tmp_path / "fresh")
    with pytest.raises(Exception, match="SparkOptionError.*'comit_store'"):
        df.write.format("tessera").mode("append").option("comit_store", "redis://127.0.0.1:1/0").save(fresh)
    assert not os.path.exists(fresh)


def test_misspelt_read_option_is_refused_naming_the_nearest(spark, table_uri):
    _table(table_uri)
    with pytest.raises(Exception, match="SparkOptionError.*'verison'.*Did you mean 'version'"):
        spark.read.format("tessera").option("verison", "1").load(table_uri)
    with pytest.raises(Exception, match="SparkOptionError.*'fitler'.*Did you mean 'filter'"):
        spark.read.format("tessera").schema("id long, s string").option("fitler", "id > 3").load(table_uri).count()
    with pytest.raises(Exception, match="SparkOptionError.*'replaceWhere' is a write option"):
        spark.read.format("tessera").option("replaceWhere", "id > 3").load(table_uri)


def test_options_are_case_insensitive(spark, table_uri):
    _table(table_uri, n=6)
    df = spark.createDataFrame([(i, f"n{i}") for i in range(10, 22)], "id long, s string").coalesce(1)
    df.write.format("tessera").mode("append").option("MAX_ROWS_PER_FILE", "5").save(table_uri)
    t = Table.open(table_uri)
    assert [f.physical_rows for f in t.fragments][-3:] == [5, 5, 2]  # honoured, not ignored
    back = spark.read.format("tessera").option("VERSION", "1").option("Filter", "id >= 2").load(table_uri)
    assert sorted(r.id for r in back.collect()) == [2, 3, 4, 5]
    with pytest.raises(Exception, match="SparkOptionError.*'comit_store'"):
        df.write.format("tessera").mode("append").option("Comit_Store", "x").save(table_uri)
    # given directly (not through Spark, which keeps the last), two spellings with different values
    with pytest.raises(SparkOptionError, match="given twice"):
        tspark.resolve_location({"path": "/a", "Commit_Store": "redis://a:1/0", "commit_store": "redis://b:1/0"})


def test_an_option_read_by_the_source_must_be_listed():
    """The lists are the source's only way to its options: reading one that is
    not listed fails, so an option cannot be implemented without being known."""
    from tessera.catalog.spark.options import SparkOptions, UnlistedOptionError
    from tessera.catalog.spark.write import WRITE_OPTIONS

    opts = SparkOptions({"path": "/t", "storage.region": "eu"}, tspark.READ_OPTIONS, WRITE_OPTIONS)
    assert opts.get("PATH") == "/t" and opts.prefixed("storage.") == {"region": "eu"}
    with pytest.raises(UnlistedOptionError):
        opts.get("replaceWhere")
    with pytest.raises(UnlistedOptionError):
        opts.get("not_an_option")
    assert "replaceWhere" in WRITE_OPTIONS.names and "version" not in WRITE_OPTIONS.names


def test_load_of_several_paths_is_refused(spark, table_uri):
    _table(table_uri, n=3)
    assert spark.read.format("tessera").load([table_uri]).count() == 3
    with pytest.raises(Exception, match="SparkOptionError.*one table, got 2 paths"):
        spark.read.format("tessera").load([table_uri, table_uri]).count()


# -- replaceWhere ------------------------------------------------------------------------------


def test_replace_where_replaces_exactly_the_matching_rows_in_one_version(spark, table_uri):
    _table(table_uri)  # ids 0..19 in fragments of 8, 8 and 4 rows
    before = Table.open(table_uri).version
    df = spark.createDataFrame([(i, f"new{i}") for i in (0, 3, 9, 100 - 95)], "id long, s string")
    df.write.format("tessera").mode("overwrite").option("replaceWhere", "id < 10").save(table_uri)
    t = Table.open(table_uri)
    assert t.version == before + 1  # delete and append in one version
    assert t.versions()[-1]["operation"] == "update"
    rows = _rows(table_uri)
    assert rows == {**{i: f"old{i}" for i in range(10, 20)}, 0: "new0", 3: "new3", 9: "new9", 5: "new5"}
    # the other fragments are untouched: fragment 0 (ids 0..7) is gone, fragment 1 got a deletion file
    assert [f.id for f in t.fragments][:2] == [1, 2]
    assert t.fragments[0].deletion_file.num_deleted_rows == 2 and not t.fragments[1].HasField("deletion_file")
    # an empty DataFrame deletes the matching rows
    spark.createDataFrame([], "id long, s string").write.format("tessera").mode("overwrite").option(
        "replaceWhere", "s LIKE 'new%'"
    ).save(table_uri)
    assert _rows(table_uri) == {i: f"old{i}" for i in range(10, 20)}
    assert Table.open(table_uri).version == before + 2


def test_replace_where_row_that_does_not_match_fails_the_job_and_commits_nothing(spark, table_uri):
    _table(table_uri)
    before, files, rows = Table.open(table_uri).version, _files(table_uri), _rows(table_uri)
    df = spark.createDataFrame([(1, "a"), (2, "b"), (42, "stray")], "id long, s string").coalesce(1)
    with pytest.raises(Exception, match=r"ReplaceWhereMismatchError.*does not match replaceWhere 'id < 10'.*42"):
        df.write.format("tessera").mode("overwrite").option("replaceWhere", "id < 10").save(table_uri)
    assert Table.open(table_uri).version == before and _rows(table_uri) == rows
    assert _files(table_uri) == files  # the failed task removed what it wrote


def test_replace_where_needs_overwrite_and_a_valid_predicate(spark, table_uri):
    _table(table_uri)
    before, files = Table.open(table_uri).version, _files(table_uri)
    df = spark.createDataFrame([(1, "a")], "id long, s string")
    with pytest.raises(Exception, match="SparkOptionError.*replaceWhere.*needs mode\\('overwrite'\\)"):
        df.write.format("tessera").mode("append").option("replaceWhere", "id < 10").save(table_uri)
    with pytest.raises(Exception, match="SparkOptionError.*replaceWhere 'nope < 10'"):
        df.write.format("tessera").mode("overwrite").option("replaceWhere", "nope < 10").save(table_uri)
    assert Table.open(table_uri).version == before and _files(table_uri) == files


def test_replace_where_rebases_over_concurrent_commits(tmp_path):
    """The driver's commit, called directly after other writers committed:
    a concurrent delete of some of the same rows, an update of other rows of
    the same fragment and an append are all kept, and the job's delete covers
    the version it lands on."""
    from pyspark.sql import types as T

    from tessera.catalog.spark.write import plan_write

    uri = str(tmp_path / "t")
    _table(uri)
    schema = T.StructType([T.StructField("id", T.LongType()), T.StructField("s", T.StringType())])
    w = plan_write(tspark.TableLocation(uri), schema, True, {"replaceWhere": "id < 10"})
    msg = w.write(iter([pa.record_batch({"id": pa.array([1, 2], pa.int64()), "s": ["new1", "new2"]})]))
    other = Table.open(uri)
    other.delete("id = 1")  # one of the rows the job replaces
    other.update({"s": "'upd12'"}, where="id = 12")  # a row it keeps, in a fragment it changes
    other.append(pa.table({"id": pa.array([50], pa.int64()), "s": ["appended"]}))
    planned = w.plan.base_version
    w.commit([msg])
    t = Table.open(uri)
    assert t.version == planned + 4
    expected = {i: f"old{i}" for i in range(10, 20)} | {12: "upd12", 50: "appended", 1: "new1", 2: "new2"}
    assert _rows(uri) == expected


# -- Delta's partition and schema options ---------------------------------------------------


def test_partition_overwrite_mode_and_schema_options_are_refused(spark, table_uri):
    _table(table_uri)
    before, files = Table.open(table_uri).version, _files(table_uri)
    df = spark.createDataFrame([(1, "a")], "id long, s string")
    with pytest.raises(Exception, match="SparkOptionError.*partitionOverwriteMode.*no partitions.*replaceWhere"):
        df.write.format("tessera").mode("overwrite").option("partitionOverwriteMode", "dynamic").save(table_uri)
    with pytest.raises(Exception, match="SparkOptionError.*mergeSchema=true.*append"):
        df.write.format("tessera").mode("overwrite").option("mergeSchema", "true").save(table_uri)
    with pytest.raises(Exception, match="SparkOptionError.*mergeSchema must be true or false"):
        df.write.format("tessera").mode("append").option("mergeSchema", "yes").save(table_uri)
    with pytest.raises(Exception, match="SparkOptionError.*overwriteSchema"):
        df.write.format("tessera").mode("append").option("overwriteSchema", "true").save(table_uri)
    assert Table.open(table_uri).version == before and _files(table_uri) == files
    # the values that ask for what Tessera does are accepted
    df.write.format("tessera").mode("overwrite").option("partitionOverwriteMode", "STATIC").option(
        "overwriteSchema", "true"
    ).save(table_uri)
    df.write.format("tessera").mode("append").option("mergeSchema", "false").save(table_uri)
    assert sorted(_rows(table_uri).items()) == [(1, "a")] and Table.open(table_uri).count_rows() == 2


def test_merge_schema_adds_the_new_columns_as_an_append_with_schema_mode_merge(spark, lance, table_uri):
    _table(table_uri, n=4, per_file=2)
    base = Table.open(table_uri).version
    df = spark.createDataFrame([(100, "x", 1.5)], "id long, s string, score double")
    with pytest.raises(Exception, match="SchemaMismatchError|not in the table"):  # without the option, as before
        df.write.format("tessera").mode("append").save(table_uri)
    df.write.format("tessera").mode("append").option("mergeSchema", "true").save(table_uri)
    ds = lance.dataset(table_uri)
    ops = [type(ds.read_transaction(v).operation).__name__ for v in (base + 1, base + 2)]
    assert ops == ["Merge", "Append"]  # the new column (metadata only), then the rows
    got = Table.open(table_uri).to_arrow(columns=["id", "score"]).sort_by("id")
    assert got.column("score").to_pylist() == [None] * 4 + [1.5]
    assert ds.to_table(columns=["id", "score"]).sort_by("id").equals(got)
    spark.createDataFrame([(101, "y")], "id long, s string").write.format("tessera").mode("append").option(
        "mergeSchema", "true"
    ).save(table_uri)  # nothing new: a plain append, the missing column null
    assert Table.open(table_uri).to_arrow(filter="id = 101").column("score").to_pylist() == [None]


# -- names and paths --------------------------------------------------------------------------


def _worker_cwd(spark) -> str:
    """The working directory of Spark's Python workers (where a relative path would land)."""
    return spark.range(1).rdd.map(lambda _: __import__("os").getcwd()).collect()[0]


def test_a_bare_name_without_a_catalog_is_refused_not_a_folder(spark):
    name = f"tessera_ns_{uuid.uuid4().hex[:8]}.t2"
    where = [os.path.join(d, name) for d in {os.getcwd(), _worker_cwd(spark)}]
    df = spark.range(3)
    try:
        with pytest.raises(Exception, match=rf"SparkTableNameError.*'{name}' is a table name.*warehouse.*'\./{name}'"):
            df.write.format("tessera").mode("append").save(name)
        with pytest.raises(Exception, match="SparkTableNameError"):
            spark.read.format("tessera").load(name)
        assert not any(os.path.exists(p) for p in where)
    finally:
        for p in where:  # what HEAD's code made of the name
            shutil.rmtree(p, ignore_errors=True)
    from tessera.catalog.errors import SparkTableNameError

    assert issubclass(SparkTableNameError, SparkOptionError) and issubclass(
        SparkTableNameError, tessera.errors.TableNameError
    )


def test_a_bare_name_is_a_table_of_the_catalog_the_options_name(spark, tmp_path):
    wh = str(tmp_path / "wh")
    cat = tessera.connect(warehouse=wh)
    cat.create_namespace("ns")
    df = spark.createDataFrame([(i, f"v{i}") for i in range(6)], "id long, s string")
    df.write.format("tessera").mode("append").option("warehouse", wh).save("ns.t2")  # created in the catalog
    assert cat.load_table("ns.t2").count_rows() == 6
    assert cat.table_info("ns.t2")["uri"].startswith(wh)
    df.filter("id >= 3").write.format("tessera").mode("overwrite").option("warehouse", wh).option(
        "replaceWhere", "id >= 3"
    ).save("ns.t2")
    back = spark.read.format("tessera").option("warehouse", wh).load("ns.t2")
    assert back.count() == 6 and cat.load_table("ns.t2").version == 2
    assert spark.read.format("tessera").option("warehouse", wh).option("table", "ns.t2").load().count() == 6
    # a namespace the catalog does not have: refused, nothing recorded or written
    with pytest.raises(Exception, match="NamespaceNotFoundError.*'nope'"):
        df.write.format("tessera").mode("append").option("warehouse", wh).save("nope.t")
    assert not cat.table_exists("nope.t") and not os.path.exists(os.path.join(wh, "nope"))
    with pytest.raises(Exception, match="NoSuchTableError"):
        spark.read.format("tessera").option("warehouse", wh).load("ns.missing")
    # a catalog records each table's coordinator
    with pytest.raises(Exception, match="SparkOptionError.*drop option commit_store"):
        df.write.format("tessera").mode("append").option("warehouse", wh).option(
            "commit_store", "redis://127.0.0.1:1/0"
        ).save("ns.t2")
    cat.close()
