"""Every kind of table Tessera writes, read by every client users run, with the
same rows at every version: pylance 14 (in process), pylance 13 (its own
venv), LanceDB 0.40 through the ``tessera`` namespace plugin and through
``tessera serve`` with LanceDB's REST client.

The kinds: file versions 2.0, 2.1 and 2.2 with deletions (Arrow and Roaring
deletion files), updates and merge_insert; stable row ids (the ``_rowid`` of
every row the same in every client, and kept by an update); indices (LanceDB's
BTREE and IVF_PQ, Tessera's zone map) carried across Tessera's commits;
dictionary columns (in every table); schema changes (add, rename, drop); blob
columns.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from tessera_test_interop import assert_same, lancedb_btree, lancedb_ivf_pq, lancedb_read, lancedb_table, rows

import tessera

FILE_VERSIONS = ("2.0", "2.1", "2.2")
CLIENTS = ("pylance14", "pylance13", "lancedb-plugin", "lancedb-rest")


def _expected(cat, name: str, *, with_row_id: bool = False) -> dict[int, pa.Table]:
    """Tessera's rows at every version of ``name``; the versions must be 1..N."""
    t = cat.load_table(name)
    versions = [v["version"] for v in t.versions()]
    assert versions == list(range(1, t.version + 1)), f"versions of {name} are not contiguous: {versions}"
    out = {}
    for v in versions:
        at = cat.load_table(name, version=v)
        out[v] = at.scanner(with_row_id=True).to_table() if with_row_id else at.to_arrow()
    return out


def _read(client: str, served, lance13, name: str, versions: list[int], *, with_row_id: bool = False):
    t = served.cat.load_table(name)
    if client == "pylance14":
        import lance

        return {v: lance.dataset(t.uri, version=v).to_table(with_row_id=with_row_id) for v in versions}
    if client == "pylance13":
        return lance13.read(t.uri, versions, with_row_id=with_row_id)
    db = served.lancedb("plugin" if client == "lancedb-plugin" else "rest")
    return lancedb_read(db, name, versions, with_row_id=with_row_id)


def _check_every_client(served, lance13, name: str, *, with_row_id: bool = False) -> dict[int, pa.Table]:
    expected = _expected(served.cat, name, with_row_id=with_row_id)
    failures = []
    for client in CLIENTS:
        try:
            got = _read(client, served, lance13, name, sorted(expected), with_row_id=with_row_id)
            assert sorted(got) == sorted(expected), f"{client} read versions {sorted(got)}"
            for v, table in expected.items():
                assert_same(table, got[v], f"{client} reading {name} at version {v}")
        except Exception as exc:  # noqa: BLE001 - every client is checked, all failures reported
            failures.append(f"{client}: {type(exc).__name__}: {exc}")
    assert not failures, "\n".join(failures)
    return expected


def _mutations(cat, name: str, file_version: str, *, stable_row_ids: bool = False):
    t = cat.create_table(name, rows(0, 5200), file_version=file_version, stable_row_ids=stable_row_ids)
    t.append(rows(5200, 100))
    t.append(rows(5300, 100))
    t.delete("id < 5 OR id = 5250")  # a few rows: Arrow deletion files
    t.delete("id >= 20 AND id < 5120")  # more than 5,000 rows of a fragment: a Roaring bitmap
    t.update({"s": "'updated'", "f": "f * 2"}, where="id >= 5200 AND id < 5210")
    src = rows(5395, 10)
    src = src.set_column(src.column_names.index("s"), "s", pa.array([f"merged-{i}" for i in range(10)]))
    t.merge_insert(src, on="id")
    return t


