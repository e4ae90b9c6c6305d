"""Data file checksums (format/file/checksum.py): written by default, verified
on read, a damaged byte anywhere a typed error and never a wrong value; pylance
reads every file that carries them."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest

from tessera.format.errors import ChecksumMismatchError, CorruptFileError, InvalidSettingError
from tessera.format.file import checksum
from tessera.format.file.checksum import BLOCK_SIZE, checksums
from tessera.format.file.container import ContainerReader
from tessera.format.file.datafile import FileReader, FileWriter, clear_parsed_cache
from tessera.format.file.io import BytesReader

VERSIONS = ["2.0", "2.1", "2.2"]


def _table(n: int = 60_000) -> pa.Table:
    i = np.arange(n, dtype=np.int64)
    return pa.table(
        {
            "i": i,
            "f": pa.array(i * 0.5, mask=i % 11 == 0),
            "s": pa.array([None if k % 13 == 0 else f"value-{k % 997}" for k in range(n)]),
            "l": pa.array([[k, k + 1] if k % 5 else None for k in range(n)], pa.list_(pa.int32())),
        }
    )


def _write(table: pa.Table, version: str, **kw) -> bytes:
    sink = pa.BufferOutputStream()
    with FileWriter(sink, table.schema, file_version=version, page_size=64 * 1024, **kw) as w:
        w.write(table)
    return sink.getvalue().to_pybytes()


class _CountingReader(BytesReader):
    """An in-memory file that counts the bytes asked of it (what a remote store serves)."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data, "mem.lance")
        self.asked: list[tuple[int, int]] = []

    def read_ranges(self, ranges):
        self.asked.extend(ranges)
        return super().read_ranges(ranges)


