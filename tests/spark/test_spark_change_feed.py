"""Spark reads a table's change data feed (``readChangeFeed``, Delta's option
names): the same rows as ``Table.changes``, cut into tasks by version."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tessera.catalog import Table
from tessera.catalog.errors import SparkOptionError


def _feed_table(uri: str) -> Table:
    t = Table.create(uri, pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", "c"]}), stable_row_ids=True)
    t.append(pa.table({"id": pa.array([4], pa.int64()), "v": ["d"]}))
    t.update({"v": "'B'"}, where="id = 2")
    t.delete("id = 3")
    return t


def _rows(df) -> list[tuple]:
    return sorted((r["id"], r["v"], r["_change_type"], r["_commit_version"]) for r in df.collect())


def test_spark_reads_the_change_feed(spark, table_uri):
    t = _feed_table(table_uri)
    reader = spark.read.format("tessera").option("readChangeFeed", "true")
    df = reader.option("startingVersion", "2").option("min_partitions", "3").load(table_uri)
    assert df.schema.fieldNames() == ["id", "v", "_change_type", "_commit_version", "_commit_timestamp"]
    expected = sorted((r["id"], r["v"], r["_change_type"], r["_commit_version"]) for r in t.changes(2).to_pylist())
    assert (
        _rows(df)
        == expected
        == [
            (2, "B", "update_postimage", 3),
            (2, "b", "update_preimage", 3),
            (3, "c", "delete", 4),
            (4, "d", "insert", 2),
        ]
    )
    assert df.rdd.getNumPartitions() == 3  # versions 2, 3 and 4: one task each
    one = reader.option("startingVersion", "3").option("endingVersion", "3").option("columns", "v").load(table_uri)
    assert sorted((r["v"], r["_change_type"]) for r in one.collect()) == [
        ("B", "update_postimage"),
        ("b", "update_preimage"),
    ]


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "needs option startingVersion"),
        ({"startingVersion": "0"}, "version number"),
        ({"startingVersion": "3", "endingVersion": "2"}, "after endingVersion"),
        ({"startingVersion": "1", "endingVersion": "99"}, "after the table's version"),
        ({"startingVersion": "1", "filter": "id > 1"}, "does not apply to a change feed"),
        ({"startingVersion": "x"}, "must be a version number"),
    ],
)
def test_bad_change_feed_options_are_refused(spark, table_uri, options, message):
    _feed_table(table_uri)
    reader = spark.read.format("tessera").option("readChangeFeed", "true")
    for k, v in options.items():
        reader = reader.option(k, v)
    with pytest.raises(SparkOptionError, match=message):
        reader.load(table_uri).collect()
