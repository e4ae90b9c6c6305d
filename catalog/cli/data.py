"""A table's rows: create a table from files, append files, show or scan rows
(to the terminal or a file), delete and update rows."""

from __future__ import annotations

import json
import os

import click
import pyarrow as pa

from .. import errors as E
from . import render
from .context import Ctx
from .files import OUT_FORMATS, read_files, write_out
from .options import OUTPUT, parse_columns, parse_props, parse_version, scan_options

SCAN_DEFAULT_LIMIT = 20


@click.command()
@click.argument("name")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--file-version", default="2.2", show_default=True)
@click.option("--commit-store", default="auto", show_default=True, help="auto, native, catalog or a store URL")
@click.option("--property", "-p", "props", multiple=True, help="key=value (repeatable)")
@click.pass_obj
def create(obj: Ctx, name, files, file_version, commit_store, props):
    """Create a table from Parquet, CSV or Arrow files.

    NAME is a catalog table (``sales.orders``) or a path (``./orders``,
    ``/data/orders``, ``s3://bucket/orders``): a bare name is never a folder."""
    from ..names import is_table_name

    properties = parse_props(props)
    if not is_table_name(name):
        from ..table import Table

        if properties:
            raise E.InvalidArgumentError("--property records catalog properties; a table created by path has none")
        if commit_store == "catalog":
            raise E.InvalidArgumentError("--commit-store catalog needs a catalog table name; a path has no catalog")
        data = read_files(files)
        store = None if commit_store in ("auto", "native") else commit_store
        with render.rows_written("creating rows", data.num_rows) as next_write:
            t = Table.create(name, data, file_version=file_version, commit_store=store, progress=next_write())
        render.console.print(f"created {name} (version {t.version}, {t.count_rows():,} rows)")
        return
    data = read_files(files)  # read (and checked) before the catalog is created or touched
    cat = obj.catalog_for(name, write=True)
    with render.rows_written("creating rows", data.num_rows) as next_write:
        t = cat.create_table(
            name,
            data,
            file_version=file_version,
            commit_store=commit_store,
            properties=properties or None,
            progress=next_write(),
        )
    render.console.print(f"created {name} (version {t.version}, {t.count_rows():,} rows)")


@click.command()
@click.argument("name")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.pass_obj
def append(obj: Ctx, name, files):
    """Append Parquet, CSV or Arrow files to a table."""
    t = obj.table(name, write=True)
    # every file is read (and checked) before anything is written; CSV text as the table's types
    data = [read_files((f,), t.schema) for f in files]
    total = sum(d.num_rows for d in data)
    with render.rows_written("appending rows", total) as next_write:
        for d in data:
            t.append(d, progress=next_write())
    render.console.print(f"{name}: version {t.version}, {t.count_rows():,} rows")


@click.command()
@click.argument("name")
@click.option("-n", "--limit", default=10, show_default=True, type=click.IntRange(min=0))
@scan_options
@click.option("--version", "version", default=None, help="version number or tag")
@OUTPUT
@click.pass_obj
def head(obj: Ctx, name, limit, columns, where, version, output):
    """Show the first rows of a table."""
    t = obj.table(name, parse_version(version))
    data = t.to_arrow(columns=parse_columns(columns), filter=where, limit=limit)
    if output == "json":
        return render.print_json(data.to_pylist())
    render.show(data, title=f"{name} @ v{t.version}")


