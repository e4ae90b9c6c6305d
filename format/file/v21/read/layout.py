"""Parsing and validating the 2.1/2.2 page layout messages.

Every page's ``PageLayout`` is checked before anything is decoded: an unknown
layout, an unknown compressive encoding, an unknown enum value or any
protobuf field this library does not know raises
:class:`~format.errors.UnsupportedEncodingError` naming what was found, so a
newer writer's pages never decode into silently wrong values.

``AllNullLayout`` fields 7-10 (compressed rep/def level buffers and their
level counts, written by pylance 14 on 2.2 pages) are declared in
``encodings21.proto``; like every declared field they are read as such.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import Message

from ....errors import CorruptFileError, UnsupportedEncodingError
from ....protos import encodings21_pb2 as pb

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
#: definition levels each layer kind uses (keyed by int: validated layers are plain ints)
DEF_LEVELS: dict[int, int] = {
    ALL_VALID_ITEM: 0,
    ALL_VALID_LIST: 0,
    NULLABLE_ITEM: 1,
    NULLABLE_LIST: 1,
    EMPTYABLE_LIST: 1,
    NULL_AND_EMPTY_LIST: 2,
}

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


def check_known(msg: Message, where: str) -> None:
    """Raise UnsupportedEncodingError if ``msg`` (recursively) has a field this
    library does not know."""
    name = msg.DESCRIPTOR.name
    for num, _, _ in _unknown_numbers(msg):
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
    """AllNullLayout (2.1) / constant layout (2.2), validated."""

    layers: list[int]
    constant_value: bytes | None
    #: compression of the rep / def level buffers (None: raw u16 levels)
    rep_compression: pb.CompressiveEncoding | None = None
    def_compression: pb.CompressiveEncoding | None = None
    #: level counts of the compressed buffers (None when not written)
    num_rep_values: int | None = None
    num_def_values: int | None = None


def parse_all_null(msg: pb.AllNullLayout, where: str) -> AllNullInfo:
    check_known(msg, where)  # recursive: covers the level encodings too
    return AllNullInfo(
        layers=check_layers(msg.layers, where),
        constant_value=bytes(msg.constant_value) if msg.HasField("constant_value") else None,
        rep_compression=msg.rep_compression if msg.HasField("rep_compression") else None,
        def_compression=msg.def_compression if msg.HasField("def_compression") else None,
        num_rep_values=int(msg.num_rep_values) or None,
        num_def_values=int(msg.num_def_values) or None,
    )


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
    msg = getattr(layout, kind)
    check_known(layout, where)
    if kind == "all_null_layout":
        return kind, parse_all_null(msg, f"{where}.all_null_layout")
    if kind == "blob_layout":
        # a blob column's descriptions, in an inner layout of their own, and the
        # column's own rep/def layers (folded into the descriptions of nulls)
        if not msg.HasField("inner_layout"):
            raise CorruptFileError(None, f"{where}: blob layout without an inner layout")
        inner_kind, inner = parse_page_layout(msg.inner_layout, f"{where}.blob_layout.inner_layout")
        if inner_kind == "blob_layout":
            raise CorruptFileError(None, f"{where}: a blob layout inside a blob layout")
        return kind, BlobInfo(inner_kind, inner, check_layers(msg.layers, where))
    return kind, msg


@dataclass
class BlobInfo:
    """BlobLayout, validated: the descriptions' page layout and the blob
    column's own rep/def layers."""

    inner_kind: str
    inner: object
    layers: list[int]
