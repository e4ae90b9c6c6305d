"""catalog.predicate: SQL / Expression predicates -> pyarrow Expressions.

Each supported construct is checked against a Python reference predicate that
spells out SQL's three-valued logic (None = unknown = row not selected), and a
subset is cross-checked against pylance itself (the reference implementation).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tessera.catalog.errors import (
    NotAPredicateError,
    PredicateError,
    PredicateSyntaxError,
    PredicateTypeError,
    TesseraError,
    UnknownColumnError,
    UnsupportedPredicateError,
)
from tessera.catalog.query.predicate import filter_mask, referenced_columns, to_expression, to_sql

UTC = dt.UTC


def _ts(day: int, hour: int, tz: dt.tzinfo | None = None) -> dt.datetime:
    return dt.datetime(2024, 1, day, hour, tzinfo=tz)


ROWS: list[dict[str, Any]] = [
    # id amount price  ratio city   flag   day              ts          struct s              odd  dec
    dict(
        id=1,
        amount=5,
        price=1.5,
        ratio=0.1,
        city="SF",
        flag=True,
        day=dt.date(2024, 1, 1),
        ts=_ts(1, 8),
        tsz=_ts(1, 8, UTC),
        s={"x": 0, "y": "a"},
        odd=1,
        dec=Decimal("1.25"),
    ),
    dict(
        id=2,
        amount=10,
        price=None,
        ratio=0.2,
        city="NY",
        flag=False,
        day=dt.date(2024, 1, 2),
        ts=_ts(1, 9),
        tsz=_ts(1, 9, UTC),
        s={"x": 1, "y": None},
        odd=2,
        dec=Decimal("2.50"),
    ),
    dict(
        id=3,
        amount=None,
        price=2.0,
        ratio=None,
        city=None,
        flag=None,
        day=None,
        ts=None,
        tsz=None,
        s=None,
        odd=3,
        dec=None,
    ),
    dict(
        id=4,
        amount=20,
        price=0.1,
        ratio=0.3,
        city="sf",
        flag=True,
        day=dt.date(2024, 1, 4),
        ts=_ts(1, 11),
        tsz=_ts(1, 11, UTC),
        s={"x": 3, "y": "c"},
        odd=4,
        dec=Decimal("10.00"),
    ),
    dict(
        id=5,
        amount=15,
        price=3.0,
        ratio=0.1,
        city="LA",
        flag=None,
        day=dt.date(2024, 1, 5),
        ts=_ts(1, 12),
        tsz=_ts(1, 12, UTC),
        s={"x": None, "y": "d"},
        odd=5,
        dec=Decimal("-3.75"),
    ),
    dict(
        id=6,
        amount=-7,
        price=-1.0,
        ratio=0.5,
        city="S_F",
        flag=False,
        day=dt.date(2023, 12, 31),
        ts=_ts(2, 0),
        tsz=_ts(2, 0, UTC),
        s={"x": 5, "y": "e"},
        odd=6,
        dec=Decimal("0.00"),
    ),
    dict(
        id=7,
        amount=0,
        price=None,
        ratio=1.0,
        city="it's",
        flag=True,
        day=dt.date(2024, 2, 29),
        ts=_ts(3, 10),
        tsz=_ts(3, 10, UTC),
        s={"x": 6, "y": "f"},
        odd=7,
        dec=Decimal("99.99"),
    ),
]

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("amount", pa.int32()),
        ("price", pa.float64()),
        ("ratio", pa.float32()),
        ("city", pa.string()),
        ("flag", pa.bool_()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us")),
        ("tsz", pa.timestamp("us", "UTC")),
        ("s", pa.struct([("x", pa.int64()), ("y", pa.string())])),
        ("odd name", pa.int64()),
        ("dec", pa.decimal128(10, 2)),
    ]
)


def _table() -> pa.Table:
    rows = [{("odd name" if k == "odd" else k): v for k, v in r.items()} for r in ROWS]
    return pa.Table.from_pylist(rows, schema=SCHEMA)


TABLE = _table()


def _and(*vals: bool | None) -> bool | None:
    return False if False in vals else None if None in vals else True


def _or(*vals: bool | None) -> bool | None:
    return True if True in vals else None if None in vals else False


def _not(v: bool | None) -> bool | None:
    return None if v is None else not v


def _cmp(a: Any, op: Callable[[Any, Any], bool], b: Any) -> bool | None:
    return None if a is None or b is None else op(a, b)


def _sx(r: dict) -> Any:
    return None if r["s"] is None else r["s"]["x"]


def _like(v: str | None, prefix: str) -> bool | None:
    return None if v is None else v.startswith(prefix)


lt, le, gt, ge = (lambda a, b: a < b), (lambda a, b: a <= b), (lambda a, b: a > b), (lambda a, b: a >= b)
eq, ne = (lambda a, b: a == b), (lambda a, b: a != b)

# (sql, reference predicate over a row dict, exact referenced columns)
CASES: list[tuple[str, Callable[[dict], bool | None], set[str]]] = [
    # comparisons
    ("amount = 10", lambda r: _cmp(r["amount"], eq, 10), {"amount"}),
    ("amount != 10", lambda r: _cmp(r["amount"], ne, 10), {"amount"}),
    ("amount <> 10", lambda r: _cmp(r["amount"], ne, 10), {"amount"}),
    ("amount < 10", lambda r: _cmp(r["amount"], lt, 10), {"amount"}),
    ("amount <= 10", lambda r: _cmp(r["amount"], le, 10), {"amount"}),
    ("amount > 10", lambda r: _cmp(r["amount"], gt, 10), {"amount"}),
    ("amount >= 10", lambda r: _cmp(r["amount"], ge, 10), {"amount"}),
    ("10 < amount", lambda r: _cmp(r["amount"], gt, 10), {"amount"}),
    ("amount > price", lambda r: _cmp(r["amount"], gt, r["price"]), {"amount", "price"}),
    ("city = 'SF'", lambda r: _cmp(r["city"], eq, "SF"), {"city"}),
    ("city = 'it''s'", lambda r: _cmp(r["city"], eq, "it's"), {"city"}),
    ("city < 'M'", lambda r: _cmp(r["city"], lt, "M"), {"city"}),
    # numeric literal typing
    ("price > 1", lambda r: _cmp(r["price"], gt, 1), {"price"}),
    ("amount > 1.5", lambda r: _cmp(r["amount"], gt, 1.5), {"amount"}),
    ("amount < 1e1", lambda r: _cmp(r["amount"], lt, 10), {"amount"}),
    ("ratio = 0.1", lambda r: _cmp(r["ratio"], eq, 0.1), {"ratio"}),  # float32 column
    ("ratio IN (0.1, 0.3)", lambda r: None if r["ratio"] is None else r["ratio"] in (0.1, 0.3), {"ratio"}),
    ("amount = -7", lambda r: _cmp(r["amount"], eq, -7), {"amount"}),
    ("amount > '9'", lambda r: _cmp(r["amount"], gt, 9), {"amount"}),
    ("dec >= 2.5", lambda r: _cmp(r["dec"], ge, Decimal("2.5")), {"dec"}),
    ("dec = 10", lambda r: _cmp(r["dec"], eq, Decimal(10)), {"dec"}),
    ("dec < 0", lambda r: _cmp(r["dec"], lt, 0), {"dec"}),
    # boolean logic, parentheses, boolean columns and literals
    (
        "amount > 10 AND city = 'SF'",
        lambda r: _and(_cmp(r["amount"], gt, 10), _cmp(r["city"], eq, "SF")),
        {"amount", "city"},
    ),
    (
        "amount > 10 OR city = 'SF'",
        lambda r: _or(_cmp(r["amount"], gt, 10), _cmp(r["city"], eq, "SF")),
        {"amount", "city"},
    ),
    (
        "amount > 10 OR city = 'SF' AND flag",
        lambda r: _or(_cmp(r["amount"], gt, 10), _and(_cmp(r["city"], eq, "SF"), r["flag"])),
        {"amount", "city", "flag"},
    ),
    (
        "(amount > 10 OR city = 'SF') AND flag",
        lambda r: _and(_or(_cmp(r["amount"], gt, 10), _cmp(r["city"], eq, "SF")), r["flag"]),
        {"amount", "city", "flag"},
    ),
    ("NOT (amount > 10)", lambda r: _not(_cmp(r["amount"], gt, 10)), {"amount"}),
    (
        "NOT amount > 10 AND NOT flag",
        lambda r: _and(_not(_cmp(r["amount"], gt, 10)), _not(r["flag"])),
        {"amount", "flag"},
    ),
    ("flag", lambda r: r["flag"], {"flag"}),
    ("NOT flag", lambda r: _not(r["flag"]), {"flag"}),
    ("flag = TRUE", lambda r: _cmp(r["flag"], eq, True), {"flag"}),
    ("flag = false", lambda r: _cmp(r["flag"], eq, False), {"flag"}),
    ("flag IS TRUE", lambda r: r["flag"] is True, {"flag"}),
    ("flag IS NOT TRUE", lambda r: r["flag"] is not True, {"flag"}),
    ("flag IS FALSE", lambda r: r["flag"] is False, {"flag"}),
    ("flag OR NULL", lambda r: _or(r["flag"], None), {"flag"}),
    ("NOT (flag AND NULL)", lambda r: _not(_and(r["flag"], None)), {"flag"}),
    ("TRUE", lambda r: True, set()),
    ("FALSE", lambda r: False, set()),
    ("NULL", lambda r: None, set()),
    ("1 = 1", lambda r: True, set()),
    ("1 + 1 = 3", lambda r: False, set()),
    # null tests
    ("amount IS NULL", lambda r: r["amount"] is None, {"amount"}),
    ("amount IS NOT NULL", lambda r: r["amount"] is not None, {"amount"}),
    ("amount = NULL", lambda r: None, {"amount"}),
    ("s IS NULL", lambda r: r["s"] is None, {"s"}),
    ("amount IS NOT DISTINCT FROM NULL", lambda r: r["amount"] is None, {"amount"}),
    ("amount IS DISTINCT FROM 10", lambda r: r["amount"] != 10, {"amount"}),
    # IN
    ("city IN ('SF', 'NY')", lambda r: None if r["city"] is None else r["city"] in ("SF", "NY"), {"city"}),
    ("city NOT IN ('SF', 'NY')", lambda r: None if r["city"] is None else r["city"] not in ("SF", "NY"), {"city"}),
    (
        "amount IN (5, NULL)",
        lambda r: None if r["amount"] is None else (True if r["amount"] == 5 else None),
        {"amount"},
    ),
    (
        "amount NOT IN (5, NULL)",
        lambda r: None if r["amount"] is None else (False if r["amount"] == 5 else None),
        {"amount"},
    ),
    ("amount IN (5, 1000000000000)", lambda r: _cmp(r["amount"], eq, 5), {"amount"}),
    (
        "amount IN (price, 10)",
        lambda r: _or(_cmp(r["amount"], eq, r["price"]), _cmp(r["amount"], eq, 10)),
        {"amount", "price"},
    ),
    (
        "day IN ('2024-01-01', DATE '2024-01-04')",
        lambda r: None if r["day"] is None else r["day"] in (dt.date(2024, 1, 1), dt.date(2024, 1, 4)),
        {"day"},
    ),
    ("5 IN (amount, 1)", lambda r: _or(_cmp(r["amount"], eq, 5), False), {"amount"}),
    # BETWEEN
    ("amount BETWEEN 5 AND 15", lambda r: _and(_cmp(r["amount"], ge, 5), _cmp(r["amount"], le, 15)), {"amount"}),
    (
        "amount NOT BETWEEN 5 AND 15",
        lambda r: _not(_and(_cmp(r["amount"], ge, 5), _cmp(r["amount"], le, 15))),
        {"amount"},
    ),
    (
        "day BETWEEN '2024-01-01' AND '2024-01-31'",
        lambda r: None if r["day"] is None else dt.date(2024, 1, 1) <= r["day"] <= dt.date(2024, 1, 31),
        {"day"},
    ),
    # LIKE
    ("city LIKE 'S%'", lambda r: _like(r["city"], "S"), {"city"}),
    ("city NOT LIKE 'S%'", lambda r: _not(_like(r["city"], "S")), {"city"}),
    ("city LIKE '_F'", lambda r: None if r["city"] is None else len(r["city"]) == 2 and r["city"][1] == "F", {"city"}),
    ("city ILIKE 's%'", lambda r: None if r["city"] is None else r["city"].lower().startswith("s"), {"city"}),
    ("city NOT ILIKE 's%'", lambda r: None if r["city"] is None else not r["city"].lower().startswith("s"), {"city"}),
    ("city LIKE 'S\\_%'", lambda r: _like(r["city"], "S_"), {"city"}),
    ("city LIKE 'S!_%' ESCAPE '!'", lambda r: _like(r["city"], "S_"), {"city"}),
    ("city LIKE '%''%'", lambda r: None if r["city"] is None else "'" in r["city"], {"city"}),
    # arithmetic
    ("amount + 5 > 15", lambda r: _cmp(r["amount"], gt, 10), {"amount"}),
    ("amount - 5 = 0", lambda r: _cmp(r["amount"], eq, 5), {"amount"}),
    ("amount * 2 >= 30", lambda r: _cmp(r["amount"], ge, 15), {"amount"}),
    ("amount / 2 = 2", lambda r: None if r["amount"] is None else int(r["amount"] / 2) == 2, {"amount"}),
    ("amount % 5 = 0", lambda r: None if r["amount"] is None else r["amount"] % 5 == 0, {"amount"}),
    ("amount % 5 = -2", lambda r: _cmp(r["amount"], eq, -7), {"amount"}),  # truncated, like SQL
    ("-amount > 0", lambda r: None if r["amount"] is None else -r["amount"] > 0, {"amount"}),
    (
        "price * amount > 20",
        lambda r: None if None in (r["price"], r["amount"]) else r["price"] * r["amount"] > 20,
        {"price", "amount"},
    ),
    ("price / 2 > 0.5", lambda r: None if r["price"] is None else r["price"] / 2 > 0.5, {"price"}),
    ("amount = 2 + 3", lambda r: _cmp(r["amount"], eq, 5), {"amount"}),
    ("amount = -(-5)", lambda r: _cmp(r["amount"], eq, 5), {"amount"}),
    ("(amount + 1) * 2 = 12", lambda r: _cmp(r["amount"], eq, 5), {"amount"}),
    # struct fields and odd names
    ("s.x >= 3", lambda r: _cmp(_sx(r), ge, 3), {"s"}),
    ("s.y = 'a'", lambda r: None if r["s"] is None else _cmp(r["s"]["y"], eq, "a"), {"s"}),
    ("s.x IS NULL", lambda r: _sx(r) is None, {"s"}),
    ('"s"."x" = 1', lambda r: _cmp(_sx(r), eq, 1), {"s"}),
    ("`odd name` = 2", lambda r: r["odd"] == 2, {"odd name"}),
    ('"odd name" > 5', lambda r: r["odd"] > 5, {"odd name"}),
    ("`odd name` > amount", lambda r: _cmp(r["odd"], gt, r["amount"]), {"odd name", "amount"}),
    ("AMOUNT = 5", lambda r: _cmp(r["amount"], eq, 5), {"amount"}),  # unquoted: case-insensitive
    # dates and timestamps
    ("day = DATE '2024-01-02'", lambda r: _cmp(r["day"], eq, dt.date(2024, 1, 2)), {"day"}),
    ("day > '2024-01-02'", lambda r: _cmp(r["day"], gt, dt.date(2024, 1, 2)), {"day"}),
    ("day < TIMESTAMP '2024-01-02 12:00:00'", lambda r: _cmp(r["day"], le, dt.date(2024, 1, 2)), {"day"}),
    ("ts >= TIMESTAMP '2024-01-01 11:00:00'", lambda r: _cmp(r["ts"], ge, _ts(1, 11)), {"ts"}),
    ("ts < '2024-01-01 11:00:00'", lambda r: _cmp(r["ts"], lt, _ts(1, 11)), {"ts"}),
    ("ts < '2024-01-01T11:00:00'", lambda r: _cmp(r["ts"], lt, _ts(1, 11)), {"ts"}),
    ("ts >= '2024-01-02'", lambda r: _cmp(r["ts"], ge, _ts(2, 0)), {"ts"}),
    ("ts > DATE '2024-01-01'", lambda r: _cmp(r["ts"], gt, _ts(1, 0)), {"ts"}),
    ("ts = '2024-01-01 10:00:00+01:00'", lambda r: _cmp(r["ts"], eq, _ts(1, 9)), {"ts"}),
    ("tsz = '2024-01-01 09:00:00'", lambda r: _cmp(r["tsz"], eq, _ts(1, 9, UTC)), {"tsz"}),
    ("tsz = '2024-01-01 10:00:00+01:00'", lambda r: _cmp(r["tsz"], eq, _ts(1, 9, UTC)), {"tsz"}),
    ("tsz >= TIMESTAMP '2024-01-01 11:00:00'", lambda r: _cmp(r["tsz"], ge, _ts(1, 11, UTC)), {"tsz"}),
    (
        "tsz BETWEEN '2024-01-01 09:00:00' AND '2024-01-01 12:00:00'",
        lambda r: None if r["tsz"] is None else _ts(1, 9, UTC) <= r["tsz"] <= _ts(1, 12, UTC),
        {"tsz"},
    ),
    ("ts = '2024-01-01 09:00:00.000000001'", lambda r: False if r["ts"] is not None else None, {"ts"}),
    # CAST
    ("CAST(amount AS DOUBLE) / 4 > 2.6", lambda r: None if r["amount"] is None else r["amount"] / 4 > 2.6, {"amount"}),
    ("CAST(amount AS VARCHAR) = '10'", lambda r: _cmp(r["amount"], eq, 10), {"amount"}),
    ("CAST(price AS INT) = 2", lambda r: _cmp(r["price"], eq, 2.0), {"price"}),
    ("amount::BIGINT > 10", lambda r: _cmp(r["amount"], gt, 10), {"amount"}),
    (
        "CAST(ts AS DATE) = DATE '2024-01-01'",
        lambda r: None if r["ts"] is None else r["ts"].date() == dt.date(2024, 1, 1),
        {"ts"},
    ),
    (
        "CAST(day AS TIMESTAMP) < TIMESTAMP '2024-01-02 00:00:01'",
        lambda r: _cmp(r["day"], le, dt.date(2024, 1, 2)),
        {"day"},
    ),
    ("dec = CAST('2.5' AS DECIMAL(10, 2))", lambda r: _cmp(r["dec"], eq, Decimal("2.5")), {"dec"}),
    ("CAST('5' AS INT) = amount", lambda r: _cmp(r["amount"], eq, 5), {"amount"}),
    ("CAST(flag AS INT) = 1", lambda r: _cmp(r["flag"], eq, True), {"flag"}),
    ("ts > CAST('2024-01-01 10:00:00' AS TIMESTAMP)", lambda r: _cmp(r["ts"], gt, _ts(1, 10)), {"ts"}),
    # odd spacing and comments
    ("  amount>10  ", lambda r: _cmp(r["amount"], gt, 10), {"amount"}),
    ("amount > 10 -- large ones", lambda r: _cmp(r["amount"], gt, 10), {"amount"}),
    ("amount > 10;", lambda r: _cmp(r["amount"], gt, 10), {"amount"}),
]


def _expected_ids(ref: Callable[[dict], bool | None]) -> list[int]:
    return [r["id"] for r in ROWS if ref(r) is True]


@pytest.mark.parametrize("sql,ref,cols", CASES, ids=[c[0] for c in CASES])
def test_sql_matches_reference(sql: str, ref: Callable, cols: set[str]) -> None:
    mask = filter_mask(sql, TABLE)
    assert isinstance(mask, pa.BooleanArray) and mask.null_count == 0 and len(mask) == TABLE.num_rows
    assert TABLE.filter(mask).column("id").to_pylist() == _expected_ids(ref)
    # the Expression itself, used the way a scanner uses it
    expr = to_expression(sql, SCHEMA)
    assert isinstance(expr, pc.Expression)
    assert TABLE.filter(expr).column("id").to_pylist() == _expected_ids(ref)
    assert referenced_columns(sql, SCHEMA) == cols
    assert to_sql(sql) == sql


def test_mask_on_record_batch_and_chunked_table() -> None:
    batch = TABLE.to_batches()[0]
    assert filter_mask("amount > 5", batch).to_pylist() == [False, True, False, True, True, False, False]
    chunked = pa.concat_tables([TABLE.slice(i, 2) for i in range(0, TABLE.num_rows, 2)])
    assert chunked.column("id").num_chunks > 1
    assert filter_mask("amount > 5", chunked).equals(filter_mask("amount > 5", TABLE))


def test_mask_keeps_row_order_over_many_batches() -> None:
    n = 50_000
    big = pa.concat_tables([pa.table({"a": pa.array(range(i, min(i + 997, n)))}) for i in range(0, n, 997)])
    mask = filter_mask("a % 7 = 3", big)
    assert mask.to_pylist() == [a % 7 == 3 for a in range(n)]


def test_mask_of_empty_table() -> None:
    empty = SCHEMA.empty_table()
    mask = filter_mask("amount > 1", empty)
    assert isinstance(mask, pa.BooleanArray) and len(mask) == 0


def test_runtime_error_is_a_predicate_error() -> None:
    with pytest.raises(PredicateError, match="divide by zero"):
        filter_mask("10 / amount > 1", TABLE)


# -- Expressions pass through --------------------------------------------------


def test_expression_passes_through() -> None:
    expr = (pc.field("amount") > 10) & (pc.field("city") == "SF")
    out = to_expression(expr, SCHEMA)
    assert out.equals(expr)
    assert filter_mask(expr, TABLE).to_pylist() == filter_mask("amount > 10 AND city = 'SF'", TABLE).to_pylist()
    assert referenced_columns(expr, SCHEMA) == {"amount", "city"}
    assert to_sql(expr) == str(expr)


@pytest.mark.parametrize(
    "expr,cols",
    [
        (pc.field("s", "x") > 1, {"s"}),
        (pc.field("amount").is_null() | pc.field("flag"), {"amount", "flag"}),
        (pc.field("odd name") == pc.field("id"), {"odd name", "id"}),
        (pc.scalar(True), set()),
        (pc.field("dec").is_valid() & pc.field("tsz").is_valid() & pc.field("ts").is_valid(), {"dec", "tsz", "ts"}),
    ],
)
def test_expression_referenced_columns(expr: pc.Expression, cols: set[str]) -> None:
    assert referenced_columns(expr, SCHEMA) == cols


def test_expression_with_unknown_field_raises() -> None:
    with pytest.raises(UnknownColumnError, match="nope") as info:
        to_expression(pc.field("nope") > 1, SCHEMA)
    assert "amount" in str(info.value)
    with pytest.raises(UnknownColumnError):
        to_expression(pc.field("s", "zz") > 1, SCHEMA)
    with pytest.raises(UnknownColumnError):
        referenced_columns(pc.field("nope") > 1, SCHEMA)


def test_expression_must_be_boolean() -> None:
    with pytest.raises(PredicateTypeError, match="not boolean"):
        to_expression(pc.field("amount") + 1, SCHEMA)


def test_not_a_predicate() -> None:
    for bad in (42, ["amount > 1"], b"amount > 1"):
        with pytest.raises(NotAPredicateError, match="SQL text or a pyarrow.compute.Expression"):
            to_expression(bad, SCHEMA)  # type: ignore[arg-type]
    with pytest.raises(NotAPredicateError):
        to_sql(None)  # type: ignore[arg-type]
    assert issubclass(NotAPredicateError, TesseraError) and issubclass(NotAPredicateError, TypeError)


# -- errors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "amount >",
        "amount > 10 AND",
        "amount = = 1",
        "(amount > 1",
        "amount > 1)",
        "amount > 10 10",
        "amount = 1; DROP TABLE x",
        "",
        "   ",
        "amount foo",
        "city = 'SF",
        "amount IN ()",
        "amount = 1 ORDER BY id",
        "amount = 1 LIMIT 2",
        "amount > 1;;",
    ],
)
def test_syntax_errors(sql: str) -> None:
    with pytest.raises(PredicateSyntaxError) as info:
        to_expression(sql, SCHEMA)
    assert repr(sql) in str(info.value)
    assert info.value.text == sql


@pytest.mark.parametrize(
    "sql,name",
    [
        ("nope = 1", "nope"),
        ("amount > 1 AND nope", "nope"),
        ("s.zz = 1", "s.zz"),
        ("amount.x = 1", "amount.x"),
        ('"AMOUNT" = 1', "AMOUNT"),
        ("amount = $1", "$1"),
        ("`odd` = 1", "odd"),
    ],
)
def test_unknown_columns(sql: str, name: str) -> None:
    with pytest.raises(UnknownColumnError) as info:
        to_expression(sql, SCHEMA)
    assert info.value.column == name
    assert name.split(".")[-1] in str(info.value)
    with pytest.raises(UnknownColumnError):
        referenced_columns(sql, SCHEMA)


@pytest.mark.parametrize(
    "sql,construct",
    [
        ("SELECT 1", "SELECT"),
        ("SELECT amount FROM t WHERE amount > 1", "SELECT"),
        ("amount IN (SELECT 1)", "subquery"),
        ("EXISTS (SELECT 1)", "SELECT"),
        ("count(*) > 1", "aggregate function COUNT"),
        ("sum(amount) > 1", "aggregate function SUM"),
        ("soundex(city) = 'sf'", "function SOUNDEX"),
        ("my_udf(amount)", "function my_udf"),
        ("amount = ?", "Placeholder"),
        ("TRY_CAST(amount AS INT) = 1", "TRY_CAST"),
        ("city LIKE city", "LIKE"),
        ("CASE WHEN flag THEN 1 END = 1", "CASE"),
        ("CAST(amount AS INTERVAL) = 1", "CAST"),
        ("DROP TABLE x", "Drop"),
    ],
)
def test_unsupported(sql: str, construct: str) -> None:
    with pytest.raises(UnsupportedPredicateError, match=construct) as info:
        to_expression(sql, SCHEMA)
    assert info.value.construct and info.value.text == sql


@pytest.mark.parametrize("sql", ["amount BETWEEN SYMMETRIC 1 AND 2", "s IS 1"])
def test_rejected_whatever_the_sqlglot_version(sql: str) -> None:
    # recent sqlglot parses these (-> UnsupportedPredicateError), older releases do not
    with pytest.raises(PredicateError):
        to_expression(sql, SCHEMA)


@pytest.mark.parametrize(
    "sql",
    [
        "amount + 1",
        "city",
        "amount",
        "city = 1",
        "amount > 'abc'",
        "day = DATE '2024-13-01'",
        "ts > 'yesterday'",
        "flag AND amount",
        "NOT amount",
        "city LIKE 1",
        "amount LIKE 'a%'",
        "day > 5",
        "amount = 99999999999999999999999",
        "-city = 'a'",
        "amount IS TRUE",
    ],
)
def test_type_errors(sql: str) -> None:
    with pytest.raises(PredicateTypeError):
        to_expression(sql, SCHEMA)


def test_error_hierarchy() -> None:
    for cls in (PredicateSyntaxError, UnknownColumnError, UnsupportedPredicateError, PredicateTypeError):
        assert issubclass(cls, PredicateError)
    assert issubclass(PredicateError, TesseraError) and issubclass(PredicateError, ValueError)
    with pytest.raises(ValueError):
        to_expression("amount >", SCHEMA)


def test_syntax_error_carries_parser_message() -> None:
    with pytest.raises(PredicateSyntaxError, match="line 1, column") as info:
        to_expression("amount > 10 AND", SCHEMA)
    assert info.value.detail


def test_unknown_column_lists_available() -> None:
    with pytest.raises(UnknownColumnError) as info:
        to_expression("nope = 1", SCHEMA)
    assert info.value.available == SCHEMA.names
    for name in SCHEMA.names:
        assert name in str(info.value)


def test_ambiguous_case_insensitive_name() -> None:
    schema = pa.schema([("Amount", pa.int64()), ("amount", pa.int64())])
    assert referenced_columns("Amount > 1", schema) == {"Amount"}
    with pytest.raises(UnknownColumnError):
        to_expression("AMOUNT > 1", schema)


def test_top_level_column_with_a_dot_in_its_name() -> None:
    schema = pa.schema([("a.b", pa.int64())])
    table = pa.table({"a.b": [1, 2, 3]}, schema=schema)
    assert filter_mask("a.b >= 2", table).to_pylist() == [False, True, True]
    assert filter_mask('"a.b" >= 2', table).to_pylist() == [False, True, True]
    assert referenced_columns("a.b >= 2", schema) == {"a.b"}


def test_deeply_nested_struct() -> None:
    inner = pa.struct([("c", pa.struct([("d", pa.int64())]))])
    table = pa.table({"a": pa.array([{"b": {"c": {"d": 1}}}, {"b": {"c": {"d": 5}}}, None], pa.struct([("b", inner)]))})
    assert filter_mask("a.b.c.d > 2", table).to_pylist() == [False, True, False]
    assert referenced_columns("a.b.c.d > 2", table.schema) == {"a"}


def test_dictionary_and_large_string_columns() -> None:
    table = pa.table(
        {
            "d": pa.array(["a", "b", None, "a"]).dictionary_encode(),
            "l": pa.array(["x", "y", "z", None], pa.large_string()),
        }
    )
    assert filter_mask("d = 'a'", table).to_pylist() == [True, False, False, True]
    assert filter_mask("d IN ('b', 'zz')", table).to_pylist() == [False, True, False, False]
    assert filter_mask("l LIKE 'y%' OR l = 'z'", table).to_pylist() == [False, True, True, False]


def test_other_timestamp_units_and_zones() -> None:
    table = pa.table(
        {
            "s": pa.array([dt.datetime(2024, 1, 1, 10), dt.datetime(2024, 1, 1, 11)], pa.timestamp("s")),
            "n": pa.array([dt.datetime(2024, 1, 1, 10), None], pa.timestamp("ns")),
            "p": pa.array(
                [dt.datetime(2024, 1, 1, 9, tzinfo=UTC), dt.datetime(2024, 1, 1, 10, tzinfo=UTC)],
                pa.timestamp("ms", "Europe/Paris"),
            ),
        }
    )
    assert filter_mask("s = '2024-01-01 10:00:00'", table).to_pylist() == [True, False]
    assert filter_mask("s < '2024-01-01 10:00:00.5'", table).to_pylist() == [True, False]
    assert filter_mask("n = TIMESTAMP '2024-01-01 10:00:00'", table).to_pylist() == [True, False]
    # a zone-less string is wall-clock time in the column's zone (10:00 Paris == 09:00 UTC)
    assert filter_mask("p = '2024-01-01 10:00:00'", table).to_pylist() == [True, False]
    assert filter_mask("p = '2024-01-01 09:00:00Z'", table).to_pylist() == [True, False]
    assert filter_mask("p > TIMESTAMP '2024-01-01 10:30:00'", table).to_pylist() == [False, True]


def test_time_and_binary_columns() -> None:
    table = pa.table({"t": pa.array([dt.time(9), dt.time(12)], pa.time64("us")), "b": [b"ab", b"cd"]})
    assert filter_mask("t > '10:00:00'", table).to_pylist() == [False, True]
    assert filter_mask("b = 'cd'", table).to_pylist() == [False, True]


def test_parse_cache_does_not_leak_between_schemas() -> None:
    a = pa.table({"x": pa.array([1, 2], pa.int64())})
    b = pa.table({"x": pa.array(["1", "2"])})
    assert filter_mask("x = 2", a).to_pylist() == [False, True]
    with pytest.raises(PredicateTypeError):
        filter_mask("x = 2", b)


# -- cross-check against pylance ------------------------------------------------

# Predicates whose meaning pylance (DataFusion) shares. Not here: double-quoted
# identifiers (pylance reads "x" as a string), strings compared with date/time
# columns and float literals against integer columns (pylance refuses both).
LANCE_SQL = [
    "amount = 10",
    "amount <> 10",
    "amount >= 10 AND city = 'SF'",
    "amount > 10 OR city = 'SF'",
    "NOT (amount > 10)",
    "flag",
    "NOT flag",
    "flag IS TRUE",
    "flag IS NOT TRUE",
    "amount IS NULL",
    "amount IS NOT NULL",
    "city IN ('SF', 'NY')",
    "city NOT IN ('SF', 'NY')",
    "amount IN (5, NULL)",
    "amount NOT IN (5, NULL)",
    "amount BETWEEN 5 AND 15",
    "amount NOT BETWEEN 5 AND 15",
    "city LIKE 'S%'",
    "city NOT LIKE 'S%'",
    "city ILIKE 's%'",
    "city LIKE 'S\\_%'",
    "amount + 5 > 15",
    "amount * 2 >= 30",
    "amount / 2 = 2",
    "amount % 5 = -2",
    "-amount > 0",
    "price * amount > 20",
    "s.x >= 3",
    "s.y = 'a'",
    "`odd name` = 2",
    "ratio = 0.1",
    "day = DATE '2024-01-02'",
    "ts >= TIMESTAMP '2024-01-01 11:00:00'",
    "ts > DATE '2024-01-01'",
    "tsz >= TIMESTAMP '2024-01-01 11:00:00'",
    "CAST(amount AS DOUBLE) / 4 > 2.6",
    "amount IS DISTINCT FROM 10",
    "amount IS NOT DISTINCT FROM NULL",
    "flag OR NULL",
    "TRUE",
    "1 = 1",
    "AMOUNT = 5",
    "dec >= CAST('2.5' AS DECIMAL(10, 2))",
]


@pytest.fixture(scope="module")
def lance_dataset(tmp_path_factory: pytest.TempPathFactory) -> Any:
    lance = pytest.importorskip("lance")
    return lance.write_dataset(TABLE, str(tmp_path_factory.mktemp("pred") / "t.lance"))


@pytest.mark.parametrize("sql", LANCE_SQL)
def test_agrees_with_pylance(lance_dataset: Any, sql: str) -> None:
    theirs = sorted(lance_dataset.to_table(filter=sql).column("id").to_pylist())
    ours = TABLE.filter(filter_mask(sql, TABLE)).column("id").to_pylist()
    assert ours == theirs


# -- scalar functions ------------------------------------------------------------------
#
# Each is checked against DuckDB over the same Arrow data and, where pylance's own
# filter parser supports the function, against pylance 14 too.

FUNCTION_SQL = [
    "lower(city) = 'sf'",
    "upper(city) = 'SF'",
    "lower(city) LIKE 's%'",
    "upper(city) NOT LIKE 'S%'",
    "city ILIKE 's_f'",
    "city NOT ILIKE 's%'",
    "lower(s.y) = 'a'",
    "starts_with(city, 'S')",
    "ends_with(city, 'F')",
    "contains(city, '_')",
    "NOT contains(city, 'S')",
    "length(city) = 2",
    "char_length(city) > 2",
    "character_length(city) = 4",
    "trim(city) = 'SF'",
    "ltrim(city, 'S') = 'F'",
    "rtrim(city, 'F') = 'S'",
    "trim(BOTH 'S' FROM city) = 'F'",
    "ltrim('  SF') = city",
    "rtrim('SF  ') = city",
    "date_trunc('month', day) = DATE '2024-01-01'",
    "date_trunc('year', day) = DATE '2023-01-01'",
    "date_trunc('hour', ts) = TIMESTAMP '2024-01-01 08:00:00'",
    "date_trunc('day', ts) = TIMESTAMP '2024-01-02 00:00:00'",
    "extract(year from day) = 2024",
    "extract(month from day) = 2",
    "extract(day from day) >= 4",
    "extract(dow from day) = 1",
    "extract(hour from ts) >= 10",
    "extract(minute from ts) = 0",
    "extract(second from ts) = 0",
    "extract(year from ts) = 2024",
    "extract(dow from ts) = 2",
    "abs(amount) > 6",
    "abs(price) = 1",
    "round(price) = 2",
    "round(price, 1) = 0.1",
    "round(ratio * 10) = 3",
    "floor(price) = 1",
    "ceil(price) = 2",
    "ceiling(price) = -1",
    "floor(amount) = 5",
    "coalesce(amount, 0) = 0",
    "coalesce(city, 'none') = 'none'",
    "coalesce(price, ratio, 0) > 0.4",
    "CAST(amount AS DOUBLE) > 5",
    "amount::double / 4 > 2.6",
    "CAST(amount AS VARCHAR) = '10'",
    "CAST(day AS TIMESTAMP) = TIMESTAMP '2024-01-02 00:00:00'",
    "CAST(ts AS DATE) = DATE '2024-01-02'",
    "amount::BIGINT * 2 = 20",
]

LANCE_FUNCTION_SQL = [  # pylance 14's own parser handles these
    "lower(city) = 'sf'",
    "upper(city) = 'SF'",
    "lower(city) LIKE 's%'",
    "upper(city) NOT LIKE 'S%'",
    "city NOT ILIKE 's%'",
    "starts_with(city, 'S')",
    "ends_with(city, 'F')",
    "contains(city, '_')",
    "regexp_like(city, '^[A-Z]{2}$')",
    "regexp_like(city, '^s', 'i')",
    "length(city) = 2",
    "char_length(city) > 2",
    "ltrim(city, 'S') = 'F'",
    "rtrim(city, 'F') = 'S'",
    "date_trunc('month', day) = DATE '2024-01-01'",
    "date_trunc('hour', ts) = TIMESTAMP '2024-01-01 08:00:00'",
    "abs(amount) > 6",
    "round(price) = 2",
    "round(price, 1) = 0.1",
    "coalesce(amount, 0) = 0",
    "coalesce(city, 'none') = 'none'",
    "CAST(price AS INT) = 1",
    "amount::double / 4 > 2.6",
    "CAST(ts AS DATE) = DATE '2024-01-02'",
    "lower(s.y) = 'a'",
]


def _ours(sql: str) -> list[int]:
    return TABLE.filter(filter_mask(sql, TABLE)).column("id").to_pylist()


@pytest.mark.parametrize("sql", FUNCTION_SQL)
def test_function_agrees_with_duckdb(sql: str) -> None:
    duckdb = pytest.importorskip("duckdb")
    tbl = TABLE  # noqa: F841 - read by DuckDB's replacement scan
    theirs = sorted(r[0] for r in duckdb.sql(f"SELECT id FROM tbl WHERE {sql}").fetchall())
    assert _ours(sql) == theirs


@pytest.mark.parametrize("sql", LANCE_FUNCTION_SQL)
def test_function_agrees_with_pylance(lance_dataset: Any, sql: str) -> None:
    theirs = sorted(lance_dataset.to_table(filter=sql).column("id").to_pylist())
    assert _ours(sql) == theirs


def test_functions_through_the_table_api(tmp_path) -> None:
    lance = pytest.importorskip("lance")
    from tessera.catalog import Table

    t = Table.create(str(tmp_path / "t"), TABLE)
    ds = lance.dataset(str(tmp_path / "t"))
    for sql in (
        "lower(city) = 'sf'",
        "date_trunc('month', day) = DATE '2024-01-01'",
        "abs(amount) > 6",
        "coalesce(amount, 0) = 0",
    ):
        assert t.to_arrow(filter=sql).sort_by("id").equals(ds.to_table(filter=sql).sort_by("id"))
    assert t.count_rows("extract(year from day) = 2023") == 1


@pytest.mark.parametrize(
    "sql,ids",
    [
        ("regexp_match(city, 'F$')", [1, 6]),
        ("regexp_matches(city, '^s', 'i')", [1, 4, 6]),
        ("regexp_like(city, 'S', 'c')", [1, 6]),
        ("endswith(city, 'F')", [1, 6]),
        ("startswith(city, 'S')", [1, 6]),
        ("extract(isodow from day) = 7", [6]),
        ("extract(doy from day) = 60", [7]),
        ("extract(quarter from day) = 4", [6]),
        ("year(day) = 2023", [6]),
        ("month(day) = 2", [7]),
        ("date_trunc('week', day) = DATE '2024-01-01'", [1, 2, 4, 5]),
        ("date_trunc('hour', tsz) = TIMESTAMP '2024-01-01 11:00:00'", [4]),
        ("round(dec, 0) = 10", [4]),
        ("abs(dec) > 3", [4, 5, 7]),
        ("ceil(dec) = -3", [5]),
        ("trim('  SF ') = city", [1]),
        ("length(lower(city)) = 4", [7]),
        ("coalesce(NULL, city) = 'NY'", [2]),
        ("round(2.5) = 3 AND id = 1", [1]),
        ("round(-2.5) = -3 AND id = 1", [1]),
    ],
)
def test_function_results(sql: str, ids: list[int]) -> None:
    assert _ours(sql) == ids


@pytest.mark.parametrize(
    "sql,typ",
    [
        ("lower(city)", pa.string()),
        ("length(city)", pa.int64()),
        ("abs(amount)", pa.int32()),
        ("round(price, 1)", pa.float64()),
        ("floor(amount)", pa.int32()),
        ("date_trunc('month', day)", pa.date32()),
        ("date_trunc('day', ts)", pa.timestamp("us")),
        ("extract(year from ts)", pa.int64()),
        ("coalesce(amount, 0)", pa.int32()),
        ("starts_with(city, 'S')", pa.bool_()),
        ("amount::double", pa.float64()),
    ],
)
def test_function_types(sql: str, typ: pa.DataType) -> None:
    from tessera.catalog.query.predicate import to_value_expression

    expr = to_value_expression(sql, SCHEMA)
    import pyarrow.dataset as pads

    got = pads.Scanner.from_batches(iter(()), schema=SCHEMA, columns={"v": expr}).projected_schema.field("v").type
    assert got == typ


def test_functions_on_dictionary_and_large_string_columns() -> None:
    data = pa.table(
        {
            "id": [1, 2, 3],
            "d": pa.array(["Ab", "cd", None]).dictionary_encode(),
            "l": pa.array([" x ", "y", None], pa.large_string()),
        }
    )
    assert data.filter(filter_mask("lower(d) = 'ab'", data)).column("id").to_pylist() == [1]
    assert data.filter(filter_mask("starts_with(d, 'c')", data)).column("id").to_pylist() == [2]
    assert data.filter(filter_mask("trim(l) = 'x'", data)).column("id").to_pylist() == [1]


@pytest.mark.parametrize(
    "sql,name",
    [
        ("soundex(city) = 'x'", "SOUNDEX"),
        ("my_udf(amount) > 1", "my_udf"),
        ("frobnicate(city)", "frobnicate"),
        ("lower(my_func(city)) = 'a'", "my_func"),
    ],
)
def test_unknown_function_is_named(sql: str, name: str) -> None:
    with pytest.raises(UnsupportedPredicateError, match=name) as info:
        to_expression(sql, SCHEMA)
    assert name in info.value.construct


@pytest.mark.parametrize(
    "sql",
    [
        "lower(amount) = 'a'",
        "upper(flag)",
        "starts_with(amount, 'a')",
        "abs(city) > 1",
        "round(city) = 1",
        "floor(day) = 1",
        "extract(year from city) = 1",
        "date_trunc('month', amount) = 1",
        "length(amount) = 1",
        "regexp_like(city, '(')",
        "trim(city, 5) = 'a'",
        "starts_with(city, 1)",
        "coalesce(amount, 'x') = 1",
        "regexp_match(city) = 'a'",
        "date_part('year') = 1",
    ],
)
def test_function_type_errors(sql: str) -> None:
    with pytest.raises(PredicateTypeError):
        to_expression(sql, SCHEMA)


@pytest.mark.parametrize(
    "sql,construct",
    [
        ("starts_with(city, city)", "non-constant"),
        ("regexp_like(city, city)", "non-constant"),
        ("date_trunc('fortnight', day) = day", "fortnight"),
        ("extract(century from day) = 21", "century"),
        ("round(price, amount) = 1", "number of digits"),
        ("regexp_like(city, 'a', 'x')", "flags"),
    ],
)
def test_unsupported_function_forms(sql: str, construct: str) -> None:
    with pytest.raises(UnsupportedPredicateError, match=construct):
        to_expression(sql, SCHEMA)


@pytest.mark.parametrize(
    "sql", ["lower(city, city) = 'a'", "date_trunc(5, day) = DATE '2024-01-01'", "abs() = 1", "coalesce() = 1"]
)
def test_function_misuse_is_a_predicate_error(sql: str) -> None:
    with pytest.raises(PredicateError):  # parse or translation, depending on the sqlglot release
        to_expression(sql, SCHEMA)


def test_range_terms_are_implied_by_the_filter() -> None:
    """Every row a filter matches satisfies each of its range terms (so pruning
    by the terms never drops a matching row); what cannot be decided yields none."""
    import numpy as np

    from tessera.catalog.query.predicate import range_terms

    rng = np.random.default_rng(3)
    n = 2000
    data = pa.table(
        {
            "key": pa.array(rng.integers(-50, 50, n)),
            "f": pa.array(rng.normal(size=n)),
            "s": pa.array([f"v{x:02d}" for x in rng.integers(0, 30, n)]),
            "d": pa.array(rng.integers(19000, 19100, n).astype("int32")).cast(pa.date32()),
        }
    )
    cases = {
        "key >= 10 AND key < 20": [("key", ">=", [10]), ("key", "<", [20])],
        "5 < key": [("key", ">", [5])],
        "key BETWEEN -3 AND 9 AND s = 'v07'": [("key", ">=", [-3]), ("key", "<=", [9]), ("s", "=", ["v07"])],
        "key IN (1, 2, 3) AND f > -0.5": [("key", "in", [1, 2, 3]), ("f", ">", [-0.5])],
        "(key > 3) AND (d <= DATE '2022-01-15')": [("key", ">", [3]), ("d", "<=", [dt.date(2022, 1, 15)])],
        "key > 1 OR key < 0": [],
        "lower(s) = 'v01'": [],
        "NOT key > 3": [],
        "key = NULL": [],
        "key + 1 > 3": [],
    }
    ops = {"=": pc.equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}
    for text, expected in cases.items():
        terms = range_terms(text, data.schema)
        assert [(t.column, t.op, [v.as_py() for v in t.values]) for t in terms] == expected, text
        mask = filter_mask(text, data).to_numpy(zero_copy_only=False)
        for t in terms:
            col = data.column(t.column)
            if t.op == "in":
                holds = pc.is_in(col, value_set=pa.array([v.as_py() for v in t.values], col.type))
            else:
                holds = ops[t.op](col, t.values[0])
            holds = holds.to_numpy(zero_copy_only=False)
            assert not (mask & ~holds).any(), (text, t)
    # an Expression's terms: see tests/catalog/test_pruning_views.py
    assert [(t.column, t.op) for t in range_terms(pc.field("key") > 3, data.schema)] == [("key", ">")]


def test_a_remembered_translation_is_per_schema_and_not_shared():
    """Translations are remembered by (text, schema): the same text against
    another schema is translated (and checked) anew, and a caller changing the
    column set it got changes nothing for the next one."""
    ints = pa.schema([("a", pa.int64()), ("b", pa.int64())])
    strings = pa.schema([("a", pa.string()), ("b", pa.int64())])
    assert to_expression("a > 3", ints).equals(to_expression("a > 3", ints))
    to_expression("a > 3 AND a + 1 > b", ints)  # remembered for the int schema...
    with pytest.raises(PredicateError):
        to_expression("a > 3 AND a + 1 > b", strings)  # ...not reused for a string column
    cols = referenced_columns("a > 3 AND b < 2", ints)
    cols.add("zzz")
    assert referenced_columns("a > 3 AND b < 2", ints) == {"a", "b"}
