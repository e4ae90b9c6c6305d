"""The operations that change a table's columns: add (computed from
expressions or given as data) and drop; renames, nullability and type changes
are :mod:`.schema_evolution`'s (``alter_columns``).

Each ``build_*`` function returns the transaction to commit on one version
(writing the new columns' data files first); :func:`add_columns` and
:func:`drop_columns` commit it through ``writes.run``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from tessera.commit import fragment_live_rows, new_transaction
from tessera.format.file import schema as lschema
from tessera.format.protos import table_pb2, transaction_pb2
from tessera.format.table import manifest as mf
from tessera.format.table.fragments import FragmentReader, write_fragments

from ..errors import InvalidArgumentError, SchemaMismatchError, UnknownColumnError
from ..query import predicate as lpred
from ..query.scan import evaluate, fields_by_name
from . import data as ldata
from . import schema_evolution as evo
from .snapshot import TableSnapshot
from .writes import Stage, run


def build_add_columns(table: TableSnapshot, columns) -> transaction_pb2.Transaction:
    schema = table.schema
    if isinstance(columns, dict):
        if not columns:
            raise InvalidArgumentError("add_columns needs at least one column")
        exprs = {}
        for name, spec in columns.items():
            lschema.check_column_name(name)
            if name in schema.names:
                raise InvalidArgumentError(f"column {name!r} already exists")
            exprs[name] = lpred.to_value_expression(spec, schema)
        need = sorted(set().union(*(lpred.value_columns(s, schema) for s in columns.values())))
        data = None
    else:
        data = ldata.to_table(columns)
        for name in data.column_names:
            lschema.check_column_name(name)
            if name in schema.names:
                raise InvalidArgumentError(f"column {name!r} already exists")
        rows = sum(fragment_live_rows(f) for f in table.manifest.fragments)
        if data.num_rows != rows:
            raise SchemaMismatchError(f"new column data has {data.num_rows} rows; the table has {rows} live rows")
        exprs, need = None, []
    need_fields = fields_by_name(table.fields, need)
    txn = new_transaction(table.version)
    merge = txn.merge
    new_schema = None
    new_fields = None
    live_base = 0
    for frag in table.manifest.fragments:
        reader = FragmentReader(table.store, frag, need_fields)
        n = frag.physical_rows
        if exprs is not None:
            arrays = reader.read(0, n) if need_fields else []
            batch = pa.RecordBatch.from_arrays(arrays, names=need) if arrays else pa.record_batch({"_": pa.nulls(n)})
            new_cols = {name: evaluate(e, batch) for name, e in exprs.items()}
        else:
            assert data is not None  # without expressions the new columns are given as data
            deleted = reader.deleted_rows().astype(np.int64)
            live = np.setdiff1d(np.arange(n), deleted, assume_unique=True)
            idx = np.full(n, -1, dtype=np.int64)
            idx[live] = np.arange(live_base, live_base + len(live))
            live_base += len(live)
            mask = idx < 0
            pick = pa.array(np.where(mask, 0, idx), mask=mask)
            new_cols = {name: data.column(name).take(pick).combine_chunks() for name in data.column_names}
        reader.close()
        new_tab = pa.table(new_cols)
        if new_fields is None:
            new_fields = lschema.fields_from_arrow(new_tab.schema, start_id=evo.next_field_id(table))
            new_schema = new_tab.schema
        new_tab = new_tab.cast(new_schema)
        out_frag = table_pb2.DataFragment()
        out_frag.CopyFrom(frag)
        written = write_fragments(
            table.store, new_tab.to_batches(), new_schema, new_fields, table.file_version, max_rows_per_file=max(n, 1)
        )
        if written:
            assert len(written) == 1
            out_frag.files.append(written[0].files[0])
        merge.fragments.append(out_frag)
    if new_fields is None:  # a table without fragments
        if exprs:
            sample = pa.table({k: pa.array([], pa.null()) for k in exprs})
        else:
            assert data is not None  # without expressions the new columns are given as data
            sample = data.schema.empty_table()
        new_fields = lschema.fields_from_arrow(sample.schema, start_id=evo.next_field_id(table))
    merge.schema.extend(lschema.fields_to_protos([*table.fields, *new_fields]))
    for k, v in table.manifest.schema_metadata.items():
        merge.schema_metadata[k] = v
    return txn


def build_drop_columns(table: TableSnapshot, names: Sequence[str]) -> transaction_pb2.Transaction:
    """A Project transaction with the schema minus the columns ``names``
    (top-level, or ``"s.b"`` for a struct's child: a struct left without
    children goes too, as pylance drops it).

    As pylance's, it carries only the new schema: the manifest built from it
    (commit/builder.py) loses every index naming a dropped field (a struct's
    children too) and the data files left without a field; the files stay on
    disk for older versions until a clean-up (docs/reference/index-lifecycle.md)."""
    existing = {f.name for f in table.fields}
    for n in names:
        if n not in existing and "." not in str(n):
            raise UnknownColumnError(f"cannot drop {n!r}: no such column; the table has {sorted(existing)}")
    if all(n in existing for n in names):
        keep = [f for f in table.fields if f.name not in set(names)]
    else:  # a struct's child ("s.b")
        keep = evo.drop_fields(table.fields, names)
    if not keep:
        raise InvalidArgumentError("cannot drop every column of a table")
    txn = new_transaction(table.version)
    txn.project.schema.extend(lschema.fields_to_protos(keep))
    return txn


def add_columns(table: TableSnapshot, columns, stage: Stage | None = None) -> mf.ManifestFile | None:
    """Add columns computed from expressions ({name: SQL or pyarrow expression}),
    given as data (a table with one row per live row) or as fields (a
    pa.Field, a list of them or a pa.Schema: all-null columns or struct
    children, metadata only, as pylance adds them)."""
    if evo.is_null_columns(columns):
        return run(table, lambda view, deleted: evo.build_add_null_columns(view, columns), stage)
    return run(table, lambda view, deleted: build_add_columns(view, columns), stage)


def drop_columns(
    table: TableSnapshot, names: str | Sequence[str], stage: Stage | None = None
) -> mf.ManifestFile | None:
    """Drop the columns ``names`` (``"s.b"``: a struct's child)."""
    names = [names] if isinstance(names, str) else list(names)
    return run(table, lambda view, deleted: build_drop_columns(view, names), stage)
