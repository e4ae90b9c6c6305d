"""``tessera index``: create, list and extend zone-map indices."""

from __future__ import annotations

import click

from . import render
from .context import Ctx
from .options import OUTPUT


@click.group()
def index():
    """Create, list and update a table's zone-map indices."""


@index.command("create")
@click.argument("name")
@click.argument("column")
@click.option("--rows-per-zone", type=int, default=None, help="rows per zone (default 8192)")
@click.option("--index-name", default=None, help="the index's name (default <column>_idx)")
@click.pass_obj
def index_create(obj: Ctx, name, column, rows_per_zone, index_name):
    """Build a ZONEMAP index on a column (writes keep it current)."""
    t = obj.table(name, write=True)
    t.create_index(column, "zonemap", name=index_name, rows_per_zone=rows_per_zone)
    render.console.print(f"{name}: zone map on {column} (version {t.version})")


@index.command("list")
@click.argument("name")
@OUTPUT
@click.pass_obj
def index_list(obj: Ctx, name, output):
    """List a table's indices and the fragments each covers."""
    t = obj.table(name)
    found = t.list_indices()
    total = len(t.fragments)
    rows = [
        {
            "name": i["name"],
            "type": i["type"],
            "columns": i["columns"],
            "covered_fragments": len({f.id for f in t.fragments} & set(i["fragments"] or [])),
            "fragments": total,
            "built_on_version": i["dataset_version"],
        }
        for i in found
    ]
    if output == "json":
        return render.print_json(rows)
    if not rows:
        render.console.print(f"{name} has no indices")
        return
    render.print_rows(
        ["index", "type", "columns", "covers", "version"],
        [
            [r["name"], r["type"], ",".join(r["columns"]), f"{r['covered_fragments']}/{total}", r["built_on_version"]]
            for r in rows
        ],
    )


@index.command("optimize")
@click.argument("name")
@click.pass_obj
def index_optimize(obj: Ctx, name):
    """Extend the zone maps over fragments they do not cover yet."""
    t = obj.table(name, write=True)
    before = t.version
    t.optimize_indices()
    t.refresh()
    if t.version == before:
        render.console.print(f"{name}: indices already cover every fragment (version {t.version})")
    else:
        render.console.print(f"{name}: indices updated (version {t.version})")
