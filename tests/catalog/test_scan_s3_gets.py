"""On S3, a scan with small batches sends no more GETs and fetches no more
bytes than a scan with the default batch size: counted at the (moto) server."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pytest

from tessera.catalog import Table
from tessera.catalog.query.scan import DEFAULT_BATCH_SIZE
from tessera.format.file.datafile import clear_parsed_cache


class _GetCounter:
    """WSGI middleware in front of moto's app: counts the GET requests that name
    one bucket and the body bytes the server sends back for them."""

    def __init__(self, app: Callable, bucket: str) -> None:
        self.app = app
        self.bucket = bucket
        self.lock = threading.Lock()
        self.gets = 0
        self.heads = 0
        self.bytes = 0
        self.ranges: list[str] = []

    def _ours(self, environ: dict) -> bool:
        path = environ.get("PATH_INFO", "")
        host = environ.get("HTTP_HOST", "")
        return path == f"/{self.bucket}" or path.startswith(f"/{self.bucket}/") or host.startswith(f"{self.bucket}.")

    def reset(self) -> None:
        with self.lock:
            self.gets, self.heads, self.bytes, self.ranges = 0, 0, 0, []

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        body = self.app(environ, start_response)
        if environ.get("REQUEST_METHOD") == "HEAD" and self._ours(environ):
            with self.lock:
                self.heads += 1
        if environ.get("REQUEST_METHOD") != "GET" or not self._ours(environ):
            return body
        with self.lock:
            self.gets += 1
            self.ranges.append(f"{environ.get('PATH_INFO')} {environ.get('HTTP_RANGE', '')}")
        return self._counted(body)

    def _counted(self, body: Iterable[bytes]) -> Iterator[bytes]:
        try:
            for chunk in body:
                with self.lock:
                    self.bytes += len(chunk)
                yield chunk
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                close()


@pytest.fixture
def counted_s3_table(moto_server, monkeypatch):
    """A 4-fragment table on moto S3, and a counter of the GETs the server answers for its bucket."""
    bucket = moto_server.new_bucket()
    n = 240_000
    i = np.arange(n, dtype=np.int64)
    data = pa.table({"a": i * 3, "b": pa.array(i % 977, pa.int32()), "c": i * 0.25})
    uri = f"s3://{bucket}/t"
    Table.create(uri, data, storage_options=moto_server.storage_options(), max_rows_per_file=60_000)
    wsgi = getattr(moto_server.server, "_server", None)  # moto's werkzeug server: requests go to its .app
    assert wsgi is not None and hasattr(wsgi, "app"), "moto's ThreadedMotoServer no longer exposes its WSGI server"
    counter = _GetCounter(wsgi.app, bucket)
    monkeypatch.setattr(wsgi, "app", counter)
    return uri, moto_server.storage_options(), data, counter


def _scan(uri: str, opts: dict, counter: _GetCounter, batch_size: int) -> tuple[pa.Table, int, int, dict]:
    clear_parsed_cache()  # cold each time: no file's tail parsed by another scan
    table = Table.open(uri, storage_options=opts)  # a fresh table each time: nothing cached from another scan
    assert len(table.fragments) == 4
    counter.reset()
    scan = table.scanner(columns=["a"], batch_size=batch_size)
    batches = list(scan.batches())
    with counter.lock:
        gets, nbytes = counter.gets, counter.bytes
    assert max(b.num_rows for b in batches) == min(batch_size, 60_000)  # batches end with their fragment
    return pa.Table.from_batches(batches, schema=scan.schema), gets, nbytes, dict(scan.stats)


def test_small_batches_send_no_more_gets_than_the_default(counted_s3_table):
    uri, opts, data, counter = counted_s3_table
    # the small-batch scan first: anything a first scan warms up would favour the default one
    small, small_gets, small_bytes, small_stats = _scan(uri, opts, counter, 1000)
    default, default_gets, default_bytes, default_stats = _scan(uri, opts, counter, DEFAULT_BATCH_SIZE)
    assert default.equals(data.select(["a"]))
    assert small.equals(default)
    assert default_gets > 0 and default_bytes > 0, "the counter saw no GET: is the scan going to this server?"
    # a one-column projection reads a fraction of the table
    assert default_bytes < data.nbytes / 2, (default_bytes, data.nbytes)
    detail = (small_gets, small_bytes, small_stats, default_gets, default_bytes, default_stats)
    assert small_gets <= default_gets, detail
    assert small_bytes <= default_bytes, detail


def test_a_scan_asks_no_data_file_its_size(counted_s3_table):
    """The manifest records every data file's size: a scan opens the files with
    it and sends no HEAD (pylance sends none either); the first GET's ETag then
    guards the reader's later GETs."""
    uri, opts, data, counter = counted_s3_table
    clear_parsed_cache()
    table = Table.open(uri, storage_options=opts)
    assert all(df.file_size_bytes > 0 for f in table.fragments for df in f.files)
    counter.reset()
    assert table.to_arrow().equals(data)
    assert counter.heads == 0 and counter.gets > 0
    counter.reset()
    assert table.take([5, 70_000, 239_999]).equals(data.take([5, 70_000, 239_999]))  # cached readers too
    assert counter.heads == 0 and counter.gets > 0


