"""Spark <-> Arrow types for the ``tessera`` Spark data source.

Reading maps every Arrow type Tessera's format stores onto the closest Spark
type; the batches handed to Spark are then cast to exactly the Arrow schema
Spark derives from that Spark type (``to_arrow_schema(schema, timezone="UTC")``),
column order and nullability included.

======================  ===============================  ==========================
Arrow (stored)          Spark                            Note
======================  ===============================  ==========================
bool, int8..int64       Boolean, Byte, Short, Int, Long
uint8 / uint16 / uint32 Short / Int / Long               widened
uint64                  Decimal(20, 0)                   widened, exact
float16/32, float64     Float, Double
string, large_string    String
binary, large_binary,   Binary
fixed_size_binary
date32, date64          Date
timestamp[any, tz]      Timestamp                        truncated to microseconds
timestamp[any]          TimestampNTZ                     truncated to microseconds
time32/time64           Time                             Spark 4.1+
duration                DayTimeInterval                  truncated to microseconds
decimal128/256 (p<=38)  Decimal(p, s)
list, large_list,       Array
fixed_size_list
struct                  Struct
null                    Null
======================  ===============================  ==========================

Writing a DataFrame that creates (or overwrites) a table stores Spark's own
Arrow types (timestamps as ``timestamp[us, tz=UTC]``, lists with an ``item``
child).  Appending (or ``replaceWhere``) follows pylance's write rule in
Spark's types: each DataFrame column must have the Spark type the table's
column reads as (the table above, read right to left; no widening), and its
values go in exactly (a Short into a uint8 column must fit).  Maps, calendar
and year-month intervals, variants, geometry types and user-defined types
have no Tessera type: :class:`UnsupportedSparkTypeError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from tessera.catalog.errors import SchemaMismatchError, UnsupportedSparkTypeError
from tessera.format.table.write_types import check_write_schema, identical_types
from tessera.format.table.write_types import conform_batch as conform

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql.types import DataType, StructType

#: the child name Lance and Arrow use for list items (Spark says "element")
LIST_ITEM = "item"


# -- Arrow -> Spark (reads) -----------------------------------------------------------------


def spark_type_of(t: pa.DataType, where: str = "") -> DataType:
    """The Spark type a column of Arrow type ``t`` reads as."""
    from pyspark.sql import types as T

    if pa.types.is_dictionary(t):  # a Categorical column: Spark reads its values
        return spark_type_of(t.value_type, where)
    simple = {
        pa.bool_(): T.BooleanType(),
        pa.int8(): T.ByteType(),
        pa.int16(): T.ShortType(),
        pa.int32(): T.IntegerType(),
        pa.int64(): T.LongType(),
        pa.uint8(): T.ShortType(),
        pa.uint16(): T.IntegerType(),
        pa.uint32(): T.LongType(),
        pa.uint64(): T.DecimalType(20, 0),
        pa.float16(): T.FloatType(),
        pa.float32(): T.FloatType(),
        pa.float64(): T.DoubleType(),
        pa.string(): T.StringType(),
        pa.large_string(): T.StringType(),
        pa.binary(): T.BinaryType(),
        pa.large_binary(): T.BinaryType(),
        pa.date32(): T.DateType(),
        pa.date64(): T.DateType(),
        pa.null(): T.NullType(),
    }
    if t in simple:
        return simple[t]
    if pa.types.is_fixed_size_binary(t):
        return T.BinaryType()
    if pa.types.is_timestamp(t):
        return T.TimestampType() if t.tz else T.TimestampNTZType()
    if pa.types.is_time(t) and hasattr(T, "TimeType"):
        return T.TimeType()
    if pa.types.is_duration(t):
        return T.DayTimeIntervalType()
    if pa.types.is_decimal(t):
        if t.precision > 38:
            raise UnsupportedSparkTypeError(
                f"column {where!r} is {t}: Spark decimals hold at most 38 digits; read it with pylance or cast it"
            )
        return T.DecimalType(t.precision, t.scale)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return T.ArrayType(spark_type_of(t.value_type, f"{where}[]"), t.value_field.nullable)
    if pa.types.is_struct(t):
        return T.StructType([T.StructField(f.name, spark_type_of(f.type, f"{where}.{f.name}"), f.nullable) for f in t])
    raise UnsupportedSparkTypeError(f"column {where!r} has Arrow type {t}, which Spark cannot read")


def spark_schema_of(schema: pa.Schema) -> StructType:
    """The Spark schema of a table with Arrow schema ``schema``."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField(f.name, spark_type_of(f.type, f.name), f.nullable) for f in schema])


