"""Spark appends follow pylance's write rule in Spark's types (issue 25, item 1):
a DataFrame column of another type than the table column's Spark type is
refused before any task runs, with nothing written."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from tessera.catalog import Table


def _data_files(uri: str) -> set[str]:
    return set(os.listdir(os.path.join(uri, "data")))


def test_a_string_id_is_not_appended_into_an_int64_column(spark, table_uri):
    Table.create(table_uri, pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}))
    files = _data_files(table_uri)
    df = spark.range(3, 5).selectExpr("cast(id as string) AS id", "'c' AS v")
    with pytest.raises(Exception, match="SchemaMismatchError.*column 'id' is string in the data, the table has int64"):
        df.write.format("tessera").mode("append").save(table_uri)
    t = Table.open(table_uri)
    assert t.version == 1 and _data_files(table_uri) == files
    assert sorted(t.to_arrow().column("id").to_pylist()) == [1, 2]
    # no widening either: an int column into the bigint one
    with pytest.raises(Exception, match="SchemaMismatchError.*column 'id' is int32 in the data, the table has int64"):
        spark.range(3, 5).selectExpr("cast(id as int) AS id", "'c' AS v").write.format("tessera").mode("append").save(
            table_uri
        )
    assert Table.open(table_uri).version == 1 and _data_files(table_uri) == files
    # the table's own Spark types go in
    spark.range(3, 5).selectExpr("id", "'c' AS v").write.format("tessera").mode("append").save(table_uri)
    assert sorted(Table.open(table_uri).to_arrow().column("id").to_pylist()) == [1, 2, 3, 4]


def test_a_column_takes_its_own_spark_type_and_values_that_fit(spark, table_uri):
    Table.create(table_uri, pa.table({"u": pa.array([1], pa.uint8())}))  # Spark reads it as smallint
    files = _data_files(table_uri)
    with pytest.raises(Exception, match="SchemaMismatchError.*column 'u' is int32 in the data, the table has int16"):
        spark.createDataFrame([(7,)], "u int").write.format("tessera").mode("append").save(table_uri)
    assert Table.open(table_uri).version == 1 and _data_files(table_uri) == files
    spark.createDataFrame([(7,)], "u smallint").write.format("tessera").mode("append").save(table_uri)
    assert sorted(Table.open(table_uri).to_arrow().column("u").to_pylist()) == [1, 7]
    files = _data_files(table_uri)
    with pytest.raises(Exception, match="SchemaMismatchError.*column 'u'.*uint8"):
        spark.createDataFrame([(300,)], "u smallint").write.format("tessera").mode("append").save(table_uri)
    assert Table.open(table_uri).version == 2 and _data_files(table_uri) == files
