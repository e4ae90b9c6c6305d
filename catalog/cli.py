"""The ``tessera`` command line (click + rich).

Catalog settings come from ``--catalog`` / ``--warehouse``, the environment
(``TESSERA_CATALOG_URI``, ``TESSERA_WAREHOUSE``) or the config file, as for
:func:`catalog.catalog.connect`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import sys
from collections.abc import Callable, Iterator

import click
import pyarrow as pa
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from tessera.format.table import paths

from . import errors as E

console = Console()
err_console = Console(stderr=True)

OUTPUT = click.option(
    "--output",
    "-o",
    "output",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table (for people) or json (for programs)",
)
SCAN_DEFAULT_LIMIT = 20
MIN_CELL = 8  # a column is never squeezed below this many characters (or its content, if shorter)
MAX_CELL = 40  # nor widened beyond this


def _consoles() -> None:
    """Fresh consoles for this invocation (the terminal width is read now: COLUMNS or the terminal)."""
    global console, err_console
    console, err_console = Console(), Console(stderr=True)


class Ctx:
    def __init__(self, catalog_uri: str | None, warehouse: str | None, config_name: str | None) -> None:
        self.catalog_uri, self.warehouse, self.config_name = catalog_uri, warehouse, config_name
        self._cat = None
        self._ro = None

    @property
    def cat(self):
        """The catalog, created (and migrated) if it is not there yet: for commands that write."""
        if self._cat is None:
            from .catalog import connect

            self._cat = connect(self.catalog_uri, self.warehouse, name=self.config_name)
        return self._cat

    @property
    def ro(self):
        """The catalog for read-only commands: nothing is created; a catalog that
        is not there is a NoCatalogError (exit 2)."""
        if self._cat is not None:
            return self._cat
        if self._ro is None:
            from .catalog import connect

            self._ro = connect(self.catalog_uri, self.warehouse, name=self.config_name, create=False)
        return self._ro

    def _catalog_for(self, name: str, write: bool):
        """The catalog a bare table name is looked up in; with none configured,
        a TableNameError saying how to name one (or the folder instead)."""
        try:
            return self.cat if write else self.ro
        except E.InvalidArgumentError as exc:
            if not str(exc).startswith(_NO_WAREHOUSE):
                raise
            from .names import bare_name_error

            raise bare_name_error(name, catalog_hint=_CLI_CATALOG_HINT) from None

    def table(self, name: str, version=None, *, write: bool = False):
        """The table a command names: a path or URI (absolute, with a scheme,
        or relative with a separator: ``./t``, ``data/t``) opens the table
        there; a bare name (``sales.orders``) is a table of the catalog
        (see :mod:`tessera.catalog.names`)."""
        from .names import is_table_name

        if not is_table_name(name):
            from .table import Table

            return Table.open(name, version)
        return self._catalog_for(name, write).load_table(name, version=version)

    def close(self) -> None:
        for c in (self._cat, self._ro):
            if c is not None:
                c.close()


_NO_WAREHOUSE = "connect() needs a warehouse"
_CLI_CATALOG_HINT = (
    "name the catalog with --warehouse DIR, --catalog URL or --config-name NAME (or TESSERA_WAREHOUSE / "
    "TESSERA_CATALOG_URI)"
)


# -- output -----------------------------------------------------------------------------


def _cell(v) -> str:
    """A value as one line of text; never empty (None is ∅, "" is \"\")."""
    if v is None:
        return "∅"
    if isinstance(v, bytes):
        v = v.hex() if len(v) <= 32 else v[:32].hex() + "…"
    elif isinstance(v, (dt.datetime, dt.date)):
        v = v.isoformat(sep=" ") if isinstance(v, dt.datetime) else v.isoformat()
    elif isinstance(v, float):
        v = repr(v)
    elif isinstance(v, (dict, list, tuple)):
        v = json.dumps(v, default=str, ensure_ascii=False)
    text = str(v).replace("\r\n", "⏎").replace("\n", "⏎").replace("\r", "⏎").replace("\t", " ")
    return text if text else '""'


def _fit(headers: list[str], rows: list[list[str]], width: int) -> list[int]:
    """Column widths for as many leading columns as fit in ``width`` terminal
    cells (each at least MIN_CELL, or its content if shorter); at least one."""
    from rich.cells import cell_len

    natural = []
    for i, h in enumerate(headers):
        n = max([cell_len(h)] + [cell_len(r[i]) for r in rows])
        natural.append(max(1, min(n, MAX_CELL)))
    mins = [min(n, MIN_CELL) for n in natural]
    budget = width - 1  # the left border; each column costs its width + 3 (padding, border)
    widths: list[int] = []
    for m in mins:
        if sum(w + 3 for w in widths) + m + 3 > budget:
            break
        widths.append(m)
    if not widths:
        return [max(1, budget - 3)]
    spare = budget - sum(w + 3 for w in widths)
    while spare > 0:
        grew = False
        for i in range(len(widths)):
            if spare > 0 and widths[i] < natural[i]:
                widths[i] += 1
                spare -= 1
                grew = True
        if not grew:
            break
    return widths


def _middle(text: str, width: int) -> str:
    """``text`` cut in the middle to ``width`` cells (column names differ at their ends)."""
    from rich.cells import cell_len, set_cell_size

    if cell_len(text) <= width:
        return text
    if width < 5:
        return set_cell_size(text, width - 1) + "…" if width > 1 else "…"
    tail = (width - 1) // 2
    head = width - 1 - tail
    end = text[::-1]
    return set_cell_size(text, head) + "…" + set_cell_size(end, tail)[::-1]


def _print_rows(
    headers: list[str],
    rows: list[list],
    title: str | None = None,
    note: str | None = None,
    hint: str = "use --output json",
) -> None:
    """A table that fits the terminal: long cells end in an ellipsis, columns
    that do not fit are left out (and counted), no cell is ever blank."""
    from rich.text import Text

    texts = [[_cell(v) for v in r] for r in rows]
    heads = [_cell(h) for h in headers]
    widths = _fit(heads, texts, console.width)
    k = len(widths)
    rt = RichTable(title=title, show_lines=False, expand=False)
    for h, w in zip(heads, widths):
        t = Text(_middle(h, w), style="bold")
        rt.add_column(t, width=w, no_wrap=True, overflow="ellipsis")
    for r in texts:
        cells = []
        for v, w in zip(r, widths):
            t = Text(v)
            t.truncate(w, overflow="ellipsis")
            cells.append(t)
        rt.add_row(*cells)
    console.print(rt)
    if k < len(heads):
        more = len(heads) - k
        console.print(
            f"… {more} more column{'s' if more > 1 else ''} not shown "
            f"({', '.join(heads[k : k + 3])}{', …' if more > 3 else ''}); {hint}"
        )
    if note:
        console.print(note)


def _json_default(v):
    if isinstance(v, (dt.datetime, dt.date)):
        return v.isoformat()
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    return str(v)


def _print_json(obj) -> None:
    click.echo(json.dumps(obj, default=_json_default, ensure_ascii=False, indent=2))


def _show(table: pa.Table, title: str | None = None, note: str | None = None) -> None:
    _print_rows(
        table.column_names,
        [list(r.values()) for r in table.to_pylist()],
        title=title,
        note=note,
        hint="choose columns with --columns, or use --output json",
    )


def _props(pairs: tuple[str, ...], option: str = "--property/-p") -> dict:
    out = {}
    for p in pairs:
        k, sep, v = p.partition("=")
        if not sep or not k.strip():
            raise E.InvalidArgumentError(f"{option} {p!r}: expected key=value")
        out[k.strip()] = v
    return out


def _read_files(paths: tuple[str, ...], schema: pa.Schema | None = None) -> pa.Table:
    """The files' rows; CSV/TSV text is read as ``schema``'s column types when
    given (a table's, on append: text has no types of its own), typed files
    (Parquet, Arrow) keep theirs."""
    import pyarrow.csv as pcsv
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    tables = []
    for p in paths:
        ext = os.path.splitext(p)[1].lower()
        kind = {
            ".parquet": "Parquet",
            ".pq": "Parquet",
            ".csv": "CSV",
            ".tsv": "TSV",
            ".arrow": "Arrow",
            ".feather": "Arrow",
            ".ipc": "Arrow",
        }.get(ext)
        if kind is None:
            raise E.InvalidArgumentError(
                f"{p}: unknown file type {ext or '(no suffix)'!r}; use .parquet, .csv, .tsv or .arrow/.feather files"
            )
        try:
            if kind == "Parquet":
                tables.append(pq.read_table(p))
            elif kind in ("CSV", "TSV"):
                types = {f.name: f.type for f in schema or [] if not pa.types.is_nested(f.type)}
                tables.append(
                    pcsv.read_csv(
                        p,
                        parse_options=pcsv.ParseOptions(delimiter="\t" if kind == "TSV" else ","),
                        convert_options=pcsv.ConvertOptions(column_types=types),
                    )
                )
            else:
                tables.append(feather.read_table(p))
        except (pa.ArrowException, OSError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise E.InvalidArgumentError(f"{p}: not a readable {kind} file ({first})") from None
    if len(tables) == 1:
        return tables[0]
    try:
        return pa.concat_tables(tables, promote_options="default")
    except pa.ArrowException as exc:
        raise E.InvalidArgumentError(f"the input files do not share a schema: {exc}") from None


def _with_progress(label: str, total: int):
    return Progress(
        TextColumn(label),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    )


@contextlib.contextmanager
def _phases(label: str) -> Iterator[Callable[[str, int, int], None]]:
    """A progress bar (on stderr, removed when done) fed by an operation's
    ``progress(phase, done, total)`` calls: one bar, relabelled per phase."""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as prog:
        task = prog.add_task(label, total=None)

        def tell(phase: str, done: int, total: int) -> None:
            prog.update(task, description=f"{label}: {phase}", completed=done, total=total)

        yield tell


# API wording -> CLI wording in error messages
_CLI_WORDS = [
    ("create it with create_namespace", "create it with `tessera namespace create`"),
    (
        "connect() needs a warehouse (argument, TESSERA_WAREHOUSE or config file)",
        "no warehouse: pass --warehouse, set TESSERA_WAREHOUSE or name a catalog of the config file with --config-name",
    ),
    (
        "an object-store warehouse needs a catalog database URL (uri=...)",
        "an object-store warehouse needs a catalog database: pass --catalog URL",
    ),
    ("no catalog named", "--config-name: no catalog named"),
    (
        "(nothing was created)",
        "(nothing was created); create a catalog with `tessera init`, or check --warehouse/--catalog",
    ),
    ("or open it with create=True", "or create it by using it as a table's --commit-store"),
]


def _cli_message(exc: BaseException) -> str:
    msg = str(exc).strip() or type(exc).__name__
    for api, cli in _CLI_WORDS:
        msg = msg.replace(api, cli)
    return " ".join(msg.split())  # one line


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (
            E.TesseraError,
            E.CommitError,
            E.FormatError,
            E.StoreError,
            E.PredicateError,
            pa.ArrowException,
            OSError,
        ) as exc:
            err_console.print(f"[bold red]error:[/] {_cli_message(exc)}", markup=True, highlight=False, soft_wrap=True)
            sys.exit(2)
        finally:
            if isinstance(ctx.obj, Ctx):
                ctx.obj.close()


@click.group(cls=_Group)
@click.option("--catalog", "catalog_uri", envvar="TESSERA_CATALOG_URI", help="SQLAlchemy URL of the catalog database.")
@click.option("--warehouse", envvar="TESSERA_WAREHOUSE", help="Where tables live (path or s3://bucket/prefix).")
@click.option("--config-name", default=None, help="Section [catalog.NAME] of the config file.")
@click.pass_context
def main(ctx, catalog_uri, warehouse, config_name):
    """Tessera: transactional Lance tables.

    A table is named in the catalog (sales.orders: --warehouse, --catalog or
    --config-name say which) or given by path (./orders, /data/orders,
    s3://bucket/orders); a bare name is never a folder.
    """
    _consoles()
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
@click.option("--property", "-p", "props", multiple=True, help="key=value (repeatable)")
@click.pass_obj
def ns_create(obj: Ctx, name, props):
    """Create a namespace."""
    properties = _props(props)
    obj.cat.create_namespace(name, properties)
    console.print(f"created namespace {name}")


@namespace.command("list")
@click.argument("parent", required=False)
@OUTPUT
@click.pass_obj
def ns_list(obj: Ctx, parent, output):
    """List namespaces (the top-level ones, or the children of PARENT)."""
    cat = obj.ro
    items = [{"namespace": n, "properties": cat.namespace_properties(n)} for n in cat.list_namespaces(parent)]
    if output == "json":
        return _print_json(items)
    if not items:
        console.print(
            "no namespaces" + (f" in {parent}" if parent else "") + "; create one with `tessera namespace create NAME`"
        )
        return
    _print_rows(["namespace", "properties"], [[i["namespace"], i["properties"] or "{}"] for i in items])


@namespace.command("drop")
@click.argument("name")
@click.pass_obj
def ns_drop(obj: Ctx, name):
    """Drop an empty namespace."""
    try:
        obj.cat.drop_namespace(name)
    except E.NamespaceNotEmptyError as exc:
        raise E.NamespaceNotEmptyError(
            f"{str(exc).replace('; drop them first', '')}; drop its tables first with "
            f"`tessera table drop {name}.TABLE` (add --purge to delete their data too) and its namespaces with "
            f"`tessera namespace drop {name}.CHILD` (list them with `tessera table list {name}` and "
            f"`tessera namespace list {name}`)"
        ) from None
    console.print(f"dropped namespace {name}")


# -- table group ------------------------------------------------------------------------


@main.group("table")
def table_group():
    """List, describe, drop and rename tables."""


def _all_namespaces(cat, parent=None) -> list[str]:
    out = []
    for n in cat.list_namespaces(parent):
        out.append(n)
        out.extend(_all_namespaces(cat, n))
    return out


@table_group.command("list")
@click.argument("namespace", required=False)
@OUTPUT
@click.pass_obj
def table_list(obj: Ctx, namespace, output):
    """List the tables of NAMESPACE (default: of every namespace)."""
    cat = obj.ro
    spaces = [namespace] if namespace else _all_namespaces(cat)
    items = []
    for ns in spaces:
        for t in cat.list_tables(ns):
            info = cat.table_info(t)
            items.append({"table": t, "commit_store": info["commit_store"], "location": info["uri"]})
    if output == "json":
        return _print_json(items)
    if not items:
        console.print(
            "no tables"
            + (f" in {namespace}" if namespace else "")
            + "; create one with `tessera create NAMESPACE.TABLE FILE...`"
        )
        return
    _print_rows(["table", "commit store", "location"], [[i["table"], i["commit_store"], i["location"]] for i in items])


def _size(t) -> dict:
    frags = t.fragments
    rows = t.count_rows()
    nbytes = 0
    files = 0
    for f in frags:
        for df in f.files:
            files += 1
            size = df.file_size_bytes
            if not size:
                try:
                    size = t.store.size(paths.data_path(df.path))
                except Exception:  # noqa: BLE001 - a size we cannot read is left out
                    size = 0
            nbytes += size
    return {"rows": rows, "fragments": len(frags), "data_files": files, "bytes": nbytes}


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


def _describe(obj: Ctx, name, output, version):
    from .names import is_table_name

    if is_table_name(name):
        cat = obj._catalog_for(name, write=False)
        info = cat.table_info(name)
        t = cat.load_table(name, version=_version(version))
        versions = t.versions()
    else:  # a table by path: what the table itself records
        t = obj.table(name, _version(version))
        versions = t.versions()
        store = t._handler.config().get("tessera.commit.store")
        info = {
            "name": name,
            "uri": t.uri,
            "commit_store": store or "native",
            "created_at": versions[0]["timestamp"] if versions else None,
            "properties": {},
        }
    d = {
        "name": info["name"],
        "location": info["uri"],
        "version": t.version,
        "latest_version": t.latest_version(),
        "versions": len(versions),
        "commit_store": info["commit_store"],
        "file_version": t.file_version,
        "stable_row_ids": t.stable_row_ids,
        "created_at": info["created_at"],
        "properties": info["properties"],
        "schema": [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in t.schema],
        **_size(t),
    }
    if output == "json":
        return _print_json(d)
    facts = [
        ["name", d["name"]],
        ["location", d["location"]],
        ["version", f"{d['version']} (latest {d['latest_version']}, {d['versions']} version(s))"],
        ["commit store", d["commit_store"]],
        ["file version", d["file_version"]],
        ["stable row ids", "yes" if d["stable_row_ids"] else "no"],
        ["created", d["created_at"]],
        ["rows", f"{d['rows']:,}"],
        ["fragments", f"{d['fragments']:,} ({d['data_files']:,} data files)"],
        ["size", _human_bytes(d["bytes"])],
    ]
    facts += [[f"property {k}", v] for k, v in sorted(d["properties"].items())]
    _print_rows(["field", "value"], facts, title=d["name"])
    _print_rows(
        ["column", "type", "nullable"],
        [[c["name"], c["type"], "yes" if c["nullable"] else "no"] for c in d["schema"]],
        title="schema",
    )


@table_group.command("describe")
@click.argument("name")
@click.option("--version", "version", default=None, help="version number or tag")
@OUTPUT
@click.pass_obj
def table_describe(obj: Ctx, name, version, output):
    """Schema, version, versions, commit store, properties and size of a table."""
    _describe(obj, name, output, version)


@main.command("describe")
@click.argument("name")
@click.option("--version", "version", default=None, help="version number or tag")
@OUTPUT
@click.pass_obj
def describe(obj: Ctx, name, version, output):
    """Same as `tessera table describe`."""
    _describe(obj, name, output, version)


@table_group.command("drop")
@click.argument("name")
@click.option("--purge", is_flag=True, help="also delete the table's data files and commit records")
@click.option("--yes", "-y", is_flag=True, help="do not ask before --purge deletes data")
@click.pass_obj
def table_drop(obj: Ctx, name, purge, yes):
    """Remove a table from the catalog (its data stays unless --purge)."""
    if purge and not yes:
        obj.cat.table_info(name)  # a missing table is said before asking
        try:
            confirmed = click.confirm(f"delete every file of {name} for good?", default=False, err=True)
        except click.Abort:
            confirmed = False
        if not confirmed:
            raise E.InvalidArgumentError(f"not confirmed: {name} was not dropped (add --yes to skip the question)")
    obj.cat.drop_table(name, purge=purge)
    console.print(f"dropped table {name}" + (" and deleted its data" if purge else " (its data files were kept)"))


@table_group.command("rename")
@click.argument("old")
@click.argument("new")
@click.pass_obj
def table_rename(obj: Ctx, old, new):
    """Rename a table (its data stays where it is)."""
    obj.cat.rename_table(old, new)
    console.print(f"renamed {old} to {new}")


# -- tables ---------------------------------------------------------------------------


@main.command()
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
    from .names import is_table_name

    properties = _props(props)
    if not is_table_name(name):
        from .table import Table

        if properties:
            raise E.InvalidArgumentError("--property records catalog properties; a table created by path has none")
        if commit_store == "catalog":
            raise E.InvalidArgumentError("--commit-store catalog needs a catalog table name; a path has no catalog")
        data = _read_files(files)
        store = None if commit_store in ("auto", "native") else commit_store
        t = Table.create(name, data, file_version=file_version, commit_store=store)
        console.print(f"created {name} (version {t.version}, {t.count_rows():,} rows)")
        return
    data = _read_files(files)  # read (and checked) before the catalog is created or touched
    cat = obj._catalog_for(name, write=True)
    t = cat.create_table(
        name, data, file_version=file_version, commit_store=commit_store, properties=properties or None
    )
    console.print(f"created {name} (version {t.version}, {t.count_rows():,} rows)")


@main.command()
@click.argument("name")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.pass_obj
def append(obj: Ctx, name, files):
    """Append Parquet, CSV or Arrow files to a table."""
    t = obj.table(name, write=True)
    # every file is read (and checked) before anything is written; CSV text as the table's types
    data = [_read_files((f,), t.schema) for f in files]
    with _with_progress("appending", len(files)) as prog:
        task = prog.add_task("append", total=len(files))
        for d in data:
            t.append(d)
            prog.advance(task)
    console.print(f"{name}: version {t.version}, {t.count_rows():,} rows")


def _scan_options(f):
    f = click.option("--columns", "-c", help="comma-separated column names")(f)
    f = click.option("--filter", "-f", "where", help="SQL predicate")(f)
    return f


def _columns(columns):
    if not columns:
        return None
    cols = [c.strip() for c in columns.split(",") if c.strip()]
    if not cols:
        raise E.InvalidArgumentError(f"--columns {columns!r}: name at least one column")
    return cols


@main.command()
@click.argument("name")
@click.option("-n", "--limit", default=10, show_default=True, type=click.IntRange(min=0))
@_scan_options
@click.option("--version", "version", default=None, help="version number or tag")
@OUTPUT
@click.pass_obj
def head(obj: Ctx, name, limit, columns, where, version, output):
    """Show the first rows of a table."""
    t = obj.table(name, _version(version))
    data = t.to_arrow(columns=_columns(columns), filter=where, limit=limit)
    if output == "json":
        return _print_json(data.to_pylist())
    _show(data, title=f"{name} @ v{t.version}")


_OUT_FORMATS = {
    ".csv": "csv",
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
}


class _JsonWriter:
    def __init__(self, f, lines: bool):
        self.f, self.lines, self.first = f, lines, True
        if not lines:
            f.write("[")

    def write_batch(self, batch: pa.RecordBatch) -> None:
        for row in batch.to_pylist():
            text = json.dumps(row, default=_json_default, ensure_ascii=False)
            if self.lines:
                self.f.write(text + "\n")
            else:
                self.f.write(("\n" if self.first else ",\n") + text)
            self.first = False

    def close(self) -> None:
        if not self.lines:
            self.f.write("\n]\n" if not self.first else "]\n")


def _write_out(reader: pa.RecordBatchReader, path: str, fmt: str) -> int:
    """Stream the batches to ``path`` (through a temporary file renamed at the
    end: a failed scan leaves no partial file)."""
    import tempfile

    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise E.InvalidArgumentError(f"--out {path}: the folder {folder} does not exist")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tessera-scan-", suffix=os.path.splitext(path)[1])
    os.close(fd)
    rows = 0
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            with pq.ParquetWriter(tmp, reader.schema) as w:
                for b in reader:
                    w.write_batch(b)
                    rows += b.num_rows
        elif fmt == "csv":
            import pyarrow.csv as pcsv

            with pcsv.CSVWriter(tmp, reader.schema) as w:
                for b in reader:
                    w.write_batch(b)
                    rows += b.num_rows
        else:
            with open(tmp, "w", encoding="utf-8") as f:
                w = _JsonWriter(f, lines=fmt == "jsonl")
                for b in reader:
                    w.write_batch(b)
                    rows += b.num_rows
                w.close()
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return rows


@main.command()
@click.argument("name")
@_scan_options
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
        fmt = _OUT_FORMATS.get(os.path.splitext(out)[1].lower())
        if fmt is None:
            raise E.InvalidArgumentError(
                f"--out {out}: unknown output format {os.path.splitext(out)[1] or '(no suffix)'!r}; "
                "name a .parquet, .csv, .json or .jsonl file (or use --out json to print JSON lines)"
            )
    elif limit is None and not all_rows:
        limit = SCAN_DEFAULT_LIMIT
    t = obj.table(name, _version(version))
    cols = _columns(columns)
    if to_file:
        assert fmt is not None  # an unknown suffix was refused above
        rows = _write_out(t.to_batches(columns=cols, filter=where, limit=limit), out, fmt)
        console.print(f"wrote {rows:,} rows to {out}")
        return
    # one row past the limit tells whether there is more
    reader = t.to_batches(columns=cols, filter=where, limit=None if limit is None else limit + 1)
    if out == "json":
        n = 0
        for b in reader:
            for row in b.to_pylist():
                if limit is not None and n >= limit:
                    break
                click.echo(json.dumps(row, default=_json_default, ensure_ascii=False))
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
    _show(data, title=f"{name} @ v{t.version}", note=note)


def _version(v):
    if v is None:
        return None
    return int(v) if str(v).isdigit() else v


@main.command()
@click.argument("name")
@OUTPUT
@click.pass_obj
def history(obj: Ctx, name, output):
    """Versions: time, operation, rows added and removed."""
    t = obj.table(name)
    vs = t.versions()
    if output == "json":
        return _print_json(vs)
    _print_rows(
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
    )


@main.command()
@click.argument("name")
@click.argument("version")
@click.option("-n", "--limit", default=10, type=click.IntRange(min=0))
@OUTPUT
@click.pass_obj
def checkout(obj: Ctx, name, version, limit, output):
    """Show a table as of a version or tag."""
    t = obj.table(name, _version(version))
    data = t.to_arrow(limit=limit)
    if output == "json":
        return _print_json({"version": t.version, "rows": t.count_rows(), "head": data.to_pylist()})
    console.print(f"{name} @ version {t.version}: {t.count_rows():,} rows")
    _show(data)


@main.command()
@click.argument("name")
@click.argument("version")
@click.pass_obj
def restore(obj: Ctx, name, version):
    """Make an older version (or tag) the latest."""
    t = obj.table(name, write=True)
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
    """Tag a version of a table."""
    obj.table(name, write=True).tags.create(tag_name, version)
    console.print(f"tagged version {version} of {name} as {tag_name}")


@tag.command("list")
@click.argument("name")
@OUTPUT
@click.pass_obj
def tag_list(obj: Ctx, name, output):
    """List the tags of a table."""
    tags = obj.table(name).tags.list()
    if output == "json":
        return _print_json([{"tag": k, "version": int(v["version"])} for k, v in tags.items()])
    if not tags:
        console.print(f"{name} has no tags")
        return
    _print_rows(["tag", "version"], [[k, v["version"]] for k, v in tags.items()])


@tag.command("delete")
@click.argument("name")
@click.argument("tag_name")
@click.pass_obj
def tag_delete(obj: Ctx, name, tag_name):
    """Delete a tag."""
    obj.table(name, write=True).tags.delete(tag_name)
    console.print(f"deleted tag {tag_name}")


@main.group()
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
    console.print(f"{name}: zone map on {column} (version {t.version})")


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
        return _print_json(rows)
    if not rows:
        console.print(f"{name} has no indices")
        return
    _print_rows(
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
        console.print(f"{name}: indices already cover every fragment (version {t.version})")
    else:
        console.print(f"{name}: indices updated (version {t.version})")


@main.command()
@click.argument("name")
@click.option("--where", "-w", required=True, help="SQL predicate of the rows to delete")
@click.pass_obj
def delete(obj: Ctx, name, where):
    """Delete rows matching a predicate."""
    t = obj.table(name, write=True)
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
    values = {k.strip(): v.strip() for k, v in _props(sets, "--set").items()}
    t = obj.table(name, write=True)
    t.update(values, where=where)
    console.print(f"{name}: updated (version {t.version})")


@main.command()
@click.argument("name")
@click.option("--target-rows", default=1024 * 1024, show_default=True, type=click.IntRange(min=1))
@OUTPUT
@click.pass_obj
def compact(obj: Ctx, name, target_rows, output):
    """Merge small fragments and materialise deletions."""
    t = obj.table(name, write=True)
    before = len(t.fragments)
    with _phases("compacting") as tell:
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
        return _print_json(summary)
    if not m.fragments_removed and not m.fragments_added:
        console.print(f"{name}: nothing to compact ({before} fragment(s), version {t.version})")
        return
    console.print(
        f"{name}: compacted {m.fragments_removed} fragment(s) into {m.fragments_added} "
        f"({before} → {len(t.fragments)} fragments; {m.files_removed} file(s) replaced by "
        f"{m.files_added}); new version {m.version if m.version is not None else t.version}"
    )


@main.command()
@click.argument("name")
@click.option("--older-than", default="14d", show_default=True, help="e.g. 7d, 12h, 30m")
@click.option("--dry-run", is_flag=True, help="say what would be removed, remove nothing")
@OUTPUT
@click.pass_obj
def cleanup(obj: Ctx, name, older_than, dry_run, output):
    """Remove old versions and the orphans of failed commits."""
    age = _duration(older_than)
    t = obj.table(name, write=True)
    with _phases("cleaning up") as tell:
        r = t.cleanup(older_than=age, dry_run=dry_run, progress=tell)
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
    }
    if output == "json":
        return _print_json(summary)
    verb = "would remove" if dry_run else "removed"
    vs = r.removed_versions
    vtext = "no versions" if not vs else f"{len(vs)} version(s) ({_ranges(vs)})"
    console.print(
        f"{name}: {verb} {vtext}, {len(r.removed_files)} file(s), {_human_bytes(r.bytes_removed)}; "
        f"kept {len(r.kept_versions)} version(s)"
    )
    if orphans is not None:
        console.print(
            f"{name}: {verb} {len(orphans.removed)} orphaned file(s) of failed commits "
            f"({_human_bytes(orphans.bytes_removed)})"
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


def _duration(text: str) -> dt.timedelta:
    units = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}
    try:
        value = float(text[:-1])
        if value < 0:
            raise ValueError
        return dt.timedelta(**{units[text[-1]]: value})
    except (KeyError, ValueError, IndexError, OverflowError):
        raise E.InvalidArgumentError(
            f"--older-than {text!r}: use a number followed by d, h, m or s (e.g. 7d)"
        ) from None


@main.group()
def store():
    """Manifest-store and object-store checks."""


@store.command("check")
@click.argument("url")
@click.option("--storage-option", "-s", multiple=True, help="key=value for an s3:// location")
@OUTPUT
def store_check(url, storage_option, output):
    """Check a manifest store (reachable, schema; prints its store id) or an
    object-store location (its conditional put really refuses a second write).
    A manifest-store check creates no database or schema; it creates the
    store id if the store has none yet."""
    opts = _props(storage_option, "--storage-option/-s")
    if url.startswith(("s3://", "s3a://", "file://", "/")) or "://" not in url:
        from tessera.stores.object_store import open_object_store
        from tessera.stores.probe import probe_conditional_put

        probe_conditional_put(open_object_store(url, opts))
        if output == "json":
            return _print_json({"url": url, "kind": "object store", "conditional_put": "ok"})
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
    if output == "json":
        return _print_json({"url": ms.identity(), "kind": "manifest store", "schema": "ok", "store_id": str(store_id)})
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
            f"create the store with `python deploy/provision_sql.py {url}`, or create it by using it as "
            "a table's --commit-store"
        )


@main.command()
@click.argument("name")
@click.pass_obj
def repair(obj: Ctx, name):
    """Finish half-done commits of a table."""
    problems = obj.table(name, write=True).repair()
    if problems:
        for p in problems:
            err_console.print(f"[red]{p}[/]")
        sys.exit(1)
    console.print(f"{name}: no half-done commits left")


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on (loopback unless told)")
@click.option("--port", default=2333, show_default=True, type=click.IntRange(1, 65535))
@click.option("--workers", default=1, show_default=True, type=click.IntRange(min=1), help="server processes")
@click.option(
    "--token-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="file holding the bearer token clients must send (default: $TESSERA_SERVER_TOKEN; neither: no token)",
)
@click.option("--commit-store", default=None, help="coordinator of declared tables: auto, native, catalog or a URL")
@click.option("--max-body-bytes", default=1 << 20, show_default=True, type=click.IntRange(min=1))
@click.option("--storage-option", "-s", multiple=True, help="key=value for an s3:// warehouse (repeatable)")
@click.option("--vend-storage-options", is_flag=True, help="hand the storage options to clients in describe_table")
@click.pass_obj
def serve(
    obj: Ctx, host, port, workers, token_file, commit_store, max_body_bytes, storage_option, vend_storage_options
):
    """Serve the catalog as a Lance REST Namespace: pylance commits through it with
    lance_namespace.connect("rest", {"uri": "http://HOST:PORT"}) (add
    "header.Authorization": "Bearer TOKEN" when a token is set)."""
    try:
        from .server import serve as run_server
    except ImportError as exc:  # starlette / uvicorn / lance-namespace: the `server` extra
        raise E.InvalidArgumentError(
            f"tessera serve needs the server extra (pip install 'tessera[server]'): {exc}"
        ) from None
    obj.cat.close()  # create or upgrade the catalog once, here, rather than in every worker
    props = {"warehouse": obj.warehouse, "uri": obj.catalog_uri, "name": obj.config_name, "commit_store": commit_store}
    props = {k: v for k, v in props.items() if v is not None}
    props.update({f"storage.{k}": v for k, v in _props(storage_option, "--storage-option/-s").items()})
    props.update(create="false", vend_storage_options="true" if vend_storage_options else "false")
    try:
        run_server(props, host=host, port=port, workers=workers, token_file=token_file, max_body_bytes=max_body_bytes)
    except ValueError as exc:  # a bad token file
        raise E.InvalidArgumentError(str(exc)) from None


if __name__ == "__main__":  # pragma: no cover
    main()
