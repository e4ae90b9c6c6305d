"""A zone map is read once per process: scans of the table (each through a
fresh handle) reuse it; an index rebuilt under a new uuid is read anew, and the
answers stay exact."""

from __future__ import annotations

import pyarrow as pa

from tessera.catalog import Table, pruning
from tessera.stores.local import LocalObjectStore


def test_scans_read_each_zone_map_once(tmp_path, monkeypatch):
    monkeypatch.setattr(pruning, "_ZONEMAP_CACHE", type(pruning._ZONEMAP_CACHE)())
    uri = str(tmp_path / "t")
    t = Table.create(uri, pa.table({"key": pa.array(range(10_000), pa.int64())}), max_rows_per_file=1000)
    t.create_index("key")
    reads: list[str] = []
    real = LocalObjectStore.read

    def counted(self, path, *a, **kw):
        reads.append(path)
        return real(self, path, *a, **kw)

    monkeypatch.setattr(LocalObjectStore, "read", counted)

    def scan(lo: int, hi: int) -> list[int]:
        s = Table.open(uri).scanner(filter=f"key >= {lo} AND key < {hi}")
        out = s.to_table().column("key").to_pylist()
        assert s.stats["fragments"] == 1  # pruned by the zone map
        return out

    assert scan(5000, 5100) == list(range(5000, 5100))
    assert scan(7000, 7050) == list(range(7000, 7050))
    assert len([p for p in reads if p.startswith("_indices/")]) == 1
    # an append and an index update: a new index uuid, read once more
    t = Table.open(uri)
    t.append(pa.table({"key": pa.array(range(10_000, 11_000), pa.int64())}))
    t.optimize_indices()
    reads.clear()
    assert scan(10_500, 10_600) == list(range(10_500, 10_600))
    assert scan(10_700, 10_800) == list(range(10_700, 10_800))
    assert len([p for p in reads if p.startswith("_indices/")]) == 1


def _walk(zones, op, value, fid):
    from tessera.format import zonemap as zm

    out: list[tuple[int, int]] = []
    for z in sorted(zones.zones.get(fid, []), key=lambda z: z.start):
        if zm._may(z, op, value):
            if out and z.start <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], z.start + z.length))
            else:
                out.append((z.start, z.start + z.length))
    return out


def test_the_fragment_bound_never_drops_a_zone():
    """Rejecting a whole fragment by its zones' overall bounds gives the same
    ranges as walking every zone (NULL-only and NaN zones included)."""
    import random

    from tessera.catalog.predicate import RangeTerm
    from tessera.format import zonemap as zm

    rng = random.Random(5)
    for _ in range(300):
        zmap = zm.ZoneMap(10, pa.float64())
        for fid in range(3):
            start = 0
            for _ in range(rng.randint(0, 5)):
                kind = rng.random()
                if kind < 0.1:
                    lo = hi = None
                elif kind < 0.15:
                    lo, hi = 1.0, float("nan")
                else:
                    lo = rng.uniform(-50, 50)
                    hi = lo + rng.uniform(0, 20)
                zmap.zones.setdefault(fid, []).append(
                    zm.Zone(fid, start, 10, lo, hi, 10 if lo is None else 0, 1 if hi != hi else 0)
                )
                start += 10
        op = rng.choice(["=", "<", "<=", ">", ">=", "in"])
        if op == "in":
            want = [rng.uniform(-60, 80) for _ in range(3)]
            values = [pa.scalar(v) for v in want]
        else:
            want = rng.uniform(-60, 80)
            values = [pa.scalar(want)]
        term = RangeTerm("x", op, tuple(values))
        for fid in range(3):
            assert pruning._term_ranges(zmap, term, fid) == _walk(zmap, op, want, fid)
