"""Options and arguments several commands share: --output, --property style
key=value pairs, --columns/--filter, a version number or tag."""

from __future__ import annotations

import click

from .. import errors as E

OUTPUT = click.option(
    "--output",
    "-o",
    "output",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table (for people) or json (for programs)",
)


def parse_props(pairs: tuple[str, ...], option: str = "--property/-p") -> dict:
    out = {}
    for p in pairs:
        k, sep, v = p.partition("=")
        if not sep or not k.strip():
            raise E.InvalidArgumentError(f"{option} {p!r}: expected key=value")
        out[k.strip()] = v
    return out


def scan_options(f):
    f = click.option("--columns", "-c", help="comma-separated column names")(f)
    f = click.option("--filter", "-f", "where", help="SQL predicate")(f)
    return f


def parse_columns(columns):
    if not columns:
        return None
    cols = [c.strip() for c in columns.split(",") if c.strip()]
    if not cols:
        raise E.InvalidArgumentError(f"--columns {columns!r}: name at least one column")
    return cols


def parse_version(v):
    if v is None:
        return None
    return int(v) if str(v).isdigit() else v
