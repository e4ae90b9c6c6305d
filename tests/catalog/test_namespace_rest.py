"""Tessera as a Lance REST Namespace (``tessera serve``): pylance's Rust HTTP
client commits through a real server process on loopback, and Tessera reads
every version as pylance does.  One token-protected server serves the module;
a second one, with two worker processes, serves concurrent writers."""

from __future__ import annotations

import json
import os
import re
import threading
import time

import numpy as np
import pyarrow as pa
import pytest

import tessera

lance = pytest.importorskip("lance")
lance_namespace = pytest.importorskip("lance_namespace")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
from lance_namespace import errors as nserr  # noqa: E402
from tessera_test_services import TesseraServer  # noqa: E402

TOKEN = "tessera-test-token-0123456789"
MAX_BODY = 64 * 1024


Server = TesseraServer


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rest")
    token_file = tmp / "token"
    token_file.write_text(TOKEN + "\n")
    # a storage option the server must not hand out (no --vend-storage-options)
    srv = Server(
        tmp, "--token-file", str(token_file), "--max-body-bytes", str(MAX_BODY), "-s", "region=nowhere-1", token=TOKEN
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def cat(server):
    c = tessera.connect(warehouse=server.warehouse)
    yield c
    c.close()


def _same_everywhere(cat, ns, tid: list[str]) -> int:
    """Every version Tessera reads equals pylance's through the server; the latest version."""
    name = ".".join(tid)
    t = cat.load_table(name)
    assert t.version == lance.dataset(namespace_client=ns, table_id=tid).version
    assert [v["version"] for v in t.versions()] == list(range(1, t.version + 1))  # contiguous
    for v in range(1, t.version + 1):
        theirs = lance.dataset(namespace_client=ns, table_id=tid, version=v).to_table()
        ours = cat.load_table(name, version=v).to_arrow()
        key = theirs.column_names[0]
        assert ours.sort_by(key).equals(theirs.sort_by(key)), f"version {v} differs"
    assert [n for n in os.listdir(os.path.join(t.uri, "_versions")) if ".manifest-" in n] == []  # no staged left
    return t.version


def _snapshot(cat, warehouse: str):
    """What the catalog and the warehouse hold (to show that nothing was written)."""
    files = sorted(os.path.relpath(os.path.join(d, f), warehouse) for d, _, fs in os.walk(warehouse) for f in fs)
    files = [f for f in files if not f.startswith("catalog.db")]
    namespaces = sorted(cat.list_namespaces())
    return namespaces, {n: sorted(cat.list_tables(n)) for n in namespaces}, files


def _error(resp, status: int, code: int) -> None:
    got_status, body, _ = resp
    assert (got_status, body.get("code") if isinstance(body, dict) else body) == (status, code), resp
    assert isinstance(body["error"], str) and body["error"]


def test_pylance_operations_commit_through_the_server(server, cat):
    ns = server.client()
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["ops"]))
    tid = ["ops", "orders"]
    data = pa.table({"id": pa.array(np.arange(10), pa.int64()), "v": pa.array([f"s{i}" for i in range(10)])})
    ds = lance.write_dataset(data, namespace_client=ns, table_id=tid, mode="create")
    assert ds.version == 1
    ds = lance.write_dataset(
        data.slice(0, 3).set_column(0, "id", pa.array([10, 11, 12])), namespace_client=ns, table_id=tid, mode="append"
    )
    ds.delete("id = 2")
    ds.update({"v": "'u'"}, where="id < 2")
    src = pa.table({"id": pa.array([5, 20], pa.int64()), "v": pa.array(["m", "n"])})
    ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)
    ds.add_columns({"w": "id * 2"})
    ds.optimize.compact_files()
    ds.tags.create("before-restore", ds.version)
    tagged = ds.version
    ds.checkout_version(3).restore()
    latest = _same_everywhere(cat, ns, tid)
    assert latest >= 9
    assert lance.dataset(namespace_client=ns, table_id=tid, version="before-restore").version == tagged
    assert lance.dataset(namespace_client=ns, table_id=tid, version=2).count_rows() == 13
    # Tessera writes in between, pylance continues on top, through the server
    t = cat.load_table("ops.orders")
    t.append(t.to_arrow().slice(0, 1))
    ds = lance.write_dataset(
        lance.dataset(namespace_client=ns, table_id=tid).to_table().slice(0, 1),
        namespace_client=ns,
        table_id=tid,
        mode="append",
    )
    assert ds.version == latest + 2
    assert _same_everywhere(cat, ns, tid) == latest + 2
    # version list: descending pages (query parameters of a POST without a body)
    page = ns.list_table_versions(lance_namespace.ListTableVersionsRequest(id=tid, descending=True, limit=2))
    assert [v.version for v in page.versions] == [latest + 2, latest + 1] and page.page_token
    status, body, _ = server.http("POST", f"/v1/table/ops%24orders/version/list?limit=2&page_token={page.page_token}")
    assert status == 200 and [v["version"] for v in body["versions"]] == [3, 4]  # ascending by default
    status, body, _ = server.http("POST", "/v1/table/ops%24orders/version/describe", {"id": tid, "version": 1})
    assert status == 200 and body["version"]["version"] == 1
    assert body["version"]["manifest_path"].endswith("_versions/18446744073709551614.manifest")
    log = server.log()
    assert re.search(r"request method=POST route=/v1/table/\{id\}/version/create status=200 ms=\d+\.\d", log)


