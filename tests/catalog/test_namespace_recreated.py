"""A table pylance created through the namespace records no incarnation (its
manifests carry pylance's config only), so a table dropped and recreated at
the same place under a writer cannot be told by the config: its data files
tell (``commit.lineage.foreign_base``).  What must hold: a pylance handle
opened before the drop is refused when it commits onto the new table (the
new table stays as it was), and every operation pylance makes on its own
table still commits (the check refuses nothing it should not)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from tessera_test_services import namespace_warehouse

import tessera

lance = pytest.importorskip("lance")
lance_namespace = pytest.importorskip("lance_namespace")


@pytest.fixture(params=["native", "catalog", "redis"])
def props(request, tmp_path):
    with namespace_warehouse(request, tmp_path, request.param, "s") as (props, _):
        yield props


def _col(values: list[int]) -> pa.Table:
    return pa.table({"i": pa.array(values, pa.int64()), "s": [f"v{v}" for v in values]})


def _ids(ds) -> list[int]:
    return sorted(ds.to_table(columns=["i"]).column("i").to_pylist())


@pytest.mark.parametrize("stale_op", ["insert", "drop_columns"])
def test_a_handle_from_before_a_drop_and_recreate_is_refused(props, stale_op):
    """Before the check, the stale append was version 3 of the new table: it
    named the old table's purged files (every read of the latest failed) and
    left out the new table's rows."""
    ns = lance_namespace.connect("tessera", props)
    tid = ["s", "t"]
    lance.write_dataset(_col([1]), namespace_client=ns, table_id=tid, mode="create")
    lance.write_dataset(_col([2]), namespace_client=ns, table_id=tid, mode="append")
    stale = lance.dataset(namespace_client=ns, table_id=tid)  # version 2 of the first table
    cat = tessera.connect(warehouse=props["warehouse"])
    location = cat.table_info("s.t")["uri"]
    cat.drop_table("s.t", purge=True)
    lance.write_dataset(_col([10]), namespace_client=ns, table_id=tid, mode="create")
    lance.write_dataset(_col([20]), namespace_client=ns, table_id=tid, mode="append")
    assert cat.table_info("s.t")["uri"] == location  # the same place, the same version number
    with pytest.raises(OSError):
        if stale_op == "insert":
            stale.insert(_col([3]))
        else:
            stale.drop_columns(["s"])  # no data read: the commit is what is asked
    fresh = lance.dataset(namespace_client=ns, table_id=tid)
    assert fresh.version == 2 and _ids(fresh) == [10, 20]
    assert cat.load_table("s.t").version == 2
    ds = lance.write_dataset(_col([30]), namespace_client=ns, table_id=tid, mode="append")
    assert ds.version == 3 and _ids(ds) == [10, 20, 30]
    assert sorted(cat.load_table("s.t").to_arrow().column("i").to_pylist()) == [10, 20, 30]
    cat.close()
    ns.close()


def test_every_pylance_operation_on_its_own_table_commits(props):
    """Appends, deletes, updates (rows and columns), merge-insert, added,
    cast and dropped columns, an index, a compaction: each version built on
    the one before passes the check (none is refused as another table's)."""
    ns = lance_namespace.connect("tessera", props)
    tid = ["s", "ops"]
    ds = lance.write_dataset(_col([1, 2]), namespace_client=ns, table_id=tid, mode="create")
    for v in ([3], [4], [5, 6]):
        ds = lance.write_dataset(_col(v), namespace_client=ns, table_id=tid, mode="append")
    ds.delete("i = 3")
    ds.update({"s": "'u'"}, where="i = 1")
    ds.add_columns({"w": "i * 2"})
    ds.alter_columns({"path": "w", "data_type": pa.int32()})
    ds.drop_columns(["w"])
    ds.create_scalar_index("i", "BTREE")
    ds.merge_insert("i").when_matched_update_all().when_not_matched_insert_all().execute(_col([1, 9]))
    ds.update({"i": "i + 100"}, where="i = 9")
    ds.optimize.compact_files()
    ds.delete("i = 4")
    ds = lance.write_dataset(_col([7]), namespace_client=ns, table_id=tid, mode="append")
    latest = lance.dataset(namespace_client=ns, table_id=tid)
    assert latest.version == ds.version >= 15
    assert _ids(latest) == [1, 2, 5, 6, 7, 109]
    cat = tessera.connect(warehouse=props["warehouse"])
    assert sorted(cat.load_table("s.ops").to_arrow().column("i").to_pylist()) == [1, 2, 5, 6, 7, 109]
    cat.close()
    ns.close()
