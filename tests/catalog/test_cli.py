"""The ``tessera`` command line, through click's test runner, on SQLite,
PostgreSQL and MariaDB catalogs."""

from __future__ import annotations

import json
import os
import re
import uuid

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from tessera_test_services import fresh_database

from tessera.catalog.cli import main


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def env(request, tmp_path):
    wh = str(tmp_path / "wh")
    args = ["--warehouse", wh]
    if request.param != "sqlite":  # a database of its own: `table list` lists every namespace's tables
        url, drop = fresh_database(request.getfixturevalue(f"{request.param}_url"))
        request.addfinalizer(drop)
        args = ["--catalog", url] + args
    ns = f"cli_{uuid.uuid4().hex[:8]}"
    return args, ns, tmp_path


def run(args, *more, ok=True, env=None):
    res = CliRunner(env=env).invoke(main, [*args, *more], catch_exceptions=False)
    if ok:
        assert res.exit_code == 0, res.output
    return res


def fails(args, *more, env=None):
    """A command that must fail the CLI way: exit 2, one line, no traceback."""
    res = run(args, *more, ok=False, env=env)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    return res.output


@pytest.fixture
def sq(tmp_path):
    """A SQLite catalog under tmp_path (one database is enough for output checks)."""
    args = ["--warehouse", str(tmp_path / "wh")]
    ns = "cli"
    run(args, "namespace", "create", ns)
    return args, ns, tmp_path


def _files(tmp_path):
    t = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "city": ["SF", "NYC", "SF"], "amount": [5.0, 20.0, 30.0]})
    pq.write_table(t, tmp_path / "a.parquet")
    pcsv.write_csv(pa.table({"id": pa.array([4], pa.int64()), "city": ["LA"], "amount": [50.0]}), tmp_path / "b.csv")
    feather.write_feather(
        pa.table({"id": pa.array([5], pa.int64()), "city": ["SF"], "amount": [1.0]}), str(tmp_path / "c.arrow")
    )


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
    res = run(args, "namespace", "create", "bad name", ok=False)
    assert res.exit_code == 2 and "invalid namespace name" in res.output
    run(args, "namespace", "create", ns)
    res = run(args, "head", f"{ns}.missing", ok=False)
    assert res.exit_code == 2 and "does not exist" in res.output
    _files(tmp)
    run(args, "create", f"{ns}.t", str(tmp / "a.parquet"))
    res = run(args, "scan", f"{ns}.t", "-f", "nope = 1", ok=False)
    assert res.exit_code == 2 and "nope" in res.output
    res = run(args, "cleanup", f"{ns}.t", "--older-than", "soon", ok=False)
    assert res.exit_code != 0


def test_store_check(env, tmp_path, redis_url):
    args, _, _ = env
    import os

    from tessera.stores.registry import open_manifest_store

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


