"""FileReader.take: batched per field (one request for every page or chunk
involved), decoding only what holds the rows; and read() returning one chunk
per page for flat columns."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tessera import format as tformat
from tessera.format.file.checksum import checksums

lance_file = pytest.importorskip("lance.file")

VERSIONS = ("2.0", "2.1", "2.2")
N = 60_000


def _table() -> pa.Table:
    rng = np.random.default_rng(3)
    words = np.array(["alpha", "bravo", "delta", "gamma", "omega", "kappa"])
    s = [f"{words[i % 6]}-{int(v)}" for i, v in enumerate(rng.integers(0, 10**9, N))]
    s_null = pa.array([None if i % 7 == 3 else x for i, x in enumerate(s)], pa.string())
    lists = pa.array([None if i % 11 == 0 else list(range(i % 4)) for i in range(N)], pa.list_(pa.int32()))
    wide = pa.array([bytes([i % 251]) * (300 + i % 5) if i % 9 else None for i in range(N)], pa.binary())
    return pa.table(
        {
            "i": pa.array(rng.integers(0, 2**62, N)),
            "small": pa.array((np.arange(N) % 100).astype(np.int32)),
            "s": pa.array(s),
            "sn": s_null,
            "b": pa.array(np.arange(N) % 3 == 0),
            "f": pa.array(rng.standard_normal(N)),
            "l": lists,
            "st": pa.StructArray.from_arrays([pa.array(np.arange(N)), pa.array(s)], names=["x", "y"]),
            "w": wide,
        }
    )


class _Counting:
    """Wraps a reader's RangeReader, recording every request."""

    def __init__(self, reader):
        self.calls: list[list[tuple[int, int]]] = []
        inner = reader.io.read_ranges

        def spy(ranges):
            self.calls.append(list(ranges))
            return inner(ranges)

        reader.io.read_ranges = spy
        joined = getattr(reader.io, "read_joined", None)
        if joined is not None:  # many ranges read into one buffer

            def spy_joined(offsets, sizes):
                self.calls.append(list(zip(np.asarray(offsets).tolist(), np.asarray(sizes).tolist())))
                return joined(offsets, sizes)

            reader.io.read_joined = spy_joined

    @property
    def bytes(self) -> int:
        return sum(n for call in self.calls for _, n in call)


@pytest.fixture(scope="module", params=["tessera", "pylance"])
def files(request, tmp_path_factory):
    table = _table()
    out = {}
    for v in VERSIONS:
        path = tmp_path_factory.mktemp("take") / f"{request.param}-{v}.lance"
        if request.param == "tessera":
            tformat.write_file(path, table, file_version=v, page_size=256 * 1024)
        else:
            with lance_file.LanceFileWriter(str(path), table.schema, version=v, max_page_bytes=256 * 1024) as w:
                w.write_batch(table)
        out[v] = path
    return table, out


