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

Indices follow the rows, as in pylance 14 (``format.table.indices``; facts in
``docs/reference/stable-row-ids.md``).  Planning never puts fragments covered
by different sets of indices in one group (except a sorted compaction's one
group, which an index covering only part of it stops covering).  With stable row ids an index of
row ids (vector, FTS, BITMAP, LABEL_LIST, NGRAM, LanceDB's BTREE) stays valid
and its fragment bitmap moves from a group's old fragments to its new ones
(except a vector or FTS index that still holds ids of rows the group drops,
deleted after the index was built: pylance moves it and its top-k answers
come back short; Tessera's stops covering that group);
pylance 14's own BTREE holds row addresses and is remapped into a new index
(``Rewrite.rewritten_indices``, ``format.table.btree``); zone maps and bloom filters
stop covering the rewritten fragments (Tessera's own zone maps are extended
again by the second commit: :func:`zonemap_columns` names the columns).  Without stable row ids every index holds row
addresses: BTREEs are remapped, zone maps and bloom filters lose the
rewritten fragments, and fragments covered by any other index are left alone
(pylance would remap those too; Tessera cannot write those index kinds).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from tessera.commit import Progress, commit_transaction, fragment_live_rows, new_transaction
from tessera.format.errors import RewriteError
from tessera.format.protos import table_pb2, transaction_pb2
from tessera.format.table import indices
from tessera.format.table import manifest as mf
from tessera.format.table.rewrite import TableLayout, rewrite_fragments

from ..errors import CompactionError, InvalidArgumentError
from . import compaction_indices as ci
from .indexes import ZONEMAP_COLUMNS, check_indexable, maintained_columns
from .snapshot import TableSnapshot
from .writes import Stage, run

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


def _indexed_fragments(table: TableSnapshot) -> set[int] | None:
    """Fragment ids compaction must leave alone because an index holds their
    row addresses and Tessera cannot remap it; None when that is every
    fragment.  With stable row ids there are none: an index of row ids follows
    the rows, pylance 14's BTREE of addresses is remapped, and any other index
    of addresses stops covering the rewritten fragments (a reader scans them).
    Without them, zone maps, bloom filters and BTREEs do not hold fragments
    back (the first two lose the rewritten fragments, as in pylance; BTREEs
    are remapped); every other index (vector, FTS, BITMAP, ...) does, where
    pylance would remap it."""
    if table.stable_row_ids:
        return set()
    out: set[int] = set()
    for idx in ci.section(table):
        if ci.zone_based(idx) or ci.needs_remap(idx, False):
            continue
        covered = indices.fragments(idx)
        if covered is None:
            return None
        out |= set(covered)
    return out


def _index_sets(table: TableSnapshot) -> dict[int, frozenset[int]]:
    """For each fragment, the positions in the index section of the indices
    covering it: a rewrite group never mixes fragments of different sets, as
    pylance plans (an index can then follow a group wholly or not at all)."""
    section = ci.section(table)
    out: dict[int, set[int]] = {}
    for pos, idx in enumerate(section):
        covered = indices.fragments(idx)
        for fid in covered or ():
            out.setdefault(fid, set()).add(pos)
    return {k: frozenset(v) for k, v in out.items()}


def plan(
    table: TableSnapshot,
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
    sets = _index_sets(table)
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
        if candidate and sort_by is None and run and sets.get(run[0].id) != sets.get(frag.id):
            close()
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


def _layout(table: TableSnapshot) -> TableLayout:
    """What rewriting needs of the table version compaction read."""
    return TableLayout(table.store, table.schema, table.fields, table.file_version, table.stable_row_ids)


def rewrite_group(
    table: TableSnapshot,
    frags: list[table_pb2.DataFragment],
    target: int,
    sort_keys,
    limit: int | None = None,
    addresses: list[np.ndarray] | None = None,
) -> list[table_pb2.DataFragment]:
    """Write the live rows of ``frags`` as new fragments (ids unassigned) of
    ``target`` rows each (the last may be smaller); see ``format.table.rewrite``
    (``addresses`` receives the old row addresses of each new fragment's rows)."""
    try:
        return rewrite_fragments(_layout(table), frags, target, sort_keys, limit, addresses)
    except RewriteError as exc:
        raise CompactionError(str(exc)) from exc


def _reserve(table: TableSnapshot, count: int) -> list[int]:
    """Commit a ReserveFragments of ``count`` ids on ``table``'s version (even in a
    multi-table transaction: ids are never given back); returns the reserved ids."""
    txn = new_transaction(table.version)
    txn.reserve_fragments.num_fragments = count
    mfile = commit_transaction(table.store, txn, table.mfile, handler=table.handler)
    top = mfile.manifest.max_fragment_id
    return list(range(top - count + 1, top + 1))


def build_compaction(
    view: TableSnapshot,
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
    addresses: list[list[np.ndarray]] | None = [] if ci.to_remap(view, groups) else None
    if progress is not None:
        progress("rewriting fragments", 0, total_old)
    for g in groups:
        per_group: list[np.ndarray] | None = [] if addresses is not None else None
        written.append(rewrite_group(view, g, target, sort_keys, limit, per_group))
        if addresses is not None and per_group is not None:
            addresses.append(per_group)
        done += len(g)
        if progress is not None:
            progress("rewriting fragments", done, total_old)
    total = sum(len(w) for w in written)
    ids = iter(_reserve(view, total)) if total else iter(())
    txn = new_transaction(view.version)
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
    if addresses is not None:
        ci.remap_indices(view, groups, written, addresses, txn.rewrite)
    indices.set_unfollowed(txn, ci.unfollowed(view, groups))
    return txn


def compact(
    table: TableSnapshot,
    target_rows_per_fragment: int = DEFAULT_TARGET_ROWS,
    sort_by: str | Sequence | None = None,
    *,
    materialize_deletions: bool = True,
    materialize_deletions_threshold: float = 0.1,
    external_sequences_over: int | None = None,
    progress: Progress | None = None,
    stage: Stage | None = None,
) -> tuple[CompactionMetrics, mf.ManifestFile | None]:
    """Compact ``table``: what was done, and the version committed (None: nothing
    to compact); see the module docstring.  The zone maps of the rewritten
    fragments are the caller's second commit (:func:`zonemap_columns`).

    ``progress(phase, done, total)`` is called as fragments are rewritten
    (again from 0 when a conflict makes the compaction run again).

    ``external_sequences_over`` (bytes) stores larger row id and version
    sequences in external files, as Lance documents (``format.table.rowids.INLINE_LIMIT``);
    the default keeps them inline, because pylance 14 cannot read external ones."""
    if not isinstance(target_rows_per_fragment, int) or target_rows_per_fragment <= 0:
        raise InvalidArgumentError(
            f"target_rows_per_fragment must be a positive integer, got {target_rows_per_fragment!r}"
        )
    if not 0.0 <= materialize_deletions_threshold <= 1.0:
        raise InvalidArgumentError("materialize_deletions_threshold must be between 0 and 1")
    keys = _sort_keys(sort_by, table.schema)
    metrics = CompactionMetrics()
    mfile = run(
        table,
        lambda view, deleted: build_compaction(
            view,
            target_rows_per_fragment,
            keys,
            materialize_deletions,
            materialize_deletions_threshold,
            metrics,
            external_sequences_over,
            progress,
        ),
        stage,
    )
    if mfile is None or mfile.version == table.version or not metrics.groups:
        metrics = CompactionMetrics()
    metrics.version = mfile.version if mfile is not None else table.version
    return metrics, mfile


def zonemap_columns(table: TableSnapshot, sort_by: str | Sequence | None) -> list[str]:
    """The columns whose zone maps must cover the rewritten fragments of a
    compaction: the maintained columns', and a sorted compaction's sort columns
    unless ``tessera.zonemap.columns`` says otherwise."""
    cols = maintained_columns(table)
    if ZONEMAP_COLUMNS not in table.manifest.config:
        for name, _ in _sort_keys(sort_by, table.schema):
            try:
                check_indexable(table, name)
            except InvalidArgumentError:
                continue
            if name not in cols:
                cols.append(name)
    return cols
