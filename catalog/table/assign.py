"""An update's SQL value stored into a column of another type, as pylance 14 does.

pylance's ``update({"i": "'3'"})`` plans the SQL value with DataFusion and
casts it to the column's type with Arrow's (arrow-rs) cast; a value the cast
cannot take (``'abc'`` into an integer, 300 into ``uint8``) is refused and
nothing is written.  So an update value is *cast*, where appended data is not
(``format/table/write_types.py``).  :func:`assign` reproduces that cast where
Tessera can reproduce it exactly, and refuses the rest with
:class:`SchemaMismatchError` (never a value pylance would not store):

* integers, floats and booleans between each other: range-checked; a float
  into an integer is truncated towards zero (``2.5`` -> 2), a number into a
  boolean is ``value != 0``;
* text into a number, boolean, date, timestamp or decimal: parsed (booleans
  as PostgreSQL spells them: ``t``/``true``/``yes``/``on``/``1``, their
  prefixes, case and surrounding blanks aside); into a decimal rounded half
  away from zero;
* numbers into decimals checked against the precision (a float rounded half
  away from zero, as arrow-rs does), decimals into integers truncated;
* integers into dates (days) and timestamps (the column's unit), timestamps
  into dates and coarser units (truncated);
* anything into text: integers, decimals, booleans, dates, and floats in
  plain notation (``2.0``, ``-2.7``); a float needing an exponent, a time or
  a timestamp is refused (arrow-rs's formatting is not reproduced).

``docs/reference/write-types.md`` records what pylance does with each.
"""

from __future__ import annotations

import decimal
import math

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import SchemaMismatchError

_TRUE = {"t", "tr", "tru", "true", "y", "ye", "yes", "on", "1"}
_FALSE = {"f", "fa", "fal", "fals", "false", "n", "no", "of", "off", "0"}


def _refuse(arr: pa.Array, field: pa.Field, why: str) -> SchemaMismatchError:
    return SchemaMismatchError(
        f"cannot set column {field.name!r} ({field.type}) to a {arr.type} value: {why}; "
        "write a value of the column's type (pylance casts SQL values the same way)"
    )


def _is_number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _decimal_from_python(values: list, field: pa.Field, arr: pa.Array) -> pa.Array:
    """Decimals (Python ``Decimal``/None, already at the column's scale) checked
    against the column's precision."""
    t = field.type
    limit = decimal.Decimal(10) ** (t.precision - t.scale)
    for v in values:
        if v is not None and abs(v) >= limit:
            digits = t.precision - t.scale
            raise _refuse(arr, field, f"{v} is too large for {t} (at most {digits} digits before the point)")
    return pa.array(values, t)


def _quantum(scale: int) -> decimal.Decimal:
    return decimal.Decimal(1).scaleb(-scale)


def _to_decimal(arr: pa.Array, field: pa.Field) -> pa.Array:
    t = field.type
    q = _quantum(t.scale)
    out: list = []
    src = arr.type
    for v in arr.to_pylist():
        if v is None:
            out.append(None)
        elif pa.types.is_floating(src):
            if not math.isfinite(v):
                raise _refuse(arr, field, f"{v} is not a number a decimal holds")
            x = v * (10.0**t.scale)  # arrow-rs multiplies in f64, then rounds half away from zero
            n = math.floor(abs(x) + 0.5) * (1 if x >= 0 else -1)
            out.append(decimal.Decimal(n).scaleb(-t.scale))
        else:  # integers, text, decimals
            try:
                d = decimal.Decimal(v.strip() if isinstance(v, str) else v)
            except decimal.InvalidOperation:
                raise _refuse(arr, field, f"{v!r} is not a number") from None
            if not d.is_finite():
                raise _refuse(arr, field, f"{v!r} is not a number a decimal holds")
            with decimal.localcontext() as ctx:
                ctx.prec = 80
                out.append(d.quantize(q, rounding=decimal.ROUND_HALF_UP))
    return _decimal_from_python(out, field, arr)


def _to_bool(arr: pa.Array, field: pa.Field) -> pa.Array:
    out: list = []
    for v in arr.to_pylist():
        if v is None:
            out.append(None)
            continue
        w = v.strip().lower()
        if w in _TRUE:
            out.append(True)
        elif w in _FALSE:
            out.append(False)
        else:
            raise _refuse(arr, field, f"{v!r} is not a boolean (true/false, yes/no, on/off, 1/0)")
    return pa.array(out, pa.bool_())