def test_namespaces_tables_and_unsupported_routes(server, cat):
    ns = server.client()
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["meta"], properties={"owner": "ana"}))
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["meta", "child"]))
    with pytest.raises(nserr.NamespaceAlreadyExistsError):
        ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["meta"]))
    _error(server.http("POST", "/v1/namespace/meta/create", {}), 409, 2)
    assert "meta" in ns.list_namespaces(lance_namespace.ListNamespacesRequest(id=[])).namespaces
    assert ns.list_namespaces(lance_namespace.ListNamespacesRequest(id=["meta"])).namespaces == ["child"]
    assert ns.describe_namespace(lance_namespace.DescribeNamespaceRequest(id=["meta"])).properties == {"owner": "ana"}
    ns.namespace_exists(lance_namespace.NamespaceExistsRequest(id=["meta", "child"]))
    with pytest.raises(nserr.NamespaceNotFoundError):
        ns.namespace_exists(lance_namespace.NamespaceExistsRequest(id=["nope"]))
    for name in ("t3", "t1", "t2"):
        lance.write_dataset(pa.table({"i": [1]}), namespace_client=ns, table_id=["meta", name], mode="create")
    page = ns.list_tables(lance_namespace.ListTablesRequest(id=["meta"], limit=2))
    assert page.tables == ["t1", "t2"] and page.page_token
    rest = ns.list_tables(lance_namespace.ListTablesRequest(id=["meta"], limit=2, page_token=page.page_token))
    assert rest.tables == ["t3"] and rest.page_token is None
    ns.table_exists(lance_namespace.TableExistsRequest(id=["meta", "t1"]))
    with pytest.raises(nserr.TableNotFoundError):
        ns.table_exists(lance_namespace.TableExistsRequest(id=["meta", "nope"]))
    with pytest.raises(nserr.TableAlreadyExistsError):
        lance.write_dataset(pa.table({"i": [1]}), namespace_client=ns, table_id=["meta", "t1"], mode="create")
    # describe_table: managed versioning, and no storage options (the server does not vend them)
    status, body, _ = server.http("POST", "/v1/table/meta%24t1/describe?with_table_uri=true", {"id": ["meta", "t1"]})
    assert status == 200 and body["managed_versioning"] is True and "storage_options" not in body
    assert body["location"] == cat.table_info("meta.t1")["uri"]
    _error(server.http("POST", "/v1/table/meta%24nope/describe", {}), 404, 4)
    _error(server.http("POST", "/v1/table/meta%24t1/version/describe", {"version": 99}), 404, 11)
    with pytest.raises(ValueError, match="Table version not found"):  # pylance's wording of code 11
        lance.dataset(namespace_client=ns, table_id=["meta", "t1"], version=99)
    # a one-part table id lives in the root namespace ("default"), which the delimiter alone names
    lance.write_dataset(pa.table({"i": [7]}), namespace_client=ns, table_id=["solo"], mode="create")
    assert cat.load_table("default.solo").to_arrow().column("i").to_pylist() == [7]
    assert ns.list_tables(lance_namespace.ListTablesRequest(id=[])).tables == ["solo"]
    status, body, _ = server.http("GET", "/v1/namespace/%24/table/list")
    assert (status, body) == (200, {"tables": ["solo"]})
    # drop
    dropped = ns.drop_table(lance_namespace.DropTableRequest(id=["meta", "t3"]))
    assert dropped.id == ["meta", "t3"] and sorted(cat.list_tables("meta")) == ["meta.t1", "meta.t2"]
    with pytest.raises(nserr.NamespaceNotEmptyError):
        ns.drop_namespace(lance_namespace.DropNamespaceRequest(id=["meta"]))
    _error(server.http("POST", "/v1/namespace/meta/drop", {}), 409, 3)
    ns.drop_namespace(lance_namespace.DropNamespaceRequest(id=["meta", "child"]))
    assert ns.list_namespaces(lance_namespace.ListNamespacesRequest(id=["meta"])).namespaces == []
    # tags, restore, count, rename, register/deregister: the same truth as Table
    tid = ["meta", "t1"]
    lance.write_dataset(pa.table({"i": [2, 3]}), namespace_client=ns, table_id=tid, mode="append")
    ns.create_table_tag(lance_namespace.CreateTableTagRequest(id=tid, tag="first", version=1))
    assert ns.get_table_tag_version(lance_namespace.GetTableTagVersionRequest(id=tid, tag="first")).version == 1
    assert cat.load_table("meta.t1").tags.get("first")["version"] == 1  # Tessera sees the tag
    ns.update_table_tag(lance_namespace.UpdateTableTagRequest(id=tid, tag="first", version=2))
    tags = ns.list_table_tags(lance_namespace.ListTableTagsRequest(id=tid)).tags
    assert list(tags) == ["first"] and tags["first"].version == 2
    ns.delete_table_tag(lance_namespace.DeleteTableTagRequest(id=tid, tag="first"))
    assert ns.list_table_tags(lance_namespace.ListTableTagsRequest(id=tid)).tags == {}
    with pytest.raises(nserr.InvalidInputError):
        ns.create_table_tag(lance_namespace.CreateTableTagRequest(id=tid, tag="bad", version=99))
    with pytest.raises(nserr.TableTagNotFoundError):
        ns.delete_table_tag(lance_namespace.DeleteTableTagRequest(id=tid, tag="first"))
    assert ns.count_table_rows(lance_namespace.CountTableRowsRequest(id=tid)).count == 3
    assert ns.count_table_rows(lance_namespace.CountTableRowsRequest(id=tid, predicate="i > 1")).count == 2
    ns.restore_table(lance_namespace.RestoreTableRequest(id=tid, version=1))
    t1 = cat.load_table("meta.t1")
    assert t1.version == 3 and t1.count_rows() == 1 and t1.versions()[-1]["operation"] == "restore"
    ns.rename_table(lance_namespace.RenameTableRequest(id=tid, new_table_name="renamed"))
    assert sorted(cat.list_tables("meta")) == ["meta.renamed", "meta.t2"]
    gone = ns.deregister_table(lance_namespace.DeregisterTableRequest(id=["meta", "renamed"]))
    assert os.path.isdir(gone.location)  # deregistered, data kept
    ns.register_table(lance_namespace.RegisterTableRequest(id=["meta", "back"], location=gone.location))
    assert cat.load_table("meta.back").count_rows() == 1
    with pytest.raises(nserr.InvalidInputError):  # nothing there
        ns.register_table(lance_namespace.RegisterTableRequest(id=["meta", "r"], location=str(cat.warehouse) + "/x"))
    for outside in ("/etc", str(cat.warehouse) + "/../elsewhere"):  # a client does not choose server paths
        with pytest.raises(nserr.InvalidInputError, match="outside the server's warehouse"):
            ns.register_table(lance_namespace.RegisterTableRequest(id=["meta", "r"], location=outside))
    with pytest.raises(nserr.UnsupportedOperationError):  # no such route here: 404, code 0
        ns.get_table_stats(lance_namespace.GetTableStatsRequest(id=["meta", "back"]))
    _error(server.http("POST", "/v1/table/meta%24back/frobnicate", {}), 404, 0)
    _error(server.http("GET", "/v1/nothing"), 404, 0)
    _error(server.http("POST", "/v1/table/meta%24back/declare/"), 404, 0)  # no redirect
    _error(server.http("GET", "/v1/table/meta%24back/describe"), 405, 0)
    assert server.http("GET", "/v1/table/meta%24back/describe")[2]["allow"] == "POST"
    _error(server.http("POST", "/v1/namespace/meta/table/list"), 405, 0)
    assert server.http("POST", "/v1/namespace/meta/table/list")[2]["allow"] == "GET, HEAD"
    status, body, headers = server.http("HEAD", "/v1/namespace/meta/table/list")  # a GET route answers HEAD
    assert status == 200 and body is None and int(headers["content-length"]) > 0
    for odd in ("/v1/table//describe", "/v2/table/meta%24back/describe", "/v1/table/meta%24back", "/"):
        _error(server.http("POST", odd, {}), 404, 0)
    assert sorted(cat.list_tables("meta")) == ["meta.back", "meta.t2"]