def test_a_reader_given_the_size_still_refuses_a_changed_or_shorter_object(moto_server):
    from tessera.format.errors import TruncatedFileError
    from tessera.stores.errors import ObjectChangedError
    from tessera.stores.s3 import S3ObjectStore

    store = S3ObjectStore(f"s3://{moto_server.new_bucket()}/p", moto_server.storage_options())
    store.put("f", bytes(range(256)) * 4)
    r = store.open_reader("f", size=1024)
    assert r.read_ranges([(0, 4)])[0].to_pybytes() == bytes([0, 1, 2, 3])
    store.put("f", bytes(1024))  # replaced, same size: the remembered ETag no longer matches
    with pytest.raises(ObjectChangedError):
        r.read_ranges([(8, 4)])
    longer = store.open_reader("f", size=2048)  # the manifest says more bytes than the object has
    with pytest.raises(TruncatedFileError, match="manifest"):
        longer.read_ranges([(2000, 48)])
    with pytest.raises(TruncatedFileError, match="manifest"):
        longer.read_ranges([(1000, 48)])


def test_a_remote_fragment_is_read_in_fewer_pieces_than_a_local_one(moto_server, tmp_path, monkeypatch):
    """A fragment cut into pieces costs a remote store requests and refetched
    bytes: its read budget is twice the local one, so a fragment two local
    pieces long is one remote piece (each piece is one ``Scan._batch``)."""
    from tessera.catalog.query import scan as scan_mod

    i = np.arange(200_000, dtype=np.int64)
    data = pa.table({"a": i, "b": i * 2, "c": i * 3, "d": i * 4})  # 32 bytes a row: 6.4 MB
    monkeypatch.setattr(scan_mod, "READ_BUDGET_BYTES", 4_000_000)
    monkeypatch.setattr(scan_mod, "REMOTE_READ_BUDGET_BYTES", 8_000_000)
    monkeypatch.setattr(scan_mod, "READ_UNIT_ROWS", 1_000)
    pieces = []
    real = scan_mod.Scan._batch
    monkeypatch.setattr(scan_mod.Scan, "_batch", lambda self, *a: pieces.append(a[2:]) or real(self, *a))
    opts = moto_server.storage_options()
    for uri, kw, want in (
        (str(tmp_path / "t"), {}, 2),
        (f"s3://{moto_server.new_bucket()}/t", {"storage_options": opts}, 1),
    ):
        Table.create(uri, data, **kw)
        pieces.clear()
        assert Table.open(uri, **kw).to_arrow().equals(data)
        assert len(pieces) == want, (uri, pieces)


def test_a_fragment_costs_two_gets_its_tail_and_its_data(counted_s3_table):
    """The planning metadata of a file Tessera wrote (chunk sizes, dictionaries)
    sits next to its footer, so the GET of the file's tail brings it: a scan
    sends one more GET per file, for the data (three before: tail, planning
    metadata, data)."""
    uri, opts, data, counter = counted_s3_table
    clear_parsed_cache()
    table = Table.open(uri, storage_options=opts)  # fresh: no file opened yet
    sizes = {df.path: df.file_size_bytes for f in table.fragments for df in f.files}
    counter.reset()
    assert table.to_arrow().equals(data)
    with counter.lock:
        ranges = [r for r in counter.ranges if r.split(" ")[0].endswith(".lance")]
    per_file: dict[str, list[str]] = {}
    for r in ranges:
        path, rng = r.split(" ", 1)
        per_file.setdefault(path.rsplit("/", 1)[-1], []).append(rng)
    assert len(per_file) == 4 and all(len(v) == 2 for v in per_file.values()), ranges
    for name, (tail, _data) in per_file.items():
        assert tail.endswith(f"-{sizes[name] - 1}"), (name, tail, sizes[name])  # the first GET is the tail


def test_a_second_scan_reuses_the_parsed_tails_pinned_to_their_etags(counted_s3_table):
    """A data file's tail, parsed once, serves every later reader of the same
    object in the process: a second scan through a fresh handle sends one GET
    per file (its data). The reuse is pinned to the ETag the tail was read
    with: an object replaced since is refused, not decoded with stale metadata."""
    from tessera.stores.errors import ObjectChangedError

    uri, opts, data, counter = counted_s3_table
    clear_parsed_cache()
    assert Table.open(uri, storage_options=opts).to_arrow().equals(data)
    counter.reset()
    assert Table.open(uri, storage_options=opts).to_arrow().equals(data)
    with counter.lock:
        lance_gets = [r for r in counter.ranges if r.split(" ")[0].endswith(".lance")]
    assert len(lance_gets) == 4, lance_gets  # the data of each of the 4 files, no tail
    # replace one data file with other bytes of the same size (one byte of its first page changed)
    from tessera.stores.s3 import S3ObjectStore

    victim = Table.open(uri, storage_options=opts).fragments[1].files[0].path
    store = S3ObjectStore(uri, opts)
    body = bytearray(store.read(f"data/{victim}"))
    body[8] ^= 0xFF
    store.put(f"data/{victim}", bytes(body))
    with pytest.raises(ObjectChangedError, match="replaced"):
        Table.open(uri, storage_options=opts).to_arrow()
    # the refused parse was dropped: reopening reads the object as it is now (a corrupt page)
    from tessera.format.errors import CorruptFileError

    with pytest.raises(CorruptFileError, match="CRC32C"):  # its checksum (before: a bad bit width)
        Table.open(uri, storage_options=opts).to_arrow()


def test_a_deletion_file_is_fetched_once_per_process(counted_s3_table):
    """Deletion files are never rewritten (a new one gets a new random id), so
    a remote one is known by its name: the second scan sends no GET for it."""
    from tessera.format.table import deletion

    uri, opts, data, counter = counted_s3_table
    table = Table.open(uri, storage_options=opts)
    table.delete("a % 7 = 0")
    deletion.clear_cache()
    expected = data.filter(pa.array(data["a"].to_numpy() % 7 != 0))

    def deletion_gets() -> int:
        with counter.lock:
            return sum("/_deletions/" in r for r in counter.ranges)

    for k in range(2):
        counter.reset()
        assert Table.open(uri, storage_options=opts).to_arrow().equals(expected)
        assert deletion_gets() == (4 if k == 0 else 0)
