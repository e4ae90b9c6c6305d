"""The scalar functions a SQL predicate may call (lower, regexp_like, date_trunc,
extract, round, coalesce...), each translated to pyarrow compute."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from tessera.catalog.errors import PredicateSyntaxError, PredicateTypeError

from .values import ARROW_ERRORS, Val, typed_error

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


def _extract(tr, field: str, v: Val, fname: str, node: exp.Expr) -> Val:
    field = field.lower()
    fn = _EXTRACT.get(field)
    if fn is None:
        tr.unsupported(node, f"{fname} of {field!r} (supported: {', '.join(sorted(_EXTRACT))})")
    typ = tr.type_of(v)
    if pa.types.is_date(typ) and field in _TIME_FIELDS:
        v = tr.apply(lambda x: x.cast(pa.timestamp("s")), v)  # a date's time is midnight
    if pa.types.is_time(typ) and field not in _TIME_FIELDS:
        raise typed_error(PredicateTypeError, f"{fname}({field}) of a {typ} in {tr.text!r}", text=tr.text)
    out = tr.apply(fn, v)
    out.type = out.type or pa.int64()
    return out


def call(tr, node: exp.Func) -> Val | None:  # noqa: C901 - one branch per function
    """A scalar function call, translated to pyarrow compute by translator ``tr``
    (:class:`.sql.Translator`); None for a function not known here."""
    anonymous = isinstance(node, exp.Anonymous)
    name = (node.name if anonymous else node.sql_name()).upper()
    args = list(node.expressions) if anonymous else []
    a = node.this if not anonymous else (args[0] if args else None)
    b = node.args.get("expression") if not anonymous else (args[1] if len(args) > 1 else None)
    fname = name.lower()

    def arity(n: int, m: int | None = None) -> None:
        if anonymous and not (n <= len(args) <= (n if m is None else m)):
            want = n if m is None else f"{n} to {m}"
            raise typed_error(
                PredicateTypeError,
                f"{fname} takes {want} arguments, got {len(args)} in {tr.text!r}",
                text=tr.text,
            )

    if name in ("LOWER", "UPPER"):
        arity(1)
        fn = pc.utf8_lower if name == "LOWER" else pc.utf8_upper
        return tr.apply(fn, tr.string_arg(a, fname))
    if name in ("STARTS_WITH", "STARTSWITH", "ENDS_WITH", "ENDSWITH", "CONTAINS"):
        arity(2)
        x, pattern = tr.string_arg(a, fname), tr.const_string(b, fname, "pattern")
        fn = {"S": pc.starts_with, "E": pc.ends_with, "C": pc.match_substring}[name[0]]
        return tr.apply(lambda e: fn(e, pattern=pattern), x)
    if name in ("REGEXP_LIKE", "REGEXP_MATCH", "REGEXP_MATCHES", "RLIKE"):
        arity(2, 3)
        flags = (args[2] if len(args) > 2 else None) if anonymous else node.args.get("flag")
        x, pattern = tr.string_arg(a, fname), tr.const_string(b, fname, "pattern")
        flag = tr.const_string(flags, fname, "flags") if flags is not None else ""
        if set(flag) - {"i", "c"}:
            tr.unsupported(node, f"{fname} flags {flag!r} (supported: 'i', 'c')")
        ci = "i" in flag and flag.rfind("i") > flag.rfind("c")
        try:
            pc.match_substring_regex(pa.array([""]), pattern=pattern, ignore_case=ci)
        except ARROW_ERRORS as e:
            raise typed_error(
                PredicateTypeError, f"bad regular expression {pattern!r} in {tr.text!r}: {e}", text=tr.text
            ) from e
        return tr.apply(lambda e: pc.match_substring_regex(e, pattern=pattern, ignore_case=ci), x)
    if name in ("LENGTH", "CHAR_LENGTH", "CHARACTER_LENGTH", "LEN"):
        arity(1)
        x = tr.arg(a, fname)
        typ = tr.type_of(x)
        if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
            return tr.apply(lambda e: pc.binary_length(e).cast(pa.int64()), x)
        x = tr.string_arg(a, fname)
        out = tr.apply(lambda e: pc.utf8_length(e).cast(pa.int64()), x)
        out.type = pa.int64()
        return out
    if name in ("TRIM", "LTRIM", "RTRIM", "BTRIM"):
        position = "LEADING" if name == "LTRIM" else "TRAILING" if name == "RTRIM" else "BOTH"
        if not anonymous:
            position = str(node.args.get("position") or position).upper()
            if node.args.get("collation"):
                tr.unsupported(node, f"{fname} with COLLATE")
        else:
            arity(1, 2)
        x = tr.string_arg(a, fname)
        chars = " " if b is None else tr.const_string(b, fname, "characters")
        fn = {"LEADING": pc.utf8_ltrim, "TRAILING": pc.utf8_rtrim}.get(position, pc.utf8_trim)
        return tr.apply(lambda e: fn(e, characters=chars), x)
    if name in ("DATE_TRUNC", "TIMESTAMP_TRUNC", "DATETIME_TRUNC"):
        if anonymous:
            arity(2)
            unit_node, value_node = args[0], args[1]
        else:
            unit_node, value_node = node.args.get("unit"), node.this
            if node.args.get("zone"):
                tr.unsupported(node, f"{fname} with a time zone")
        unit = tr.const_string(unit_node, fname, "unit").lower()
        unit = _TRUNC_ALIASES.get(unit, unit)
        if unit not in _TRUNC_UNITS:
            tr.unsupported(node, f"{fname} to {unit!r} (supported: {', '.join(_TRUNC_UNITS)})")
        x = tr.temporal_arg(value_node, fname)
        if pa.types.is_time(tr.type_of(x)) or (
            pa.types.is_date(tr.type_of(x)) and unit not in ("year", "quarter", "month", "week", "day")
        ):
            return x if pa.types.is_date(tr.type_of(x)) else tr.unsupported(node, f"{fname} of a time")
        out = tr.apply(lambda e: pc.floor_temporal(e, unit=unit, week_starts_monday=True), x)
        out.type = tr.type_of(x)
        return out
    if name in ("EXTRACT", "DATE_PART", "DATEPART"):
        if anonymous:
            arity(2)
            field_node, value_node = args[0], args[1]
        else:
            field_node, value_node = node.this, node.expression
        field = tr.const_string(field_node, fname, "field")
        return _extract(tr, field, tr.temporal_arg(value_node, fname), fname, node)
    if name in ("YEAR", "MONTH", "DAY", "HOUR", "MINUTE", "SECOND", "DAY_OF_WEEK", "DAYOFWEEK", "QUARTER"):
        arity(1)
        field = {"DAY_OF_WEEK": "dow", "DAYOFWEEK": "dow"}.get(name, name.lower())
        return _extract(tr, field, tr.temporal_arg(a, fname), fname, node)
    if name == "ABS":
        arity(1)
        x = tr.numeric_arg(a, fname)
        out = tr.apply(pc.abs_checked, x)
        out.type = out.type or tr.type_of(x)
        return out
    if name in ("FLOOR", "CEIL", "CEILING"):
        arity(1)
        if not anonymous and (node.args.get("decimals") or node.args.get("to")):
            tr.unsupported(node, f"{fname} with a scale")
        x = tr.numeric_arg(a, fname)
        if pa.types.is_integer(tr.type_of(x)):
            return x  # already whole
        return tr.apply(pc.floor if name == "FLOOR" else pc.ceil, x)
    if name == "ROUND":
        arity(1, 2)
        digits_node = (args[1] if len(args) > 1 else None) if anonymous else node.args.get("decimals")
        if not anonymous and node.args.get("truncate"):
            tr.unsupported(node, f"{fname} with truncate")
        x = tr.numeric_arg(a, fname)
        digits = 0
        if digits_node is not None:
            d = tr.arg(digits_node, fname, "number of digits")
            if d.lit is None or not pa.types.is_integer(d.lit.type) or not d.lit.is_valid:
                tr.unsupported(node, f"{fname} with a non-constant or non-integer number of digits")
            digits = d.lit.as_py()
        if pa.types.is_integer(tr.type_of(x)) and digits >= 0:
            return x
        out = tr.apply(lambda e: pc.round(e, ndigits=digits, round_mode="half_towards_infinity"), x)
        return out
    if name in ("COALESCE", "IFNULL", "NVL"):
        nodes = args if anonymous else [node.this, *node.expressions]
        if not nodes or any(n is None for n in nodes):
            raise typed_error(PredicateSyntaxError, f"{fname} needs arguments in {tr.text!r}", text=tr.text)
        vals = [tr.arg(n, fname) for n in nodes]
        anchor = next((v for v in vals if v.lit is None), None)
        if anchor is not None:  # constants take the type of the first column-like argument
            vals = [tr.coerce(anchor, v)[1] if v.lit is not None else v for v in vals]
        return tr.apply(pc.coalesce, *vals)
    return None
