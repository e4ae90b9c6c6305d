"""The catalog API on SQLite, PostgreSQL and MariaDB catalogs, with tables on
local disk and on S3 (moto)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pyarrow as pa
import pytest

from tessera.catalog import errors as E
from tessera.catalog.catalog import connect


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def cat(request, tmp_path):
    if request.param == "sqlite":
        c = connect(warehouse=str(tmp_path / "wh"))
    else:  # a database of its own on the shared server
        fresh_database = sys.modules["tessera_test_services"].fresh_database
        url, drop = fresh_database(request.getfixturevalue(f"{request.param}_url"))
        request.addfinalizer(drop)
        c = connect(url, warehouse=str(tmp_path / "wh"))
    yield c
    c.close()


def _data(n=10, start=0):
    return pa.table({"id": np.arange(start, start + n, dtype=np.int64), "city": ["SF", "NYC"] * (n // 2)})


def test_namespaces(cat):
    cat.create_namespace("sales", {"owner": "ana"})
    cat.create_namespace("sales.eu")
    with pytest.raises(E.NamespaceExistsError):
        cat.create_namespace("sales")
    cat.create_namespace("sales", exist_ok=True)
    with pytest.raises(E.NamespaceNotFoundError):
        cat.create_namespace("nope.child")
    assert cat.list_namespaces() == ["sales"]
    assert cat.list_namespaces("sales") == ["sales.eu"]
    assert cat.namespace_properties("sales") == {"owner": "ana"}
    assert cat.update_namespace_properties("sales", {"tier": "gold"}, ["owner"]) == {"tier": "gold"}
    with pytest.raises(E.NamespaceNotEmptyError):
        cat.drop_namespace("sales")
    cat.drop_namespace("sales.eu")
    cat.drop_namespace("sales")
    assert cat.list_namespaces() == []
    for bad in ("", "a..b", "1abc", "a b", "x;drop"):
        with pytest.raises(E.InvalidNameError):
            cat.create_namespace(bad)


def test_tables_lifecycle(cat):
    cat.create_namespace("ns")
    t = cat.create_table("ns.orders", _data(), properties={"team": "x"})
    assert t.count_rows() == 10
    with pytest.raises(E.TableExistsError):
        cat.create_table("ns.orders", _data())
    with pytest.raises(E.NamespaceNotFoundError):
        cat.create_table("other.orders", _data())
    with pytest.raises(E.InvalidNameError):
        cat.create_table("orders", _data())
    assert cat.list_tables("ns") == ["ns.orders"]
    assert cat.table_exists("ns.orders") and not cat.table_exists("ns.nope")
    loaded = cat.load_table("ns.orders")
    loaded.append(_data(4, 100))
    loaded.delete("id = 0")
    loaded.update({"city": "'LA'"}, where="id = 1")
    assert cat.load_table("ns.orders").count_rows() == 13
    assert cat.load_table("ns.orders", version=1).count_rows() == 10
    assert cat.table_properties("ns.orders") == {"team": "x"}
    cat.update_table_properties("ns.orders", {"tier": "1"})
    cat.rename_table("ns.orders", "ns.orders2")
    assert cat.list_tables("ns") == ["ns.orders2"]
    with pytest.raises(E.NoSuchTableError):
        cat.load_table("ns.orders")
    uri = cat.table_info("ns.orders2")["uri"]
    cat.drop_table("ns.orders2")
    assert os.path.exists(uri)  # data kept without purge
    cat.create_table("ns.gone", _data())
    uri2 = cat.table_info("ns.gone")["uri"]
    cat.drop_table("ns.gone", purge=True)
    assert not any(files for _, _, files in os.walk(uri2))
    with pytest.raises(E.NoSuchTableError):
        cat.drop_table("ns.gone")


def test_create_from_schema_and_versions(cat):
    cat.create_namespace("ns")
    t = cat.create_table("ns.s", pa.schema([("a", pa.int32())]), file_version="2.0")
    t.append(pa.table({"a": pa.array([1, 2], pa.int32())}))
    assert t.file_version == "2.0"
    assert [h["operation"] for h in cat.load_table("ns.s").versions()] == ["overwrite", "append"]


def test_catalog_store_tables(cat):
    cat.create_namespace("ns")
    t = cat.create_table("ns.c", _data(), commit_store="catalog")
    assert t.manifest.config["tessera.commit.coordinator"] == "sql"
    t.append(_data(2, 50))
    assert cat.load_table("ns.c").count_rows() == 12


def test_tables_on_s3(cat, moto_server):
    bucket = moto_server.new_bucket()
    c2 = connect(cat.uri, warehouse=f"s3://{bucket}/wh", storage_options=moto_server.storage_options())
    c2.create_namespace("s3ns", exist_ok=True)
    t = c2.create_table("s3ns.t", _data())
    assert c2.table_info("s3ns.t")["commit_store"] == "native"  # moto honours If-None-Match
    t.append(_data(2, 20))
    assert c2.load_table("s3ns.t").count_rows() == 12
    c2.close()


def test_bad_catalog_url(tmp_path):
    with pytest.raises(E.CatalogConnectionError):
        connect("postgresql+psycopg://nobody@127.0.0.1:1/none", warehouse=str(tmp_path / "wh"))
    with pytest.raises(E.CatalogConnectionError):
        connect("mysql+pymysql://root@127.0.0.1:3306/no_such_db_here", warehouse=str(tmp_path / "wh"))


def test_warehouse_not_writable_as_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(E.WarehouseNotWritableError):
        connect(warehouse=str(blocker / "wh"))
    assert blocker.read_text() == "x"  # nothing half-created


def test_config_file_and_env(tmp_path, monkeypatch):
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[catalog.default]\nwarehouse = "{tmp_path / "wh2"}"\n')
    monkeypatch.setenv("TESSERA_CONFIG", str(cfg))
    c = connect()
    assert c.warehouse == str(tmp_path / "wh2")
    monkeypatch.setenv("TESSERA_WAREHOUSE", str(tmp_path / "wh3"))
    assert connect().warehouse == str(tmp_path / "wh3")


def test_a_stale_handle_cannot_commit_to_a_purged_and_recreated_table(cat):
    """A writer opened the table at v4; the table is purged and recreated (one
    version).  Its append must fail with a typed error and leave the new table
    alone - not land as v5 past it, which would make the dead table's manifest
    the new table's latest."""
    cat.create_namespace("ns")
    t = cat.create_table("ns.c", _data(), commit_store="catalog")
    for i in range(3):
        t.append(_data(2, 100 + 10 * i))
    stale = cat.load_table("ns.c")
    assert stale.version == 4
    cat.drop_table("ns.c", purge=True)
    new = cat.create_table("ns.c", _data(4, 500), commit_store="catalog")
    with pytest.raises(E.IncarnationMismatchError):
        stale.append(_data(2, 900))
    again = cat.load_table("ns.c")
    assert again.version == 1 and again.count_rows() == 4
    assert sorted(again.to_arrow().column("id").to_pylist()) == [500, 501, 502, 503]
    new.append(_data(2, 600))  # the rightful table goes on
    assert cat.load_table("ns.c").version == 2
