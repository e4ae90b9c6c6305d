"""Partial reads through the DuckDB / Polars / pyarrow views end cleanly.

A user script reads the first rows of a Tessera table through DuckDB
(``LIMIT 5``), Polars (``head(5)``) or a pyarrow scanner (the first batch),
never closes anything, and exits.  The process must exit with status 0 and
promptly: the old generator-backed scanner left a Python generator being
pulled by an Arrow thread at interpreter exit, which aborted the process
(``terminate called without an active exception``, status 134) or hung it.

Each scenario runs in its own interpreter (``sys.executable -c``), five times
in a loop, exactly as a script would, with no ``del`` or ``close``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pytest

from tessera.catalog import Table

pytest.importorskip("duckdb")
pytest.importorskip("polars")

TIMEOUT = 60  # seconds; a clean run takes a second or two

PRELUDE = """
import sys
import duckdb
import polars as pl
import pyarrow.dataset as pads
from tessera.catalog import Table
t = Table.open(sys.argv[1])
"""

SCENARIOS = {
    "duckdb_limit": """
        for _ in range(5):
            ds = t.to_dataset()
            rows = duckdb.sql("select * from ds limit 5").fetchall()
            assert len(rows) == 5, rows
    """,
    "duckdb_register_limit": """
        con = duckdb.connect()
        for i in range(5):
            con.register(f"v{i}", t.to_dataset())
            assert len(con.execute(f"select id, payload from v{i} where id >= 1000 limit 5").fetchall()) == 5
    """,
    "duckdb_relation_kept": """
        rels = []
        for _ in range(5):
            ds = t.to_dataset()
            rel = duckdb.sql("select * from ds limit 5")
            rel.fetchall()
            rels.append(rel)  # still alive at exit
    """,
    "duckdb_table_variable": """
        for _ in range(5):
            assert duckdb.sql("select count(*) from t").fetchall() == [(t.count_rows(),)]
            assert len(duckdb.sql("select * from t limit 5").fetchall()) == 5
    """,
    "to_duckdb_limit": """
        for i in range(5):
            assert len(t.to_duckdb().limit(5).fetchall()) == 5
            assert len(t.to_duckdb(name=f"tv{i}").filter("id < 100").limit(3).fetchall()) == 3
    """,
    "polars_head": """
        for _ in range(5):
            df = pl.scan_pyarrow_dataset(t.to_dataset()).head(5).collect()
            assert df.height == 5, df
        for _ in range(5):
            df = pl.scan_pyarrow_dataset(t.to_dataset()).filter(pl.col("id") > 10).select("id").head(5).collect()
            assert df["id"].to_list() == [11, 12, 13, 14, 15]
    """,
    "pyarrow_first_batch": """
        keep = []
        for _ in range(5):
            it = t.to_dataset().scanner(batch_size=1000).to_batches()
            assert next(it).num_rows == 1000
            keep.append(it)  # abandoned half way, still referenced at exit
            r = t.to_dataset().scanner(columns=["id"]).to_reader()
            assert r.read_next_batch().num_rows > 0
            keep.append(r)
            scanner_iter = iter(t.to_dataset().to_batches(batch_size=500))
            next(scanner_iter)
    """,
    "arrow_scanner_over_tessera_readers": """
        # the old view's pattern, built by the user: Arrow's scanner reads
        # ahead from a Tessera reader on its own I/O thread
        for _ in range(5):
            it = pads.Scanner.from_batches(t.to_batches(batch_size=1000)).to_batches()
            assert next(it).num_rows == 1000
            it = pads.Scanner.from_batches(t.to_dataset().scanner(batch_size=1000).to_reader()).to_batches()
            assert next(it).num_rows == 1000
    """,
    "full_reads": """
        n = t.count_rows()
        for _ in range(5):
            ds = t.to_dataset()
            assert duckdb.sql("select count(*), sum(id) from ds").fetchall() == [(n, n * (n - 1) // 2)]
            assert pl.scan_pyarrow_dataset(t.to_dataset()).select(pl.len()).collect().item() == n
            assert t.to_dataset().to_table().num_rows == n
            assert pads.Scanner is not None
    """,
}


@pytest.fixture(scope="module")
def table_uri(tmp_path_factory):
    # enough fragments and rows that a background reader is still busy at exit
    n = 200_000
    data = pa.table(
        {
            "id": np.arange(n, dtype=np.int64),
            "amount": np.random.default_rng(1).random(n),
            "payload": pa.array([f"row-{i:08d}" for i in range(n)]),
        }
    )
    uri = str(tmp_path_factory.mktemp("exit") / "t")
    Table.create(uri, data, max_rows_per_file=10_000)
    return uri


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_partial_read_then_exit_is_clean(table_uri, name):
    script = PRELUDE + textwrap.dedent(SCENARIOS[name]) + "print('done')\n"
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    try:
        proc = subprocess.run(
            [sys.executable, "-c", script, table_uri],
            capture_output=True,
            text=True,
            check=False,
            timeout=TIMEOUT,
            env=env,
        )
    except subprocess.TimeoutExpired as e:  # subprocess.run has killed it
        pytest.fail(f"{name}: the script did not exit within {TIMEOUT}s\nstderr:\n{e.stderr}")
    assert "done" in proc.stdout, f"{name}: the script failed\nstderr:\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, f"{name}: exit status {proc.returncode}\nstderr:\n{proc.stderr[-4000:]}"
    assert "Fatal Python error" not in proc.stderr and "terminate called" not in proc.stderr, proc.stderr[-4000:]
