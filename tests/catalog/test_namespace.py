"""Tessera as a Lance Namespace (Python plugin): pylance commits through
Tessera's coordinators with managed versioning, and Tessera reads every
version as pylance does."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from tessera_test_services import namespace_warehouse, run_in_threads

import tessera
from tessera.catalog.namespace import TesseraNamespace

lance = pytest.importorskip("lance")
lance_namespace = pytest.importorskip("lance_namespace")
from lance_namespace import errors as nserr  # noqa: E402

COORDINATORS = ["native", "catalog", "redis", "postgres"]


@pytest.fixture(params=COORDINATORS)
def warehouse(request, tmp_path):
    """(namespace properties, the catalog) for a warehouse whose tables use one coordinator."""
    with namespace_warehouse(request, tmp_path, request.param, "sales") as got:
        yield got


def _ns(props: dict) -> TesseraNamespace:
    ns = lance_namespace.connect("tessera", props)
    assert isinstance(ns, TesseraNamespace)
    return ns


def _same_everywhere(cat, ns, tid: list[str]) -> int:
    """Every version read by Tessera equals pylance's; returns the latest version."""
    t = cat.load_table(".".join(tid))
    latest = lance.dataset(namespace_client=ns, table_id=tid)
    assert t.version == latest.version
    assert [v["version"] for v in t.versions()] == list(range(1, t.version + 1))  # contiguous
    for v in range(1, t.version + 1):
        theirs = lance.dataset(namespace_client=ns, table_id=tid, version=v).to_table()
        ours = cat.load_table(".".join(tid), version=v).to_arrow()
        key = theirs.column_names[0]
        assert ours.sort_by(key).equals(theirs.sort_by(key)), f"version {v} differs"
    staged = [n for n in os.listdir(os.path.join(t.uri, "_versions")) if ".manifest-" in n]
    assert staged == []  # every staged manifest was finalised and removed
    return t.version


def test_pylance_operations_commit_through_tessera(warehouse):
    props, cat = warehouse
    ns = _ns(props)
    tid = ["sales", "orders"]
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
    ds.checkout_version(3).restore()
    ds = lance.write_dataset(  # overwrite through the namespace: a new version, the old ones kept
        pa.table({"id": pa.array([7, 8], pa.int64()), "v": ["o", "p"], "w": pa.array([14, 16], pa.int64())}),
        namespace_client=ns,
        table_id=tid,
        mode="overwrite",
    )
    assert ds.count_rows() == 2
    latest = _same_everywhere(cat, ns, tid)
    assert latest >= 10
    # Tessera writes in between and pylance continues on top
    t = cat.load_table("sales.orders")
    t.append(t.to_arrow().slice(0, 1))
    ds = lance.write_dataset(
        lance.dataset(namespace_client=ns, table_id=tid).to_table().slice(0, 1),
        namespace_client=ns,
        table_id=tid,
        mode="append",
    )
    assert ds.version == latest + 2
    assert lance.dataset(namespace_client=ns, table_id=tid, version="before-restore").version < latest
    _same_everywhere(cat, ns, tid)


def test_stale_writer_rebases_and_a_resent_commit_succeeds(warehouse):
    props, cat = warehouse
    calls: list[tuple[str, object]] = []

    class Spy(TesseraNamespace):
        def create_table_version(self, request):  # type: ignore[override]
            try:
                out = super().create_table_version(request)
                calls.append(("ok", request))
                return out
            except nserr.LanceNamespaceError as exc:
                calls.append((type(exc).__name__, request))
                raise

    ns = Spy(**props)
    tid = ["sales", "t"]
    ds = lance.write_dataset(pa.table({"i": [1, 2, 3]}), namespace_client=ns, table_id=tid, mode="create")
    stale = lance.dataset(namespace_client=ns, table_id=tid)
    lance.write_dataset(pa.table({"i": [4]}), namespace_client=_ns(props), table_id=tid, mode="append")
    lance.write_dataset(pa.table({"i": [5]}), namespace_client=_ns(props), table_id=tid, mode="append")
    stale.delete("i = 1")  # built on version 1: refused as taken or found on storage, then rebased
    assert sorted(lance.dataset(namespace_client=ns, table_id=tid).to_table().column("i").to_pylist()) == [2, 3, 4, 5]
    assert _same_everywhere(cat, ns, tid) == 4
    # pylance found versions 2 and 3 on storage (they are final when create_table_version returns)
    assert [r["version"] for kind, r in calls if kind == "ok"] == [1, 4]  # pylance passes dicts
    # the same request again (a lost reply), its staged file removed: "taken" (pylance reads the version back)
    first = lance_namespace.CreateTableVersionRequest(**next(dict(r) for kind, r in calls if kind == "ok"))
    with pytest.raises(nserr.ConcurrentModificationError, match="describe_table_version"):
        ns.create_table_version(first)
    # ... and with its staged file still there (a crash before the removal): success, nothing new
    root = cat.table_info("sales.t")["uri"]
    final = os.path.join(root, "_versions", "18446744073709551614.manifest")
    staged = "/" + first.manifest_path if not first.manifest_path.startswith("/") else first.manifest_path
    with open(final, "rb") as src, open(staged, "wb") as dst:
        dst.write(src.read())
    again = ns.create_table_version(first)
    assert again.version.version == 1 and not os.path.exists(staged)
    assert cat.load_table("sales.t").version == 4
    del ds