def test_table_commands(env):
    args, ns, tmp = env
    _files(tmp)
    run(args, "namespace", "create", ns)
    run(args, "create", f"{ns}.orders", str(tmp / "a.parquet"), "-p", "owner=ana")
    run(args, "create", f"{ns}.other", str(tmp / "b.csv"))
    run(args, "append", f"{ns}.orders", str(tmp / "c.arrow"))
    out = run(args, "table", "list", ns, env={"COLUMNS": "200"}).output
    assert f"{ns}.orders" in out and f"{ns}.other" in out
    listed = json.loads(run(args, "table", "list", ns, "-o", "json").stdout)
    assert [t["table"] for t in listed] == [f"{ns}.orders", f"{ns}.other"]
    assert all(t["commit_store"] and t["location"] for t in listed)
    everywhere = json.loads(run(args, "table", "list", "--output", "json").stdout)
    assert {f"{ns}.orders", f"{ns}.other"} <= {t["table"] for t in everywhere}

    out = run(args, "table", "describe", f"{ns}.orders", env={"COLUMNS": "200"}).output
    for word in ("schema", "amount", "double", "commit store", "native", "rows", "fragments", "size", "owner"):
        assert word in out, word
    d = json.loads(run(args, "table", "describe", f"{ns}.orders", "-o", "json").stdout)
    assert d["version"] == 2 and d["versions"] == 2 and d["rows"] == 4 and d["fragments"] == 2
    assert d["bytes"] > 0 and d["properties"] == {"owner": "ana"} and d["commit_store"] == "native"
    assert [c["name"] for c in d["schema"]] == ["id", "city", "amount"]
    assert json.loads(run(args, "describe", f"{ns}.orders", "--version", "1", "-o", "json").stdout)["rows"] == 3

    # a namespace that holds tables says how to drop them
    msg = fails(args, "namespace", "drop", ns)
    assert "tessera table drop" in msg and "--purge" in msg

    run(args, "table", "rename", f"{ns}.other", f"{ns}.renamed")
    assert "does not exist" in fails(args, "head", f"{ns}.other")
    assert "LA" in run(args, "head", f"{ns}.renamed").output
    assert "already exists" in fails(args, "table", "rename", f"{ns}.renamed", f"{ns}.orders")

    kept = d["location"]
    assert "kept" in run(args, "table", "drop", f"{ns}.renamed").output
    assert "does not exist" in fails(args, "table", "describe", f"{ns}.renamed")
    # --purge asks first: no answer (or "n") drops nothing
    assert "not confirmed" in fails(args, "table", "drop", f"{ns}.orders", "--purge")
    res = CliRunner().invoke(main, [*args, "table", "drop", f"{ns}.orders", "--purge"], input="n\n")
    assert res.exit_code == 2 and "not confirmed" in res.output
    assert json.loads(run(args, "table", "describe", f"{ns}.orders", "-o", "json").stdout)["rows"] == 4
    res = CliRunner().invoke(main, [*args, "table", "drop", f"{ns}.orders", "--purge"], input="y\n")
    assert res.exit_code == 0 and "deleted its data" in res.output
    assert not [f for _, _, fs in os.walk(kept) for f in fs]  # purged: no file left (empty folders may stay)
    assert json.loads(run(args, "table", "list", ns, "-o", "json").stdout) == []
    assert "no tables" in run(args, "table", "list", ns).output
    assert "does not exist" in fails(args, "table", "drop", f"{ns}.orders")
    run(args, "namespace", "drop", ns)  # empty now (and nothing left in a shared database)


def test_json_output_of_listing_commands(env):
    args, ns, tmp = env
    _files(tmp)
    run(args, "namespace", "create", ns, "-p", "owner=ana")
    name = f"{ns}.t"
    try:
        run(args, "create", name, str(tmp / "a.parquet"))
        run(args, "append", name, str(tmp / "b.csv"))
        nss = json.loads(run(args, "namespace", "list", "-o", "json").stdout)
        assert {"namespace": ns, "properties": {"owner": "ana"}} in nss
        hist = json.loads(run(args, "history", name, "-o", "json").stdout)
        assert [h["version"] for h in hist] == [1, 2] and hist[1]["operation"] == "append" and hist[1]["rows"] == 4
        run(args, "tag", "create", name, "v1", "1")
        assert json.loads(run(args, "tag", "list", name, "-o", "json").stdout) == [{"tag": "v1", "version": 1}]
        rows = json.loads(run(args, "head", name, "-n", "2", "-o", "json").stdout)
        assert rows == [{"id": 1, "city": "SF", "amount": 5.0}, {"id": 2, "city": "NYC", "amount": 20.0}]
        co = json.loads(run(args, "checkout", name, "v1", "-o", "json").stdout)
        assert co["version"] == 1 and co["rows"] == 3
        lines = run(args, "scan", name, "-o", "json").stdout.splitlines()
        assert [json.loads(x)["id"] for x in lines] == [1, 2, 3, 4]
        c = json.loads(run(args, "compact", name, "-o", "json").stdout)
        assert c["fragments_before"] == 2 and c["fragments_after"] == 1
        cl = json.loads(run(args, "cleanup", name, "--older-than", "0s", "--dry-run", "-o", "json").stdout)
        assert cl["dry_run"] is True and isinstance(cl["removed_versions"], list)
    finally:
        run(args, "table", "drop", name, "--purge", "--yes", ok=False)
        run(args, "namespace", "drop", ns, ok=False)
    db = tmp / "store.db"
    from tessera.stores.registry import open_manifest_store

    open_manifest_store(f"sqlite:///{db}").close()
    chk = json.loads(run(args, "store", "check", f"sqlite:///{db}", "-o", "json").stdout)
    assert chk["schema"] == "ok" and chk["store_id"]
    assert json.loads(run(args, "store", "check", str(tmp / "loc"), "-o", "json").stdout)["conditional_put"] == "ok"


