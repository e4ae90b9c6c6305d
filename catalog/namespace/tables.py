"""One table's object store and coordinator for a namespace request, and the stores shared between requests."""

from __future__ import annotations

import dataclasses
from typing import Any

from lance_namespace import TableVersion
from lance_namespace import errors as nserr

from tessera.commit import (
    CommitHandler,
    VersionEntry,
    describe_version,
    latest_to_build_on,
    open_handler,
    root_relative,
)
from tessera.stores.manifest_store import ManifestStore
from tessera.stores.object_store import ObjectStore
from tessera.stores.registry import open_manifest_store, open_object_store

from ..catalog import Catalog, _properties
from ..table.tags import Tags


def str_props(props: dict[str, Any]) -> dict[str, str]:
    """Properties as the namespace answers them: every value a string."""
    return {str(k): v if isinstance(v, str) else str(v) for k, v in props.items()}


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What a namespace derives from a table's catalog row: its name,
    location, recorded commit store, object store, root and properties as
    strings.  Kept while the catalog serves the very same row object (the
    catalog's row cache returns one object while its database is unchanged),
    so a table dropped, renamed, re-created or given new properties anywhere
    is derived again."""

    record: object
    name: str
    uri: str
    recorded: str
    store: ObjectStore
    commit_store: str | ManifestStore | None
    root: str
    properties: dict[str, str]


class SharedStores:
    """The object stores and commit stores of a namespace's tables, each opened
    once and shared between requests (a commit store's connections are pooled)."""

    MAX_TABLES = 4096

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._object_stores: dict[str, ObjectStore] = {}
        self._manifest_stores: dict[str, ManifestStore] = {}
        self._resolved: dict[tuple[str, str], Resolved] = {}

    def resolve(self, ident: tuple[str, str]) -> Resolved:
        """The table's row and what derives from it (see :class:`Resolved`);
        one catalog lookup (a cached row costs the database's change counter)."""
        record = self.catalog._snapshot(ident)
        hit = self._resolved.get(ident)
        if hit is not None and hit.record is record:
            return hit
        name, uri, recorded = f"{record.namespace}.{record.name}", record.uri, record.commit_store
        store = self.object_store(uri)
        props = str_props(_properties(record.properties))
        got = Resolved(record, name, uri, recorded, store, self.commit_store(recorded), root_relative(store), props)
        if len(self._resolved) >= self.MAX_TABLES:
            self._resolved.clear()
        self._resolved[ident] = got
        return got

    def object_store(self, uri: str) -> ObjectStore:
        store = self._object_stores.get(uri)
        if store is None:
            store = self._object_stores[uri] = open_object_store(uri, self.catalog.storage_options)
        return store

    def commit_store(self, recorded: str) -> str | ManifestStore | None:
        """A table's recorded commit store, opened once per namespace."""
        cs = self.catalog._commit_store_for(recorded)
        if not isinstance(cs, str):
            return cs
        ms = self._manifest_stores.get(cs)
        if ms is None:
            ms = self._manifest_stores[cs] = open_manifest_store(cs)
        return ms

    def close(self) -> None:
        for ms in self._manifest_stores.values():
            ms.close()
        self._manifest_stores.clear()
        self._resolved.clear()


class TableAccess:
    """One table's object store and coordinator, as the catalog records them
    (stores are the namespace's, shared between requests; the handler is
    fresh per request, so no request inherits another's bound identity)."""

    def __init__(self, stores: SharedStores, ident: tuple[str, str]) -> None:
        table = stores.resolve(ident)
        self.ident = ident
        self.name, self.uri, self.recorded = table.name, table.uri, table.recorded
        self.store = table.store
        self.handler: CommitHandler = open_handler(self.uri, table.commit_store, stores.catalog.retry)
        self.root = table.root
        #: set once a commit asked the coordinator for its version (its outcome may be unknown from then on)
        self.asked = False

    def full_path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if self.root else rel

    def table_relative(self, path: str) -> str:
        """A store-root-relative path from a client, as a path inside the table (validated)."""
        prefix = f"{self.root}/" if self.root else ""
        clean = path.lstrip("/") if not prefix.startswith("/") else path
        if not clean.startswith(prefix):
            raise nserr.InvalidInputError(f"{path!r} is not inside the table {self.name} ({self.root})")
        return clean[len(prefix) :]

    def tags(self) -> Tags:
        return Tags(self.store)

    def latest(self) -> TableVersion | None:
        """The latest version's entry (None for a declared table without
        versions), half-done commits finished first; one listing or one row."""
        entry = self.handler.latest_entry(self.store)
        return None if entry is None else self.entry(entry)

    def latest_to_build_on(self) -> TableVersion | None:
        """The latest version for a writer about to build its commit on it
        (:func:`tessera.commit.latest_to_build_on`: on local disk, the hint
        file and two ``stat``s confirm the version seen last instead of a listing)."""
        entry = latest_to_build_on(self.handler, self.store)
        return None if entry is None else self.entry(entry)

    def latest_version(self) -> int:
        entry = self.latest()
        return 0 if entry is None else int(entry.version)

    def version_entry(self, version: int) -> TableVersion:
        """``version``'s entry with its timestamp (reads the manifest)."""
        return self.entry(describe_version(self.handler, self.store, version))

    def entry(self, e: VersionEntry) -> TableVersion:
        """A version's entry as the namespace answers it."""
        entry = TableVersion(version=e.version, manifest_path=self.full_path(e.path), manifest_size=e.size)
        if e.timestamp_millis is not None:
            entry.timestamp_millis = e.timestamp_millis
        return entry

    def mark_asked(self) -> None:
        """The coordinator is being asked for a version: a failure is no longer rolled back."""
        self.asked = True
