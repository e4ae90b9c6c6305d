"""ZONEMAP index: read pylance's, write one pylance uses, conservative pruning."""

from __future__ import annotations

import datetime
import glob
import math
import os
import uuid

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.format.protos import table_pb2
from tessera.format.table import manifest as mf
from tessera.format.table.zonemap import Zone, ZoneMap, read_zonemap, write_zonemap, zones_that_may_match

lance = pytest.importorskip("lance")
from lance.indices import IndexConfig  # noqa: E402


class _Dir:
    def __init__(self, root: str) -> None:
        self.root = root

    def read(self, path: str) -> bytes:
        with open(os.path.join(self.root, path), "rb") as f:
            return f.read()

    def put(self, path: str, data: bytes) -> None:
        full = os.path.join(self.root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(data)


def _latest(root: str) -> tuple[str, mf.ManifestFile]:
    path = max(glob.glob(os.path.join(root, "_versions", "*.manifest")), key=lambda p: -int(os.path.basename(p)[:-9]))
    with open(path, "rb") as f:
        return path, mf.read_manifest(f.read(), path)


def _indices(m: mf.ManifestFile) -> list[table_pb2.IndexMetadata]:
    sec = table_pb2.IndexSection()
    if m.index_section:
        sec.ParseFromString(m.index_section)
    return list(sec.indices)


def _table(n: int) -> pa.Table:
    d0 = datetime.date(2020, 1, 1)
    return pa.table(
        {
            "i": pa.array([None if k % 7 == 3 else (k * 37) % 101 - 50 for k in range(n)], pa.int64()),
            "f": pa.array([float("nan") if k % 11 == 5 else (None if k % 13 == 2 else k / 3 - 20) for k in range(n)]),
            "s": pa.array([None if k % 5 == 1 else f"v{(k * 7) % 23:03d}" for k in range(n)]),
            "d": pa.array([None if k % 9 == 4 else d0 + datetime.timedelta(days=(k * 13) % 50) for k in range(n)]),
            "t": pa.array([k * 1_000_000 for k in range(n)], pa.timestamp("us")),
        }
    )


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


@pytest.mark.parametrize("col", ["i", "f", "s", "d", "t"])
def test_reads_pylance_zonemap(tmp_path, col):
    root = str(tmp_path / "ds")
    t = _table(90)
    ds = lance.write_dataset(t, root, max_rows_per_file=40)
    ds.create_scalar_index(col, IndexConfig(index_type="zonemap", parameters={"rows_per_zone": 16}))
    _, m = _latest(root)
    (meta,) = _indices(m)
    assert meta.index_details.type_url == "/lance.table.ZoneMapIndexDetails"
    zm = read_zonemap(_Dir(root), meta)
    assert zm.rows_per_zone == 16
    assert meta.index_details.value[:3] == b"\x08\x10\x10"  # rows_per_zone=16, then field 2
    values = t.column(col).to_pylist()
    frag_base = {f.id: i * 40 for i, f in enumerate(m.manifest.fragments)}
    seen = 0
    for z in zm.all_zones():
        chunk = values[frag_base[z.fragment_id] + z.start :][: z.length]
        assert len(chunk) == z.length
        seen += z.length
        nans = [v for v in chunk if isinstance(v, float) and math.isnan(v)]
        rest = [v for v in chunk if v is not None and not (isinstance(v, float) and math.isnan(v))]
        assert z.null_count == sum(v is None for v in chunk)
        assert z.nan_count == len(nans)
        # observed: pylance orders NaN above every number, so a zone with NaN has max NaN
        want_max = float("nan") if nans else max(rest)
        want_min = min(rest) if rest else float("nan")
        assert _same(z.min, want_min) and _same(z.max, want_max)
    assert seen == 90


def test_pylance_uses_tessera_zonemap(tmp_path):
    root = str(tmp_path / "ds")
    t = _table(90)
    lance.write_dataset(t, root, max_rows_per_file=40)
    path, m = _latest(root)
    man = m.manifest
    field = next(f for f in man.fields if f.name == "i")
    frags, base = [], 0
    for frag in man.fragments:
        n = frag.physical_rows
        frags.append((frag.id, t.column("i").slice(base, n).combine_chunks()))
        base += n
    written, meta = write_zonemap(_Dir(root), field, frags, dataset_version=man.version, rows_per_zone=16)
    assert len(written) == 1
    new = table_pb2.Manifest()
    new.CopyFrom(man)
    new.version = man.version + 1
    sec = table_pb2.IndexSection(indices=[meta])
    data = mf.write_manifest(new, None, sec.SerializeToString())
    with open(
        os.path.join(root, "_versions", mf.manifest_name(new.version, m.naming or mf.NamingScheme.V2)), "wb"
    ) as f:
        f.write(data)
    ds = lance.dataset(root)
    assert ds.version == new.version
    (idx,) = ds.describe_indices()
    assert idx.type_url == "/lance.table.ZoneMapIndexDetails" and idx.field_names == ["i"]
    assert idx.num_rows_indexed == 90
    assert "i_idx(ZoneMap)" in ds.scanner(filter="i > 30").explain_plan()
    assert ds.to_table(filter="i > 30").num_rows == sum(
        1 for v in t.column("i").to_pylist() if v is not None and v > 30
    )
    # and our reader reads back what we wrote
    assert read_zonemap(_Dir(root), meta).all_zones()[0].length == 16


def _brute(vals: list, op: str, value) -> bool:
    def ok(v):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return False
        if op == "=":
            return v == value
        if op == "<":
            return v < value
        if op == "<=":
            return v <= value
        if op == ">":
            return v > value
        if op == ">=":
            return v >= value
        if op == "between":
            return value[0] <= v <= value[1]
        return v in value

    return any(ok(v) for v in vals)


_val = st.one_of(st.none(), st.floats(-100, 100), st.just(float("nan")))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(_val, min_size=1, max_size=8), min_size=1, max_size=5),
    st.sampled_from(["=", "<", "<=", ">", ">=", "between", "in"]),
    st.floats(-100, 100),
    st.floats(-100, 100),
)
def test_zones_that_may_match_conservative(chunks, op, a, b):
    zm = ZoneMap(8, pa.float64())
    for i, chunk in enumerate(chunks):
        rest = [v for v in chunk if v is not None and not math.isnan(v)]
        zm.zones[i] = [
            Zone(
                i,
                0,
                len(chunk),
                min(rest) if rest else None,
                max(rest) if rest else None,
                sum(v is None for v in chunk),
                sum(v is not None and math.isnan(v) for v in chunk),
            )
        ]
    value = (a, b) if op == "between" else ([a, b] if op == "in" else a)
    kept = {z.fragment_id for z in zones_that_may_match(zm, op, value)}
    for i, chunk in enumerate(chunks):
        if _brute(chunk, op, value):
            assert i in kept


