"""Pruning scans with zone maps (pylance's ZONEMAP index, ``format/table/zonemap.py``).

For each top-level AND term of a SQL filter that a zone can decide
(:func:`tessera.catalog.query.predicate.range_terms`) and a ZONEMAP index on that
term's column, the zones that may hold a matching row give each covered
fragment's row ranges; terms intersect.  A fragment no index covers, or whose
zones do not add up to its rows (a stale or foreign index), is read whole.
Zones count deleted rows too (a superset), NaN and incomparable values never
prune, and the filter itself is still applied to every row read: pruning
can only skip rows the filter would drop.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

import pyarrow as pa
from pyroaring import BitMap

from tessera.format.errors import FormatError
from tessera.format.file import schema as lschema
from tessera.format.protos import table_pb2
from tessera.format.table import zonemap as zm
from tessera.stores.errors import StoreError
from tessera.stores.object_store import ObjectStore

from .predicate import Predicate, RangeTerm, range_terms

log = logging.getLogger(__name__)

Ranges = list[tuple[int, int]]


def zone_indices(index_section: bytes | None) -> list[table_pb2.IndexMetadata]:
    """The ZONEMAP entries of a manifest's index section."""
    if not index_section:
        return []
    section = table_pb2.IndexSection.FromString(index_section)
    return [m for m in section.indices if m.index_details.type_url.endswith(zm.TYPE_URL)]


def _intersect(a: Ranges, b: Ranges) -> Ranges:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _term_value(term: RangeTerm) -> object:
    """The term's constant(s) as Python values (what zones are compared with)."""
    if term.op == "in":
        return [v.as_py() for v in term.values]
    return term.values[0].as_py()


_UNSET = object()


def _term_ranges(zones: zm.ZoneMap, term: RangeTerm, fragment_id: int, value: object = _UNSET) -> Ranges:
    if value is _UNSET:
        value = _term_value(term)
    zs, whole = zones.fragment(fragment_id)
    if whole is not None:
        if not zm._may(whole, term.op, value):
            return []  # no zone's value range can hold a match: every zone lies inside the fragment's
        if zm._must(whole, term.op, value):
            return zones.all_ranges(fragment_id)  # every zone's values all match: each may
    fast = zones.may_ranges(fragment_id, term.op, value)
    if fast is not None:
        return fast
    return zm.zone_ranges(z for z in zs if zm._may(z, term.op, value))


def pruner(
    store: ObjectStore,
    index_section: bytes | None,
    fields: list[lschema.LanceField],
    schema: pa.Schema,
    predicate: Predicate | None,
    fragments: list[table_pb2.DataFragment],
) -> Callable[[table_pb2.DataFragment], Ranges | None] | None:
    """``Scan.row_ranges`` for ``predicate`` (SQL text or a pyarrow Expression)
    from the table's zone maps (None: nothing to prune with)."""
    if predicate is None or not zone_indices(index_section):
        return None
    return terms_pruner(store, index_section, fields, range_terms(predicate, schema), fragments)


#: zone maps read in this process, by (table URI, index uuid), most recent last:
#: an index's files are written once under a directory named by its uuid and
#: never changed, so a cached map stays exact; bounded by entries
_ZONEMAP_CACHE: OrderedDict[tuple[str, bytes], zm.ZoneMap] = OrderedDict()
_ZONEMAP_CACHE_SIZE = 64
_ZONEMAP_LOCK = threading.Lock()


def read_zonemap(store: ObjectStore, meta: table_pb2.IndexMetadata) -> zm.ZoneMap:
    """:func:`zm.read_zonemap`, once per process for each index (scans of a
    table, however opened, share it)."""
    key = (store.uri, bytes(meta.uuid.uuid))
    with _ZONEMAP_LOCK:
        hit = _ZONEMAP_CACHE.get(key)
        if hit is not None:
            _ZONEMAP_CACHE.move_to_end(key)
            return hit
    zones = zm.read_zonemap(store, meta)
    with _ZONEMAP_LOCK:
        _ZONEMAP_CACHE[key] = zones
        while len(_ZONEMAP_CACHE) > _ZONEMAP_CACHE_SIZE:
            _ZONEMAP_CACHE.popitem(last=False)
    return zones


def terms_pruner(
    store: ObjectStore,
    index_section: bytes | None,
    fields: list[lschema.LanceField],
    terms: Sequence[RangeTerm],
    fragments: Sequence[table_pb2.DataFragment],
) -> Callable[[table_pb2.DataFragment], Ranges | None] | None:
    """Per-fragment row ranges that can hold rows matching every one of
    ``terms`` (however they were found: a SQL filter, a pushed-down pyarrow
    Expression, Spark's pushed filters), from the ZONEMAP indices of the
    manifest's ``index_section``.  Each index is read once, here; the
    function returned reads nothing.  None: nothing to prune with."""
    indices = zone_indices(index_section)
    if not indices or not terms:
        return None
    ids = {f.name: f.id for f in fields}
    rows = {f.id: f.physical_rows for f in fragments}
    usable: list[tuple[RangeTerm, object, zm.ZoneMap, BitMap]] = []
    read: dict[bytes, tuple[zm.ZoneMap, BitMap] | None] = {}  # by index uuid: each is read once

    def load(meta: table_pb2.IndexMetadata) -> tuple[zm.ZoneMap, BitMap] | None:
        key = bytes(meta.uuid.uuid)
        if key not in read:
            try:
                zones = read_zonemap(store, meta)
                covered = BitMap.deserialize(bytes(meta.fragment_bitmap)) if meta.fragment_bitmap else BitMap()
            except (FormatError, StoreError, OSError, ValueError) as exc:
                log.warning("%s: zone map %s unreadable, not used (%s)", store.uri, meta.name, exc)
                read[key] = None
            else:
                # a fragment is pruned only when its zones tile exactly its rows
                good = BitMap(f for f in covered if f in rows and zones.rows(f) == rows[f])
                read[key] = (zones, good)
        return read[key]

    for term in terms:
        fid = ids.get(term.column)
        for meta in indices:
            if list(meta.fields) != [fid] or (got := load(meta)) is None:
                continue
            usable.append((term, _term_value(term), *got))
            break
    if not usable:
        return None

    def row_ranges(frag: table_pb2.DataFragment) -> Ranges | None:
        result: Ranges | None = None
        for term, value, zones, good in usable:
            if frag.id not in good:
                continue
            mine = _term_ranges(zones, term, frag.id, value)
            result = mine if result is None else _intersect(result, mine)
            if not result:
                break  # nothing left to intersect
        return result

    return row_ranges
