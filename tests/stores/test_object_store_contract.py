"""One contract, every object store: local disk, S3 (moto), Google Cloud
Storage (fake-gcs-server) and Azure Blob (Azurite) answer the interface of
:class:`tessera.stores.object_store.ObjectStore` the same way, above all its
commit primitive: of several concurrent ``put_if_not_exists`` of one path,
exactly one wins and the object is the winner's."""

from __future__ import annotations

import threading
import uuid

import pytest

from tessera.format.errors import TruncatedFileError
from tessera.stores import open_object_store
from tessera.stores.errors import (
    AlreadyExistsError,
    BucketNotFoundError,
    InvalidURIError,
    ObjectChangedError,
    ObjectNotFoundError,
)
from tessera.stores.object_store import ObjectStore
from tessera.stores.probe import probe_conditional_put, reset_probe_cache

BACKENDS = ["local", "s3", "gcs", "azure"]
REMOTE = {"s3", "gcs", "azure"}


def _open(request: pytest.FixtureRequest, backend: str, tmp_path, *, bucket: str | None = None) -> ObjectStore:
    """A fresh store of ``backend`` (in a new bucket unless ``bucket`` is given)."""
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    if backend == "local":
        return open_object_store(str(tmp_path / prefix))
    if backend == "s3":
        moto = request.getfixturevalue("moto_server")
        return open_object_store(f"s3://{bucket or moto.new_bucket()}/{prefix}", moto.storage_options())
    if backend == "gcs":
        gcs = request.getfixturevalue("fake_gcs")
        return open_object_store(f"gs://{bucket or gcs.new_bucket()}/{prefix}", gcs.storage_options())
    azurite = request.getfixturevalue("azurite")
    return open_object_store(f"az://{bucket or azurite.new_container()}/{prefix}", azurite.storage_options())


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def store(request, backend, tmp_path):
    s = _open(request, backend, tmp_path)
    yield s
    close = getattr(s, "close", None)
    if close is not None:
        close()


def test_put_read_size_exists_delete(store):
    assert not store.exists("a/b.bin")
    store.put("a/b.bin", b"hello")
    assert store.exists("a/b.bin")
    assert store.read("a/b.bin") == b"hello"
    assert store.size("a/b.bin") == 5
    store.put("a/b.bin", b"replaced")  # put replaces
    assert store.read("a/b.bin") == b"replaced"
    store.delete("a/b.bin")
    assert not store.exists("a/b.bin")
    store.delete("a/b.bin")  # deleting what is gone is no error


def test_missing_objects_are_typed(store):
    with pytest.raises(ObjectNotFoundError):
        store.read("nope")
    with pytest.raises(ObjectNotFoundError):
        store.size("nope")
    with pytest.raises(ObjectNotFoundError):
        store.read_tail("nope", 10)
    with pytest.raises(ObjectNotFoundError):
        store.copy("nope", "dst")
    assert store.list("nowhere") == []
    assert store.walk("nowhere") == []


def test_put_if_not_exists_refuses_the_second_create(store):
    store.put_if_not_exists("_versions/1.manifest", b"first")
    with pytest.raises(AlreadyExistsError):
        store.put_if_not_exists("_versions/1.manifest", b"second")
    assert store.read("_versions/1.manifest") == b"first"


