"""A table's upkeep: compaction, clean-up of old versions and orphans, and
repair of half-done commits."""

from __future__ import annotations

import datetime as dt
import sys

import click

from .. import errors as E
from . import render
from .context import Ctx
from .options import OUTPUT


@click.command()
@click.argument("name")
@click.option("--target-rows", default=1024 * 1024, show_default=True, type=click.IntRange(min=1))
@OUTPUT
@click.pass_obj
def compact(obj: Ctx, name, target_rows, output):
    """Merge small fragments and materialise deletions."""
    t = obj.table(name, write=True)
    before = len(t.fragments)
    with render.phases("compacting") as tell:
        m = t.compact(target_rows_per_fragment=target_rows, progress=tell)
    t.refresh()
    summary = {
        "table": name,
        "fragments_before": before,
        "fragments_after": len(t.fragments),
        "fragments_removed": m.fragments_removed,
        "fragments_added": m.fragments_added,
        "files_removed": m.files_removed,
        "files_added": m.files_added,
        "version": m.version,
    }
    if output == "json":
        return render.print_json(summary)
    if not m.fragments_removed and not m.fragments_added:
        render.console.print(f"{name}: nothing to compact ({before} fragment(s), version {t.version})")
        return
    render.console.print(
        f"{name}: compacted {m.fragments_removed} fragment(s) into {m.fragments_added} "
        f"({before} → {len(t.fragments)} fragments; {m.files_removed} file(s) replaced by "
        f"{m.files_added}); new version {m.version if m.version is not None else t.version}"
    )


@click.command()
@click.argument("name")
@click.option("--older-than", default="14d", show_default=True, help="e.g. 7d, 12h, 30m")
@click.option(
    "--orphan-age",
    default="1d",
    show_default=True,
    help="remove files of failed commits older than this (younger ones may be a running writer's); 0: all",
)
@click.option("--dry-run", is_flag=True, help="say what would be removed, remove nothing")
@OUTPUT
@click.pass_obj
def cleanup(obj: Ctx, name, older_than, orphan_age, dry_run, output):
    """Remove old versions and the orphans of failed commits."""
    age = _duration(older_than)
    young = _duration(orphan_age, "--orphan-age")
    t = obj.table(name, write=True)
    with render.phases("cleaning up") as tell:
        r = t.cleanup(older_than=age, orphan_age=young, dry_run=dry_run, progress=tell)
    orphans = r.orphans
    summary = {
        "table": name,
        "dry_run": dry_run,
        "removed_versions": r.removed_versions,
        "kept_versions": r.kept_versions,
        "removed_files": len(r.removed_files),
        "bytes_removed": r.bytes_removed,
        "orphans_removed": len(orphans.removed) if orphans else 0,
        "orphan_bytes_removed": orphans.bytes_removed if orphans else 0,
        "orphans_kept_young": orphans.kept_young if orphans else 0,
    }
    if output == "json":
        return render.print_json(summary)
    verb = "would remove" if dry_run else "removed"
    vs = r.removed_versions
    vtext = "no versions" if not vs else f"{len(vs)} version(s) ({_ranges(vs)})"
    render.console.print(
        f"{name}: {verb} {vtext}, {len(r.removed_files)} file(s), {render.human_bytes(r.bytes_removed)}; "
        f"kept {len(r.kept_versions)} version(s)"
    )
    if orphans is not None:
        kept = (
            f"; kept {orphans.kept_young} younger than {orphan_age} (a writer may still be using them: "
            "--orphan-age to change)"
            if orphans.kept_young
            else ""
        )
        render.console.print(
            f"{name}: {verb} {len(orphans.removed)} orphaned file(s) of failed commits "
            f"({render.human_bytes(orphans.bytes_removed)}){kept}"
        )


def _ranges(vs: list[int]) -> str:
    vs = sorted(vs)
    parts, start, prev = [], vs[0], vs[0]
    for v in vs[1:] + [None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts.append(str(start) if start == prev else f"{start}–{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(parts)


def _duration(text: str, option: str = "--older-than") -> dt.timedelta:
    units = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}
    if text.strip() == "0":
        return dt.timedelta(0)
    try:
        value = float(text[:-1])
        if value < 0:
            raise ValueError
        return dt.timedelta(**{units[text[-1]]: value})
    except (KeyError, ValueError, IndexError, OverflowError):
        raise E.InvalidArgumentError(f"{option} {text!r}: use a number followed by d, h, m or s (e.g. 7d)") from None


@click.command()
@click.argument("name")
@click.pass_obj
def repair(obj: Ctx, name):
    """Finish half-done commits of a table."""
    problems = obj.table(name, write=True).repair()
    if problems:
        for p in problems:
            render.err_console.print(render.styled("red", p))
        sys.exit(1)
    render.console.print(f"{name}: no half-done commits left")


@click.command()
@click.argument("name")
@click.option("--all-versions", is_flag=True, help="check the files of every version on storage, not only the latest")
@click.option("--list-unchecked", is_flag=True, help="name each file that has no checksums (another writer's)")
@OUTPUT
@click.pass_obj
def verify(obj: Ctx, name, all_versions, list_unchecked, output):
    """Check every byte of a table's files against their checksums.

    Exits 1 when a file is damaged or missing.  Files written by pylance or
    LanceDB carry no checksums: they are counted as unchecked."""
    t = obj.table(name)
    with render.phases("verifying") as tell:
        report = t.verify(all_versions=all_versions, progress=tell)
    bad = report.corrupt + report.missing
    if output == "json":
        summary = report.summary()
        summary["table"] = name
        summary["problems"] = [{"path": f.path, "status": f.status, "detail": f.detail} for f in bad]
        if list_unchecked:
            summary["unchecked_files"] = [f.path for f in report.unchecked]
        render.print_json(summary)
    else:
        s = report.summary()
        vtext = f"version {report.versions[0]}" if len(report.versions) == 1 else f"{len(report.versions)} versions"
        render.console.print(
            f"{name} ({vtext}): {s['files']} file(s), {s['ok']} verified "
            f"({render.human_bytes(report.bytes_checked)}), {s['unchecked']} without checksums, "
            f"{s['corrupt']} corrupt, {s['missing']} missing"
        )
        if list_unchecked:
            for f in report.unchecked:
                render.console.print(f"  unchecked: {f.path}")
        for f in bad:
            render.err_console.print(render.styled("red", f"{f.status}: {f.path}: {f.detail}"))
    if bad:
        sys.exit(1)