def _race(server, tid: list[str], writers: int = 4, commits: int = 4) -> None:
    """``writers`` threads, each with its own client, append ``commits`` rows one commit at a time."""
    lance.write_dataset(pa.table({"w": [-1], "k": [-1]}), namespace_client=server.client(), table_id=tid, mode="create")
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        ns = server.client()
        try:
            for k in range(commits):
                lance.write_dataset(pa.table({"w": [w], "k": [k]}), namespace_client=ns, table_id=tid, mode="append")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors, errors


def _check_race(server, tid: list[str], writers: int = 4, commits: int = 4) -> None:
    with tessera.connect(warehouse=server.warehouse) as cat:
        assert _same_everywhere(cat, server.client(), tid) == 1 + writers * commits
        rows = cat.load_table(".".join(tid)).to_arrow()
    got = sorted(zip(rows.column("w").to_pylist(), rows.column("k").to_pylist()))
    assert got == [(-1, -1)] + [(w, k) for w in range(writers) for k in range(commits)]  # each commit exactly once


def test_four_pylance_writers_race_through_the_server(server):
    server.client().create_namespace(lance_namespace.CreateNamespaceRequest(id=["race"]))
    _race(server, ["race", "t"])
    _check_race(server, ["race", "t"])


def test_requests_without_the_token_are_refused_and_write_nothing(server, cat):
    server.client().create_namespace(lance_namespace.CreateNamespaceRequest(id=["auth"]))
    before = _snapshot(cat, server.warehouse)
    for headers in [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": TOKEN},
        {"Authorization": f"Basic {TOKEN}"},
    ]:
        for method, path, body in [
            ("POST", "/v1/namespace/evil/create", {"id": ["evil"]}),
            ("POST", "/v1/table/auth%24t/declare", {"id": ["auth", "t"]}),
            ("POST", "/v1/table/auth%24t/version/create", {"version": 1, "manifest_path": "x"}),
            ("GET", "/v1/namespace/%24/list", None),
            ("POST", "/v1/no/such/route", {}),
        ]:
            resp = server.http(method, path, body, headers=headers, auth=False)
            _error(resp, 401, 16)
            assert resp[2].get("www-authenticate") == "Bearer"
    for token in (None, "wrong"):
        ns = server.client(token=token)
        with pytest.raises(nserr.UnauthenticatedError):
            ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["evil"]))
        with pytest.raises(Exception, match="(?i)unauthenticated|bearer"):
            lance.write_dataset(pa.table({"i": [1]}), namespace_client=ns, table_id=["auth", "t"], mode="create")
    assert _snapshot(cat, server.warehouse) == before
    # the right token (pylance sends the property header.Authorization as the header Authorization)
    lance.write_dataset(pa.table({"i": [1]}), namespace_client=server.client(), table_id=["auth", "t"], mode="create")
    assert cat.load_table("auth.t").to_arrow().column("i").to_pylist() == [1]
    assert re.search(r"request method=POST route=- status=401 ms=\d+\.\d code=16", server.log())


