"""Tables on Azure Blob (Azurite) and Google Cloud Storage (fake-gcs-server),
end to end: create, append, open, and writers in separate processes racing
to commit natively (each version decided by the store's own conditional
create: ``If-None-Match: *`` on Azure, ``ifGenerationMatch=0`` on GCS), with
none of their commits lost or doubled.  Also: opening a local table imports
neither SDK, and the schemes parse as the clients' URIs do."""

from __future__ import annotations

import json
import multiprocessing as mp
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

from tessera.catalog import Table
from tessera.stores import open_object_store, parse_table_uri
from tessera.stores.errors import AlreadyExistsError, InvalidStorageOptionError, InvalidURIError

WRITERS = 3
APPENDS = 3
SCHEMA = pa.schema([("w", pa.int32()), ("k", pa.int32())])


@pytest.fixture(params=["azure", "gcs"])
def cloud(request):
    """(a fresh table URI, its storage_options) on the emulator of the param."""
    if request.param == "azure":
        server = request.getfixturevalue("azurite")
        return f"az://{server.new_container()}/tables/t", server.storage_options()
    server = request.getfixturevalue("fake_gcs")
    return f"gs://{server.new_bucket()}/tables/t", server.storage_options()


def test_create_append_open(cloud):
    uri, opts = cloud
    Table.create(uri, pa.table({"w": pa.array([0], pa.int32()), "k": pa.array([0], pa.int32())}), storage_options=opts)
    t = Table.open(uri, storage_options=opts)
    t.append(pa.table({"w": pa.array([1, 2], pa.int32()), "k": pa.array([1, 2], pa.int32())}))
    again = Table.open(uri, storage_options=opts)
    assert again.version == 2
    assert sorted(again.to_arrow().column("w").to_pylist()) == [0, 1, 2]
    assert again.to_arrow(filter="w >= 1").num_rows == 2


def _writer(uri: str, opts: dict, w: int, q, start, scratch: str) -> None:
    try:
        batch = pa.table({"w": pa.array([w], pa.int32()), "k": pa.array([-1], pa.int32())})
        Table.create(scratch, batch)  # the write path imported before the race, not during it
        t = Table.open(uri, storage_options=opts)
        start.wait(120)  # every writer appends at once
        for k in range(APPENDS):
            t.append(pa.table({"w": pa.array([w], pa.int32()), "k": pa.array([k], pa.int32())}))
        q.put((w, "ok"))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        q.put((w, f"{type(exc).__name__}: {exc}"))


