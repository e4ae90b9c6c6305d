"""What ``import tessera`` costs a process: a script that opens a table by URI
and appends on local disk imports none of the heavy clients (SQLAlchemy's ORM
for the catalog, Acero for filters, botocore for S3, redis-py); they come when
first used, and ``tessera.connect`` still works."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

HEAVY = (
    "sqlalchemy",
    "botocore",
    "boto3",
    "redis",
    "pyarrow.dataset",
    "sqlglot",
    "lance_namespace",
    "click",
    "urllib.request",  # served commits send with it: imported on the first request
)


def _modules_after(code: str) -> list[str]:
    script = textwrap.dedent(code) + textwrap.dedent(
        f"""
        import json, sys
        print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_open_and_append_by_path_imports_no_heavy_client(tmp_path):
    uri = str(tmp_path / "t")
    assert [] == _modules_after(
        f"""
        import pyarrow as pa
        import tessera
        from tessera.catalog import Table
        t = Table.create({uri!r}, pa.table({{"a": pa.array([1, 2], pa.int64())}}))
        Table.open({uri!r}).append(pa.table({{"a": pa.array([3], pa.int64())}}))
        assert Table.open({uri!r}).to_arrow().column("a").to_pylist() == [1, 2, 3]
        """
    )


def test_the_catalog_and_filters_import_on_first_use(tmp_path):
    uri = str(tmp_path / "t")
    used = _modules_after(
        f"""
        import pyarrow as pa
        import tessera
        t = tessera.Table.create({uri!r}, pa.table({{"a": pa.array([1, 2, 3], pa.int64())}}))
        assert t.to_arrow(filter="a >= 2").num_rows == 2
        cat = tessera.connect(warehouse={str(tmp_path / "wh")!r})
        assert isinstance(cat, tessera.Catalog)
        cat.close()
        """
    )
    assert {"sqlalchemy", "pyarrow.dataset", "sqlglot"} <= set(used)


def test_a_first_filtered_count_imports_only_what_filters_need(tmp_path):
    """Pinned: a new process's open + filtered count imports sqlglot (the SQL
    text) and Arrow's expression engine (``pyarrow.dataset``, through Acero),
    and none of the other heavy clients."""
    uri = str(tmp_path / "t")
    import pyarrow as pa

    from tessera.catalog import Table

    Table.create(uri, pa.table({"a": pa.array([1, 2, 3], pa.int64())}))
    used = _modules_after(
        f"""
        from tessera.catalog import Table
        assert Table.open({uri!r}).count_rows("a >= 2") == 2
        """
    )
    assert used == ["pyarrow.dataset", "sqlglot"]