def test_malformed_ids_and_bodies_are_refused_and_write_nothing(server, cat):
    ns = server.client()
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["val"]))
    lance.write_dataset(pa.table({"i": [1, 2]}), namespace_client=ns, table_id=["val", "t"], mode="create")
    before = _snapshot(cat, server.warehouse)
    bad_ids = [
        "val%24%24t",  # empty part
        "%24t",
        "val%24",
        "..",
        "val%24..",
        "val%24a.b",  # '.' would name a nested namespace
        "val%2Ft",  # '/' (encoded)
        "val%5Ct",  # '\'
        "val%24t%01",  # control characters
        "val%24t%0A",
        "val%24" + "x" * 300,  # too long
        "%24".join(["a"] * 17),  # too many parts
    ]
    for ident in bad_ids:
        _error(server.http("POST", f"/v1/table/{ident}/declare", {}), 400, 13)
        _error(server.http("POST", f"/v1/table/{ident}/version/create", {"version": 2, "manifest_path": "x"}), 400, 13)
        _error(server.http("POST", f"/v1/namespace/{ident}/create", {}), 400, 13)
    _error(server.http("POST", "/v1/table/%24/declare", {}), 400, 13)  # the root is no table
    for delimiter in ("", "%2F", "%01", "x" * 9):
        _error(server.http("POST", f"/v1/table/val%24t/describe?delimiter={delimiter}", {}), 400, 13)
    # a part holding the delimiter cannot come from the path; in the body it differs from the path
    _error(server.http("POST", "/v1/table/val%24t/declare", {"id": ["val$t"]}), 400, 13)
    _error(server.http("POST", "/v1/table/val%24u/declare", {"id": ["val", "other"]}), 400, 13)
    # other delimiters
    for ident, delimiter in (("val.t", "."), ("val%3A%3At", "%3A%3A")):
        status, body, _ = server.http("POST", f"/v1/table/{ident}/describe?delimiter={delimiter}", {})
        assert status == 200 and body["location"] == cat.table_info("val.t")["uri"]
    # bodies
    for raw in (b"{not json", b"[1, 2]", b'"x"', b"[" * 60000):
        _error(server.http("POST", "/v1/table/val%24t/version/create", raw), 400, 13)
    _error(server.http("POST", "/v1/table/val%24t/version/create", {"version": "2", "manifest_path": "x"}), 400, 13)
    _error(server.http("POST", "/v1/table/val%24t/version/create", {"manifest_path": "x"}), 400, 13)
    _error(server.http("POST", "/v1/table/val%24u/declare", {"location": "/tmp/elsewhere"}), 400, 13)
    for query in ("limit=-1", "limit=abc", "descending=maybe", "page_token=%01"):
        _error(server.http("POST", f"/v1/table/val%24t/version/list?{query}"), 400, 13)
    # oversized: by Content-Length (refused before reading) and streamed (chunked, no length)
    big = {"id": ["val", "u"], "properties": {"k": "x" * MAX_BODY}}
    _error(server.http("POST", "/v1/table/val%24u/declare", json.dumps(big).encode()), 413, 13)
    chunks = [b'{"id": ["val", "u"], "properties": {"k": "'] + [b"x" * 8192] * 9 + [b'"}}']
    _error(server.http("POST", "/v1/table/val%24u/declare", iter(chunks)), 413, 13)
    _error(server.http("POST", "/v1/table/val%24u/declare", b"{}", headers={"Content-Length": "9999999"}), 413, 13)
    # through pylance
    with pytest.raises(nserr.InvalidInputError):
        lance.write_dataset(pa.table({"i": [1]}), namespace_client=ns, table_id=["val", "a.b"], mode="create")
    assert _snapshot(cat, server.warehouse) == before
    assert cat.load_table("val.t").version == 1
    assert lance.dataset(namespace_client=ns, table_id=["val", "t"]).to_table().column("i").to_pylist() == [1, 2]


