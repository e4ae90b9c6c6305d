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


_WRITER = """
import json, sys
import pyarrow as pa
kind, w, n, warehouse, url = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
tid = ["race", "t"]
if kind == "tessera":
    import tessera
    t = tessera.connect(warehouse=warehouse).load_table("race.t")
    append = lambda rows: t.append(rows)
else:
    import lance, lance_namespace
    import tessera  # registers "tessera"
    ns = (lance_namespace.connect("tessera", {"warehouse": warehouse}) if kind == "plugin"
          else lance_namespace.connect("rest", {"uri": url}))
    append = lambda rows: lance.write_dataset(rows, namespace_client=ns, table_id=tid, mode="append")
for k in range(n):
    append(pa.table({"w": pa.array([w], pa.int64()), "k": pa.array([k], pa.int64())}))
    print(json.dumps([w, k]), flush=True)  # acknowledged
"""


def test_pylance_tessera_and_spark_writers_race_on_one_table(spark, server, tmp_path):
    """2 pylance processes through the Python plugin, 2 through the REST server,
    4 Tessera Table processes and a Spark job append to one table at once:
    every acknowledged commit is there exactly once, the versions are
    contiguous, and pylance and Tessera read every version alike."""
    import json
    import subprocess
    import sys
    import threading

    import lance_namespace

    plugin = lance_namespace.connect("tessera", {"warehouse": server.warehouse, "commit_store": "native"})
    plugin.create_namespace(lance_namespace.CreateNamespaceRequest(id=["race"]))
    tid = ["race", "t"]
    start = pa.table({"w": pa.array([-1], pa.int64()), "k": pa.array([-1], pa.int64())})
    lance.write_dataset(start, namespace_client=plugin, table_id=tid)
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    n = 4
    kinds = ["plugin", "plugin", "rest", "rest", "tessera", "tessera", "tessera", "tessera"]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), kind, str(w), str(n), server.warehouse, server.uri],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w, kind in enumerate(kinds)
    ]
    spark_error: list[BaseException] = []

    def spark_job() -> None:
        try:
            df = spark.createDataFrame([(100, k) for k in range(10)], "w long, k long")
            df.write.format("tessera").mode("append").option("namespace", server.uri).save("race.t")
        except BaseException as exc:  # noqa: BLE001 - reported below
            spark_error.append(exc)

    job = threading.Thread(target=spark_job)
    job.start()
    acked: list[tuple[int, int]] = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        acked += [tuple(json.loads(line)) for line in out.splitlines() if line.strip()]
    job.join(300)
    assert not spark_error, spark_error
    acked += [(100, k) for k in range(10)]
    assert len(acked) == len(kinds) * n + 10
    cat = tessera.connect(warehouse=server.warehouse)
    t = cat.load_table("race.t")
    rows = t.to_arrow()
    got = sorted(zip(rows.column("w").to_pylist(), rows.column("k").to_pylist()))
    assert got == sorted(acked + [(-1, -1)])  # every acknowledged commit, exactly once, nothing else
    assert t.version == 1 + len(kinds) * n + 1
    assert [v["version"] for v in t.versions()] == list(range(1, t.version + 1))
    for v in range(1, t.version + 1):
        theirs = (
            lance.dataset(namespace_client=plugin, table_id=tid, version=v)
            .to_table()
            .sort_by([("w", "ascending"), ("k", "ascending")])
        )
        ours = cat.load_table("race.t", version=v).to_arrow().sort_by([("w", "ascending"), ("k", "ascending")])
        assert ours.equals(theirs), f"version {v} differs"


_STEADY_WRITER = """
import json, os, sys, time
import lance, lance_namespace
import pyarrow as pa
url, stop = sys.argv[1], sys.argv[2]
ns = lance_namespace.connect("rest", {"uri": url})
k = 0
while not os.path.exists(stop):
    lance.write_dataset(pa.table({"w": pa.array([1], pa.int64()), "k": pa.array([k], pa.int64())}),
                        namespace_client=ns, table_id=["steady", "t"], mode="append")
    print(json.dumps(k), flush=True)  # acknowledged
    k += 1
    time.sleep(0.2)  # about 5 commits a second
"""


def test_a_spark_job_commits_while_pylance_commits_five_times_a_second(spark, server, tmp_path):
    """Issue 28's starvation case for Spark: a pylance writer commits about
    five times a second through the server while a Spark job appends through
    it; the job's commit (sent to the server, rebased there) gets through,
    and every acknowledged commit is in the table exactly once."""
    import json
    import subprocess
    import sys
    import time

    import lance_namespace

    ns = server.client()
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["steady"]))
    start = pa.table({"w": pa.array([0], pa.int64()), "k": pa.array([-1], pa.int64())})
    lance.write_dataset(start, namespace_client=ns, table_id=["steady", "t"])
    stop = tmp_path / "stop"
    script = tmp_path / "steady.py"
    script.write_text(_STEADY_WRITER)
    writer = subprocess.Popen(
        [sys.executable, str(script), server.uri, str(stop)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        while tessera.Table.open("steady.t", namespace=server.uri).version < 4:  # the writer is going
            assert writer.poll() is None, writer.stderr.read() if writer.stderr else ""
            time.sleep(0.1)
        began = time.monotonic()
        df = spark.createDataFrame([(2, k) for k in range(200)], "w long, k long").repartition(2)
        df.write.format("tessera").mode("append").option("namespace", server.uri).save("steady.t")
        took = time.monotonic() - began
        before = tessera.Table.open("steady.t", namespace=server.uri).version
        while tessera.Table.open("steady.t", namespace=server.uri).version < before + 2:  # still committing after
            assert writer.poll() is None
            time.sleep(0.1)
    finally:
        stop.write_text("")
        out, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err[-3000:]
    acked = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert len(acked) >= 5 and acked == list(range(len(acked)))
    assert took < 60, took
    t = tessera.connect(warehouse=server.warehouse).load_table("steady.t")
    rows = sorted(zip(t.to_arrow().column("w").to_pylist(), t.to_arrow().column("k").to_pylist()))
    assert rows == sorted([(0, -1)] + [(1, k) for k in acked] + [(2, k) for k in range(200)])
    assert t.version == 1 + len(acked) + 1  # one version for the job, one per pylance commit
