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
