"""A table's versions over time: their history, and removing what old versions
and failed commits leave behind (version clean-up, orphaned files).
Compaction, the other maintenance, is ``compaction.py``'s.
"""

from __future__ import annotations

import datetime as dt
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


def versions(table: TableSnapshot) -> list[dict[str, Any]]:
    """Every version: number, timestamp, operation, rows added and removed."""
    out: list[dict[str, Any]] = []
    prev: table_pb2.Manifest | None = None
    for v in table.handler.versions_after(table.store, 0):
        try:
            mfile = table.handler.load(table.store, v)
        except VersionNotFoundError:
            continue
        m = mfile.manifest
        added, removed = _row_delta(prev, m)
        ts = dt.datetime.fromtimestamp(m.timestamp.seconds + m.timestamp.nanos / 1e9, tz=dt.UTC)
        out.append(
            {
                "version": v,
                "timestamp": ts,
                "operation": mfile.transaction.WhichOneof("operation") if mfile.transaction else None,
                "rows_added": added,
                "rows_removed": removed,
                "rows": sum(fragment_live_rows(f) for f in m.fragments),
            }
        )
        prev = m
    return out


def _row_delta(prev: table_pb2.Manifest | None, cur: table_pb2.Manifest) -> tuple[int, int]:
    before = {f.id: f for f in prev.fragments} if prev is not None else {}
    after = {f.id: f for f in cur.fragments}
    added = removed = 0
    for fid, f in after.items():
        if fid not in before:
            added += fragment_live_rows(f)
        else:
            removed += max(0, fragment_live_rows(before[fid]) - fragment_live_rows(f))
    for fid, f in before.items():
        if fid not in after:
            removed += fragment_live_rows(f)
    return added, removed


def cleanup_orphans(table: TableSnapshot, older_than: dt.timedelta | None, dry_run: bool) -> CleanupReport:
    """Remove files of failed commits (unreferenced data, deletion and
    transaction files, stale staged manifests) older than ``older_than``."""
    handler, store = table.handler, table.store
    manifests = [handler.load(store, v) for v in handler.versions_after(store, 0)]
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
) -> VersionCleanupReport:
    """Delete old versions and every file only they needed, then orphans (see
    :meth:`Table.cleanup`); the tags of removed versions are deleted."""
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
    )
    if not dry_run:
        for name in report.orphaned_tags:
            tags.delete(name)
    return report
