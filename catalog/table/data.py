"""Turning what users pass as data into Arrow record batches."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from tessera.format.file.schema import dictionary_value_supported

from ..errors import InvalidArgumentError

Data = Any
"""Rows as anything :func:`to_reader` accepts: a pyarrow Table, RecordBatch(Reader)
or Dataset, a pandas DataFrame, a Polars frame, a list of dicts, a dict of
columns, or any Arrow C stream."""


def to_reader(data, schema: pa.Schema | None = None) -> pa.RecordBatchReader:
    """A RecordBatchReader over ``data``: a pyarrow Table, RecordBatch or
    RecordBatchReader, a pandas DataFrame, a dict of columns, a list of dicts,
    or anything exporting the Arrow C stream interface."""
    if isinstance(data, pa.RecordBatchReader):
        return data
    if isinstance(data, pa.Table):
        return pa.RecordBatchReader.from_batches(data.schema, data.to_batches())
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatchReader.from_batches(data.schema, [data])
    if type(data).__module__.startswith("pandas"):
        return to_reader(from_pandas(data, schema))
    if isinstance(data, dict):
        return to_reader(pa.table(data, schema=schema))
    if isinstance(data, list) and (not data or isinstance(data[0], dict)):
        if not data and schema is None:
            raise InvalidArgumentError("an empty list has no schema; pass a pyarrow schema")
        return to_reader(pa.Table.from_pylist(data, schema=schema))
    if hasattr(data, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(data)
    if hasattr(data, "to_arrow"):  # polars and friends
        return to_reader(data.to_arrow(), schema)
    raise InvalidArgumentError(
        f"cannot use {type(data).__name__} as table data: pass a pyarrow Table, RecordBatch, "
        "RecordBatchReader, pandas DataFrame, dict of columns or list of dicts"
    )


def to_table(data, schema: pa.Schema | None = None) -> pa.Table:
    return to_reader(data, schema).read_all()


def iter_batches(reader: pa.RecordBatchReader) -> Iterable[pa.RecordBatch]:
    while True:
        try:
            yield reader.read_next_batch()
        except StopIteration:
            return


# -- pandas -----------------------------------------------------------------------------
#
# pyarrow records each column's pandas dtype in the schema metadata (b"pandas"), and
# Table.to_pandas() reads it back: nullable Int64/boolean/string/Float64 columns come
# back with those dtypes rather than float64/object. Tessera keeps that metadata in the
# table's schema, so to_pandas round-trips them.
#
# pandas Categorical columns arrive as Arrow dictionary arrays and are stored, as
# pylance 14 stores them, as dictionary columns (logical type dict:<value>:<index>:
# <ordered>): Table.to_pandas() gives back a Categorical with the same categories, in
# their order, and the ordered flag (which pylance does not keep). Categoricals whose
# categories Lance cannot hold as dictionary values (dates, timestamps, decimals, ...;
# pylance refuses them) are stored as their value type, the categories and ordered
# flag kept in the pandas metadata; so were every Categorical's before Tessera wrote
# dictionary columns, and to_pandas still reads such tables back as Categoricals.

_PANDAS = b"pandas"
_CATEGORIES = "tessera_categories"


def from_pandas(df, schema: pa.Schema | None = None) -> pa.Table:
    """A pandas DataFrame as an Arrow table (its index dropped, the pandas
    metadata kept): Categorical columns as dictionary columns, those whose
    categories Lance cannot store as dictionary values decoded to their type."""
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        if isinstance(df, pd.Series):
            df = df.to_frame()
        else:
            raise InvalidArgumentError(f"cannot use pandas {type(df).__name__} as table data; pass a DataFrame")
    try:
        table = pa.Table.from_pandas(df, schema=schema, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError) as e:
        raise InvalidArgumentError(f"cannot convert the DataFrame to Arrow: {e}") from e
    categorical = {}
    for i, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type) and not dictionary_value_supported(field.type.value_type):
            column = table.column(i).cast(field.type.value_type)
            table = table.set_column(i, field.with_type(field.type.value_type), column)
            if field.name in df.columns and isinstance(df[field.name].dtype, pd.CategoricalDtype):
                categorical[field.name] = df[field.name].dtype
    meta = dict(table.schema.metadata or {})
    if categorical and _PANDAS in meta:
        pandas_meta = json.loads(meta[_PANDAS])
        for col in pandas_meta.get("columns", []):
            dtype = categorical.get(col.get("field_name"))
            if dtype is None or col.get("pandas_type") != "categorical":
                continue
            col["metadata"] = dict(col.get("metadata") or {}, ordered=bool(dtype.ordered))
            try:  # the categories themselves, when JSON can carry them exactly
                values = pa.array(dtype.categories.to_numpy()).to_pylist()
                if all(isinstance(v, (str, bool, int, float)) for v in values):
                    col["metadata"][_CATEGORIES] = values
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
                pass
        meta[_PANDAS] = json.dumps(pandas_meta).encode()
    return table.replace_schema_metadata(meta or None)


def to_pandas(table: pa.Table, metadata: dict | None = None):
    """``table.to_pandas()``, honouring the pandas metadata Tessera keeps (the
    table's own, else ``metadata``, the table schema's): nullable dtypes come
    back as written and Categorical columns as Categoricals (dictionary columns
    by themselves; Categoricals stored as their values from the metadata)."""
    import pandas as pd

    if not table.schema.metadata and metadata:
        table = table.replace_schema_metadata(metadata)
    df = table.to_pandas()
    raw = (table.schema.metadata or {}).get(_PANDAS)
    if raw is None:
        return df
    try:
        columns = json.loads(raw).get("columns", [])
    except (ValueError, AttributeError):
        return df
    for col in columns:
        name, meta = col.get("field_name"), col.get("metadata") or {}
        if col.get("pandas_type") != "categorical" or name not in df.columns:
            continue
        if isinstance(df[name].dtype, pd.CategoricalDtype):
            continue
        known = list(meta.get(_CATEGORIES) or [])
        present = pd.unique(df[name].dropna())
        seen = set(known)
        extra = [v for v in present if v not in seen]
        try:
            extra = sorted(extra)
        except TypeError:
            pass
        dtype = pd.CategoricalDtype(known + extra, ordered=bool(meta.get("ordered", False)))
        df[name] = df[name].astype(dtype)
    return df


def to_duckdb(dataset: Any, name: str | None, connection: Any) -> Any:
    """A DuckDB relation over ``dataset`` (a table's pyarrow Dataset view),
    also registered as the view ``name`` on ``connection`` when a name is given
    (DuckDB's default connection when none is)."""
    import duckdb

    if connection is None:
        default = duckdb.default_connection
        connection = default() if callable(default) else default
    elif not isinstance(connection, duckdb.DuckDBPyConnection):
        raise InvalidArgumentError(f"connection must be a duckdb connection, not {type(connection).__name__}")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise InvalidArgumentError(f"name must be a non-empty string, got {name!r}")
    if name is None:
        return connection.from_arrow(dataset)
    connection.register(name, dataset)
    return connection.view(name)
