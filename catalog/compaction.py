"""Compaction: merge small fragments and materialise deletions.

As pylance does, compaction commits a ``ReserveFragments`` transaction (so the
new fragments' ids cannot collide with a concurrent writer's) and then a
``Rewrite`` whose groups name the old fragments and the new ones.  The Rewrite
is built on the version compaction read, so the conflict matrix sees every
concurrent commit: a Delete or Update that touched a rewritten fragment makes
it retryable, and the table re-runs the whole compaction on the latest version
(never resurrecting the rows that were deleted meanwhile).

Planning follows Lance: a fragment is a candidate when it has fewer live rows
than the target, or (``materialize_deletions``) more than the threshold of its
rows deleted; runs of adjacent candidates form groups, and a group is
rewritten when it has two fragments or one with deletions.  With ``sort_by``
every fragment is rewritten as one group, sorted by those columns.

With stable row ids every surviving row keeps its id: a new fragment's row id
sequence is the old ids in their new order (ranges with holes where rows were
deleted, arrays after a sort), and its created-at / last-updated-at version
sequences are carried over row by row.

Indices: Tessera does not rewrite index metadata.  With stable row ids an
index keeps naming the right rows after compaction (it stores row ids), and
pylance 14 was observed to answer index-assisted filters correctly on such a
table (the new fragments are simply scanned as unindexed), so indexed
fragments are compacted.  Without stable row ids an index stores row
addresses, which compaction changes, so fragments covered by an index are left
alone.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from tessera.commit.cleanup import Progress
from tessera.commit.committer import commit_transaction, fragment_live_rows, new_transaction
from tessera.format.errors import RewriteError
from tessera.format.protos import table_pb2, transaction_pb2
from tessera.format.table.rewrite import TableLayout, rewrite_fragments
from tessera.format.zonemap import TYPE_URL as ZONEMAP_TYPE_URL

from .errors import CompactionError, InvalidArgumentError

log = logging.getLogger(__name__)

DEFAULT_TARGET_ROWS = 1024 * 1024


@dataclass
class CompactionMetrics:
    """What a compaction did (the names pylance's ``CompactionMetrics`` uses)."""

    fragments_removed: int = 0
    fragments_added: int = 0
    files_removed: int = 0
    files_added: int = 0
    version: int | None = None
    groups: list[tuple[list[int], list[int]]] = field(default_factory=list)


def _indexed_fragments(table) -> set[int] | None:
    """Fragment ids compaction must leave alone because an index holds their
    row addresses (none with stable row ids, none for zone maps); None when
    that is every fragment."""
    raw = table._mfile.index_section
    if not raw or table.stable_row_ids:
        return set()
    from pyroaring import BitMap

    section = table_pb2.IndexSection()
    section.ParseFromString(raw)
    out: set[int] = set()
    for idx in section.indices:
        if idx.index_details.type_url.endswith(ZONEMAP_TYPE_URL):
            continue  # a zone map holds no row addresses: its zones of removed fragments are just unused
        if not idx.fragment_bitmap:
            return None
        out |= set(BitMap.deserialize(idx.fragment_bitmap))
    return out


def plan(
    table,
    target_rows_per_fragment: int = DEFAULT_TARGET_ROWS,
    *,
    sort_by=None,
    materialize_deletions: bool = True,
    materialize_deletions_threshold: float = 0.1,
) -> list[list[table_pb2.DataFragment]]:
    """The groups of adjacent fragments a compaction of ``table`` would rewrite."""
    indexed = _indexed_fragments(table)
    if indexed is None:
        log.info("%s: an index covers every fragment; nothing can be compacted", table.uri)
        return []
    groups: list[list[table_pb2.DataFragment]] = []
    run: list[table_pb2.DataFragment] = []

    def close() -> None:
        if len(run) >= 2 or (run and (sort_by is not None or run[0].HasField("deletion_file"))):
            groups.append(list(run))
        run.clear()

    for frag in table.manifest.fragments:
        live = fragment_live_rows(frag)
        deleted = frag.physical_rows - live
        candidate = frag.id not in indexed and (
            sort_by is not None
            or live < target_rows_per_fragment
            or materialize_deletions
            and deleted > materialize_deletions_threshold * frag.physical_rows
        )
        if candidate:
            run.append(frag)
        else:
            close()
    close()
    return groups


def _sort_keys(sort_by, schema: pa.Schema) -> list[tuple[str, str]]:
    if sort_by is None:
        return []
    items = [sort_by] if isinstance(sort_by, str) else list(sort_by)
    keys = []
    for item in items:
        name, order = (item, "ascending") if isinstance(item, str) else (item[0], item[1])
        if name not in schema.names:
            raise InvalidArgumentError(f"cannot sort by {name!r}: no such column; the table has {schema.names}")
        if order not in ("ascending", "descending"):
            raise InvalidArgumentError(f"sort order must be 'ascending' or 'descending', got {order!r}")
        keys.append((name, order))
    if not keys:
        raise InvalidArgumentError("sort_by needs at least one column")
    return keys


def _layout(table) -> TableLayout:
    """What rewriting needs of the table version compaction read."""
    return TableLayout(table.store, table.schema, table._fields, table.file_version, table.stable_row_ids)


def rewrite_group(
    table, frags: list[table_pb2.DataFragment], target: int, sort_keys, limit: int | None = None
) -> list[table_pb2.DataFragment]:
    """Write the live rows of ``frags`` as new fragments (ids unassigned) of
    ``target`` rows each (the last may be smaller); see ``format.table.rewrite``."""
    try:
        return rewrite_fragments(_layout(table), frags, target, sort_keys, limit)
    except RewriteError as exc:
        raise CompactionError(str(exc)) from exc


def _reserve(table, base, count: int) -> list[int]:
    """Commit a ReserveFragments of ``count`` ids; returns the reserved ids."""
    txn = new_transaction(base.version)
    txn.reserve_fragments.num_fragments = count
    mfile = commit_transaction(table.store, txn, base, handler=table._handler)
    top = mfile.manifest.max_fragment_id
    return list(range(top - count + 1, top + 1))


def build_compaction(
    view,
    base,
    target: int,
    sort_keys,
    materialize_deletions: bool,
    threshold: float,
    metrics: CompactionMetrics,
    limit: int | None = None,
    progress: Progress | None = None,
) -> transaction_pb2.Transaction | None:
    """Plan, write the new fragments, reserve their ids, and return the Rewrite;
    ``progress("rewriting fragments", done, total)`` after each group."""
    groups = plan(
        view,
        target,
        sort_by=sort_keys or None,
        materialize_deletions=materialize_deletions,
        materialize_deletions_threshold=threshold,
    )
    if not groups:
        return None
    total_old = sum(len(g) for g in groups)
    written, done = [], 0
    if progress is not None:
        progress("rewriting fragments", 0, total_old)
    for g in groups:
        written.append(rewrite_group(view, g, target, sort_keys, limit))
        done += len(g)
        if progress is not None:
            progress("rewriting fragments", done, total_old)
    total = sum(len(w) for w in written)
    ids = iter(_reserve(view, base, total)) if total else iter(())
    txn = new_transaction(base.version)
    metrics.groups.clear()
    metrics.fragments_removed = metrics.fragments_added = metrics.files_removed = metrics.files_added = 0
    for old, new in zip(groups, written):
        g = txn.rewrite.groups.add()
        g.old_fragments.extend(old)
        for f in new:
            f.id = next(ids)
        g.new_fragments.extend(new)
        metrics.groups.append(([f.id for f in old], [f.id for f in new]))
        metrics.fragments_removed += len(old)
        metrics.fragments_added += len(new)
        metrics.files_removed += sum(len(f.files) for f in old)
        metrics.files_added += sum(len(f.files) for f in new)
    return txn


def compact(
    table,
    target_rows_per_fragment: int = DEFAULT_TARGET_ROWS,
    sort_by: str | Sequence | None = None,
    *,
    materialize_deletions: bool = True,
    materialize_deletions_threshold: float = 0.1,
    external_sequences_over: int | None = None,
    progress: Progress | None = None,
) -> CompactionMetrics:
    """Compact ``table`` (moving it to the new version); see the module docstring.

    ``progress(phase, done, total)`` is called as fragments are rewritten
    (again from 0 when a conflict makes the compaction run again).

    ``external_sequences_over`` (bytes) stores larger row id and version
    sequences in external files, as Lance documents (``format.rowids.INLINE_LIMIT``);
    the default keeps them inline, because pylance 14 cannot read external ones."""
    if not isinstance(target_rows_per_fragment, int) or target_rows_per_fragment <= 0:
        raise InvalidArgumentError(
            f"target_rows_per_fragment must be a positive integer, got {target_rows_per_fragment!r}"
        )
    if not 0.0 <= materialize_deletions_threshold <= 1.0:
        raise InvalidArgumentError("materialize_deletions_threshold must be between 0 and 1")
    keys = _sort_keys(sort_by, table.schema)
    metrics = CompactionMetrics()
    before = table.version
    table._run(
        lambda view, base: build_compaction(
            view,
            base,
            target_rows_per_fragment,
            keys,
            materialize_deletions,
            materialize_deletions_threshold,
            metrics,
            external_sequences_over,
            progress,
        )
    )
    if table.version == before or not metrics.groups:
        metrics = CompactionMetrics()
    metrics.version = table.version
    if metrics.groups:
        _index_new_fragments(table, [name for name, _ in keys])
    return metrics


def _index_new_fragments(table, sort_columns: list[str]) -> None:
    """Zone maps over the rewritten fragments: the maintained columns', and a
    sorted compaction's sort columns unless ``tessera.zonemap.columns`` says otherwise."""
    from .indexes import ZONEMAP_COLUMNS, check_indexable, maintain, maintained_columns

    cols = maintained_columns(table)
    if ZONEMAP_COLUMNS not in table.manifest.config:
        for name in sort_columns:
            try:
                check_indexable(table, name)
            except InvalidArgumentError:
                continue
            if name not in cols:
                cols.append(name)
    maintain(table, cols)
