"""format/arrow_compat.py: SQL ``%`` on every pyarrow Tessera supports.

The fallback (what runs on pyarrow < 26) is checked against an oracle on any
pyarrow, and against pyarrow's own ``remainder_checked`` where it exists:
the same values, result type and errors, eagerly and inside Expressions
evaluated by Acero.
"""

from __future__ import annotations

import decimal
import itertools
import math

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

from tessera.format import arrow_compat
from tessera.format.arrow_compat import remainder_fallback_for

INTS = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
FLOATS = [pa.float32(), pa.float64()]
DECIMALS = [pa.decimal128(5, 2), pa.decimal128(3, 1), pa.decimal128(38, 10), pa.decimal256(40, 2)]

native = pytest.mark.skipif(not arrow_compat.HAS_REMAINDER_CHECKED, reason="pyarrow < 26 has no remainder_checked")


def _values(t: pa.DataType) -> pa.Array:
    if pa.types.is_unsigned_integer(t):
        return pa.array([0, 1, 7, 100, None, 3], t)
    if pa.types.is_integer(t):
        return pa.array([0, -7, 7, -100, None, 3], t)
    if pa.types.is_floating(t):
        return pa.array([0.0, -7.5, 7.25, float("inf"), None, float("nan")], t)
    d = decimal.Decimal
    return pa.array([d("0"), d("-7.2"), d("7.5"), d("12.3"), None, d("-0.1")], t)


def _divisors(t: pa.DataType) -> pa.Array:
    """Like :func:`_values`, without zeros (the error cases are tested on their own)."""
    if pa.types.is_unsigned_integer(t):
        return pa.array([3, 2, 5, None, 4, 1], t)
    if pa.types.is_integer(t):
        return pa.array([3, -2, 5, None, -4, 1], t)
    if pa.types.is_floating(t):
        return pa.array([2.5, -2.0, float("inf"), None, 0.5, 1.0], t)
    d = decimal.Decimal
    return pa.array([d("2.5"), d("-2"), d("0.3"), None, d("1"), d("7")], t)


def _oracle(x, y):
    """The truncated remainder (the sign of the dividend), exactly."""
    if x is None or y is None:
        return None
    if isinstance(x, float) or isinstance(y, float):
        return math.fmod(x, y)
    if isinstance(x, decimal.Decimal) or isinstance(y, decimal.Decimal):
        with decimal.localcontext() as c:
            c.prec = 100
            return decimal.Decimal(x) % decimal.Decimal(y)
    r = abs(x) % abs(y)
    return r if x >= 0 else -r


def _same(got: list, want: list) -> bool:
    return all(
        (g is None and w is None) or (g == w) or (isinstance(g, float) and math.isnan(g) and math.isnan(w))
        for g, w in zip(got, want, strict=True)
    )


def _evaluate(fn, a: pa.Array, b: pa.Array) -> pa.Array:
    """``fn`` over two columns inside an Expression, as the scanner evaluates filters."""
    table = pa.table({"a": a, "b": b})
    return ds.dataset(table).to_table(columns={"v": fn(pc.field("a"), pc.field("b"))}).column("v").combine_chunks()


PAIRS = [
    *itertools.product(INTS, INTS),
    *itertools.product(INTS + FLOATS, FLOATS),
    *itertools.product(FLOATS, INTS),
    *((d, t) for d in DECIMALS for t in [pa.int32(), pa.int64(), pa.decimal128(5, 2), pa.float64()]),
    (pa.int8(), pa.decimal128(5, 2)),
]


@pytest.mark.parametrize("ta,tb", PAIRS, ids=lambda t: str(t))
def test_fallback_is_the_truncated_remainder(ta, tb):
    a, b = _values(ta), _divisors(tb)
    fn = remainder_fallback_for(ta, tb)
    want = [_oracle(x, y) for x, y in zip(a.to_pylist(), b.to_pylist())]
    eager = fn(a, b)
    assert _same(eager.to_pylist(), want), (eager, want)
    in_plan = _evaluate(fn, a, b)
    assert in_plan.type == eager.type and _same(in_plan.to_pylist(), want)
    assert fn(a[1], b[1]).as_py() == want[1]  # two scalars: one scalar


@native
@pytest.mark.parametrize("ta,tb", PAIRS, ids=lambda t: str(t))
def test_fallback_matches_pyarrows_own_kernel(ta, tb):
    a, b = _values(ta), _divisors(tb)
    fn = remainder_fallback_for(ta, tb)
    for mine, theirs in [
        (fn(a, b), pc.remainder_checked(a, b)),
        (_evaluate(fn, a, b), _evaluate(pc.remainder_checked, a, b)),
    ]:
        assert mine.type == theirs.type
        assert _same(mine.to_pylist(), theirs.to_pylist()), (mine, theirs)  # NaN is NaN


ERRORS = [
    (pa.array([5, None], pa.int32()), pa.array([0, 0], pa.int32())),
    (pa.array([-(2**63)], pa.int64()), pa.array([-1], pa.int64())),
    (pa.array([-128], pa.int8()), pa.array([-1], pa.int8())),
    (pa.array([1.0]), pa.array([-0.0])),
    (pa.array([1.5], pa.float32()), pa.array([0], pa.int64())),
    (pa.array([decimal.Decimal("1.5")], pa.decimal128(5, 2)), pa.array([0], pa.int64())),
]


@pytest.mark.parametrize("a,b", ERRORS, ids=lambda x: str(x.type))
def test_fallback_errors_are_pyarrows(a, b):
    fn = remainder_fallback_for(a.type, b.type)
    with pytest.raises(pa.ArrowInvalid) as eager:
        fn(a, b)
    with pytest.raises(pa.ArrowInvalid) as in_plan:
        _evaluate(fn, a, b)
    assert str(eager.value) in ("divide by zero", "overflow")
    if arrow_compat.HAS_REMAINDER_CHECKED:
        with pytest.raises(pa.ArrowInvalid) as theirs:
            pc.remainder_checked(a, b)
        assert str(eager.value) == str(theirs.value)
        assert str(in_plan.value).endswith(str(theirs.value)) or str(theirs.value) in str(in_plan.value)


def test_nulls_never_raise():
    fn = remainder_fallback_for(pa.float64(), pa.float64())
    assert fn(pa.array([1.0, None]), pa.array([None, 0.0])).to_pylist() == [None, None]
    fn = remainder_fallback_for(pa.int64(), pa.null())
    assert fn(pa.array([1, 2]), pa.nulls(2)).to_pylist() == [None, None]


@pytest.mark.parametrize(
    "ta,tb",
    [(pa.string(), pa.int64()), (pa.float16(), pa.float32()), (pa.bool_(), pa.int8()), (pa.date32(), pa.int32())],
    ids=str,
)
def test_types_without_a_kernel_are_refused(ta, tb):
    with pytest.raises(pa.ArrowNotImplementedError, match="remainder_checked' has no kernel"):
        remainder_fallback_for(ta, tb)


def test_decimal_precision_past_the_limit_is_refused():
    with pytest.raises(pa.ArrowInvalid, match="precision out of range"):
        remainder_fallback_for(pa.decimal128(38, 0), pa.decimal128(5, 5))
