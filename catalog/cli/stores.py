"""``tessera store check``: is a manifest store reachable and current, does an
object store refuse a second conditional write."""

from __future__ import annotations

import os

import click

from . import render
from .options import OUTPUT, parse_props


@click.group()
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
    opts = parse_props(storage_option, "--storage-option/-s")
    if url.startswith(("s3://", "s3a://", "file://", "/")) or "://" not in url:
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
