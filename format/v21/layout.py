"""Parsing and validating the 2.1/2.2 page layout messages.

Every page's ``PageLayout`` is checked before anything is decoded: an unknown
layout, an unknown compressive encoding, an unknown enum value or any
protobuf field this library does not know raises
:class:`~format.errors.UnsupportedEncodingError` naming what was found, so a
newer writer's pages never decode into silently wrong values.

One exception is deliberate: pylance 14 writes four fields on
``AllNullLayout`` that the project's ``encodings21.proto`` does not declare
yet (7 ``rep_compression``, 8 ``def_compression``: CompressiveEncoding; 9
``num_rep_values``, 10 ``num_def_values``: varint).  They are read here from
the unknown-field set (or from real fields once the proto declares them).
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import Message

from ..errors import CorruptFileError, UnsupportedEncodingError
from ..protos import encodings21_pb2 as pb

try:  # protobuf >= 4 (upb)
    from google.protobuf.unknown_fields import UnknownFieldSet as _UnknownFieldSet
except ImportError:  # pragma: no cover - older protobuf
    _UnknownFieldSet = None

# RepDefLayer values
ALL_VALID_ITEM = pb.REPDEF_ALL_VALID_ITEM
ALL_VALID_LIST = pb.REPDEF_ALL_VALID_LIST
NULLABLE_ITEM = pb.REPDEF_NULLABLE_ITEM
NULLABLE_LIST = pb.REPDEF_NULLABLE_LIST
EMPTYABLE_LIST = pb.REPDEF_EMPTYABLE_LIST
NULL_AND_EMPTY_LIST = pb.REPDEF_NULL_AND_EMPTY_LIST

LIST_LAYERS = frozenset((ALL_VALID_LIST, NULLABLE_LIST, EMPTYABLE_LIST, NULL_AND_EMPTY_LIST))
ITEM_LAYERS = frozenset((ALL_VALID_ITEM, NULLABLE_ITEM))
#: definition levels each layer kind uses
DEF_LEVELS = {
    ALL_VALID_ITEM: 0,
    ALL_VALID_LIST: 0,
    NULLABLE_ITEM: 1,
    NULLABLE_LIST: 1,
    EMPTYABLE_LIST: 1,
    NULL_AND_EMPTY_LIST: 2,
}

# AllNullLayout fields pylance 14 writes beyond the project's proto
_ALLNULL_EXTRA = {7: ("rep_compression", 2), 8: ("def_compression", 2), 9: ("num_rep_values", 0), 10: ("num_def_values", 0)}

_SCHEMES = {pb.COMPRESSION_ALGORITHM_LZ4: "lz4", pb.COMPRESSION_ALGORITHM_ZSTD: "zstd"}


def _unknown_numbers(msg: Message) -> list[tuple[int, int, object]]:
    if _UnknownFieldSet is not None:
        return [(f.field_number, f.wire_type, f.data) for f in _UnknownFieldSet(msg)]
    # fall back: unknown fields survive a round trip, so a discard shrinks the message
    clone = type(msg)()
    clone.CopyFrom(msg)
    clone.DiscardUnknownFields()
    if clone.ByteSize() != msg.ByteSize():
        return [(-1, -1, None)]
    return []


def check_known(msg: Message, where: str, allow: dict[int, tuple[str, int]] | None = None) -> None:
    """Raise UnsupportedEncodingError if ``msg`` (recursively) has a field this
    library does not know.  ``allow`` lists tolerated unknown field numbers of
    ``msg`` itself with their expected wire types."""
    name = msg.DESCRIPTOR.name
    for num, wire, _ in _unknown_numbers(msg):
        if allow and num in allow and allow[num][1] == wire:
            continue
        what = f"field number {num}" if num >= 0 else "unknown fields"
        raise UnsupportedEncodingError(
            f"{where}: {name} has {what} that this reader does not know "
            f"(written by a newer Lance?); refusing to guess its meaning"
        )
    for fd, value in msg.ListFields():
        if fd.message_type is None:
            continue
        sub = f"{where}.{fd.name}"
        if fd.is_repeated:
            for i, v in enumerate(value):
                check_known(v, f"{sub}[{i}]")
        else:
            check_known(value, sub)


def scheme_name(bc: pb.BufferCompression, where: str) -> str:
    s = _SCHEMES.get(bc.scheme)
    if s is None:
        raise UnsupportedEncodingError(f"{where}: general compression scheme {bc.scheme} is not supported")
    return s


def check_layers(layers, where: str) -> list[int]:
    out = list(layers)
    for v in out:
        if v not in DEF_LEVELS:
            raise UnsupportedEncodingError(f"{where}: unknown RepDefLayer value {v}")
    if not out:
        raise CorruptFileError(None, f"{where}: page layout has no rep/def layers")
    return out


@dataclass
class AllNullInfo:
    """AllNullLayout (2.1) / constant layout (2.2) with pylance 14's extra fields."""

    layers: list[int]
    constant_value: bytes | None
    rep_compression: pb.CompressiveEncoding | None = None
    def_compression: pb.CompressiveEncoding | None = None
    num_rep_values: int | None = None
    num_def_values: int | None = None


