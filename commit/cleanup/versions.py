"""Clean-up of old versions: delete old manifests and the files only they need.

A version is **kept** when it is the latest (as the commit handler sees it,
and as the ``_versions/`` listing sees it: for an external manifest store the
two can differ while a commit is being finished), when it was committed at or
after the cut-off, when it is newer than the latest seen at the start (a
commit that landed meanwhile), or when it is tagged and ``keep_tagged``.
Every other version's manifest is deleted, then every file those versions
referenced that no kept version references (data, deletion, transaction and
external row-id files).  The versions are listed again before files are
deleted, so a commit that lands during the clean-up protects its files.
Finally the orphans of failed commits (files no version ever referenced) are
removed once older than ``orphan_age`` (:mod:`commit.cleanup.orphans`).

An index's files (``_indices/<uuid>/``) go when no kept version lists the
index (a replaced zone map, an index of a dropped column), and on local disk
its emptied folder with them, as pylance's clean-up does (S3 has no folders).
A manifest that cannot be read stops the clean-up: treating it as absent
could delete files it needs.

Caveat (as in Lance): a writer whose base version is older than the removed
versions cannot check its transaction against them; choose ``older_than``
longer than any writer takes to commit.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass, field

from tessera.format.table import manifest as mf
from tessera.format.table import paths
from tessera.stores.errors import ObjectNotFoundError
from tessera.stores.object_store import ObjectStore

from .. import store as tstore
from ..errors import TaggedVersionError, VersionNotFoundError
from ..handlers.base import CommitHandler
from .orphans import (
    DEFAULT_ORPHAN_AGE,
    CleanupReport,
    Progress,
    expand_dirs,
    referenced_paths,
    remove_empty_dirs,
    remove_orphans,
)

log = logging.getLogger(__name__)

DEFAULT_OLDER_THAN = dt.timedelta(days=14)  # pylance's default for cleanup_old_versions


@dataclass
class VersionCleanupReport:
    """What a version clean-up removed (or, with ``dry_run``, would remove)."""

    removed_versions: list[int] = field(default_factory=list)
    kept_versions: list[int] = field(default_factory=list)
    removed_files: list[str] = field(default_factory=list)
    bytes_removed: int = 0
    #: tags whose version was removed (only when ``keep_tagged`` is False)
    orphaned_tags: list[str] = field(default_factory=list)
    orphans: CleanupReport | None = None

    @property
    def old_versions(self) -> int:
        """The number of versions removed (pylance's ``RemovalStats.old_versions``)."""
        return len(self.removed_versions)


def _cutoff(older_than: dt.timedelta | dt.datetime, now: float | None) -> float:
    if isinstance(older_than, dt.datetime):
        if older_than.tzinfo is None:
            older_than = older_than.replace(tzinfo=dt.UTC)
        return older_than.timestamp()
    if isinstance(older_than, dt.timedelta):
        if older_than < dt.timedelta(0):
            raise ValueError("older_than must not be negative")
        return (time.time() if now is None else now) - older_than.total_seconds()
    raise TypeError(f"older_than must be a datetime.timedelta or datetime.datetime, got {type(older_than).__name__}")


def _timestamp(m) -> float:
    return m.timestamp.seconds + m.timestamp.nanos / 1e9


def _load(store: ObjectStore, handler: CommitHandler, version: int, names: dict[int, str]) -> mf.ManifestFile:
    try:
        return handler.load(store, version)
    except (VersionNotFoundError, ObjectNotFoundError):
        if version not in names:
            raise
        return tstore.load_manifest(store, version)


def _load_unless_removed(
    store: ObjectStore, handler: CommitHandler, version: int, names: dict[int, str], latest: int
) -> mf.ManifestFile | None:
    """:func:`_load`, or None for a version older than ``latest`` that is gone
    by the time it is read: another clean-up running beside this one removed
    it (and the files only it needed), which is never an error."""
    try:
        return _load(store, handler, version, names)
    except (VersionNotFoundError, ObjectNotFoundError):
        if version >= latest:
            raise
        log.info("%s: version %d was removed meanwhile (another clean-up)", store.uri, version)
        return None


def _all_versions(store: ObjectStore, handler: CommitHandler) -> tuple[list[int], dict[int, str], int]:
    """(versions, listing version -> manifest name, latest per the handler)."""
    names, _ = tstore.list_versions(store)
    listed = set(handler.versions_after(store, 0)) | set(names)
    latest = handler.latest_version(store)
    return sorted(listed), names, latest


def _size(store: ObjectStore, path: str) -> int:
    try:
        return store.size(path)
    except (ObjectNotFoundError, OSError):
        return 0


def cleanup_old_versions(
    store: ObjectStore,
    handler: CommitHandler,
    older_than: dt.timedelta | dt.datetime = DEFAULT_OLDER_THAN,
    *,
    tagged: dict[str, int] | None = None,
    keep_tagged: bool = True,
    orphan_age: dt.timedelta | None = DEFAULT_ORPHAN_AGE,
    protect_staged: set[str] | None = None,
    dry_run: bool = False,
    now: float | None = None,
    progress: Progress | None = None,
    retain_versions: int = 0,
    keep_from_version: int | None = None,
    refuse_tagged: bool = False,
) -> VersionCleanupReport:
    """Delete versions committed before ``older_than`` (a cut-off time, or an
    age) and the files only they reference; see the module docstring.

    ``tagged`` maps tag names to versions; ``orphan_age=None`` skips the
    removal of failed commits' files; ``protect_staged`` names staged
    manifests an external store has not finished (never removed);
    ``progress(phase, done, total)`` is told how far the reading of versions
    and the deleting of files are.  ``retain_versions`` keeps the newest n
    versions whatever their age and ``keep_from_version`` every version from
    that one on; with ``refuse_tagged`` a tagged version that would be removed
    stops the clean-up before anything is deleted (TaggedVersionError), as
    pylance's automatic clean-up does."""
    tell: Progress = progress or (lambda phase, done, total: None)
    cutoff = _cutoff(older_than, now)
    tagged = tagged or {}
    tagged_versions = set(tagged.values()) if keep_tagged else set()
    report = VersionCleanupReport()
    versions, names, latest = _all_versions(store, handler)
    if not versions:
        return report
    newest_listed = max(names) if names else latest
    kept: list[mf.ManifestFile] = []
    removed: list[mf.ManifestFile] = []
    newest = set(versions[-retain_versions:]) if retain_versions > 0 else set()
    tell("reading versions", 0, len(versions))
    for n, v in enumerate(versions, 1):
        got = _load_unless_removed(store, handler, v, names, latest)
        tell("reading versions", n, len(versions))
        if got is None:
            continue
        mfile = got
        keep = (
            v >= latest
            or v == newest_listed
            or (v in tagged_versions and not refuse_tagged)
            or v in newest
            or (keep_from_version is not None and v >= keep_from_version)
            or _timestamp(mfile.manifest) >= cutoff
        )
        (kept if keep else removed).append(mfile)
    if refuse_tagged:
        hit = sorted(name for name, v in tagged.items() if v in {m.version for m in removed})
        if hit:
            raise TaggedVersionError(
                f"{store.uri}: the clean-up would remove tagged versions (tags {hit}); nothing was removed"
            )
    report.kept_versions = [m.version for m in kept]
    report.removed_versions = [m.version for m in removed]
    report.orphaned_tags = sorted(n for n, v in tagged.items() if v in set(report.removed_versions))
    keep_paths = referenced_paths(store, kept)
    doomed = sorted(referenced_paths(store, removed) - keep_paths)
    if not dry_run:
        tell("deleting manifests", 0, len(removed))
        for n, m in enumerate(removed, 1):
            if m.version in names:
                path = paths.version_path(names[m.version])
                report.bytes_removed += _size(store, path)
                store.delete(path)
            tell("deleting manifests", n, len(removed))
        # a commit that landed meanwhile protects whatever it references
        again, names_now, latest_now = _all_versions(store, handler)
        fresh = [_load_unless_removed(store, handler, v, names_now, latest_now) for v in again if v > max(versions)]
        keep_paths |= referenced_paths(store, [m for m in fresh if m is not None])
        doomed = [p for p in doomed if p not in keep_paths]
    doomed_dirs = [p for p in doomed if p.endswith("/")]
    doomed = expand_dirs(store, doomed)  # an index's directory: its files
    verb = "listing files" if dry_run else "deleting files"
    tell(verb, 0, len(doomed))
    for n, path in enumerate(doomed, 1):
        report.bytes_removed += _size(store, path)
        if not dry_run:
            store.delete(path)
        report.removed_files.append(path)
        tell(verb, n, len(doomed))
    if not dry_run:
        remove_empty_dirs(store, doomed_dirs)  # the emptied folders too (local disk; S3 has none)
    if orphan_age is not None:
        report.orphans = remove_orphans(store, keep_paths, orphan_age, protect_staged, dry_run)
        report.bytes_removed += report.orphans.bytes_removed
    log.info(
        "%s: removed %d versions and %d files (%d bytes)",
        store.uri,
        len(report.removed_versions),
        len(report.removed_files),
        report.bytes_removed,
    )
    return report
