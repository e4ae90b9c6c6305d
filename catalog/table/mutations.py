"""The operations that change rows: delete, update and merge_insert.

Each ``build_*`` function reads the table at one version, writes whatever new
files it needs (data files, deletion files), records the rows it deletes and
returns the Transaction to commit; :func:`delete`, :func:`update` and
:func:`merge_insert` commit it through ``writes.run``, which re-runs it on
the latest version when a concurrent commit forces it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tessera.commit import new_transaction
from tessera.format.protos import table_pb2, transaction_pb2
from tessera.format.table import deletion as ldeletion
from tessera.format.table import lineage as llineage
from tessera.format.table import manifest as mf
from tessera.format.table import paths
from tessera.format.table.fragments import FragmentReader, write_fragments

from ..errors import InvalidArgumentError, SchemaMismatchError, UnknownColumnError
from ..query import predicate as lpred
from ..query.scan import ROW_ADDRESS, Scan, evaluate, fields_by_name, mask_of
from . import data as ldata
from .snapshot import TableSnapshot
from .writes import DeletedRows, Stage, run

BATCH = 64 * 1024


def _matches(reader: FragmentReader, names: list[str], expr) -> tuple[np.ndarray, list[pa.RecordBatch]]:
    """Physical offsets of live rows matching ``expr`` (all live rows if None),
    with their ``names`` columns when asked."""
    frag = reader.fragment
    hits, batches = [], []
    for start in range(0, frag.physical_rows, BATCH):
        stop = min(start + BATCH, frag.physical_rows)
        arrays = reader.read(start, stop)
        batch = (
            pa.RecordBatch.from_arrays(arrays, names=names)
            if arrays
            else pa.record_batch({"_": pa.nulls(stop - start)})
        )
        m = mask_of(expr, batch) if expr is not None else np.ones(stop - start, bool)
        live = reader.live_mask(start, stop)
        if live is not None:
            m &= live
        if m.any():
            hits.append(np.nonzero(m)[0] + start)
            batches.append(batch.filter(pa.array(m)))
    offs = np.concatenate(hits) if hits else np.zeros(0, np.int64)
    return offs, batches


#: rows per read of a matching scan (bigger than a query's batches: the rows are written again)
MATCH_BATCH = 1 << 16


def _scanned_matches(
    table: TableSnapshot, where, columns: list[str]
) -> Iterator[tuple[table_pb2.DataFragment, np.ndarray, list[pa.RecordBatch]]]:
    """The live rows matching ``where`` (every live row if None), fragment by
    fragment: ``(fragment, physical offsets, the rows' columns)`` for each
    fragment with a match, in the manifest's order.

    They are read as a filtered scan reads them (``query/scan.py``): zone maps
    skip the fragments and row ranges no zone can match, the filter's columns
    are read first and ``columns`` only for the rows it keeps, and data file
    tails come from the process's parsed-tail cache.  A table with a column
    named ``_rowaddr`` is read fragment by fragment instead (:func:`_matches`)."""
    if ROW_ADDRESS in table.schema.names:
        expr = lpred.to_expression(where, table.schema) if where is not None else None
        used = sorted(lpred.referenced_columns(where, table.schema)) if where is not None else []
        names = list(columns) + [c for c in used if c not in columns]
        fields = fields_by_name(table.fields, names)
        for frag in table.manifest.fragments:
            reader = FragmentReader(table.store, frag, fields)
            try:
                offs, found = _matches(reader, names, expr)
            finally:
                reader.close()
            if len(offs):
                yield frag, offs, [b.select(columns) for b in found]
        return
    scan = Scan(
        table.store,
        table.manifest.fragments,
        table.fields,
        table.schema,
        columns,
        where,
        batch_size=MATCH_BATCH,
        with_row_address=True,
        file_cache=table.files,
    )
    if where is not None:
        from ..query.pruning import pruner

        scan.row_ranges = pruner(table.store, table.index_section, table.fields, table.schema, where, scan.fragments)
    by_id = {f.id: f for f in table.manifest.fragments}
    out_names = list(columns)
    current: int | None = None
    offsets: list[np.ndarray] = []
    batches: list[pa.RecordBatch] = []
    for batch in scan.batches():
        if not batch.num_rows:
            continue
        addr = batch.column(len(out_names)).to_numpy()
        ids = addr >> np.uint64(32)
        rows = pa.RecordBatch.from_arrays(batch.columns[: len(out_names)], names=out_names)
        # a read never spans two fragments, but a batch is split wherever the id changes all the same
        cuts = np.flatnonzero(ids[1:] != ids[:-1]) + 1
        for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(ids)]):
            fid = int(ids[a])
            if fid != current:
                if current is not None:
                    yield by_id[current], np.concatenate(offsets), batches
                current, offsets, batches = fid, [], []
            offsets.append((addr[a:b] & np.uint64(0xFFFFFFFF)).astype(np.int64))
            batches.append(rows.slice(a, b - a))
    if current is not None:
        yield by_id[current], np.concatenate(offsets), batches


def _with_deletions(
    table: TableSnapshot,
    frag: table_pb2.DataFragment,
    reader: FragmentReader,
    rows: np.ndarray,
    recorded: DeletedRows,
) -> table_pb2.DataFragment | None:
    """A copy of ``frag`` with ``rows`` also deleted; None if nothing is left.

    The newly deleted rows are recorded in ``recorded`` so a rebase can merge
    them into a concurrent writer's deletion vector."""
    recorded[frag.id] = np.asarray(rows, dtype=np.int64)
    deleted = np.union1d(reader.deleted_rows().astype(np.int64), rows.astype(np.int64))
    if len(deleted) >= frag.physical_rows:
        return None
    meta, data = ldeletion.encode(deleted, table.version)
    table.store.put(paths.deletion_file_path(frag.id, meta), data)
    out = table_pb2.DataFragment()
    out.CopyFrom(frag)
    out.deletion_file.CopyFrom(meta)
    return out


def _delete_rows(table, frag, reader, rows, recorded: DeletedRows, updated_list, removed_list) -> None:
    """Record ``rows`` of ``frag`` as deleted: an updated fragment with a new
    deletion file, or the fragment's removal when nothing of it is left."""
    updated = _with_deletions(table, frag, reader, rows, recorded)
    if updated is None:
        removed_list.append(frag.id)
    else:
        updated_list.append(updated)


def build_delete(table: TableSnapshot, predicate, deleted: DeletedRows) -> transaction_pb2.Transaction | None:
    """A Delete of the rows matching ``predicate`` (None: no row matches)."""
    lpred.to_expression(predicate, table.schema)  # a bad predicate fails before anything is read
    txn = new_transaction(table.version)
    d = txn.delete
    d.predicate = lpred.to_sql(predicate)
    for frag, rows, _ in _scanned_matches(table, predicate, []):
        reader = FragmentReader(table.store, frag, [])
        _delete_rows(table, frag, reader, rows, deleted, d.updated_fragments, d.deleted_fragment_ids)
        reader.close()
    if not d.updated_fragments and not d.deleted_fragment_ids:
        return None  # nothing matched: no new version, as pylance does
    return txn


def _new_value(spec, batch: pa.RecordBatch, field: pa.Field, schema: pa.Schema) -> pa.Array:
    """The column ``field``'s new values for the rows of ``batch``.

    A SQL value (or pyarrow Expression) and a Python literal (which LanceDB
    sends to pylance as SQL) are cast to the column's type as pylance casts
    them (:func:`.assign.assign`); a pyarrow Scalar is typed data and follows
    pylance's write rule (its type must be the column's: format/table/write_types.py)."""
    from tessera.format.table.write_types import check_nulls, check_write_schema, conform_array

    from .assign import assign

    if isinstance(spec, pa.Scalar) and not pa.types.is_null(spec.type):
        check_write_schema(pa.schema([field.with_type(spec.type)]), pa.schema([field]), what="the update value")
        arr = conform_array(pa.repeat(spec, batch.num_rows), field.type)
    else:
        if isinstance(spec, pc.Expression) or isinstance(spec, str):
            arr = evaluate(lpred.to_value_expression(spec, schema), batch)
        elif isinstance(spec, pa.Scalar):  # a typed NULL
            arr = pa.nulls(batch.num_rows)
        else:
            try:
                arr = pa.array([spec] * batch.num_rows)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise InvalidArgumentError(f"cannot use {spec!r} as a value of column {field.name!r}: {exc}") from None
        arr = assign(arr, field)
    check_nulls(arr, field)
    return arr


def _field_ids(table, names) -> list[int]:
    """The top-level field ids of columns ``names``, in the table's order."""
    return [f.id for f in table.fields if f.name in set(names)]


def _write_moved(table, u, batches: list[pa.RecordBatch], moved: llineage.MovedRows | None) -> None:
    """Write ``batches`` as the Update's new fragments; the first ``len(moved)``
    rows are the moved rows, which keep their row ids (stable row ids)."""
    frags = write_fragments(
        table.store, batches, table.schema, table.fields, table.file_version, table.max_rows_per_file
    )
    if moved is not None and len(moved):
        moved.attach(frags)
    u.new_fragments.extend(frags)


def _check_values(values: dict, schema: pa.Schema) -> None:
    """Refuse, before anything is written, an update value the column cannot
    take: a constant is computed (``'abc'`` into an integer fails here), an
    expression over columns for one row of NULLs (its type is checked)."""
    row = pa.RecordBatch.from_arrays([pa.nulls(1, f.type) for f in schema], names=schema.names)
    for name, spec in values.items():
        f = schema.field(name)
        if isinstance(spec, (str, pc.Expression)) and lpred.value_columns(spec, schema):
            f = f.with_nullable(True)  # the NULL row says nothing about the values' nulls
        _new_value(spec, row, f, schema)


def _rewrite_rows(table, where, make_rows, modified, deleted: DeletedRows) -> transaction_pb2.Transaction | None:
    """Delete the rows matching ``where`` and write ``make_rows(batch)`` in
    their place: an Update in pylance's "rewrite rows" mode; with stable row
    ids the rows keep their ids.  ``modified`` names the columns set."""
    if where is not None:
        lpred.to_expression(where, table.schema)  # a bad filter fails before anything is read
    names = list(table.schema.names)
    txn = new_transaction(table.version)
    u = txn.update
    u.update_mode = transaction_pb2.Transaction.REWRITE_ROWS
    u.fields_for_preserving_frag_bitmap.extend(_field_ids(table, modified))
    moved = llineage.MovedRows(table.store) if table.stable_row_ids else None
    new_batches: list[pa.RecordBatch] = []
    for frag, rows, batches in _scanned_matches(table, where, names):
        for b in batches:
            new_batches.append(make_rows(b))
        if moved is not None:
            moved.add(frag, rows)
        reader = FragmentReader(table.store, frag, [])
        _delete_rows(table, frag, reader, rows, deleted, u.updated_fragments, u.removed_fragment_ids)
        reader.close()
    if not new_batches:
        return None
    _write_moved(table, u, new_batches, moved)
    return txn


def build_update(table: TableSnapshot, values: dict, where, deleted: DeletedRows) -> transaction_pb2.Transaction | None:
    if not isinstance(values, dict) or not values:
        raise InvalidArgumentError("update needs a non-empty dict of column -> value or expression")
    schema = table.schema
    for name in values:
        if name not in schema.names:
            raise UnknownColumnError(f"cannot update {name!r}: no such column; the table has {schema.names}")
    # parse expressions up front so a bad one fails before anything is written
    for spec in values.values():
        if isinstance(spec, (str, pc.Expression)):
            lpred.to_value_expression(spec, schema)
    _check_values(values, schema)

    def make_rows(batch: pa.RecordBatch) -> pa.RecordBatch:
        cols = []
        for f in schema:
            cols.append(_new_value(values[f.name], batch, f, schema) if f.name in values else batch.column(f.name))
        return pa.RecordBatch.from_arrays(cols, schema=schema)

    return _rewrite_rows(table, where, make_rows, list(values), deleted)


def build_merge_insert(
    table: TableSnapshot,
    source: pa.Table,
    on: list[str],
    update_matched: bool,
    insert_unmatched: bool,
    delete_unmatched_target: bool,
    stats: dict,
    deleted: DeletedRows,
) -> transaction_pb2.Transaction | None:
    """The Update transaction of a merge-insert, with pylance's semantics:

    * every target row whose key equals a source row's is *matched*; with
      ``update_matched`` each matched target row is replaced by its source
      row (target rows sharing a key are each updated: two target rows with
      key 2 and one source row with key 2 give two updated rows);
    * a target row matched by two source rows is ambiguous: InvalidArgumentError,
      nothing written (source rows sharing a key that matches no target row
      are simply inserted);
    * NULL keys never match (SQL equality): such source rows are inserted,
      such target rows are never updated;
    * ``insert_unmatched`` inserts the source rows that matched no target row;
      ``delete_unmatched_target`` deletes the target rows no source row matched.

    ``stats`` gets num_updated_rows (target rows replaced), num_inserted_rows
    and num_deleted_rows."""
    schema = table.schema
    for k in on:
        if k not in schema.names:
            raise UnknownColumnError(f"merge key {k!r} is not a column of the table {schema.names}")
        if k not in source.column_names:
            raise SchemaMismatchError(f"merge key {k!r} is missing from the source data")
    from tessera.format.table.fragments import check_write_schema, conform_batch

    # pylance's write rule, keys included (a string "1" never matches the integer 1), checked before
    # anything is read or written; every column is needed (pylance's partial update is not supported)
    absent = [n for n in schema.names if n not in source.column_names]
    if absent:
        raise SchemaMismatchError(
            f"the merge_insert source has no column {absent}: Tessera's merge_insert writes whole rows, so the "
            "source needs every column of the table (pylance would update only the columns given)"
        )
    check_write_schema(source.schema, schema, allow_missing=False, what="the merge_insert source")
    batches = [conform_batch(b, schema, allow_missing=False) for b in source.to_batches()]
    source = pa.Table.from_batches(batches, schema=schema)
    keys = source.select(on)
    src_keys = keys.append_column("__src", pa.array(np.arange(source.num_rows, dtype=np.int64)))
    fields = fields_by_name(table.fields, on)
    txn = new_transaction(table.version)
    u = txn.update
    matched_src: list[np.ndarray] = []
    updated_from: list[np.ndarray] = []  # the source row replacing each matched target row
    n_deleted = n_updated = 0
    moved = llineage.MovedRows(table.store) if table.stable_row_ids else None
    plans = []
    for frag in table.manifest.fragments:
        reader = FragmentReader(table.store, frag, fields)
        offs, batches = _matches(reader, on, None)
        if not len(offs):
            reader.close()
            continue
        tgt = pa.Table.from_batches(batches).append_column("__off", pa.array(offs.astype(np.int64)))
        joined = tgt.join(src_keys, keys=on, join_type="inner")  # NULL keys never match
        hit_off = joined.column("__off").to_numpy()
        hit_src = joined.column("__src").to_numpy()
        uniq, counts = np.unique(hit_off, return_counts=True)
        if len(uniq) != len(hit_off):
            dup = int(uniq[counts > 1][0])
            row = joined.filter(pc.equal(joined.column("__off"), dup)).select(on).slice(0, 1).to_pylist()[0]
            reader.close()
            raise InvalidArgumentError(
                f"ambiguous merge_insert: several source rows match the same target row (key {row}); "
                "each target row may be matched by at most one source row - deduplicate the source"
            )
        matched_src.append(hit_src)
        drop = np.zeros(0, np.int64)
        if update_matched and len(hit_off):
            drop = hit_off
            order = np.argsort(hit_off, kind="stable")
            updated_from.append(hit_src[order])
            n_updated += len(hit_off)
            if moved is not None:
                moved.add(frag, hit_off[order])
        if delete_unmatched_target:
            unmatched = np.setdiff1d(offs, hit_off)
            n_deleted += len(unmatched)
            drop = np.union1d(drop, unmatched)
        plans.append((frag, reader, drop))
    for frag, reader, drop in plans:
        if len(drop):
            _delete_rows(table, frag, reader, drop, deleted, u.updated_fragments, u.removed_fragment_ids)
        reader.close()
    matched = np.unique(np.concatenate(matched_src)) if matched_src else np.zeros(0, np.int64)
    unmatched_src = np.setdiff1d(np.arange(source.num_rows), matched)
    take = []
    if update_matched:
        take.extend(updated_from)
    if insert_unmatched:
        take.append(unmatched_src)
    rows = np.concatenate(take).astype(np.int64) if take else np.zeros(0, np.int64)
    stats.update(
        num_updated_rows=int(n_updated),
        num_inserted_rows=int(len(unmatched_src)) if insert_unmatched else 0,
        num_deleted_rows=n_deleted,
    )
    if len(rows):
        # the updated rows first (they keep their row ids), then the inserted ones
        _write_moved(table, u, source.take(pa.array(rows)).to_batches(), moved)
    if not (u.new_fragments or u.updated_fragments or u.removed_fragment_ids):
        return None
    u.update_mode = transaction_pb2.Transaction.REWRITE_ROWS
    u.fields_for_preserving_frag_bitmap.extend(_field_ids(table, schema.names))
    return txn


def delete(table: TableSnapshot, predicate, stage: Stage | None = None) -> mf.ManifestFile | None:
    """Delete the rows matching ``predicate`` (None: none matched, no version)."""
    return run(table, lambda view, deleted: build_delete(view, predicate, deleted), stage)


def update(table: TableSnapshot, values: dict, where, stage: Stage | None = None) -> mf.ManifestFile | None:
    """Set columns on the rows matching ``where`` (all rows when None)."""
    return run(table, lambda view, deleted: build_update(view, values, where, deleted), stage)


def merge_insert(
    table: TableSnapshot,
    data: ldata.Data,
    on: str | Sequence[str],
    update_matched: bool,
    insert_unmatched: bool,
    delete_unmatched_target: bool,
    stage: Stage | None = None,
) -> tuple[mf.ManifestFile | None, dict[str, int]]:
    """Upsert ``data`` by the key columns ``on``: the new version and the counts
    of rows updated, inserted and deleted (see :func:`build_merge_insert`)."""
    source = ldata.to_table(data)
    keys = [on] if isinstance(on, str) else list(on)
    stats: dict[str, int] = {}

    def build(view: TableSnapshot, deleted: DeletedRows) -> transaction_pb2.Transaction | None:
        return build_merge_insert(
            view, source, keys, update_matched, insert_unmatched, delete_unmatched_target, stats, deleted
        )

    return run(table, build, stage), stats


class MergeInsertBuilder:
    """pylance's merge-insert builder::

        t.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(data)

    Each ``when_*`` clause turns one action on; ``execute`` runs the merge
    (as :meth:`Table.merge_insert`) and returns its counts."""

    def __init__(self, table: Any, on) -> None:  # the Table whose merge_insert it calls
        self._table, self._on = table, on
        self._update = self._insert = self._delete = False

    def when_matched_update_all(self) -> MergeInsertBuilder:
        self._update = True
        return self

    def when_not_matched_insert_all(self) -> MergeInsertBuilder:
        self._insert = True
        return self

    def when_not_matched_by_source_delete(self) -> MergeInsertBuilder:
        self._delete = True
        return self

    def execute(self, data) -> dict:
        if not (self._update or self._insert or self._delete):
            raise InvalidArgumentError(
                "merge_insert is not configured to change anything: call when_matched_update_all(), "
                "when_not_matched_insert_all() or when_not_matched_by_source_delete() before execute()"
            )
        return self._table.merge_insert(
            data,
            self._on,
            when_matched_update_all=self._update,
            when_not_matched_insert_all=self._insert,
            when_not_matched_by_source_delete=self._delete,
        )
