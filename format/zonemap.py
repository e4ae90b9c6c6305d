"""ZONEMAP scalar index (pylance 14 layout): per-zone min/max/null/NaN counts.

One file ``_indices/<uuid>/zonemap.lance`` (Lance file 2.2) with one row per zone:
``min``/``max`` (typed as the column), ``null_count``/``nan_count`` (uint32),
``fragment_id``/``zone_start``/``zone_length`` (uint64); schema metadata
``rows_per_zone`` and ``null_bitmap``.  The manifest entry's ``index_details``
is an Any with type URL ``/lance.table.ZoneMapIndexDetails`` (encoded by hand
here: field 1 rows_per_zone, 2 = 1 for string/binary columns, 3 = 1; meaning of 2 and 3 unknown).
"""

from __future__ import annotations

import io
import math
import struct
import time
import uuid as uuidlib
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
from pyroaring import BitMap

from .container import ALIGNMENT, FOOTER, FOOTER_SIZE
from .file import FileReader, FileWriter
from .protos import table_pb2

TYPE_URL = "/lance.table.ZoneMapIndexDetails"
FILE_NAME = "zonemap.lance"
DEFAULT_ROWS_PER_ZONE = 8192


class _Store(Protocol):
    def read(self, path: str) -> bytes: ...

    def put(self, path: str, data: bytes) -> None: ...


@dataclass
class Zone:
    fragment_id: int
    start: int  # row offset inside the fragment
    length: int
    min: Any
    max: Any
    null_count: int
    nan_count: int


@dataclass
class ZoneMap:
    rows_per_zone: int
    value_type: pa.DataType
    zones: dict[int, list[Zone]] = field(default_factory=dict)  # by fragment id

    def all_zones(self) -> list[Zone]:
        return [z for fid in sorted(self.zones) for z in self.zones[fid]]


def _uuid_str(meta: table_pb2.IndexMetadata) -> str:
    return str(uuidlib.UUID(bytes=bytes(meta.uuid.uuid)))


def read_zonemap(store: _Store, index_metadata: table_pb2.IndexMetadata) -> ZoneMap:
    """Read pylance's zonemap file for ``index_metadata``; ``store`` paths are relative to the dataset root."""
    data = store.read(f"_indices/{_uuid_str(index_metadata)}/{FILE_NAME}")
    table = FileReader(data).read()
    rows_per_zone = DEFAULT_ROWS_PER_ZONE
    md = table.schema.metadata or {}
    if b"rows_per_zone" in md:
        rows_per_zone = int(md[b"rows_per_zone"])
    zm = ZoneMap(rows_per_zone, table.schema.field("min").type)
    cols = {n: table.column(n).to_pylist() for n in table.column_names}
    for i in range(table.num_rows):
        z = Zone(
            cols["fragment_id"][i],
            cols["zone_start"][i],
            cols["zone_length"][i],
            cols["min"][i],
            cols["max"][i],
            cols["null_count"][i],
            cols["nan_count"][i],
        )
        zm.zones.setdefault(z.fragment_id, []).append(z)
    return zm


def _is_nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _zone_stats(values: list[Any]) -> tuple[Any, Any, int, int]:
    nulls = sum(v is None for v in values)
    nans = sum(_is_nan(v) for v in values)
    rest = [v for v in values if v is not None and not _is_nan(v)]
    # pylance orders NaN above every number (total order): NaN in a zone makes max NaN
    lo = min(rest) if rest else (math.nan if nans else None)
    hi = math.nan if nans else (max(rest) if rest else None)
    return (lo, hi, nulls, nans)


def _null_rows_buffer(null_rows: dict[int, list[int]]) -> bytes:
    """Row addresses holding NULL, as pylance writes them: u32 entry count, then per
    fragment with nulls (ascending id): u32 fragment id, u32 byte length, portable
    32-bit roaring bitmap of row offsets."""
    entries = [(fid, BitMap(rows).serialize()) for fid, rows in sorted(null_rows.items()) if rows]
    out = bytearray(struct.pack("<I", len(entries)))
    for fid, bm in entries:
        out += struct.pack("<II", fid, len(bm)) + bm
    return bytes(out)


def _add_global_buffer(data: bytes, buffer: bytes) -> bytes:
    """Append global buffer 1 to a Lance 2.x file written with only buffer 0.

    The buffer goes after the column metadata and before the offset tables, which
    move; column metadata keeps its absolute positions."""
    cm_start, cmo, gbo, ngb, ncols, major, minor, magic = FOOTER.unpack(data[-FOOTER_SIZE:])
    if ngb != 1:
        raise ValueError("expected a file with one global buffer")
    head = bytearray(data[:cmo])
    cmo_table = data[cmo:gbo]
    gbo_table = data[gbo : len(data) - FOOTER_SIZE]
    head += b"\0" * ((-len(head)) % ALIGNMENT)
    gb1 = len(head)
    head += buffer
    new_cmo = len(head)
    head += cmo_table
    new_gbo = len(head)
    head += gbo_table + struct.pack("<QQ", gb1, len(buffer))
    head += FOOTER.pack(cm_start, new_cmo, new_gbo, 2, ncols, major, minor, magic)
    return bytes(head)


