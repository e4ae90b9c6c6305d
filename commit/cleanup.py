"""Clean-up of what failed commits leave behind.

Data files, deletion files and transaction files that no version references,
and staged manifests that no manifest-store row points at, are removed once
they are older than a threshold — never while young, since a commit in flight
writes its files before it wins its version.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass, field

from tessera.format import manifest as mf
from tessera.format.protos import table_pb2
from tessera.format.table import paths
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
            if mtime > cutoff:
                report.kept_young += 1
                continue
            if not dry_run:
                store.delete(path)
            report.removed.append(path)
            report.bytes_removed += size
    if report.removed:
        log.info("%s: removed %d orphaned objects (%d bytes)", store.uri, len(report.removed), report.bytes_removed)
    return report