@pytest.mark.parametrize("file_version", FILE_VERSIONS)
def test_deletions_updates_and_merges_in_every_file_version(served, lance13, file_version):
    ns = served.namespace("mutations")
    name = f"{ns}.v{file_version.replace('.', '')}"
    _mutations(served.cat, name, file_version)
    deletions = served.cat.load_table(name).uri + "/_deletions"
    kinds = {os.path.splitext(n)[1] for n in os.listdir(deletions)}
    assert kinds == {".arrow", ".bin"}, kinds
    expected = _check_every_client(served, lance13, name)
    latest = expected[max(expected)]
    assert latest.num_rows == 5405 - 6 - 5100 and latest.column("d").type == pa.dictionary(pa.int32(), pa.string())


@pytest.mark.slow
@pytest.mark.parametrize("file_version", ("2.1", "2.2"))
def test_stable_row_ids_are_the_same_in_every_client_and_kept_by_updates(served, lance13, file_version):
    """Item 2 of issue 25: an updated row keeps its ``_rowid`` (as pylance 14
    does), so ids read before an update still find the rows in every client."""
    import lance

    ns = served.namespace("rowids")
    name = f"{ns}.v{file_version.replace('.', '')}"
    t = served.cat.create_table(name, rows(0, 100), file_version=file_version, stable_row_ids=True)
    t.append(rows(100, 100))
    before = t.scanner(columns=["id"], with_row_id=True).to_table()
    touched = before.filter(pa.compute.less(before.column("id"), 30))  # 0..29: rows the update and merge change
    t.update({"s": "'updated'"}, where="id < 20")
    src = rows(20, 10)
    t.merge_insert(src.set_column(1, "s", pa.array(["merged"] * 10)), on="id")
    t.delete("id >= 150")
    _check_every_client(served, lance13, name, with_row_id=True)
    # the row ids read before the update and the merge still find those rows, everywhere
    latest = served.cat.load_table(name)
    old_ids = touched.column("_rowid").to_pylist()
    want = sorted(touched.column("id").to_pylist())
    assert sorted(latest.take_rows(old_ids, columns=["id"]).column("id").to_pylist()) == want, "Tessera"
    ds = lance.dataset(latest.uri)
    assert sorted(ds._take_rows(old_ids, columns=["id"]).column("id").to_pylist()) == want, "pylance 14"
    (res,) = lance13.ok(latest.uri, [{"op": "take_rows", "ids": old_ids, "columns": ["id"]}])
    assert sorted(lance13.table(res).column("id").to_pylist()) == want, "pylance 13"
    for how in ("plugin", "rest"):
        tbl = lancedb_table(served.lancedb(how), name)
        got = tbl.take_row_ids(old_ids).select(["id"]).to_arrow()
        assert sorted(got.column("id").to_pylist()) == want, f"LanceDB ({how})"


@pytest.mark.parametrize("file_version", ("2.0", "2.2"))
def test_schema_changes(served, lance13, file_version):
    ns = served.namespace("schema")
    name = f"{ns}.v{file_version.replace('.', '')}"
    t = served.cat.create_table(name, rows(0, 150, vector=False), file_version=file_version)
    t.add_columns({"g": "id * 2"})
    t.append(rows(150, 50, vector=False).append_column("g", pa.array(np.arange(150, 200) * 2)))
    t.rename_column("s", "label")
    t.drop_columns(["f"])
    t.delete("id % 10 = 3")
    t.add_columns({"h": "CAST(id AS DOUBLE) / 4"})
    expected = _check_every_client(served, lance13, name)
    assert expected[max(expected)].column_names == ["id", "label", "d", "g", "h"]


