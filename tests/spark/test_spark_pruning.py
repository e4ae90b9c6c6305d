"""Spark reads prune with the table's zone maps: the pushed filters' range
terms and the ZONEMAP index (read once, at planning) give each task only the
row ranges that can match.  On 20 fragments sorted by key, a 1% key range
reads at most 2 fragments and under 3% of a full scan's bytes, as the tasks
themselves count them (``read_stats_dir``: every task writes what its
fragment readers read from data files), and the answer is the unpruned one.

Filter pushdown is refused on every PySpark so far (see
:func:`tessera.catalog.spark.pushdown_refusal`), so these tests read through
the ``pushdown_probe`` source (refusal bypassed), a fresh DataFrame per query.
"""

from __future__ import annotations

import functools
import glob
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tessera.catalog import Table
from tessera.format.file.checksum import BLOCK_SIZE

pytestmark = pytest.mark.spark

ROWS, FRAGS, ROWS_PER_ZONE = 200_000, 20, 1000


@functools.cache
def _data() -> pa.Table:
    rng = np.random.default_rng(17)
    key = np.arange(ROWS, dtype=np.int64)
    return pa.table(
        {
            "key": key,
            "v": rng.random(ROWS),
            "payload": pa.array([f"row-{k:08d}-{x:x}" for k, x in zip(key.tolist(), rng.integers(1 << 40, size=ROWS))]),
            "opt": pa.array(key, pa.int64(), mask=key % 7 == 0),
        }
    )


