"""Filter predicates: SQL text or pyarrow Expressions -> validated pyarrow Expressions.

Scans, ``delete(predicate)``, ``update(where=...)`` and ``count_rows(filter=...)``
take a predicate either as a ``pyarrow.compute.Expression`` or as a SQL boolean
expression like those pylance/DataFusion users write, e.g.
``"amount > 10 AND city = 'SF'"``. SQL is parsed with sqlglot and translated
node by node; anything outside the supported set raises a typed
:class:`~tessera.catalog.errors.PredicateError` rather than being guessed at.

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
Any other function is an :class:`~tessera.catalog.errors.UnsupportedPredicateError` naming it.
Unquoted names match exactly, else case-insensitively when that is unambiguous.

A constant compared with a column (or any typed expression) is cast to that
type: ``float32_col = 0.1`` compares float32s, ``date_col > '2024-01-01'`` and
``ts_col < '2024-01-01 10:00:00'`` read the string as a date/timestamp (a
string without a UTC offset, compared with a zoned timestamp column, is read as
wall-clock time in the column's zone). Numbers are never turned into strings:
``string_col = 1`` is a :class:`~tessera.catalog.errors.PredicateTypeError`.

The parts: :mod:`.sql` (the sqlglot translator) with :mod:`.functions` (its
scalar functions) and :mod:`.values` (typing constants, binding to a schema);
:mod:`.expressions` (the checked Expression, its columns, its evaluation);
:mod:`.terms` (range terms for statistics) with :mod:`.expression_tree` (a
pyarrow Expression read back as a tree).
"""

from __future__ import annotations

from .expressions import (
    Predicate,
    filter_mask,
    referenced_columns,
    to_expression,
    to_sql,
    to_value_expression,
    value_columns,
)
from .terms import RangeTerm, range_terms

__all__ = [
    "Predicate",
    "RangeTerm",
    "filter_mask",
    "range_terms",
    "referenced_columns",
    "to_expression",
    "to_sql",
    "to_value_expression",
    "value_columns",
]
