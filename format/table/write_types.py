"""Which data may be written into a table's columns: pylance 14's rule.

pylance compares the Lance logical type of every column of the data with the
table's and refuses any difference (``Append with different schema: `id`
should have type int64 but type was string``): no widening (int32 into int64
is refused as firmly as a string into int64), no other unit, precision,
time zone, string width or dictionary index type.  What it does not compare:

* nullability (a nullable column of the data may go into a non-nullable one,
  as long as it holds no null where a value is present: a null under a null
  struct or list is no value);
* field and schema metadata (the table keeps its own);
* the order of columns and of struct children (matched by name);
* columns and struct children the table declares nullable may be missing
  (written as nulls); a non-nullable one may not; one the table does not have
  is refused;
* a dictionary's ``ordered`` flag (Lance records none); string/binary views
  are their plain types (pylance converts them).

``docs/reference/write-types.md`` records the matrix this rule was taken
from (``scripts/write_types_matrix.py`` re-runs it against pylance).
:func:`check_write_schema` decides, before anything is written;
:func:`conform_batch` then rebuilds each batch in the table's exact types
(no value changes) and refuses nulls where the table has none.  Every write
path (append, merge_insert sources, typed update values, Spark, the
namespace, multi-table transactions) goes through these two functions.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import SchemaMismatchError, UnsupportedTypeError
from ..file.schema import logical_type_of

_VIEWS = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}

_TYPE_HINT = "no type is converted on write (pylance refuses such data too): cast the data to the table's types first"
_COLUMNS_HINT = "select the table's columns (by name; a nullable one may be left out)"


def write_type(t: pa.DataType) -> str:
    """The type pylance compares on a write: Lance's logical type of ``t``
    without a dictionary's ordered flag, views as their plain types; an
    Arrow type Lance has no logical type for stands for itself."""
    t = _VIEWS.get(t, t)
    if pa.types.is_dictionary(t) and t.ordered:
        t = pa.dictionary(t.index_type, t.value_type)
    try:
        return logical_type_of(t)
    except UnsupportedTypeError:
        return f"arrow:{t}"


def _kids(t: pa.DataType) -> list[pa.Field] | None:
    """The child fields compared one by one (None for a leaf): a struct's
    fields, a list's item (a fixed-size list's item type is in its logical type)."""
    if pa.types.is_struct(t):
        return [t.field(i) for i in range(t.num_fields)]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [t.value_field]
    return None


def _mismatches(data: list[pa.Field], table: list[pa.Field], path: str, allow_missing: bool) -> list[tuple[str, str]]:
    """(problem, hint) for each difference pylance refuses, depth first."""
    where = f"{path}." if path else ""
    inside = f" of column {path!r}" if path else ""
    problems: list[tuple[str, str]] = []
    names = [f.name for f in data]
    dup = sorted(n for n, k in Counter(names).items() if k > 1)
    if dup:
        problems.append((f"the data has several fields named {dup}{inside}", _COLUMNS_HINT))
    wanted = {f.name for f in table}
    extra = [n for n in names if n not in wanted]
    missing = [f.name for f in table if f.name not in names and not (allow_missing and f.nullable)]
    if extra or missing:
        detail = []
        if missing:
            detail.append(f"missing {[where + n for n in missing]}")
        if extra:
            detail.append(f"not in the table {[where + n for n in extra]}")
        problems.append(
            (
                f"the data's fields{inside} are not the table's: {', '.join(detail)} (the table has {sorted(wanted)})",
                _COLUMNS_HINT,
            )
        )
    given = {f.name: f for f in data}
    for tf in table:
        df = given.get(tf.name)
        if df is None:
            continue
        name = where + tf.name
        if write_type(df.type) != write_type(tf.type):
            problems.append((f"column {name!r} is {df.type} in the data, the table has {tf.type}", _TYPE_HINT))
            continue
        dk, tk = _kids(df.type), _kids(tf.type)
        if dk is not None and tk is not None:
            problems += _mismatches(dk, tk, name, allow_missing)
    return problems


def check_write_schema(data: pa.Schema, table: pa.Schema, *, allow_missing: bool = True, what: str = "") -> None:
    """Refuse data of schema ``data`` for a table of schema ``table`` unless
    pylance 14 accepts it (see the module docs).

    Args:
        data: the schema of what is being written.
        table: the table's schema.
        allow_missing: whether columns (and struct children) the table
            declares nullable may be missing (an append: yes; a
            merge_insert's source: no, Tessera needs every column).
        what: what is being written, for the message ("the merge_insert source").

    Raises:
        SchemaMismatchError: naming each column (its path when nested) and
            both types, or the missing and unknown columns.
    """
    problems = _mismatches(list(data), list(table), "", allow_missing)
    if problems:
        hints = list(dict.fromkeys(h for _, h in problems))
        raise SchemaMismatchError(
            f"cannot write {what or 'the data'} into the table: {'; '.join(p for p, _ in problems)}; {'; '.join(hints)}"
        )


def identical_types(a: pa.DataType, b: pa.DataType) -> bool:
    """``a.equals(b)`` down to the names of list items (which Arrow's type
    equality ignores and pylance compares)."""
    if not a.equals(b):
        return False
    ka, kb = _kids(a), _kids(b)
    if ka is None or kb is None:
        return True
    return all(x.name == y.name and identical_types(x.type, y.type) for x, y in zip(ka, kb))


def conform_array(arr: pa.Array, want: pa.DataType) -> pa.Array:
    """``arr`` as type ``want`` when :func:`check_write_schema` accepted its
    type for it: struct children matched by name (missing ones null), the
    table's names, nullability and ordered flags; never a value change."""
    if identical_types(arr.type, want):
        return arr
    if pa.types.is_struct(want) and pa.types.is_struct(arr.type):
        have = {arr.type.field(i).name for i in range(arr.type.num_fields)}
        fields = [want.field(i) for i in range(want.num_fields)]
        children = [
            conform_array(arr.field(f.name), f.type) if f.name in have else pa.nulls(len(arr), f.type) for f in fields
        ]
        if not children:
            return arr.cast(want)
        return pa.StructArray.from_arrays(children, fields=fields, mask=_null_mask(arr))
    if (pa.types.is_list(want) and pa.types.is_list(arr.type)) or (
        pa.types.is_large_list(want) and pa.types.is_large_list(arr.type)
    ):
        values = conform_array(arr.values, want.value_type)
        cls = pa.ListArray if pa.types.is_list(want) else pa.LargeListArray
        return cls.from_arrays(arr.offsets, values, type=want, mask=_null_mask(arr))
    if pa.types.is_fixed_size_list(want) and pa.types.is_fixed_size_list(arr.type):
        size = want.list_size
        values = conform_array(arr.values.slice(arr.offset * size, len(arr) * size), want.value_type)
        return pa.FixedSizeListArray.from_arrays(values, type=want, mask=_null_mask(arr))
    # the same layout up to names, nullability, metadata or a dictionary's ordered
    # flag, or a view into its plain type: no value changes
    return arr.cast(want)


def _null_mask(arr: pa.Array) -> pa.Array | None:
    return arr.is_null() if arr.null_count else None


def _nullable_everywhere(f: pa.Field) -> bool:
    if not f.nullable:
        return False
    kids = _kids(f.type)
    if kids is None and pa.types.is_fixed_size_list(f.type):
        kids = [f.type.value_field]
    return all(_nullable_everywhere(k) for k in kids or [])


def check_nulls(arr: pa.Array, f: pa.Field, path: str = "", present: pa.Array | None = None) -> None:
    """Refuse a null in ``arr`` (of the table's field ``f``) wherever ``f`` or
    one of its children is not nullable; a null under a null parent (not in
    ``present``, the positions whose ancestors all hold a value) is no value
    and is allowed, as pylance allows it."""
    if _nullable_everywhere(f):
        return
    name = f"{path}.{f.name}" if path else f.name
    if not f.nullable and arr.null_count:
        bad = arr.null_count if present is None else pc.sum(pc.and_(arr.is_null(), present)).as_py() or 0
        if bad:
            raise SchemaMismatchError(
                f"column {name!r} is not nullable in the table but the data has {bad} nulls there; "
                "fill them or leave the rows out"
            )
    here = arr.is_valid() if present is None else pc.and_(arr.is_valid(), present)
    t = f.type
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            check_nulls(arr.field(i), t.field(i), name, here)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        items = arr.flatten()  # the items of the lists that hold a value
        parents = pc.list_parent_indices(arr)
        check_nulls(items, t.value_field, name, pc.take(here, parents))


def conform_batch(batch: pa.RecordBatch, schema: pa.Schema, *, allow_missing: bool = True) -> pa.RecordBatch:
    """``batch`` in the table's ``schema``: checked by :func:`check_write_schema`,
    columns matched by name and in the table's order, missing nullable ones
    null, each column in the table's exact type (:func:`conform_array`), and
    no null where the table allows none (:func:`check_nulls`).

    Raises:
        SchemaMismatchError: the batch may not be written into the table.
    """
    same = batch.schema.equals(schema, check_metadata=False) and all(
        identical_types(f.type, g.type) for f, g in zip(batch.schema, schema)
    )
    if not same:
        check_write_schema(batch.schema, schema, allow_missing=allow_missing)
    names = batch.schema.names
    cols = []
    for i, f in enumerate(schema):
        if same:
            col = batch.column(i)
        elif f.name in names:
            col = conform_array(batch.column(names.index(f.name)), f.type)
        else:
            col = pa.nulls(batch.num_rows, f.type)
        check_nulls(col, f)
        cols.append(col)
    if same:
        return batch
    return pa.RecordBatch.from_arrays(cols, schema=schema)