def test_concurrent_writers_commit_natively_and_lose_nothing(cloud, tmp_path):
    uri, opts = cloud
    Table.create(uri, SCHEMA, storage_options=opts)
    ctx = mp.get_context("spawn")  # fresh SDK clients in every writer
    q, start = ctx.Queue(), ctx.Barrier(WRITERS)
    procs = [
        ctx.Process(target=_writer, args=(uri, opts, w, q, start, str(tmp_path / f"scratch{w}")))
        for w in range(WRITERS)
    ]
    for p in procs:
        p.start()
    results = sorted(q.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(60)
    assert results == [(w, "ok") for w in range(WRITERS)], results
    t = Table.open(uri, storage_options=opts)
    assert t.version == 1 + WRITERS * APPENDS
    assert [h["version"] for h in t.versions()] == list(range(1, t.version + 1))
    rows = t.to_arrow()
    keys = list(zip(rows.column("w").to_pylist(), rows.column("k").to_pylist()))
    assert sorted(keys) == sorted((w, k) for w in range(WRITERS) for k in range(APPENDS))
    assert [n for n in t.store.list("_versions") if ".manifest-" in n] == []


def test_opening_a_local_table_imports_neither_sdk(tmp_path):
    uri = str(tmp_path / "t")
    script = textwrap.dedent(
        f"""
        import json, sys
        import pyarrow as pa
        from tessera.catalog import Table
        Table.create({uri!r}, pa.table({{"a": pa.array([1], pa.int64())}}))
        Table.open({uri!r}).append(pa.table({{"a": pa.array([2], pa.int64())}}))
        heavy = ("google.cloud.storage", "google.auth", "azure.storage.blob", "azure.core", "requests")
        print(json.dumps([m for m in heavy if m in sys.modules]))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize(
    "uri, scheme, bucket, path, key",
    [
        ("gs://bkt/a//b/", "gs", "bkt", "a/b", "gs://bkt/a/b"),
        ("az://ctr/a/b", "az", "ctr", "a/b", "az://ctr/a/b"),
        (
            "abfss://ctr@acct.dfs.core.windows.net/a/b",
            "abfs",
            "ctr",
            "a/b",
            "abfs://ctr@acct.dfs.core.windows.net/a/b",
        ),
        ("abfs://ctr@ACCT.dfs.core.windows.net", "abfs", "ctr", "", "abfs://ctr@acct.dfs.core.windows.net"),
    ],
)
def test_cloud_uris(uri, scheme, bucket, path, key):
    loc = parse_table_uri(uri)
    assert (loc.scheme, loc.bucket, loc.path, loc.key) == (scheme, bucket, path, key)


@pytest.mark.parametrize(
    "uri",
    ["gs://", "gs://bkt/t?x=1", "gs://user:pw@bkt/t", "az://ctr/a/../b", "abfs://acct.dfs.core.windows.net/t"],
)
def test_bad_cloud_uris(uri):
    with pytest.raises(InvalidURIError):
        open_object_store(uri, {"account_name": "acct"} if "//ctr" in uri else None)


@pytest.mark.parametrize(
    "uri, opts",
    [
        ("gs://bkt/t", {"no_such_option": 1}),
        ("gs://bkt/t", {"io_timeout": "soon"}),
        ("gs://bkt/t", {"skip_signature": True, "service_account_key": "{}"}),
        ("az://ctr/t", {"account_name": "a", "account_key": "k", "sas_token": "s"}),
        ("az://ctr/t", {}),  # no account anywhere
        ("abfs://ctr@one.dfs.core.windows.net/t", {"account_name": "two"}),
    ],
)
def test_bad_cloud_options(uri, opts):
    with pytest.raises(InvalidStorageOptionError):
        open_object_store(uri, opts)


def test_azure_account_from_the_abfs_host():
    store = open_object_store("abfss://ctr@acct.dfs.core.windows.net/t", {"account_key": "a2V5"})
    assert store.probe_scope == ("https://acct.blob.core.windows.net", "ctr")
    assert store.uri == "abfs://ctr@acct.dfs.core.windows.net/t"


def _lance_options(request, backend: str) -> tuple[str, dict]:
    """A fresh table URI and ``storage_options`` spelled as pylance spells them."""
    if backend == "azure":
        server = request.getfixturevalue("azurite")
        opts = {
            "azure_storage_account_name": server.account,
            "azure_storage_account_key": server.key,
            "azure_storage_endpoint": server.endpoint,
            "allow_http": "true",
        }
        return f"az://{server.new_container()}/t", opts
    server = request.getfixturevalue("fake_gcs")
    key = {"gcs_base_url": server.endpoint, "disable_oauth": True}
    key.update(client_email="", private_key="", private_key_id="")  # fields pylance's parser requires
    return f"gs://{server.new_bucket()}/t", {"google_service_account_key": json.dumps(key), "allow_http": "true"}


@pytest.mark.parametrize("backend", ["azure", "gcs"])
def test_pylance_reads_the_table_with_the_same_storage_options(request, lance, backend):
    uri, opts = _lance_options(request, backend)
    Table.create(uri, pa.table({"a": pa.array([1, 2], pa.int64())}), storage_options=opts)
    Table.open(uri, storage_options=opts).append(pa.table({"a": pa.array([3], pa.int64())}))
    ds = lance.dataset(uri, storage_options=opts)
    assert ds.version == 2
    assert sorted(ds.to_table().column("a").to_pylist()) == [1, 2, 3]
    if backend == "azure":  # fake-gcs-server has no XML-API PUT, which pylance writes GCS with
        lance.write_dataset(pa.table({"a": pa.array([4], pa.int64())}), uri, mode="append", storage_options=opts)
        t = Table.open(uri, storage_options=opts)
        assert t.version == 3
        assert sorted(t.to_arrow().column("a").to_pylist()) == [1, 2, 3, 4]


@pytest.mark.parametrize("backend", ["azure", "gcs"])
def test_timeouts_and_retries_are_taken(request, backend):
    settings = {"io_timeout": "5s", "connect_timeout": 2, "max_retries": 1}
    if backend == "azure":
        server = request.getfixturevalue("azurite")
        uri = f"az://{server.new_container()}/t"
    else:
        server = request.getfixturevalue("fake_gcs")
        uri = f"gs://{server.new_bucket()}/t"
    store = open_object_store(uri, {**server.storage_options(), **settings})
    store.put_if_not_exists("k", b"v")
    assert store.read("k") == b"v"


def test_azure_connection_string(azurite):
    conn = (
        f"DefaultEndpointsProtocol=http;AccountName={azurite.account};AccountKey={azurite.key};"
        f"BlobEndpoint={azurite.endpoint};"
    )
    store = open_object_store(f"az://{azurite.new_container()}/t", {"azure_storage_connection_string": conn})
    store.put_if_not_exists("k", b"v")
    with pytest.raises(AlreadyExistsError):
        store.put_if_not_exists("k", b"w")
    assert store.probe_scope == (azurite.endpoint, store.container)


def test_store_check_probes_a_cloud_location(cloud):
    """`tessera store check gs://... / az://...` probes the conditional put (it
    took these URLs for manifest-store URLs before)."""
    from click.testing import CliRunner

    from tessera.catalog.cli import main

    uri, opts = cloud
    args = ["store", "check", uri.rsplit("/", 1)[0] + "/probe", "-o", "json"]
    for k, v in opts.items():
        args += ["-s", f"{k}={v}"]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    assert json.loads(out.output) == {"url": args[2], "kind": "object store", "conditional_put": "ok"}
