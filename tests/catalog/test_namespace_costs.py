"""What one pylance append through the namespace plugin costs Tessera, pinned
as counts: no catalog query once the table's row was read (the database is
unchanged), and manifest names parsed that do not grow with the table's
versions (the latest is found without parsing every name)."""

from __future__ import annotations

import pyarrow as pa
import pytest
import sqlalchemy as sa

lance = pytest.importorskip("lance")
lance_namespace = pytest.importorskip("lance_namespace")

import tessera  # noqa: E402,F401 - registers "tessera"
from tessera.format.table import manifest as mf  # noqa: E402


def test_an_append_runs_no_catalog_query_and_parses_few_names(tmp_path, monkeypatch):
    ns = lance_namespace.connect("tessera", {"warehouse": str(tmp_path / "wh"), "commit_store": "native"})
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["s"]))
    tid = ["s", "t"]
    lance.write_dataset(pa.table({"i": [0]}), namespace_client=ns, table_id=tid, mode="create")
    statements: list[str] = []
    sa.event.listen(ns.catalog.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    parsed: list[str] = []
    real = mf.parse_manifest_name
    monkeypatch.setattr(mf, "parse_manifest_name", lambda name: parsed.append(name) or real(name))

    def one_append(i: int) -> tuple[int, int]:
        statements.clear()
        parsed.clear()
        lance.write_dataset(pa.table({"i": [i]}), namespace_client=ns, table_id=tid, mode="append")
        return len(statements), len(parsed)

    one_append(1)  # reads the table's row once
    queries, early = one_append(2)
    assert queries == 0
    for i in range(3, 40):
        one_append(i)
    queries, late = one_append(40)
    assert queries == 0
    assert late <= early + 2 and late < 10, (early, late)  # 41 versions: not one name each
    assert lance.dataset(namespace_client=ns, table_id=tid).count_rows() == 41
    ns.close()


def test_a_version_is_the_staged_file_linked_not_written_again(tmp_path, monkeypatch):
    """pylance's staged manifest gets the final name by a hard link (creating
    a file is the dearest thing a commit does on local disk); with durability
    "sync" it is fsynced before the link names it."""
    from tessera.stores.local import LocalObjectStore

    ns = lance_namespace.connect("tessera", {"warehouse": str(tmp_path / "wh"), "commit_store": "native"})
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["s"]))
    tid = ["s", "t"]
    lance.write_dataset(pa.table({"i": [0]}), namespace_client=ns, table_id=tid, mode="create")
    puts, links = [], []
    real_put, real_link = LocalObjectStore.put_if_not_exists, LocalObjectStore.link_if_not_exists
    monkeypatch.setattr(
        LocalObjectStore, "put_if_not_exists", lambda self, p, d: puts.append(p) or real_put(self, p, d)
    )
    monkeypatch.setattr(
        LocalObjectStore,
        "link_if_not_exists",
        lambda self, s, d, **k: links.append((s, d, k)) or real_link(self, s, d, **k),
    )
    lance.write_dataset(pa.table({"i": [1]}), namespace_client=ns, table_id=tid, mode="append")
    assert [p for p in puts if p.startswith("_versions/")] == []
    assert len(links) == 1 and links[0][2] == {"sync_src": True}
    staged, final, _ = links[0]
    assert ".manifest-" in staged and final.endswith(".manifest")
    assert lance.dataset(namespace_client=ns, table_id=tid).to_table().column("i").to_pylist() == [0, 1]
    ns.close()