def test_two_worker_processes_serve_concurrent_writers(tmp_path):
    token = "env-token-for-two-workers"
    srv = Server(
        tmp_path,
        *("--workers", "2", "--vend-storage-options", "-s", "region=nowhere-1", "--commit-store", "catalog"),
        token=token,
        env={"TESSERA_SERVER_TOKEN": token},
    )
    try:
        # both workers have started (on a loaded machine the second can take seconds) ...
        deadline = time.monotonic() + 60
        while srv.log().count("Application startup complete") < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        # ... and both answer (each fresh connection goes to whichever worker accepts it)
        pids: set[str] = set()
        for _ in range(200):
            assert srv.http("GET", "/v1/namespace/%24/list")[0] == 200
            pids = set(re.findall(r"tessera\.server\[(\d+)\] request", srv.log()))
            if len(pids) >= 2:
                break
        assert len(pids) == 2, srv.log()
        _error(srv.http("GET", "/v1/namespace/%24/list", auth=False), 401, 16)  # the token from the environment
        srv.client().create_namespace(lance_namespace.CreateNamespaceRequest(id=["mp"]))
        _race(srv, ["mp", "t"])
        _check_race(srv, ["mp", "t"])
        # this server vends its storage options, and its tables commit through the catalog database
        status, body, _ = srv.http("POST", "/v1/table/mp%24t/describe", {})
        assert status == 200 and body["storage_options"] == {"region": "nowhere-1"}
        with tessera.connect(warehouse=srv.warehouse) as cat:
            assert cat.table_info("mp.t")["commit_store"] == "catalog"
    finally:
        srv.stop()


