"""The ``tessera`` command line, through click's test runner, on SQLite,
PostgreSQL and MariaDB catalogs."""

from __future__ import annotations

import os
import uuid

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from tessera.catalog.cli import main


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def env(request, tmp_path):
    wh = str(tmp_path / "wh")
    args = ["--warehouse", wh]
    if request.param != "sqlite":
        args = ["--catalog", request.getfixturevalue(f"{request.param}_url")] + args
    ns = f"cli_{uuid.uuid4().hex[:8]}"
    return args, ns, tmp_path


def run(args, *more, ok=True):
    res = CliRunner().invoke(main, [*args, *more], catch_exceptions=False)
    if ok:
        assert res.exit_code == 0, res.output
    return res


def _files(tmp_path):
    t = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "city": ["SF", "NYC", "SF"], "amount": [5.0, 20.0, 30.0]})
    pq.write_table(t, tmp_path / "a.parquet")
    pcsv.write_csv(pa.table({"id": pa.array([4], pa.int64()), "city": ["LA"], "amount": [50.0]}), tmp_path / "b.csv")
    feather.write_feather(pa.table({"id": pa.array([5], pa.int64()), "city": ["SF"], "amount": [1.0]}), str(tmp_path / "c.arrow"))


def test_cli_end_to_end(env):
    args, ns, tmp = env
    _files(tmp)
    name = f"{ns}.orders"
    assert "catalog ready" in run(args, "init").output
    run(args, "namespace", "create", ns, "-p", "owner=ana")
    assert ns in run(args, "namespace", "list").output
    assert "created" in run(args, "create", name, str(tmp / "a.parquet")).output
    out = run(args, "append", name, str(tmp / "b.csv"), str(tmp / "c.arrow")).output
    assert "5 rows" in out
    out = run(args, "head", name, "-n", "2", "-c", "id,city").output
    assert "id" in out and "city" in out and "amount" not in out
    out = run(args, "scan", name, "-f", "amount > 10 AND city = 'SF'").output
    assert "30.0" in out and "20.0" not in out
    run(args, "scan", name, "-o", str(tmp / "out.parquet"))
    assert pq.read_table(tmp / "out.parquet").num_rows == 5
    out = run(args, "delete", name, "--where", "id = 1").output
    assert "deleted 1 rows" in out
    run(args, "update", name, "--set", "amount=amount * 2", "--where", "city = 'LA'")
    out = run(args, "history", name).output
    for op in ("overwrite", "append", "delete", "update"):
        assert op in out
    run(args, "tag", "create", name, "first", "1")
    assert "first" in run(args, "tag", "list", name).output
    out = run(args, "checkout", name, "first").output
    assert "3 rows" in out
    assert "as version 6" in run(args, "restore", name, "1").output
    out = run(args, "head", name).output
    assert "v6" in out and "NYC" in out and "LA" not in out  # back to the first version's rows
    run(args, "tag", "delete", name, "first")
    run(args, "compact", name)
    run(args, "cleanup", name, "--older-than", "0s")
    assert "no half-done" in run(args, "repair", name).output


def test_cli_errors_are_clear(env):
    args, ns, tmp = env
    res = run(args, "head", f"{ns}.missing", ok=False)
    assert res.exit_code == 2 and "does not exist" in res.output
    res = run(args, "namespace", "create", "bad name", ok=False)
    assert res.exit_code == 2 and "invalid namespace name" in res.output
    run(args, "namespace", "create", ns)
    _files(tmp)
    run(args, "create", f"{ns}.t", str(tmp / "a.parquet"))
    res = run(args, "scan", f"{ns}.t", "-f", "nope = 1", ok=False)
    assert res.exit_code == 2 and "nope" in res.output
    res = run(args, "cleanup", f"{ns}.t", "--older-than", "soon", ok=False)
    assert res.exit_code != 0


def test_store_check(env, tmp_path, redis_url):
    args, _, _ = env
    import os

    from tessera.stores.manifest_store import open_manifest_store

    missing = run(args, "store", "check", f"sqlite:///{tmp_path}/s.db", ok=False)
    assert missing.exit_code == 2 and "nothing is there" in missing.output
    assert not os.path.exists(tmp_path / "s.db")  # a read-only command creates nothing
    open_manifest_store(f"sqlite:///{tmp_path}/s.db").close()  # provisioned
    out = run(args, "store", "check", f"sqlite:///{tmp_path}/s.db").output
    assert "schema: ok" in out and "store id:" in out
    assert "ok" in run(args, "store", "check", redis_url).output
    assert "second conditional write" in " ".join(run(args, "store", "check", str(tmp_path / "loc")).output.split())
    res = run(args, "store", "check", "redis://127.0.0.1:1/0", ok=False)
    assert res.exit_code == 2
