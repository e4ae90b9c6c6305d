"""Which appends does pylance accept into a table of another type?

``python scripts/write_types_matrix.py [--versions 2.0,2.1,2.2]`` creates, for
every case of :data:`CASES`, a table with pylance (``lance.write_dataset``),
appends the case's data to it (``mode="append"``) and prints what pylance did
as a markdown table: ``accepted`` (stored as given), ``accepted-with-cast``
(stored, but the data's Arrow type was not the table's: the values read back
have the table's type), or ``refused`` with pylance's message.  The result is
recorded in ``docs/reference/write-types.md``; ``tests/catalog/test_write_types.py``
runs the same cases against pylance and Tessera side by side.
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import shutil
import sys
import tempfile
from dataclasses import dataclass

import pyarrow as pa

VERSIONS = ("2.0", "2.1", "2.2")


@dataclass(frozen=True)
class Case:
    """A table created from ``table``, then ``data`` appended to it."""

    group: str
    name: str
    table: pa.Table
    data: pa.Table

    @property
    def id(self) -> str:
        return f"{self.group}:{self.name}"


def _values(t: pa.DataType, n: int = 2) -> list:
    """``n`` Python values an array of type ``t`` can hold (no nulls)."""
    if pa.types.is_dictionary(t):
        return _values(t.value_type, n)
    if pa.types.is_boolean(t):
        return [True, False][:n]
    if pa.types.is_integer(t):
        return [1, 2][:n]
    if pa.types.is_floating(t):
        return [1.5, 2.0][:n]
    if pa.types.is_decimal(t):
        return [decimal.Decimal("1.5"), decimal.Decimal("2.25")][:n]
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return ["3", "x"][:n]
    if pa.types.is_fixed_size_binary(t):
        return [b"a" * t.byte_width, b"b" * t.byte_width][:n]
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return [b"ab", b"c"][:n]
    if pa.types.is_date(t):
        return [dt.date(2024, 1, 2), dt.date(2024, 3, 4)][:n]
    if pa.types.is_timestamp(t):
        tz = dt.UTC if t.tz else None
        return [dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=tz), dt.datetime(2024, 3, 4, tzinfo=tz)][:n]
    if pa.types.is_time(t):
        return [dt.time(1, 2, 3), dt.time(4, 5, 6)][:n]
    if pa.types.is_duration(t):
        return [dt.timedelta(seconds=5), dt.timedelta(minutes=3)][:n]
    if pa.types.is_fixed_size_list(t):
        return [_values(t.value_type, 1) * t.list_size, _values(t.value_type, 2)[-1:] * t.list_size][:n]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return [_values(t.value_type, 2), _values(t.value_type, 1)][:n]
    if pa.types.is_struct(t):
        cols = {f.name: _values(f.type, n) for f in t}
        return [{k: v[i] for k, v in cols.items()} for i in range(n)]
    if pa.types.is_null(t):
        return [None] * n
    raise ValueError(f"no sample values for {t}")


def column(t: pa.DataType, n: int = 2) -> pa.Array:
    """An array of ``n`` values of type ``t``."""
    if pa.types.is_dictionary(t):
        return pa.array(_values(t, n), t.value_type).dictionary_encode().cast(t)
    return pa.array(_values(t, n), t)


def one(t: pa.DataType | pa.Field, n: int = 2, extra: dict | None = None) -> pa.Table:
    """A table of one column ``c`` (type or field ``t``), plus column ``k``
    (int64) so a missing-column case has something left."""
    f = t if isinstance(t, pa.Field) else pa.field("c", t)
    return pa.Table.from_arrays(
        [pa.array(range(n), pa.int64()), column(f.type, n)], schema=pa.schema([("k", pa.int64()), f])
    )


def _pairs(group: str, types: list[pa.DataType], *, diagonal: bool = True) -> list[Case]:
    return [Case(group, f"{a} <- {b}", one(a), one(b)) for a in types for b in types if diagonal or a != b]


INTS = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
FLOATS = [pa.float16(), pa.float32(), pa.float64()]
UNITS = ["s", "ms", "us", "ns"]


def _struct(*fields: pa.Field) -> pa.StructType:
    return pa.struct(list(fields))


def _cases() -> list[Case]:
    out: list[Case] = []
    out += _pairs("int", INTS)
    out += _pairs("float", FLOATS)
    out += [
        Case("int/float", f"{a} <- {b}", one(a), one(b))
        for a, b in [
            (pa.float64(), pa.int64()),
            (pa.float64(), pa.int32()),
            (pa.float32(), pa.int16()),
            (pa.int64(), pa.float64()),
            (pa.int32(), pa.float32()),
        ]
    ]
    decs = [
        pa.decimal128(10, 2),
        pa.decimal128(12, 2),
        pa.decimal128(10, 3),
        pa.decimal256(10, 2),
        pa.decimal128(38, 2),
    ]
    out += [Case("decimal", f"{a} <- {b}", one(a), one(b)) for a in decs[:1] + decs[3:4] for b in decs]
    out += [
        Case("decimal", f"{a} <- {b}", one(a), one(b))
        for a, b in [
            (pa.decimal128(10, 2), pa.float64()),
            (pa.float64(), pa.decimal128(10, 2)),
            (pa.decimal128(10, 2), pa.int64()),
        ]
    ]
    out += _pairs("string", [pa.string(), pa.large_string(), pa.string_view()])
    out += _pairs("binary", [pa.binary(), pa.large_binary(), pa.binary(2), pa.binary(3), pa.binary_view()])
    out += [
        Case("string/binary", f"{a} <- {b}", one(a), one(b))
        for a, b in [(pa.string(), pa.binary()), (pa.binary(), pa.string())]
    ]
    # the examples: string into int64 / double, int into bool, bool into int
    out += [
        Case("cross", f"{a} <- {b}", one(a), one(b))
        for a, b in [
            (pa.int64(), pa.string()),
            (pa.float64(), pa.string()),
            (pa.bool_(), pa.int64()),
            (pa.int64(), pa.bool_()),
            (pa.bool_(), pa.string()),
            (pa.string(), pa.int64()),
            (pa.bool_(), pa.int8()),
        ]
    ]
    out += _pairs("date", [pa.date32(), pa.date64()])
    out += [
        Case("date", f"{a} <- {b}", one(a), one(b))
        for a, b in [(pa.date32(), pa.timestamp("us")), (pa.timestamp("us"), pa.date32())]
    ]
    out += _pairs("timestamp", [pa.timestamp(u) for u in UNITS])
    zones = [
        pa.timestamp("us"),
        pa.timestamp("us", "UTC"),
        pa.timestamp("us", "+00:00"),
        pa.timestamp("us", "America/New_York"),
    ]
    out += _pairs("timestamp tz", zones, diagonal=False)
    out += [
        Case(
            "timestamp tz",
            "timestamp[ns, tz=UTC] <- timestamp[us, tz=UTC]",
            one(pa.timestamp("ns", "UTC")),
            one(pa.timestamp("us", "UTC")),
        )
    ]
    out += _pairs("time", [pa.time32("s"), pa.time32("ms"), pa.time64("us"), pa.time64("ns")])
    out += _pairs("duration", [pa.duration(u) for u in UNITS])
    out += [Case("duration", "duration[us] <- int64", one(pa.duration("us")), one(pa.int64()))]
    lists = [
        pa.list_(pa.int64()),
        pa.list_(pa.int32()),
        pa.large_list(pa.int64()),
        pa.list_(pa.int64(), 2),
        pa.list_(pa.int64(), 3),
    ]
    out += _pairs("list", lists)
    fsl = [pa.list_(pa.float32(), 4), pa.list_(pa.float64(), 4), pa.list_(pa.float32(), 8), pa.list_(pa.float16(), 4)]
    out += _pairs("fixed_size_list", fsl, diagonal=False)
    out += [
        Case(
            "list",
            "list<item> <- list<element>",
            one(pa.list_(pa.int64())),
            one(pa.list_(pa.field("element", pa.int64()))),
        ),
        Case(
            "list",
            "list<item not null> <- list<item>",
            one(pa.list_(pa.field("item", pa.int64(), nullable=False))),
            one(pa.list_(pa.int64())),
        ),
        Case(
            "list",
            "list<item> <- list<item not null>",
            one(pa.list_(pa.int64())),
            one(pa.list_(pa.field("item", pa.int64(), nullable=False))),
        ),
        Case(
            "list", "list<string> <- list<large_string>", one(pa.list_(pa.string())), one(pa.list_(pa.large_string()))
        ),
    ]
    a64, a32, bs = pa.field("a", pa.int64()), pa.field("a", pa.int32()), pa.field("b", pa.string())
    base = _struct(a64, bs)
    structs = [
        ("struct<a:int32,b>", _struct(a32, bs)),
        ("struct<b,a> (order)", _struct(bs, a64)),
        ("struct<a> (b missing)", _struct(a64)),
        ("struct<b> (a missing)", _struct(bs)),
        ("struct<a,b,c> (extra c)", _struct(a64, bs, pa.field("c", pa.int64()))),
        ("struct<a,x> (b renamed)", _struct(a64, pa.field("x", pa.string()))),
        ("struct<a not null,b>", _struct(pa.field("a", pa.int64(), nullable=False), bs)),
        ("struct<a,b:large_string>", _struct(a64, pa.field("b", pa.large_string()))),
    ]
    out += [Case("struct", f"struct<a:int64,b:string> <- {n}", one(base), one(t)) for n, t in structs]
    strict = _struct(pa.field("a", pa.int64(), nullable=False), bs)
    out += [
        Case("struct", "struct<a not null,b> <- struct<b> (a missing)", one(strict), one(_struct(bs))),
        Case("struct", "struct<a not null,b> <- struct<a,b>", one(strict), one(base)),
        Case(
            "struct",
            "list<struct<a,b>> <- list<struct<a:int32,b>>",
            one(pa.list_(base)),
            one(pa.list_(_struct(a32, bs))),
        ),
        Case("struct", "list<struct<a,b>> <- list<struct<b,a>>", one(pa.list_(base)), one(pa.list_(_struct(bs, a64)))),
        Case("struct", "list<struct<a,b>> <- list<struct<a>>", one(pa.list_(base)), one(pa.list_(_struct(a64)))),
        Case(
            "struct",
            "struct<s:struct<a,b>> <- struct<s:struct<b,a>>",
            one(_struct(pa.field("s", base))),
            one(_struct(pa.field("s", _struct(bs, a64)))),
        ),
    ]
    dicts = [
        pa.dictionary(pa.int32(), pa.string()),
        pa.dictionary(pa.int8(), pa.string()),
        pa.dictionary(pa.int32(), pa.large_string()),
        pa.dictionary(pa.int32(), pa.string(), ordered=True),
        pa.string(),
    ]
    out += _pairs("dictionary", dicts, diagonal=False)
    out += [
        Case("null", f"{a} <- {b}", one(a), one(b))
        for a, b in [(pa.null(), pa.int64()), (pa.int64(), pa.null()), (pa.string(), pa.null()), (pa.null(), pa.null())]
    ]
    nn = pa.field("c", pa.int64(), nullable=False)
    nullable = pa.field("c", pa.int64())
    with_null = pa.table({"k": pa.array([0, 1], pa.int64()), "c": pa.array([1, None], pa.int64())})
    out += [
        Case("nullability", "not null <- nullable (no nulls)", one(nn), one(nullable)),
        Case("nullability", "not null <- nullable (a null)", one(nn), with_null),
        Case("nullability", "nullable <- not null", one(nullable), one(nn)),
        Case(
            "nullability",
            "struct<a not null> <- struct<a> (a null)",
            one(strict),
            pa.table({"k": pa.array([0], pa.int64()), "c": pa.array([{"a": None, "b": "x"}], base)}),
        ),
        Case(
            "nullability",
            "list<item not null> <- list<item> (a null item)",
            one(pa.list_(pa.field("item", pa.int64(), nullable=False))),
            pa.table({"k": pa.array([0], pa.int64()), "c": pa.array([[1, None]], pa.list_(pa.int64()))}),
        ),
    ]
    two = pa.table({"k": pa.array([0, 1], pa.int64()), "c": pa.array([1, 2], pa.int64())})
    two_nn = two.cast(pa.schema([pa.field("k", pa.int64()), nn]))
    out += [
        Case("columns", "nullable column missing", two, two.select(["k"])),
        Case("columns", "non-nullable column missing", two_nn, two.select(["k"])),
        Case("columns", "extra column", two, two.append_column("e", pa.array([1, 2], pa.int64()))),
        Case("columns", "other column order", two, two.select(["c", "k"])),
        Case("columns", "column renamed", two, two.rename_columns(["k", "C"])),
        Case("columns", "no columns in common", two, pa.table({"z": pa.array([1, 2], pa.int64())})),
    ]
    meta = pa.schema([pa.field("k", pa.int64()), pa.field("c", pa.int64(), metadata={"unit": "m"})])
    out += [
        Case(
            "metadata",
            "field metadata differs",
            two.cast(meta),
            two.cast(meta.remove(1).append(pa.field("c", pa.int64(), metadata={"unit": "s"}))),
        ),
        Case("metadata", "field metadata missing", two.cast(meta), two),
        Case(
            "metadata",
            "schema metadata differs",
            two.replace_schema_metadata({"a": "1"}),
            two.replace_schema_metadata({"a": "2"}),
        ),
    ]
    return out


CASES: list[Case] = _cases()


@dataclass
class Verdict:
    """What a writer did with one append: ``refused`` (with the message), or
    the table's rows afterwards."""

    refused: bool
    message: str = ""
    result: pa.Table | None = None
    table_type: pa.Schema | None = None


