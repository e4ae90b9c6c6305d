"""A table's files checked against their checksums: reads refuse damaged
bytes with a typed error, ``Table.verify`` and ``tessera verify`` report every
file (ok, unchecked, corrupt, missing), locally and on S3 (moto)."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner

import tessera
from tessera.catalog import Table
from tessera.catalog.cli import main
from tessera.errors import ChecksumMismatchError, CorruptFileError
from tessera.format.file.datafile import clear_parsed_cache


def _data(start: int, n: int) -> pa.Table:
    i = np.arange(start, start + n, dtype=np.int64)
    rng = np.random.default_rng(start)
    return pa.table({"id": i, "x": rng.integers(0, 2**62, n), "s": pa.array([f"s{k}" for k in i])})


def _flip(path: str, at: float = 0.5) -> None:
    """Flip one bit in the middle of the file's data (its first half: pages)."""
    b = bytearray(open(path, "rb").read())
    b[int(len(b) * at * 0.5)] ^= 0x04
    with open(path, "wb") as f:
        f.write(b)


@pytest.fixture
def table(tmp_path):
    t = Table.create(str(tmp_path / "t"), _data(0, 50_000), max_rows_per_file=25_000)
    t.append(_data(50_000, 10_000))
    t.create_index("id", "ZONEMAP")
    clear_parsed_cache()
    yield t
    clear_parsed_cache()


def _cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return res.exit_code, res.output


def test_intact_table_verifies(table):
    report = table.verify()
    assert report.ok and not report.unchecked
    data_files = {f"data/{f.path}" for frag in table.fragments for f in frag.files}
    checked = {f.path for f in report.files}
    assert data_files <= checked and len(data_files) == 3
    index_files = [p for p in checked if p.startswith("_indices/")]
    assert len(index_files) == 1  # the zone map file carries checksums too
    assert report.bytes_checked == sum(os.path.getsize(os.path.join(table.uri, p)) for p in checked)
    code, out = _cli("verify", table.uri)
    assert code == 0 and "4 verified" in out and "0 corrupt" in out


def test_damaged_file_is_refused_and_reported(table):
    before = table.to_arrow()
    victim = sorted(glob.glob(os.path.join(table.uri, "data", "*.lance")), key=os.path.getsize)[-1]
    _flip(victim)
    clear_parsed_cache()
    t = Table.open(table.uri)
    with pytest.raises(ChecksumMismatchError) as info:
        t.to_arrow()
    assert isinstance(info.value, CorruptFileError) and os.path.basename(victim) in str(info.value)
    # a filter the zone map cannot prune reads the damaged file too; a count from metadata does not
    with pytest.raises(ChecksumMismatchError):
        t.count_rows("x >= 0")
    assert t.count_rows() == before.num_rows
    report = t.verify()
    assert not report.ok
    assert [os.path.basename(f.path) for f in report.corrupt] == [os.path.basename(victim)]
    assert "CRC32C" in report.corrupt[0].detail
    code, out = _cli("verify", table.uri, "-o", "json")
    assert code == 1
    got = json.loads(out)
    assert got["corrupt"] == 1 and got["ok"] == 3 and got["problems"][0]["status"] == "corrupt"
    # the damaged table read with verification off: what pylance would return
    with tessera.checksums("off"):
        clear_parsed_cache()
        assert Table.open(table.uri).to_arrow().num_rows == before.num_rows


def test_missing_and_truncated_files(table):
    files = sorted(glob.glob(os.path.join(table.uri, "data", "*.lance")))
    os.remove(files[0])
    with open(files[1], "r+b") as f:
        f.truncate(os.path.getsize(files[1]) - 100)
    report = table.verify()
    statuses = {os.path.basename(f.path): f.status for f in report.files}
    assert statuses[os.path.basename(files[0])] == "missing"
    assert statuses[os.path.basename(files[1])] == "corrupt"
    assert "the manifest records" in next(f.detail for f in report.corrupt)
    code, out = _cli("verify", table.uri)
    assert code == 1 and "missing" in out


def test_files_of_other_writers_are_unchecked(lance, table):
    lance.write_dataset(_data(60_000, 1_000), table.uri, mode="append")
    table.refresh()
    report = table.verify()
    assert report.ok and len(report.unchecked) == 1
    code, out = _cli("verify", table.uri, "--list-unchecked")
    assert code == 0 and "1 without checksums" in out and "unchecked: data/" in out
    # pylance reads every file Tessera wrote (checksums included)
    assert lance.dataset(table.uri).count_rows() == 61_000
    assert lance.dataset(table.uri).to_table().sort_by("id").equals(table.to_arrow().sort_by("id"))


def test_all_versions(table):
    first = {f"data/{f.path}" for frag in table.checkout(1).fragments for f in frag.files}
    table.overwrite(_data(0, 100))
    assert not {f.path for f in table.verify().files} & first
    every = table.verify(all_versions=True)
    assert every.ok and first <= {f.path for f in every.files}
    assert every.versions == tuple(range(1, table.version + 1))


def test_damaged_object_on_s3(moto_server):
    opts = moto_server.storage_options()
    uri = f"s3://{moto_server.new_bucket()}/t"
    data = _data(0, 30_000)
    Table.create(uri, data, storage_options=opts)
    s3 = moto_server.client("s3")
    bucket, prefix = uri[5:].split("/", 1)
    key = next(o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/data/")["Contents"])
    body = bytearray(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    body[len(body) // 4] ^= 0x01
    s3.put_object(Bucket=bucket, Key=key, Body=bytes(body))
    clear_parsed_cache()
    t = Table.open(uri, storage_options=opts)
    with pytest.raises(ChecksumMismatchError):
        t.to_arrow()
    report = t.verify()
    assert [f.status for f in report.files] == ["corrupt"]
    clear_parsed_cache()
