"""Structured Streaming into Tessera exactly once, and idempotent batch writes
(``txnAppId``/``txnVersion``), through the real Spark session: a micro-batch
Spark runs again after a crash (its commit missing from the checkpoint) is
not committed twice."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tessera.catalog import Table
from tessera.catalog.errors import SparkOptionError
from tessera.commit import recorded_version


def _files(src, k: int) -> None:
    for i in range(k):
        pq.write_table(pa.table({"id": pa.array(range(10 * i, 10 * i + 10), pa.int64())}), f"{src}/part-{i}.parquet")


def _data_files(uri: str) -> int:
    return len(os.listdir(os.path.join(uri, "data")))


def _run(spark, src, uri, checkpoint) -> None:
    df = spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).parquet(src)
    q = df.writeStream.format("tessera").option("checkpointLocation", checkpoint).trigger(availableNow=True).start(uri)
    q.awaitTermination(300)
    assert q.exception() is None, str(q.exception())[-3000:]


def test_each_micro_batch_is_committed_exactly_once(spark, tmp_path):
    src, uri, checkpoint = str(tmp_path / "src"), str(tmp_path / "t"), str(tmp_path / "ck")
    os.makedirs(src)
    _files(src, 3)
    _run(spark, src, uri, checkpoint)
    t = Table.open(uri)
    assert sorted(t.to_arrow().column("id").to_pylist()) == list(range(30))
    app = [k for k in t.manifest.config if k.startswith("tessera.txn.spark-query-")]
    assert len(app) == 1 and t.manifest.config[app[0]] == "2"  # batches 0, 1 and 2
    version, files = t.version, _data_files(uri)

    # the driver "crashed" after committing batch 2 to the table but before the checkpoint
    # recorded it: Spark runs batch 2 again on restart
    for name in ("2", ".2.crc"):  # the commit marker and Hadoop's checksum of it
        os.remove(os.path.join(checkpoint, "commits", name))
    _run(spark, src, uri, checkpoint)
    assert os.path.exists(os.path.join(checkpoint, "commits", "2"))  # Spark did run batch 2 again
    again = Table.open(uri)
    assert sorted(again.to_arrow().column("id").to_pylist()) == list(range(30))  # not twice
    assert again.version == version and _data_files(uri) == files  # nothing committed, the replay's files removed

    # a new file after the restart is a new batch, committed once
    _files(src, 4)
    _run(spark, src, uri, checkpoint)
    last = Table.open(uri)
    assert sorted(last.to_arrow().column("id").to_pylist()) == list(range(40))
    assert recorded_version(last.manifest, app[0].removeprefix("tessera.txn.")) == 3


def test_idempotent_batch_writes(spark, tmp_path):
    uri = str(tmp_path / "t")
    df = spark.range(5)

    def write(version: int) -> None:
        df.write.format("tessera").mode("append").option("txnAppId", "nightly").option("txnVersion", str(version)).save(
            uri
        )

    write(1)
    v, files = Table.open(uri).version, _data_files(uri)
    write(1)  # the scheduler ran the job again
    assert Table.open(uri).count_rows() == 5
    write(0)  # older than what the table holds: nothing
    assert Table.open(uri).version == v and _data_files(uri) == files  # the runs' files removed
    write(2)
    assert Table.open(uri).count_rows() == 10
    with pytest.raises(SparkOptionError, match="txnAppId"):
        df.write.format("tessera").mode("append").option("txnAppId", "x").save(uri)
    with pytest.raises(SparkOptionError, match="txnVersion"):
        df.write.format("tessera").mode("append").option("txnAppId", "x").option("txnVersion", "-1").save(uri)


def _stream(spark, uri, sink, checkpoint, **options) -> list[dict]:
    """Stream ``uri`` into the Tessera table ``sink`` (restartable: the sink keeps a checkpoint)."""
    reader = spark.readStream.format("tessera")
    for k, v in options.items():
        reader = reader.option(k, v)
    q = reader.load(uri).writeStream.format("tessera").option("checkpointLocation", checkpoint)
    q = q.trigger(availableNow=True).start(sink)
    q.awaitTermination(300)
    assert q.exception() is None, str(q.exception())[-3000:]
    return Table.open(sink).to_arrow().to_pylist()


def test_a_table_as_a_streaming_source(spark, tmp_path):
    uri, ck = str(tmp_path / "t"), str(tmp_path / "ck")
    out = str(tmp_path / "out")
    t = Table.create(uri, pa.table({"id": pa.array([1, 2], pa.int64())}))
    assert sorted(r["id"] for r in _stream(spark, uri, out, ck)) == [1, 2]  # the table as it was
    t.append(pa.table({"id": pa.array([3], pa.int64())}))
    t.append(pa.table({"id": pa.array([4, 5], pa.int64())}))
    # the same query, restarted: only what was appended since
    assert sorted(r["id"] for r in _stream(spark, uri, out, ck)) == [1, 2, 3, 4, 5]
    t.delete("id = 1")
    t.append(pa.table({"id": pa.array([6], pa.int64())}))
    with pytest.raises(Exception, match="skipChangeCommits"):
        _stream(spark, uri, out, ck)
    skip = _stream(
        spark, uri, str(tmp_path / "out2"), str(tmp_path / "ck2"), startingVersion="4", skipChangeCommits="true"
    )
    assert sorted(r["id"] for r in skip) == [6]  # the delete's version skipped whole
    feed = _stream(
        spark, uri, str(tmp_path / "out3"), str(tmp_path / "ck3"), startingVersion="2", readChangeFeed="true"
    )
    assert sorted((r["id"], r["_change_type"], r["_commit_version"]) for r in feed) == [
        (1, "delete", 4),
        (3, "insert", 2),
        (4, "insert", 3),
        (5, "insert", 3),
        (6, "insert", 5),
    ]
