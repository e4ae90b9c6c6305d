"""The example Spark jobs in deploy/: a table on S3 (moto) coordinated through
Redis.  The jobs run in-process with the shared session (their ``main(argv,
spark)``), and the append job once more through a real ``spark-submit``."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

from tessera.catalog import Table

pytestmark = pytest.mark.spark

DEPLOY = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "deploy")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"tessera_deploy_{name}", os.path.join(DEPLOY, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _table_args(uri: str, redis_url: str, moto_server) -> list[str]:
    args = ["--table", uri, "--commit-store", redis_url]
    for k, v in moto_server.storage_options().items():
        args += ["--storage-option", f"{k}={v}"]
    return args


def test_append_events_and_overwrite_jobs_in_process(spark, moto_server, redis_url):
    uri = f"s3://{moto_server.new_bucket()}/events"
    common = _table_args(uri, redis_url, moto_server)
    append = _load("spark_append_events").main
    first = append(common + ["--date", "2024-05-01", "--events", "3000", "--partitions", "3"], spark=spark)
    assert (first["version"], first["rows"]) == (1, 3000)
    second = append(common + ["--date", "2024-05-02", "--events", "2000", "--partitions", "2"], spark=spark)
    assert (second["version"], second["rows"]) == (2, 5000)

    opts = moto_server.storage_options()
    t = Table.open(uri, commit_store=redis_url, storage_options=opts)
    assert t.manifest.config["tessera.commit.coordinator"] == "redis"
    assert t.schema.names == ["event_id", "event_time", "day", "user_id", "event_type", "amount"]
    data = t.to_arrow()
    assert len(set(data.column("event_id").to_pylist())) == 5000
    assert {d.isoformat() for d in data.column("day").to_pylist()} == {"2024-05-01", "2024-05-02"}

    overwrite = _load("spark_overwrite_table").main
    kept = overwrite(common + ["--where", "day = DATE'2024-05-02'", "--partitions", "1"], spark=spark)
    assert (kept["version"], kept["rows"]) == (3, 2000)
    t = Table.open(uri, commit_store=redis_url, storage_options=opts)
    assert len(t.fragments) == 1
    assert Table.open(uri, 2, commit_store=redis_url, storage_options=opts).count_rows() == 5000
    read = (
        spark.read.format("tessera")
        .option("commit_store", redis_url)
        .options(**{f"storage.{k}": v for k, v in opts.items()})
        .load(uri)
    )
    assert read.filter("event_type = 'purchase'").count() == t.count_rows("event_type = 'purchase'")


def test_append_events_through_spark_submit(moto_server, redis_url, tmp_path, spark_job_env):
    submit = shutil.which("spark-submit", path=os.path.dirname(sys.executable)) or shutil.which("spark-submit")
    if submit is None:
        pytest.fail("spark-submit is not installed next to the test interpreter (pip install pyspark)")
    uri = f"s3://{moto_server.new_bucket()}/events"
    env = {**os.environ, **spark_job_env, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    cmd = [
        submit,
        "--master",
        "local[2]",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.ui.showConsoleProgress=false",
        "--conf",
        f"spark.sql.warehouse.dir={tmp_path / 'warehouse'}",
        "--driver-java-options",
        "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
        os.path.join(DEPLOY, "spark_append_events.py"),
        *_table_args(uri, redis_url, moto_server),
        "--date",
        "2024-05-03",
        "--events",
        "1000",
        "--partitions",
        "2",
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-5000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (summary["version"], summary["rows"]) == (1, 1000)
    t = Table.open(uri, commit_store=redis_url, storage_options=moto_server.storage_options())
    assert t.count_rows() == 1000 and len(t.fragments) == 2