def test_bad_requests_are_refused_and_write_nothing(warehouse, tmp_path):
    props, cat = warehouse
    ns = _ns(props)
    tid = ["sales", "b"]
    lance.write_dataset(pa.table({"i": [1]}), namespace_client=ns, table_id=tid, mode="create")
    root = cat.table_info("sales.b")["uri"]
    before = sorted(os.listdir(os.path.join(root, "_versions")))
    secret = tmp_path / "secret.manifest-0000"
    secret.write_bytes(b"not yours")
    rel_root = root.lstrip("/")
    bad_paths = [
        str(secret).lstrip("/"),  # outside the table
        f"{rel_root}/_versions/../../secret.manifest-0000",  # traversal
        f"{rel_root}/_versions/18446744073709551613.manifest",  # not a staged name
        f"{rel_root}/_versions/18446744073709551612.manifest-abc",  # staged name of another version
        f"{rel_root}/_versions/18446744073709551613.manifest-nothere",  # missing
    ]
    for path in bad_paths:
        req = lance_namespace.CreateTableVersionRequest(id=tid, version=2, manifest_path=path, naming_scheme="V2")
        with pytest.raises(nserr.InvalidInputError):
            ns.create_table_version(req)
    with pytest.raises(nserr.InvalidInputError):
        ns.create_table_version(
            lance_namespace.CreateTableVersionRequest(id=tid, version=0, manifest_path="x", naming_scheme="V2")
        )
    with pytest.raises(nserr.TableNotFoundError):
        ns.describe_table(lance_namespace.DescribeTableRequest(id=["sales", "nope"]))
    with pytest.raises(nserr.TableVersionNotFoundError):
        ns.describe_table_version(lance_namespace.DescribeTableVersionRequest(id=tid, version=7))
    with pytest.raises(nserr.TableAlreadyExistsError):
        lance.write_dataset(pa.table({"i": [1]}), namespace_client=ns, table_id=tid, mode="create")
    assert sorted(os.listdir(os.path.join(root, "_versions"))) == before
    assert secret.read_bytes() == b"not yours"
    assert cat.load_table("sales.b").to_arrow().column("i").to_pylist() == [1]


def test_four_writers_race_through_the_namespace(warehouse):
    props, cat = warehouse
    tid = ["sales", "race"]
    lance.write_dataset(pa.table({"w": [-1], "k": [-1]}), namespace_client=_ns(props), table_id=tid, mode="create")

    def writer(w: int) -> None:
        ns = _ns(props)
        for k in range(5):
            lance.write_dataset(pa.table({"w": [w], "k": [k]}), namespace_client=ns, table_id=tid, mode="append")

    errors = run_in_threads(writer, 4)
    assert not errors, errors
    ns = _ns(props)
    assert _same_everywhere(cat, ns, tid) == 21
    rows = cat.load_table("sales.race").to_arrow()
    got = sorted(zip(rows.column("w").to_pylist(), rows.column("k").to_pylist()))
    assert got == [(-1, -1)] + [(w, k) for w in range(4) for k in range(5)]  # each commit exactly once


