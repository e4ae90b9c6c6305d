"""LanceDB 0.40's own REST namespace client against a real ``tessera serve`` (issue 25, item 7).

LanceDB's client posts ``version/list`` with the JSON body ``null`` (pylance's
sends none): every route accepts a null or empty body where its request has
no required field.  A create refused after its declaration leaves nothing
behind: no declared table, no file, and the next create succeeds."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from tessera_test_services import TesseraServer

import tessera
from tessera.catalog.namespace.routes import OPS

lancedb = pytest.importorskip("lancedb")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

TOKEN = "lancedb-rest-token-0123456789"


def _data(lo: int, hi: int) -> pa.Table:
    rng = np.random.default_rng(lo)
    vec = rng.random((hi - lo, 4), dtype=np.float32)
    return pa.table(
        {
            "i": pa.array(range(lo, hi), pa.int64()),
            "s": [f"row {i}" for i in range(lo, hi)],
            "v": pa.FixedSizeListArray.from_arrays(pa.array(vec.ravel()), 4),
        }
    )


def _files(root: str) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lancedb-rest")
    (tmp / "token").write_text(TOKEN)
    srv = TesseraServer(tmp, "--token-file", str(tmp / "token"), token=TOKEN)
    yield srv
    srv.stop()


def _connect(uri: str, token: str | None = TOKEN):
    props = {"uri": uri}
    if token:
        props["header.Authorization"] = f"Bearer {token}"
    return lancedb.connect_namespace("rest", props)


def test_lancedb_creates_adds_searches_lists_and_drops_over_rest(server):
    db = _connect(server.uri)
    db.create_namespace(["shop"])
    t = db.create_table("items", _data(0, 50), namespace_path=["shop"])
    t.add(_data(50, 60))
    assert t.count_rows() == 60
    near = t.search(_data(0, 50).column("v")[7].as_py()).limit(1).to_arrow()
    assert near.column("i").to_pylist() == [7]  # the vector itself is its nearest
    assert t.search().where("i >= 55").to_arrow().num_rows == 5
    t.delete("i < 10")
    assert db.list_tables(namespace_path=["shop"]).tables == ["items"]
    cat = tessera.connect(warehouse=server.warehouse)
    try:
        ours = cat.load_table("shop.items")
        assert ours.version == 3 and sorted(ours.to_arrow().column("i").to_pylist()) == list(range(10, 60))
        db.drop_table("items", namespace_path=["shop"])
        assert cat.list_tables("shop") == [] and _files(ours.uri) == []
    finally:
        cat.close()


def test_every_route_takes_a_null_or_empty_body_when_nothing_is_required(server):
    db = _connect(server.uri)
    db.create_namespace(["nb"])
    for name in ("t", "u"):
        db.create_table(name, _data(0, 3), namespace_path=["nb"])
    destructive = ("drop_table", "deregister_table", "drop_namespace")
    ops = sorted(OPS, key=lambda op: op.call in destructive)
    for op in (op for op in ops if op.verb == "POST"):
        ident = "nb" if op.what == "namespace" else ("nb%24u" if op.call == "deregister_table" else "nb%24t")
        required = [n for n, f in op.model.model_fields.items() if f.is_required()]
        for body in (b"null", b""):
            status, answer, _ = server.http("POST", op.path.replace("{id}", ident), body)
            if required:
                assert status == 400 and answer["code"] == 13, (op.path, body, answer)
                assert required[0] in answer["error"], (op.path, answer)
            else:
                assert status != 400, (op.path, body, status, answer)
            if op.call in destructive:
                break  # done (once)
    for body in (b"[1]", b'"x"', b"3"):  # JSON that is no object is still refused
        status, answer, _ = server.http("POST", "/v1/table/nb%24x/version/list", body)
        assert (status, answer["code"]) == (400, 13)


def test_a_create_refused_after_its_declaration_leaves_nothing(tmp_path):
    """The server refuses the first commit once, before asking the table's
    coordinator (a fault injected at the namespace's check point): no declared
    table and no file remain, and the same create then succeeds."""
    prelude = (
        "from tessera.commit import faults\n"
        "fired = []\n"
        "def refuse():\n"
        "    if not fired:\n"
        "        fired.append(1)\n"
        "        raise RuntimeError('injected refusal')\n"
        "faults.set_action(faults.CHECKED, refuse)"
    )
    srv = TesseraServer(tmp_path, token=None, prelude=prelude)
    cat = tessera.connect(warehouse=srv.warehouse)
    try:
        db = _connect(srv.uri, token=None)
        with pytest.raises(Exception):  # noqa: B017 - LanceDB words the refusal its own way
            db.create_table("t", _data(0, 5))
        assert cat.list_tables("default") == [] and not cat.table_exists("default.t")
        location = os.path.join(srv.warehouse, "default", "t.lance")
        assert _files(location) == []
        t = db.create_table("t", _data(0, 5))
        assert t.count_rows() == 5 and cat.load_table("default.t").version == 1
        assert "injected refusal" in srv.log()
    finally:
        cat.close()
        srv.stop()


def test_a_bad_first_commit_is_refused_and_leaves_nothing(server):
    """A client that declares a table, then sends a staged "manifest" that is
    not one: 400, and the declaration and the staged file are gone."""
    cat = tessera.connect(warehouse=server.warehouse)
    try:
        status, declared, _ = server.http("POST", "/v1/table/bad%24t/declare", {"id": ["bad", "t"]})
        assert status == 404  # no namespace "bad"
        server.http("POST", "/v1/namespace/bad/create", {})
        status, declared, _ = server.http("POST", "/v1/table/bad%24t/declare", {})
        assert status == 200
        location = declared["location"]
        staged = "_versions/18446744073709551614.manifest-0b3f0c2e-5d6a-4f1e-9c3a-2b7d8e9f0a1b"
        os.makedirs(os.path.join(location, "_versions"))
        with open(os.path.join(location, staged), "wb") as f:
            f.write(b"not a manifest at all")
        body = {"version": 1, "manifest_path": f"{location.lstrip('/')}/{staged}", "naming_scheme": "V2"}
        status, answer, _ = server.http("POST", "/v1/table/bad%24t/version/create", body)
        assert (status, answer["code"]) == (400, 13), answer
        assert not cat.table_exists("bad.t") and _files(location) == []
        status, _, _ = server.http("POST", "/v1/table/bad%24t/declare", {})
        assert status == 200  # the name is free again
    finally:
        cat.close()
