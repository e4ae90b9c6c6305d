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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from ..file.container import FOOTER, FOOTER_SIZE
from ..file.datafile import FileReader, FileWriter
from ..protos import table_pb2
from .store import ObjectWriter

TYPE_URL = "/lance.table.ZoneMapIndexDetails"
FILE_NAME = "zonemap.lance"
DEFAULT_ROWS_PER_ZONE = 8192


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
    #: row offsets holding NULL, by fragment id (the file's global buffer 1; empty fragments omitted)
    null_rows: dict[int, BitMap] = field(default_factory=dict)
    #: :meth:`fragment` answers, by fragment id (filled as asked; the zones must not change after)
    _by_fragment: dict[int, tuple[list[Zone], Zone | None]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    #: :meth:`may_ranges`' arrays, by fragment id (None: its zones do not fit one)
    _arrays: dict[int, _ZoneArrays | None] = field(default_factory=dict, init=False, repr=False, compare=False)
    _rows: dict[int, int] = field(default_factory=dict, init=False, repr=False, compare=False)
    _all: dict[int, list[tuple[int, int]]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def all_zones(self) -> list[Zone]:
        return [z for fid in sorted(self.zones) for z in self.zones[fid]]

    def fragment(self, fragment_id: int) -> tuple[list[Zone], Zone | None]:
        """A fragment's zones in row order, and one zone bounding them all
        (None when a zone has no usable bounds: NULLs only, NaN, values that
        do not compare).  Remembered: ask only once the map is complete."""
        hit = self._by_fragment.get(fragment_id)
        if hit is None:
            zs = sorted(self.zones.get(fragment_id, []), key=lambda z: z.start)
            whole = None
            clean = all(
                z.nan_count == 0 and not (z.min is None or z.max is None or _is_nan(z.min) or _is_nan(z.max))
                for z in zs
            )
            if zs and clean:
                try:
                    lo, hi = min(z.min for z in zs), max(z.max for z in zs)
                except TypeError:
                    lo = hi = None
                if lo is not None:
                    nulls = sum(z.null_count for z in zs)
                    whole = Zone(fragment_id, zs[0].start, sum(z.length for z in zs), lo, hi, nulls, 0)
            hit = self._by_fragment[fragment_id] = (zs, whole)
        return hit

    def all_ranges(self, fragment_id: int) -> list[tuple[int, int]]:
        """Every zone of a fragment as row ranges, merged where zones touch
        (remembered, as :meth:`fragment`; callers get a copy)."""
        got = self._all.get(fragment_id)
        if got is None:
            got = self._all[fragment_id] = zone_ranges(self.fragment(fragment_id)[0])
        return list(got)

    def rows(self, fragment_id: int) -> int:
        """The rows a fragment's zones cover (remembered, as :meth:`fragment`)."""
        n = self._rows.get(fragment_id)
        if n is None:
            n = self._rows[fragment_id] = sum(z.length for z in self.fragment(fragment_id)[0])
        return n

    def may_ranges(self, fragment_id: int, op: str, value: Any) -> list[tuple[int, int]] | None:
        """The row ranges of a fragment whose zones may hold a value matching
        ``column <op> value`` (what :func:`_may` says zone by zone, merged where
        zones touch), decided with one numpy comparison over all its zones.
        None when that cannot be done exactly (zones without bounds, NaN,
        values other than int64-sized integers or floats, a value of another
        kind than the zones'): the caller asks zone by zone instead."""
        if fragment_id not in self._arrays:
            self._arrays[fragment_id] = _ZoneArrays.of(self.fragment(fragment_id))
        arrays = self._arrays[fragment_id]
        return None if arrays is None else arrays.may_ranges(op, value)


_INT64: tuple[int, int] = (-(1 << 63), (1 << 63) - 1)


@dataclass(frozen=True)
class _ZoneArrays:
    """A fragment's clean zones (bounds on every one, no NaN) as arrays."""

    starts: np.ndarray
    stops: np.ndarray
    mins: np.ndarray
    maxs: np.ndarray
    kind: type  # int or float: the Python type of every bound

    @classmethod
    def of(cls, found: tuple[list[Zone], Zone | None]) -> _ZoneArrays | None:
        zs, whole = found
        if not zs or whole is None:  # no zones, or one without usable bounds
            return None
        bounds = [z.min for z in zs] + [z.max for z in zs]
        kinds = {type(b) for b in bounds}
        if kinds == {int}:
            if min(bounds) < _INT64[0] or max(bounds) > _INT64[1]:
                return None
            dtype: Any = np.int64
        elif kinds == {float}:
            dtype = np.float64
        else:
            return None
        n = len(zs)
        return cls(
            np.fromiter((z.start for z in zs), np.int64, n),
            np.fromiter((z.start + z.length for z in zs), np.int64, n),
            np.array(bounds[:n], dtype=dtype),
            np.array(bounds[n:], dtype=dtype),
            kinds.pop(),
        )

    def _fits(self, v: Any) -> bool:
        kind_ok = type(v) is self.kind
        return kind_ok and (self.kind is float or _INT64[0] <= int(v) <= _INT64[1])

    def may_ranges(self, op: str, value: Any) -> list[tuple[int, int]] | None:
        values = list(value) if op in ("in", "between") else [value]
        if not values or not all(self._fits(v) for v in values):
            return None
        if any(isinstance(v, float) and math.isnan(v) for v in values):
            return None
        lo, hi = self.mins, self.maxs
        if op == "=":
            mask = (lo <= value) & (hi >= value)
        elif op == "<":
            mask = lo < value
        elif op == "<=":
            mask = lo <= value
        elif op == ">":
            mask = hi > value
        elif op == ">=":
            mask = hi >= value
        elif op == "between":
            a, b = values
            mask = (lo <= b) & (hi >= a) & (a <= b)
        elif op == "in":
            mask = np.zeros(len(lo), dtype=bool)
            for v in values:
                mask |= (lo <= v) & (hi >= v)
        else:
            raise ValueError(f"unknown op {op!r}")
        keep = np.flatnonzero(mask)
        if not keep.size:
            return []
        starts, reach = self.starts[keep], np.maximum.accumulate(self.stops[keep])
        # a run of touching (or overlapping) zones is one range
        new = np.flatnonzero(starts[1:] > reach[:-1]) + 1
        firsts = np.concatenate(([0], new))
        lasts = np.concatenate((new, [keep.size])) - 1
        ends = reach[lasts]
        return list(zip(starts[firsts].tolist(), ends.tolist()))


def _uuid_str(meta: table_pb2.IndexMetadata) -> str:
    return str(uuidlib.UUID(bytes=bytes(meta.uuid.uuid)))


def read_zonemap(store: ObjectWriter, index_metadata: table_pb2.IndexMetadata) -> ZoneMap:
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
    zm.null_rows = _read_null_rows(data)
    return zm


def _read_null_rows(data: bytes) -> dict[int, BitMap]:
    """Global buffer 1 of a zonemap file (see ``_null_rows_buffer``); {} when absent."""
    _cm, _cmo, gbo, ngb, *_ = FOOTER.unpack(data[-FOOTER_SIZE:])
    if ngb < 2:
        return {}
    pos, length = struct.unpack_from("<QQ", data, gbo + 16)
    buf = memoryview(data)[pos : pos + length]
    if len(buf) != length or length < 4:
        raise ValueError(f"zonemap null-rows buffer [{pos}, {pos + length}) is outside the file")
    (count,) = struct.unpack_from("<I", buf, 0)
    out: dict[int, BitMap] = {}
    at = 4
    for _ in range(count):
        fid, size = struct.unpack_from("<II", buf, at)
        at += 8
        if at + size > length:
            raise ValueError("zonemap null-rows buffer is truncated")
        out[fid] = BitMap.deserialize(bytes(buf[at : at + size]))
        at += size
    return out


def _is_nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _value_type_ok(t: pa.DataType) -> bool:
    """Whether a zone map can bound values of type ``t`` (min/max ordered as the column)."""
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_temporal(t)
        or pa.types.is_decimal(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_boolean(t)
    )


def fragment_zones(
    fragment_id: int, values: pa.Array, rows_per_zone: int = DEFAULT_ROWS_PER_ZONE
) -> tuple[list[Zone], BitMap]:
    """The zones of one fragment's column (physical rows, deleted ones included)
    and the offsets holding NULL, computed with Arrow kernels per zone."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if not _value_type_ok(values.type):
        raise TypeError(f"a zone map cannot bound a column of type {values.type}")
    floating = pa.types.is_floating(values.type)
    nulls = BitMap()
    if values.null_count:
        nulls = BitMap(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False)).astype(np.uint32))
    zones: list[Zone] = []
    for start in range(0, len(values), rows_per_zone):
        chunk = values.slice(start, rows_per_zone)
        n = len(chunk)
        null_count = chunk.null_count
        nan_count = 0
        if floating:
            nan_mask = pc.is_nan(chunk)
            nan_count = int(pc.sum(nan_mask).as_py() or 0)
            if nan_count:
                chunk = chunk.filter(pc.invert(nan_mask))  # NULLs of the mask drop too
        if null_count + nan_count == n:
            lo = hi = math.nan if nan_count else None
        else:
            mm = pc.min_max(chunk)
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            if nan_count:
                hi = math.nan  # pylance orders NaN above every number: a zone with NaN has max NaN
        zones.append(Zone(fragment_id, start, n, lo, hi, null_count, nan_count))
    return zones, nulls


def _null_rows_buffer(null_rows: Mapping[int, Iterable[int]]) -> bytes:
    """Row addresses holding NULL, as pylance writes them: u32 entry count, then per
    fragment with nulls (ascending id): u32 fragment id, u32 byte length, portable
    32-bit roaring bitmap of row offsets."""
    bitmaps = [(fid, BitMap(rows)) for fid, rows in sorted(null_rows.items())]
    entries = [(fid, bm.serialize()) for fid, bm in bitmaps if len(bm)]
    out = bytearray(struct.pack("<I", len(entries)))
    for fid, bm in entries:
        out += struct.pack("<II", fid, len(bm)) + bm
    return bytes(out)


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
    store: ObjectWriter,
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
    zm = ZoneMap(rows_per_zone, fragments[0][1].type)
    for fid, arr in fragments:
        zm.zones[fid], zm.null_rows[fid] = fragment_zones(fid, arr, rows_per_zone)
    return write_zones(store, column_field, zm, name=name, dataset_version=dataset_version)


def write_zones(
    store: ObjectWriter,
    column_field: Any,  # a Field proto (needs .id and .name)
    zonemap: ZoneMap,
    *,
    name: str | None = None,
    dataset_version: int,
) -> tuple[list[str], table_pb2.IndexMetadata]:
    """Write ``zonemap`` as a new index (a fresh uuid) covering exactly its fragments;
    returns the paths written and the manifest entry."""
    if not zonemap.zones:
        raise ValueError("no fragments")
    vtype = zonemap.value_type
    rows: dict[str, list[Any]] = {
        k: [] for k in ("min", "max", "null_count", "nan_count", "fragment_id", "zone_start", "zone_length")
    }
    for z in zonemap.all_zones():
        for k, v in zip(rows, (z.min, z.max, z.null_count, z.nan_count, z.fragment_id, z.start, z.length), strict=True):
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
        metadata={"rows_per_zone": str(zonemap.rows_per_zone), "null_bitmap": "1"},
    )
    table = pa.Table.from_pydict(rows, schema=schema)
    # global buffer 1 (schema metadata null_bitmap=1): row addresses holding NULL
    null_rows = {fid: bm for fid, bm in zonemap.null_rows.items() if fid in zonemap.zones}
    buf = io.BytesIO()
    with FileWriter(buf, schema, file_version="2.2", extra_global_buffers=[_null_rows_buffer(null_rows)]) as w:
        w.write(table)
    data = buf.getvalue()
    uid = uuidlib.uuid4()
    path = f"_indices/{uid}/{FILE_NAME}"
    store.put(path, data)
    meta = table_pb2.IndexMetadata()
    meta.uuid.uuid = uid.bytes
    meta.fields.append(column_field.id)
    meta.name = name or f"{column_field.name}_idx"
    meta.dataset_version = dataset_version
    meta.fragment_bitmap = BitMap(zonemap.zones).serialize()
    meta.index_details.type_url = TYPE_URL
    meta.index_details.value = _details(zonemap.rows_per_zone, vtype)
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


def zone_ranges(zones: Iterable[Zone]) -> list[tuple[int, int]]:
    """The row ranges of ``zones`` (in row order), merged where they touch."""
    out: list[tuple[int, int]] = []
    for z in zones:
        if out and z.start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], z.start + z.length))
        else:
            out.append((z.start, z.start + z.length))
    return out


def _must(z: Zone, op: str, value: Any) -> bool:
    """Whether every value between the zone's bounds matches ``column <op> value``
    (False whenever that cannot be told: NaN, no bounds, values that do not compare)."""
    if z.nan_count > 0 or z.min is None or z.max is None or _is_nan(z.min) or _is_nan(z.max):
        return False
    try:
        if op == "=":
            return bool(z.min == value and z.max == value)
        if op == "<":
            return bool(z.max < value)
        if op == "<=":
            return bool(z.max <= value)
        if op == ">":
            return bool(z.min > value)
        if op == ">=":
            return bool(z.min >= value)
        if op == "between":
            lo, hi = value
            return bool(lo <= z.min and z.max <= hi)
        if op == "in":
            return bool(z.min == z.max and any(z.min == v for v in value))
    except TypeError:
        return False
    raise ValueError(f"unknown op {op!r}")


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
