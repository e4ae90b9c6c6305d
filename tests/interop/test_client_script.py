"""lance_client.py, the script that drives pylance 13 from its own venv, run
with the main venv's pylance 14: each op's answer equals pylance 14's own in
process, so what the suite learns from pylance 13 through it can be trusted.
Also which pylance each interpreter really imports."""

from __future__ import annotations

import pyarrow as pa
from tessera_test_interop import assert_same, rows, vector_of

import tessera


def test_the_script_answers_as_pylance_does_in_process(lance, lance14_process, tmp_path):
    uri = str(tmp_path / "t")
    t = tessera.Table.create(uri, rows(0, 300), stable_row_ids=True)
    t.append(rows(300, 20))
    t.delete("id % 5 = 0")
    ds = lance.dataset(uri)
    ds.create_index("vec", index_type="IVF_PQ", num_partitions=2, num_sub_vectors=2)
    ds = lance.dataset(uri)
    q = vector_of(7)
    ops = [
        {"op": "read", "versions": [1, 2, 3], "with_row_id": True},
        {"op": "info"},
        {"op": "nearest", "column": "vec", "q": q, "k": 5, "nprobes": 2, "refine_factor": 10},
        {"op": "take_rows", "ids": [1, 2, 3, 301], "columns": ["id", "s"]},
        {"op": "index_stats", "name": "vec_idx"},
        {"op": "read", "versions": [3], "columns": ["id"], "filter": "id < 10"},
        {"op": "no such op"},
    ]
    read, info, nearest, take, stats, filtered, bad = lance14_process.run(uri, ops)
    assert lance14_process.version == lance.__version__
    for v in (1, 2, 3):
        got = lance14_process.table({"file": read["files"][str(v)]})
        assert_same(lance.dataset(uri, version=v).to_table(with_row_id=True), got, f"version {v}")
    assert info["version"] == ds.version == 4 and info["rows"] == ds.count_rows() and info["stable_row_ids"]
    assert info["versions"] == [1, 2, 3, 4] and [ix["name"] for ix in info["indices"]] == ["vec_idx"]
    want = ds.to_table(nearest={"column": "vec", "q": q, "k": 5, "nprobes": 2, "refine_factor": 10})
    assert lance14_process.table(nearest).column("id").equals(want.column("id"))
    assert lance14_process.table(take).equals(ds._take_rows([1, 2, 3, 301], columns=["id", "s"]))
    assert stats == {"num_indexed_rows": ds.count_rows(), "num_unindexed_rows": 0}
    assert lance14_process.table({"file": filtered["files"]["3"]}).column("id").to_pylist() == [1, 2, 3, 4, 6, 7, 8, 9]
    assert bad["error"] == "ValueError" and "no such op" in bad["message"]


def test_the_second_venv_holds_pylance_13_and_the_main_one_14(lance, lance13, tmp_path):
    uri = str(tmp_path / "t")
    tessera.Table.create(uri, pa.table({"id": [1, 2, 3]}))
    (info,) = lance13.ok(uri, [{"op": "info"}])
    assert lance13.version.split(".")[0] == "13" and lance.__version__.split(".")[0] == "14"
    assert info["rows"] == 3 and info["data_storage_version"] == "2.2"