def spark_arrow_schema(schema: StructType) -> pa.Schema:
    """Exactly the Arrow schema Spark accepts from ``read()`` for ``schema``."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def to_spark_batch(arrays: list[pa.Array], target: pa.Schema) -> pa.RecordBatch:
    """A batch of ``target`` (a :func:`spark_arrow_schema`) from stored arrays in
    the same order; casts where the stored type differs (never a value change
    except the documented sub-microsecond truncation)."""
    out = []
    for arr, f in zip(arrays, target):
        if not arr.type.equals(f.type):
            arr = arr.cast(f.type, safe=False)
        out.append(arr)
    return pa.RecordBatch.from_arrays(out, schema=target)


# -- Spark -> Arrow (writes) ----------------------------------------------------------------


def arrow_type_for(dt: DataType, where: str) -> pa.DataType:
    """The Arrow type a Spark column is stored as in a new table."""
    from pyspark.sql import types as T

    simple = {
        T.BooleanType: pa.bool_(),
        T.ByteType: pa.int8(),
        T.ShortType: pa.int16(),
        T.IntegerType: pa.int32(),
        T.LongType: pa.int64(),
        T.FloatType: pa.float32(),
        T.DoubleType: pa.float64(),
        T.StringType: pa.string(),
        T.BinaryType: pa.binary(),
        T.DateType: pa.date32(),
        T.TimestampType: pa.timestamp("us", tz="UTC"),
        T.TimestampNTZType: pa.timestamp("us"),
        T.NullType: pa.null(),
    }
    for cls, at in simple.items():
        if type(dt) is cls:
            return at
    if isinstance(dt, T.DecimalType):
        return pa.decimal128(dt.precision, dt.scale)
    if isinstance(dt, T.DayTimeIntervalType):
        return pa.duration("us")
    if hasattr(T, "TimeType") and isinstance(dt, T.TimeType):
        return pa.time64("ns")
    if isinstance(dt, T.ArrayType):
        return pa.list_(pa.field(LIST_ITEM, arrow_type_for(dt.elementType, f"{where}[]"), dt.containsNull))
    if isinstance(dt, T.StructType):
        return pa.struct([pa.field(f.name, arrow_type_for(f.dataType, f"{where}.{f.name}"), f.nullable) for f in dt])
    hint = {
        "MapType": "store it as an array of key/value structs (map_entries()) or as JSON (to_json())",
        "CalendarIntervalType": "use a day-time interval or two numeric columns",
        "YearMonthIntervalType": "store the number of months as an integer",
        "VariantType": "store it as JSON text (to_json())",
    }.get(type(dt).__name__, "cast it to a supported type first")
    raise UnsupportedSparkTypeError(
        f"column {where!r} has Spark type {dt.simpleString()}, which a Tessera table cannot store; {hint}"
    )


def arrow_schema_for(schema: StructType) -> pa.Schema:
    """The Arrow schema of a table created from a DataFrame with ``schema``."""
    names = [f.name for f in schema]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise SchemaMismatchError(f"the DataFrame has duplicate column names {sorted(dup)}; rename them first")
    return pa.schema([pa.field(f.name, arrow_type_for(f.dataType, f.name), f.nullable) for f in schema])


def spark_view(table: pa.Schema) -> pa.Schema:
    """The table's schema as Spark writes it: each column in the Arrow type of
    the Spark type it reads as (uint8 as int16, large_string as string, a
    dictionary as its values, timestamp[ns, tz] as timestamp[us, UTC], ...),
    the table's names and nullability kept."""
    return pa.schema(
        [pa.field(f.name, arrow_type_for(spark_type_of(f.type, f.name), f.name), f.nullable) for f in table]
    )


def check_append_columns(schema: StructType, table: pa.Schema) -> None:
    """Refuse, before any task runs, a DataFrame the table does not take.

    The rule is pylance's (``format/table/write_types.py``) in Spark's types:
    each DataFrame column must have the Spark type the table's column reads as
    (``spark.read.format("tessera")``'s schema; no widening, no other type),
    columns are matched by name, and a nullable column may be left out."""
    incoming = arrow_schema_for(schema)
    mine = set(schema.fieldNames())
    missing = sorted(f.name for f in table if f.name not in mine and not f.nullable)
    extra = sorted(mine - set(table.names))
    if missing or extra:
        raise SchemaMismatchError(
            f"the DataFrame's columns do not match the table's: missing {missing}, unknown {extra}; "
            "select the table's columns, or use mode('overwrite') to replace the schema"
        )
    view = spark_view(table)
    try:
        check_write_schema(incoming, view, what="the DataFrame")
    except SchemaMismatchError as exc:
        wanted = ", ".join(f"{f.name} {spark_type_of(f.type, f.name).simpleString()}" for f in table)
        raise SchemaMismatchError(
            f"{exc} (in Spark's types the table is: {wanted}; cast the DataFrame's columns to them, "
            "e.g. selectExpr('cast(id AS bigint) AS id'))"
        ) from None


def conform_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """Spark's Arrow batch in the table's ``schema``: Spark's own Arrow
    representation of each column (a timestamp in the session's zone, a
    string or large string) as :func:`arrow_type_for` writes it, then pylance's
    write rule against :func:`spark_view` (names, order, missing nullable
    columns, nulls), then each column in the table's type, exactly (a value
    the table's type cannot hold is refused: 300 into uint8)."""
    view = spark_view(schema)
    canonical = []
    for f in batch.schema:
        want = arrow_type_for(spark_type_of(f.type, f.name), f.name)
        canonical.append(pa.field(f.name, want, f.nullable))
    if not all(identical_types(f.type, g.type) for f, g in zip(batch.schema, canonical)):
        # the same Spark types in Spark's Arrow representation: no value changes
        batch = pa.RecordBatch.from_arrays(
            [col.cast(f.type) for col, f in zip(batch.columns, canonical)], schema=pa.schema(canonical)
        )
    batch = conform(batch, view)
    if all(identical_types(f.type, g.type) for f, g in zip(view, schema)):
        return batch
    cols = []
    for col, f in zip(batch.columns, schema):
        if not identical_types(col.type, f.type):
            col = _as_table_type(col, f)
        cols.append(col)
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def _as_table_type(col: pa.Array, f: pa.Field) -> pa.Array:
    """A column of Spark's type as the table's (uint8, float16, a dictionary...):
    exact or refused."""
    try:
        if pa.types.is_dictionary(f.type):  # a Categorical column: its values, encoded
            return col.cast(f.type.value_type, safe=True).cast(f.type)
        return col.cast(f.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        hint = ""
        if pa.types.is_dictionary(f.type):
            hint = "; if there are more distinct values than the dictionary's indices can count, lower write_batch_rows"
        raise SchemaMismatchError(
            f"column {f.name!r}: a value of the DataFrame does not fit the table's {f.type} ({exc}){hint}"
        ) from None
