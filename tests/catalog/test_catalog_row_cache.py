"""A catalog keeps the table rows it read while its SQLite database is
unchanged (``PRAGMA data_version``), so the several lookups of every managed-
versioning commit cost no query; any change committed elsewhere - another
catalog object, another process - is seen by the next lookup."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
import sqlalchemy as sa

import tessera
from tessera.catalog.errors import NoSuchTableError


def _data(n: int = 3) -> pa.Table:
    return pa.table({"i": np.arange(n, dtype=np.int64)})


class _Statements:
    """Counts the statements a catalog's engine runs."""

    def __init__(self, engine: sa.engine.Engine) -> None:
        self.n = 0
        sa.event.listen(engine, "before_cursor_execute", self._count)

    def _count(self, *args: object) -> None:
        self.n += 1


def test_lookups_of_an_unchanged_catalog_run_no_query(tmp_path):
    cat = tessera.connect(warehouse=str(tmp_path / "wh"))
    cat.create_namespace("s")
    cat.create_table("s.t", _data())
    seen = _Statements(cat.engine)
    first = cat.table_info("s.t")
    n = seen.n
    for _ in range(5):
        assert cat.table_info("s.t") == first
        assert cat.table_exists("s.t")
        assert cat.table_properties("s.t") == first["properties"]
    assert seen.n == n  # served from the cache: no statement
    cat.close()


def test_a_change_by_another_catalog_object_is_seen_at_once(tmp_path):
    wh = str(tmp_path / "wh")
    a, b = tessera.connect(warehouse=wh), tessera.connect(warehouse=wh)
    a.create_namespace("s")
    a.create_table("s.t", _data())
    old = a.table_info("s.t")["uri"]
    assert a.table_info("s.t")["uri"] == old  # cached now
    b.update_table_properties("s.t", {"owner": "bob"})
    assert a.table_properties("s.t") == {"owner": "bob"}
    b.rename_table("s.t", "s.t_old")
    with pytest.raises(NoSuchTableError):
        a.table_info("s.t")
    b.create_table("s.t", _data(5), location=str(tmp_path / "elsewhere"))  # a new table under the old name
    assert a.table_info("s.t")["uri"] != old
    assert a.load_table("s.t").count_rows() == 5
    a.close()
    b.close()


def test_a_table_dropped_and_recreated_by_another_process_is_seen(tmp_path):
    wh = str(tmp_path / "wh")
    cat = tessera.connect(warehouse=wh)
    cat.create_namespace("s")
    cat.create_table("s.t", _data())
    old = cat.table_info("s.t")["uri"]
    assert cat.load_table("s.t").count_rows() == 3
    elsewhere = str(tmp_path / "elsewhere")
    code = (
        f"import tessera, pyarrow as pa; c = tessera.connect(warehouse={wh!r}); c.drop_table('s.t', purge=True); "
        f"c.create_table('s.t', pa.table({{'i': list(range(7))}}), location={elsewhere!r}); c.close()"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    assert cat.table_info("s.t")["uri"] != old
    assert cat.load_table("s.t").count_rows() == 7  # the new table, not the cached row's
    cat.close()


def test_a_catalog_on_another_database_reads_every_time(postgres_url, tmp_path):
    from tessera.catalog.catalog import _RowCache

    cache = _RowCache(postgres_url)
    assert cache.generation() is None  # no change signal: nothing is kept
    cache.close()
