"""``tessera serve``: the catalog as a Lance REST Namespace."""

from __future__ import annotations

import click

from .. import errors as E
from .context import Ctx
from .options import parse_props


@click.command()
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
@click.option(
    "--durability",
    type=click.Choice(["sync", "none"]),
    default="sync",
    show_default=True,
    help="fsync the versions committed here (none: as pylance by path; README, 'What a commit guarantees')",
)
@click.pass_obj
def serve(
    obj: Ctx,
    host,
    port,
    workers,
    token_file,
    commit_store,
    max_body_bytes,
    storage_option,
    vend_storage_options,
    durability,
):
    """Serve the catalog as a Lance REST Namespace: pylance commits through it with
    lance_namespace.connect("rest", {"uri": "http://HOST:PORT"}) (add
    "header.Authorization": "Bearer TOKEN" when a token is set)."""
    try:
        from ..namespace.server import serve as run_server
    except ImportError as exc:  # starlette / uvicorn / lance-namespace: the `server` extra
        raise E.InvalidArgumentError(
            f"tessera serve needs the server extra (pip install 'tessera[server]'): {exc}"
        ) from None
    obj.cat.close()  # create or upgrade the catalog once, here, rather than in every worker
    props = {"warehouse": obj.warehouse, "uri": obj.catalog_uri, "name": obj.config_name, "commit_store": commit_store}
    props = {k: v for k, v in props.items() if v is not None}
    props.update({f"storage.{k}": v for k, v in parse_props(storage_option, "--storage-option/-s").items()})
    props.update(create="false", vend_storage_options="true" if vend_storage_options else "false")
    props["durability"] = durability
    try:
        run_server(props, host=host, port=port, workers=workers, token_file=token_file, max_body_bytes=max_body_bytes)
    except ValueError as exc:  # a bad token file
        raise E.InvalidArgumentError(str(exc)) from None