def _wide(tmp, rows=5):
    cols = {}
    for i in range(30):
        if i % 3 == 1:
            cols[f"a_rather_long_column_name_{i}"] = [f"{'a very long string value ' * 4}{r}" for r in range(rows)]
        else:
            cols[f"a_rather_long_column_name_{i}"] = list(range(rows))
    cols["a_rather_long_column_name_0"] = [None, ""] + ["x"] * (rows - 2)
    pq.write_table(pa.table(cols), tmp / "wide.parquet")
    return tmp / "wide.parquet"


def _table_lines(out: str):
    """Body and header lines of the rich tables in ``out`` (bordered by │ or ┃)."""
    return [line for line in out.splitlines() if line[:1] in ("│", "┃")]


def _check_fits(out: str, width: int):
    from rich.cells import cell_len

    assert out.strip()
    for line in out.splitlines():
        assert cell_len(line) <= width, line
    lines = _table_lines(out)
    assert lines
    for line in lines:
        cells = line.strip()[1:-1].replace("┃", "│").split("│")
        assert all(c.strip() for c in cells), f"blank cell in {line!r}"


def test_narrow_terminal_and_wide_tables(sq):
    args, ns, tmp = sq
    run(args, "create", f"{ns}.wide", str(_wide(tmp)))
    narrow = {"COLUMNS": "40"}
    for cmd in (
        ["head", f"{ns}.wide"],
        ["scan", f"{ns}.wide"],
        ["describe", f"{ns}.wide"],
        ["table", "list"],
        ["namespace", "list"],
        ["history", f"{ns}.wide"],
    ):
        out = run(args, *cmd, env=narrow).output
        _check_fits(out, 40)
    out = run(args, "head", f"{ns}.wide", env=narrow).output
    assert "…" in out and "more columns not shown" in out and "--columns" in out
    assert "∅" in out and '""' in out  # a null and an empty string are not blank cells
    # a column chosen with --columns shows, cut with an ellipsis, never blank
    out = run(args, "head", f"{ns}.wide", "-c", "a_rather_long_column_name_1", env=narrow).output
    _check_fits(out, 40)
    assert "a very long" in out and "…" in out and "not shown" not in out
    # a wide terminal shows every column of the 30, cells still cut
    out = run(args, "head", f"{ns}.wide", env={"COLUMNS": "400"}).output
    _check_fits(out, 400)
    assert "not shown" not in out and "…" in out
    header = next(line for line in _table_lines(out) if line.startswith("┃"))
    assert header.count("┃") == 31
    # tiny terminals still print something, one column at least
    _check_fits(run(args, "head", f"{ns}.wide", env={"COLUMNS": "12"}).output, 12)
    # JSON is never truncated
    rows = json.loads(run(args, "head", f"{ns}.wide", "-o", "json", env=narrow).stdout)
    assert rows[2]["a_rather_long_column_name_1"].endswith("value 2") and len(rows[0]) == 30