@click.command()
@click.argument("name")
@scan_options
@click.option(
    "--limit",
    "-n",
    type=click.IntRange(min=0),
    default=None,
    help=f"at most N rows (default on the terminal: {SCAN_DEFAULT_LIMIT}; into a file: all)",
)
@click.option("--all", "all_rows", is_flag=True, help="every row (no default limit)")
@click.option("--version", "version", default=None, help="version number or tag")
@click.option(
    "--out",
    "--output",
    "-o",
    "out",
    default=None,
    metavar="FILE|json",
    help="write FILE (.parquet, .csv, .json or .jsonl, by its suffix) instead of printing; 'json' prints JSON lines",
)
@click.pass_obj
def scan(obj: Ctx, name, columns, where, limit, all_rows, version, out):
    """Scan a table, streaming its rows (to the terminal or a file)."""
    if limit is not None and all_rows:
        raise E.InvalidArgumentError("--limit and --all: give one or the other")
    to_file = out not in (None, "json", "table")
    fmt = None
    if to_file:
        fmt = OUT_FORMATS.get(os.path.splitext(out)[1].lower())
        if fmt is None:
            raise E.InvalidArgumentError(
                f"--out {out}: unknown output format {os.path.splitext(out)[1] or '(no suffix)'!r}; "
                "name a .parquet, .csv, .json or .jsonl file (or use --out json to print JSON lines)"
            )
    elif limit is None and not all_rows:
        limit = SCAN_DEFAULT_LIMIT
    t = obj.table(name, parse_version(version))
    cols = parse_columns(columns)
    if to_file:
        assert fmt is not None  # an unknown suffix was refused above
        rows = write_out(t.to_batches(columns=cols, filter=where, limit=limit), out, fmt)
        render.console.print(f"wrote {rows:,} rows to {out}")
        return
    # one row past the limit tells whether there is more
    reader = t.to_batches(columns=cols, filter=where, limit=None if limit is None else limit + 1)
    if out == "json":
        n = 0
        for b in reader:
            for row in b.to_pylist():
                if limit is not None and n >= limit:
                    break
                click.echo(json.dumps(row, default=render.json_default, ensure_ascii=False))
                n += 1
        return
    batches, n, more = [], 0, False
    for b in reader:
        if limit is not None and n + b.num_rows > limit:
            more = True
            b = b.slice(0, limit - n)
        batches.append(b)
        n += b.num_rows
        if more:
            break
    data = pa.Table.from_batches(batches, schema=reader.schema)
    note = f"showing the first {n:,} rows; use --limit N or --all for more" if more else None
    render.show(data, title=f"{name} @ v{t.version}", note=note)


def _predicate(where_arg: str | None, where_opt: str | None, required: bool) -> str | None:
    """The predicate given as an argument or with --where (not both)."""
    if where_arg is not None and where_opt is not None:
        raise click.UsageError("give the predicate once: as an argument or with --where, not both")
    where = where_arg if where_arg is not None else where_opt
    if required and where is None:
        raise click.UsageError('which rows? give a predicate: tessera delete TABLE "amount < 1" (or --where)')
    return where


@click.command()
@click.argument("name")
@click.argument("predicate", required=False)
@click.option("--where", "-w", default=None, help="SQL predicate of the rows to delete (or give it as an argument)")
@click.pass_obj
def delete(obj: Ctx, name, predicate, where):
    """Delete the rows matching a predicate: tessera delete sales.orders "amount < 1"."""
    where = _predicate(predicate, where, required=True)
    t = obj.table(name, write=True)
    before = t.count_rows()
    t.delete(where)
    render.console.print(f"{name}: deleted {before - t.count_rows():,} rows (version {t.version})")


@click.command()
@click.argument("name")
@click.argument("predicate", required=False)
@click.option("--set", "sets", multiple=True, required=True, help="column=SQL expression (a string in quotes: 'SF')")
@click.option("--where", "-w", default=None, help="SQL predicate of the rows to update (or give it as an argument)")
@click.pass_obj
def update(obj: Ctx, name, predicate, sets, where):
    """Update columns of the rows matching a predicate (every row without one):
    tessera update sales.orders "city = 'sf'" --set "city='SF'"."""
    where = _predicate(predicate, where, required=False)
    values = {k.strip(): v.strip() for k, v in parse_props(sets, "--set").items()}
    t = obj.table(name, write=True)
    matching = t.count_rows(where) if where is not None else t.count_rows()
    t.update(values, where=where)
    render.console.print(f"{name}: updated {matching:,} rows (version {t.version})")
