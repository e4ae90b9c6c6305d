"""Filter predicates: SQL text or pyarrow Expressions -> validated pyarrow Expressions.

Scans, ``delete(predicate)``, ``update(where=...)`` and ``count_rows(filter=...)``
take a predicate either as a ``pyarrow.compute.Expression`` or as a SQL boolean
expression like those pylance/DataFusion users write, e.g.
``"amount > 10 AND city = 'SF'"``. SQL is parsed with sqlglot and translated
node by node; anything outside the supported set raises a typed
:class:`~catalog.errors.PredicateError` rather than being guessed at.

Supported SQL: ``= != <> < <= > >=``, ``AND OR NOT``, parentheses,
``IS [NOT] NULL``, ``IS [NOT] TRUE|FALSE``, ``IS [NOT] DISTINCT FROM``,
``[NOT] IN (...)``, ``[NOT] BETWEEN``, ``[NOT] LIKE|ILIKE [ESCAPE 'c']``,
``+ - * / %`` and unary minus, string/number/boolean/NULL literals,
``DATE '...'`` / ``TIMESTAMP '...'`` literals, ``CAST(x AS type)`` / ``x::type``,
struct fields ``a.b.c``, and ``"quoted"`` or ```backticked``` identifiers.

Scalar functions (pyarrow compute underneath): ``lower upper`` ``starts_with/startswith
ends_with/endswith contains`` (constant pattern), ``regexp_like/regexp_match/regexp_matches
(s, pattern[, 'i'|'c'])`` (RE2, a match anywhere, boolean), ``length/char_length/
character_length``, ``trim/ltrim/rtrim(s[, chars])`` and ``TRIM([BOTH|LEADING|TRAILING]
chars FROM s)`` (spaces by default), ``date_trunc('year'|'quarter'|'month'|'week'|'day'|
'hour'|'minute'|'second'|..., x)`` (keeps x's type), ``EXTRACT(f FROM x)`` /
``date_part('f', x)`` / ``year(x)``... for year quarter month day hour minute second
millisecond microsecond doy week dow (Sunday = 0) isodow (Monday = 1), ``abs``,
``round(x[, n])`` (half away from zero), ``floor``, ``ceil/ceiling``, ``coalesce/ifnull/nvl``.
Any other function is an :class:`~catalog.errors.UnsupportedPredicateError` naming it.
Unquoted names match exactly, else case-insensitively when that is unambiguous.

A constant compared with a column (or any typed expression) is cast to that
type: ``float32_col = 0.1`` compares float32s, ``date_col > '2024-01-01'`` and
``ts_col < '2024-01-01 10:00:00'`` read the string as a date/timestamp (a
string without a UTC offset, compared with a zoned timestamp column, is read as
wall-clock time in the column's zone). Numbers are never turned into strings:
``string_col = 1`` is a :class:`~catalog.errors.PredicateTypeError`.
"""

from __future__ import annotations

import ctypes
import datetime
import decimal
import functools
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Tokenizer as BaseTokenizer

from tessera.catalog.errors import (
    NotAPredicateError,
    PredicateError,
    PredicateSyntaxError,
    PredicateTypeError,
    UnknownColumnError,
    UnsupportedPredicateError,
)
from tessera.format import arrow_compat

__all__ = ["Predicate", "filter_mask", "referenced_columns", "to_expression", "to_sql"]

Predicate: TypeAlias = str | pc.Expression
"""What the table API accepts as a filter: SQL text or a pyarrow Expression."""


class _TesseraSQL(Dialect):
    """sqlglot's default dialect, with both ``"x"`` and ```x``` as identifiers."""

    class Tokenizer(BaseTokenizer):
        IDENTIFIERS = ['"', "`"]


_COMPARE: dict[type, Callable] = {
    exp.EQ: pc.equal,
    exp.NEQ: pc.not_equal,
    exp.GT: pc.greater,
    exp.GTE: pc.greater_equal,
    exp.LT: pc.less,
    exp.LTE: pc.less_equal,
}
_ARITH: dict[type, Callable] = {
    exp.Add: pc.add_checked,
    exp.Sub: pc.subtract_checked,
    exp.Mul: pc.multiply_checked,
    exp.Div: pc.divide_checked,
}
_T = exp.DataType.Type
_CAST_NAMES: dict[str, pa.DataType] = {  # by name: older sqlglot releases lack some members
    "BOOLEAN": pa.bool_(),
    "TINYINT": pa.int8(),
    "SMALLINT": pa.int16(),
    "INT": pa.int32(),
    "BIGINT": pa.int64(),
    "UTINYINT": pa.uint8(),
    "USMALLINT": pa.uint16(),
    "UINT": pa.uint32(),
    "UBIGINT": pa.uint64(),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "DATE": pa.date32(),
    "TIME": pa.time64("us"),
    "TIMESTAMP_S": pa.timestamp("s"),
    "TIMESTAMP_MS": pa.timestamp("ms"),
    "TIMESTAMP_NS": pa.timestamp("ns"),
    "TIMESTAMPTZ": pa.timestamp("us", "UTC"),
    **dict.fromkeys(["VARCHAR", "CHAR", "NVARCHAR", "NCHAR", "TEXT"], pa.string()),
    **dict.fromkeys(["BINARY", "VARBINARY", "BLOB"], pa.binary()),
    **dict.fromkeys(["TIMESTAMP", "DATETIME", "TIMESTAMPNTZ"], pa.timestamp("us")),
}
_CAST_TYPES = {_T[name]: typ for name, typ in _CAST_NAMES.items() if name in _T.__members__}
_DECIMALS = {_T[name] for name in ("DECIMAL", "DECIMAL128") if name in _T.__members__}
_UNITS = {0: "s", 3: "ms", 6: "us", 9: "ns"}  # TIMESTAMP(p) precision -> unit
_NULL_BOOL = pa.scalar(None, pa.bool_())
_EXTRACT: dict[str, Callable] = {
    "year": pc.year,
    "quarter": pc.quarter,
    "month": pc.month,
    "day": pc.day,
    "hour": pc.hour,
    "minute": pc.minute,
    "second": pc.second,
    "millisecond": pc.millisecond,
    "microsecond": pc.microsecond,
    "doy": pc.day_of_year,
    "week": pc.iso_week,
    "dow": lambda x: pc.day_of_week(x, count_from_zero=True, week_start=7),  # Sunday = 0
    "isodow": lambda x: pc.day_of_week(x, count_from_zero=False, week_start=1),  # Monday = 1
}
_TIME_FIELDS = {"hour", "minute", "second", "millisecond", "microsecond"}
_TRUNC_UNITS = ("year", "quarter", "month", "week", "day", "hour", "minute", "second", "millisecond", "microsecond")
_TRUNC_ALIASES = {
    "years": "year",
    "months": "month",
    "days": "day",
    "hours": "hour",
    "minutes": "minute",
    "seconds": "second",
    "weeks": "week",
    "quarters": "quarter",
}
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)