def test_scan_limits_and_output_files(sq):
    args, ns, tmp = sq
    pq.write_table(
        pa.table({"id": pa.array(range(50), pa.int64()), "s": [f"r{i}" for i in range(50)]}), tmp / "fifty.parquet"
    )
    name = f"{ns}.fifty"
    run(args, "create", name, str(tmp / "fifty.parquet"))
    wide = {"COLUMNS": "100"}

    def shown(out):
        return [line for line in _table_lines(out) if line.startswith("│")]

    out = run(args, "scan", name, env=wide).output
    assert len(shown(out)) == 20 and "--all" in out
    out = run(args, "scan", name, "--limit", "5", env=wide).output
    assert len(shown(out)) == 5 and "--all" in out
    out = run(args, "scan", name, "--all", env=wide).output
    assert len(shown(out)) == 50 and "--all" not in out
    out = run(args, "scan", name, "-f", "id >= 45", env=wide).output
    assert len(shown(out)) == 5 and "--all" not in out  # exactly what there is: no "more" note
    assert "one or the other" in fails(args, "scan", name, "--limit", "3", "--all")

    run(args, "scan", name, "-o", str(tmp / "o.parquet"))
    assert pq.read_table(tmp / "o.parquet").num_rows == 50  # a file gets every row unless --limit
    run(args, "scan", name, "--out", str(tmp / "o.csv"), "--limit", "7")
    assert pcsv.read_csv(tmp / "o.csv").num_rows == 7
    run(args, "scan", name, "-o", str(tmp / "o.json"), "-c", "id", "-f", "id < 3")
    assert json.loads((tmp / "o.json").read_text()) == [{"id": 0}, {"id": 1}, {"id": 2}]
    run(args, "scan", name, "-o", str(tmp / "o.jsonl"), "-c", "s")
    assert [json.loads(x)["s"] for x in (tmp / "o.jsonl").read_text().splitlines()][:2] == ["r0", "r1"]
    run(args, "scan", name, "-o", str(tmp / "empty.json"), "-f", "id < 0")
    assert json.loads((tmp / "empty.json").read_text()) == []

    for bad in ("o.txt", "o.xlsx", "noext"):
        msg = fails(args, "scan", name, "-o", str(tmp / bad))
        assert "--out" in msg and ".parquet" in msg
        assert not os.path.exists(tmp / bad)
    assert "nope" in fails(args, "scan", name, "-f", "nope = 1", "-o", str(tmp / "partial.csv"))
    assert not os.path.exists(tmp / "partial.csv")
    assert not [p for p in os.listdir(tmp) if p.startswith(".tessera-scan-")]  # no temporary left


def test_read_only_commands_create_nothing(tmp_path):
    misspelt = tmp_path / "wherehouse"
    args = ["--warehouse", str(misspelt)]
    for cmd in (
        ["head", "ns.t"],
        ["scan", "ns.t"],
        ["describe", "ns.t"],
        ["table", "describe", "ns.t"],
        ["table", "list"],
        ["namespace", "list"],
        ["history", "ns.t"],
        ["tag", "list", "ns.t"],
        ["checkout", "ns.t", "1"],
    ):
        msg = fails(args, *cmd)
        assert "nothing is there" in msg and "tessera init" in msg, cmd
        assert not misspelt.exists(), cmd
    db = tmp_path / "cat.db"
    msg = fails(["--catalog", f"sqlite:///{db}", "--warehouse", str(tmp_path / "wh2")], "table", "list")
    assert "nothing is there" in msg and not db.exists() and not (tmp_path / "wh2").exists()
    # an existing database that is not a catalog is not turned into one
    import sqlite3

    sqlite3.connect(db).close()
    assert "nothing is there" in fails(["--catalog", f"sqlite:///{db}", "--warehouse", str(tmp_path)], "scan", "a.b")
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
    # writing commands still create the catalog
    run(args, "init")
    assert (misspelt / "catalog.db").exists()
    assert "no namespaces" in run(args, "namespace", "list").output
    assert json.loads(run(args, "table", "list", "-o", "json").stdout) == []


