"""The DuckDB/Polars view prunes with the same zone maps as ``Table.to_arrow``:
the pyarrow Expressions the engines push down give range terms
(``predicate.range_terms``), and a 1% key range through ``t.to_duckdb()``
reads at most 2 of 20 fragments and under 3% of a full scan's bytes, counted
by the scan's own byte counter (every byte the data files served), as the
view logs it when a stream ends."""

from __future__ import annotations

import datetime as dt
import decimal
import logging

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tessera.catalog import Table
from tessera.catalog.query.predicate import RangeTerm, filter_mask, range_terms

N, FRAGS = 2_000_000, 20


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """2M rows sorted by key in 20 fragments (written by Tessera), a ZONEMAP
    index on key built by pylance."""
    import lance

    key = np.arange(N, dtype=np.int64)
    rng = np.random.default_rng(11)
    f = rng.normal(size=N)
    f[::101] = np.nan
    data = pa.table(
        {
            "key": key,
            "v": rng.random(N),
            "f": f,
            "s": pa.array([f"k{k:08d}" for k in range(N)]),
            "opt": pa.array(key, pa.int64(), mask=key % 13 == 0),
        }
    )
    uri = str(tmp_path_factory.mktemp("views") / "big")
    Table.create(uri, data, max_rows_per_file=N // FRAGS)
    ds = lance.dataset(uri)
    for col in ("key", "f", "s", "opt"):
        ds.create_scalar_index(col, "ZONEMAP")
    return uri, data


class _ScanLog(logging.Handler):
    """What every view stream read, from the view's DEBUG records."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.stats: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        got = getattr(record, "tessera_scan_stats", None)
        if got is not None:
            self.stats.append(got)

    def take(self) -> dict:
        """The sum over the streams logged since the last call."""
        out: dict[str, int] = {}
        for st in self.stats:
            for k, v in st.items():
                out[k] = out.get(k, 0) + v
        self.stats = []
        return out


@pytest.fixture()
def scan_log():
    logger = logging.getLogger("tessera.catalog.query.stream")
    handler, level = _ScanLog(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_a_one_percent_key_range_through_duckdb_reads_two_fragments(big, scan_log):
    uri, data = big
    t = Table.open(uri)
    con = duckdb.connect()
    t.to_duckdb("big", con)
    full = con.sql("SELECT key, v FROM big").to_arrow_table()
    full_stats = scan_log.take()
    assert full.num_rows == N and full_stats["fragments"] == FRAGS and full_stats.get("pruned_fragments", 0) == 0

    lo = N // 2 + 12_345
    hi = lo + N // 100
    got = con.sql(f"SELECT key, v FROM big WHERE key >= {lo} AND key < {hi} ORDER BY key").to_arrow_table()
    stats = scan_log.take()
    assert got.column("key").to_pylist() == list(range(lo, hi))
    want = data.select(["key", "v"]).filter((pc.field("key") >= lo) & (pc.field("key") < hi))
    assert got.column("v").combine_chunks().equals(want.column("v").combine_chunks())  # the unpruned answer
    assert stats["fragments"] <= 2 and stats["pruned_fragments"] >= FRAGS - 2, stats
    assert stats["bytes_read"] <= 0.03 * full_stats["bytes_read"], (stats, full_stats)

    # the same through the relation to_duckdb() returns, and its aggregate
    rel = t.to_duckdb()
    assert rel.filter(f"key BETWEEN {lo} AND {lo + 999}").aggregate("count(*), sum(key)").fetchall() == [
        (1000, sum(range(lo, lo + 1000)))
    ]
    stats = scan_log.take()
    assert stats["fragments"] == 1 and stats["bytes_read"] <= 0.03 * full_stats["bytes_read"], stats


def test_without_the_index_duckdb_reads_everything(tmp_path, scan_log):
    """The same query on the same rows without a zone map: the count above is
    pruning's doing, not DuckDB's."""
    n = 200_000
    uri = str(tmp_path / "plain")
    Table.create(uri, pa.table({"key": np.arange(n, dtype=np.int64)}), max_rows_per_file=n // FRAGS)
    con = duckdb.connect()
    Table.open(uri).to_duckdb("plain", con)
    assert con.execute("SELECT count(*) FROM plain WHERE key >= 1000 AND key < 3000").fetchall() == [(2000,)]
    stats = scan_log.take()
    assert stats["fragments"] == FRAGS and stats.get("pruned_fragments", 0) == 0, stats


QUERIES = [
    "key = 777",
    "key IN (5, 150000, 1999999)",
    "key BETWEEN 1000 AND 1200 AND f > 0",
    "f > 2.5",  # NaN zones are never pruned
    "s >= 'k01500000' AND s < 'k01500100'",
    "opt < 50",
    "opt = 26",  # a NULL row: no match
    "key > 10 AND key < 5",
    "key > 1999990 OR key < 5",  # OR: not pruned, same answer
    "key >= 1999990 AND opt > 1999995",
    "key < 0",
]


@pytest.mark.parametrize("where", QUERIES)
def test_pruning_through_duckdb_never_changes_an_answer(big, scan_log, where):
    uri, data = big
    t = Table.open(uri)
    con = duckdb.connect()
    t.to_duckdb("big", con)
    query = "SELECT key, f, s, opt FROM {} WHERE " + where + " ORDER BY key"
    got = con.sql(query.format("big")).to_arrow_table()
    stats = scan_log.take()
    con.register("memory", data)  # the rows as written, in memory: DuckDB's answer without Tessera
    want = con.sql(query.format("memory")).to_arrow_table()
    assert got.num_rows == want.num_rows and got.to_pandas().equals(want.to_pandas()), where  # NaN == NaN
    if where in ("key = 777", "key IN (5, 150000, 1999999)", "key < 0"):
        assert stats.get("pruned_fragments", 0) >= FRAGS - 3, (where, stats)


def test_polars_scans_prune_too(big):
    pl = pytest.importorskip("polars")
    uri, _ = big
    ds = Table.open(uri).to_dataset()
    lf = pl.scan_pyarrow_dataset(ds)
    assert lf.filter((pl.col("key") >= 100_000) & (pl.col("key") < 102_000)).select(pl.len()).collect().item() == 2000
    assert ds.last_scan.stats["fragments"] == 1 and ds.last_scan.stats["pruned_fragments"] == FRAGS - 1
    assert lf.filter(pl.col("key").is_in([5, 1_500_000])).select("key").collect()["key"].to_list() == [5, 1_500_000]
    assert ds.last_scan.stats["fragments"] == 2


def test_table_reads_with_an_expression_filter_prune(big):
    uri, _ = big
    t = Table.open(uri)
    scan = t.scanner(columns=["key"], filter=(pc.field("key") >= 300_000) & (pc.field("key") < 300_010))
    assert scan.to_table().column("key").to_pylist() == list(range(300_000, 300_010))
    assert scan.stats["fragments"] == 1 and scan.stats["pruned_fragments"] == FRAGS - 1


# -- range terms of pyarrow Expressions ---------------------------------------------------------

SCHEMA_DATA_N = 3000


def _data() -> pa.Table:
    rng = np.random.default_rng(7)
    n = SCHEMA_DATA_N
    f = rng.normal(size=n)
    f[::17] = np.nan
    return pa.table(
        {
            "key": pa.array(rng.integers(-50, 50, n)),
            "i8": pa.array(rng.integers(-100, 100, n).astype(np.int8)),
            "u": pa.array(rng.integers(0, 250, n).astype(np.uint8)),
            "f": pa.array(f),
            "f32": pa.array(rng.normal(size=n).astype(np.float32)),
            "s": pa.array([None if x % 9 == 0 else f"v{x:02d}" for x in rng.integers(0, 30, n)]),
            "d": pa.array(rng.integers(19000, 19100, n).astype("int32")).cast(pa.date32()),
            "ts": pa.array(rng.integers(0, 10**6, n) * 1000, pa.timestamp("us")),
            "dec": pa.array([decimal.Decimal(int(x)) / 4 for x in rng.integers(-40, 40, n)], pa.decimal128(6, 2)),
            "st": pa.array([{"a": int(x)} for x in rng.integers(0, 9, n)]),
        }
    )


F = pc.field
EXPRESSIONS = {
    "range": ((F("key") >= 10) & (F("key") < 20), [("key", ">=", [10]), ("key", "<", [20])]),
    "literal on the left": (pc.scalar(5) < F("key"), [("key", ">", [5])]),
    "and (not kleene)": (
        pc.Expression._call("and", [F("key") > 1, F("s") == "v07"]),
        [("key", ">", [1]), ("s", "=", ["v07"])],
    ),
    "is_in": (F("key").isin([1, 2, 3]), [("key", "in", [1, 2, 3])]),
    "duckdb's IN": (
        pc.if_else(F("key").is_valid(), F("key").isin([4, 5]), pa.scalar(None, pa.bool_())),
        [("key", "in", [4, 5])],
    ),
    "narrow column, wide literal": ((F("i8") > 10) & (F("u") <= 200), [("i8", ">", [10]), ("u", "<=", [200])]),
    "out of the column's range": ((F("u") < 300) & (F("i8") > -1000), []),
    "float literal on an int column": (F("key") > 2.5, []),
    "float that is an int": (F("key") > 2.0, []),  # Arrow compares in float64: not decided here
    "double on a float32 column": (F("f32") > 0.1, []),  # 0.1 is no float32
    "exact double on a float32 column": (F("f32") > 0.5, [("f32", ">", [0.5])]),
    "NaN": (F("f") < float("nan"), [("f", "<", [float("nan")])]),
    "dates": (F("d") <= pa.scalar(dt.date(2022, 1, 15)), [("d", "<=", [dt.date(2022, 1, 15)])]),
    "timestamp in ns": (
        F("ts") >= pa.scalar(5 * 10**8, pa.timestamp("ns")),
        [("ts", ">=", [dt.datetime(1970, 1, 1, 0, 0, 0, 500000)])],
    ),
    "timestamp a ns off": (F("ts") >= pa.scalar(5 * 10**8 + 1, pa.timestamp("ns")), []),
    "date vs timestamp": (F("d") >= pa.scalar(dt.datetime(2022, 1, 1)), []),
    "decimal": (F("dec") >= pa.scalar(3, pa.int8()), [("dec", ">=", [decimal.Decimal("3.00")])]),
    "decimal too fine": (F("dec") == pa.scalar(decimal.Decimal("1.255")), []),
    "OR": ((F("key") > 1) | (F("key") < 0), []),
    "NOT": (~(F("key") > 3), []),
    "not equal": (F("key") != 3, []),
    "cast column": (F("key").cast(pa.int8()) == 3, []),
    "arithmetic": (F("key") + 1 > 3, []),
    "NULL literal": (F("key") == pa.scalar(None, pa.int64()), []),
    "NULL in is_in": (F("s").isin(["v01", None]), []),
    "nested field": (F(("st", "a")) == 3, []),
    "field by position": (F(0) == 3, []),
    "unknown field": (F("nope") == 3, []),
    "column vs column": (F("key") < F("i8"), []),
    "if_else with a true branch": (pc.if_else(F("key") > 3, F("key") < 10, pa.scalar(True)), []),
}


@pytest.mark.parametrize("name", list(EXPRESSIONS))
def test_expression_range_terms_are_implied_by_the_filter(name):
    """Every row an Expression selects satisfies each of its range terms (so
    pruning by them never drops a matching row); what cannot be decided exactly
    yields none."""
    data = _data()
    expr, expected = EXPRESSIONS[name]
    terms = range_terms(expr, data.schema)

    def plain(v):
        return v.as_py()

    got = [(t.column, t.op, [plain(v) for v in t.values]) for t in terms]
    if name == "NaN":
        assert [(c, o) for c, o, _ in got] == [("f", "<")] and np.isnan(got[0][2][0])
    else:
        assert got == expected, name
    assert all(isinstance(t, RangeTerm) and t.values[0].type == data.schema.field(t.column).type for t in terms)
    try:
        mask = filter_mask(expr, data).to_numpy(zero_copy_only=False)
    except Exception:  # an Expression pyarrow cannot evaluate here (an unknown field): no terms is all we need
        assert terms == []
        return
    ops = {"=": pc.equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}
    for t in terms:
        col = data.column(t.column)
        if t.op == "in":
            holds = pc.is_in(col, value_set=pa.array([v.as_py() for v in t.values], col.type))
        else:
            holds = ops[t.op](col, t.values[0])
        holds = pc.fill_null(holds, False).to_numpy(zero_copy_only=False)
        assert not (mask & ~holds).any(), (name, t)


def test_expression_terms_with_strange_field_names():
    """Field names are read from the serialized Expression exactly (the
    metadata pairs keep repeated keys and any bytes)."""
    schema = pa.schema([("a\nliteral: '0'", pa.int64()), ("é 'x'", pa.string()), ("", pa.int32())])
    expr = (F("a\nliteral: '0'") > 5) & (F("é 'x'") == "q") & (F("") <= pa.scalar(3, pa.int32()))
    got = [(t.column, t.op, [v.as_py() for v in t.values]) for t in range_terms(expr, schema)]
    assert got == [("a\nliteral: '0'", ">", [5]), ("é 'x'", "=", ["q"]), ("", "<=", [3])]


def test_a_deep_conjunction_and_a_big_in_list():
    schema = pa.schema([("k", pa.int64())])
    expr = F("k") > 0
    for i in range(200):
        expr = expr & (F("k") != i)
    expr = expr & F("k").isin(list(range(5000)))
    terms = range_terms(expr, schema)
    assert [t.op for t in terms] == [">", "in"] and len(terms[1].values) == 5000
