"""Arrow schema <-> Lance schema fields.

Lance flattens a schema into ``lance.file.Field`` messages in pre-order (parents
before children), with ids from 0, ``parent_id = -1`` at the top level and a
textual logical type per field.  A list has one child named ``item``; a struct's
children follow it; a fixed-size list is a single field whose element type lives
in its logical type string.  A dictionary (pandas Categorical) field is a leaf
of logical type ``dict:<value>:<index>:<ordered>`` with ``encoding DICTIONARY``
and an empty ``dictionary`` message, as pylance writes it; its pages hold the
values dictionary-encoded (:attr:`LanceField.storage_type` is the value type).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from ..errors import CorruptFileError, InvalidColumnNameError, UnsupportedTypeError
from ..protos import file_pb2

_SIMPLE_TO_LOGICAL: dict[pa.DataType, str] = {
    pa.bool_(): "bool",
    pa.int8(): "int8",
    pa.uint8(): "uint8",
    pa.int16(): "int16",
    pa.uint16(): "uint16",
    pa.int32(): "int32",
    pa.uint32(): "uint32",
    pa.int64(): "int64",
    pa.uint64(): "uint64",
    pa.float16(): "halffloat",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.string(): "string",
    pa.binary(): "binary",
    pa.large_string(): "large_string",
    pa.large_binary(): "large_binary",
    pa.date32(): "date32:day",
    pa.date64(): "date64:ms",
    pa.null(): "null",
}
_LOGICAL_TO_SIMPLE = {v: k for k, v in _SIMPLE_TO_LOGICAL.items()}
_LOGICAL_TO_SIMPLE["utf8"] = pa.string()


#: the index and value types of dictionary columns, as pylance 14 accepts them:
#: any integer index; values of the types whose logical type is one word (it
#: splits ``dict:<value>:<index>:<ordered>`` on ``:``), except the null type
_DICT_INDEX_LOGICAL: tuple[str, ...] = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
_DICT_VALUE_LOGICAL: tuple[str, ...] = ("bool",) + _DICT_INDEX_LOGICAL + ("halffloat", "float", "double")
_DICT_VALUE_LOGICAL += ("string", "binary", "large_string", "large_binary")


def dictionary_value_supported(t: pa.DataType) -> bool:
    """Whether a dictionary column may hold values of type ``t`` (pylance's set)."""
    return _SIMPLE_TO_LOGICAL.get(t) in _DICT_VALUE_LOGICAL


def _dictionary_logical_type(t: pa.DictionaryType) -> str:
    value = _SIMPLE_TO_LOGICAL.get(t.value_type)
    index = _SIMPLE_TO_LOGICAL.get(t.index_type)
    if value not in _DICT_VALUE_LOGICAL:
        raise UnsupportedTypeError(
            f"Arrow type {t}: dictionary values of type {t.value_type} are not supported "
            f"(Lance stores dictionaries of {', '.join(_DICT_VALUE_LOGICAL)})"
        )
    if index not in _DICT_INDEX_LOGICAL:  # pragma: no cover - Arrow indices are always integers
        raise UnsupportedTypeError(f"Arrow type {t}: dictionary indices of type {t.index_type} are not supported")
    # pylance writes ``false`` whatever the flag (arrow-rs has none) and ignores it on
    # reading; Tessera records the flag so an ordered dictionary reads back ordered
    return f"dict:{value}:{index}:{'true' if t.ordered else 'false'}"


def _dictionary_arrow_type(logical: str) -> pa.DataType:
    parts = logical.split(":")
    if len(parts) != 4:
        raise UnsupportedTypeError(
            f"malformed Lance logical type {logical!r}: a dictionary type is 'dict:<value>:<index>:<ordered>'"
        )
    _, value, index, ordered = parts
    if value not in _DICT_VALUE_LOGICAL:
        raise UnsupportedTypeError(
            f"Lance logical type {logical!r}: dictionary values of type {value!r} are not supported"
        )
    if index not in _DICT_INDEX_LOGICAL:
        raise UnsupportedTypeError(
            f"Lance logical type {logical!r}: dictionary indices of type {index!r} are not supported"
        )
    if ordered not in ("true", "false"):
        raise UnsupportedTypeError(f"malformed Lance logical type {logical!r}: ordered must be 'true' or 'false'")
    return pa.dictionary(_LOGICAL_TO_SIMPLE[index], _LOGICAL_TO_SIMPLE[value], ordered == "true")


def logical_type_of(t: pa.DataType) -> str:
    """Lance's logical type string for an Arrow type."""
    if t in _SIMPLE_TO_LOGICAL:
        return _SIMPLE_TO_LOGICAL[t]
    if pa.types.is_dictionary(t):
        return _dictionary_logical_type(t)
    if pa.types.is_timestamp(t):
        return f"timestamp:{t.unit}:{t.tz if t.tz else '-'}"
    if pa.types.is_time32(t) or pa.types.is_time64(t):
        return f"time{t.bit_width}:{t.unit}"
    if pa.types.is_duration(t):
        return f"duration:{t.unit}"
    if pa.types.is_decimal128(t):
        return f"decimal:128:{t.precision}:{t.scale}"
    if pa.types.is_decimal256(t):
        return f"decimal:256:{t.precision}:{t.scale}"
    if pa.types.is_fixed_size_binary(t):
        return f"fixed_size_binary:{t.byte_width}"
    if pa.types.is_struct(t):
        return "struct"
    if pa.types.is_list(t):
        return "list.struct" if pa.types.is_struct(t.value_type) else "list"
    if pa.types.is_large_list(t):
        return "large_list.struct" if pa.types.is_struct(t.value_type) else "large_list"
    if pa.types.is_fixed_size_list(t):
        inner = t.value_type
        if pa.types.is_nested(inner) or pa.types.is_dictionary(inner):
            raise UnsupportedTypeError(f"fixed_size_list of {inner} is not supported")
        return f"fixed_size_list:{logical_type_of(inner)}:{t.list_size}"
    raise UnsupportedTypeError(f"Arrow type {t} has no Lance logical type in Tessera")


_UNITS = {"s", "ms", "us", "ns"}


def arrow_type_of(logical: str, children: list[LanceField] | None = None) -> pa.DataType:
    """Arrow type for a Lance logical type string (``children`` for nested types)."""
    children = children or []
    if logical in _LOGICAL_TO_SIMPLE:
        return _LOGICAL_TO_SIMPLE[logical]
    parts = logical.split(":")
    head = parts[0]
    if head == "dict":
        return _dictionary_arrow_type(logical)
    try:
        if head == "timestamp" and len(parts) >= 3 and parts[1] in _UNITS:
            tz = ":".join(parts[2:])
            return pa.timestamp(parts[1], None if tz in ("-", "") else tz)
        if head == "time32" and parts[1] in ("s", "ms"):
            return pa.time32(parts[1])
        if head == "time64" and parts[1] in ("us", "ns"):
            return pa.time64(parts[1])
        if head == "duration" and parts[1] in _UNITS:
            return pa.duration(parts[1])
        if head == "decimal" and len(parts) == 4:
            bits, precision, scale = int(parts[1]), int(parts[2]), int(parts[3])
            if bits == 128:
                return pa.decimal128(precision, scale)
            if bits == 256:
                return pa.decimal256(precision, scale)
        if head == "fixed_size_binary" and len(parts) == 2:
            width = int(parts[1])
            if width <= 0:  # pa.binary(-1) would be the variable-width binary type
                raise ValueError(f"byte width {width} is not positive")
            return pa.binary(width)
        if head == "fixed_size_list" and len(parts) >= 3:
            inner = arrow_type_of(":".join(parts[1:-1]))
            size = int(parts[-1])
            if size < 0:  # pa.list_(t, -1) would be a variable-size list
                raise ValueError(f"list size {size} is negative")
            return pa.list_(pa.field("item", inner, True), size)
    except (ValueError, IndexError, TypeError) as exc:
        raise UnsupportedTypeError(f"malformed Lance logical type {logical!r}: {exc}") from exc
    if logical == "struct":
        return pa.struct([c.to_arrow() for c in children])
    if logical in ("list", "list.struct", "large_list", "large_list.struct"):
        if len(children) != 1:
            raise CorruptFileError(None, f"list field has {len(children)} children, expected 1")
        item = children[0].to_arrow()
        return pa.large_list(item) if logical.startswith("large_list") else pa.list_(item)
    raise UnsupportedTypeError(f"Lance logical type {logical!r} is not supported by Tessera")


def _encoding_hint(t: pa.DataType) -> file_pb2.Encoding:
    if pa.types.is_dictionary(t):
        return file_pb2.DICTIONARY
    if pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
        return file_pb2.NONE
    if pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t) or pa.types.is_large_string(t):
        return file_pb2.VAR_BINARY
    return file_pb2.PLAIN


