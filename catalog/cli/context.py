"""What a command runs against: the catalog its options name (created only by
commands that write) and the table a name or path denotes."""

from __future__ import annotations

from .. import errors as E


class Ctx:
    """The catalog options of one invocation; the catalog is opened when a command first needs it."""

    def __init__(self, catalog_uri: str | None, warehouse: str | None, config_name: str | None) -> None:
        self.catalog_uri, self.warehouse, self.config_name = catalog_uri, warehouse, config_name
        self._cat = None
        self._ro = None

    @property
    def cat(self):
        """The catalog, created (and migrated) if it is not there yet: for commands that write."""
        if self._cat is None:
            from ..catalog import connect

            self._cat = connect(self.catalog_uri, self.warehouse, name=self.config_name)
        return self._cat

    @property
    def ro(self):
        """The catalog for read-only commands: nothing is created; a catalog that
        is not there is a NoCatalogError (exit 2)."""
        if self._cat is not None:
            return self._cat
        if self._ro is None:
            from ..catalog import connect

            self._ro = connect(self.catalog_uri, self.warehouse, name=self.config_name, create=False)
        return self._ro

    def catalog_for(self, name: str, write: bool):
        """The catalog a bare table name is looked up in; with none configured,
        a TableNameError saying how to name one (or the folder instead)."""
        try:
            return self.cat if write else self.ro
        except E.InvalidArgumentError as exc:
            if not str(exc).startswith(_NO_WAREHOUSE):
                raise
            from ..names import bare_name_error

            raise bare_name_error(name, catalog_hint=_CLI_CATALOG_HINT) from None

    def table(self, name: str, version=None, *, write: bool = False):
        """The table a command names: a path or URI (absolute, with a scheme,
        or relative with a separator: ``./t``, ``data/t``) opens the table
        there; a bare name (``sales.orders``) is a table of the catalog
        (see :mod:`tessera.catalog.names`)."""
        from ..names import is_table_name

        if not is_table_name(name):
            from ..table import Table

            return Table.open(name, version)
        return self.catalog_for(name, write).load_table(name, version=version)

    def close(self) -> None:
        for c in (self._cat, self._ro):
            if c is not None:
                c.close()


_NO_WAREHOUSE = "connect() needs a warehouse"
_CLI_CATALOG_HINT = (
    "name the catalog with --warehouse DIR, --catalog URL or --config-name NAME (or TESSERA_WAREHOUSE / "
    "TESSERA_CATALOG_URI)"
)