def test_exactly_one_of_racing_creators_wins(store):
    writers = 8
    barrier = threading.Barrier(writers)
    won: list[int] = []
    lost: list[int] = []
    errors: list[BaseException] = []

    def create(i: int) -> None:
        barrier.wait()
        try:
            store.put_if_not_exists("_versions/race.manifest", f"writer {i}".encode())
            won.append(i)
        except AlreadyExistsError:
            lost.append(i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(won) == 1 and len(lost) == writers - 1
    assert store.read("_versions/race.manifest") == f"writer {won[0]}".encode()


def test_copy_and_copy_if_not_exists(store):
    store.put("src", b"payload")
    store.copy("src", "dst")
    assert store.read("dst") == b"payload"
    store.put("src", b"changed")
    store.copy("src", "dst")  # copy replaces
    assert store.read("dst") == b"changed"
    store.copy_if_not_exists("src", "fresh")
    assert store.read("fresh") == b"changed"
    with pytest.raises(AlreadyExistsError):
        store.copy_if_not_exists("src", "dst")


def test_list_is_one_level_and_walk_is_every_level(store):
    for path in ("d/x", "d/y", "d/sub/z", "other"):
        store.put(path, path.encode())
    assert sorted(store.list("d")) == ["x", "y"]
    walked = sorted((p, n) for p, n, _mtime in store.walk("d"))
    assert walked == [("d/sub/z", 7), ("d/x", 3), ("d/y", 3)]
    assert all(mtime > 0 for _p, _n, mtime in store.walk("d"))


def test_read_tail(store):
    store.put("long", bytes(range(200)))
    assert store.read_tail("long", 10) == (bytes(range(190, 200)), 200)
    store.put("short", b"abc")
    assert store.read_tail("short", 10) == (b"abc", 3)
    store.put("exact", b"abcd")
    assert store.read_tail("exact", 4) == (b"abcd", 4)
    store.put("empty", b"")
    assert store.read_tail("empty", 10) == (b"", 0)


def test_range_reader(store):
    data = bytes(i % 251 for i in range(300_000))
    store.put("f.lance", data)
    for reader in (store.open_reader("f.lance"), store.open_reader("f.lance", size=len(data))):
        assert reader.size() == len(data)
        ranges = [(0, 10), (5, 20), (100_000, 0), (299_990, 10), (150_000, 50_000)]
        got = reader.read_ranges(ranges)
        assert [bytes(b) for b in got] == [data[o : o + n] for o, n in ranges]
        with pytest.raises(TruncatedFileError):
            reader.read_ranges([(299_999, 2)])
        reader.close()


@pytest.mark.parametrize(
    "backend", sorted(REMOTE)
)  # a local file is replaced by a rename: an open reader keeps the old
def test_range_reader_of_a_replaced_object(store, backend):
    store.put("f.lance", b"a" * 1000)
    reader = store.open_reader("f.lance")
    assert bytes(reader.read_ranges([(0, 10)])[0]) == b"a" * 10
    store.put("f.lance", b"b" * 1000)
    with pytest.raises(ObjectChangedError):
        reader.read_ranges([(10, 10)])


def test_output_stream_appears_whole_on_close_and_never_on_abort(store):
    chunk = bytes(range(256)) * 4096  # 1 MiB
    with store.open_output("out/f.bin") as out:
        for _ in range(3):
            out.write(chunk)
        assert out.tell() == 3 * len(chunk)
        assert not store.exists("out/f.bin")
    assert store.read("out/f.bin") == chunk * 3
    out = store.open_output("out/g.bin")
    out.write(b"partial")
    out.abort()
    assert not store.exists("out/g.bin")
    with pytest.raises(RuntimeError), store.open_output("out/h.bin") as out:
        out.write(b"partial")
        raise RuntimeError("boom")
    assert not store.exists("out/h.bin")


def test_paths_cannot_escape_the_root(store):
    for bad in ("../x", "a/../../x"):
        with pytest.raises(InvalidURIError):
            store.put(bad, b"x")


def test_the_conditional_put_probe_trusts_it(store):
    reset_probe_cache()
    probe_conditional_put(store)
    assert store.list("_tessera") == []  # the probe cleans up after itself


@pytest.mark.parametrize("backend", sorted(REMOTE))  # a local directory is made on the first write: no "bucket"
def test_a_missing_bucket_is_named(request, backend, tmp_path):
    store = _open(request, backend, tmp_path, bucket=f"missing-{uuid.uuid4().hex[:8]}")
    with pytest.raises(BucketNotFoundError):
        store.put("x", b"x")
    with pytest.raises(BucketNotFoundError):
        store.put_if_not_exists("x", b"x")
    with pytest.raises((BucketNotFoundError, ObjectNotFoundError)):
        store.read("x")