#: field metadata keys that ask for a packed struct (value ``true``)
PACKED_STRUCT_KEYS = ("lance-encoding:packed", "packed")
#: field metadata key (value ``true``) of a blob column: values stored out of line
BLOB_KEY = "lance-encoding:blob"
#: extension name of a blob v2 column in a table's schema (pylance 14, file format 2.2)
BLOB_V2_EXTENSION = "lance.blob.v2"
_EXTENSION_KEYS = ("ARROW:extension:name", "ARROW:extension:metadata")


def _meta_value(metadata: dict, key: str) -> str | None:
    if not metadata:
        return None
    v = metadata.get(key)
    if v is None:
        v = metadata.get(key.encode())
    if v is None:  # keys are str (read from a file) or bytes (from Arrow): both asked
        return None
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


@dataclass
class LanceField:
    """One field of a Lance schema, with its children (a tree)."""

    id: int
    name: str
    logical_type: str
    nullable: bool = True
    parent_id: int = -1
    #: keys are bytes when the field comes from Arrow, str when read from a file
    metadata: dict[bytes | str, bytes] = field(default_factory=dict)
    children: list[LanceField] = field(default_factory=list)
    encoding: file_pb2.Encoding = file_pb2.NONE
    extension_name: str = ""
    unenforced_primary_key: bool = False

    @property
    def arrow_type(self) -> pa.DataType:
        if self.blob == "v2":
            return pa.large_binary()  # the values; the stored descriptions are :attr:`blob_description_type`
        return arrow_type_of(self.logical_type, self.children)

    @property
    def blob(self) -> str | None:
        """``"v1"`` for a blob column (binary values with metadata
        ``lance-encoding:blob`` = ``true``, stored out of line in the data
        file), ``"v2"`` for a blob v2 column (file format 2.2: extension
        ``lance.blob.v2`` in a table's schema, a packed descriptor struct with
        the blob metadata in a data file's), None for any other field."""
        if self.extension_name == BLOB_V2_EXTENSION or _meta_value(self.metadata, _EXTENSION_KEYS[0]) == (
            BLOB_V2_EXTENSION
        ):
            return "v2"
        if (_meta_value(self.metadata, BLOB_KEY) or "").lower() != "true":
            return None
        if self.is_struct:
            return "v2"
        if self.logical_type in ("large_binary", "binary"):
            return "v1"
        return None

    @property
    def is_blob_descriptor(self) -> bool:
        """A blob v2 field as a data file stores it: a packed struct of
        descriptors (kind, position, size, blob_id, blob_uri)."""
        return (
            self.blob == "v2"
            and self.is_struct
            and self.extension_name != BLOB_V2_EXTENSION
            and any(c.name == "kind" for c in self.children)
        )

    @property
    def is_dictionary(self) -> bool:
        """A dictionary (categorical) leaf: ``dict:<value>:<index>:<ordered>``."""
        return self.logical_type.startswith("dict:")

    @property
    def storage_type(self) -> pa.DataType:
        """The type of the values a leaf's pages hold: the value type of a
        dictionary field (its pages hold dictionary-encoded values of that
        type), the field's own type otherwise."""
        t = self.arrow_type
        return t.value_type if pa.types.is_dictionary(t) else t

    def to_arrow(self) -> pa.Field:
        if self.blob == "v2":
            # read as bytes, like a blob column of the older layout (pylance's "all_binary")
            meta: dict = {
                k: v
                for k, v in self.metadata.items()
                if (k.decode() if isinstance(k, bytes) else k) not in (*_EXTENSION_KEYS, *PACKED_STRUCT_KEYS, BLOB_KEY)
            }
            meta[BLOB_KEY] = b"true"
            return pa.field(self.name, pa.large_binary(), self.nullable, meta)
        return pa.field(self.name, self.arrow_type, self.nullable, self.metadata or None)

    @property
    def is_struct(self) -> bool:
        return self.logical_type == "struct"

    @property
    def is_list(self) -> bool:
        return self.logical_type in ("list", "list.struct", "large_list", "large_list.struct")

    @property
    def is_packed_struct(self) -> bool:
        """A struct stored as one column of packed rows: field metadata
        ``lance-encoding:packed`` (or the legacy ``packed``) set to ``true``,
        as Lance decides it (case-insensitive, nothing else counts)."""
        if not self.is_struct:
            return False
        for k, v in (self.metadata or {}).items():
            key = k.decode() if isinstance(k, bytes) else k
            value = v.decode(errors="replace") if isinstance(v, bytes) else str(v)
            if key in PACKED_STRUCT_KEYS and value.lower() == "true":
                return True
        return False

    def walk(self) -> Iterator[LanceField]:
        """This field and its descendants in pre-order."""
        yield self
        for c in self.children:
            yield from c.walk()

    def column_nodes(self) -> Iterator[LanceField]:
        """Fields that own a column in file format 2.0, in column order: every
        node in pre-order, except the children of a packed struct (the struct's
        one column holds them)."""
        yield self
        if not self.is_packed_struct and self.blob != "v2":
            for c in self.children:
                yield from c.column_nodes()

    def leaves(self) -> Iterator[LanceField]:
        """Fields that own a column in file formats 2.1+, in column order: the
        leaves, with a packed struct as one (not struct or list parents)."""
        if (self.is_struct and not self.is_packed_struct and self.blob != "v2") or self.is_list:
            for c in self.children:
                yield from c.leaves()
        else:
            yield self

    def to_proto(self) -> file_pb2.Field:
        p = file_pb2.Field(
            name=self.name,
            id=self.id,
            parent_id=self.parent_id,
            logical_type=self.logical_type,
            nullable=self.nullable,
            encoding=self.encoding,
            extension_name=self.extension_name,
            unenforced_primary_key=self.unenforced_primary_key,
        )
        for k, v in self.metadata.items():
            p.metadata[k.decode() if isinstance(k, bytes) else k] = v
        if self.is_dictionary:
            # pylance writes an empty ``dictionary {}`` (the v1 location of the
            # values, unused since file format 2.0) for every dictionary field
            p.dictionary.SetInParent()
        return p


