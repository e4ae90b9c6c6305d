"""A predicate, SQL text or a pyarrow Expression, as a checked boolean
Expression over a schema: the columns it reads, its value over a batch, and
the text a transaction records for it (value expressions too, for update
and add_columns)."""

from __future__ import annotations

from typing import NoReturn, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from tessera.catalog.errors import NotAPredicateError, PredicateError, UnknownColumnError

from .sql import translate
from .values import ARROW_ERRORS, as_boolean, bound_type, typed_error

Predicate: TypeAlias = str | pc.Expression
"""What the table API accepts as a filter: SQL text or a pyarrow Expression."""


def to_value_expression(expression: Predicate, schema: pa.Schema) -> pc.Expression:
    """A SQL value expression (``"amount * 2"``, ``"'SF'"``) or pyarrow
    Expression, checked against ``schema``; used by update and add_columns."""
    if isinstance(expression, pc.Expression):
        bound_type(expression, schema)
        return expression
    if isinstance(expression, str):
        try:
            return translate(expression, schema, boolean=False)[0]
        except UnknownColumnError as exc:
            column = getattr(exc, "column", None)
            if column is None or column != expression.strip():
                raise
            # the whole value is one unknown name: almost always a string meant as a value
            raise typed_error(
                UnknownColumnError,
                f"unknown column {column!r} in the value expression {expression!r}; values are SQL "
                f"expressions, so a string value is written in quotes: \"'{expression.strip()}'\" "
                f"(columns: {', '.join(schema.names) or '(none)'})",
                column=column,
                available=list(schema.names),
            ) from None
    _not_a_predicate(expression)


def value_columns(expression: Predicate, schema: pa.Schema) -> set[str]:
    """The top-level columns a value expression reads."""
    if isinstance(expression, str):
        return translate(expression, schema, boolean=False)[1]
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
        return as_boolean(predicate, schema, f"predicate {predicate}")
    if isinstance(predicate, str):
        return translate(predicate, schema)[0]
    _not_a_predicate(predicate)


def referenced_columns(predicate: Predicate, schema: pa.Schema) -> set[str]:
    """The top-level columns ``predicate`` reads (``s.x`` reads ``s``), exactly.

    For an Expression this is found by binding it with groups of columns left
    out (pyarrow offers no public way to walk an Expression)."""
    if isinstance(predicate, str):
        return translate(predicate, schema)[1]
    expr = to_expression(predicate, schema)
    used: set[str] = set()

    def search(names: list[str]) -> None:  # bisect: does it still bind without these?
        try:
            bound_type(expr, pa.schema([f for f in schema if f.name not in names]))
        except PredicateError:
            if len(names) == 1:
                used.add(names[0])
            else:
                search(names[: len(names) // 2])
                search(names[len(names) // 2 :])

    if schema.names:
        search(list(dict.fromkeys(schema.names)))
    return used


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
    except ARROW_ERRORS as e:  # e.g. a division by zero, an overflow in some row
        raise typed_error(PredicateError, f"evaluating predicate {to_sql(predicate)!r} failed: {e}") from e
    return pc.fill_null(mask, False).combine_chunks()
