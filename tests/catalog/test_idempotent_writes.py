"""Idempotent writes (``txn_app_id``/``txn_version``, Delta's txnAppId and
txnVersion; tessera/commit/app_txn.py): a write the table already holds
commits nothing, also when its twin wins the commit race while it writes."""

from __future__ import annotations

import os

import lance
import pyarrow as pa
import pytest

from tessera.catalog import errors as E
from tessera.catalog.table import Table
from tessera.commit import recorded_version


def _rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())})


def _files(t: Table) -> int:
    return len(os.listdir(os.path.join(t.uri, "data")))


@pytest.fixture(params=["native", "sqlite"])
def table(request, tmp_path) -> Table:
    store = f"sqlite:///{tmp_path}/commits.db" if request.param == "sqlite" else None
    return Table.create(str(tmp_path / "t"), _rows(0), commit_store=store)


def test_a_write_is_committed_once(table):
    table.append(_rows(1), txn_app_id="etl", txn_version=1)
    v, files = table.version, _files(table)
    table.append(_rows(1), txn_app_id="etl", txn_version=1)  # sent again
    table.append(_rows(1), txn_app_id="etl", txn_version=0)  # an older one
    assert (table.version, table.count_rows(), _files(table)) == (v, 2, files)
    table.append(_rows(2), txn_app_id="etl", txn_version=2)
    table.append(_rows(9), txn_app_id="other", txn_version=1)  # applications are apart
    assert table.count_rows() == 4 and recorded_version(table.manifest, "etl") == 2
    # an empty write is recorded all the same (a stream's empty micro-batch)
    table.append(_rows()[:0], txn_app_id="etl", txn_version=3)
    assert recorded_version(Table.open(table.uri).manifest, "etl") == 3 and table.count_rows() == 4
    table.overwrite(_rows(7), txn_app_id="etl", txn_version=3)  # held: the overwrite does not happen
    assert table.count_rows() == 4
    table.overwrite(_rows(7), txn_app_id="etl", txn_version=4)
    assert table.to_arrow().column("id").to_pylist() == [7]


def test_the_twin_that_loses_the_race_commits_nothing(table):
    """The second write checks the table before writing (nothing there yet),
    its twin commits while it writes, and its commit finds the record on the
    version it rebases onto: nothing committed, its data files removed."""
    other = Table.open(table.uri)
    fired = []

    def twin(phase: str, done: int, total: int | None) -> None:
        if not fired:
            fired.append(True)
            other.append(_rows(5), txn_app_id="job", txn_version=7)

    files_before = _files(table)
    table.append(_rows(5), txn_app_id="job", txn_version=7, progress=twin)
    assert fired and Table.open(table.uri).count_rows() == 2
    assert _files(table) == files_before + 1  # the twin's file only
    assert table.version == other.version  # the loser moves to the version holding its write


def test_pylance_keeps_the_record(table):
    table.append(_rows(1), txn_app_id="etl", txn_version=1)
    lance.write_dataset(_rows(50), table.uri, mode="append")  # pylance carries the config forward
    t = Table.open(table.uri)
    assert recorded_version(t.manifest, "etl") == 1 and lance.dataset(table.uri).count_rows() == 3
    t.append(_rows(1), txn_app_id="etl", txn_version=1)
    assert t.count_rows() == 3


def test_restore_undoes_the_records_with_the_rows(table):
    base = table.version
    table.append(_rows(1), txn_app_id="etl", txn_version=1)
    table.restore(base)
    table.append(_rows(1), txn_app_id="etl", txn_version=1)  # undone by the restore: written again
    assert table.count_rows() == 2


@pytest.mark.parametrize(
    "app_id, version",
    [("etl", None), (None, 1), ("", 1), ("a b", 1), ("etl", -1), ("etl", True), ("etl", "1"), ("version", 1)],
)
def test_bad_names_are_refused_before_anything_is_written(table, app_id, version):
    v, files = table.version, _files(table)
    with pytest.raises(E.InvalidAppTransactionError):
        table.append(_rows(1), txn_app_id=app_id, txn_version=version)
    assert (table.version, _files(table)) == (v, files)
    assert issubclass(E.InvalidAppTransactionError, E.TesseraError)


def test_not_inside_a_catalog_transaction(tmp_path):
    import tessera

    cat = tessera.connect(warehouse=str(tmp_path / "wh"))
    cat.create_namespace("ns")
    cat.create_table("ns.t", _rows(0), commit_store="catalog")
    with pytest.raises(E.InvalidArgumentError, match="catalog transaction"):
        with cat.transaction() as tx:
            tx.load_table("ns.t").append(_rows(1), txn_app_id="etl", txn_version=1)
    assert cat.load_table("ns.t").count_rows() == 1


def test_a_held_write_with_schema_merge_commits_no_schema_either(table):
    wide = pa.table({"id": pa.array([1], pa.int64()), "extra": ["x"]})
    table.append(wide, txn_app_id="etl", txn_version=1, schema_mode="merge")
    v = table.version
    again = Table.open(table.uri)
    again.append(pa.table({"id": pa.array([1], pa.int64()), "more": ["y"]}), txn_app_id="etl", txn_version=1,
                 schema_mode="merge")  # fmt: skip
    assert again.version == v and "more" not in again.schema.names and again.count_rows() == 2