def test_namespaces_and_tables_are_the_catalogs(tmp_path):
    props = {"warehouse": str(tmp_path / "wh")}
    ns = _ns(props)
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["a"], properties={"owner": "ana"}))
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["a", "b"]))
    with pytest.raises(nserr.NamespaceAlreadyExistsError):
        ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["a"]))
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["a"], mode="exist_ok"))
    assert ns.list_namespaces(lance_namespace.ListNamespacesRequest(id=[])).namespaces == ["a"]
    assert ns.list_namespaces(lance_namespace.ListNamespacesRequest(id=["a"])).namespaces == ["b"]
    assert ns.describe_namespace(lance_namespace.DescribeNamespaceRequest(id=["a"])).properties == {"owner": "ana"}
    for name in ("t3", "t1", "t2"):
        lance.write_dataset(pa.table({"i": [1]}), namespace_client=ns, table_id=["a", name], mode="create")
    page = ns.list_tables(lance_namespace.ListTablesRequest(id=["a"], limit=2))
    assert page.tables == ["t1", "t2"] and page.page_token
    rest = ns.list_tables(lance_namespace.ListTablesRequest(id=["a"], limit=2, page_token=page.page_token))
    assert rest.tables == ["t3"] and rest.page_token is None
    assert sorted(tessera.connect(warehouse=props["warehouse"]).list_tables("a")) == ["a.t1", "a.t2", "a.t3"]
    with pytest.raises(nserr.NamespaceNotEmptyError):
        ns.drop_namespace(lance_namespace.DropNamespaceRequest(id=["a"]))
    # a one-part table id lives in the root namespace ("default")
    lance.write_dataset(pa.table({"i": [7]}), namespace_client=ns, table_id=["solo"], mode="create")
    assert tessera.connect(warehouse=props["warehouse"]).load_table("default.solo").to_arrow()["i"].to_pylist() == [7]
    with pytest.raises(nserr.InvalidInputError):
        ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["../x"]))
    with pytest.raises(nserr.InvalidInputError):  # "a.b" would silently be the nested namespace a -> b
        ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["a.b"]))
    with pytest.raises(nserr.InvalidInputError):
        ns.describe_table(lance_namespace.DescribeTableRequest(id=["a", "t1.x"]))
    with pytest.raises(ValueError, match="unknown TesseraNamespace properties"):
        lance_namespace.connect("tessera", {**props, "warehous": "typo"})


@pytest.mark.parametrize("order", ["tessera first", "lance_namespace first", "class path only"])
def test_connect_by_short_name_or_class_path(order, tmp_path):
    """``import tessera`` registers the short name without importing lance_namespace
    (half a second); the class path works without importing tessera at all."""
    import subprocess
    import sys

    wh = str(tmp_path / "wh")
    body = {
        "tessera first": "import tessera; assert 'lance_namespace' not in sys.modules; import lance_namespace as L; "
        "ns = L.connect('tessera', {'warehouse': W})",
        "lance_namespace first": "import lance_namespace as L, tessera; ns = L.connect('tessera', {'warehouse': W})",
        "class path only": "import lance_namespace as L; "
        "ns = L.connect('tessera.catalog.namespace.TesseraNamespace', {'warehouse': W})",
    }[order]
    code = f"import sys; W = {wh!r}; {body}; print(type(ns).__name__, ns.namespace_id())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("TesseraNamespace TesseraNamespace('sqlite:")


@pytest.mark.parametrize("store", ["native", "catalog", "dynamodb", "redis", "postgres"])
def test_pylance_through_the_namespace_on_s3(store, moto_server, tmp_path, request):
    from tessera_test_services import new_dynamodb_store_url

    bucket = moto_server.new_bucket()
    if store == "dynamodb":
        commit_store = new_dynamodb_store_url(moto_server)
    elif store in ("redis", "postgres"):
        commit_store = request.getfixturevalue(f"{store}_url")
    else:
        commit_store = store
    opts = moto_server.storage_options()
    props = {
        "warehouse": f"s3://{bucket}/wh",
        "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
        "commit_store": commit_store,
        **{f"storage.{k}": v for k, v in opts.items()},
    }
    lopts = moto_server.lance_storage_options()
    ns = _ns(props)
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["s"]))
    tid = ["s", "t"]
    lance.write_dataset(pa.table({"a": [1, 2]}), namespace_client=ns, table_id=tid, storage_options=lopts)
    ds = lance.write_dataset(
        pa.table({"a": [3]}), namespace_client=ns, table_id=tid, mode="append", storage_options=lopts
    )
    ds.delete("a = 1")
    cat = tessera.connect(warehouse=props["warehouse"], uri=props["uri"], storage_options=opts)
    try:
        assert (cat.table_info("s.t")["commit_store"] == "catalog") == (store == "catalog")
        t = cat.load_table("s.t")
        assert t.version == 3 and sorted(t.to_arrow().column("a").to_pylist()) == [2, 3]
        t.append(pa.table({"a": [4]}))  # Tessera continues the table pylance created
        again = lance.dataset(namespace_client=ns, table_id=tid, storage_options=lopts)
        assert again.version == 4 and sorted(again.to_table().column("a").to_pylist()) == [2, 3, 4]
        for v in range(1, 5):
            theirs = lance.dataset(namespace_client=ns, table_id=tid, version=v, storage_options=lopts).to_table()
            assert cat.load_table("s.t", version=v).to_arrow().sort_by("a").equals(theirs.sort_by("a"))
        staged = [n for n in t.store.list("_versions") if ".manifest-" in n]
        assert staged == []
    finally:
        cat.drop_table("s.t", purge=True)
        cat.close()