@dataclass
class _Val:
    """A translated node: its expression, its Arrow type once known, and the
    scalar itself when the node is a constant (so it can still be re-typed)."""

    expr: pc.Expression
    type: pa.DataType | None = None
    lit: pa.Scalar | None = None


def _const(scalar: pa.Scalar) -> _Val:
    return _Val(pc.scalar(scalar), scalar.type, scalar)


def _err(cls: type[PredicateError], message: str, **attrs: object) -> PredicateError:
    """An error of class ``cls`` carrying ``attrs`` (``text``, ``column``...)."""
    error = cls(message)
    for key, value in attrs.items():
        setattr(error, key, value)
    return error


def _bound_type(expr: pc.Expression, schema: pa.Schema, context: str = "") -> pa.DataType:
    """Bind ``expr`` against ``schema`` (no data is read) and return its type."""
    context = context or f"predicate {expr}"
    try:
        scanner = ds.Scanner.from_batches(iter(()), schema=schema, columns={"v": expr})
        return scanner.projected_schema.field("v").type
    except _ARROW_ERRORS as e:
        missing = re.search(r"No match for FieldRef\.\w+\((.*?)\) in", str(e))
        if missing:
            raise _err(
                UnknownColumnError,
                f"{context} names a column the table does not have "
                f"({missing.group(1)}); available columns: {', '.join(schema.names) or '(none)'}",
                column=missing.group(1),
                available=list(schema.names),
            ) from e
        raise _err(PredicateTypeError, f"{context} does not type-check: {e}") from e


def _boolean(expr: pc.Expression, schema: pa.Schema, context: str) -> pc.Expression:
    """``expr`` bound and checked to be boolean (a bare NULL counts as one)."""
    typ = _bound_type(expr, schema, context)
    if not (pa.types.is_boolean(typ) or pa.types.is_null(typ)):
        raise _err(PredicateTypeError, f"{context} is {typ}, not boolean")
    return expr if pa.types.is_boolean(typ) else expr.cast(pa.bool_())