def _decode_varint(data) -> int:
    if isinstance(data, int):
        return data
    raise CorruptFileError(None, f"expected a varint, got {data!r}")


def parse_all_null(msg: pb.AllNullLayout, where: str) -> AllNullInfo:
    check_known(msg, where, allow=_ALLNULL_EXTRA)
    info = AllNullInfo(
        layers=check_layers(msg.layers, where),
        constant_value=bytes(msg.constant_value) if msg.HasField("constant_value") else None,
    )
    # fields declared by a newer proto, when present
    declared = msg.DESCRIPTOR.fields_by_name
    for attr in ("rep_compression", "def_compression"):
        if attr in declared and msg.HasField(attr):
            setattr(info, attr, getattr(msg, attr))
    for num, wire, data in _unknown_numbers(msg):
        name, _ = _ALLNULL_EXTRA[num]
        if wire == 2:
            enc = pb.CompressiveEncoding()
            try:
                enc.ParseFromString(bytes(data))
            except Exception as exc:  # noqa: BLE001 - protobuf raises several kinds
                raise CorruptFileError(None, f"{where}: cannot parse AllNullLayout field {num}: {exc}") from exc
            check_known(enc, f"{where}.{name}")
            setattr(info, name, enc)
        else:
            setattr(info, name, _decode_varint(data))
    for attr in ("num_rep_values", "num_def_values"):
        if attr in declared:
            v = getattr(msg, attr)
            if v:
                setattr(info, attr, v)
    return info


def parse_page_layout(layout: pb.PageLayout, where: str):
    """Validate a PageLayout; returns ``(kind, message)``."""
    kind = layout.WhichOneof("layout")
    if kind is None:
        unknown = [n for n, _, _ in _unknown_numbers(layout)]
        if unknown:
            raise UnsupportedEncodingError(
                f"{where}: page layout kind (PageLayout field {unknown[0]}) is not supported by this reader"
            )
        raise CorruptFileError(None, f"{where}: page has an empty PageLayout")
    if kind == "blob_layout":
        raise UnsupportedEncodingError(f"{where}: the blob page layout is not supported by this reader")
    msg = getattr(layout, kind)
    if kind == "all_null_layout":
        check_known_shallow(layout, where)  # the layout itself is checked by parse_all_null
        return kind, parse_all_null(msg, f"{where}.all_null_layout")
    check_known(layout, where)
    return kind, msg


def check_known_shallow(msg: Message, where: str) -> None:
    for num, _, _ in _unknown_numbers(msg):
        raise UnsupportedEncodingError(f"{where}: {msg.DESCRIPTOR.name} has unknown field number {num}")
