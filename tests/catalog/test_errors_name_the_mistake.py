"""Errors that name the mistake (issue 29): an update value meant as a string
says it needs quotes, a table in a namespace that does not exist says so, and
a namespace error names the table as users do (``a.b``), not by the REST
wire's ``a$b``."""

from __future__ import annotations

import pyarrow as pa
import pytest

import tessera
from tessera.errors import NoSuchTableError, TableNotFoundError, UnknownColumnError


def test_an_update_value_meant_as_a_string_says_it_needs_quotes(tmp_path):
    t = tessera.Table.create(str(tmp_path / "t"), pa.table({"id": [1, 2], "city": ["a", "b"]}))
    with pytest.raises(UnknownColumnError, match="""string value is written in quotes: "'SF'\""""):
        t.update({"city": "SF"})
    with pytest.raises(UnknownColumnError, match="unknown column 'nope'"):  # an expression: the usual message
        t.update({"id": "nope + 1"})
    assert t.version == 1
    t.update({"city": "'SF'"})
    assert t.to_arrow().column("city").to_pylist() == ["SF", "SF"]


def test_a_table_in_a_missing_namespace_says_the_namespace_is_missing(tmp_path):
    cat = tessera.connect(warehouse=str(tmp_path / "wh"))
    cat.create_namespace("sales")
    with pytest.raises(NoSuchTableError, match="there is no namespace 'nosuch' .namespaces: sales."):
        cat.load_table("nosuch.orders")
    with pytest.raises(NoSuchTableError) as exc:
        cat.load_table("sales.orders")
    assert "namespace" not in str(exc.value)
    cat.close()


def test_namespace_errors_name_tables_with_dots(tmp_path):
    pytest.importorskip("lance_namespace")
    from lance_namespace import DescribeTableRequest

    from tessera.catalog.namespace import TesseraNamespace
    from tessera.commit import call_namespace

    ns = TesseraNamespace(warehouse=str(tmp_path / "wh"))
    with pytest.raises(TableNotFoundError) as exc:
        call_namespace(ns, "describe_table", DescribeTableRequest, id=["nosuch", "orders"])
    assert "'nosuch.orders'" in str(exc.value) and "$" not in str(exc.value)
    ns.close()