@pytest.mark.parametrize("version", VERSIONS)
def test_written_by_default_and_read_back(version):
    table = _table()
    data = _write(table, version)
    reader = FileReader(data)
    sums = reader._container.checksum_table()
    assert sums is not None and sums.block_size == BLOCK_SIZE
    assert sums.crcs.size == -(-sums.data_end // BLOCK_SIZE) > 1
    assert reader.read().equals(table)
    assert ContainerReader(BytesReader(data), verify=False).verify_file() == len(data)
    # without them: the same file less the table (and its pointer), read the same
    plain = _write(table, version, checksums=False)
    assert ContainerReader(BytesReader(plain), verify=False).verify_file() is None
    assert FileReader(plain).read().equals(table)
    assert len(data) - len(plain) <= checksum.table_size(sums.crcs.size) + 16 + 63


@pytest.mark.parametrize("version", VERSIONS)
def test_every_flipped_bit_is_an_error_or_harmless(version):
    """Bits flipped across the whole file, one at a time: each read either
    raises CorruptFileError or returns the table unchanged (a flip in padding)."""
    table = _table(20_000)
    data = _write(table, version)
    rng = np.random.default_rng(7)
    positions = sorted(set(rng.integers(0, len(data), 120).tolist()) | {0, len(data) - 41, len(data) - 1})
    errors = 0
    for pos in positions:
        bad = bytearray(data)
        bad[pos] ^= 1 << int(rng.integers(0, 8))
        try:
            got = FileReader(bytes(bad)).read()
        except CorruptFileError:
            errors += 1
            continue
        assert got.equals(table), f"flip at byte {pos} of {len(data)} changed a value silently"
    assert errors >= len(positions) * 0.8  # nearly every byte is covered (padding is not)


@pytest.mark.parametrize("version", VERSIONS)
def test_without_verification_the_flip_reaches_the_values(version):
    """What the checksums prevent: a flipped value byte, read unverified, is a wrong value."""
    values = np.random.default_rng(3).integers(0, 2**62, 50_000)  # incompressible: stored plain
    table = pa.table({"i": values})
    data = _write(table, version, checksums=True)
    bad = bytearray(data)
    bad[8 * 40_000 + 3] ^= 0x10  # inside the values, near row 40,000
    with pytest.raises(ChecksumMismatchError, match="checksum block"):
        FileReader(bytes(bad)).read()
    with checksums("write"):
        assert not FileReader(bytes(bad)).read().equals(table)


def test_take_verifies_only_the_blocks_it_reads():
    values = np.random.default_rng(5).integers(0, 2**62, 400_000)  # 3.2 MB stored plain: 49 blocks
    table = pa.table({"i": values})
    data = _write(table, "2.1")
    bad = bytearray(data)
    bad[3_000_000] ^= 1  # a late block
    reader = FileReader(bytes(bad))
    assert reader.take([0, 10, 1000]).column(0).to_pylist() == values[[0, 10, 1000]].tolist()  # early blocks
    with pytest.raises(ChecksumMismatchError):
        reader.read()


def test_remote_reads_widen_to_blocks_once():
    """A reader that fetches ranges (an object store) asks for whole blocks the
    first time, then only the bytes it needs: each block is checked once."""
    table = pa.table({"i": np.arange(400_000, dtype=np.int64)})
    data = _write(table, "2.1")
    io = _CountingReader(data)
    reader = FileReader(io)
    io.asked.clear()
    assert reader.take([123_456]).column(0).to_pylist() == [123_456]
    first = sum(n for _, n in io.asked)
    assert BLOCK_SIZE <= first <= 3 * BLOCK_SIZE
    assert all(off % BLOCK_SIZE == 0 for off, _ in io.asked)  # whole blocks
    io.asked.clear()
    assert reader.take([123_457]).column(0).to_pylist() == [123_457]
    assert sum(n for _, n in io.asked) < 1024  # the block is verified: only the value's bytes


def test_metadata_damage_is_reported_before_any_read():
    table = _table(5_000)
    data = _write(table, "2.2")
    c = ContainerReader(BytesReader(data), verify=False)
    gb0_pos, _ = c.global_buffers[0]
    cm = c.footer.column_meta_start
    for pos, what in ((gb0_pos + 2, "FileDescriptor"), (cm + 5, "column metadata")):
        bad = bytearray(data)
        bad[pos] ^= 0x01
        with pytest.raises(CorruptFileError) as info:
            FileReader(bytes(bad))
        if isinstance(info.value, ChecksumMismatchError):
            assert what in str(info.value)
    # the row count: a flip that still parses is caught by the CRC, not returned
    desc_len = c.global_buffers[0][1]
    raw = bytearray(data[gb0_pos : gb0_pos + desc_len])
    at = raw.rfind(struct.pack("<B", 0x10))  # FileDescriptor.length's tag (field 2, varint)
    assert at >= 0
    bad = bytearray(data)
    bad[gb0_pos + at + 1] ^= 0x01
    with pytest.raises(ChecksumMismatchError, match="FileDescriptor"):
        FileReader(bytes(bad))


def test_damaged_table_itself_is_an_error():
    data = _write(_table(5_000), "2.2")
    c = ContainerReader(BytesReader(data), verify=False)
    pos, _ = c.global_buffers[1]
    bad = bytearray(data)
    bad[pos + checksum.HEADER.size] ^= 0x40  # the first block's CRC
    with pytest.raises(ChecksumMismatchError, match="checksum table"):
        FileReader(bytes(bad))


def test_modes(monkeypatch):
    table = _table(3_000)
    with checksums("off"):
        assert checksum.mode() == "off"
        data = _write(table, "2.2")
    assert ContainerReader(BytesReader(data), verify=False).checksum_table() is None
    assert checksum.mode() == "verify"
    with checksums("write"):
        data = _write(table, "2.2")
        assert ContainerReader(BytesReader(data)).io.__class__.__name__ != "VerifiedIO"
    assert ContainerReader(BytesReader(data)).io.__class__.__name__ == "VerifiedIO"
    with pytest.raises(InvalidSettingError, match="checksums must be one of"):
        with checksums("sometimes"):
            pass
    monkeypatch.setenv(checksum.ENV, "write")
    assert checksum._mode_from_env() == "write"
    monkeypatch.setenv(checksum.ENV, "nope")
    with pytest.raises(InvalidSettingError, match=checksum.ENV):
        checksum._mode_from_env()


def test_local_file_verified_once_per_process(tmp_path):
    """Readers of one unchanged local file share what was verified (the parsed-tail cache)."""
    table = pa.table({"i": np.arange(200_000, dtype=np.int64)})
    path = tmp_path / "t.lance"
    with FileWriter(path, table.schema, file_version="2.2") as w:
        w.write(table)
    clear_parsed_cache()
    r1 = FileReader(path)
    assert r1.read().equals(table)
    sums = r1._container.checksum_table()
    assert sums is not None and sums.remaining == 0
    r2 = FileReader(path)
    assert r2._container.checksum_table() is sums  # nothing left to verify
    assert r2.read().equals(table)


@pytest.mark.parametrize("version", VERSIONS)
def test_pylance_reads_files_with_checksums(lance, tmp_path, version):
    table = _table(30_000)
    path = tmp_path / "t.lance"
    with FileWriter(path, table.schema, file_version=version) as w:
        w.write(table)
    r = lance.file.LanceFileReader(str(path))
    assert r.read_all().to_table().equals(table)
    assert r.metadata().num_rows == table.num_rows
    c = ContainerReader(BytesReader(path.read_bytes()), verify=False)
    sums = c.checksum_table()
    assert sums is not None
    # pylance counts the padding before the checksum table (under 64 bytes) as data
    assert 0 <= r.metadata().num_data_bytes - sums.data_end < 64