@pytest.mark.parametrize("version", VERSIONS)
def test_take_matches_arrow(files, version):
    table, paths = files
    reader = tformat.FileReader(paths[version])
    rng = np.random.default_rng(11)
    for idx in (
        np.sort(rng.choice(N, 300, replace=False)),  # sorted, distinct
        rng.integers(0, N, 500),  # any order, repeats
        np.array([0, N - 1, 0, N // 2]),
        np.arange(1000, 1100),  # a run
        np.array([], dtype=np.int64),
    ):
        got = reader.take(idx)
        assert got.equals(table.take(pa.array(idx, pa.int64()))), (version, idx[:10])
    assert reader.take([7], columns=["s", "l"]).equals(table.select(["s", "l"]).slice(7, 1))


@pytest.mark.parametrize("version", VERSIONS)
def test_take_is_one_request_per_leaf_and_reads_little(files, version):
    table, paths = files
    with checksums("write"):  # the requests of a take, not the checksum blocks a first read widens them to
        reader = tformat.FileReader(paths[version])
    reader.take([0], columns=["i", "s"])  # page metadata loaded once
    spy = _Counting(reader)
    idx = np.sort(np.random.default_rng(5).choice(N, 40, replace=False))
    got = reader.take(idx, columns=["i", "s"])
    assert got.equals(table.select(["i", "s"]).take(pa.array(idx)))
    # one data request per leaf column (plus, on 2.1/2.2, chunk metadata of
    # pages not seen before)
    assert len(spy.calls) <= 4, [len(c) for c in spy.calls]
    if version != "2.0":  # mini-block chunks, not whole pages
        assert spy.bytes < 0.25 * (table.column("i").nbytes + table.column("s").nbytes), spy.bytes


def test_take_decodes_only_the_chunks_holding_rows(tmp_path, monkeypatch):
    # FSST strings and bit-packed integers: the picked values only, not the chunks
    from tessera.format.file.encodings import fsst
    from tessera.format.file.v21.read import compressive

    table = _table().select(["i", "small", "s"])
    path = tmp_path / "p.lance"
    with lance_file.LanceFileWriter(str(path), table.schema, version="2.2") as w:
        w.write_batch(table)
    sizes = []
    real = fsst.decompress

    def spy(compressed, offsets, *a, **k):
        sizes.append(len(offsets) - 1)
        return real(compressed, offsets, *a, **k)

    monkeypatch.setattr(fsst, "decompress", spy)
    reader = tformat.FileReader(path)
    idx = np.array([3, 20_000, 59_999])
    assert reader.take(idx).equals(table.take(pa.array(idx)))
    if sizes:  # pylance chose FSST for these strings
        assert sum(sizes) == 3, sizes
    assert compressive.miniblock_pick  # the entry point used


@pytest.mark.parametrize("version", VERSIONS)
def test_read_returns_a_chunk_per_page_for_flat_columns(tmp_path, version):
    table = _table().select(["i", "s", "l"])
    path = tmp_path / "r.lance"
    tformat.write_file(path, table, file_version=version, page_size=64 * 1024)
    got = tformat.FileReader(path).read()
    assert got.equals(table)
    assert got.column("i").num_chunks > 1 and got.column("s").num_chunks > 1
    assert got.column("l").num_chunks == 1  # nested: assembled as one array
    part = tformat.FileReader(path).read_range(1234, 45_678)
    assert part.equals(table.slice(1234, 45_678 - 1234))


@pytest.mark.parametrize("version", VERSIONS)
def test_take_same_rows_read_three_ways(files, version):
    """Read with pread (a fresh local file), from the mapped file and from
    bytes in memory: the same rows every time."""
    from tessera.format.file.io import BytesReader, LocalFileReader

    table, paths = files
    rng = np.random.default_rng(21)
    idx = np.sort(rng.choice(N, 250, replace=False))
    want = table.take(pa.array(idx))
    local = LocalFileReader(paths[version])
    reader = tformat.FileReader(local)
    assert local.whole_buffer() is None  # small reads: not mapped
    assert reader.take(idx).equals(want)
    if version != "2.0":  # 2.0 reads whole pages, which maps the file
        assert local.whole_buffer() is None
    mapped = local.map()
    assert mapped is not None and local.map() is mapped and local.whole_buffer() is mapped
    assert reader.take(idx).equals(want)
    assert reader.take(idx[::-1]).equals(table.take(pa.array(idx[::-1])))
    reader.close()
    data = open(paths[version], "rb").read()
    assert tformat.FileReader(BytesReader(data)).take(idx).equals(want)


def test_local_reader_pread_map_and_joined_reads(tmp_path):
    from tessera.format.errors import TruncatedFileError
    from tessera.format.file.io import LocalFileReader

    payload = bytes(range(256)) * 64
    path = tmp_path / "bytes.bin"
    path.write_bytes(payload)
    r = LocalFileReader(path)
    got = r.read_ranges([(0, 10), (300, 5), (16383, 1), (7, 0)])
    assert [g.to_pybytes() for g in got] == [payload[:10], payload[300:305], payload[-1:], b""]
    assert r.whole_buffer() is None
    data, starts = r.read_joined(np.array([5, 1000, 40]), np.array([3, 4, 0]))
    assert data.tobytes()[:7] == payload[5:8] + payload[1000:1004] and starts.tolist() == [0, 3, 7]
    with pytest.raises(TruncatedFileError):
        r.read_joined(np.array([16380]), np.array([10]))
    with pytest.raises(TruncatedFileError):
        r.read_ranges([(16380, 10)])
    # a large read maps the file; later reads are slices of the mapping
    import os

    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else -1

    before = descriptors()
    r.MAP_MIN_BYTES = 1000
    big = r.read_ranges([(0, 4096)])[0]
    assert big.to_pybytes() == payload[:4096] and r.whole_buffer() is not None
    assert descriptors() == before - 1  # the reader's own is closed, and the mapping holds none
    data, starts = r.read_joined(np.array([5, 1000]), np.array([3, 4]))
    assert starts.tolist() == [5, 1000] and data[1000:1004].tobytes() == payload[1000:1004]
    r.close()
    with pytest.raises(ValueError):
        r.read_ranges([(0, 1)])
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    e = LocalFileReader(empty)
    assert e.read_ranges([(0, 0)])[0].size == 0 and e.map() is None
    e.close()


def test_take_of_plain_variable_strings_reads_only_the_picked_values(tmp_path, monkeypatch):
    """Short strings in mini-block chunks ("variable" encoding): two offsets
    and the bytes of each wanted value, not the whole chunk."""
    from tessera.format.file.v21.read import compressive

    n = 50_000
    i = np.arange(n)
    table = pa.table(
        {"s": pa.array(np.char.add("row-", i.astype("U6"))), "n": pa.array([None if x % 3 else f"v{x}" for x in i])}
    )
    path = tmp_path / "v.lance"
    tformat.write_file(path, table, file_version="2.2")
    picked = []
    real = compressive._pick_variable

    def spy(ow, ch, k, o, where):
        picked.append(o.size)
        return real(ow, ch, k, o, where)

    monkeypatch.setattr(compressive, "_pick_variable", spy)
    reader = tformat.FileReader(path)
    for idx in (np.array([0, 1, 2, 49_999]), np.sort(np.random.default_rng(1).choice(n, 500, replace=False))):
        assert reader.take(idx).equals(table.take(pa.array(idx)))
    assert picked, "the variable-width pick path was not used"
