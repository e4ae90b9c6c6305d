"""S3ObjectStore against moto's HTTP server (real boto3 over real HTTP).

A store that ignores If-None-Match is a deliberately broken subclass; the
faults moto cannot produce (a lost response after the write was applied, a
request refused before it was sent) are tests/stores/test_cloud_faults.py's,
run against S3, GCS and Azure through one forwarding proxy."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pyarrow as pa
import pytest

from tessera import format as tformat
from tessera.format.errors import TruncatedFileError
from tessera.stores import open_object_store
from tessera.stores.errors import (
    AlreadyExistsError,
    BucketNotFoundError,
    ConditionalWriteUnsupportedError,
    InvalidStorageOptionError,
    InvalidURIError,
    ObjectChangedError,
    ObjectNotFoundError,
    StoreUnavailableError,
)
from tessera.stores.local import LocalObjectStore
from tessera.stores.probe import probe_conditional_put, reset_probe_cache
from tessera.stores.s3 import S3ObjectStore
from tessera.stores.s3_io import plan_requests
from tessera.stores.s3_options import S3Options
from tessera.stores.uri import parse_s3_uri

MiB = 1024 * 1024


@pytest.fixture
def bucket(moto_server) -> str:
    return moto_server.new_bucket()


@pytest.fixture
def store(moto_server, bucket) -> S3ObjectStore:
    s = S3ObjectStore(f"s3://{bucket}/tbl", moto_server.storage_options())
    yield s
    s.close()


def _keys(moto_server, bucket: str) -> list[str]:
    resp = moto_server.client("s3").list_objects_v2(Bucket=bucket)
    return sorted(o["Key"] for o in resp.get("Contents", []))


# -- URIs and options (no server) ---------------------------------------------------


@pytest.mark.parametrize(
    "uri, expected",
    [
        ("s3://bkt/a/b", ("bkt", "a/b")),
        ("s3://bkt/a//b/", ("bkt", "a/b")),
        ("s3a://my.bucket-1/t", ("my.bucket-1", "t")),
        ("s3://bkt", ("bkt", "")),
    ],
)
def test_parse_uri(uri, expected):
    assert parse_s3_uri(uri) == expected


@pytest.mark.parametrize(
    "uri",
    [
        "s3:///path",
        "s3://",
        "s3://Upper/t",
        "s3://ab/t",
        "s3://bad_bucket-/t",
        "s3://b:9000/t",
        "s3://key:secret@bkt/t",
        "s3://bkt/t?x=1",
        "s3://bkt/a/../b",
        "s3://bkt/a\x00b",
        "s3://bkt/a#b",
    ],
)
def test_bad_uri(uri):
    with pytest.raises(InvalidURIError):
        open_object_store(uri)


def test_options_aliases_and_errors():
    o = S3Options.from_mapping(
        {
            "aws_endpoint": "localhost:9000",
            "allow_http": "true",
            "AWS_REGION": "eu-west-1",
            "connect_timeout": "500ms",
            "read_timeout": 7,
            "max_retries": "2",
        }
    )
    assert (o.endpoint_url, o.region, o.connect_timeout, o.read_timeout, o.max_retries) == (
        "http://localhost:9000",
        "eu-west-1",
        0.5,
        7.0,
        2,
    )
    assert o.addressing_style == "path"  # custom endpoints default to path style
    assert S3Options.from_mapping({"virtual_hosted_style_request": "true"}).addressing_style == "virtual"
    bad = [
        {"no_such_option": 1},
        {"connect_timeout": "soon"},
        {"max_retries": -1},
        {"allow_http": "maybe"},
        {"endpoint_url": "http://x:1", "allow_http": False},
        {"endpoint": "http://a", "endpoint_url": "http://b"},
        {"addressing_style": "sideways"},
        {"aws_access_key_id": "only-half"},
    ]
    for opts in bad:
        with pytest.raises(InvalidStorageOptionError) as err:
            S3Options.from_mapping(opts)
        assert isinstance(err.value, ValueError)
    with pytest.raises(InvalidStorageOptionError, match="no_such_option"):
        open_object_store("s3://bkt/t", {"no_such_option": 1})
    with pytest.raises(InvalidStorageOptionError, match="region"):
        S3ObjectStore("s3://bkt/t", {"region": "not a region!"})


def test_plan_requests_coalesces():
    ranges = [(0, 10), (100, 10), (5 * MiB, 10), (50, 100), (7, 0)]
    plan = plan_requests(ranges)
    assert [(a, b) for a, b, _ in plan] == [(0, 150), (5 * MiB, 5 * MiB + 10)]
    assert sorted(plan[0][2]) == [0, 1, 3]  # the zero-length range needs no GET
    # a merged request stops growing at 16 MiB
    assert len(plan_requests([(i * 4 * MiB, 4 * MiB) for i in range(8)])) == 2


# -- operations ---------------------------------------------------------------------


def test_open_object_store_s3(moto_server, bucket):
    s = open_object_store(f"s3a://{bucket}/x/y/", moto_server.storage_options())
    assert isinstance(s, S3ObjectStore)
    assert s.uri == f"s3://{bucket}/x/y"
    assert s.probe_scope == (moto_server.endpoint, bucket)


def test_basic_operations(store, moto_server, bucket):
    store.put("a/b.bin", b"hello")
    assert store.read("a/b.bin") == b"hello"
    assert store.size("a/b.bin") == 5
    assert store.exists("a/b.bin") and not store.exists("a/nope")
    store.put("a/b.bin", b"replaced")
    assert store.read("a/b.bin") == b"replaced"
    store.put("./c", b"")
    assert store.read("c") == b"" and store.size("c") == 0
    assert _keys(moto_server, bucket) == ["tbl/a/b.bin", "tbl/c"]
    store.delete("a/b.bin")
    store.delete("a/b.bin")  # already gone: no error
    assert not store.exists("a/b.bin")
    for bad in ("../escape", "/abs", "a/../../x", ""):
        with pytest.raises(InvalidURIError):
            store.put(bad, b"x")


def test_list_and_walk(store, moto_server, bucket):
    s3 = moto_server.client("s3")
    for k in [
        "tbl/_versions/1.manifest",
        "tbl/_versions/2.manifest",
        "tbl/_versions/sub/deep",
        "tbl/data/x.lance",
        "tbl2/_versions/9.manifest",
        "tbl/_versions/",
    ]:
        s3.put_object(Bucket=bucket, Key=k, Body=b"12345")
    assert sorted(store.list("_versions")) == ["1.manifest", "2.manifest"]
    assert store.list("missing") == []
    assert sorted(store.list("")) == []
    walked = sorted(store.walk(""))
    assert [w[0] for w in walked] == [
        "_versions/1.manifest",
        "_versions/2.manifest",
        "_versions/sub/deep",
        "data/x.lance",
    ]
    assert all(size == 5 and mtime > 1e9 for _, size, mtime in walked)
    assert [w[0] for w in store.walk("data")] == ["data/x.lance"]
    # pagination
    for i in range(10):
        store.put(f"many/{i:02d}", b"x")
    store.list_page_size = 3
    assert sorted(store.list("many")) == [f"{i:02d}" for i in range(10)]
    assert len(store.walk("many")) == 10


def test_missing_objects(store):
    for op in (store.read, store.size, store.open_reader):
        with pytest.raises(ObjectNotFoundError, match="tbl/nope"):
            op("nope")
    with pytest.raises(ObjectNotFoundError):
        store.copy("nope", "dst")
    with pytest.raises(ObjectNotFoundError):
        store.copy_if_not_exists("nope", "dst")


def test_missing_bucket(moto_server):
    s = S3ObjectStore("s3://no-such-bucket-tessera/t", moto_server.storage_options())
    for call in (
        lambda: s.read("x"),
        lambda: s.size("x"),
        lambda: s.list(""),
        lambda: s.walk(""),
        lambda: s.put("x", b"1"),
        lambda: s.put_if_not_exists("x", b"1"),
        lambda: s.open_reader("x"),
    ):
        with pytest.raises(BucketNotFoundError, match="no-such-bucket-tessera"):
            call()
    assert not s.exists("x")


def test_unreachable_endpoint():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    s = S3ObjectStore(
        "s3://bkt/t",
        {
            "endpoint_url": f"http://127.0.0.1:{port}",
            "region": "us-east-1",
            "aws_access_key_id": "a",
            "aws_secret_access_key": "b",
            "connect_timeout": 1,
            "max_retries": 0,
        },
    )
    with pytest.raises(StoreUnavailableError):
        s.read("x")
    with pytest.raises(StoreUnavailableError):  # never sent, so not ambiguous
        s.put_if_not_exists("x", b"1", attempts=1)


def test_put_if_not_exists(store):
    store.put_if_not_exists("_versions/1.manifest", b"first")
    with pytest.raises(AlreadyExistsError):
        store.put_if_not_exists("_versions/1.manifest", b"second")
    assert store.read("_versions/1.manifest") == b"first"


def test_put_if_not_exists_race(store):
    n = 16
    barrier = threading.Barrier(n)
    outcome: dict[int, str] = {}

    def racer(i: int) -> None:
        barrier.wait()
        try:
            store.put_if_not_exists("race", f"writer-{i}".encode())
            outcome[i] = "won"
        except AlreadyExistsError:
            outcome[i] = "lost"
        except Exception as exc:  # noqa: BLE001
            outcome[i] = repr(exc)

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, o in outcome.items() if o == "won"]
    assert len(winners) == 1, outcome
    assert sorted(set(outcome.values())) == ["lost", "won"]
    assert store.read("race") == f"writer-{winners[0]}".encode()


def test_copy(store):
    store.put("src", b"payload")
    store.put("dst", b"old")
    store.copy("src", "dst")
    assert store.read("dst") == b"payload"
    store.copy_if_not_exists("src", "fresh")
    assert store.read("fresh") == b"payload"
    store.put("src", b"changed")
    with pytest.raises(AlreadyExistsError):
        store.copy_if_not_exists("src", "fresh")
    assert store.read("fresh") == b"payload"


def test_local_copy(tmp_path):
    s = LocalObjectStore(tmp_path)
    s.put("a", b"1")
    s.copy("a", "b")
    s.copy_if_not_exists("a", "c")
    with pytest.raises(AlreadyExistsError):
        s.copy_if_not_exists("a", "b")
    assert s.read("b") == s.read("c") == b"1"


def test_ranged_reads(store):
    data = np.random.default_rng(1).integers(0, 256, 3 * MiB + 17, dtype=np.uint8).tobytes()
    store.put("blob", data)
    r = store.open_reader("blob")
    assert r.size() == len(data)
    ranges = [(0, 1), (10, 100), (50, 10), (len(data) - 7, 7), (2 * MiB, MiB), (123, 0), (0, len(data))]
    got = r.read_ranges(ranges)
    assert all(isinstance(b, pa.Buffer) for b in got)
    assert [b.to_pybytes() for b in got] == [data[o : o + n] for o, n in ranges]
    assert r.requests == 1  # one overlapping span: a single GET
    r2 = store.open_reader("blob")
    r2.read_ranges([(0, 10), (100, 10), (2 * MiB + 5, 10)])  # > 1 MiB apart: two GETs, in parallel
    assert r2.requests == 2 and r2.bytes_fetched == 110 + 10
    with pytest.raises(TruncatedFileError):
        r.read_ranges([(len(data) - 1, 2)])
    store.put("blob", b"replaced")
    with pytest.raises(ObjectChangedError):
        r.read_ranges([(0, 4)])


def test_output_small_appears_on_close(store):
    out = store.open_output("data/x.lance")
    out.write(b"abc")
    out.write(memoryview(np.arange(4, dtype=np.int32)))
    assert out.tell() == 19 and not store.exists("data/x.lance")
    out.close()
    out.close()  # idempotent
    assert store.read("data/x.lance") == b"abc" + np.arange(4, dtype=np.int32).tobytes()


def test_output_multipart(store, moto_server, bucket):
    rng = np.random.default_rng(2)
    chunks = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in (7 * MiB, 13 * MiB + 3, 20 * MiB + 11)]
    with store.open_output("big") as out:
        for c in chunks:
            out.write(c)
        assert not store.exists("big")  # parts uploaded, object not yet visible
    data = b"".join(chunks)
    assert store.size("big") == len(data) > 40 * MiB
    r = store.open_reader("big")
    (whole,) = r.read_ranges([(0, len(data))])
    assert whole.to_pybytes() == data
    assert r.requests == 6  # one 40 MiB range, fetched as 8 MiB GETs in parallel
    assert not moto_server.client("s3").list_multipart_uploads(Bucket=bucket).get("Uploads")


def test_output_abort(store, moto_server, bucket):
    with pytest.raises(RuntimeError):
        with store.open_output("big") as out:
            out.write(b"x" * (33 * MiB))  # two parts already uploading
            raise RuntimeError("writer failed")
    assert not store.exists("big")
    assert not moto_server.client("s3").list_multipart_uploads(Bucket=bucket).get("Uploads")
    with pytest.raises(ValueError):
        out.write(b"more")


# -- the conditional-put probe ----------------------------------------------------------


class IgnoresCondition(S3ObjectStore):
    """A store like COS/OSS: put-if-not-exists silently overwrites."""

    def put_if_not_exists(self, path: str, data: bytes, **kwargs: object) -> None:
        self.put(path, data)


def test_probe_passes_on_moto(store, moto_server, bucket):
    reset_probe_cache()
    probe_conditional_put(store)
    assert _keys(moto_server, bucket) == []  # cleaned up
    probe_conditional_put(store)  # cached: no requests
    assert _keys(moto_server, bucket) == []


def test_probe_refuses_a_store_that_ignores_the_condition(moto_server, bucket):
    reset_probe_cache()
    broken = IgnoresCondition(f"s3://{bucket}/tbl", moto_server.storage_options())
    with pytest.raises(ConditionalWriteUnsupportedError, match="ignores"):
        probe_conditional_put(broken)
    assert _keys(moto_server, bucket) == []
    with pytest.raises(ConditionalWriteUnsupportedError):  # the verdict is cached
        probe_conditional_put(broken)
    # the honest store on the same bucket has its own verdict
    probe_conditional_put(S3ObjectStore(f"s3://{bucket}/tbl", moto_server.storage_options()))


def test_probe_local(tmp_path):
    probe_conditional_put(LocalObjectStore(tmp_path))
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


# -- end to end -------------------------------------------------------------------------


def test_lance_file_roundtrip(store):
    n = 200_000
    table = pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "x": pa.array(np.random.default_rng(3).standard_normal(n)),
            "s": pa.array([f"row-{i % 977}" for i in range(n)]),
        }
    )
    out = store.open_output("data/f.lance")
    w = tformat.FileWriter(out, table.schema)
    w.write(table)
    size = w.close()
    out.close()
    assert store.size("data/f.lance") == size
    io = store.open_reader("data/f.lance")
    r = tformat.FileReader(io)
    assert r.read().equals(table)
    assert r.read_range(1000, 1010, columns=["s"]).column("s").to_pylist() == [
        f"row-{i % 977}" for i in range(1000, 1010)
    ]
    assert io.requests < 20


def test_catalog_table_on_s3(moto_server, bucket):
    from tessera.catalog.table import Table

    opts = moto_server.storage_options()
    uri = f"s3://{bucket}/warehouse/t"
    t = Table.create(uri, pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}), storage_options=opts)
    t = t.append(pa.table({"id": [4, 5], "v": ["d", "e"]}))
    t = t.delete("id = 2")
    assert sorted(t.to_arrow().column("id").to_pylist()) == [1, 3, 4, 5]
    again = Table.open(uri, storage_options=opts)
    assert again.version == t.version
    assert sorted(again.to_arrow().column("v").to_pylist()) == ["a", "c", "d", "e"]
    keys = _keys(moto_server, bucket)
    assert any(k.startswith("warehouse/t/_versions/") for k in keys)
    assert any(k.startswith("warehouse/t/data/") and k.endswith(".lance") for k in keys)


def test_native_commit_refuses_a_store_that_ignores_the_condition(moto_server, bucket):
    """The commit path probes before trusting: nothing is committed."""
    from tessera.commit.handlers import NativeCommitHandler
    from tessera.commit.operation import commit_transaction, new_transaction

    reset_probe_cache()
    broken = IgnoresCondition(f"s3://{bucket}/tbl", moto_server.storage_options())
    txn = new_transaction(0)
    txn.overwrite.SetInParent()
    with pytest.raises(ConditionalWriteUnsupportedError):
        commit_transaction(broken, txn, None, handler=NativeCommitHandler(), data_format="2.2")
    assert _keys(moto_server, bucket) == []  # nothing written at all


def test_an_append_on_s3_is_four_requests(moto_server, bucket, monkeypatch):
    """Data file, transaction file (as pylance writes it), the lineage check (a
    ranged GET of the manifest the writer read: is it still this table's?) and
    the conditional manifest PUT: a table that is already open commits
    without listing ``_versions/``, and writes no hint file (nothing reads it
    on S3).  tests/stores/test_s3_request_counts.py counts at the server."""
    import botocore.client

    from tessera.catalog import Table

    uri, opts = f"s3://{bucket}/counted", moto_server.storage_options()
    t = Table.create(uri, pa.table({"a": [1, 2]}), storage_options=opts)
    calls: list[tuple[str, str, str]] = []
    real = botocore.client.BaseClient._make_api_call

    def spy(self, op, params):
        calls.append((op, params.get("Key", params.get("Prefix", "")), params.get("Range", "")))
        return real(self, op, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", spy)
    t.append(pa.table({"a": [3]}))
    t.append(pa.table({"a": [4]}))
    ops = [(op, key.split("/")[1]) for op, key, _ in calls]
    assert (
        ops
        == [
            ("PutObject", "data"),
            ("PutObject", "_transactions"),
            ("GetObject", "_versions"),
            ("PutObject", "_versions"),
        ]
        * 2
    ), calls
    assert calls[2][1].endswith(f"{2**64 - 1 - 1:020d}.manifest") and calls[2][2].startswith("bytes=-")
    assert calls[3][1].endswith(f"{2**64 - 1 - 2:020d}.manifest")
    monkeypatch.undo()
    assert Table.open(uri, storage_options=opts).to_arrow().column("a").to_pylist() == [1, 2, 3, 4]