@pytest.mark.parametrize("col", ["i", "f", "s"])
def test_same_content_as_pylance(tmp_path, col):
    """Our file holds the same zone rows and the same null-rows global buffer as pylance's."""
    from lance.file import LanceFileReader

    root = str(tmp_path / "ds")
    t = _table(90)
    ds = lance.write_dataset(t, root, max_rows_per_file=40)
    ds.create_scalar_index(col, IndexConfig(index_type="zonemap", parameters={"rows_per_zone": 16}))
    _, m = _latest(root)
    (theirs,) = _indices(m)
    field = next(f for f in m.manifest.fields if f.name == col)
    frags, base = [], 0
    for frag in m.manifest.fragments:
        frags.append((frag.id, t.column(col).slice(base, frag.physical_rows).combine_chunks()))
        base += frag.physical_rows
    (path,), ours = write_zonemap(_Dir(str(tmp_path / "mine")), field, frags, dataset_version=1, rows_per_zone=16)
    assert ours.index_details.value == theirs.index_details.value
    a = os.path.join(root, "_indices", str(uuid.UUID(bytes=theirs.uuid.uuid)), "zonemap.lance")
    b = str(tmp_path / "mine" / path)

    def content(p):
        r = LanceFileReader(p)
        md = r.metadata()
        gb = md.global_buffers[1]
        with open(p, "rb") as f:
            buf = f.read()[gb.position : gb.position + gb.size]
        return repr(r.read_all().to_table().to_pylist()), buf, r.read_all().to_table().schema

    assert content(a) == content(b)
