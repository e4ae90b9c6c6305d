"""``tessera table``: list, describe, drop and rename the tables of a catalog
(and ``tessera describe``, the same as ``tessera table describe``)."""

from __future__ import annotations

import click

from .. import errors as E
from . import render
from .context import Ctx
from .options import OUTPUT, parse_version


@click.group("table")
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
        return render.print_json(items)
    if not items:
        render.console.print(
            "no tables"
            + (f" in {namespace}" if namespace else "")
            + "; create one with `tessera create NAMESPACE.TABLE FILE...`"
        )
        return
    render.print_rows(
        ["table", "commit store", "location"], [[i["table"], i["commit_store"], i["location"]] for i in items]
    )


def _size(t) -> dict:
    """What ``describe`` says of the version's rows, files and columns (``Table.stats``)."""
    st = t.stats().to_dict()
    return {
        **{k: st[k] for k in ("rows", "deleted_rows", "fragments", "small_fragments", "data_files")},
        **{k: st[k] for k in ("deletion_files",)},
        "bytes": st["data_bytes"],
        "column_stats": {c.pop("name"): c for c in st["columns"]},
        "indices": st["indices"],
    }


def _describe(obj: Ctx, name, output, version):
    from ..names import is_table_name

    if is_table_name(name):
        cat = obj.catalog_for(name, write=False)
        info = cat.table_info(name)
        t = cat.load_table(name, version=parse_version(version))
        versions = t.versions()
    else:  # a table by path: what the table itself records
        t = obj.table(name, parse_version(version))
        versions = t.versions()
        store = t.snapshot.handler.config().get("tessera.commit.store")
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
        return render.print_json(d)
    facts = [
        ["name", d["name"]],
        ["location", d["location"]],
        ["version", f"{d['version']} (latest {d['latest_version']}, {d['versions']} version(s))"],
        ["commit store", d["commit_store"]],
        ["file version", d["file_version"]],
        ["stable row ids", "yes" if d["stable_row_ids"] else "no"],
        ["created", d["created_at"]],
        ["rows", f"{d['rows']:,}" + (f" ({d['deleted_rows']:,} deleted)" if d["deleted_rows"] else "")],
        ["fragments", f"{d['fragments']:,} ({d['data_files']:,} data files, {d['small_fragments']:,} small)"],
        ["size", render.human_bytes(d["bytes"])],
    ]
    facts += [[f"property {k}", v] for k, v in sorted(d["properties"].items())]
    render.print_rows(["field", "value"], facts, title=d["name"])
    known = {n: c for n, c in d["column_stats"].items() if c["source"]}

    def stat(name: str, key: str) -> str:
        v = known[name][key] if name in known else None
        return "-" if v is None else f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)

    render.print_rows(
        ["column", "type", "nullable"] + (["nulls", "min", "max"] if known else []),
        [
            [c["name"], c["type"], "yes" if c["nullable"] else "no"]
            + ([stat(c["name"], "null_count"), stat(c["name"], "min"), stat(c["name"], "max")] if known else [])
            for c in d["schema"]
        ],
        title="schema" + (" (nulls and bounds from zone maps)" if known else ""),
    )
    if d["indices"]:
        render.print_rows(
            ["index", "type", "columns", "indexed rows", "unindexed rows"],
            [
                [i["name"], i["type"], ", ".join(i["columns"]), f"{i['indexed_rows']:,}", f"{i['unindexed_rows']:,}"]
                for i in d["indices"]
            ],
            title="indices",
        )


@table_group.command("describe")
@click.argument("name")
@click.option("--version", "version", default=None, help="version number or tag")
@OUTPUT
@click.pass_obj
def table_describe(obj: Ctx, name, version, output):
    """Schema, version, versions, commit store, properties and size of a table."""
    _describe(obj, name, output, version)


@click.command("describe")
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
    render.console.print(
        f"dropped table {name}" + (" and deleted its data" if purge else " (its data files were kept)")
    )


@table_group.command("rename")
@click.argument("old")
@click.argument("new")
@click.pass_obj
def table_rename(obj: Ctx, old, new):
    """Rename a table (its data stays where it is)."""
    obj.cat.rename_table(old, new)
    render.console.print(f"renamed {old} to {new}")


# -- tables ---------------------------------------------------------------------------