def _float_text(arr: pa.Array, field: pa.Field) -> pa.Array:
    out: list = []
    for v in arr.to_pylist():
        if v is None:
            out.append(None)
        elif v == 0 or (math.isfinite(v) and 1e-5 <= abs(v) < 1e15):
            out.append(repr(float(v)))
        else:
            raise _refuse(arr, field, f"{v!r} would be written in exponent notation, which Tessera does not reproduce")
    return pa.array(out, field.type)


def _plain(arr: pa.Array, t: pa.DataType) -> pa.Array:
    """Arrow's cast where it gives what arrow-rs gives (raises ArrowInvalid otherwise)."""
    return arr.cast(t, safe=True)


def assign(arr: pa.Array, field: pa.Field) -> pa.Array:
    """The value ``arr`` (an update's SQL value, or a Python literal) as the
    column ``field``'s type, with pylance's cast (see the module docs).

    Raises:
        SchemaMismatchError: a value pylance refuses, or one whose cast Tessera
            does not reproduce exactly; the message names the column and both types.
    """
    t, src = field.type, arr.type
    if src.equals(t):
        return arr
    if pa.types.is_null(src):
        return pa.nulls(len(arr), t)
    if pa.types.is_dictionary(src):
        arr, src = arr.cast(src.value_type), src.value_type
    try:
        if pa.types.is_dictionary(t):
            return assign(arr, field.with_type(t.value_type)).dictionary_encode().cast(t)
        if _is_text(t):
            if pa.types.is_floating(src):
                return _float_text(arr, field)
            if pa.types.is_timestamp(src) or pa.types.is_time(src) or pa.types.is_duration(src):
                raise _refuse(arr, field, "Tessera does not reproduce arrow-rs's formatting of times as text")
            return _plain(arr, t)
        if pa.types.is_decimal(t):
            if _is_number(src) or _is_text(src) or pa.types.is_decimal(src):
                return _to_decimal(arr, field)
            return _plain(arr, t)
        if pa.types.is_boolean(t):
            if _is_text(src):
                return _to_bool(arr, field)
            return _plain(arr, t)
        if pa.types.is_integer(t):
            if pa.types.is_floating(src):
                if pc.any(pc.invert(pc.is_finite(arr))).as_py():
                    raise _refuse(arr, field, "NaN or infinity is no integer")
                return _plain(pc.trunc(arr), t)
            if pa.types.is_decimal(src):
                return _plain(pc.round(arr, 0, round_mode="towards_zero"), t)
            if _is_text(src):  # arrow-rs reads '+3' as 3
                return _plain(pc.replace_substring_regex(arr, r"^\+(\d)", r"\1"), t)
            return _plain(arr, t)
        if pa.types.is_floating(t):
            if pa.types.is_integer(src) or pa.types.is_floating(src) or pa.types.is_boolean(src):
                return arr.cast(t, safe=False)  # a float holds what it can (arrow-rs's `as`)
            return _plain(arr, t)
        if pa.types.is_date32(t) and pa.types.is_integer(src):
            return _plain(_plain(arr, pa.int32()), t)
        if pa.types.is_date64(t) and pa.types.is_integer(src):
            return _plain(_plain(arr, pa.int64()), t)
        if pa.types.is_timestamp(t) and pa.types.is_timestamp(src) and src.tz not in (None, "UTC") and not t.tz:
            raise _refuse(arr, field, "arrow-rs moves a zoned time to its local wall clock, which Tessera does not")
        if pa.types.is_timestamp(t) and _is_text(src) and t.tz in (None, "UTC"):
            try:
                return _plain(arr, t)
            except pa.ArrowInvalid:  # arrow-rs reads a time without offset as UTC, one with an offset in UTC
                other = pa.timestamp(t.unit, None if t.tz else "UTC")
                return _plain(_plain(arr, other), t)
        if (pa.types.is_date(t) or pa.types.is_timestamp(t)) and pa.types.is_timestamp(src):
            try:
                return _plain(arr, t)
            except pa.ArrowInvalid:  # a coarser unit or a date: truncated, as arrow-rs does
                if pa.types.is_timestamp(t) and _finer(t.unit, src.unit):
                    raise
                return arr.cast(t, safe=False)
        return _plain(arr, t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise _refuse(arr, field, str(exc)) from None


_UNITS = ["s", "ms", "us", "ns"]


def _finer(a: str, b: str) -> bool:
    return _UNITS.index(a) > _UNITS.index(b)