def pylance_append(case: Case, version: str, root: str) -> Verdict | None:
    """pylance's verdict on ``case`` in a table of file version ``version``
    under the directory ``root``; None when pylance cannot create the table."""
    import lance

    uri = f"{root}/pylance-{version}"
    try:
        stored = lance.write_dataset(case.table, uri, data_storage_version=version).schema
    except Exception:  # noqa: BLE001 - a table type pylance cannot store
        return None
    try:
        ds = lance.write_dataset(case.data, uri, mode="append")
    except Exception as exc:  # noqa: BLE001 - pylance's refusal, whatever its class
        ds = lance.dataset(uri)
        assert ds.version == 1, f"pylance refused {case.id} but committed a version"
        message = str(exc).split("\n")[0].split(", location:")[0].split(", /home/")[0]
        return Verdict(True, message, table_type=stored)
    return Verdict(False, result=ds.to_table(), table_type=stored)


def describe(case: Case, v: Verdict | None) -> str:
    """``accepted`` (the data's types are the stored table's), ``accepted-with-cast``
    (stored in the table's types), ``refused: <pylance's message>``."""
    if v is None:
        return "table not creatable"
    if v.refused:
        return f"refused: {v.message}"
    assert v.table_type is not None
    data = {f.name: f for f in case.data.schema}
    same = len(data) == len(v.table_type) and all(
        f.name in data and str(data[f.name].type) == str(f.type) and data[f.name].type.equals(f.type)
        for f in v.table_type
    )
    return "accepted" if same else "accepted-with-cast"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--versions", default=",".join(VERSIONS))
    args = ap.parse_args(argv)
    versions = args.versions.split(",")
    print(f"| group | table <- data | pylance 14 ({', '.join(versions)}) |")
    print("|---|---|---|")
    for case in CASES:
        cells = []
        for version in versions:
            root = tempfile.mkdtemp(prefix="write-types-")
            try:
                cells.append(describe(case, pylance_append(case, version, root)))
            finally:
                shutil.rmtree(root, ignore_errors=True)
        verdict = cells[0] if len(set(cells)) == 1 else "; ".join(f"{v}: {c}" for v, c in zip(versions, cells))
        print(f"| {case.group} | {case.name} | {verdict} |".replace("`", "'"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
