"""The ``tessera`` command line (click + rich).

Catalog settings come from ``--catalog`` / ``--warehouse``, the environment
(``TESSERA_CATALOG_URI``, ``TESSERA_WAREHOUSE``) or the config file, as for
:func:`catalog.catalog.connect`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys

import click
import pyarrow as pa
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from . import errors as E

console = Console()
err_console = Console(stderr=True)


class Ctx:
    def __init__(self, catalog_uri: str | None, warehouse: str | None, config_name: str | None) -> None:
        self.catalog_uri, self.warehouse, self.config_name = catalog_uri, warehouse, config_name
        self._cat = None

    @property
    def cat(self):
        if self._cat is None:
            from .catalog import connect

            self._cat = connect(self.catalog_uri, self.warehouse, name=self.config_name)
        return self._cat


def _show(table: pa.Table, title: str | None = None) -> None:
    rt = RichTable(title=title, show_lines=False)
    for name in table.column_names:
        rt.add_column(name)
    for row in table.to_pylist():
        rt.add_row(*["∅" if v is None else str(v) for v in row.values()])
    console.print(rt)


def _read_files(paths: tuple[str, ...]) -> pa.Table:
    import pyarrow.csv as pcsv
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    tables = []
    for p in paths:
        ext = os.path.splitext(p)[1].lower()
        if ext in (".parquet", ".pq"):
            tables.append(pq.read_table(p))
        elif ext in (".csv", ".tsv"):
            tables.append(pcsv.read_csv(p, parse_options=pcsv.ParseOptions(delimiter="\t" if ext == ".tsv" else ",")))
        elif ext in (".arrow", ".feather", ".ipc"):
            tables.append(feather.read_table(p))
        else:
            raise click.BadParameter(f"{p}: unknown file type {ext!r} (use .parquet, .csv, .tsv or .arrow)")
    return pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]


def _with_progress(label: str, total: int):
    return Progress(TextColumn(label), BarColumn(), TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                    console=err_console, transient=True)


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (E.TesseraError, E.CommitError, E.FormatError, E.StoreError, E.PredicateError) as exc:
            err_console.print(f"[bold red]error:[/] {exc}")
            sys.exit(2)


@click.group(cls=_Group)
@click.option("--catalog", "catalog_uri", envvar="TESSERA_CATALOG_URI", help="SQLAlchemy URL of the catalog database.")
@click.option("--warehouse", envvar="TESSERA_WAREHOUSE", help="Where tables live (path or s3://bucket/prefix).")
@click.option("--config-name", default=None, help="Section [catalog.NAME] of the config file.")
@click.pass_context
def main(ctx, catalog_uri, warehouse, config_name):
    """Tessera: transactional Lance tables."""
    ctx.obj = Ctx(catalog_uri, warehouse, config_name)


@main.command()
@click.pass_obj
def init(obj: Ctx):
    """Create (or upgrade) the catalog database."""
    cat = obj.cat
    console.print(f"catalog ready: {cat!r}")


# -- namespaces -----------------------------------------------------------------------

@main.group()
def namespace():
    """Create, list and drop namespaces."""


@namespace.command("create")
@click.argument("name")
@click.option("--property", "-p", "props", multiple=True, help="key=value")
@click.pass_obj
def ns_create(obj: Ctx, name, props):
    obj.cat.create_namespace(name, dict(p.split("=", 1) for p in props))
    console.print(f"created namespace {name}")


@namespace.command("list")
@click.argument("parent", required=False)
@click.pass_obj
def ns_list(obj: Ctx, parent):
    rt = RichTable("namespace", "properties")
    for n in obj.cat.list_namespaces(parent):
        rt.add_row(n, json.dumps(obj.cat.namespace_properties(n)))
    console.print(rt)


@namespace.command("drop")
@click.argument("name")
@click.pass_obj
def ns_drop(obj: Ctx, name):
    obj.cat.drop_namespace(name)
    console.print(f"dropped namespace {name}")


# -- tables ---------------------------------------------------------------------------

@main.command()
@click.argument("name")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--file-version", default="2.2", show_default=True)
@click.option("--commit-store", default="auto", show_default=True, help="auto, native, catalog or a store URL")
@click.pass_obj
def create(obj: Ctx, name, files, file_version, commit_store):
    """Create a table from Parquet, CSV or Arrow files."""
    data = _read_files(files)
    t = obj.cat.create_table(name, data, file_version=file_version, commit_store=commit_store)
    console.print(f"created {name} (version {t.version}, {t.count_rows():,} rows)")


@main.command()
@click.argument("name")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.pass_obj
def append(obj: Ctx, name, files):
    """Append Parquet, CSV or Arrow files to a table."""
    t = obj.cat.load_table(name)
    with _with_progress("appending", len(files)) as prog:
        task = prog.add_task("append", total=len(files))
        for f in files:
            t.append(_read_files((f,)))
            prog.advance(task)
    console.print(f"{name}: version {t.version}, {t.count_rows():,} rows")


def _scan_options(f):
    f = click.option("--columns", "-c", help="comma-separated column names")(f)
    f = click.option("--filter", "-f", "where", help="SQL predicate")(f)
    return f


@main.command()
@click.argument("name")
@click.option("-n", "--limit", default=10, show_default=True)
@_scan_options
@click.option("--version", "version", default=None, help="version number or tag")
@click.pass_obj
def head(obj: Ctx, name, limit, columns, where, version):
    """Show the first rows of a table."""
    t = obj.cat.load_table(name, version=_version(version))
    _show(t.to_arrow(columns=columns.split(",") if columns else None, filter=where, limit=limit),
          title=f"{name} @ v{t.version}")


@main.command()
@click.argument("name")
@_scan_options
@click.option("--limit", type=int, default=None)
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="write .parquet/.csv instead of printing")
@click.pass_obj
def scan(obj: Ctx, name, columns, where, limit, output):
    """Scan a table (optionally to a file)."""
    t = obj.cat.load_table(name)
    data = t.to_arrow(columns=columns.split(",") if columns else None, filter=where, limit=limit)
    if output:
        if output.endswith(".csv"):
            import pyarrow.csv as pcsv

            pcsv.write_csv(data, output)
        else:
            import pyarrow.parquet as pq

            pq.write_table(data, output)
        console.print(f"wrote {data.num_rows:,} rows to {output}")
    else:
        _show(data)


def _version(v):
    if v is None:
        return None
    return int(v) if str(v).isdigit() else v


@main.command()
@click.argument("name")
@click.pass_obj
def history(obj: Ctx, name):
    """Versions: time, operation, rows added and removed."""
    t = obj.cat.load_table(name)
    rt = RichTable("version", "time (UTC)", "operation", "added", "removed", "rows", title=name)
    for h in t.versions():
        rt.add_row(str(h["version"]), h["timestamp"].strftime("%Y-%m-%d %H:%M:%S"), str(h["operation"]),
                   f"{h['rows_added']:,}", f"{h['rows_removed']:,}", f"{h['rows']:,}")
    console.print(rt)


@main.command()
@click.argument("name")
@click.argument("version")
@click.option("-n", "--limit", default=10)
@click.pass_obj
def checkout(obj: Ctx, name, version, limit):
    """Show a table as of a version or tag."""
    t = obj.cat.load_table(name, version=_version(version))
    console.print(f"{name} @ version {t.version}: {t.count_rows():,} rows")
    _show(t.to_arrow(limit=limit))


@main.command()
@click.argument("name")
@click.argument("version")
@click.pass_obj
def restore(obj: Ctx, name, version):
    """Make an older version (or tag) the latest."""
    t = obj.cat.load_table(name)
    t.restore(_version(version))
    console.print(f"{name}: restored {version} as version {t.version}")


@main.group()
def tag():
    """Create, list and delete tags."""


@tag.command("create")
@click.argument("name")
@click.argument("tag_name")
@click.argument("version", type=int)
@click.pass_obj
def tag_create(obj: Ctx, name, tag_name, version):
    obj.cat.load_table(name).tags.create(tag_name, version)
    console.print(f"tagged version {version} of {name} as {tag_name}")


@tag.command("list")
@click.argument("name")
@click.pass_obj
def tag_list(obj: Ctx, name):
    rt = RichTable("tag", "version")
    for k, v in obj.cat.load_table(name).tags.list().items():
        rt.add_row(k, str(v["version"]))
    console.print(rt)


@tag.command("delete")
@click.argument("name")
@click.argument("tag_name")
@click.pass_obj
def tag_delete(obj: Ctx, name, tag_name):
    obj.cat.load_table(name).tags.delete(tag_name)
    console.print(f"deleted tag {tag_name}")


@main.command()
@click.argument("name")
@click.option("--where", "-w", required=True, help="SQL predicate of the rows to delete")
@click.pass_obj
def delete(obj: Ctx, name, where):
    """Delete rows matching a predicate."""
    t = obj.cat.load_table(name)
    before = t.count_rows()
    t.delete(where)
    console.print(f"{name}: deleted {before - t.count_rows():,} rows (version {t.version})")


@main.command()
@click.argument("name")
@click.option("--set", "sets", multiple=True, required=True, help="column=SQL expression")
@click.option("--where", "-w", default=None)
@click.pass_obj
def update(obj: Ctx, name, sets, where):
    """Update columns of the rows matching a predicate."""
    values = {}
    for s in sets:
        if "=" not in s:
            raise click.BadParameter(f"--set {s!r}: expected column=expression")
        k, v = s.split("=", 1)
        values[k.strip()] = v.strip()
    t = obj.cat.load_table(name)
    t.update(values, where=where)
    console.print(f"{name}: updated (version {t.version})")


@main.command()
@click.argument("name")
@click.option("--target-rows", default=1024 * 1024, show_default=True)
@click.pass_obj
def compact(obj: Ctx, name, target_rows):
    """Merge small fragments and materialise deletions."""
    t = obj.cat.load_table(name)
    with _with_progress("compacting", 1) as prog:
        task = prog.add_task("compact", total=1)
        metrics = t.compact(target_rows_per_fragment=target_rows)
        prog.advance(task)
    console.print(f"{name}: {metrics}")


@main.command()
@click.argument("name")
@click.option("--older-than", default="14d", show_default=True, help="e.g. 7d, 12h, 30m")
@click.option("--dry-run", is_flag=True)
@click.pass_obj
def cleanup(obj: Ctx, name, older_than, dry_run):
    """Remove old versions and the orphans of failed commits."""
    t = obj.cat.load_table(name)
    with _with_progress("cleaning up", 1) as prog:
        task = prog.add_task("cleanup", total=1)
        report = t.cleanup(older_than=_duration(older_than), dry_run=dry_run)
        prog.advance(task)
    console.print(f"{name}: {report}")


def _duration(text: str) -> dt.timedelta:
    units = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}
    try:
        return dt.timedelta(**{units[text[-1]]: float(text[:-1])})
    except (KeyError, ValueError, IndexError) as exc:
        raise click.BadParameter(f"duration {text!r}: use a number followed by d, h, m or s") from exc


@main.group()
def store():
    """Manifest-store and object-store checks."""


@store.command("check")
@click.argument("url")
@click.option("--storage-option", "-s", multiple=True, help="key=value for an s3:// location")
def store_check(url, storage_option):
    """Check a manifest store (reachable, schema; prints its store id) or an
    object-store location (its conditional put really refuses a second write).
    A manifest-store check creates no database or schema; it creates the
    store id if the store has none yet."""
    opts = dict(s.split("=", 1) for s in storage_option)
    if url.startswith(("s3://", "s3a://", "file://", "/")) or "://" not in url:
        from tessera.stores.object_store import open_object_store
        from tessera.stores.probe import probe_conditional_put

        probe_conditional_put(open_object_store(url, opts))
        console.print(f"[green]ok[/]: {url} refuses a second conditional write")
        return
    from tessera.stores.manifest_store import open_manifest_store

    _refuse_missing_sqlite(url)
    ms = open_manifest_store(url, create=False, check=False)  # a check creates no database, table or schema
    try:
        ms.check()  # StoreSchemaError (the verdict, with what to do) / StoreUnavailableError -> exit 2
        store_id = ms.store_id()  # created here if the store has none yet: this is its first use
    finally:
        ms.close()
    console.print(f"[green]ok[/]: {ms.identity()} is reachable and its schema is current")
    console.print(f"schema: ok\nstore id: {store_id}")


def _refuse_missing_sqlite(url: str) -> None:
    """A SQLite URL whose file does not exist: say so instead of letting the
    driver create an empty database."""
    if not url.lower().startswith("sqlite"):
        return
    from tessera.stores.errors import StoreSchemaError
    from tessera.stores.sql_migrate import parse_sql_url

    path = parse_sql_url(url).database or ""
    if path.startswith("file:"):  # a URI filename: leave it to the driver
        return
    if not os.path.exists(path):
        raise StoreSchemaError(
            f"nothing is there: no SQLite database at {os.path.abspath(path)} (nothing was created); "
            f"create the store with `python deploy/provision_sql.py {url}`, or open it with create=True"
        )


@main.command()
@click.argument("name")
@click.pass_obj
def repair(obj: Ctx, name):
    """Finish half-done commits of a table."""
    problems = obj.cat.load_table(name).repair()
    if problems:
        for p in problems:
            err_console.print(f"[red]{p}[/]")
        sys.exit(1)
    console.print(f"{name}: no half-done commits left")


if __name__ == "__main__":  # pragma: no cover
    main()
