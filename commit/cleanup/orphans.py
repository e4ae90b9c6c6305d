"""Clean-up of what failed commits leave behind (orphaned files and staged manifests).

Data files, deletion files, transaction files and index files that no
version references, and staged manifests that no manifest-store row points
at, are removed once they are older than a threshold — never while young,
since a commit in flight writes its files before it wins its version.  On
local disk an index's folder (``_indices/<uuid>/``) goes with its last file.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tessera.format.protos import table_pb2
from tessera.format.table import manifest as mf
from tessera.format.table import paths
from tessera.stores.local import LocalObjectStore
from tessera.stores.object_store import ObjectStore

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]
"""``progress(phase, done, total)``: told how far a long operation is (clean-up, compaction)."""

DEFAULT_ORPHAN_AGE = dt.timedelta(days=1)
_PREFIXES = (paths.DATA_DIR, paths.DELETIONS_DIR, paths.TRANSACTIONS_DIR, paths.VERSIONS_DIR, paths.INDICES_DIR)


@dataclass
class CleanupReport:
    removed: list[str] = field(default_factory=list)
    kept_young: int = 0
    bytes_removed: int = 0


def referenced_paths(store: ObjectStore, manifests: list[mf.ManifestFile]) -> set[str]:
    """Every object the given versions need, relative to the table root."""
    out: set[str] = set()
    for mfile in manifests:
        m = mfile.manifest
        if m.transaction_file:
            out.add(paths.transaction_path(m.transaction_file))
        for frag in m.fragments:
            for df in frag.files:
                out.add(paths.data_path(df.path))
            if frag.HasField("deletion_file"):
                out.add(paths.deletion_file_path(frag.id, frag.deletion_file))
            for which in ("external_row_ids", "external_created_at_versions", "external_last_updated_at_versions"):
                if frag.HasField(which):
                    out.add(getattr(frag, which).path)
        out |= index_dirs(mfile)
    return out


def index_dirs(mfile: mf.ManifestFile) -> set[str]:
    """``_indices/<uuid>/`` of each index the version lists (a directory: an
    index may hold several files), except indices kept under another base path."""
    if not mfile.index_section:
        return set()
    section = table_pb2.IndexSection.FromString(mfile.index_section)
    return {
        f"{paths.INDICES_DIR}/{uuidlib.UUID(bytes=bytes(m.uuid.uuid))}/"
        for m in section.indices
        if not m.HasField("base_id") and len(m.uuid.uuid) == 16
    }


def expand_dirs(store: ObjectStore, names: list[str]) -> list[str]:
    """``names`` with each directory (a name ending in ``/``) replaced by the files under it."""
    out: list[str] = []
    for name in names:
        if name.endswith("/"):
            out.extend(sorted(path for path, _size, _mtime in store.walk(name.rstrip("/"))))
        else:
            out.append(name)
    return out


def remove_empty_dirs(store: ObjectStore, dirs: Iterable[str]) -> int:
    """Remove the folders ``dirs`` (``_indices/<uuid>/``, say) and the folders
    under them, if empty, on local disk: a clean-up that removed an index's
    files removes its folder too, as pylance's does.  An object store (S3)
    has no folders: nothing to do.  Returns how many folders were removed."""
    if not isinstance(store, LocalObjectStore):
        return 0
    removed = 0
    for d in dirs:
        top = os.path.join(store.root, d.strip("/"))
        if os.path.normpath(top) == store.root or not os.path.isdir(top):
            continue
        for dirpath, _subdirs, _files in os.walk(top, topdown=False):
            try:
                os.rmdir(dirpath)  # only an empty folder goes: one with a file is left alone
                removed += 1
            except OSError:
                pass
    return removed


def _stale_index_dirs(store: ObjectStore, keep: set[str], cutoff: float) -> list[str]:
    """``_indices/<uuid>/`` folders on local disk that are empty, older than
    ``cutoff`` and named by no kept version (left by an older clean-up); a
    folder an index is being written into is never old: adding a file
    touches it."""
    if not isinstance(store, LocalObjectStore):
        return []
    base = os.path.join(store.root, paths.INDICES_DIR)
    try:
        entries = list(os.scandir(base))
    except OSError:
        return []
    out = []
    for e in entries:
        name = f"{paths.INDICES_DIR}/{e.name}/"
        try:
            if e.is_dir(follow_symlinks=False) and name not in keep and e.stat().st_mtime <= cutoff:
                if not any(os.scandir(e.path)):
                    out.append(name)
        except OSError:
            continue
    return out


def remove_orphans(
    store: ObjectStore,
    keep: set[str],
    older_than: dt.timedelta = DEFAULT_ORPHAN_AGE,
    protect_staged: set[str] | None = None,
    dry_run: bool = False,
) -> CleanupReport:
    """Delete objects under the table's own folders that ``keep`` does not
    name and that are older than ``older_than``.

    Committed manifests, the hint file and staged manifests in
    ``protect_staged`` (rows not yet finished) are never touched."""
    report = CleanupReport()
    cutoff = time.time() - older_than.total_seconds()
    protect_staged = protect_staged or set()
    for prefix in _PREFIXES:
        for path, size, mtime in store.walk(prefix):
            name = path.rsplit("/", 1)[-1]
            if prefix == paths.VERSIONS_DIR:
                if mf.parse_manifest_name(name) is not None or name == paths.HINT_NAME:
                    continue  # versions are removed only by version clean-up
                if not paths.is_staged_manifest(name) or path in protect_staged:
                    continue
            elif path in keep:
                continue
            elif prefix == paths.INDICES_DIR and "/".join(path.split("/")[:2]) + "/" in keep:
                continue  # a file of an index some version lists
            elif path.endswith(".blob") and path.rsplit("/", 1)[0] + ".lance" in keep:
                continue  # a blob sidecar (data/<stem>/<id>.blob) of a data file some version lists
            if mtime > cutoff:
                report.kept_young += 1
                continue
            if not dry_run:
                store.delete(path)
            report.removed.append(path)
            report.bytes_removed += size
    if not dry_run:
        # the folders of the index files removed here, and empty ones left before
        emptied = {"/".join(p.split("/")[:2]) + "/" for p in report.removed if p.startswith(paths.INDICES_DIR + "/")}
        remove_empty_dirs(store, sorted(emptied | set(_stale_index_dirs(store, keep, cutoff))))
    if report.removed:
        log.info("%s: removed %d orphaned objects (%d bytes)", store.uri, len(report.removed), report.bytes_removed)
    return report
