"""The Spark filters Tessera pushes down, and the range terms they give the
zone-map pruning.

Pushed filters are kept as plain :class:`Pushed` records (picklable) and turned
into pyarrow expressions on the executors, where they are applied exactly: a
filter accepted here is not re-evaluated by Spark.  Filters whose semantics
could differ (floating point NaN ordering, nested columns, NULLs inside IN
lists, values not representable in the column's type) are handed back.

Statistics: the planning side turns the pushed comparisons into
:class:`~tessera.catalog.query.predicate.RangeTerm` s (:func:`range_terms_of`) and
prunes with the table's ZONEMAP indices, the same path as ``Table.scanner``
and the DuckDB/Polars view (:func:`tessera.catalog.query.pruning.terms_pruner`):
fragments no zone can match are not read, and each task reads only the row
ranges of the zones that may match.  (The Spark writer once kept per-file
min/max statistics in each data file's footer; zone maps replace them: they
cover files from every writer, pylance's included, and prune within a file.)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tessera.catalog.query.predicate import RangeTerm

log = logging.getLogger(__name__)

_CMP = {"eq", "lt", "le", "gt", "ge"}
#: pushed comparison -> range term operator
_RANGE_OPS = {"eq": "=", "eqns": "=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "in": "in"}


def _pushable_kind(t: pa.DataType) -> str | None:
    """The kinds of column whose comparisons are pushed (compared exactly as Spark does)."""
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return "int"
    if pa.types.is_date32(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "ts"
    if pa.types.is_decimal(t):
        return "dec"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    return None


# -- pushed filters -------------------------------------------------------------------------


@dataclass(frozen=True)
class Pushed:
    """One pushed-down conjunct: ``[NOT] column <op> value``.

    ``value`` is already converted to the column's type (a tuple for ``in``)."""

    op: str  # eq eqns lt le gt ge in isnull notnull startswith endswith contains
    column: str
    field_id: int
    value: Any = None
    negated: bool = False

    def expression(self, t: pa.DataType) -> pc.Expression:
        """The exact pyarrow expression (false or null where Spark's filter drops the row)."""
        f = pc.field(self.column)
        if self.op in ("isnull", "notnull"):
            null = (self.op == "isnull") != self.negated
            return f.is_null() if null else f.is_valid()
        if self.op == "eqns":
            if self.value is None:
                return f.is_valid() if self.negated else f.is_null()
            e = pc.coalesce(f == pa.scalar(self.value, t), pa.scalar(False))
            return ~e if self.negated else e
        if self.op in _CMP:
            v = pa.scalar(self.value, t)
            e = {"eq": f == v, "lt": f < v, "le": f <= v, "gt": f > v, "ge": f >= v}[self.op]
        elif self.op == "in":
            e = f.isin(pa.array(self.value, t))
        elif self.op == "startswith":
            e = pc.starts_with(f, pattern=self.value)
        elif self.op == "endswith":
            e = pc.ends_with(f, pattern=self.value)
        else:
            e = pc.match_substring(f, pattern=self.value)
        return f.is_valid() & ~e if self.negated else e

    def range_term(self, t: pa.DataType) -> RangeTerm | None:
        """The range term every row this filter keeps satisfies (for zone-map
        pruning), or None when it gives none: negations, NULL tests, substring
        tests other than a prefix, and boolean or binary columns."""
        if self.negated or _pushable_kind(t) is None or pa.types.is_boolean(t):
            return None
        if self.op == "startswith":
            # every string starting with p sorts at or after p (code point order, as zones compare)
            return RangeTerm(self.column, ">=", (pa.scalar(self.value, t),)) if self.value else None
        op = _RANGE_OPS.get(self.op)
        if op is None or self.value is None:
            return None  # NULL tests, <=> NULL, endswith, contains
        values = self.value if self.op == "in" else (self.value,)
        try:
            return RangeTerm(self.column, op, tuple(pa.scalar(v, t) for v in values))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            return None


def range_terms_of(pushed: list[Pushed], schema: pa.Schema) -> list[RangeTerm]:
    """The range terms of the pushed filters (they are ANDed, so every term holds on every row read)."""
    out = []
    for p in pushed:
        if schema.get_field_index(p.column) < 0:
            continue
        term = p.range_term(schema.field(p.column).type)
        if term is not None:
            out.append(term)
    return out


_OPS = {
    "EqualTo": "eq",
    "EqualNullSafe": "eqns",
    "LessThan": "lt",
    "LessThanOrEqual": "le",
    "GreaterThan": "gt",
    "GreaterThanOrEqual": "ge",
    "In": "in",
    "StringStartsWith": "startswith",
    "StringEndsWith": "endswith",
    "StringContains": "contains",
}


def translate(flt, schema: pa.Schema, field_ids: dict[str, int]) -> Pushed | None:
    """A pyspark ``Filter`` as a :class:`Pushed`, or None to hand it back to Spark."""
    negated = type(flt).__name__ == "Not"
    inner = flt.child if negated else flt
    name = type(inner).__name__
    attr = tuple(getattr(inner, "attribute", ()))
    if len(attr) != 1 or attr[0] not in field_ids:
        return None
    column = attr[0]
    t = schema.field(column).type
    fid = field_ids[column]
    if name in ("IsNull", "IsNotNull"):
        return Pushed("isnull" if name == "IsNull" else "notnull", column, fid, None, negated)
    op = _OPS.get(name)
    kind = _pushable_kind(t)
    binary = pa.types.is_binary(t) or pa.types.is_large_binary(t)
    if op is None or not (kind or binary and op in ("eq", "eqns", "in")):
        return None  # floats (NaN ordering), nested and other types: Spark filters them
    value = inner.value
    if op in ("startswith", "endswith", "contains"):
        return Pushed(op, column, fid, value, negated) if kind == "str" and isinstance(value, str) else None
    if op == "eqns" and value is None:
        return Pushed(op, column, fid, None, negated)
    values = list(value) if op == "in" else [value]
    if not values or any(v is None for v in values):
        return None
    try:
        cast = [_to_column(v, t) for v in values]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return None
    return Pushed(op, column, fid, tuple(cast) if op == "in" else cast[0], negated)


def _to_column(v: Any, t: pa.DataType) -> Any:
    """``v`` converted to the column type exactly (raises when it cannot be)."""
    if isinstance(v, float):
        raise ValueError("floating point literal")
    if isinstance(v, bool) != pa.types.is_boolean(t):
        raise TypeError("boolean mismatch")
    s = pa.scalar(v)
    if pa.types.is_timestamp(t) and pa.types.is_timestamp(s.type) and (s.type.tz is None) != (t.tz is None):
        s = pa.scalar(s.as_py().replace(tzinfo=None), pa.timestamp(s.type.unit))
    if pa.types.is_string(s.type) != (pa.types.is_string(t) or pa.types.is_large_string(t)):
        raise TypeError("string mismatch")
    out = s.cast(t, safe=True)
    if pa.types.is_decimal(t) and Decimal(str(out.as_py())) != Decimal(str(v)):
        raise ValueError("decimal value changes")
    return out.as_py()