def test_bad_input_is_one_line_errors(sq):
    args, ns, tmp = sq
    _files(tmp)
    assert "--property" in fails(args, "namespace", "create", "x", "-p", "novalue")
    assert "--property" in fails(args, "create", f"{ns}.t", str(tmp / "a.parquet"), "-p", "=v")
    (tmp / "fake.parquet").write_text("not parquet at all")
    assert "not a readable Parquet file" in fails(args, "create", f"{ns}.t", str(tmp / "fake.parquet"))
    (tmp / "fake.arrow").write_bytes(b"\x00\x01garbage")
    assert "not a readable Arrow file" in fails(args, "create", f"{ns}.t", str(tmp / "fake.arrow"))
    (tmp / "data.xlsx").write_text("x")
    assert ".parquet, .csv" in fails(args, "create", f"{ns}.t", str(tmp / "data.xlsx"))
    assert (
        "table(s)" not in run(args, "table", "list", ns).output and "no tables" in run(args, "table", "list", ns).output
    )
    run(args, "create", f"{ns}.t", str(tmp / "a.parquet"))
    assert "not a readable Parquet file" in fails(
        args, "append", f"{ns}.t", str(tmp / "a.parquet"), str(tmp / "fake.parquet")
    )
    assert json.loads(run(args, "describe", f"{ns}.t", "-o", "json").stdout)["version"] == 1  # nothing appended
    assert "--set" in fails(args, "update", f"{ns}.t", "--set", "amount")
    assert "--older-than" in fails(args, "cleanup", f"{ns}.t", "--older-than", "soon")
    assert "--older-than" in fails(args, "cleanup", f"{ns}.t", "--older-than", "-1d")
    assert "--storage-option" in fails([], "store", "check", str(tmp / "loc"), "-s", "novalue")
    (tmp / "bad.toml").write_text("[catalog.default\nuri = 1\n")
    msg = fails(
        [],
        "table",
        "list",
        env={"TESSERA_CONFIG": str(tmp / "bad.toml"), "TESSERA_WAREHOUSE": None, "TESSERA_CATALOG_URI": None},
    )
    assert "bad.toml" in msg
    msg = fails([], "--config-name", "nope", "table", "list", env={"TESSERA_CONFIG": str(tmp / "none.toml")})
    assert "none.toml" in msg
    (tmp / "ok.toml").write_text("[catalog.default]\n")
    msg = fails(
        [],
        "table",
        "list",
        env={"TESSERA_CONFIG": str(tmp / "ok.toml"), "TESSERA_WAREHOUSE": None, "TESSERA_CATALOG_URI": None},
    )
    assert "--warehouse" in msg and "connect()" not in msg
    msg = fails(args, "create", "nons.t", str(tmp / "a.parquet"))
    assert "tessera namespace create" in msg and "create_namespace" not in msg


def test_compact_and_cleanup_summaries(sq):
    args, ns, tmp = sq
    _files(tmp)
    name = f"{ns}.t"
    run(args, "create", name, str(tmp / "a.parquet"))
    run(args, "append", name, str(tmp / "b.csv"))
    run(args, "append", name, str(tmp / "c.arrow"))
    out = " ".join(run(args, "compact", name).output.split())
    latest = json.loads(run(args, "history", name, "-o", "json").stdout)[-1]["version"]
    assert latest > 3
    assert "compacted 3 fragment(s) into 1" in out and "3 → 1 fragments" in out and f"new version {latest}" in out
    assert "nothing to compact" in run(args, "compact", name).output
    out = " ".join(run(args, "cleanup", name, "--older-than", "0s", "--dry-run").output.split())
    assert f"would remove {latest - 1} version(s) (1–{latest - 1})" in out and "kept 1 version(s)" in out
    assert len(json.loads(run(args, "history", name, "-o", "json").stdout)) == latest  # a dry run removes nothing
    out = " ".join(run(args, "cleanup", name, "--older-than", "0s").output.split())
    assert f"removed {latest - 1} version(s) (1–{latest - 1})" in out
    assert len(json.loads(run(args, "history", name, "-o", "json").stdout)) == 1
    assert "removed no versions" in " ".join(run(args, "cleanup", name, "--older-than", "0s").output.split())