@pytest.fixture()
def sorted_table(tmp_path, lance):
    """200,000 rows sorted by key in 20 fragments written by Tessera; no index yet."""
    uri = str(tmp_path / "sorted")
    data = _data()
    Table.create(uri, data, max_rows_per_file=ROWS // FRAGS)
    assert len(Table.open(uri).fragments) == FRAGS
    return uri, data


def _index(lance, uri: str, *columns: str) -> None:
    """ZONEMAP indices built by pylance, zones of ROWS_PER_ZONE rows."""
    from lance.indices import IndexConfig

    ds = lance.dataset(uri)
    for col in columns:
        ds.create_scalar_index(col, IndexConfig("zonemap", {"rows_per_zone": ROWS_PER_ZONE}))


def _task_stats(folder: str) -> dict[str, int]:
    """The sum of what every task of a query read (their JSON files)."""
    out: dict[str, int] = {"tasks": 0}
    for name in glob.glob(os.path.join(folder, "*.json")):
        with open(name) as f:
            got = json.load(f)
        out["tasks"] += 1
        for k, v in got.items():
            out[k] = out.get(k, 0) + v
    return out


def _load(spark, fmt: str, uri: str, stats_dir: str | None = None, **options: str):
    reader = spark.read.format(fmt)
    if stats_dir is not None:
        reader = reader.option("read_stats_dir", stats_dir)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(uri)


def test_a_one_percent_key_range_reads_two_fragments(spark, pushdown_probe, sorted_table, lance, tmp_path):
    uri, data = sorted_table
    lo = ROWS // 2 + 1234
    hi = lo + ROWS // 100
    where = f"key >= {lo} AND key < {hi}"

    def pruned_read(name: str):
        folder = str(tmp_path / name)
        # sorted here: Spark's orderBy would scan the table twice (once to sample the range bounds)
        rows = sorted(_load(spark, pushdown_probe, uri, folder).filter(where).collect(), key=lambda r: r.key)
        return rows, _task_stats(folder)

    # without an index nothing can be pruned: every fragment is read
    rows, before = pruned_read("no-index")
    assert len(rows) == hi - lo and before["fragments"] == FRAGS, before

    _index(lance, uri, "key")
    full_dir = str(tmp_path / "full")
    assert _load(spark, pushdown_probe, uri, full_dir).count() == ROWS
    full = _task_stats(full_dir)
    assert full["fragments"] == FRAGS and full["rows"] == ROWS, full

    rows, stats = pruned_read("pruned")
    assert stats["fragments"] <= 2 and stats["rows"] < ROWS // 50, stats
    # 3% of the table, plus what verifying checksums adds: a read that starts or ends inside a 64 KiB
    # block not yet verified by this worker fetches the whole block (at most two per column read)
    widening = 2 * len(data.column_names) * BLOCK_SIZE * stats["fragments"]
    assert stats["bytes_read"] <= 0.03 * full["bytes_read"] + widening, (stats, full)
    assert stats["bytes_read"] <= 0.1 * full["bytes_read"], (stats, full)

    # the answer is the unpruned one: the rows written, and Spark filtering a plain read itself
    want = data.filter((pc.field("key") >= lo) & (pc.field("key") < hi))
    assert [r.key for r in rows] == want.column("key").to_pylist()
    assert [r.payload for r in rows] == want.column("payload").to_pylist()
    assert [r.opt for r in rows] == want.column("opt").to_pylist()
    plain = sorted(_load(spark, "tessera", uri).filter(where).collect(), key=lambda r: r.key)  # no pushdown, no pruning
    assert plain == rows


CONDITIONS = [
    "key = 777",
    "key IN (5, 150000, 199999)",
    "key BETWEEN 1000 AND 1200 AND opt > 1100",
    "key < 0",
    "key >= 199990",
    "payload >= 'row-00150000' AND payload < 'row-00150100'",
    "payload LIKE 'row-0012345%'",
    "opt < 50",
    "opt = 14",  # a NULL row: no match
    "opt IS NULL AND key < 100",
    "key < 10 OR key > 199990",  # not pushed: Spark filters, nothing pruned
    "NOT (key IN (1, 2, 3)) AND key < 5",
]


def test_pruning_never_changes_an_answer(spark, pushdown_probe, tmp_path, lance):
    """Zone maps on key, payload and opt, then deletions and an append the index
    does not cover: one Spark job per source answers every condition; the
    pruned source must give the unpruned answers."""
    from functools import reduce

    from pyspark.sql import functions as F

    uri = str(tmp_path / "t")
    data = _data().slice(0, 50_000)
    Table.create(uri, data, max_rows_per_file=5_000)
    _index(lance, uri, "key", "payload", "opt")
    t = Table.open(uri)
    t.delete("key >= 1050 AND key < 1100")
    extra = pa.table(
        {
            "key": pa.array([1060, 150000, 199999], pa.int64()),
            "v": [0.5, 1.5, 2.5],
            "payload": ["row-00150050-late", "row-00123456", "z"],
            "opt": pa.array([1101, None, 7], pa.int64()),
        }
    )
    t.append(extra)

    def by_condition(fmt: str) -> dict[int, list]:
        parts = [
            _load(spark, fmt, uri).filter(c).select(F.lit(i).alias("c"), "key", "payload", "opt")
            for i, c in enumerate(CONDITIONS)
        ]
        out: dict[int, list] = {i: [] for i in range(len(CONDITIONS))}
        for r in reduce(lambda a, b: a.unionByName(b), parts).collect():
            out[r.c].append((r.key, r.payload, r.opt))
        return {i: sorted(v) for i, v in out.items()}

    got, want = by_condition(pushdown_probe), by_condition("tessera")
    for i, cond in enumerate(CONDITIONS):
        assert got[i] == want[i], cond
    assert want[CONDITIONS.index("key = 777")] == [(777, data.column("payload")[777].as_py(), None)]
    assert len(want[CONDITIONS.index("key IN (5, 150000, 199999)")]) == 3  # 5, and the two appended rows
    assert want[CONDITIONS.index("key BETWEEN 1000 AND 1200 AND opt > 1100")][0][0] == 1060  # appended


def test_the_planner_prunes_fragments_into_fewer_tasks(spark, pushdown_probe, sorted_table, lance):
    """Fragments no zone can match get no task (a task per fragment here)."""
    uri, _ = sorted_table
    _index(lance, uri, "key")

    def parts(cond: str) -> int:
        return _load(spark, pushdown_probe, uri, min_partitions="64").filter(cond).rdd.getNumPartitions()

    assert parts("key >= 0") == FRAGS
    assert parts("key >= 190000") == 1
    assert parts("key IN (5, 105000)") == 2
    assert parts("key < 0") == 1  # no fragment: Spark's empty stand-in partition


def test_the_filter_option_prunes_without_pushdown(spark, sorted_table, lance, tmp_path):
    """``option("filter", sql)`` on the plain source: the DataFrame is the
    table's matching rows, so every query of it (count, collect, a self-union)
    answers for them; the zone maps leave at most 2 fragments to read."""
    from pyspark.errors import PySparkException

    from tessera.catalog.errors import SparkOptionError

    uri, data = sorted_table
    _index(lance, uri, "key")
    lo = ROWS // 2 + 777
    hi = lo + ROWS // 100
    where = f"key >= {lo} AND key < {hi} AND opt IS NOT NULL"
    folder = str(tmp_path / "stats")
    df = _load(spark, "tessera", uri, folder, filter=where)
    want = data.filter((pc.field("key") >= lo) & (pc.field("key") < hi) & pc.field("opt").is_valid())
    assert df.count() == want.num_rows
    stats = _task_stats(folder)
    assert stats["fragments"] <= 2 and stats["rows"] < ROWS // 50, stats
    rows = sorted(df.collect(), key=lambda r: r.key)
    assert [r.key for r in rows] == want.column("key").to_pylist()
    assert [r.payload for r in rows] == want.column("payload").to_pylist()
    assert df.union(df).count() == 2 * want.num_rows  # both scans of the DataFrame are filtered
    assert df.filter("key % 2 = 0").count() == sum(k % 2 == 0 for k in want.column("key").to_pylist())
    plain = _load(spark, "tessera", uri).filter(where)  # Spark filtering a full read: the same rows
    assert sorted(r.key for r in plain.collect()) == [r.key for r in rows]
    for bad in ("no_such_column > 1", "key >>> 3", "   "):
        with pytest.raises((SparkOptionError, PySparkException), match="option filter"):
            _load(spark, "tessera", uri, filter=bad).schema  # noqa: B018 - load() plans the schema
