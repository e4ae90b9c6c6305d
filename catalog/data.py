"""Turning what users pass as data into Arrow record batches."""

from __future__ import annotations

from typing import Iterable

import pyarrow as pa

from .errors import InvalidArgumentError


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
        table = pa.Table.from_pandas(data, schema=schema, preserve_index=False)
        return to_reader(table.replace_schema_metadata(None) if schema is None else table)
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
