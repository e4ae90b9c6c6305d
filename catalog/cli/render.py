"""What the command line prints (rich): tables that fit the terminal, JSON,
progress bars on stderr, byte counts."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Callable, Iterator

import click
import pyarrow as pa
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable
from rich.text import Text

# markup off: what is printed is text (names, paths, messages like "pip install 'tessera[postgres]'"),
# never rich's markup; the few styled words are marked up explicitly (``styled``)
console = Console(markup=False)
err_console = Console(stderr=True, markup=False)

MIN_CELL = 8  # a column is never squeezed below this many characters (or its content, if shorter)
MAX_CELL = 40  # nor widened beyond this


def fresh_consoles() -> None:
    """Fresh consoles for this invocation (the terminal width is read now: COLUMNS or the terminal)."""
    global console, err_console
    console, err_console = Console(markup=False), Console(stderr=True, markup=False)


def styled(style: str, word: str, rest: str = "") -> Text:
    """``word`` in ``style``, then ``rest`` as plain text (nothing in it is markup)."""
    return Text.assemble((word, style), rest)


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


def _fit(headers: list[str], rows: list[list[str]], width: int, whole: frozenset[int] = frozenset()) -> list[int]:
    """Column widths for as many leading columns as fit in ``width`` terminal
    cells (each at least MIN_CELL, or its content if shorter; the columns in
    ``whole``, such as a timestamp, never less than their content); at least one."""
    from rich.cells import cell_len

    natural = []
    for i, h in enumerate(headers):
        n = max([cell_len(h)] + [cell_len(r[i]) for r in rows])
        natural.append(max(1, min(n, MAX_CELL)))
    mins = [n if i in whole else min(n, MIN_CELL) for i, n in enumerate(natural)]
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


def print_rows(
    headers: list[str],
    rows: list[list],
    title: str | None = None,
    note: str | None = None,
    hint: str = "use --output json",
    whole: frozenset[int] = frozenset(),
) -> None:
    """A table that fits the terminal: long cells end in an ellipsis, columns
    that do not fit are left out (and counted), no cell is ever blank; the
    columns in ``whole`` are never cut (others give way first)."""
    from rich.text import Text

    texts = [[_cell(v) for v in r] for r in rows]
    heads = [_cell(h) for h in headers]
    widths = _fit(heads, texts, console.width, whole)
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


def json_default(v):
    if isinstance(v, (dt.datetime, dt.date)):
        return v.isoformat()
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    return str(v)


def print_json(obj) -> None:
    click.echo(json.dumps(obj, default=json_default, ensure_ascii=False, indent=2))


def show(table: pa.Table, title: str | None = None, note: str | None = None) -> None:
    print_rows(
        table.column_names,
        [list(r.values()) for r in table.to_pylist()],
        title=title,
        note=note,
        hint="choose columns with --columns, or use --output json",
    )


def progress(label: str, total: int):
    return Progress(
        TextColumn(label, markup=False),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    )


@contextlib.contextmanager
def rows_written(label: str, total: int) -> Iterator[Callable[[], Callable[[str, int, int | None], None]]]:
    """A bar of the rows written (on stderr, removed when done) by one or
    more writes: ``next_write()`` is the ``progress=`` of the next write, whose
    rows count after those of the writes before it.  The write tells its rows
    as it takes them, so the bar moves with the rows, not with whole files (a
    10M-row file sat at 0/1 until it was done)."""
    with progress(label, total) as prog:
        task = prog.add_task(label, total=total)
        written = 0  # rows of the writes so far

        def next_write() -> Callable[[str, int, int | None], None]:
            before = written

            def tell(phase: str, done: int, _total: int | None) -> None:
                nonlocal written
                written = before + done
                prog.update(task, completed=written)

            return tell

        yield next_write


@contextlib.contextmanager
def phases(label: str) -> Iterator[Callable[[str, int, int], None]]:
    """A progress bar (on stderr, removed when done) fed by an operation's
    ``progress(phase, done, total)`` calls: one bar, relabelled per phase."""
    with Progress(
        TextColumn("{task.description}", markup=False),
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


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)
