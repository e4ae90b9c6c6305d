"""SQL text -> pyarrow Expression: sqlglot parses the text once, and a
:class:`Translator` turns the tree node by node into a typed Expression
over one schema (translations are remembered per text and schema)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NoReturn

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Tokenizer as BaseTokenizer

from tessera.catalog.errors import (
    PredicateSyntaxError,
    PredicateTypeError,
    UnknownColumnError,
    UnsupportedPredicateError,
)
from tessera.format import arrow_compat

from . import functions
from .values import ARROW_ERRORS, NULL_BOOL, Val, as_boolean, bound_type, cast_const, const, is_stringy, typed_error


class TesseraSQL(Dialect):
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


class Translator:
    """Translates one parsed sqlglot tree against one schema."""

    def __init__(self, text: str, schema: pa.Schema) -> None:
        self.text, self.schema = text, schema
        self.columns: set[str] = set()

    def type_of(self, v: Val) -> pa.DataType:
        if v.type is None:
            v.type = bound_type(v.expr, self.schema, f"{v.expr} in predicate {self.text!r}")
        return v.type

    def coerce(self, a: Val, b: Val) -> tuple[Val, Val]:
        """Cast whichever side is a constant to the type of the other side."""
        if a.lit is not None and b.lit is None:
            b, a = self.coerce(b, a)
        elif b.lit is not None and a.lit is None:
            cast = cast_const(b.lit, self.type_of(a), explicit=False)
            b = b if cast is None else const(cast)
        return a, b

    def apply(self, fn: Callable, *args: Val) -> Val:
        """``fn`` over the arguments, folded to a constant when all are constants."""
        if all(a.lit is not None for a in args):
            try:
                return const(fn(*(a.lit for a in args)))
            except ARROW_ERRORS as e:
                raise typed_error(PredicateTypeError, f"in predicate {self.text!r}: {e}") from e
        return Val(fn(*(a.expr for a in args)))

    def compare(self, fn: Callable, a: Val, b: Val) -> Val:
        """A comparison, after casting a constant side to the other side's type."""
        return self.apply(fn, *self.coerce(a, b))

    def remainder(self, a: Val, b: Val) -> Callable:
        """SQL's ``%`` for these operands (``pc.remainder_checked``, or its
        equivalent where pyarrow is older than 26: format/arrow_compat.py)."""
        try:
            return arrow_compat.remainder_checked_for(lambda: (self.type_of(a), self.type_of(b)))
        except ARROW_ERRORS as e:
            raise typed_error(
                PredicateTypeError, f"{a.expr} % {b.expr} in predicate {self.text!r} does not type-check: {e}"
            ) from e

    def logic(self, fn: Callable, *args: Val) -> Val:
        """A boolean operator; a bare NULL operand is taken as a boolean NULL."""
        return self.apply(
            fn, *(const(NULL_BOOL) if a.lit is not None and pa.types.is_null(a.type) else a for a in args)
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
        raise typed_error(
            UnsupportedPredicateError,
            f"{what} is not supported in a predicate: {node.sql(dialect=TesseraSQL)!r} in {self.text!r}",
            construct=what,
            text=self.text,
        )

    def resolve(self, parts: list[exp.Identifier]) -> Val:
        """Resolve ``a`` / ``a.b.c`` to a (nested) field reference."""
        names, fields = list(self.schema.names), list(self.schema)
        dotted = ".".join(p.name for p in parts)
        if len(parts) > 1 and dotted in names and not match_name(parts[0], names):
            parts = [exp.to_identifier(dotted, quoted=True)]  # a top-level column named "a.b"
        path: list[str] = []
        typ: pa.DataType | None = None
        for ident in parts:
            if path and not pa.types.is_struct(typ):
                raise typed_error(
                    UnknownColumnError,
                    f"{'.'.join(path)!r} is {typ}, not a struct, so it has no "
                    f"field {ident.name!r} (predicate {self.text!r})",
                    column=dotted,
                    available=names,
                )
            name = match_name(ident, names)
            if name is None:
                where = f"struct column {'.'.join(path)!r} has no field" if path else "unknown column"
                raise typed_error(
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
        return Val(pc.field(*path), typ)

    def literal(self, node: exp.Literal | exp.Boolean | exp.Null) -> Val:
        if not isinstance(node, exp.Literal):
            return const(pa.scalar(None if isinstance(node, exp.Null) else bool(node.this)))
        if node.is_string:
            return const(pa.scalar(node.this, pa.string()))
        try:
            return const(pa.scalar(int(node.this), pa.int64()))
        except ValueError:
            return const(pa.scalar(float(node.this), pa.float64()))
        except OverflowError as e:
            raise typed_error(PredicateTypeError, f"integer {node.this} is out of range in {self.text!r}") from e

    def cast(self, node: exp.Cast) -> Val:
        if isinstance(node, exp.TryCast) or node.args.get("format"):
            self.unsupported(node, "TRY_CAST" if isinstance(node, exp.TryCast) else "CAST ... FORMAT")
        to = node.to
        params = [int(p.this.this) if isinstance(p.this, exp.Literal) else None for p in to.expressions]
        if to.this in _DECIMALS:
            try:
                target: pa.DataType = pa.decimal128(*(params or [38, 10]))
            except (TypeError, ValueError) as e:
                raise typed_error(PredicateTypeError, f"bad type {to.sql()} in {self.text!r}: {e}") from e
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
            return const(cast_const(v.lit, target, explicit=True))
        return Val(v.expr.cast(target), target)

    def like(self, node: exp.Expr, escape: str | None = None) -> Val:
        pattern = self.visit(node.expression).lit
        if pattern is None:
            self.unsupported(node, "LIKE with a non-constant pattern")
        if not is_stringy(pattern.type):
            raise typed_error(PredicateTypeError, f"LIKE pattern {pattern} is not a string in {self.text!r}")
        text: str = pattern.as_py()
        if escape is not None and escape != "\\":  # Arrow's LIKE escapes with a backslash
            out, chars = [], iter(text)
            for ch in chars:
                out.append("\\" + next(chars, "") if ch == escape else "\\\\" if ch == "\\" else ch)
            text = "".join(out)
        ci = isinstance(node, exp.ILike)
        return self.apply(lambda x: pc.match_like(x, pattern=text, ignore_case=ci), self.visit(node.this))

    def isin(self, node: exp.In) -> Val:
        if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
            self.unsupported(node, "IN with a subquery")
        if not node.expressions:
            raise typed_error(PredicateSyntaxError, f"empty IN list in {self.text!r}", text=self.text)
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
            except (*ARROW_ERRORS, TypeError, ValueError, OverflowError):
                value_set = None  # mixed types: fall back to ORed comparisons below
            if value_set is not None:  # SQL: NULL input -> NULL; no match, NULL in list -> NULL
                out = pc.if_else(pc.is_null(x.expr), NULL_BOOL, pc.is_in(x.expr, value_set=value_set, skip_nulls=True))
                if len(values) < len(cast):
                    out = pc.if_else(out, pa.scalar(True), NULL_BOOL)
                return Val(out, pa.bool_())
        out = self.compare(pc.equal, x, items[0])
        for item in items[1:]:
            out = self.logic(pc.or_kleene, out, self.compare(pc.equal, x, item))
        return out

    # -- functions ------------------------------------------------------------------

    def arg(self, node: exp.Expr | None, fname: str, what: str = "argument") -> Val:
        if node is None:
            raise typed_error(PredicateSyntaxError, f"{fname} is missing its {what} in {self.text!r}", text=self.text)
        v = self.visit(node)
        typ = self.type_of(v)
        if pa.types.is_dictionary(typ):  # kernels want the values, not the dictionary
            v = Val(v.expr.cast(typ.value_type), typ.value_type) if v.lit is None else const(v.lit.cast(typ.value_type))
        return v

    def string_arg(self, node: exp.Expr | None, fname: str) -> Val:
        v = self.arg(node, fname)
        assert node is not None  # arg() raised PredicateSyntaxError for a missing one
        typ = self.type_of(v)
        if not (is_stringy(typ) or pa.types.is_null(typ)):
            raise typed_error(
                PredicateTypeError,
                f"{fname} takes a string, not {typ} ({node.sql(dialect=TesseraSQL)}) in {self.text!r}",
                text=self.text,
            )
        if pa.types.is_null(typ):
            v = const(pa.scalar(None, pa.string()))
        return v

    def const_string(self, node: exp.Expr | None, fname: str, what: str) -> str:
        if isinstance(node, exp.Var):  # e.g. date_trunc(month, ...), extract's field
            return node.name
        v = self.arg(node, fname, what)
        assert node is not None  # arg() raised PredicateSyntaxError for a missing one
        if v.lit is None:
            self.unsupported(node, f"{fname} with a non-constant {what}")
        if not is_stringy(v.lit.type) or not v.lit.is_valid:
            raise typed_error(
                PredicateTypeError,
                f"the {what} of {fname} must be a string, not {v.lit} in {self.text!r}",
                text=self.text,
            )
        return v.lit.as_py()

    def numeric_arg(self, node: exp.Expr | None, fname: str) -> Val:
        v = self.arg(node, fname)
        typ = self.type_of(v)
        if not (
            pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_decimal(typ) or pa.types.is_null(typ)
        ):
            raise typed_error(PredicateTypeError, f"{fname} takes a number, not {typ} in {self.text!r}", text=self.text)
        return const(pa.scalar(None, pa.float64())) if pa.types.is_null(typ) else v

    def temporal_arg(self, node: exp.Expr | None, fname: str) -> Val:
        v = self.arg(node, fname)
        typ = self.type_of(v)
        if v.lit is not None and is_stringy(typ):  # extract(year FROM '2024-01-01')
            v = const(cast_const(v.lit, pa.timestamp("us"), explicit=True))
        elif not (pa.types.is_date(typ) or pa.types.is_timestamp(typ) or pa.types.is_time(typ)):
            raise typed_error(
                PredicateTypeError, f"{fname} takes a date or timestamp, not {typ} in {self.text!r}", text=self.text
            )
        return v

    def function(self, node: exp.Func) -> Val:
        """A scalar function call (:func:`.functions.call`); any other is unsupported."""
        out = functions.call(self, node)
        if out is None:
            self.unsupported(node)
        return out

    def visit(self, node: exp.Expr) -> Val:  # noqa: C901 - one branch per construct
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
            return self.logic(pc.coalesce, truth, const(pa.scalar(False)))
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
            if esc is None or not is_stringy(esc.type) or len(esc.as_py()) != 1:
                self.unsupported(node, "ESCAPE other than a single character")
            return self.like(node.this, esc.as_py())
        if isinstance(node, exp.Func) and not isinstance(node, exp.AggFunc):
            return self.function(node)
        if isinstance(node, exp.Alias):
            raise typed_error(
                PredicateSyntaxError,
                f"unexpected alias {node.alias!r} in predicate {self.text!r} (a missing operator?)",
                text=self.text,
            )
        self.unsupported(node)


def match_name(ident: exp.Identifier, names: list[str]) -> str | None:
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
def parse(text: str) -> exp.Expr:
    """Parse ``text`` as exactly one SQL expression."""
    try:
        statements = sqlglot.parse(text, dialect=TesseraSQL)
    except SqlglotError as e:  # ParseError carries structured errors, TokenError only a message
        first = (getattr(e, "errors", None) or [{}])[0]
        detail = first.get("description") or str(e)
        detail += f" (line {first['line']}, column {first['col']})" if "line" in first else ""
        raise typed_error(
            PredicateSyntaxError, f"cannot parse predicate {text!r}: {detail}", text=text, detail=detail
        ) from e
    if len(statements) != 1 or statements[0] is None:
        what = "is empty" if not any(statements) else f"holds {len(statements)} statements"
        raise typed_error(
            PredicateSyntaxError, f"predicate {text!r} {what}; expected one boolean expression", text=text, detail=what
        )
    return statements[0]


def translate(text: str, schema: pa.Schema, boolean: bool = True) -> tuple[pc.Expression, set[str]]:
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
    translator = Translator(text, schema)
    try:
        value = translator.visit(parse(text))
    except RecursionError as e:
        raise typed_error(
            UnsupportedPredicateError,
            f"predicate {text[:80]!r}... is nested too deeply",
            construct="deep nesting",
            text=text,
        ) from e
    if not boolean:
        return value.expr, translator.columns
    return as_boolean(value.expr, schema, f"predicate {text!r}"), translator.columns
