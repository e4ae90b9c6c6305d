"""``tessera table``: list, describe, drop and rename the tables of a catalog
(and ``tessera describe``, the same as ``tessera table describe``)."""

from __future__ import annotations

import click

from tessera.format.table import paths

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
        ["rows", f"{d['rows']:,}"],
        ["fragments", f"{d['fragments']:,} ({d['data_files']:,} data files)"],
        ["size", render.human_bytes(d["bytes"])],
    ]
    facts += [[f"property {k}", v] for k, v in sorted(d["properties"].items())]
    render.print_rows(["field", "value"], facts, title=d["name"])
    render.print_rows(
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
