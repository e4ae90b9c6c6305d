"""A zone map is read once per process: scans of the table (each through a
fresh handle) reuse it; an index rebuilt under a new uuid is read anew, and the
answers stay exact."""

from __future__ import annotations

import pyarrow as pa

from tessera.catalog import Table
from tessera.catalog.query import pruning
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
    from tessera.format.table import zonemap as zm

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

    from tessera.catalog.query.predicate import RangeTerm
    from tessera.format.table import zonemap as zm

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


def test_zones_compared_as_arrays_give_the_zone_by_zone_ranges():
    """``ZoneMap.may_ranges`` (one numpy comparison over a fragment's zones)
    answers what walking zone by zone answers: integer and float zones, gaps
    between zones, zones given out of order, every operator, values of the
    other kind or beyond int64 (where it declines, and the walk decides)."""
    import random

    from tessera.catalog.query.predicate import RangeTerm
    from tessera.format.table import zonemap as zm

    rng = random.Random(11)
    declined = answered = 0
    for case in range(400):
        ints = case % 2 == 0
        zmap = zm.ZoneMap(10, pa.int64() if ints else pa.float64())
        start = 0
        zones = []
        for _ in range(rng.randint(1, 12)):
            start += rng.choice([0, 0, 0, 5])  # now and then a gap (deleted rows of a rewritten fragment)
            lo = rng.randint(-100, 100) if ints else rng.uniform(-100, 100)
            hi = lo + (rng.randint(0, 30) if ints else rng.uniform(0, 30))
            zones.append(zm.Zone(0, start, 10, lo, hi, rng.choice([0, 0, 3]), 0))
            start += 10
        rng.shuffle(zones)
        zmap.zones[0] = zones
        op = rng.choice(["=", "<", "<=", ">", ">=", "in", "between"])

        def value():
            pick = rng.random()
            if pick < 0.1:
                return 1 << 70  # beyond int64
            if pick < 0.2:
                return rng.uniform(-120, 120) if ints else rng.randint(-120, 120)  # the other kind
            return rng.randint(-120, 140) if ints else rng.uniform(-120, 140)

        want = [value() for _ in range(3)] if op == "in" else (value(), value()) if op == "between" else value()
        fast = zmap.may_ranges(0, op, want)
        if fast is None:
            declined += 1
        else:
            answered += 1
            assert fast == _walk(zmap, op, want, 0), (op, want, zones)
        vals = want if op == "in" else [want]
        if op != "between" and all(not isinstance(v, int) or abs(v) < 1 << 62 for v in vals):
            term = RangeTerm("x", op, tuple(pa.scalar(v) for v in vals))
            assert pruning._term_ranges(zmap, term, 0) == _walk(zmap, op, want, 0)
    assert answered > 250 and declined > 20  # both paths were exercised


def test_zones_without_bounds_are_never_compared_as_arrays():
    from tessera.format.table import zonemap as zm

    zmap = zm.ZoneMap(10, pa.float64())
    zmap.zones[0] = [zm.Zone(0, 0, 10, 1.0, 2.0, 0, 0), zm.Zone(0, 10, 10, None, None, 10, 0)]
    zmap.zones[1] = [zm.Zone(1, 0, 10, 1.0, float("nan"), 0, 1)]
    zmap.zones[2] = [zm.Zone(2, 0, 10, 1, 5, 0, 0), zm.Zone(2, 10, 10, 1.5, 9.0, 0, 0)]  # mixed kinds
    assert zmap.may_ranges(0, ">", 0.0) is None
    assert zmap.may_ranges(1, ">", 0.0) is None
    assert zmap.may_ranges(2, ">", 0) is None


def test_a_zone_all_of_whose_values_match_is_told_exactly():
    """``_must`` (every value between a zone's bounds matches: the fragment is
    kept whole without comparing its zones) against brute force over every
    integer in the zone, for every operator; it says no for zones it cannot
    bound (NaN, no bounds, values that do not compare)."""
    import operator
    import random

    from tessera.format.table import zonemap as zm

    ops = {"=": operator.eq, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
    rng = random.Random(3)
    said = {True: 0, False: 0}
    for _ in range(3000):
        lo = rng.randint(-20, 20)
        z = zm.Zone(0, 0, 10, lo, lo + rng.choice([0, 0, 1, 3, 10]), rng.choice([0, 2]), 0)
        op = rng.choice([*ops, "in", "between"])
        if op == "in":
            value: object = [rng.randint(-25, 25) for _ in range(rng.randint(1, 3))]
            truth = all(v in value for v in range(z.min, z.max + 1))  # type: ignore[operator]
        elif op == "between":
            value = sorted((rng.randint(-25, 25), rng.randint(-25, 25)))
            truth = all(value[0] <= v <= value[1] for v in range(z.min, z.max + 1))  # type: ignore[index]
        else:
            value = rng.randint(-25, 25)
            truth = all(ops[op](v, value) for v in range(z.min, z.max + 1))
        got = zm._must(z, op, value)
        assert got == truth, (z, op, value)
        said[got] += 1
        if got:
            assert zm._may(z, op, value)
    assert said[True] > 300 and said[False] > 300
    assert not zm._must(zm.Zone(0, 0, 10, 1.0, float("nan"), 0, 1), ">", 0.0)
    assert not zm._must(zm.Zone(0, 0, 10, None, None, 10, 0), ">", 0)
    assert not zm._must(zm.Zone(0, 0, 10, 1, 5, 0, 0), ">", "a")


def test_a_fragment_whose_zones_all_match_is_kept_whole_with_its_gaps():
    from tessera.catalog.query.predicate import RangeTerm
    from tessera.format.table import zonemap as zm

    zmap = zm.ZoneMap(10, pa.int64())
    zmap.zones[0] = [zm.Zone(0, 20, 10, 5, 9, 0, 0), zm.Zone(0, 0, 10, 1, 4, 0, 0), zm.Zone(0, 10, 5, 4, 6, 1, 0)]
    term = RangeTerm("x", ">=", (pa.scalar(0),))
    assert pruning._term_ranges(zmap, term, 0) == [(0, 15), (20, 30)] == _walk(zmap, ">=", 0, 0)
    got = pruning._term_ranges(zmap, term, 0)
    got.append((99, 100))  # a caller's list is its own
    assert pruning._term_ranges(zmap, term, 0) == [(0, 15), (20, 30)]