def _details(rows_per_zone: int, value_type: pa.DataType) -> bytes:
    out = bytearray([0x08])
    n = rows_per_zone
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            break
    # fields 2 and 3 as pylance 14 writes them: field 2 is 1 for string/binary columns, else 0
    var = pa.types.is_string(value_type) or pa.types.is_large_string(value_type)
    var = var or pa.types.is_binary(value_type) or pa.types.is_large_binary(value_type)
    return bytes(out) + (b"\x10\x01" if var else b"\x10\x00") + b"\x18\x01"


def write_zonemap(
    store: _Store,
    column_field: Any,  # a Field proto (needs .id and .name)
    fragments: list[tuple[int, pa.Array]],
    *,
    name: str | None = None,
    dataset_version: int,
    rows_per_zone: int = DEFAULT_ROWS_PER_ZONE,
) -> tuple[list[str], table_pb2.IndexMetadata]:
    """Write a zonemap over ``fragments`` ((fragment id, column values) in row order)."""
    if not fragments:
        raise ValueError("no fragments")
    vtype = fragments[0][1].type
    rows: dict[str, list[Any]] = {
        k: [] for k in ("min", "max", "null_count", "nan_count", "fragment_id", "zone_start", "zone_length")
    }
    null_rows: dict[int, list[int]] = {}
    for fid, arr in fragments:
        values = arr.to_pylist()
        null_rows[fid] = [i for i, v in enumerate(values) if v is None]
        for start in range(0, len(values), rows_per_zone):
            chunk = values[start : start + rows_per_zone]
            lo, hi, nulls, nans = _zone_stats(chunk)
            for k, v in zip(rows, (lo, hi, nulls, nans, fid, start, len(chunk)), strict=True):
                rows[k].append(v)
    u64, u32 = pa.uint64(), pa.uint32()
    schema = pa.schema(
        [
            pa.field("min", vtype),
            pa.field("max", vtype),
            pa.field("null_count", u32, nullable=False),
            pa.field("nan_count", u32, nullable=False),
            pa.field("fragment_id", u64, nullable=False),
            pa.field("zone_start", u64, nullable=False),
            pa.field("zone_length", u64, nullable=False),
        ],
        metadata={"rows_per_zone": str(rows_per_zone), "null_bitmap": "1"},
    )
    table = pa.Table.from_pydict(rows, schema=schema)
    buf = io.BytesIO()
    with FileWriter(buf, schema, file_version="2.2") as w:
        w.write(table)
    # global buffer 1 (schema metadata null_bitmap=1): row addresses holding NULL
    data = _add_global_buffer(buf.getvalue(), _null_rows_buffer(null_rows))
    uid = uuidlib.uuid4()
    path = f"_indices/{uid}/{FILE_NAME}"
    store.put(path, data)
    meta = table_pb2.IndexMetadata()
    meta.uuid.uuid = uid.bytes
    meta.fields.append(column_field.id)
    meta.name = name or f"{column_field.name}_idx"
    meta.dataset_version = dataset_version
    meta.fragment_bitmap = BitMap([fid for fid, _ in fragments]).serialize()
    meta.index_details.type_url = TYPE_URL
    meta.index_details.value = _details(rows_per_zone, vtype)
    meta.index_version = 0
    meta.created_at = int(time.time() * 1000)
    f = meta.files.add()
    f.path = FILE_NAME
    f.size = len(data)
    return [path], meta


def zones_that_may_match(zonemap: ZoneMap, op: str, value: Any) -> list[Zone]:
    """Zones that may hold a row matching ``column <op> value`` (conservative).

    ``op`` is one of ``=, <, <=, >, >=, between, in``; for ``between`` value is
    (lo, hi) inclusive, for ``in`` an iterable.  Zones without min/max, and any
    comparison that fails (incomparable types), may match.
    """
    out = []
    for z in zonemap.all_zones():
        if _may(z, op, value):
            out.append(z)
    return out


def _may(z: Zone, op: str, value: Any) -> bool:
    if z.nan_count > 0 or _is_nan(z.min) or _is_nan(z.max):
        return True  # NaN bounds (pylance's max is NaN when the zone holds NaN): cannot prune
    if z.min is None or z.max is None:
        # only NULLs (no comparison matches NULL) - unless the zone has values it gave no bounds for
        return z.null_count < z.length
    try:
        if op == "=":
            return bool(z.min <= value <= z.max)
        if op == "<":
            return bool(z.min < value)
        if op == "<=":
            return bool(z.min <= value)
        if op == ">":
            return bool(z.max > value)
        if op == ">=":
            return bool(z.max >= value)
        if op == "between":
            lo, hi = value
            return bool(z.min <= hi and z.max >= lo and lo <= hi)
        if op == "in":
            return any(_may(z, "=", v) for v in value)
    except TypeError:
        return True
    raise ValueError(f"unknown op {op!r}")