def test_a_lost_reply_is_read_back_as_success(warehouse):
    """The namespace commits, then the reply is lost: pylance reads the version
    back, finds its own manifest and succeeds; the commit is there once."""
    props, cat = warehouse
    lost: list[int] = []

    class LosesReplies(TesseraNamespace):
        def create_table_version(self, request):  # type: ignore[override]
            out = super().create_table_version(request)
            if not lost:
                lost.append(out.version.version)
                raise nserr.ServiceUnavailableError("the reply was lost")
            return out

    ns = LosesReplies(**props)
    tid = ["sales", "lost"]
    lance.write_dataset(pa.table({"i": [1]}), namespace_client=_ns(props), table_id=tid, mode="create")
    ds = lance.write_dataset(pa.table({"i": [2]}), namespace_client=ns, table_id=tid, mode="append")
    assert lost == [2] and ds.version == 2
    assert _same_everywhere(cat, _ns(props), tid) == 2
    assert sorted(cat.load_table("sales.lost").to_arrow().column("i").to_pylist()) == [1, 2]


@pytest.mark.parametrize("store", ["catalog", "redis"])
def test_a_crash_between_reserve_and_copy_is_finished_by_the_next_request(store, request, tmp_path):
    """A namespace process dies after reserving the version in the store and
    before publishing the manifest: the next request finishes the commit."""
    import subprocess
    import sys

    commit_store = request.getfixturevalue("redis_url") if store == "redis" else store
    props = {"warehouse": str(tmp_path / "wh"), "commit_store": commit_store}
    ns = _ns(props)
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["sales"]))
    tid = ["sales", "crash"]
    lance.write_dataset(pa.table({"i": [1]}), namespace_client=ns, table_id=tid, mode="create")
    code = (
        "import os, lance, lance_namespace, pyarrow as pa, tessera\n"
        "from tessera.commit import faults\n"
        "faults.set_action(faults.RESERVED, lambda: os._exit(17))\n"
        f"ns = lance_namespace.connect('tessera', {props!r})\n"
        f"lance.write_dataset(pa.table({{'i': [2]}}), namespace_client=ns, table_id={tid!r}, mode='append')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 17, out.stderr
    cat = tessera.connect(warehouse=props["warehouse"])
    try:
        root = cat.table_info("sales.crash")["uri"]
        assert [n for n in os.listdir(os.path.join(root, "_versions")) if ".manifest-" in n]  # staged, not copied
        fresh = _ns(props)
        ds = lance.dataset(namespace_client=fresh, table_id=tid)  # list_table_versions finishes version 2
        assert ds.version == 2 and sorted(ds.to_table().column("i").to_pylist()) == [1, 2]
        assert _same_everywhere(cat, fresh, tid) == 2
        ds = lance.write_dataset(pa.table({"i": [3]}), namespace_client=fresh, table_id=tid, mode="append")
        assert ds.version == 3
    finally:
        cat.drop_table("sales.crash", purge=True)
        cat.close()


def test_tessera_writes_through_a_namespace(warehouse):
    """A Tessera Table reached through a namespace commits via create_table_version,
    interleaved with pylance; concurrent Tessera writers rebase as usual."""
    props, cat = warehouse
    ns = _ns(props)
    tid = ["sales", "client"]
    lance.write_dataset(pa.table({"i": [1, 2, 3]}), namespace_client=ns, table_id=tid, mode="create")
    t = tessera.Table.open("sales.client", namespace=ns)
    t.append(pa.table({"i": [4]}))
    t.delete("i = 1")
    t.update({"i": "i * 10"}, where="i = 4")
    assert t.version == 4
    lance.write_dataset(pa.table({"i": [5]}), namespace_client=ns, table_id=tid, mode="append")
    t2 = tessera.Table.open(["sales", "client"], namespace=_ns(props))
    assert t2.version == 5 and sorted(t2.to_arrow().column("i").to_pylist()) == [2, 3, 5, 40]
    t.append(pa.table({"i": [6]}))  # stale handle (version 4): conflict, rebase, version 6
    assert t.version == 6

    def writer(i: int) -> None:
        w = i + 1  # writers 1, 2, 3
        mine = tessera.Table.open("sales.client", namespace=_ns(props))
        for k in range(3):
            mine.append(pa.table({"i": [100 * w + k]}))

    errors = run_in_threads(writer, 3)
    assert not errors, errors
    assert _same_everywhere(cat, ns, tid) == 15
    got = sorted(cat.load_table("sales.client").to_arrow().column("i").to_pylist())
    assert got == sorted([2, 3, 5, 40, 6] + [100 * w + k for w in (1, 2, 3) for k in range(3)])
    with pytest.raises(tessera.errors.TableNotFoundError):
        tessera.Table.open("sales.nothing", namespace=ns)


def test_pylance_cleanup_bypasses_the_namespace_and_nothing_crashes(warehouse):
    """pylance's cleanup_old_versions deletes manifests behind the store's back:
    the namespace lists what is left, an old version is a typed 'not found',
    and the latest keeps working for both writers."""
    import datetime as dt

    props, cat = warehouse
    ns = _ns(props)
    tid = ["sales", "gc"]
    ds = lance.write_dataset(pa.table({"i": [1]}), namespace_client=ns, table_id=tid, mode="create")
    for i in range(2, 5):
        ds = lance.write_dataset(pa.table({"i": [i]}), namespace_client=ns, table_id=tid, mode="append")
    ds.cleanup_old_versions(older_than=dt.timedelta(0))
    listed = ns.list_table_versions(lance_namespace.ListTableVersionsRequest(id=tid))
    assert [v.version for v in listed.versions] == [4]
    with pytest.raises(nserr.TableVersionNotFoundError):
        ns.describe_table_version(lance_namespace.DescribeTableVersionRequest(id=tid, version=2))
    with pytest.raises(tessera.errors.VersionNotFoundError):
        cat.load_table("sales.gc", version=2)
    t = cat.load_table("sales.gc")
    t.append(pa.table({"i": [5]}))
    ds = lance.write_dataset(pa.table({"i": [6]}), namespace_client=ns, table_id=tid, mode="append")
    assert ds.version == 6 and sorted(t.refresh().to_arrow().column("i").to_pylist()) == [1, 2, 3, 4, 5, 6]


def test_a_pylance_writer_by_uri_beside_the_namespace_is_adopted(warehouse):
    """pylance opening the table by URI commits straight to storage, bypassing
    the namespace: the next namespace request adopts that version (never
    overwritten, never lost), and writers through the namespace continue after it."""
    props, cat = warehouse
    ns = _ns(props)
    tid = ["sales", "bypass"]
    lance.write_dataset(pa.table({"i": [1]}), namespace_client=ns, table_id=tid, mode="create")
    uri = cat.table_info("sales.bypass")["uri"]
    lance.write_dataset(pa.table({"i": [2]}), uri, mode="append")  # by URI: no namespace call
    ds = lance.write_dataset(pa.table({"i": [3]}), namespace_client=ns, table_id=tid, mode="append")
    assert ds.version == 3
    assert _same_everywhere(cat, ns, tid) == 3
    assert sorted(cat.load_table("sales.bypass").to_arrow().column("i").to_pylist()) == [1, 2, 3]
