"""``Table.stats()`` and ``tessera describe``'s statistics: the counts agree
with pylance 14's ``dataset.stats`` on the same table, and column statistics
(NULL counts, bounds) come from zone maps only when they cover the version,
exact after deletes and updates."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from click.testing import CliRunner

from tessera.catalog.cli import main
from tessera.catalog.table import Table
from tessera.catalog.table.stats import SMALL_FRAGMENT_ROWS


def _data(n: int, start: int = 0) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "s": pa.array([None if i % 3 == 0 else f"s{i:05d}" for i in ids]),
            "x": pa.array([float(i) / 2 for i in ids]),
        }
    )


@pytest.fixture
def table(tmp_path) -> Table:
    t = Table.create(str(tmp_path / "t"), _data(3000), max_rows_per_file=1000)
    t.create_index("s")
    t.create_index("id")
    return t


def _pylance(t: Table) -> lance.LanceDataset:
    return lance.dataset(t.uri)


def test_counts_agree_with_pylance(table):
    table.delete("id < 10 OR id = 1500")
    table.append(_data(5, 5000))  # a fragment no index covers yet
    st = table.stats()
    ds = _pylance(table)
    theirs = ds.stats.dataset_stats()
    assert (st.deleted_rows, st.fragments, st.small_fragments) == (
        theirs["num_deleted_rows"],
        theirs["num_fragments"],
        theirs["num_small_files"],
    )
    assert st.rows == ds.count_rows() == 3000 - 11 + 5
    assert st.physical_rows == st.rows + st.deleted_rows
    assert st.deletion_files == 2 and st.data_files == 4 and st.versions == len(ds.versions())
    assert st.data_bytes == sum(p.stat().st_size for p in (Path(table.uri) / "data").iterdir())
    for ix in st.indices:
        p = ds.stats.index_stats(ix.name)
        assert (ix.indexed_rows, ix.unindexed_rows, ix.indexed_fragments, ix.unindexed_fragments) == (
            p["num_indexed_rows"],
            p["num_unindexed_rows"],
            p["num_indexed_fragments"],
            p["num_unindexed_fragments"],
        ), ix.name


def test_small_fragments_are_pylances(tmp_path):
    t = Table.create(str(tmp_path / "t"), _data(SMALL_FRAGMENT_ROWS * 2 + 1), max_rows_per_file=SMALL_FRAGMENT_ROWS)
    assert t.stats().small_fragments == 1 == _pylance(t).stats.dataset_stats()["num_small_files"]


def test_column_statistics_are_exact_after_deletes(table):
    before = {c.name: c for c in table.stats().columns}
    assert before["s"].null_count == 1000 and before["s"].source == "s_idx"
    assert (before["id"].min, before["id"].max, before["id"].null_count) == (0, 2999, 0)
    assert (before["s"].min, before["s"].max) == ("s00001", "s02999")
    assert before["x"] == before["x"].__class__("x", "double")  # no zone map: nothing claimed
    table.delete("id < 10")  # 4 of the deleted rows hold NULL in s
    after = {c.name: c for c in table.stats().columns}
    live = table.to_arrow()
    assert after["s"].null_count == live.column("s").null_count == 996
    # bounds hold every live value (they may be wider after a delete, never narrower)
    assert after["id"].min <= min(live.column("id").to_pylist()) and after["id"].max >= 2999


def test_bounds_follow_updates_and_appends(table):
    """Tessera's writes keep the zone maps whole, so the bounds move with them."""
    table.update({"id": "id + 100000"}, where="id = 2000")
    table.append(_data(3, 9000))
    cols = {c.name: c for c in table.stats().columns}
    assert (cols["id"].min, cols["id"].max, cols["id"].source) == (0, 102000, "id_idx")
    assert max(table.to_arrow().column("id").to_pylist()) == 102000


def test_a_fragment_no_zone_map_covers_leaves_no_claim(tmp_path):
    """pylance appends without extending the zone map: the new fragment's
    values are bounded by nothing, so no bound is claimed (and the index
    coverage says so, as pylance's index_stats does)."""
    t = Table.create(str(tmp_path / "t"), _data(100))
    t.create_index("id")
    lance.write_dataset(_data(10, 50_000), t.uri, mode="append")
    t = Table.open(t.uri)
    st = t.stats()
    cols = {c.name: c for c in st.columns}
    assert (cols["id"].min, cols["id"].max, cols["id"].null_count, cols["id"].source) == (None, None, None, None)
    p = _pylance(t).stats.index_stats("id_idx")
    assert (st.indices[0].unindexed_fragments, st.indices[0].unindexed_rows) == (1, 10)
    assert (p["num_unindexed_fragments"], p["num_unindexed_rows"]) == (1, 10)
    t.optimize_indices()
    assert {c.name: c for c in t.stats().columns}["id"].max == 50_009


def test_a_zone_map_pylance_wrote(tmp_path):
    """pylance's ZONEMAP (and its deletes) give the same exact counts."""
    path = str(tmp_path / "t")
    ds = lance.write_dataset(_data(2000), path, max_rows_per_file=1000)
    ds.create_scalar_index("s", "ZONEMAP")
    cols = {c.name: c for c in Table.open(path).stats().columns}
    assert cols["s"].null_count == 667 and cols["s"].min == "s00001" and cols["s"].max == "s01999"
    lance.dataset(path).delete("id = 0")
    cols = {c.name: c for c in Table.open(path).stats().columns}
    assert cols["s"].null_count == 666 == Table.open(path).to_arrow().column("s").null_count


def test_nulls_without_positions_are_not_claimed_after_a_delete(tmp_path, monkeypatch):
    """A zone map without NULL positions (a writer that kept none): the zones'
    counts while the fragment deletes nothing, no claim once it does."""
    from tessera.catalog.query import pruning

    real = pruning.read_zonemap
    monkeypatch.setattr(pruning, "read_zonemap", lambda *a: dataclasses.replace(real(*a), null_rows={}))
    t = Table.create(str(tmp_path / "t"), _data(2000), max_rows_per_file=1000)
    t.create_index("s")
    assert {c.name: c for c in t.stats().columns}["s"].null_count == 667
    t.delete("id = 1")  # a row that is not NULL: the positions of the NULLs still matter
    assert {c.name: c for c in t.stats().columns}["s"].null_count is None
    t.delete("id >= 1000")  # a fragment gone whole; the other keeps its deletions
    assert {c.name: c for c in t.stats().columns}["s"].null_count is None


def test_an_empty_table(tmp_path):
    t = Table.create(str(tmp_path / "t"), _data(0).schema)
    st = t.stats()
    assert (st.rows, st.fragments, st.data_files, st.data_bytes, st.indices) == (0, 0, 0, 0, ())
    assert [c.name for c in st.columns] == ["id", "s", "x"]


def test_describe_prints_and_serialises_them(table):
    table.delete("id < 10")
    runner = CliRunner()
    out = runner.invoke(main, ["describe", table.uri, "-o", "json"])
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    assert d["deleted_rows"] == 10 and d["small_fragments"] == 3 and d["deletion_files"] == 1
    assert d["column_stats"]["s"] == {
        "type": "string",
        "null_count": 996,
        "min": "s00001",
        "max": "s02999",
        "source": "s_idx",
    }
    assert {i["name"]: i["indexed_rows"] for i in d["indices"]} == {"s_idx": 2990, "id_idx": 2990}
    text = runner.invoke(main, ["describe", table.uri], env={"COLUMNS": "120"})
    assert text.exit_code == 0, text.output
    assert "2,990 (10 deleted)" in text.output and "996" in text.output and "s_idx" in text.output
