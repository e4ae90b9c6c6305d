"""The one-chunk fast path of the mini-block writer (small appends) writes
exactly the bytes of the general planner and serializer, for every type and
encoding choice it takes, and the files read back (Tessera and pylance)."""

from __future__ import annotations

import datetime
import decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera import format
from tessera.format.file.v21.write import miniblock as miniblock_encode

lance_file = pytest.importorskip("lance.file")


def _bytes(tmp_path, table: pa.Table, version: str, fast: bool) -> bytes:
    path = tmp_path / f"{'fast' if fast else 'general'}_{version}.lance"
    old = miniblock_encode.SMALL_FAST_PATH
    miniblock_encode.SMALL_FAST_PATH = fast
    try:
        format.write_file(path, table, file_version=version)
    finally:
        miniblock_encode.SMALL_FAST_PATH = old
    return path.read_bytes()


def _check(tmp_path, table: pa.Table, version: str) -> None:
    fast = _bytes(tmp_path, table, version, True)
    general = _bytes(tmp_path, table, version, False)
    assert fast == general
    path = tmp_path / f"fast_{version}.lance"
    assert format.read_file(path).equals(table)
    got = lance_file.LanceFileReader(str(path)).read_all().to_table()
    assert got.equals(table)


def _calls(monkeypatch) -> list[int]:
    """The chunks the fast path wrote (one per page it took)."""
    seen: list[int] = []
    real = miniblock_encode._single_chunk

    def spy(levels, bufs, large):
        seen.append(1)
        return real(levels, bufs, large)

    monkeypatch.setattr(miniblock_encode, "_single_chunk", spy)
    return seen


CASES = {
    "small ints (bit-packed)": pa.array(range(100), pa.int64()),
    "runs (rle)": pa.array([i // 10 for i in range(100)], pa.int32()),
    "long runs (rle pieces)": pa.array([7] * 600 + [8] * 300, pa.int64()),
    "negative (flat)": pa.array([-i * 1_000_003 for i in range(100)], pa.int64()),
    "floats": pa.array([i * 0.5 for i in range(100)], pa.float64()),
    "nulls": pa.array([None if i % 7 == 0 else i for i in range(100)], pa.int16()),
    "all zero": pa.array([0] * 50, pa.int8()),
    "one row": pa.array([123456789], pa.uint64()),
    "dates": pa.array([datetime.date(2020, 1, 1 + i % 28) for i in range(100)], pa.date32()),
    "timestamps": pa.array([1_700_000_000_000_000 + i for i in range(100)], pa.timestamp("us")),
    "decimals": pa.array([decimal.Decimal(i) / 100 for i in range(100)], pa.decimal128(10, 2)),
    "fixed binary": pa.array([bytes([i % 256]) * 24 for i in range(100)], pa.binary(24)),
    "too many flat values": pa.array([float(i) for i in range(1000)], pa.float64()),
    "strings": pa.array([f"row-{i}" for i in range(100)]),
    "strings with nulls and empties": pa.array([None if i % 5 == 0 else "x" * (i % 3) for i in range(100)]),
    "large strings": pa.array([f"v{i}" for i in range(100)], pa.large_string()),
    "binary": pa.array([bytes(range(i % 7)) for i in range(100)], pa.binary()),
    "sliced strings": pa.array([f"s{i}" * 3 for i in range(300)]).slice(37, 100),
    "too many string bytes": pa.array([f"{i:03d}" + "y" * 97 for i in range(100)]),
}
#: pages the fast path leaves to the general planner
GENERAL = {"too many flat values", "too many string bytes"}


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_same_bytes_as_general_path(tmp_path, monkeypatch, version, name):
    seen = _calls(monkeypatch)
    _check(tmp_path, pa.table({"x": CASES[name]}), version)
    # the fast path ran for every small page it can take; not for 1000 flat
    # float64 (512 per chunk, so two chunks) or 10 KB of strings (the planner
    # splits at 8 KB), nor for a constant page in 2.2
    # (one value or all equal: a constant layout, no mini-block at all)
    if name in GENERAL or (name in ("all zero", "one row") and version == "2.2"):
        assert seen == []
    else:
        assert seen == [1]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    values=st.lists(st.one_of(st.none(), st.integers(-(2**40), 2**40)), min_size=1, max_size=1024),
    runs=st.integers(1, 300),
    dtype=st.sampled_from(["int8", "int32", "int64", "uint16"]),
    version=st.sampled_from(["2.1", "2.2"]),
)
def test_random_small_pages(tmp_path, values, runs, dtype, version):
    info = np.iinfo(dtype)
    vals = [None if v is None else int(min(max(v, info.min), info.max)) for v in values]
    stretched = [v for v in vals for _ in range(runs)][: max(len(vals), 1024)]
    for arr in (pa.array(vals, dtype), pa.array(stretched, dtype)):
        _check(tmp_path, pa.table({"x": arr}), version)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    values=st.lists(st.one_of(st.none(), st.text(max_size=40)), min_size=1, max_size=400),
    large=st.booleans(),
    start=st.integers(0, 5),
    version=st.sampled_from(["2.1", "2.2"]),
)
def test_random_small_string_pages(tmp_path, values, large, start, version):
    arr = pa.array(["pad"] * start + values, pa.large_string() if large else pa.string()).slice(start)
    _check(tmp_path, pa.table({"x": arr}), version)