def test_tessera_writes_through_the_server_with_its_token(server, cat):
    """A Tessera Table reached by the server's URL commits through it; without the token it is refused."""
    ns = server.client()
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["remote"]))
    tid = ["remote", "t"]
    lance.write_dataset(pa.table({"i": [1, 2]}), namespace_client=ns, table_id=tid)
    auth = {"header.Authorization": f"Bearer {TOKEN}"}
    t = tessera.Table.open("remote.t", namespace=server.uri, namespace_properties=auth)
    t.append(pa.table({"i": [3]}))
    t.delete("i = 1")
    assert t.version == 3
    ds = lance.write_dataset(pa.table({"i": [4]}), namespace_client=ns, table_id=tid, mode="append")
    assert ds.version == 4
    t.append(pa.table({"i": [5]}))  # stale at 3: the server refuses 4, the writer rebases to 5
    assert t.version == 5
    assert sorted(cat.load_table("remote.t").to_arrow().column("i").to_pylist()) == [2, 3, 4, 5]
    with pytest.raises(tessera.errors.NamespaceError, match="(?i)unauth|401|token"):
        tessera.Table.open("remote.t", namespace=server.uri)
    assert cat.load_table("remote.t").version == 5


def test_a_lost_reply_to_version_create_ends_in_one_commit(server, cat):
    """A proxy drops the reply of /version/create after the server committed:
    pylance reads the version back, finds its own manifest and succeeds."""
    from tessera_test_fault_proxy import FaultProxy

    ns = server.client()
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["lossy"]))
    tid = ["lossy", "t"]
    lance.write_dataset(pa.table({"i": [1]}), namespace_client=ns, table_id=tid)
    with FaultProxy("127.0.0.1", server.port) as proxy:
        via = lance_namespace.connect(
            "rest", {"uri": f"http://127.0.0.1:{proxy.port}", "header.Authorization": f"Bearer {TOKEN}"}
        )
        proxy.arm("/version/create", "drop")
        ds = lance.write_dataset(pa.table({"i": [2]}), namespace_client=via, table_id=tid, mode="append")
        assert proxy.fired.is_set()  # the reply really was lost
    assert ds.version == 2
    t = cat.load_table("lossy.t")
    assert t.version == 2 and sorted(t.to_arrow().column("i").to_pylist()) == [1, 2]
    assert [v["version"] for v in t.versions()] == [1, 2]


