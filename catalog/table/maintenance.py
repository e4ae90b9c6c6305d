"""A table's versions over time: their history, and removing what old versions
and failed commits leave behind (version clean-up, orphaned files).
Compaction, the other maintenance, is ``compaction.py``'s.
"""

from __future__ import annotations

import bisect
import datetime as dt
import logging
from typing import Any

from tessera.commit import (
    DEFAULT_ORPHAN_AGE,
    CleanupReport,
    Progress,
    VersionCleanupReport,
    cleanup_old_versions,
    fragment_live_rows,
    referenced_paths,
    remove_orphans,
)
from tessera.commit.errors import VersionNotFoundError
from tessera.format.protos import table_pb2

from ..errors import InvalidArgumentError
from .snapshot import TableSnapshot
from .tags import Tags

log = logging.getLogger(__name__)


def versions(table: TableSnapshot) -> list[dict[str, Any]]:
    """Every version: number, timestamp, operation, rows added and removed.

    Each manifest is read once; its row counts come from the fragments its
    transaction names (:func:`_changes`), so listing n versions costs
    O(versions + fragments changed), not O(versions x fragments).  A version
    whose transaction is missing or does not add up (the manifest's fragment
    count disagrees) is counted from all its fragments."""
    out: list[dict[str, Any]] = []
    live: dict[int, int] | None = None  # fragment id -> live rows, at the previous version listed
    rows = 0
    prev_version = None
    for v in table.handler.versions_after(table.store, 0):
        try:
            mfile = table.handler.load(table.store, v)
        except VersionNotFoundError:
            continue
        m = mfile.manifest
        change = None
        if live is not None and prev_version == v - 1 and mfile.transaction is not None:
            change = _changes(live, mfile.transaction, m.fragments)
        if change is not None:
            added, removed, now = change
            for fid, n in now.items():
                if n is None:
                    del live[fid]
                else:
                    live[fid] = n
            rows += added - removed
        else:
            after = {f.id: fragment_live_rows(f) for f in m.fragments}
            added, removed = _row_delta(live or {}, after)
            live, rows = after, sum(after.values())
        ts = dt.datetime.fromtimestamp(m.timestamp.seconds + m.timestamp.nanos / 1e9, tz=dt.UTC)
        out.append(
            {
                "version": v,
                "timestamp": ts,
                "operation": mfile.transaction.WhichOneof("operation") if mfile.transaction else None,
                "rows_added": added,
                "rows_removed": removed,
                "rows": rows,
            }
        )
        prev_version = v
    return out


#: operations that change no fragment's rows
_NO_ROW_CHANGE = frozenset({"create_index", "update_config", "project", "reserve_fragments", "data_replacement"})


def _changes(live: dict[int, int], txn, fragments) -> tuple[int, int, dict[int, int | None]] | None:
    """What the version whose transaction is ``txn`` and whose manifest holds
    ``fragments`` did to the previous version's ``live`` rows per fragment:
    (rows added, rows removed, {fragment id: its live rows now, None if gone}),
    read from the fragments the transaction names (their counts as the
    manifest holds them); None when the transaction cannot say (an overwrite,
    a restore, a rewrite, an operation not known here) or does not add up."""
    op = txn.WhichOneof("operation")
    if op in _NO_ROW_CHANGE:
        return (0, 0, {}) if len(fragments) == len(live) else None
    if op == "append":
        changed, gone, new = [], [], len(txn.append.fragments)
    elif op == "delete":
        changed, gone, new = [f.id for f in txn.delete.updated_fragments], list(txn.delete.deleted_fragment_ids), 0
    elif op == "update":
        u = txn.update
        changed, gone, new = [f.id for f in u.updated_fragments], list(u.removed_fragment_ids), len(u.new_fragments)
    else:
        return None
    if len(set(gone)) != len(gone) or any(fid not in live for fid in (*changed, *gone)):
        return None
    if len(fragments) != len(live) - len(gone) + new:
        return None
    added = removed = 0
    now: dict[int, int | None] = {}
    for fid in gone:
        removed += live[fid]
        now[fid] = None
    for fid in changed:
        f = _find(fragments, fid)
        if f is None:
            return None
        n = fragment_live_rows(f)
        removed += max(0, live[fid] - n)
        now[fid] = n
    # new fragments are the manifest's last ones (their ids are given at commit, not in the transaction)
    for k in range(len(fragments) - new, len(fragments)):
        f = fragments[k]
        if f.id in live or f.id in now:
            return None
        n = fragment_live_rows(f)
        added += n
        now[f.id] = n
    return added, removed, now


def _find(fragments, fid: int) -> table_pb2.DataFragment | None:
    """The fragment ``fid`` of a manifest whose fragments are in id order (as
    writers keep them); None when it is not where that order puts it."""
    at = bisect.bisect_left(fragments, fid, key=lambda f: f.id)
    return fragments[at] if at < len(fragments) and fragments[at].id == fid else None


def _row_delta(before: dict[int, int], after: dict[int, int]) -> tuple[int, int]:
    """Rows added and removed between two versions' live rows per fragment."""
    added = removed = 0
    for fid, n in after.items():
        if fid not in before:
            added += n
        else:
            removed += max(0, before[fid] - n)
    for fid, n in before.items():
        if fid not in after:
            removed += n
    return added, removed


def cleanup_orphans(table: TableSnapshot, older_than: dt.timedelta | None, dry_run: bool) -> CleanupReport:
    """Remove files of failed commits (unreferenced data, deletion and
    transaction files, stale staged manifests) older than ``older_than``."""
    handler, store = table.handler, table.store
    listed = handler.versions_after(store, 0)
    manifests = []
    for v in listed:
        try:
            manifests.append(handler.load(store, v))
        except VersionNotFoundError:
            if v >= max(listed):
                raise
            # removed meanwhile by a version clean-up beside this one: nothing of it to keep
    if len(manifests) < len(listed):
        log.info("%s: %d versions were removed while orphans were sought", store.uri, len(listed) - len(manifests))
    protect = handler.pending_paths()
    return remove_orphans(
        store,
        referenced_paths(store, manifests),
        older_than if older_than is not None else DEFAULT_ORPHAN_AGE,
        protect,
        dry_run,
    )


def cleanup(
    table: TableSnapshot,
    older_than: dt.timedelta | dt.datetime,
    keep_tagged: bool,
    orphan_age: dt.timedelta | None,
    dry_run: bool,
    progress: Progress | None,
    **rules: Any,
) -> VersionCleanupReport:
    """Delete old versions and every file only they needed, then orphans (see
    :meth:`Table.cleanup`); the tags of removed versions are deleted.
    ``rules``: the automatic clean-up's further rules (``retain_versions``,
    ``keep_from_version``, ``refuse_tagged``: ``commit.cleanup_old_versions``)."""
    if not isinstance(older_than, (dt.timedelta, dt.datetime)):
        raise InvalidArgumentError(f"older_than must be a timedelta or datetime, got {older_than!r}")
    if isinstance(older_than, dt.timedelta) and older_than < dt.timedelta(0):
        raise InvalidArgumentError("older_than must not be negative")
    tags = Tags(table.store)
    tagged = {name: int(t["version"]) for name, t in tags.list().items()}
    report = cleanup_old_versions(
        table.store,
        table.handler,
        older_than,
        tagged=tagged,
        keep_tagged=keep_tagged,
        orphan_age=orphan_age,
        protect_staged=table.handler.pending_paths(),
        dry_run=dry_run,
        progress=progress,
        **rules,
    )
    if not dry_run:
        for name in report.orphaned_tags:
            tags.delete(name)
    return report
