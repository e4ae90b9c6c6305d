"""Maintenance a table's properties ask for after each commit: pylance's
automatic clean-up (``lance.auto_cleanup.*``) and Tessera's opt-in automatic
compaction (``tessera.auto_compact.*``).

Both run after the write's commit, as separate commits or deletions, and
never fail the write: a write is acknowledged once its version is committed,
and whatever goes wrong afterwards is logged (WARNING) and left for the next
write or a manual ``compact``/``cleanup`` to do.

**Automatic clean-up**, with pylance 14's rules (docs/reference/auto-cleanup.md):

- ``lance.auto_cleanup.interval`` (an integer): it runs after a commit whose
  version is a multiple of it (0: after every commit); no key, no clean-up;
- ``lance.auto_cleanup.older_than`` (a duration with a unit: ``14d``,
  ``1h 30m``, ``3600s``, ``0``): only versions committed before now minus that
  are removed; no key, no age limit;
- ``lance.auto_cleanup.retain_versions`` (a positive integer): the newest n
  versions are kept whatever their age;
- the version the write started from and every version after it are kept;
- a tagged version that would be removed stops the clean-up (nothing is
  removed) until the tag goes, as pylance does;
- files of failed commits are removed once a week old.

**Automatic compaction** (Delta's auto-compact): with
``tessera.auto_compact.min_fragments`` = n set, a commit after which the
table has at least n fragments of fewer than
``tessera.auto_compact.target_rows_per_fragment`` rows (default 1,048,576)
live rows compacts them, as ``Table.compact`` does.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from typing import Any

from tessera.commit import fragment_live_rows

from . import maintenance

log = logging.getLogger(__name__)

CLEANUP_INTERVAL = "lance.auto_cleanup.interval"
CLEANUP_OLDER_THAN = "lance.auto_cleanup.older_than"
CLEANUP_RETAIN = "lance.auto_cleanup.retain_versions"
COMPACT_MIN_FRAGMENTS = "tessera.auto_compact.min_fragments"
COMPACT_TARGET_ROWS = "tessera.auto_compact.target_rows_per_fragment"
DEFAULT_COMPACT_TARGET_ROWS = 1024 * 1024
#: files of failed commits the automatic clean-up removes: a week old (pylance's age)
ORPHAN_AGE = dt.timedelta(days=7)

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "mins": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hrs": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
    "w": 604800.0,
    "week": 604800.0,
    "weeks": 604800.0,
}
_PART = re.compile(r"\s*(\d+)\s*([a-z]+)\s*")


def parse_duration(text: str) -> dt.timedelta:
    """A duration as pylance's clean-up reads one: numbers each with a unit
    (``14d``, ``1 day``, ``2weeks``, ``1h 30m``, ``3600s``, ``5ms``), or ``0``.
    ValueError for anything else (a bare ``3600`` has no unit)."""
    text = text.strip().lower()
    if text == "0":
        return dt.timedelta(0)
    seconds, at = 0.0, 0
    while at < len(text):
        m = _PART.match(text, at)
        if m is None or m.group(2) not in _UNITS:
            raise ValueError(f"not a duration: {text!r} (write a number and a unit, e.g. '14d' or '3600s')")
        seconds += int(m.group(1)) * _UNITS[m.group(2)]
        at = m.end()
    if not text:
        raise ValueError("an empty duration")
    return dt.timedelta(seconds=seconds)


def _positive_int(config: dict[str, str], key: str, minimum: int) -> int | None:
    """The integer property ``key`` (None when unset); ValueError when it is not one >= minimum."""
    raw = config.get(key)
    if raw is None:
        return None
    value = int(raw.strip())
    if value < minimum:
        raise ValueError(f"{key} must be at least {minimum}, got {raw!r}")
    return value


def after_commit(table: Any, before_version: int) -> None:
    """Run the maintenance ``table``'s properties ask for, now that it has
    committed every version after ``before_version`` (the Table that wrote
    them: its compaction commits through it).  Never raises."""
    config = table.manifest.config
    if COMPACT_MIN_FRAGMENTS in config:
        try:
            _auto_compact(table, config)
        except Exception as exc:  # noqa: BLE001 - the write is committed: it must not fail now
            log.warning("%s: automatic compaction failed after a successful commit: %s", table.uri, exc)
    config = table.manifest.config
    if CLEANUP_INTERVAL in config:
        try:
            _auto_cleanup(table, config, before_version)
        except Exception as exc:  # noqa: BLE001 - as pylance: logged, the write stands
            log.warning("%s: automatic clean-up failed after a successful commit: %s", table.uri, exc)


def _auto_compact(table: Any, config) -> None:
    threshold = _positive_int(config, COMPACT_MIN_FRAGMENTS, 2)
    target = _positive_int(config, COMPACT_TARGET_ROWS, 1) or DEFAULT_COMPACT_TARGET_ROWS
    assert threshold is not None
    small = sum(1 for f in table.manifest.fragments if fragment_live_rows(f) < target)
    if small < threshold:
        return
    metrics = table.compact(target_rows_per_fragment=target)
    log.info("%s: automatic compaction of %d small fragments: %s", table.uri, small, metrics)


def _auto_cleanup(table: Any, config, before_version: int) -> None:
    interval = _positive_int(config, CLEANUP_INTERVAL, 0)
    assert interval is not None
    versions = range(before_version + 1, table.version + 1)
    if interval and not any(v % interval == 0 for v in versions):
        return
    raw_age = config.get(CLEANUP_OLDER_THAN)
    older_than = parse_duration(raw_age) if raw_age is not None else dt.timedelta(0)
    retain = _positive_int(config, CLEANUP_RETAIN, 1) or 0
    report = maintenance.cleanup(
        table.snapshot,
        older_than,
        keep_tagged=True,
        orphan_age=ORPHAN_AGE,
        dry_run=False,
        progress=None,
        retain_versions=retain,
        keep_from_version=before_version,
        refuse_tagged=True,
    )
    log.info(
        "%s: automatic clean-up removed versions %s (%d bytes)",
        table.uri,
        report.removed_versions,
        report.bytes_removed,
    )
