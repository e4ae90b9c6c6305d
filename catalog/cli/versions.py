"""A table's versions: history, checkout, restore, and ``tessera tag``."""

from __future__ import annotations

import click

from . import render
from .context import Ctx
from .options import OUTPUT, parse_version


@click.command()
@click.argument("name")
@OUTPUT
@click.pass_obj
def history(obj: Ctx, name, output):
    """Versions: time, operation, rows added and removed."""
    t = obj.table(name)
    vs = t.versions()
    if output == "json":
        return render.print_json(vs)
    render.print_rows(
        ["version", "time (UTC)", "operation", "added", "removed", "rows"],
        [
            [
                h["version"],
                h["timestamp"].strftime("%Y-%m-%d %H:%M:%S"),
                h["operation"] or "-",
                f"{h['rows_added']:,}",
                f"{h['rows_removed']:,}",
                f"{h['rows']:,}",
            ]
            for h in vs
        ],
        title=name,
        whole=frozenset({1}),  # the time is never cut (the operation's name gives way first)
    )


@click.command()
@click.argument("name")
@click.argument("version")
@click.option("-n", "--limit", default=10, type=click.IntRange(min=0))
@OUTPUT
@click.pass_obj
def checkout(obj: Ctx, name, version, limit, output):
    """Show a table as of a version or tag."""
    t = obj.table(name, parse_version(version))
    data = t.to_arrow(limit=limit)
    if output == "json":
        return render.print_json({"version": t.version, "rows": t.count_rows(), "head": data.to_pylist()})
    render.console.print(f"{name} @ version {t.version}: {t.count_rows():,} rows")
    render.show(data)


@click.command()
@click.argument("name")
@click.argument("version")
@click.pass_obj
def restore(obj: Ctx, name, version):
    """Make an older version (or tag) the latest."""
    t = obj.table(name, write=True)
    t.restore(parse_version(version))
    render.console.print(f"{name}: restored {version} as version {t.version}")


@click.group()
def tag():
    """Create, list and delete tags."""


@tag.command("create")
@click.argument("name")
@click.argument("tag_name")
@click.argument("version", type=int)
@click.pass_obj
def tag_create(obj: Ctx, name, tag_name, version):
    """Tag a version of a table."""
    obj.table(name, write=True).tags.create(tag_name, version)
    render.console.print(f"tagged version {version} of {name} as {tag_name}")


@tag.command("list")
@click.argument("name")
@OUTPUT
@click.pass_obj
def tag_list(obj: Ctx, name, output):
    """List the tags of a table."""
    tags = obj.table(name).tags.list()
    if output == "json":
        return render.print_json([{"tag": k, "version": int(v["version"])} for k, v in tags.items()])
    if not tags:
        render.console.print(f"{name} has no tags")
        return
    render.print_rows(["tag", "version"], [[k, v["version"]] for k, v in tags.items()])


@tag.command("delete")
@click.argument("name")
@click.argument("tag_name")
@click.pass_obj
def tag_delete(obj: Ctx, name, tag_name):
    """Delete a tag."""
    obj.table(name, write=True).tags.delete(tag_name)
    render.console.print(f"deleted tag {tag_name}")
