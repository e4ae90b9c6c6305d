"""Range terms: the top-level AND terms of a predicate (SQL text or a pyarrow
Expression) that compare a plain column with constants, which a column's
statistics (zone maps, Spark's pushed filters) can decide."""

from __future__ import annotations

import decimal
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from tessera.catalog.errors import PredicateError

from .expression_tree import CallNode, FieldRefNode, LiteralNode, Unreadable, expression_tree
from .expressions import Predicate
from .sql import Translator, match_name, parse
from .values import ARROW_ERRORS, cast_const, is_stringy


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
    from tessera.format.table.zonemap import _value_type_ok

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
        tree = parse(predicate)
    except PredicateError:
        return []
    translator = Translator(predicate, schema)
    names = list(schema.names)
    out: list[RangeTerm] = []

    def column_of(node: exp.Expr) -> str | None:
        if isinstance(node, exp.Column) and not node.table:
            name = match_name(node.this, names) if isinstance(node.this, exp.Identifier) else None
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
            return cast_const(v.lit, schema.field(column).type, explicit=False)
        except (PredicateError, *ARROW_ERRORS, ValueError, TypeError):
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
        or (is_stringy(src) and is_stringy(target))
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
    except (*ARROW_ERRORS, ValueError, OverflowError, decimal.InvalidOperation):
        return None
    return out if back.equals(sc) else None


_EXPRESSION_OPS = {"equal": "=", "less": "<", "less_equal": "<=", "greater": ">", "greater_equal": ">="}


def _expression_terms(expr: pc.Expression, schema: pa.Schema) -> list[RangeTerm]:
    try:
        tree = expression_tree(expr)
    except (Unreadable, *ARROW_ERRORS, ValueError, TypeError, IndexError, KeyError, UnicodeDecodeError):
        return []  # e.g. a reference by position, or a literal array: not serializable, no terms
    out: list[RangeTerm] = []

    def column_of(node: object) -> str | None:
        if isinstance(node, FieldRefNode) and node.name is not None and schema.get_field_index(node.name) >= 0:
            t = schema.field(node.name).type
            return node.name if _range_type(t) else None
        return None

    def walk(node: object) -> None:
        if not isinstance(node, CallNode):
            return
        if node.name in ("and_kleene", "and"):
            for arg in node.args:
                walk(arg)
        elif node.name == "if_else" and len(node.args) == 3:
            # ``if_else(c, a, NULL or false)`` is true only where c and a are
            # (DuckDB pushes ``x IN (...)`` as ``if_else(is_valid(x), is_in(x, ...), NULL)``)
            c, a, b = node.args
            if isinstance(b, LiteralNode) and (not b.value.is_valid or b.value.as_py() is False):
                walk(c)
                walk(a)
        elif node.name in _EXPRESSION_OPS and len(node.args) == 2:
            op, (left, right) = _EXPRESSION_OPS[node.name], node.args
            col = column_of(left)
            if col is None and (col := column_of(right)) is not None:
                left, right, op = right, left, _FLIP[op]
            if col is not None and isinstance(right, LiteralNode):
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
