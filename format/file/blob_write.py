"""Writing blob columns (see :mod:`.blob` for the layouts).

A new blob column is written in the v1 layout, in every file version: the
values go into the data file (:meth:`ContainerWriter.write_raw`) and the
column's pages hold their ``(position, size)`` descriptions, a packed struct
of two u64 (2.0: that page; 2.1+: wrapped in a ``BlobLayout``).  An existing
blob v2 column (a 2.2 table made by pylance 14 or LanceDB 0.40) is written in
the v2 layout, every value inline (:class:`V2Encoder`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from ..errors import UnsupportedEncodingError
from .blob import V1_DESCRIPTION, V20_NULL_POSITION


def writer_kind(field, version: str) -> str | None:
    """``"v1"`` / ``"v2"`` when top-level field ``field`` is a blob column a
    writer of file format ``version`` writes (a ``large_binary`` with the
    blob metadata: the v1 layout, every version; an existing blob v2 column
    of a 2.2 table: the v2 layout, values inline); None for other fields.

    Raises:
        UnsupportedEncodingError: a blob column inside a struct or list, or a
            v2 column in a file format before 2.2.
        UnsupportedTypeError: a blob column that is not large_binary (pylance
            refuses those too).
    """
    from ..errors import UnsupportedTypeError

    for node in field.walk():
        if node is not field and node.blob is not None:
            raise UnsupportedEncodingError(
                f"column {field.name!r}: a blob column inside a struct or list ({node.name!r}) cannot be written; "
                "blob columns must be top-level columns"
            )
    if field.blob == "v2" and version != "2.2":
        raise UnsupportedEncodingError(
            f"column {field.name!r} is a blob v2 column (pylance's lance.blob.v2), which file format {version} "
            "cannot hold; write it in format 2.2"
        )
    if field.blob == "v1" and field.logical_type != "large_binary":
        raise UnsupportedTypeError(
            f"column {field.name!r}: a blob column (lance-encoding:blob) must be large_binary, not "
            f"{field.logical_type} (pylance refuses other types too); cast it to pa.large_binary()"
        )
    return field.blob


#: the 2.1+ null description: size 0, the definition level of a null top-level
#: item (1) in bits 16..31 of ``position``, repetition level 0 in bits 0..15
V21_NULL_POSITION = 1 << 16


def description_field(field):
    """The field a blob column's descriptions are encoded as: a packed
    struct of two non-null u64 (``position``, ``size``), pylance's layout."""
    from .schema import PACKED_STRUCT_KEYS, LanceField

    kids = [
        LanceField(id=-1, name=n, logical_type="uint64", nullable=False, parent_id=field.id)
        for n in ("position", "size")
    ]
    return LanceField(
        id=field.id,
        name=field.name,
        logical_type="struct",
        nullable=False,
        metadata={PACKED_STRUCT_KEYS[0].encode(): b"true"},
        children=kids,
    )