def test_cli_zone_map_indices(sq):
    args, ns, tmp = sq
    _files(tmp)
    name = f"{ns}.orders"
    run(args, "create", name, str(tmp / "a.parquet"))
    assert "has no indices" in run(args, "index", "list", name).output
    assert "zone map on id" in run(args, "index", "create", name, "id", "--rows-per-zone", "2").output
    run(args, "append", name, str(tmp / "b.csv"))  # the write extends the index
    got = json.loads(run(args, "index", "list", name, "-o", "json").stdout)
    assert [(r["name"], r["type"], r["columns"], r["covered_fragments"], r["fragments"]) for r in got] == [
        ("id_idx", "ZONEMAP", ["id"], 2, 2)
    ]
    assert "already cover" in run(args, "index", "optimize", name).output
    assert "no top-level column 'nope'" in fails(args, "index", "create", name, "nope")
    assert "rows_per_zone must be a positive integer" in fails(
        args, "index", "create", name, "id", "--rows-per-zone", "0"
    )


def test_text_in_square_brackets_is_printed_as_it_is(sq):
    """rich's markup is off: a message, a name or a path holding '[...]' keeps
    its text ("pip install 'tessera[postgres]'" lost its extra before)."""
    args, ns, tmp = sq
    _files(tmp)
    weird = tmp / "data[v2]"
    weird.mkdir()
    (weird / "a.parquet").write_bytes((tmp / "a.parquet").read_bytes())
    run(args, "create", f"{ns}.t", str(weird / "a.parquet"))
    msg = fails(args, "head", f"{ns}.missing[x]")
    assert "missing[x]" in msg, msg
    bad = tmp / "bad[red]x.parquet"
    bad.write_text("not parquet")
    msg = fails(args, "append", f"{ns}.t", str(bad))
    assert "bad[red]x.parquet" in msg, msg
    out = run(args, "scan", f"{ns}.t", "--columns", "city").output
    assert "SF" in out


def test_error_messages_keep_bracketed_install_hints():
    from tessera.catalog.cli import render

    render.fresh_consoles()
    with render.err_console.capture() as cap:
        render.err_console.print("install tessera[postgres] or tessera[mysql]")
    with render.console.capture() as out:
        render.console.print("pip install 'tessera[server]'")
    assert "install tessera[postgres] or tessera[mysql]" in cap.get()
    assert "'tessera[server]'" in out.get()


def test_version_and_predicates_as_arguments(sq):
    args, ns, tmp = sq
    import importlib.metadata

    out = run([], "--version").output
    assert out.strip() == f"tessera, version {importlib.metadata.version('tessera')}"
    _files(tmp)
    name = f"{ns}.t"
    run(args, "create", name, str(tmp / "a.parquet"))  # ids 1, 2, 3: SF, NYC, SF
    assert "deleted 1 rows" in run(args, "delete", name, "id = 2").output
    assert "updated 2 rows" in run(args, "update", name, "city = 'SF'", "--set", "amount=amount + 1").output
    assert "updated 2 rows" in run(args, "update", name, "--set", "city='LA'").output  # every row
    both = run(args, "delete", name, "id = 1", "--where", "id = 3", ok=False)
    assert both.exit_code == 2 and "not both" in both.output
    none = run(args, "delete", name, ok=False)
    assert none.exit_code == 2 and "give a predicate" in none.output
    data = [json.loads(line) for line in run(args, "scan", name, "-o", "json").stdout.splitlines() if line.strip()]
    assert sorted((r["id"], r["city"], r["amount"]) for r in data) == [(1, "LA", 6.0), (3, "LA", 31.0)]


