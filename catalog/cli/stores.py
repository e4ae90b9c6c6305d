"""``tessera store check``: is a manifest store reachable and current, does an
object store refuse a second conditional write."""

from __future__ import annotations

import os

import click

from .. import errors as E
from . import render
from .options import OUTPUT, parse_props


@click.group()
def store():
    """Manifest-store and object-store checks."""


@store.command("check")
@click.argument("url")
@click.option(
    "--storage-option", "-s", multiple=True, help="key=value for an object-store location (s3://, gs://, az://)"
)
@OUTPUT
def store_check(url, storage_option, output):
    """Check a manifest store (reachable, schema; prints its store id) or an
    object-store location (its conditional put really refuses a second write).
    A manifest-store check creates no database or schema; it creates the
    store id if the store has none yet."""
    opts = parse_props(storage_option, "--storage-option/-s")
    if url.startswith(("s3://", "s3a://", "gs://", "az://", "abfs://", "abfss://", "file://", "/")) or "://" not in url:
        from tessera.stores.probe import probe_conditional_put
        from tessera.stores.registry import open_object_store

        probe_conditional_put(open_object_store(url, opts))
        if output == "json":
            return render.print_json({"url": url, "kind": "object store", "conditional_put": "ok"})
        render.console.print(render.styled("green", "ok", f": {url} refuses a second conditional write"))
        return
    from tessera.stores.registry import open_manifest_store

    _refuse_missing_sqlite(url)
    ms = open_manifest_store(url, create=False, check=False)  # a check creates no database, table or schema
    try:
        ms.check()  # StoreSchemaError (the verdict, with what to do) / StoreUnavailableError -> exit 2
        store_id = ms.store_id()  # created here if the store has none yet: this is its first use
    finally:
        ms.close()
    if output == "json":
        return render.print_json(
            {"url": ms.identity(), "kind": "manifest store", "schema": "ok", "store_id": str(store_id)}
        )
    render.console.print(render.styled("green", "ok", f": {ms.identity()} is reachable and its schema is current"))
    render.console.print(f"schema: ok\nstore id: {store_id}")


@store.command("provision")
@click.argument("url")
@click.option("--check", "check_only", is_flag=True, help="report the schema's revision and change nothing (SQL)")
@OUTPUT
def store_provision(url, check_only, output):
    """Create or upgrade a manifest store's schema ahead of its first use, and
    print its store id: Tessera's migrations on a SQL database, the table on
    DynamoDB (Redis needs none).  Stores otherwise provision themselves on
    first use; this is for deployments whose application role may not create
    tables (open the store with ?provision=false there)."""
    from tessera.stores.registry import SQL_DIALECTS

    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme.split("+", 1)[0] in SQL_DIALECTS:
        from tessera.stores import sql_migrate, sql_store

        parsed = sql_migrate.parse_sql_url(url)
        where = parsed.render_as_string(hide_password=True)
        head = sql_migrate.head_revision()
        before = sql_migrate.current_revision(parsed)
        if check_only:
            summary = {"url": where, "revision": before, "head": head, "current": before == head}
            if output == "json":
                return render.print_json(summary)
            render.console.print(f"{where}: revision {before or '(none)'}, head {head}", soft_wrap=True)
            if before != head:
                raise click.exceptions.Exit(3)
            return
        after = sql_migrate.upgrade(parsed)
        store_id = sql_store.ensure_store_id(parsed)
        summary = {"url": where, "before": before, "revision": after, "store_id": store_id}
        if output == "json":
            return render.print_json(summary)
        did = f"already at revision {after}" if before == after else f"upgraded {before or '(empty)'} -> {after}"
        render.console.print(f"{where}: {did} (head {head})\nstore id: {store_id}", soft_wrap=True)
        return
    if check_only:
        raise E.InvalidArgumentError("--check reports a SQL store's schema revision; use `tessera store check` here")
    from tessera.stores.registry import open_manifest_store

    ms = open_manifest_store(url, create=True)
    try:
        store_id = ms.store_id()
    finally:
        ms.close()
    if output == "json":
        return render.print_json({"url": ms.identity(), "store_id": str(store_id)})
    render.console.print(f"{ms.identity()}: provisioned\nstore id: {store_id}", soft_wrap=True)


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