def _from_arrow_field(f: pa.Field, next_id: list[int], parent_id: int) -> LanceField:
    t = f.type
    if pa.types.is_map(t) or pa.types.is_union(t):
        raise UnsupportedTypeError(f"field {f.name!r}: Arrow type {t} is not supported by Tessera")
    node = LanceField(
        id=next_id[0],
        name=f.name,
        logical_type=logical_type_of(t),
        nullable=f.nullable,
        parent_id=parent_id,
        metadata=dict(f.metadata or {}),
        encoding=_encoding_hint(t),
    )
    next_id[0] += 1
    if pa.types.is_struct(t):
        node.children = [_from_arrow_field(t.field(i), next_id, node.id) for i in range(t.num_fields)]
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        item = t.value_field
        node.children = [_from_arrow_field(item, next_id, node.id)]
    return node


def check_column_name(name: object) -> str:
    """``name`` if Lance can write and read it as a top-level column name.

    pylance 14 refuses a top-level name with a ``.`` (it would be a path into
    a struct), and writes but then cannot scan a table with a top-level name
    that is empty or holds a backtick (``No field named ...``).  Names of
    nested fields (struct children, list items) may hold all three: pylance
    reads them.

    Raises:
        InvalidColumnNameError: any such name (or one that is not a string).
    """
    if not isinstance(name, str):
        raise InvalidColumnNameError(f"a column name must be a string, got {type(name).__name__}")
    if not name:
        raise InvalidColumnNameError(
            "a column name must not be empty: pylance and LanceDB cannot read a table with an unnamed column"
        )
    for ch, why in ((".", "refuse to write it (a dot names a field inside a struct)"), ("`", "cannot read it")):
        if ch in name:
            raise InvalidColumnNameError(
                f"column name {name!r} contains {ch!r}: pylance and LanceDB {why}; choose a name without "
                f"{ch!r} (only nested fields of a struct may hold one)"
            )
    return name


