"""Per-file column statistics and the Spark filters Tessera pushes down.

Statistics (min, max, null count of each top-level column of an orderable
type) are computed by the Spark writer tasks while the data is in memory and
stored in the data file's own footer, under the schema metadata key
``tessera.stats``, keyed by field id.  They travel with the immutable file, so
they can never be stale; files written by other writers simply have none and
are never pruned.  The planning side reads footers (a tail read per file,
cached per file for the life of the planning worker) only when a query has
filters that statistics can answer.

Pushed filters are kept as plain :class:`Pushed` records (picklable) and turned
into pyarrow expressions on the executors, where they are applied exactly: a
filter accepted here is not re-evaluated by Spark.  Filters whose semantics
could differ (floating point NaN ordering, nested columns, NULLs inside IN
lists, values not representable in the column's type) are handed back.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

log = logging.getLogger(__name__)

STATS_KEY = b"tessera.stats"
MAX_STRING_STAT = 64  # longer min/max strings are not kept

_CMP = {"eq", "lt", "le", "gt", "ge"}


# -- statistics -------------------------------------------------------------------------------


def _stat_kind(t: pa.DataType) -> str | None:
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return "int"
    if pa.types.is_date32(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "ts"
    if pa.types.is_decimal(t):
        return "dec"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    return None


def stat_value(scalar: pa.Scalar) -> Any:
    """A scalar as a JSON-able value that orders like the column does."""
    if not scalar.is_valid:
        return None
    t = scalar.type
    if pa.types.is_boolean(t):
        return int(scalar.as_py())
    if pa.types.is_date32(t):
        return scalar.cast(pa.int32()).as_py()
    if pa.types.is_timestamp(t):
        return scalar.cast(pa.int64()).as_py()
    if pa.types.is_decimal(t):
        return str(scalar.as_py())
    return scalar.as_py()


def _decode(kind: str, v: Any) -> Any:
    return Decimal(v) if kind == "dec" and v is not None else v


class StatsCollector:
    """Running min/max/null count for the orderable top-level columns of a file."""

    def __init__(self, schema: pa.Schema, field_ids: Sequence[int]) -> None:
        kinds = [(i, fid, _stat_kind(f.type)) for i, (f, fid) in enumerate(zip(schema, field_ids))]
        self.columns = [(i, fid) for i, fid, kind in kinds if kind]
        self.kinds = {fid: kind for _, fid, kind in kinds if kind}
        self.reset()

    def reset(self) -> None:
        self.stats: dict[int, list] = {fid: [None, None, 0] for _, fid in self.columns}

    def add(self, batch: pa.RecordBatch) -> None:
        for i, fid in self.columns:
            col = batch.column(i)
            st = self.stats[fid]
            st[2] += col.null_count
            if col.null_count == len(col):
                continue
            mm = pc.min_max(col)
            lo, hi = stat_value(mm["min"]), stat_value(mm["max"])
            kind = self.kinds[fid]
            if st[0] is None or _decode(kind, lo) < _decode(kind, st[0]):
                st[0] = lo
            if st[1] is None or _decode(kind, hi) > _decode(kind, st[1]):
                st[1] = hi

    def metadata(self) -> bytes:
        """The footer value: {field id: [min, max, null count]} (over-long strings dropped)."""
        out = {}
        for fid, (lo, hi, nulls) in self.stats.items():
            long = isinstance(lo, str) and (len(lo) > MAX_STRING_STAT or len(hi) > MAX_STRING_STAT)
            out[str(fid)] = [None, None, nulls, False] if long else [lo, hi, nulls, True]
        return json.dumps(out, separators=(",", ":")).encode()


_FOOTER_CACHE: OrderedDict[str, dict | None] = OrderedDict()
_FOOTER_CACHE_SIZE = 100_000


def _file_stats(store, path: str) -> dict | None:
    """The ``tessera.stats`` of one data file (cached: data files never change)."""
    from tessera.format import FileReader

    key = f"{store.uri}/{path}"
    if key in _FOOTER_CACHE:
        _FOOTER_CACHE.move_to_end(key)
        return _FOOTER_CACHE[key]
    try:
        with FileReader(store.open_reader(f"data/{path}")) as r:
            raw = (r.schema.metadata or {}).get(STATS_KEY)
        stats = {int(k): v for k, v in json.loads(raw).items()} if raw else None
    except Exception as exc:  # noqa: BLE001 - statistics are an optimisation only
        log.debug("no statistics for %s: %s", key, exc)
        stats = None
    _FOOTER_CACHE[key] = stats
    if len(_FOOTER_CACHE) > _FOOTER_CACHE_SIZE:
        _FOOTER_CACHE.popitem(last=False)
    return stats


def fragment_stats(store, fragment) -> dict[int, list | None]:
    """Field id -> [min, max, nulls, exact] for one fragment (later files win)."""
    out: dict[int, list | None] = {}
    for df in fragment.files:
        stats = _file_stats(store, df.path) or {}
        for fid in df.fields:
            out[fid] = stats.get(fid)
    return out


# -- pushed filters -------------------------------------------------------------------------


@dataclass(frozen=True)
class Pushed:
    """One pushed-down conjunct: ``[NOT] column <op> value``.

    ``value`` is already converted to the column's type (a tuple for ``in``);
    ``stat_values`` are the same values as statistics store them."""

    op: str  # eq eqns lt le gt ge in isnull notnull startswith endswith contains
    column: str
    field_id: int
    value: Any = None
    negated: bool = False
    stat_values: tuple = ()

    def expression(self, t: pa.DataType) -> pc.Expression:
        """The exact pyarrow expression (false or null where Spark's filter drops the row)."""
        f = pc.field(self.column)
        if self.op in ("isnull", "notnull"):
            null = (self.op == "isnull") != self.negated
            return f.is_null() if null else f.is_valid()
        if self.op == "eqns":
            if self.value is None:
                return f.is_valid() if self.negated else f.is_null()
            e = pc.coalesce(f == pa.scalar(self.value, t), pa.scalar(False))
            return ~e if self.negated else e
        if self.op in _CMP:
            v = pa.scalar(self.value, t)
            e = {"eq": f == v, "lt": f < v, "le": f <= v, "gt": f > v, "ge": f >= v}[self.op]
        elif self.op == "in":
            e = f.isin(pa.array(self.value, t))
        elif self.op == "startswith":
            e = pc.starts_with(f, pattern=self.value)
        elif self.op == "endswith":
            e = pc.ends_with(f, pattern=self.value)
        else:
            e = pc.match_substring(f, pattern=self.value)
        return f.is_valid() & ~e if self.negated else e

    def may_match(self, kind: str, st: list | None, rows: int) -> bool:
        """False only when statistics prove no row of a fragment matches."""
        if st is None:
            return True
        lo, hi, nulls, known = st
        if self.op in ("isnull", "notnull"):
            want_null = (self.op == "isnull") != self.negated
            return nulls > 0 if want_null else nulls < rows
        if self.op == "eqns" and self.value is None:
            return nulls > 0 if not self.negated else nulls < rows
        if self.negated or self.op in ("endswith", "contains"):
            return True
        if nulls >= rows:
            return False  # a comparison is never true on NULL
        if not known or lo is None:
            return True
        lo, hi = _decode(kind, lo), _decode(kind, hi)
        if self.op == "startswith":
            p = self.value
            return lo[: len(p)] <= p <= hi[: len(p)]
        vals = [_decode(kind, v) for v in self.stat_values]
        if self.op in ("eq", "eqns", "in"):
            return any(lo <= v <= hi for v in vals)
        v = vals[0]
        return {"lt": lo < v, "le": lo <= v, "gt": hi > v, "ge": hi >= v}[self.op]


_OPS = {
    "EqualTo": "eq",
    "EqualNullSafe": "eqns",
    "LessThan": "lt",
    "LessThanOrEqual": "le",
    "GreaterThan": "gt",
    "GreaterThanOrEqual": "ge",
    "In": "in",
    "StringStartsWith": "startswith",
    "StringEndsWith": "endswith",
    "StringContains": "contains",
}


def translate(flt, schema: pa.Schema, field_ids: dict[str, int]) -> Pushed | None:
    """A pyspark ``Filter`` as a :class:`Pushed`, or None to hand it back to Spark."""
    negated = type(flt).__name__ == "Not"
    inner = flt.child if negated else flt
    name = type(inner).__name__
    attr = tuple(getattr(inner, "attribute", ()))
    if len(attr) != 1 or attr[0] not in field_ids:
        return None
    column = attr[0]
    t = schema.field(column).type
    fid = field_ids[column]
    if name in ("IsNull", "IsNotNull"):
        return Pushed("isnull" if name == "IsNull" else "notnull", column, fid, None, negated)
    op = _OPS.get(name)
    kind = _stat_kind(t)
    binary = pa.types.is_binary(t) or pa.types.is_large_binary(t)
    if op is None or not (kind or binary and op in ("eq", "eqns", "in")):
        return None  # floats (NaN ordering), nested and other types: Spark filters them
    value = inner.value
    if op in ("startswith", "endswith", "contains"):
        return Pushed(op, column, fid, value, negated) if kind == "str" and isinstance(value, str) else None
    if op == "eqns" and value is None:
        return Pushed(op, column, fid, None, negated)
    values = list(value) if op == "in" else [value]
    if not values or any(v is None for v in values):
        return None
    try:
        cast = [_to_column(v, t) for v in values]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return None
    stat = tuple(stat_value(pa.scalar(c, t)) for c in cast) if kind else ()
    return Pushed(op, column, fid, tuple(cast) if op == "in" else cast[0], negated, stat)


def _to_column(v: Any, t: pa.DataType) -> Any:
    """``v`` converted to the column type exactly (raises when it cannot be)."""
    if isinstance(v, float):
        raise ValueError("floating point literal")
    if isinstance(v, bool) != pa.types.is_boolean(t):
        raise TypeError("boolean mismatch")
    s = pa.scalar(v)
    if pa.types.is_timestamp(t) and pa.types.is_timestamp(s.type) and (s.type.tz is None) != (t.tz is None):
        s = pa.scalar(s.as_py().replace(tzinfo=None), pa.timestamp(s.type.unit))
    if pa.types.is_string(s.type) != (pa.types.is_string(t) or pa.types.is_large_string(t)):
        raise TypeError("string mismatch")
    out = s.cast(t, safe=True)
    if pa.types.is_decimal(t) and Decimal(str(out.as_py())) != Decimal(str(v)):
        raise ValueError("decimal value changes")
    return out.as_py()


def prune(store, fragments: Iterable, pushed: Sequence[Pushed], schema: pa.Schema, threads: int = 16) -> list:
    """The fragments that statistics cannot rule out (footers read in parallel)."""
    frags = list(fragments)
    kinds = [(p, _stat_kind(schema.field(p.column).type)) for p in pushed]
    useful = [(p, k) for p, k in kinds if k is not None]
    if not useful or not frags:
        return frags
    with ThreadPoolExecutor(min(threads, len(frags))) as pool:
        stats = list(pool.map(lambda f: fragment_stats(store, f), frags))
    return [
        frag
        for frag, st in zip(frags, stats)
        if all(p.may_match(k, st.get(p.field_id), frag.physical_rows) for p, k in useful)
    ]
