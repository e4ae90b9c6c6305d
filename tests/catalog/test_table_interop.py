"""Dataset-level interop with pylance 14, both ways, for file versions 2.0-2.2.

History: create (2 fragments), append, small delete (.arrow), large delete
(.bin), update, add column, drop column, overwrite.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

from tessera.catalog import Table

VERSIONS = ("2.0", "2.1", "2.2")
KEY = [("i", "ascending")]


def _data(n: int, start: int = 0) -> pa.Table:
    i = np.arange(start, start + n, dtype=np.int64)
    return pa.table(
        {
            "i": i,
            "s": pa.array([f"name-{x}" for x in i]),
            "f": pa.array([None if x % 7 == 0 else x * 0.5 for x in i], pa.float64()),
        }
    )


def _same(lance, path: str, table: Table, version: int | None = None) -> None:
    ds = lance.dataset(path, version=version)
    assert ds.version == table.version
    assert ds.count_rows() == table.count_rows()
    want = ds.to_table()
    got = table.to_arrow()
    assert got.schema.equals(want.schema)
    assert got.sort_by(KEY).equals(want.sort_by(KEY))
    assert (
        table.to_arrow(filter="i >= 15000 AND i < 15010")
        .sort_by(KEY)
        .equals(ds.to_table(filter="i >= 15000 AND i < 15010").sort_by(KEY))
    )
    assert table.count_rows("i % 3 = 0") == ds.count_rows("i % 3 = 0")
    n = ds.count_rows()
    if n:
        idx = sorted({0, n // 3, n - 1})
        assert table.take(idx).equals(ds.take(idx))


def _tessera_history(path: str, version: str) -> list[int]:
    t = Table.create(path, _data(20_000), file_version=version, max_rows_per_file=10_000)
    t.append(_data(5_000, 20_000))
    t.delete("i < 100")  # 100 rows: an Arrow deletion file
    t.delete("i >= 10000 AND i < 16000")  # 6000 rows: a Roaring bitmap
    t.update({"s": "'updated'", "f": "f * 2"}, where="i >= 17000 AND i < 17005")
    t.add_columns({"g": "i * 2"})
    t.drop_columns(["f"])
    mid = t.version
    t.overwrite(_data(300, 1_000_000).append_column("extra", pa.array(["x"] * 300)))
    return [mid, t.version]


@pytest.mark.parametrize("version", VERSIONS)
def test_pylance_reads_every_tessera_version(lance, tmp_path, version):
    path = str(tmp_path / "t")
    mid, last = _tessera_history(path, version)
    deletions = os.listdir(os.path.join(path, "_deletions"))
    assert any(d.endswith(".arrow") for d in deletions) and any(d.endswith(".bin") for d in deletions)
    latest = Table.open(path)
    assert latest.version == last == 8
    for v in range(1, latest.version + 1):
        _same(lance, path, Table.open(path, version=v), v)
    ops = [h["operation"] for h in latest.versions()]
    assert ops == ["overwrite", "append", "delete", "delete", "update", "merge", "project", "overwrite"]
    assert [(h["rows_added"], h["rows_removed"]) for h in latest.versions()][:5] == [
        (20000, 0),
        (5000, 0),
        (0, 100),
        (0, 6000),
        (5, 5),
    ]
    # pylance carries on from the pre-overwrite state (restored) and from the latest
    t = Table.open(path)
    t.restore(mid)
    assert t.version == 9 and t.count_rows() == Table.open(path, version=mid).count_rows()
    ds = lance.dataset(path)
    ds.insert(pa.table({"i": pa.array([99_999_999], pa.int64()), "s": ["p"], "g": pa.array([1], pa.int64())}))
    ds = lance.dataset(path)
    ds.delete("i = 20001")
    ds = lance.dataset(path)
    ds.optimize.compact_files()
    ds = lance.dataset(path)
    ds.validate()
    _same(lance, path, Table.open(path))


def _pylance_history(lance, path: str, version: str, **kw) -> None:
    data = _data(20_000)
    lance.write_dataset(data, path, max_rows_per_file=10_000, data_storage_version=version, **kw)
    lance.write_dataset(_data(5_000, 20_000), path, mode="append")
    ds = lance.dataset(path)
    ds.delete("i < 100")
    ds.delete("i >= 10000 AND i < 16000")
    ds.update({"s": "'updated'"}, where="i >= 17000 AND i < 17005")
    ds.add_columns({"g": "i * 2"})
    ds.drop_columns(["f"])


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kind", ["plain", "stable_row_ids", "scalar_index"])
def test_tessera_reads_and_extends_pylance_tables(lance, tmp_path, version, kind):
    path = str(tmp_path / "p")
    kw = {"enable_stable_row_ids": True} if kind == "stable_row_ids" else {}
    _pylance_history(lance, path, version, **kw)
    if kind == "scalar_index":
        lance.dataset(path).create_scalar_index("i", "BTREE")
    latest = lance.dataset(path).version
    for v in range(1, latest + 1):
        _same(lance, path, Table.open(path, version=v), v)
    t = Table.open(path)
    t.append(
        pa.table({"i": pa.array([50_000, 50_001], pa.int64()), "s": ["a", "b"], "g": pa.array([0, 0], pa.int64())})
    )
    t.delete("i = 20002 OR i = 50_000".replace("_", ""))
    _same(lance, path, t)
    ds = lance.dataset(path)
    assert ds.to_table(filter="i = 50001").num_rows == 1
    assert ds.to_table(filter="i = 20002").num_rows == 0
    if kind == "scalar_index":
        assert [i.name for i in ds.describe_indices()] == ["i_idx"]
        assert ds.to_table(filter="i = 20003").column("s").to_pylist() == ["name-20003"]
    if kind == "stable_row_ids":
        ids = ds.to_table(columns=["i"], with_row_id=True).column("_rowid").to_numpy()
        assert len(np.unique(ids)) == len(ids)
        mine = t.to_arrow(columns=["i", "_rowid"]).sort_by(KEY)
        theirs = ds.to_table(columns=["i"], with_row_id=True).sort_by(KEY)
        assert mine.column("_rowid").to_pylist() == theirs.column("_rowid").to_pylist()
    ds.validate()


def test_v1_naming_and_detection(lance, tmp_path):
    path = str(tmp_path / "v1")
    t = Table.create(path, _data(10), naming="V1")
    t.append(_data(5, 10))
    assert sorted(os.listdir(os.path.join(path, "_versions"))) == [
        ".tessera-commit.lock",  # the local writers' advisory lock (pylance lists only *.manifest)
        "1.manifest",
        "2.manifest",
        "latest_version_hint.json",
    ]
    assert lance.dataset(path).count_rows() == 15
    lance.write_dataset(_data(1, 99), path, mode="append")
    t = Table.open(path)
    assert t.version == 3 and t.count_rows() == 16
    t.append(_data(1, 100))  # detected V1, keeps it
    assert "4.manifest" in os.listdir(os.path.join(path, "_versions"))


def test_pylance_v1_dataset_opens(lance, tmp_path):
    path = str(tmp_path / "pv1")
    lance.write_dataset(_data(10), path, enable_v2_manifest_paths=False)
    assert Table.open(path).count_rows() == 10


def test_create_from_schema_pandas_and_reader(lance, tmp_path):
    import pandas as pd

    schema = pa.schema([("a", pa.int32()), ("b", pa.string())])
    t = Table.create(str(tmp_path / "s"), schema)
    assert t.count_rows() == 0 and t.schema.equals(schema)
    t.append(pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}).astype({"a": "int32"}))
    assert (
        lance.dataset(str(tmp_path / "s"))
        .to_table()
        .equals(pa.table({"a": pa.array([1, 2], pa.int32()), "b": ["x", "y"]}))
    )
    reader = pa.RecordBatchReader.from_batches(
        schema, pa.table({"a": pa.array([3], pa.int32()), "b": ["z"]}).to_batches()
    )
    t2 = Table.create(str(tmp_path / "r"), reader)
    assert t2.to_arrow().column("b").to_pylist() == ["z"]


def test_tags_visible_to_pylance(lance, tmp_path):
    path = str(tmp_path / "tags")
    t = Table.create(path, _data(10))
    t.append(_data(5, 10))
    t.tags.create("first", 1)
    assert lance.dataset(path).tags.list()["first"]["version"] == 1
    assert lance.dataset(path, version="first").count_rows() == 10
    assert t.checkout("first").count_rows() == 10
    lance.dataset(path).tags.create("second", 2)
    assert t.tags.list()["second"]["version"] == 2
    assert Table.open(path, version="second").count_rows() == 15
    t.tags.delete("first")
    assert "first" not in lance.dataset(path).tags.list()


def test_pylance_rebases_over_tessera_commits_from_the_inline_transaction(lance, tmp_path):
    """Tessera's manifests carry the transaction inline (and name a
    ``_transactions/`` file with the same bytes, for Lance 13 cores; removed
    here, so pylance 14 must use the inline copy).  pylance writers holding an
    older version must still rebase over Tessera's commits with the right
    semantics, which needs Tessera's transaction: a stale pylance delete over a
    Tessera delete of the same fragment keeps both deletions; a stale pylance
    append over a Tessera overwrite is refused, not merged into the new table."""
    uri = str(tmp_path / "t")
    lance.write_dataset(pa.table({"i": pa.array(range(10), pa.int64())}), uri)
    stale = lance.dataset(uri)  # version 1
    t = Table.open(uri)
    t.append(pa.table({"i": pa.array([100, 101], pa.int64())}))
    assert t.manifest.transaction_file and t.snapshot.mfile.transaction is not None
    os.remove(os.path.join(uri, "_transactions", t.manifest.transaction_file))  # the inline copy alone
    stale.delete("i = 3")  # rebased over Tessera's append
    stale = lance.dataset(uri)
    t = Table.open(uri)
    t.delete("i = 5")  # same fragment as the next pylance delete
    stale.delete("i = 6")
    want = [0, 1, 2, 4, 7, 8, 9, 100, 101]
    assert sorted(lance.dataset(uri).to_table().column("i").to_pylist()) == want
    assert sorted(Table.open(uri).to_arrow().column("i").to_pylist()) == want
    stale = lance.dataset(uri)
    Table.open(uri).overwrite(pa.table({"i": pa.array([-1], pa.int64())}))
    with pytest.raises(OSError, match="(?i)conflict|overwrite|retryable|commit"):
        stale.insert(pa.table({"i": pa.array([7777], pa.int64())}))
    assert sorted(lance.dataset(uri).to_table().column("i").to_pylist()) in ([-1], [-1, 7777])
