"""Reading a nested column whose schema evolved: struct children matched by field id.

A struct's children are told apart by field id, never by name or position.
After schema evolution a data file may hold a struct under an older shape:

* a child renamed since (same id, another name in the file's schema);
* a child dropped since (an id the table no longer has: not read);
* a child added since (no data file of the fragment holds its id: nulls);
* a child whose type was changed (pylance's ``alter_columns`` writes the new
  child, under a new id, into a new data file of the fragment holding only
  that child; the struct's other children stay in the older file).

:func:`assemble` builds the table's array of one top-level field from every
data file of a fragment that holds part of it.  A struct takes its validity
from the latest of those files (each file written by pylance or Tessera holds
the struct's validity with its children); a struct none of whose children any
file holds reads as null, as pylance reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa

from ..file import schema as lschema

Part = tuple[pa.Array, lschema.LanceField, str]
"""An array read from one data file, that file's own field (its ids) and the file's path."""

AsType = Callable[[pa.Array, lschema.LanceField, str], pa.Array]


def same_tree(a: lschema.LanceField, b: lschema.LanceField) -> bool:
    """Whether ``a`` (a data file's field) and ``b`` (the table's) have the
    same ids and names at every depth: then the stored array is the table's
    (up to the types :func:`.fragments.as_field_type` checks)."""
    if a.id != b.id or a.name != b.name or len(a.children) != len(b.children):
        return False
    return all(same_tree(x, y) for x, y in zip(a.children, b.children))


def _splittable(f: lschema.LanceField) -> bool:
    return f.is_struct and not f.is_packed_struct and f.blob is None


def assemble(f: lschema.LanceField, parts: Sequence[Part], as_type: AsType) -> pa.Array:
    """The table's array of field ``f`` from ``parts`` (latest data file
    first, at least one); ``as_type(array, field, path)`` checks a stored
    type against the table's (and raises CorruptFileError)."""
    arr, ff, path = parts[0]
    if len(parts) == 1 and same_tree(ff, f):
        return as_type(arr, f, path)
    if _splittable(f) and all(p.is_struct for _, p, _ in parts):
        children = []
        for c in f.children:
            sub = [
                (a.field(j), p.children[j], where)
                for a, p, where in parts
                for j in range(len(p.children))
                if p.children[j].id == c.id
            ]
            children.append(assemble(c, sub, as_type) if sub else pa.nulls(len(arr), c.arrow_type))
        mask = arr.is_null() if arr.null_count else None
        if not children:
            return pa.nulls(len(arr), f.arrow_type)
        return pa.StructArray.from_arrays(children, fields=[c.to_arrow() for c in f.children], mask=mask)
    if f.is_list and ff.is_list and f.logical_type.split(".")[0] == ff.logical_type.split(".")[0]:
        values = assemble(f.children[0], [(arr.values, ff.children[0], path)], as_type)
        cls = pa.LargeListArray if f.logical_type.startswith("large_list") else pa.ListArray
        mask = arr.is_null() if arr.null_count else None
        return cls.from_arrays(arr.offsets, values, type=f.arrow_type, mask=mask)
    return as_type(arr, f, path)
