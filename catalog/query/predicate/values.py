"""Typed values of a translation: a translated node (its Expression, type and
constant), errors that carry what went wrong, binding an Expression to a
schema, and casting a constant to the type it is compared with."""

from __future__ import annotations

import datetime
import decimal
import re
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from tessera.catalog.errors import PredicateError, PredicateTypeError, UnknownColumnError

NULL_BOOL = pa.scalar(None, pa.bool_())
ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)


@dataclass
class Val:
    """A translated node: its expression, its Arrow type once known, and the
    scalar itself when the node is a constant (so it can still be re-typed)."""

    expr: pc.Expression
    type: pa.DataType | None = None
    lit: pa.Scalar | None = None


def const(scalar: pa.Scalar) -> Val:
    return Val(pc.scalar(scalar), scalar.type, scalar)


def typed_error(cls: type[PredicateError], message: str, **attrs: object) -> PredicateError:
    """An error of class ``cls`` carrying ``attrs`` (``text``, ``column``...)."""
    error = cls(message)
    for key, value in attrs.items():
        setattr(error, key, value)
    return error


def bound_type(expr: pc.Expression, schema: pa.Schema, context: str = "") -> pa.DataType:
    """Bind ``expr`` against ``schema`` (no data is read) and return its type."""
    context = context or f"predicate {expr}"
    try:
        scanner = ds.Scanner.from_batches(iter(()), schema=schema, columns={"v": expr})
        return scanner.projected_schema.field("v").type
    except ARROW_ERRORS as e:
        missing = re.search(r"No match for FieldRef\.\w+\((.*?)\) in", str(e))
        if missing:
            raise typed_error(
                UnknownColumnError,
                f"{context} names a column the table does not have "
                f"({missing.group(1)}); available columns: {', '.join(schema.names) or '(none)'}",
                column=missing.group(1),
                available=list(schema.names),
            ) from e
        raise typed_error(PredicateTypeError, f"{context} does not type-check: {e}") from e


def as_boolean(expr: pc.Expression, schema: pa.Schema, context: str) -> pc.Expression:
    """``expr`` bound and checked to be boolean (a bare NULL counts as one)."""
    typ = bound_type(expr, schema, context)
    if not (pa.types.is_boolean(typ) or pa.types.is_null(typ)):
        raise typed_error(PredicateTypeError, f"{context} is {typ}, not boolean")
    return expr if pa.types.is_boolean(typ) else expr.cast(pa.bool_())


def is_stringy(t: pa.DataType) -> bool:
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


def cast_const(sc: pa.Scalar, target: pa.DataType, explicit: bool) -> pa.Scalar | None:
    """``sc`` as a ``target`` constant, or None where an implicit cast should not
    apply (pyarrow's own promotion then decides). Raises if an explicit CAST,
    or reading a string as a number/date/timestamp, fails."""
    src = sc.type
    target = target.value_type if pa.types.is_dictionary(target) else target
    if src == target or (not sc.is_valid and not explicit):
        return sc if src == target else pa.scalar(None, target)
    try:
        if is_stringy(src) and pa.types.is_temporal(target):
            return _read_temporal(sc.as_py(), target)
        if pa.types.is_timestamp(target) and (pa.types.is_timestamp(src) or pa.types.is_date(src)):
            return _retime(sc, target)
        if not explicit and (
            is_stringy(target) and not is_stringy(src) or pa.types.is_date(target) and pa.types.is_timestamp(src)
        ):
            return None  # never compare a number as text, nor truncate a timestamp to a date
        if pa.types.is_decimal(target) and (pa.types.is_integer(src) or pa.types.is_floating(src)):
            return pa.scalar(decimal.Decimal(str(sc.as_py())), target)
        return sc.cast(target, safe=True)
    except (*ARROW_ERRORS, ValueError, decimal.InvalidOperation) as e:
        if explicit or is_stringy(src):
            raise typed_error(PredicateTypeError, f"cannot read {sc.as_py()!r} as {target}: {e}") from e
        return None