def test_cleanup_says_which_orphans_it_kept_and_takes_orphan_age(sq):
    """A failed commit's file younger than --orphan-age (1 day by default: a
    running writer may still be using it) is kept, and the summary says so;
    --orphan-age 0 removes it."""
    args, ns, tmp = sq
    _files(tmp)
    name = f"{ns}.t"
    run(args, "create", name, str(tmp / "a.parquet"))
    t_uri = json.loads(run(args, "describe", name, "-o", "json").stdout)["location"]
    orphan = os.path.join(t_uri, "data", "0123456789abcdef0123456789abcdef.lance")
    with open(orphan, "wb") as f:
        f.write(b"x" * 100)  # a data file no version names: a failed commit's
    out = " ".join(run(args, "cleanup", name).output.split())
    assert "removed 0 orphaned file(s)" in out and "kept 1 younger than 1d" in out and "--orphan-age" in out
    assert os.path.exists(orphan)
    summary = json.loads(run(args, "cleanup", name, "-o", "json").stdout)
    assert summary["orphans_kept_young"] == 1 and summary["orphans_removed"] == 0
    out = " ".join(run(args, "cleanup", name, "--orphan-age", "0").output.split())
    assert "removed 1 orphaned file(s)" in out and "kept" not in out.split("orphaned")[1]
    assert not os.path.exists(orphan)
    assert "--orphan-age" in fails(args, "cleanup", name, "--orphan-age", "soon")


def test_history_keeps_its_timestamps_whole_at_80_columns(sq):
    args, ns, tmp = sq
    name = f"{ns}.h"
    path = tmp / "big.parquet"
    pq.write_table(pa.table({"a": pa.array(range(1_234_567), pa.int64())}), path)
    run(args, "create", name, str(path))
    run(args, "delete", name, "a < 100000")
    run(args, "index", "create", name, "a")  # "create_index": the operation column's widest name
    out = run(args, "history", name, env={"COLUMNS": "80"}).output
    stamps = re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", out)
    assert len(stamps) == len(json.loads(run(args, "history", name, "-o", "json").stdout)), out
    assert "1,234,567" in out


def _bar_steps(monkeypatch) -> list[int]:
    """What the CLI's progress bars show as done, in order (every bar of the command)."""
    from tessera.catalog.cli import render

    steps: list[int] = []
    real = render.progress

    def spy(label, total):
        prog = real(label, total)

        def recorded(method):
            def call(task, *a, **kw):
                method(task, *a, **kw)
                steps.append(int({t.id: t for t in prog.tasks}[task].completed))

            return call

        prog.update, prog.advance = recorded(prog.update), recorded(prog.advance)
        return prog

    monkeypatch.setattr(render, "progress", spy)
    return steps


def _big_parquet(tmp, n):
    big = tmp / "big.parquet"
    pq.write_table(pa.table({"id": pa.array(range(n), pa.int64()), "city": ["x"] * n, "amount": [1.0] * n}), big)
    return big


def test_append_progress_moves_with_rows(sq, monkeypatch):
    """The append bar counts rows as the write takes them (several steps for
    one large file), and every row arrives once."""
    args, ns, tmp = sq
    _files(tmp)
    name = f"{ns}.p"
    run(args, "create", name, str(tmp / "a.parquet"))
    n = 150_000
    big = _big_parquet(tmp, n)
    steps = _bar_steps(monkeypatch)
    run(args, "append", name, str(big), str(tmp / "b.csv"))
    moved = [s for s in steps if s]
    assert moved == sorted(moved) and moved[-1] == n + 1 and len(set(moved)) >= 4, steps  # 65,536-row steps
    described = json.loads(run(args, "describe", name, "-o", "json").stdout)
    assert described["rows"] == 3 + n + 1


def test_create_progress_moves_with_rows(sq, monkeypatch):
    """``tessera create`` shows the rows written as append does, for a
    catalog table and for a table created by path."""
    args, ns, tmp = sq
    n = 150_000
    big = _big_parquet(tmp, n)
    steps = _bar_steps(monkeypatch)
    for name in (f"{ns}.big", str(tmp / "by_path")):
        steps.clear()
        assert f"{n:,} rows" in run(args, "create", name, str(big)).output
        moved = [s for s in steps if s]
        assert moved == sorted(moved) and moved[-1] == n and len(set(moved)) >= 3, steps  # 65,536-row steps
