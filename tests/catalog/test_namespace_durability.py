"""The namespace's ``durability`` property: the versions pylance commits
through it are fsynced by default ("sync"), not with "none" (pylance's own
behaviour by path); anything else is refused by name."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")
lance_namespace = pytest.importorskip("lance_namespace")
from lance_namespace import errors as nserr  # noqa: E402

import tessera  # noqa: E402,F401 - registers "tessera"


def _fsyncs_per_append(tmp_path, monkeypatch, **props: str) -> int:
    ns = lance_namespace.connect("tessera", {"warehouse": str(tmp_path / "wh"), "commit_store": "native", **props})
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["s"]))
    tid = ["s", "t"]
    lance.write_dataset(pa.table({"i": [0]}), namespace_client=ns, table_id=tid, mode="create")
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd) or real(fd))
    try:
        lance.write_dataset(pa.table({"i": [1]}), namespace_client=ns, table_id=tid, mode="append")
    finally:
        monkeypatch.setattr(os, "fsync", real)
    assert lance.dataset(namespace_client=ns, table_id=tid).count_rows() == 2
    ns.close()
    return len(calls)


def test_sync_by_default_and_none_on_request(tmp_path, monkeypatch):
    assert _fsyncs_per_append(tmp_path / "a", monkeypatch) >= 2  # the manifest and its directory
    assert _fsyncs_per_append(tmp_path / "b", monkeypatch, durability="none") == 0


def test_a_bad_durability_is_refused(tmp_path):
    from tessera.catalog.namespace import TesseraNamespace

    with pytest.raises(nserr.InvalidInputError, match="durability"):
        TesseraNamespace(warehouse=str(tmp_path / "wh"), durability="fast")


@pytest.fixture
def reservations(monkeypatch):
    """The ``synchronous`` setting each SQLite reservation of this process
    committed under ("FULL": its commit syncs the WAL; "NORMAL": it does not),
    read off the statements the real engine runs."""
    import sqlalchemy as sa

    from tessera.stores.sql_schema import TABLE_NAME

    mode: dict[int, str] = {}
    seen: list[str] = []

    def before(conn, cursor, statement, parameters, context, executemany):
        text = " ".join(statement.split()).upper()
        if conn.engine.dialect.name != "sqlite":
            return
        if text.startswith("PRAGMA SYNCHRONOUS="):
            mode[id(conn.connection.dbapi_connection)] = text.split("=", 1)[1]
        elif text.startswith(f"INSERT INTO {TABLE_NAME.upper()}"):
            seen.append(mode.get(id(conn.connection.dbapi_connection), "FULL"))

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", before)
    yield seen
    sa.event.remove(sa.engine.Engine, "before_cursor_execute", before)


@pytest.mark.parametrize("durability", ["sync", "none"])
def test_the_catalogs_sqlite_store_reserves_at_the_namespaces_durability(durability, tmp_path, reservations):
    """On the catalog's SQLite store the reservation (the commit point) syncs
    the WAL under "sync" and not under "none" (a crash of the process loses
    nothing; a power loss may lose the latest versions, as for pylance)."""
    props = {"warehouse": str(tmp_path / "wh"), "commit_store": "catalog", "durability": durability}
    ns = lance_namespace.connect("tessera", props)
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["s"]))
    tid = ["s", "t"]
    lance.write_dataset(pa.table({"i": [0]}), namespace_client=ns, table_id=tid, mode="create")
    reservations.clear()
    for i in (1, 2):
        lance.write_dataset(pa.table({"i": [i]}), namespace_client=ns, table_id=tid, mode="append")
    assert reservations == ["FULL" if durability == "sync" else "NORMAL"] * 2
    assert lance.dataset(namespace_client=ns, table_id=tid).count_rows() == 3
    ns.close()


def test_a_tables_durability_reaches_its_sqlite_store(tmp_path, reservations):
    """A Table with durability "none" on a SQLite commit store reserves
    without syncing; set back to "sync", with."""
    url = f"sqlite:///{tmp_path / 'commits.db'}"
    t = tessera.Table.create(str(tmp_path / "t"), pa.table({"i": [0]}), commit_store=url, durability="none")
    reservations.clear()
    t.append(pa.table({"i": [1]}))
    t.durability = "sync"
    t.append(pa.table({"i": [2]}))
    with tessera.durability("none"):
        t.append(pa.table({"i": [3]}))
    assert reservations == ["NORMAL", "FULL", "NORMAL"]
    assert sorted(tessera.Table.open(str(tmp_path / "t"), commit_store=url).to_arrow().column("i").to_pylist()) == [
        0,
        1,
        2,
        3,
    ]