@pytest.mark.slow
def test_indexed_table_across_tessera_commits(served, lance13):
    """LanceDB builds BTREE and IVF_PQ indices (through the plugin), Tessera
    a zone map; Tessera's commits carry them and every client reads the same
    rows at every version, and finds the same rows with its indices."""
    ns = served.namespace("indexed")
    name = f"{ns}.t"
    t = served.cat.create_table(name, rows(0, 400))
    tbl = lancedb_table(served.lancedb_plugin(), name)
    lancedb_btree(tbl)
    lancedb_ivf_pq(tbl)
    t = served.cat.load_table(name)
    t.create_index("f")  # Tessera's zone map
    t.append(rows(400, 50))
    t.delete("id >= 100 AND id < 120")
    t.update({"s": "'updated'"}, where="id >= 300 AND id < 310")
    names = {ix["name"]: ix["type"] for ix in served.cat.load_table(name).list_indices()}
    assert {"id_idx", "vec_idx"} <= set(names) and "ZONEMAP" in names.values(), names
    _check_every_client(served, lance13, name)
    # the indices answer, and agree with a scan, in every client
    want = sorted(i for i in range(0, 450) if not 100 <= i < 120 and 250 <= i < 330)
    latest = served.cat.load_table(name)
    import lance

    got14 = lance.dataset(latest.uri).to_table(columns=["id"], filter="id >= 250 AND id < 330")
    assert sorted(got14.column("id").to_pylist()) == want
    got13 = lance13.read(latest.uri, [latest.version], columns=["id"], filter="id >= 250 AND id < 330")
    assert sorted(got13[latest.version].column("id").to_pylist()) == want
    for how in ("plugin", "rest"):
        tbl = lancedb_table(served.lancedb(how), name)
        got = tbl.search().where("id >= 250 AND id < 330").select(["id"]).limit(None).to_arrow()
        assert sorted(got.column("id").to_pylist()) == want, how
        assert tbl.count_rows("f > 100") == latest.count_rows("f > 100"), how


def test_blob_columns_are_read_alike_or_refused(served, lance13, tmp_path):
    """Item 10 of issue 25: a blob column (``lance-encoding:blob``) is either
    written so that every client reads its bytes, or refused with
    UnsupportedEncodingError naming the column, nothing written."""
    import lance

    schema = pa.schema(
        [pa.field("id", pa.int64()), pa.field("img", pa.large_binary(), metadata={"lance-encoding:blob": "true"})]
    )
    blobs = [bytes([i % 251]) * (i * 37 % 500) for i in range(60)]
    data = pa.table({"id": np.arange(60), "img": pa.array(blobs, pa.large_binary())}, schema=schema)
    ns = served.namespace("blobs")
    for fv in FILE_VERSIONS:
        name = f"{ns}.v{fv.replace('.', '')}"
        try:
            t = served.cat.create_table(name, data, file_version=fv)
        except tessera.errors.UnsupportedEncodingError as exc:
            assert "img" in str(exc), exc
            assert name.split(".")[1] not in served.cat.list_tables(ns), "a refused create left a table"
            continue
        except Exception as exc:  # noqa: BLE001
            pytest.fail(f"{fv}: writing a blob column raised {type(exc).__name__}: {exc}")
        idx = [0, 7, 59]
        want = [blobs[i] for i in idx]
        assert [b.read() for b in lance.dataset(t.uri).take_blobs("img", indices=idx)] == want, fv
        assert t.take(idx, columns=["img"]).column("img").to_pylist() == want, fv
        # pylance 13 and LanceDB read the same bytes
        got13 = lance13.read(t.uri, [t.version], columns=["id"])
        assert got13[t.version].num_rows == 60, fv
        tbl = lancedb_table(served.lancedb_plugin(), name)
        assert tbl.count_rows() == 60, fv
    # pylance's own blob columns: read by Tessera, or refused loudly (never a misleading error)
    for fv in FILE_VERSIONS:
        uri = str(tmp_path / f"pylance-{fv}")
        ds = lance.write_dataset(data, uri, data_storage_version=fv)
        try:
            got = tessera.Table.open(uri).take([0, 7, 59], columns=["img"])
        except tessera.errors.UnsupportedEncodingError as exc:
            assert "img" in str(exc), exc
            continue
        assert got.column("img").to_pylist() == [b.read() for b in ds.take_blobs("img", indices=[0, 7, 59])], fv