def test_a_server_killed_between_reserve_and_copy_is_finished_by_the_next_request(tmp_path):
    """The server dies after reserving the version in the store, before the
    manifest is published: pylance reports the outcome unknown, and the next
    request to a restarted server finishes the commit."""
    crash = "import os\nfrom tessera.commit import faults\nfaults.set_action(faults.RESERVED, lambda: os._exit(17))"
    first = Server(tmp_path, "--commit-store", "catalog", token=None)
    ns = first.client()
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["crash"]))
    tid = ["crash", "t"]
    lance.write_dataset(pa.table({"i": [1]}), namespace_client=ns, table_id=tid)
    first.stop()
    dying = Server(tmp_path, "--commit-store", "catalog", token=None, prelude=crash)
    try:
        with pytest.raises(OSError):
            lance.write_dataset(pa.table({"i": [2]}), namespace_client=dying.client(), table_id=tid, mode="append")
        assert dying.proc.wait(20) == 17  # it died at the fault point
    finally:
        dying.stop()
    again = Server(tmp_path, "--commit-store", "catalog", token=None)
    try:
        ds = lance.dataset(namespace_client=again.client(), table_id=tid)  # finishes version 2
        assert ds.version == 2 and sorted(ds.to_table().column("i").to_pylist()) == [1, 2]
        cat = tessera.connect(warehouse=again.warehouse)
        assert [v["version"] for v in cat.load_table("crash.t").versions()] == [1, 2]
        cat.close()
    finally:
        again.stop()


@pytest.mark.parametrize("store", ["native", "catalog"])
def test_pylance_through_the_server_on_s3(store, moto_server, tmp_path):
    """The server's warehouse on S3 (moto): pylance commits through the server
    with the native conditional put or the catalog's store; Tessera agrees."""
    bucket = moto_server.new_bucket()
    opts = moto_server.storage_options()
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    args = ["--commit-store", store, *[a for k, v in opts.items() for a in ("-s", f"{k}={v}")]]
    srv = Server(tmp_path, *args, token=None, warehouse=f"s3://{bucket}/wh", catalog=catalog)
    lopts = moto_server.lance_storage_options()
    try:
        ns = srv.client()
        ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["s"]))
        tid = ["s", "t"]
        lance.write_dataset(pa.table({"a": [1, 2]}), namespace_client=ns, table_id=tid, storage_options=lopts)
        ds = lance.write_dataset(
            pa.table({"a": [3]}), namespace_client=ns, table_id=tid, mode="append", storage_options=lopts
        )
        ds.delete("a = 1")
        cat = tessera.connect(warehouse=f"s3://{bucket}/wh", uri=catalog, storage_options=opts)
        t = cat.load_table("s.t")
        assert t.version == 3 and sorted(t.to_arrow().column("a").to_pylist()) == [2, 3]
        assert (cat.table_info("s.t")["commit_store"] == "catalog") == (store == "catalog")
        for v in (1, 2, 3):
            theirs = lance.dataset(namespace_client=ns, table_id=tid, version=v, storage_options=lopts).to_table()
            assert cat.load_table("s.t", version=v).to_arrow().sort_by("a").equals(theirs.sort_by("a"))
        assert [n for n in t.store.list("_versions") if ".manifest-" in n] == []
        cat.drop_table("s.t", purge=True)
        cat.close()
    finally:
        srv.stop()