def _is_stringy(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _retime(sc: pa.Scalar, target: pa.DataType) -> pa.Scalar:
    """Move a timestamp/date constant onto timestamp type ``target`` (zone, then unit)."""
    if pa.types.is_date(sc.type):
        sc = sc.cast(pa.timestamp(target.unit))
    if target.tz and not sc.type.tz:
        sc = pc.assume_timezone(sc, timezone=target.tz)  # wall clock in the column's zone
    elif sc.type.tz and not target.tz:
        sc = sc.cast(pa.timestamp(sc.type.unit))  # UTC wall clock
    try:
        return sc.cast(target)
    except pa.ArrowInvalid:  # finer than the target's unit: keep its own unit
        return sc.cast(pa.timestamp(sc.type.unit, target.tz))


def _read_temporal(text: str, target: pa.DataType) -> pa.Scalar:
    """Read a string constant as a date, time or timestamp of type ``target``."""
    if pa.types.is_time(target):
        return pa.scalar(datetime.time.fromisoformat(text), target)
    if not pa.types.is_timestamp(target):
        return pa.scalar(text).cast(target)
    for unit in dict.fromkeys([target.unit, "ns"]):
        for probe in (pa.timestamp(unit, "UTC"), pa.timestamp(unit)):  # with an offset, without
            try:
                return _retime(pa.scalar(text).cast(probe), target)
            except pa.ArrowInvalid:
                continue
    raise pa.ArrowInvalid(f"not a timestamp: {text!r}")


def _cast_const(sc: pa.Scalar, target: pa.DataType, explicit: bool) -> pa.Scalar | None:
    """``sc`` as a ``target`` constant, or None where an implicit cast should not
    apply (pyarrow's own promotion then decides). Raises if an explicit CAST,
    or reading a string as a number/date/timestamp, fails."""
    src = sc.type
    target = target.value_type if pa.types.is_dictionary(target) else target
    if src == target or (not sc.is_valid and not explicit):
        return sc if src == target else pa.scalar(None, target)
    try:
        if _is_stringy(src) and pa.types.is_temporal(target):
            return _read_temporal(sc.as_py(), target)
        if pa.types.is_timestamp(target) and (pa.types.is_timestamp(src) or pa.types.is_date(src)):
            return _retime(sc, target)
        if not explicit and (
            _is_stringy(target) and not _is_stringy(src) or pa.types.is_date(target) and pa.types.is_timestamp(src)
        ):
            return None  # never compare a number as text, nor truncate a timestamp to a date
        if pa.types.is_decimal(target) and (pa.types.is_integer(src) or pa.types.is_floating(src)):
            return pa.scalar(decimal.Decimal(str(sc.as_py())), target)
        return sc.cast(target, safe=True)
    except (*_ARROW_ERRORS, ValueError, decimal.InvalidOperation) as e:
        if explicit or _is_stringy(src):
            raise _err(PredicateTypeError, f"cannot read {sc.as_py()!r} as {target}: {e}") from e
        return None


class _Translator:
    """Translates one parsed sqlglot tree against one schema."""

    def __init__(self, text: str, schema: pa.Schema) -> None:
        self.text, self.schema = text, schema
        self.columns: set[str] = set()

    def type_of(self, v: _Val) -> pa.DataType:
        if v.type is None:
            v.type = _bound_type(v.expr, self.schema, f"{v.expr} in predicate {self.text!r}")
        return v.type

    def coerce(self, a: _Val, b: _Val) -> tuple[_Val, _Val]:
        """Cast whichever side is a constant to the type of the other side."""
        if a.lit is not None and b.lit is None:
            b, a = self.coerce(b, a)
        elif b.lit is not None and a.lit is None:
            cast = _cast_const(b.lit, self.type_of(a), explicit=False)
            b = b if cast is None else _const(cast)
        return a, b

    def apply(self, fn: Callable, *args: _Val) -> _Val:
        """``fn`` over the arguments, folded to a constant when all are constants."""
        if all(a.lit is not None for a in args):
            try:
                return _const(fn(*(a.lit for a in args)))
            except _ARROW_ERRORS as e:
                raise _err(PredicateTypeError, f"in predicate {self.text!r}: {e}") from e
        return _Val(fn(*(a.expr for a in args)))

    def compare(self, fn: Callable, a: _Val, b: _Val) -> _Val:
        """A comparison, after casting a constant side to the other side's type."""
        return self.apply(fn, *self.coerce(a, b))

    def remainder(self, a: _Val, b: _Val) -> Callable:
        """SQL's ``%`` for these operands (``pc.remainder_checked``, or its
        equivalent where pyarrow is older than 26: format/arrow_compat.py)."""
        try:
            return arrow_compat.remainder_checked_for(lambda: (self.type_of(a), self.type_of(b)))
        except _ARROW_ERRORS as e:
            raise _err(
                PredicateTypeError, f"{a.expr} % {b.expr} in predicate {self.text!r} does not type-check: {e}"
            ) from e

    def logic(self, fn: Callable, *args: _Val) -> _Val:
        """A boolean operator; a bare NULL operand is taken as a boolean NULL."""
        return self.apply(
            fn, *(_const(_NULL_BOOL) if a.lit is not None and pa.types.is_null(a.type) else a for a in args)
        )

    def unsupported(self, node: exp.Expr, what: str | None = None) -> NoReturn:
        if what is None:
            if isinstance(node, (exp.Query, exp.Subquery, exp.Exists)):
                what = "subquery / SELECT"
            elif isinstance(node, exp.Func):
                kind = "aggregate function" if isinstance(node, exp.AggFunc) else "function"
                what = f"{kind} {node.name if isinstance(node, exp.Anonymous) else node.sql_name()}"
            else:
                what = type(node).__name__
        raise _err(
            UnsupportedPredicateError,
            f"{what} is not supported in a predicate: {node.sql(dialect=_TesseraSQL)!r} in {self.text!r}",
            construct=what,
            text=self.text,
        )

    def resolve(self, parts: list[exp.Identifier]) -> _Val:
        """Resolve ``a`` / ``a.b.c`` to a (nested) field reference."""
        names, fields = list(self.schema.names), list(self.schema)
        dotted = ".".join(p.name for p in parts)
        if len(parts) > 1 and dotted in names and not _match(parts[0], names):
            parts = [exp.to_identifier(dotted, quoted=True)]  # a top-level column named "a.b"
        path: list[str] = []
        typ: pa.DataType | None = None
        for ident in parts:
            if path and not pa.types.is_struct(typ):
                raise _err(
                    UnknownColumnError,
                    f"{'.'.join(path)!r} is {typ}, not a struct, so it has no "
                    f"field {ident.name!r} (predicate {self.text!r})",
                    column=dotted,
                    available=names,
                )
            name = _match(ident, names)
            if name is None:
                where = f"struct column {'.'.join(path)!r} has no field" if path else "unknown column"
                raise _err(
                    UnknownColumnError,
                    f"{where} {ident.name!r} in predicate {self.text!r}; available: {', '.join(names) or '(none)'}",
                    column=dotted,
                    available=names,
                )
            path.append(name)
            typ = next(f.type for f in fields if f.name == name)
            if pa.types.is_struct(typ):
                fields = list(typ)
                names = [f.name for f in fields]
        self.columns.add(path[0])
        return _Val(pc.field(*path), typ)

    def literal(self, node: exp.Literal | exp.Boolean | exp.Null) -> _Val:
        if not isinstance(node, exp.Literal):
            return _const(pa.scalar(None if isinstance(node, exp.Null) else bool(node.this)))
        if node.is_string:
            return _const(pa.scalar(node.this, pa.string()))
        try:
            return _const(pa.scalar(int(node.this), pa.int64()))
        except ValueError:
            return _const(pa.scalar(float(node.this), pa.float64()))
        except OverflowError as e:
            raise _err(PredicateTypeError, f"integer {node.this} is out of range in {self.text!r}") from e

    def cast(self, node: exp.Cast) -> _Val:
        if isinstance(node, exp.TryCast) or node.args.get("format"):
            self.unsupported(node, "TRY_CAST" if isinstance(node, exp.TryCast) else "CAST ... FORMAT")
        to = node.to
        params = [int(p.this.this) if isinstance(p.this, exp.Literal) else None for p in to.expressions]
        if to.this in _DECIMALS:
            try:
                target: pa.DataType = pa.decimal128(*(params or [38, 10]))
            except (TypeError, ValueError) as e:
                raise _err(PredicateTypeError, f"bad type {to.sql()} in {self.text!r}: {e}") from e
        elif to.this in _CAST_TYPES:
            target = _CAST_TYPES[to.this]
            if pa.types.is_timestamp(target) and params and params[0] in _UNITS:
                target = pa.timestamp(_UNITS[params[0]], target.tz)
        else:
            self.unsupported(node, f"CAST to {to.sql()}")
        v = self.visit(node.this)
        if pa.types.is_integer(target) and pa.types.is_floating(self.type_of(v)):
            v = self.apply(pc.trunc, v)  # SQL truncates toward zero; overflow still fails
        if v.lit is not None:
            return _const(_cast_const(v.lit, target, explicit=True))
        return _Val(v.expr.cast(target), target)

    def like(self, node: exp.Expr, escape: str | None = None) -> _Val:
        pattern = self.visit(node.expression).lit
        if pattern is None:
            self.unsupported(node, "LIKE with a non-constant pattern")
        if not _is_stringy(pattern.type):
            raise _err(PredicateTypeError, f"LIKE pattern {pattern} is not a string in {self.text!r}")
        text: str = pattern.as_py()
        if escape is not None and escape != "\\":  # Arrow's LIKE escapes with a backslash
            out, chars = [], iter(text)
            for ch in chars:
                out.append("\\" + next(chars, "") if ch == escape else "\\\\" if ch == "\\" else ch)
            text = "".join(out)
        ci = isinstance(node, exp.ILike)
        return self.apply(lambda x: pc.match_like(x, pattern=text, ignore_case=ci), self.visit(node.this))

    def isin(self, node: exp.In) -> _Val:
        if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
            self.unsupported(node, "IN with a subquery")
        if not node.expressions:
            raise _err(PredicateSyntaxError, f"empty IN list in {self.text!r}", text=self.text)
        x, items = self.visit(node.this), [self.visit(e) for e in node.expressions]
        if x.lit is None and all(i.lit is not None for i in items):
            target = self.type_of(x)
            cast: list[pa.Scalar] = []
            for i in items:
                lit = self.coerce(x, i)[1].lit
                assert lit is not None  # a constant coerced to x's type stays a constant
                cast.append(lit)
            values = [c for c in cast if c.is_valid]
            try:
                value_set = pa.array(values, type=target.value_type if pa.types.is_dictionary(target) else target)
            except (*_ARROW_ERRORS, TypeError, ValueError, OverflowError):
                value_set = None  # mixed types: fall back to ORed comparisons below
            if value_set is not None:  # SQL: NULL input -> NULL; no match, NULL in list -> NULL
                out = pc.if_else(pc.is_null(x.expr), _NULL_BOOL, pc.is_in(x.expr, value_set=value_set, skip_nulls=True))
                if len(values) < len(cast):
                    out = pc.if_else(out, pa.scalar(True), _NULL_BOOL)
                return _Val(out, pa.bool_())
        out = self.compare(pc.equal, x, items[0])
        for item in items[1:]:
            out = self.logic(pc.or_kleene, out, self.compare(pc.equal, x, item))
        return out

    # -- functions ------------------------------------------------------------------

    def arg(self, node: exp.Expr | None, fname: str, what: str = "argument") -> _Val:
        if node is None:
            raise _err(PredicateSyntaxError, f"{fname} is missing its {what} in {self.text!r}", text=self.text)
        v = self.visit(node)
        typ = self.type_of(v)
        if pa.types.is_dictionary(typ):  # kernels want the values, not the dictionary
            v = (
                _Val(v.expr.cast(typ.value_type), typ.value_type)
                if v.lit is None
                else _const(v.lit.cast(typ.value_type))
            )
        return v

    def string_arg(self, node: exp.Expr | None, fname: str) -> _Val:
        v = self.arg(node, fname)
        assert node is not None  # arg() raised PredicateSyntaxError for a missing one
        typ = self.type_of(v)
        if not (_is_stringy(typ) or pa.types.is_null(typ)):
            raise _err(
                PredicateTypeError,
                f"{fname} takes a string, not {typ} ({node.sql(dialect=_TesseraSQL)}) in {self.text!r}",
                text=self.text,
            )
        if pa.types.is_null(typ):
            v = _const(pa.scalar(None, pa.string()))
        return v

    def const_string(self, node: exp.Expr | None, fname: str, what: str) -> str:
        if isinstance(node, exp.Var):  # e.g. date_trunc(month, ...), extract's field
            return node.name
        v = self.arg(node, fname, what)
        assert node is not None  # arg() raised PredicateSyntaxError for a missing one
        if v.lit is None:
            self.unsupported(node, f"{fname} with a non-constant {what}")
        if not _is_stringy(v.lit.type) or not v.lit.is_valid:
            raise _err(
                PredicateTypeError,
                f"the {what} of {fname} must be a string, not {v.lit} in {self.text!r}",
                text=self.text,
            )
        return v.lit.as_py()

    def numeric_arg(self, node: exp.Expr | None, fname: str) -> _Val:
        v = self.arg(node, fname)
        typ = self.type_of(v)
        if not (
            pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_decimal(typ) or pa.types.is_null(typ)
        ):
            raise _err(PredicateTypeError, f"{fname} takes a number, not {typ} in {self.text!r}", text=self.text)
        return _const(pa.scalar(None, pa.float64())) if pa.types.is_null(typ) else v

    def temporal_arg(self, node: exp.Expr | None, fname: str) -> _Val:
        v = self.arg(node, fname)
        typ = self.type_of(v)
        if v.lit is not None and _is_stringy(typ):  # extract(year FROM '2024-01-01')
            v = _const(_cast_const(v.lit, pa.timestamp("us"), explicit=True))
        elif not (pa.types.is_date(typ) or pa.types.is_timestamp(typ) or pa.types.is_time(typ)):
            raise _err(
                PredicateTypeError, f"{fname} takes a date or timestamp, not {typ} in {self.text!r}", text=self.text
            )
        return v

    def extract(self, field: str, v: _Val, fname: str, node: exp.Expr) -> _Val:
        field = field.lower()
        fn = _EXTRACT.get(field)
        if fn is None:
            self.unsupported(node, f"{fname} of {field!r} (supported: {', '.join(sorted(_EXTRACT))})")
        typ = self.type_of(v)
        if pa.types.is_date(typ) and field in _TIME_FIELDS:
            v = self.apply(lambda x: x.cast(pa.timestamp("s")), v)  # a date's time is midnight
        if pa.types.is_time(typ) and field not in _TIME_FIELDS:
            raise _err(PredicateTypeError, f"{fname}({field}) of a {typ} in {self.text!r}", text=self.text)
        out = self.apply(fn, v)
        out.type = out.type or pa.int64()
        return out

    def function(self, node: exp.Func) -> _Val:  # noqa: C901 - one branch per function
        """A scalar function call, translated to pyarrow compute."""
        anonymous = isinstance(node, exp.Anonymous)
        name = (node.name if anonymous else node.sql_name()).upper()
        args = list(node.expressions) if anonymous else []
        a = node.this if not anonymous else (args[0] if args else None)
        b = node.args.get("expression") if not anonymous else (args[1] if len(args) > 1 else None)
        fname = name.lower()

        def arity(n: int, m: int | None = None) -> None:
            if anonymous and not (n <= len(args) <= (n if m is None else m)):
                want = n if m is None else f"{n} to {m}"
                raise _err(
                    PredicateTypeError,
                    f"{fname} takes {want} arguments, got {len(args)} in {self.text!r}",
                    text=self.text,
                )

        if name in ("LOWER", "UPPER"):
            arity(1)
            fn = pc.utf8_lower if name == "LOWER" else pc.utf8_upper
            return self.apply(fn, self.string_arg(a, fname))
        if name in ("STARTS_WITH", "STARTSWITH", "ENDS_WITH", "ENDSWITH", "CONTAINS"):
            arity(2)
            x, pattern = self.string_arg(a, fname), self.const_string(b, fname, "pattern")
            fn = {"S": pc.starts_with, "E": pc.ends_with, "C": pc.match_substring}[name[0]]
            return self.apply(lambda e: fn(e, pattern=pattern), x)
        if name in ("REGEXP_LIKE", "REGEXP_MATCH", "REGEXP_MATCHES", "RLIKE"):
            arity(2, 3)
            flags = (args[2] if len(args) > 2 else None) if anonymous else node.args.get("flag")
            x, pattern = self.string_arg(a, fname), self.const_string(b, fname, "pattern")
            flag = self.const_string(flags, fname, "flags") if flags is not None else ""
            if set(flag) - {"i", "c"}:
                self.unsupported(node, f"{fname} flags {flag!r} (supported: 'i', 'c')")
            ci = "i" in flag and flag.rfind("i") > flag.rfind("c")
            try:
                pc.match_substring_regex(pa.array([""]), pattern=pattern, ignore_case=ci)
            except _ARROW_ERRORS as e:
                raise _err(
                    PredicateTypeError, f"bad regular expression {pattern!r} in {self.text!r}: {e}", text=self.text
                ) from e
            return self.apply(lambda e: pc.match_substring_regex(e, pattern=pattern, ignore_case=ci), x)
        if name in ("LENGTH", "CHAR_LENGTH", "CHARACTER_LENGTH", "LEN"):
            arity(1)
            x = self.arg(a, fname)
            typ = self.type_of(x)
            if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
                return self.apply(lambda e: pc.binary_length(e).cast(pa.int64()), x)
            x = self.string_arg(a, fname)
            out = self.apply(lambda e: pc.utf8_length(e).cast(pa.int64()), x)
            out.type = pa.int64()
            return out
        if name in ("TRIM", "LTRIM", "RTRIM", "BTRIM"):
            position = "LEADING" if name == "LTRIM" else "TRAILING" if name == "RTRIM" else "BOTH"
            if not anonymous:
                position = str(node.args.get("position") or position).upper()
                if node.args.get("collation"):
                    self.unsupported(node, f"{fname} with COLLATE")
            else:
                arity(1, 2)
            x = self.string_arg(a, fname)
            chars = " " if b is None else self.const_string(b, fname, "characters")
            fn = {"LEADING": pc.utf8_ltrim, "TRAILING": pc.utf8_rtrim}.get(position, pc.utf8_trim)
            return self.apply(lambda e: fn(e, characters=chars), x)
        if name in ("DATE_TRUNC", "TIMESTAMP_TRUNC", "DATETIME_TRUNC"):
            if anonymous:
                arity(2)
                unit_node, value_node = args[0], args[1]
            else:
                unit_node, value_node = node.args.get("unit"), node.this
                if node.args.get("zone"):
                    self.unsupported(node, f"{fname} with a time zone")
            unit = self.const_string(unit_node, fname, "unit").lower()
            unit = _TRUNC_ALIASES.get(unit, unit)
            if unit not in _TRUNC_UNITS:
                self.unsupported(node, f"{fname} to {unit!r} (supported: {', '.join(_TRUNC_UNITS)})")
            x = self.temporal_arg(value_node, fname)
            if pa.types.is_time(self.type_of(x)) or (
                pa.types.is_date(self.type_of(x)) and unit not in ("year", "quarter", "month", "week", "day")
            ):
                return x if pa.types.is_date(self.type_of(x)) else self.unsupported(node, f"{fname} of a time")
            out = self.apply(lambda e: pc.floor_temporal(e, unit=unit, week_starts_monday=True), x)
            out.type = self.type_of(x)
            return out
        if name in ("EXTRACT", "DATE_PART", "DATEPART"):
            if anonymous:
                arity(2)
                field_node, value_node = args[0], args[1]
            else:
                field_node, value_node = node.this, node.expression
            field = self.const_string(field_node, fname, "field")
            return self.extract(field, self.temporal_arg(value_node, fname), fname, node)
        if name in ("YEAR", "MONTH", "DAY", "HOUR", "MINUTE", "SECOND", "DAY_OF_WEEK", "DAYOFWEEK", "QUARTER"):
            arity(1)
            field = {"DAY_OF_WEEK": "dow", "DAYOFWEEK": "dow"}.get(name, name.lower())
            return self.extract(field, self.temporal_arg(a, fname), fname, node)
        if name == "ABS":
            arity(1)
            x = self.numeric_arg(a, fname)
            out = self.apply(pc.abs_checked, x)
            out.type = out.type or self.type_of(x)
            return out
        if name in ("FLOOR", "CEIL", "CEILING"):
            arity(1)
            if not anonymous and (node.args.get("decimals") or node.args.get("to")):
                self.unsupported(node, f"{fname} with a scale")
            x = self.numeric_arg(a, fname)
            if pa.types.is_integer(self.type_of(x)):
                return x  # already whole
            return self.apply(pc.floor if name == "FLOOR" else pc.ceil, x)
        if name == "ROUND":
            arity(1, 2)
            digits_node = (args[1] if len(args) > 1 else None) if anonymous else node.args.get("decimals")
            if not anonymous and node.args.get("truncate"):
                self.unsupported(node, f"{fname} with truncate")
            x = self.numeric_arg(a, fname)
            digits = 0
            if digits_node is not None:
                d = self.arg(digits_node, fname, "number of digits")
                if d.lit is None or not pa.types.is_integer(d.lit.type) or not d.lit.is_valid:
                    self.unsupported(node, f"{fname} with a non-constant or non-integer number of digits")
                digits = d.lit.as_py()
            if pa.types.is_integer(self.type_of(x)) and digits >= 0:
                return x
            out = self.apply(lambda e: pc.round(e, ndigits=digits, round_mode="half_towards_infinity"), x)
            return out
        if name in ("COALESCE", "IFNULL", "NVL"):
            nodes = args if anonymous else [node.this, *node.expressions]
            if not nodes or any(n is None for n in nodes):
                raise _err(PredicateSyntaxError, f"{fname} needs arguments in {self.text!r}", text=self.text)
            vals = [self.arg(n, fname) for n in nodes]
            anchor = next((v for v in vals if v.lit is None), None)
            if anchor is not None:  # constants take the type of the first column-like argument
                vals = [self.coerce(anchor, v)[1] if v.lit is not None else v for v in vals]
            return self.apply(pc.coalesce, *vals)
        self.unsupported(node)

    def visit(self, node: exp.Expr) -> _Val:  # noqa: C901 - one branch per construct
        """Translate one sqlglot node."""
        if node.args.get("negate"):  # newer sqlglot folds `x NOT ILIKE y` into the node itself
            node = node.copy()
            node.set("negate", None)
            return self.logic(pc.invert, self.visit(node))
        if isinstance(node, exp.Paren):
            return self.visit(node.this)
        if isinstance(node, (exp.Column, exp.Dot)):
            parts = _dot_parts(node)
            if not all(isinstance(p, exp.Identifier) for p in parts):
                self.unsupported(node, "column reference other than a name or a.b.c")
            return self.resolve(parts)
        if isinstance(node, (exp.Literal, exp.Boolean, exp.Null)):
            return self.literal(node)
        if isinstance(node, exp.Cast):
            return self.cast(node)
        if type(node) in _COMPARE:
            return self.compare(_COMPARE[type(node)], self.visit(node.this), self.visit(node.expression))
        if type(node) in _ARITH:
            return self.compare(_ARITH[type(node)], self.visit(node.this), self.visit(node.expression))
        if isinstance(node, exp.Mod):
            a, b = self.coerce(self.visit(node.this), self.visit(node.expression))
            return self.apply(self.remainder(a, b), a, b)
        if isinstance(node, exp.Neg):
            return self.apply(pc.negate_checked, self.visit(node.this))
        if isinstance(node, (exp.And, exp.Or)):  # flattened: long chains must not recurse deeply
            fn = pc.and_kleene if isinstance(node, exp.And) else pc.or_kleene
            return functools.reduce(lambda a, b: self.logic(fn, a, b), map(self.visit, node.flatten()))
        if isinstance(node, exp.Not):
            return self.logic(pc.invert, self.visit(node.this))
        if isinstance(node, exp.Is):
            x, what = self.visit(node.this), node.expression
            if isinstance(what, exp.Null):
                return self.apply(pc.is_null, x)
            if not isinstance(what, exp.Boolean):
                self.unsupported(node, "IS other than IS [NOT] NULL/TRUE/FALSE")
            truth = x if what.this else self.logic(pc.invert, x)
            return self.logic(pc.coalesce, truth, _const(pa.scalar(False)))
        if isinstance(node, (exp.NullSafeEQ, exp.NullSafeNEQ)):
            a, b = self.coerce(self.visit(node.this), self.visit(node.expression))
            both_null = self.apply(pc.and_kleene, self.apply(pc.is_null, a), self.apply(pc.is_null, b))
            same = self.apply(pc.coalesce, self.compare(pc.equal, a, b), both_null)
            return self.logic(pc.invert, same) if isinstance(node, exp.NullSafeNEQ) else same
        if isinstance(node, exp.In):
            return self.isin(node)
        if isinstance(node, exp.Between):
            if node.args.get("symmetric"):
                self.unsupported(node, "BETWEEN SYMMETRIC")
            x = self.visit(node.this)
            low = self.compare(pc.greater_equal, x, self.visit(node.args["low"]))
            return self.logic(pc.and_kleene, low, self.compare(pc.less_equal, x, self.visit(node.args["high"])))
        if isinstance(node, (exp.Like, exp.ILike)):
            return self.like(node)
        if isinstance(node, exp.Escape) and isinstance(node.this, (exp.Like, exp.ILike)):
            esc = self.visit(node.expression).lit
            if esc is None or not _is_stringy(esc.type) or len(esc.as_py()) != 1:
                self.unsupported(node, "ESCAPE other than a single character")
            return self.like(node.this, esc.as_py())
        if isinstance(node, exp.Func) and not isinstance(node, exp.AggFunc):
            return self.function(node)
        if isinstance(node, exp.Alias):
            raise _err(
                PredicateSyntaxError,
                f"unexpected alias {node.alias!r} in predicate {self.text!r} (a missing operator?)",
                text=self.text,
            )
        self.unsupported(node)


def _match(ident: exp.Identifier, names: list[str]) -> str | None:
    """The name ``ident`` denotes: exact, else (unquoted) a unique case-insensitive match."""
    if ident.name in names:
        return ident.name
    folded = [n for n in names if n.lower() == ident.name.lower()]
    return folded[0] if not ident.quoted and len(folded) == 1 else None


def _dot_parts(node: exp.Expr) -> list:
    if isinstance(node, exp.Dot):
        return _dot_parts(node.this) + [node.expression]
    return list(node.parts) if isinstance(node, exp.Column) else [node]


@functools.lru_cache(maxsize=512)
def _parse(text: str) -> exp.Expr:
    """Parse ``text`` as exactly one SQL expression."""
    try:
        statements = sqlglot.parse(text, dialect=_TesseraSQL)
    except SqlglotError as e:  # ParseError carries structured errors, TokenError only a message
        first = (getattr(e, "errors", None) or [{}])[0]
        detail = first.get("description") or str(e)
        detail += f" (line {first['line']}, column {first['col']})" if "line" in first else ""
        raise _err(PredicateSyntaxError, f"cannot parse predicate {text!r}: {detail}", text=text, detail=detail) from e
    if len(statements) != 1 or statements[0] is None:
        what = "is empty" if not any(statements) else f"holds {len(statements)} statements"
        raise _err(
            PredicateSyntaxError, f"predicate {text!r} {what}; expected one boolean expression", text=text, detail=what
        )
    return statements[0]


def _translate(text: str, schema: pa.Schema, boolean: bool = True) -> tuple[pc.Expression, set[str]]:
    """``text`` translated against ``schema``: the Expression and the columns
    it reads.  Remembered for the last few (text, schema) pairs: a scan asks
    for the expression and for its columns, and repeated scans repeat their
    filters (an Expression is immutable; the set is copied)."""
    expr, columns = _translate_cached(text, arrow_compat.SchemaKey(schema), boolean)
    return expr, set(columns)


@functools.lru_cache(maxsize=256)
def _translate_cached(text: str, key: arrow_compat.SchemaKey, boolean: bool) -> tuple[pc.Expression, frozenset[str]]:
    expr, columns = _translate_once(text, key.schema, boolean)
    return expr, frozenset(columns)


def _translate_once(text: str, schema: pa.Schema, boolean: bool = True) -> tuple[pc.Expression, set[str]]:
    translator = _Translator(text, schema)
    try:
        value = translator.visit(_parse(text))
    except RecursionError as e:
        raise _err(
            UnsupportedPredicateError,
            f"predicate {text[:80]!r}... is nested too deeply",
            construct="deep nesting",
            text=text,
        ) from e
    if not boolean:
        return value.expr, translator.columns
    return _boolean(value.expr, schema, f"predicate {text!r}"), translator.columns


def to_value_expression(expression: Predicate, schema: pa.Schema) -> pc.Expression:
    """A SQL value expression (``"amount * 2"``, ``"'SF'"``) or pyarrow
    Expression, checked against ``schema``; used by update and add_columns."""
    if isinstance(expression, pc.Expression):
        _bound_type(expression, schema)
        return expression
    if isinstance(expression, str):
        return _translate(expression, schema, boolean=False)[0]
    _not_a_predicate(expression)


def value_columns(expression: Predicate, schema: pa.Schema) -> set[str]:
    """The top-level columns a value expression reads."""
    if isinstance(expression, str):
        return _translate(expression, schema, boolean=False)[1]
    return referenced_columns(expression, schema)


def _not_a_predicate(predicate: object) -> NoReturn:
    raise NotAPredicateError(f"a predicate is SQL text or a pyarrow.compute.Expression, not {type(predicate).__name__}")


def to_expression(predicate: Predicate, schema: pa.Schema) -> pc.Expression:
    """Turn ``predicate`` into a boolean ``pyarrow.compute.Expression`` over ``schema``.

    SQL text is parsed and type-checked; an Expression is bound against the
    schema (every field must exist, the result must be boolean) and returned.
    Raises :class:`PredicateSyntaxError`, :class:`UnknownColumnError`,
    :class:`UnsupportedPredicateError` or :class:`PredicateTypeError`, all
    :class:`PredicateError` (a ``ValueError``)."""
    if isinstance(predicate, pc.Expression):
        return _boolean(predicate, schema, f"predicate {predicate}")
    if isinstance(predicate, str):
        return _translate(predicate, schema)[0]
    _not_a_predicate(predicate)


def referenced_columns(predicate: Predicate, schema: pa.Schema) -> set[str]:
    """The top-level columns ``predicate`` reads (``s.x`` reads ``s``), exactly.

    For an Expression this is found by binding it with groups of columns left
    out (pyarrow offers no public way to walk an Expression)."""
    if isinstance(predicate, str):
        return _translate(predicate, schema)[1]
    expr = to_expression(predicate, schema)
    used: set[str] = set()

    def search(names: list[str]) -> None:  # bisect: does it still bind without these?
        try:
            _bound_type(expr, pa.schema([f for f in schema if f.name not in names]))
        except PredicateError:
            if len(names) == 1:
                used.add(names[0])
            else:
                search(names[: len(names) // 2])
                search(names[len(names) // 2 :])

    if schema.names:
        search(list(dict.fromkeys(schema.names)))
    return used


@dataclass(frozen=True)
class RangeTerm:
    """One conjunct of a filter a column's statistics can decide: ``column``
    ``op`` (``=``, ``<``, ``<=``, ``>``, ``>=`` or ``in``) constants of the
    column's type.  A row can match the filter only if it matches every term."""

    column: str
    op: str
    values: tuple[pa.Scalar, ...]


_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "="}


def _range_type(t: pa.DataType) -> bool:
    """Whether zone statistics of a column of type ``t`` can decide range terms:
    a type a zone map bounds, booleans aside (a range of booleans prunes nothing)."""
    from tessera.format.zonemap import _value_type_ok

    return _value_type_ok(t) and not pa.types.is_boolean(t)


def range_terms(predicate: Predicate, schema: pa.Schema) -> list[RangeTerm]:
    """The top-level AND terms of ``predicate`` that compare a plain column
    with constants, the constants of the column's type.

    SQL text: ``=``, ``<``, ``<=``, ``>``, ``>=``, ``BETWEEN`` and ``IN``, the
    constants cast to the column's type as the SQL translation casts them.  A
    pyarrow Expression (what DuckDB and Polars push into a dataset): the
    ``and``/``and_kleene`` of ``equal``, ``less``, ``less_equal``, ``greater``,
    ``greater_equal`` between a top-level field and a literal, and ``is_in``
    of a field (also under ``if_else(c, x, NULL)``), each literal exactly representable in the column's type
    (:func:`_exact_literal`).  Anything else (OR, functions, NOT, casts of
    the column, NULL constants, lossy constants) yields no term: pruning with
    these terms skips only rows the filter cannot match, and the filter itself
    is still applied to what is read."""
    if isinstance(predicate, pc.Expression):
        return _expression_terms(predicate, schema)
    if not isinstance(predicate, str):
        return []
    try:
        tree = _parse(predicate)
    except PredicateError:
        return []
    translator = _Translator(predicate, schema)
    names = list(schema.names)
    out: list[RangeTerm] = []

    def column_of(node: exp.Expr) -> str | None:
        if isinstance(node, exp.Column) and not node.table:
            name = _match(node.this, names) if isinstance(node.this, exp.Identifier) else None
            if name is not None and _range_type(schema.field(name).type):
                return name
        return None

    def constant(node: exp.Expr | None, column: str) -> pa.Scalar | None:
        if not isinstance(node, (exp.Literal, exp.Cast, exp.Neg)):
            return None
        try:
            v = translator.visit(node)
            if v.lit is None or not v.lit.is_valid:
                return None
            return _cast_const(v.lit, schema.field(column).type, explicit=False)
        except (PredicateError, *_ARROW_ERRORS, ValueError, TypeError):
            return None

    ops: dict[type, str] = {exp.EQ: "=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}

    def walk(node: exp.Expr) -> None:
        if isinstance(node, exp.Paren):
            walk(node.this)
        elif isinstance(node, exp.And):
            walk(node.left)
            walk(node.right)
        elif type(node) in ops:
            op = ops[type(node)]
            left, right = node.this, node.expression
            col = column_of(left)
            if col is None and (col := column_of(right)) is not None:
                left, right, op = right, left, _FLIP[op]
            if col is not None and (c := constant(right, col)) is not None:
                out.append(RangeTerm(col, op, (c,)))
        elif isinstance(node, exp.Between) and (col := column_of(node.this)) is not None:
            lo, hi = constant(node.args.get("low"), col), constant(node.args.get("high"), col)
            if lo is not None:
                out.append(RangeTerm(col, ">=", (lo,)))
            if hi is not None:
                out.append(RangeTerm(col, "<=", (hi,)))
        elif isinstance(node, exp.In) and not node.args.get("query") and (col := column_of(node.this)) is not None:
            values = [constant(v, col) for v in node.expressions]
            if values and all(v is not None for v in values):
                out.append(RangeTerm(col, "in", tuple(v for v in values if v is not None)))

    walk(tree)
    return out


# -- range terms of a pyarrow Expression ------------------------------------------------------
#
# pyarrow offers no public way to walk an Expression, but it pickles one as
# Arrow C++ serializes it: an Arrow IPC file of one row whose columns are the
# literals (and function options, as struct scalars) and whose schema metadata
# lists the tree in prefix order, keys repeating -- ``call <name>``, the
# arguments, ``options <column>``, ``end <name>``; ``field_ref <name>``;
# ``nested_field_ref <n>`` followed by n references; ``literal <column>``.
# ``Schema.metadata`` is a dict (it drops repeated keys), so the pairs are read
# in order from the schema's Arrow C export.  Anything unexpected yields no term.


class _Unreadable(Exception):
    """The serialized Expression is not in the expected form."""


class _CSchema(ctypes.Structure):
    """``struct ArrowSchema`` of the Arrow C data interface."""

    _fields_ = [
        ("format", ctypes.c_char_p),
        ("name", ctypes.c_char_p),
        ("metadata", ctypes.c_void_p),
        ("flags", ctypes.c_int64),
        ("n_children", ctypes.c_int64),
        ("children", ctypes.c_void_p),
        ("dictionary", ctypes.c_void_p),
        ("release", ctypes.c_void_p),
        ("private_data", ctypes.c_void_p),
    ]


_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


def _metadata_pairs(schema: pa.Schema) -> list[tuple[str, str]]:
    """``schema``'s metadata as (key, value) pairs, in order, repeated keys kept."""
    capsule = schema.__arrow_c_schema__()  # released when the capsule is
    c = _CSchema.from_address(_capsule_pointer(capsule, b"arrow_schema"))
    if not c.metadata:
        return []

    def i32(at: int) -> int:
        return int.from_bytes(ctypes.string_at(c.metadata + at, 4), sys.byteorder, signed=True)

    out: list[tuple[str, str]] = []
    at = 4
    for _ in range(i32(0)):
        pair = []
        for _ in range(2):
            n = i32(at)
            if n < 0:
                raise _Unreadable("negative metadata length")
            pair.append(ctypes.string_at(c.metadata + at + 4, n).decode())
            at += 4 + n
        out.append((pair[0], pair[1]))
    return out


@dataclass
class _Call:
    name: str
    args: list
    options: pa.Scalar | None


@dataclass
class _FieldRef:
    name: str | None  # None: a nested reference


@dataclass
class _Literal:
    value: pa.Scalar


def _expression_tree(expr: pc.Expression) -> _Call | _FieldRef | _Literal:
    """``expr`` as a tree of :class:`_Call`, :class:`_FieldRef` and :class:`_Literal`."""
    rebuild, args = expr.__reduce__()
    if len(args) != 1 or not isinstance(args[0], pa.Buffer):
        raise _Unreadable(f"pickled as {rebuild!r}")
    table = pa.ipc.open_file(args[0]).read_all()
    pairs = _metadata_pairs(table.schema)
    if table.num_rows != 1:
        raise _Unreadable("not one row of literals")

    def scalar(index: str) -> pa.Scalar:
        return table.column(int(index))[0]

    def node(at: int) -> tuple[_Call | _FieldRef | _Literal, int]:
        key, value = pairs[at]
        if key == "literal":
            return _Literal(scalar(value)), at + 1
        if key == "field_ref":
            return _FieldRef(value), at + 1
        if key == "nested_field_ref":
            at += 1
            for _ in range(int(value)):
                _, at = node(at)
            return _FieldRef(None), at
        if key == "call":
            call, at = _Call(value, [], None), at + 1
            while pairs[at][0] != "end":
                if pairs[at][0] == "options":
                    call.options = scalar(pairs[at][1])
                    at += 1
                else:
                    arg, at = node(at)
                    call.args.append(arg)
            if pairs[at][1] != value:
                raise _Unreadable(f"call {value!r} ends as {pairs[at][1]!r}")
            return call, at + 1
        raise _Unreadable(f"unknown key {key!r}")

    tree, end = node(0)
    if end != len(pairs):
        raise _Unreadable("trailing metadata")
    return tree


def _exact_literal(sc: pa.Scalar, target: pa.DataType) -> pa.Scalar | None:
    """Literal ``sc`` as a ``target`` scalar when that is the same value, so
    comparing the column with either gives the same rows (Arrow compares them
    in a common type); None when it is NULL, lossy or of another kind."""
    src = sc.type
    if not sc.is_valid:
        return None
    if src == target:
        return sc
    same_kind = (
        (pa.types.is_integer(src) and (pa.types.is_integer(target) or pa.types.is_floating(target)))
        or (pa.types.is_floating(src) and pa.types.is_floating(target))
        or ((pa.types.is_integer(src) or pa.types.is_decimal(src)) and pa.types.is_decimal(target))
        or (_is_stringy(src) and _is_stringy(target))
        or (pa.types.is_date(src) and pa.types.is_date(target))
        or (pa.types.is_timestamp(src) and pa.types.is_timestamp(target) and src.tz == target.tz)
    )
    if not same_kind:
        return None
    try:
        if pa.types.is_decimal(target):  # by value: Arrow's cast checks the types' precision, not the value's
            value = decimal.Decimal(sc.as_py())
            out = pa.scalar(value, target)
            return out if out.as_py() == value else None
        out = sc.cast(target, safe=True)
        back = out.cast(src, safe=True)
    except (*_ARROW_ERRORS, ValueError, OverflowError, decimal.InvalidOperation):
        return None
    return out if back.equals(sc) else None


_EXPRESSION_OPS = {"equal": "=", "less": "<", "less_equal": "<=", "greater": ">", "greater_equal": ">="}


def _expression_terms(expr: pc.Expression, schema: pa.Schema) -> list[RangeTerm]:
    try:
        tree = _expression_tree(expr)
    except (_Unreadable, *_ARROW_ERRORS, ValueError, TypeError, IndexError, KeyError, UnicodeDecodeError):
        return []  # e.g. a reference by position, or a literal array: not serializable, no terms
    out: list[RangeTerm] = []

    def column_of(node: object) -> str | None:
        if isinstance(node, _FieldRef) and node.name is not None and schema.get_field_index(node.name) >= 0:
            t = schema.field(node.name).type
            return node.name if _range_type(t) else None
        return None

    def walk(node: object) -> None:
        if not isinstance(node, _Call):
            return
        if node.name in ("and_kleene", "and"):
            for arg in node.args:
                walk(arg)
        elif node.name == "if_else" and len(node.args) == 3:
            # ``if_else(c, a, NULL or false)`` is true only where c and a are
            # (DuckDB pushes ``x IN (...)`` as ``if_else(is_valid(x), is_in(x, ...), NULL)``)
            c, a, b = node.args
            if isinstance(b, _Literal) and (not b.value.is_valid or b.value.as_py() is False):
                walk(c)
                walk(a)
        elif node.name in _EXPRESSION_OPS and len(node.args) == 2:
            op, (left, right) = _EXPRESSION_OPS[node.name], node.args
            col = column_of(left)
            if col is None and (col := column_of(right)) is not None:
                left, right, op = right, left, _FLIP[op]
            if col is not None and isinstance(right, _Literal):
                c = _exact_literal(right.value, schema.field(col).type)
                if c is not None:
                    out.append(RangeTerm(col, op, (c,)))
        elif node.name == "is_in" and len(node.args) == 1 and (col := column_of(node.args[0])) is not None:
            opts = node.options
            if not isinstance(opts, pa.StructScalar) or opts.type.get_field_index("value_set") < 0:
                return
            value_set = opts["value_set"].values
            if value_set is None or len(value_set) == 0 or value_set.null_count:
                return
            t = schema.field(col).type
            values = [_exact_literal(v, t) for v in value_set]
            if all(v is not None for v in values):
                out.append(RangeTerm(col, "in", tuple(v for v in values if v is not None)))

    walk(tree)
    return out


def to_sql(predicate: Predicate) -> str:
    """Text to record for ``predicate`` (e.g. a Delete transaction's ``predicate``):
    SQL is returned as given; an Expression is rendered by pyarrow, readable but
    not necessarily SQL (``(a == 1)``, ``is_null(b, {nan_is_null=false})``)."""
    if isinstance(predicate, str):
        return predicate
    if isinstance(predicate, pc.Expression):
        return str(predicate)
    _not_a_predicate(predicate)


def filter_mask(predicate: Predicate, data: pa.RecordBatch | pa.Table) -> pa.BooleanArray:
    """Evaluate ``predicate`` over ``data``: one boolean per row, in row order.

    A row whose predicate is NULL is not selected (False), as in SQL WHERE, so
    ``data.filter(filter_mask(p, data))`` selects the matching rows."""
    expr = to_expression(predicate, data.schema)
    batches = data.to_batches() if isinstance(data, pa.Table) else [data]
    scanner = ds.Scanner.from_batches(iter(batches), schema=data.schema, columns={"mask": expr}, use_threads=False)
    try:
        mask = scanner.to_table().column("mask")
    except _ARROW_ERRORS as e:  # e.g. a division by zero, an overflow in some row
        raise _err(PredicateError, f"evaluating predicate {to_sql(predicate)!r} failed: {e}") from e
    return pc.fill_null(mask, False).combine_chunks()