def write_descriptions(arr: pa.Array, version: str, write_raw: Callable[[object], int]) -> pa.StructArray:
    """Write the bytes of blob values ``arr`` (large_binary) with
    ``write_raw`` (which returns the file position they were written at) and
    return their v1 descriptions: ``(position, size)``, ``(0, 0)`` for an
    empty value, and for a null ``(1, 0)`` in 2.0, ``(1 << 16, 0)`` in 2.1+."""
    if not pa.types.is_large_binary(arr.type):
        raise TypeError(f"blob values must be large_binary, got {arr.type}")
    n = len(arr)
    bufs = arr.buffers()
    offsets = (
        np.frombuffer(bufs[1], dtype=np.int64, count=arr.offset + n + 1)[arr.offset :]
        if n
        else np.zeros(1, dtype=np.int64)
    )
    sizes = np.diff(offsets).astype(np.uint64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    positions = np.zeros(n, dtype=np.uint64)
    if hi > lo:
        base = write_raw(bufs[2].slice(lo, hi - lo))  # the values back to back (bytes under nulls too)
        positions = (offsets[:-1] - lo + base).astype(np.uint64)
    valid = np.ones(n, dtype=bool) if not arr.null_count else np.asarray(arr.is_valid().to_numpy(zero_copy_only=False))
    sizes[~valid] = 0
    positions[sizes == 0] = 0
    positions[~valid] = V20_NULL_POSITION if version == "2.0" else V21_NULL_POSITION
    return pa.StructArray.from_arrays(
        [pa.array(positions, pa.uint64()), pa.array(sizes, pa.uint64())], fields=list(V1_DESCRIPTION)
    )


# ------------------------------------------------------------------ writing (v2, file format 2.2)

#: a v2 descriptor row: kind, position, size, blob_id, then blob_uri's u32 length (an empty uri)
_V2_ROW = np.dtype([("kind", "u1"), ("position", "<u8"), ("size", "<u8"), ("blob_id", "<u4"), ("uri_len", "<u4")])
_V2_FIELDS = (("kind", "uint8"), ("position", "uint64"), ("size", "uint64"), ("blob_id", "uint32"))


def v2_file_field(field):
    """How a data file's schema holds blob v2 column ``field`` (pylance 14):
    a packed struct with the blob metadata, whose five descriptor fields
    have no ids (-1) and no parent id (-1)."""
    from .schema import BLOB_KEY, PACKED_STRUCT_KEYS, LanceField

    kids = [LanceField(id=-1, name=n, logical_type=t, nullable=False, parent_id=-1) for n, t in _V2_FIELDS]
    kids.append(LanceField(id=-1, name="blob_uri", logical_type="string", nullable=False, parent_id=-1))
    return LanceField(
        id=field.id,
        name=field.name,
        logical_type="struct",
        nullable=field.nullable,
        parent_id=field.parent_id,
        metadata={PACKED_STRUCT_KEYS[0]: b"true", BLOB_KEY: b"true"},
        children=kids,
    )


class V2Encoder:
    """Pages of a blob v2 column (file format 2.2), as pylance 14 lays them
    out: every value inline in the data file (kind 0, which pylance reads at
    any size), one full-zip page of ``variable_packed_struct`` descriptors per
    array appended."""

    def __init__(self, field, write_raw: Callable[[object], int]) -> None:
        self.nullable = bool(field.nullable)
        self._write_raw = write_raw

    def append(self, arr: pa.Array) -> list:
        from ..protos import encodings21_pb2 as pb21
        from .container import PAGE_LAYOUT_URL, EncodedPage, pack_any

        if not pa.types.is_large_binary(arr.type):
            raise TypeError(f"blob values must be large_binary, got {arr.type}")
        n = len(arr)
        if n == 0:
            return []
        desc = write_descriptions(arr, "2.1", self._write_raw)
        valid = np.ones(n, dtype=bool) if not arr.null_count else np.asarray(arr.is_valid().to_numpy(False))
        if not self.nullable and not valid.all():
            raise ValueError("a non-nullable blob column holds nulls")
        rows = np.zeros(n, dtype=_V2_ROW)
        rows["position"] = desc.field("position").to_numpy()
        rows["size"] = desc.field("size").to_numpy()
        rows["position"][~valid] = 0
        cw = 1 if self.nullable else 0
        # a row: [control word: def level][u32 length of the value][the value]; a null: its control word
        entry = np.zeros(n, dtype=np.dtype([("def", "u1"), ("len", "<u4"), ("row", _V2_ROW)]))
        entry["len"] = _V2_ROW.itemsize
        entry["row"] = rows
        raw = entry.view(np.uint8).reshape(n, -1)[:, 1 - cw :]
        if valid.all():
            data = raw.reshape(-1)
            sizes = np.full(n, raw.shape[1], dtype=np.int64)
        else:
            sizes = np.where(valid, raw.shape[1], 1)
            keep = np.ones(raw.shape, dtype=bool)
            keep[~valid, 1:] = False
            raw = raw.copy()
            raw[~valid, 0] = 1  # definition level 1: null
            data = raw[keep]
        ends = np.concatenate(([0], np.cumsum(sizes)))
        width = next(w for w in (1, 2, 4, 8) if int(ends[-1]) < 1 << (8 * w))
        offsets = ends.astype(f"<u{width}")
        pl = pb21.PageLayout()
        fz = pl.full_zip_layout
        fz.bits_def = cw
        fz.bits_per_offset = 32
        fz.num_items = n
        fz.num_visible_items = n
        vps = fz.value_compression.variable_packed_struct
        for bits in (8, 64, 64, 32):
            f = vps.fields.add()
            f.value.flat.bits_per_value = bits
            f.bits_per_value = bits
        f = vps.fields.add()
        f.value.variable.offsets.flat.bits_per_value = 32
        f.bits_per_length = 32
        fz.layers.append(pb21.REPDEF_NULLABLE_ITEM if self.nullable else pb21.REPDEF_ALL_VALID_ITEM)
        return [EncodedPage(0, [np.ascontiguousarray(data), offsets], n, pack_any(PAGE_LAYOUT_URL, pl), (1,))]

    def finish(self) -> list:
        return []


def wrap_blob_layout(encoding: bytes, nullable: bool) -> bytes:
    """A 2.1+ page encoding of descriptions (a serialised ``PageLayout`` in an
    Any) as the blob column's page: ``blob_layout { inner_layout, layers }``."""
    from ..protos import encodings21_pb2 as pb21
    from .container import PAGE_LAYOUT_URL, pack_any, unpack_any

    inner = unpack_any(encoding, PAGE_LAYOUT_URL, pb21.PageLayout)
    outer = pb21.PageLayout()
    outer.blob_layout.inner_layout.CopyFrom(inner)
    outer.blob_layout.layers.append(pb21.REPDEF_NULLABLE_ITEM if nullable else pb21.REPDEF_ALL_VALID_ITEM)
    return pack_any(PAGE_LAYOUT_URL, outer)
