"""A bare name (``ns.t2``, ``t2``) is a table name, never a folder of the
working directory: ``Table.create``/``Table.open`` refuse it without a catalog
(TableNameError, saying how to name the folder or the catalog), and the CLI
looks it up in its catalog or refuses it the same way, while paths (absolute,
URIs, relative with a separator) open tables by location everywhere."""

from __future__ import annotations

import json
import os
import pathlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import tessera
from tessera.catalog import errors as E


def _data() -> pa.Table:
    return pa.table({"id": pa.array([1, 2], pa.int64())})


@pytest.mark.parametrize("name", ["ns.t2", "t2"])
def test_table_create_and_open_refuse_a_bare_name(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(E.TableNameError) as exc:
        tessera.Table.create(name, _data())
    msg = str(exc.value)
    assert f"'./{name}'" in msg and "create_table" in msg and "tessera.connect" in msg
    assert os.listdir(tmp_path) == []  # nothing written, no folder
    with pytest.raises(E.TableNameError) as opened:
        tessera.Table.open(name)
    assert f"'./{name}'" in str(opened.value) and "load_table" in str(opened.value)
    assert isinstance(exc.value, E.InvalidArgumentError) and isinstance(exc.value, tessera.TesseraError)
    # the folder written as a path, a relative path with a separator, or a PathLike are paths
    t = tessera.Table.create(f"./{name}", _data())
    assert t.uri == str(tmp_path / name)
    assert tessera.Table.open(f"./{name}").count_rows() == 2
    tessera.Table.create(f"sub/{name}", _data())
    assert tessera.Table.open(str(tmp_path / "sub" / name)).count_rows() == 2
    tessera.Table.create(pathlib.Path(name + "_p"), _data())
    assert sorted(os.listdir(tmp_path)) == sorted([name, "sub", name + "_p"])


def test_names_and_paths_rule():
    from tessera.catalog.names import is_table_name

    for name in ["ns.t2", "t2", "a.b.c", "~", "ns.t2.lance"]:
        assert is_table_name(name), name
    for path in [".", "..", "./t2", "../t2", "a/b", "/abs/t", "s3://bucket/t", "file:///x/t", "file:/x/t"]:
        assert not is_table_name(path), path
    assert not is_table_name(pathlib.Path("t2"))


def test_open_through_a_namespace_takes_an_id_not_a_path(tmp_path):
    import lance_namespace

    ns = lance_namespace.connect("tessera", {"warehouse": str(tmp_path / "wh")})
    with pytest.raises(E.InvalidArgumentError, match="is a path or URI.*'namespace.table'"):
        tessera.Table.open(str(tmp_path / "t"), namespace=ns)


@pytest.fixture
def bare_env(tmp_path, monkeypatch):
    """An environment with no catalog configured (no variables, no config file)."""
    for key in list(os.environ):
        if key.startswith("TESSERA_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    pq.write_table(_data(), tmp_path / "f.parquet")
    return tmp_path


def _cli(*args):
    from tessera.catalog.cli import main

    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_cli_refuses_a_bare_name_without_a_catalog(bare_env):
    res = _cli("create", "ns.t2", "f.parquet")
    assert res.exit_code == 2, res.output
    assert "'./ns.t2'" in res.output and "--warehouse" in res.output and "Traceback" not in res.output
    assert os.listdir(bare_env) == ["f.parquet"]  # no folder, no catalog
    res = _cli("head", "t2")
    assert res.exit_code == 2 and "'./t2'" in res.output, res.output


def test_cli_opens_tables_by_path(bare_env):
    res = _cli("create", "./t2", "f.parquet")
    assert res.exit_code == 0, res.output
    assert tessera.Table.open(str(bare_env / "t2")).count_rows() == 2
    res = _cli("append", "./t2", "f.parquet")
    assert res.exit_code == 0, res.output
    res = _cli("head", str(bare_env / "t2"), "--output", "json")
    assert res.exit_code == 0, res.output
    assert [r["id"] for r in json.loads(res.output)] == [1, 2, 1, 2]
    res = _cli("describe", "./t2", "--output", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["location"] == str(bare_env / "t2")
    # with a catalog, a bare name is the catalog's table
    wh = str(bare_env / "wh")
    assert _cli("--warehouse", wh, "namespace", "create", "ns").exit_code == 0
    assert _cli("--warehouse", wh, "create", "ns.t2", "f.parquet").exit_code == 0
    res = _cli("--warehouse", wh, "head", "ns.t2", "--output", "json")
    assert res.exit_code == 0 and len(json.loads(res.output)) == 2, res.output
    assert tessera.connect(warehouse=wh).table_info("ns.t2")["uri"].startswith(wh)
    assert not os.path.exists(bare_env / "ns.t2")