def fields_from_arrow(schema: pa.Schema, start_id: int = 0) -> list[LanceField]:
    """Top-level Lance fields for an Arrow schema, ids in pre-order from ``start_id``.

    Raises:
        InvalidColumnNameError: a top-level name Lance cannot hold (:func:`check_column_name`).
    """
    for f in schema:
        check_column_name(f.name)
    counter = [start_id]
    return [_from_arrow_field(f, counter, -1) for f in schema]


def flatten(fields: Iterable[LanceField]) -> list[LanceField]:
    return [n for f in fields for n in f.walk()]


def fields_to_protos(fields: Iterable[LanceField]) -> list[file_pb2.Field]:
    return [n.to_proto() for n in flatten(fields)]


def fields_from_protos(protos: Iterable[file_pb2.Field]) -> list[LanceField]:
    """Rebuild the field tree from flattened messages (parents before children)."""
    by_id: dict[int, LanceField] = {}
    roots: list[LanceField] = []
    names: set[tuple[int, str]] = set()  # (parent id, name): siblings are told apart by name
    for p in protos:
        node = LanceField(
            id=p.id,
            name=p.name,
            logical_type=p.logical_type,
            nullable=p.nullable,
            parent_id=p.parent_id,
            metadata=dict(p.metadata),
            encoding=p.encoding,
            extension_name=p.extension_name,
            unenforced_primary_key=p.unenforced_primary_key,
        )
        if node.id == -1 and p.parent_id == -1 and roots and roots[-1].is_struct and roots[-1].blob == "v2":
            # pylance 14 writes the descriptor fields of a blob v2 column into a
            # data file's schema without ids, after their struct
            node.parent_id = roots[-1].id
            roots[-1].children.append(node)
            continue
        if node.id in by_id:
            raise CorruptFileError(None, f"schema has two fields with id {node.id}")
        key = (p.parent_id if p.parent_id >= 0 else -1, p.name)
        if key in names:
            where = "at the top level" if key[0] < 0 else f"under field {key[0]}"
            raise CorruptFileError(None, f"schema has two fields named {p.name!r} {where}")
        names.add(key)
        by_id[node.id] = node
        if p.parent_id < 0:
            roots.append(node)
        else:
            parent = by_id.get(p.parent_id)
            if parent is None:
                raise CorruptFileError(
                    None, f"field {p.name!r} (id {p.id}) names parent {p.parent_id}, which comes later or is missing"
                )
            parent.children.append(node)
    return roots


def to_arrow_schema(fields: Iterable[LanceField], metadata: dict | None = None) -> pa.Schema:
    return pa.schema([f.to_arrow() for f in fields], metadata=metadata or None)
