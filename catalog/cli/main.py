"""The ``tessera`` group: global options, errors said in the command line's
words (exit 2), and every command group registered."""

from __future__ import annotations

import sys

import click
import pyarrow as pa

from .. import errors as E
from . import data, indexes, maintenance, namespaces, render, serve, stores, tables, versions
from .context import Ctx

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
            render.err_console.print(
                render.styled("bold red", "error:", f" {_cli_message(exc)}"), highlight=False, soft_wrap=True
            )
            sys.exit(2)
        finally:
            if isinstance(ctx.obj, Ctx):
                ctx.obj.close()


@click.group(cls=_Group)
@click.version_option(package_name="tessera", prog_name="tessera")
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
    render.fresh_consoles()
    ctx.obj = Ctx(catalog_uri, warehouse, config_name)


@main.command()
@click.pass_obj
def init(obj: Ctx):
    """Create (or upgrade) the catalog database."""
    cat = obj.cat
    render.console.print(f"catalog ready: {cat!r}")


for _command in (
    namespaces.namespace,
    tables.table_group,
    tables.describe,
    data.create,
    data.append,
    data.head,
    data.scan,
    data.delete,
    data.update,
    versions.history,
    versions.checkout,
    versions.restore,
    versions.tag,
    indexes.index,
    maintenance.compact,
    maintenance.cleanup,
    maintenance.repair,
    maintenance.verify,
    stores.store,
    serve.serve,
):
    main.add_command(_command)
