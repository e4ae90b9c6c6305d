"""``tessera namespace``: create, list and drop namespaces."""

from __future__ import annotations

import click

from .. import errors as E
from . import render
from .context import Ctx
from .options import OUTPUT, parse_props


@click.group()
def namespace():
    """Create, list and drop namespaces."""


@namespace.command("create")
@click.argument("name")
@click.option("--property", "-p", "props", multiple=True, help="key=value (repeatable)")
@click.pass_obj
def ns_create(obj: Ctx, name, props):
    """Create a namespace."""
    properties = parse_props(props)
    obj.cat.create_namespace(name, properties)
    render.console.print(f"created namespace {name}")


@namespace.command("list")
@click.argument("parent", required=False)
@OUTPUT
@click.pass_obj
def ns_list(obj: Ctx, parent, output):
    """List namespaces (the top-level ones, or the children of PARENT)."""
    cat = obj.ro
    items = [{"namespace": n, "properties": cat.namespace_properties(n)} for n in cat.list_namespaces(parent)]
    if output == "json":
        return render.print_json(items)
    if not items:
        render.console.print(
            "no namespaces" + (f" in {parent}" if parent else "") + "; create one with `tessera namespace create NAME`"
        )
        return
    render.print_rows(["namespace", "properties"], [[i["namespace"], i["properties"] or "{}"] for i in items])


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
    render.console.print(f"dropped namespace {name}")
