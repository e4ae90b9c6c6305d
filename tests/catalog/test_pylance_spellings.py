"""Habits users bring from pylance (issue 29): ``merge_insert(on="id")``
returns the builder, ``to_table(columns=, filter=, limit=, offset=)`` and
``checkout_version`` read as pylance's do; each compared with pylance on the
same table."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tessera.catalog import Table

lance = pytest.importorskip("lance")


@pytest.fixture
def table(tmp_path):
    path = str(tmp_path / "t")
    t = Table.create(path, pa.table({"id": [1, 2, 3, 4], "v": ["a", "b", "c", "d"]}))
    t.append(pa.table({"id": [5], "v": ["e"]}))
    return t


def test_merge_insert_on_keyword_returns_the_builder(table):
    stats = (
        table.merge_insert(on="id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute(pa.table({"id": [2, 9], "v": ["B", "i"]}))
    )
    assert stats["num_updated_rows"] == 1 and stats["num_inserted_rows"] == 1
    assert sorted(table.to_arrow().to_pylist(), key=lambda r: r["id"])[1] == {"id": 2, "v": "B"}


def test_to_table_and_checkout_version_as_pylance(table):
    ds = lance.dataset(table.uri)
    for kwargs in (
        {},
        {"columns": ["v"]},
        {"filter": "id > 1", "limit": 2, "offset": 1},
        {"columns": ["id"], "filter": "v != 'c'"},
    ):
        assert table.to_table(**kwargs).equals(ds.to_table(**kwargs)), kwargs
    old = table.checkout_version(1)
    assert old.version == 1 and old.to_table().equals(ds.checkout_version(1).to_table())
