"""A pyarrow Expression read back as a tree (calls, field references,
literals) from its serialization, through a ctypes reader of the Arrow C
schema's metadata: pyarrow offers no public way to walk an Expression."""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

# pyarrow offers no public way to walk an Expression, but it pickles one as
# Arrow C++ serializes it: an Arrow IPC file of one row whose columns are the
# literals (and function options, as struct scalars) and whose schema metadata
# lists the tree in prefix order, keys repeating -- ``call <name>``, the
# arguments, ``options <column>``, ``end <name>``; ``field_ref <name>``;
# ``nested_field_ref <n>`` followed by n references; ``literal <column>``.
# ``Schema.metadata`` is a dict (it drops repeated keys), so the pairs are read
# in order from the schema's Arrow C export.  Anything unexpected is Unreadable.


class Unreadable(Exception):
    """The serialized Expression is not in the expected form."""


class _CSchema(ctypes.Structure):
    """``struct ArrowSchema`` of the Arrow C data interface."""

    _fields_ = [
        ("format", ctypes.c_char_p),
        ("name", ctypes.c_char_p),
        ("metadata", ctypes.c_void_p),
        ("flags", ctypes.c_int64),
        ("n_children", ctypes.c_int64),
        ("children", ctypes.c_void_p),
        ("dictionary", ctypes.c_void_p),
        ("release", ctypes.c_void_p),
        ("private_data", ctypes.c_void_p),
    ]


_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


def _metadata_pairs(schema: pa.Schema) -> list[tuple[str, str]]:
    """``schema``'s metadata as (key, value) pairs, in order, repeated keys kept."""
    capsule = schema.__arrow_c_schema__()  # released when the capsule is
    c = _CSchema.from_address(_capsule_pointer(capsule, b"arrow_schema"))
    if not c.metadata:
        return []

    def i32(at: int) -> int:
        return int.from_bytes(ctypes.string_at(c.metadata + at, 4), sys.byteorder, signed=True)

    out: list[tuple[str, str]] = []
    at = 4
    for _ in range(i32(0)):
        pair = []
        for _ in range(2):
            n = i32(at)
            if n < 0:
                raise Unreadable("negative metadata length")
            pair.append(ctypes.string_at(c.metadata + at + 4, n).decode())
            at += 4 + n
        out.append((pair[0], pair[1]))
    return out


@dataclass
class CallNode:
    name: str
    args: list
    options: pa.Scalar | None


@dataclass
class FieldRefNode:
    name: str | None  # None: a nested reference


@dataclass
class LiteralNode:
    value: pa.Scalar


def expression_tree(expr: pc.Expression) -> CallNode | FieldRefNode | LiteralNode:
    """``expr`` as a tree of :class:`CallNode`, :class:`FieldRefNode` and :class:`LiteralNode`."""
    rebuild, args = expr.__reduce__()
    if len(args) != 1 or not isinstance(args[0], pa.Buffer):
        raise Unreadable(f"pickled as {rebuild!r}")
    table = pa.ipc.open_file(args[0]).read_all()
    pairs = _metadata_pairs(table.schema)
    if table.num_rows != 1:
        raise Unreadable("not one row of literals")

    def scalar(index: str) -> pa.Scalar:
        return table.column(int(index))[0]

    def node(at: int) -> tuple[CallNode | FieldRefNode | LiteralNode, int]:
        key, value = pairs[at]
        if key == "literal":
            return LiteralNode(scalar(value)), at + 1
        if key == "field_ref":
            return FieldRefNode(value), at + 1
        if key == "nested_field_ref":
            at += 1
            for _ in range(int(value)):
                _, at = node(at)
            return FieldRefNode(None), at
        if key == "call":
            call, at = CallNode(value, [], None), at + 1
            while pairs[at][0] != "end":
                if pairs[at][0] == "options":
                    call.options = scalar(pairs[at][1])
                    at += 1
                else:
                    arg, at = node(at)
                    call.args.append(arg)
            if pairs[at][1] != value:
                raise Unreadable(f"call {value!r} ends as {pairs[at][1]!r}")
            return call, at + 1
        raise Unreadable(f"unknown key {key!r}")

    tree, end = node(0)
    if end != len(pairs):
        raise Unreadable("trailing metadata")
    return tree
