"""A Spark job commits through a Lance REST namespace (``tessera serve``): the
cluster needs the server's URL, not the table's coordinator, and the job's
commit interleaves with pylance's commits through the same server."""

from __future__ import annotations

import pyarrow as pa
import pytest

import tessera
from tessera.catalog.errors import SparkOptionError

lance = pytest.importorskip("lance")
pytest.importorskip("starlette")
from tessera_test_services import TesseraServer  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = TesseraServer(tmp_path_factory.mktemp("spark-ns"), "--commit-store", "catalog", token=None)
    yield srv
    srv.stop()


def test_spark_appends_and_reads_through_the_namespace(spark, server):
    ns = server.client()
    import lance_namespace

    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["jobs"]))
    tid = ["jobs", "events"]
    lance.write_dataset(pa.table({"id": pa.array([0], pa.int64())}), namespace_client=ns, table_id=tid)
    df = spark.range(1, 101, numPartitions=2)
    df.write.format("tessera").mode("append").option("namespace", server.uri).save("jobs.events")
    lance.write_dataset(
        pa.table({"id": pa.array([1000], pa.int64())}), namespace_client=ns, table_id=tid, mode="append"
    )
    df.write.format("tessera").mode("append").option("namespace", server.uri).option("table", "jobs.events").save()
    back = spark.read.format("tessera").option("namespace", server.uri).load("jobs.events")
    assert back.count() == 1 + 100 + 1 + 100
    cat = tessera.connect(warehouse=server.warehouse)
    t = cat.load_table("jobs.events")
    assert t.version == 4 and [v["operation"] for v in t.versions()] == ["overwrite", "append", "append", "append"]
    ids = sorted(t.to_arrow().column("id").to_pylist())
    assert ids == sorted([0, 1000] + list(range(1, 101)) * 2)
    assert lance.dataset(namespace_client=ns, table_id=tid).count_rows() == 202
    with pytest.raises(Exception, match="commit_store"):  # Spark wraps the SparkOptionError
        (
            df.write.format("tessera")
            .mode("append")
            .option("namespace", server.uri)
            .option("commit_store", "redis://127.0.0.1:6379/0")
            .save("jobs.events")
        )
    assert cat.load_table("jobs.events").version == 4
    assert issubclass(SparkOptionError, tessera.TesseraError)
