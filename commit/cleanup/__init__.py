"""Clean-up: the orphans failed commits leave (``orphans``) and old versions (``versions``)."""

from .orphans import DEFAULT_ORPHAN_AGE, CleanupReport, Progress, expand_dirs, referenced_paths, remove_orphans
from .versions import VersionCleanupReport, cleanup_old_versions

__all__ = [
    "DEFAULT_ORPHAN_AGE",
    "CleanupReport",
    "Progress",
    "VersionCleanupReport",
    "cleanup_old_versions",
    "expand_dirs",
    "referenced_paths",
    "remove_orphans",
]
