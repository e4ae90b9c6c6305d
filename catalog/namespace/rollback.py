"""A create through the namespace that fails leaves nothing behind.

A Lance Namespace client creates a table in steps: ``declare_table`` claims
the name (a catalog row, no file), the client writes its data files, its
transaction file and a staged manifest, then ``create_table_version`` of
version 1 commits them.  When that first commit is refused before the table's
coordinator was asked for the version (a bad staged manifest, a failure while
checking it), nothing can ever commit those files:
:func:`abandon_refused_create` (through :func:`abandon_first_commit`) removes
the staged manifest and the files it names, then the declaration, so the next
create starts afresh instead of finding the name taken.

Nothing is removed when a version exists (another writer created the table),
and the declaration is put back when a concurrent creator's version 1 lands
while it is being removed: an acknowledged commit never loses its table.  A
failure after the coordinator was asked is never rolled back (its outcome may
be unknown: the client reads it back).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable

from lance_namespace import errors as nserr

from tessera.commit import expand_dirs, is_staged_manifest, referenced_paths
from tessera.format.errors import FormatError
from tessera.format.table import manifest as mf
from tessera.stores.errors import ObjectNotFoundError, StoreError
from tessera.stores.local import LocalObjectStore
from tessera.stores.object_store import ObjectStore

from ..catalog import Catalog
from .tables import TableAccess

log = logging.getLogger(__name__)


def abandon_refused_create(catalog: Catalog, t: TableAccess, manifest_path: str) -> None:
    """Undo a declared table whose first commit was refused before its
    version was asked for; never raises (the refusal is what the client must hear)."""
    try:
        staged: str | None = t.table_relative(manifest_path)
    except nserr.LanceNamespaceError:
        staged = None
    if staged is not None and not is_staged_manifest(staged):
        staged = None  # only a staged manifest's own files are ever removed
    try:
        abandon_first_commit(catalog, t.ident, t.store, staged, lambda: t.latest() is not None)
    except Exception:  # noqa: BLE001 - best effort
        log.exception("%s: removing the declaration of a refused create failed", t.name)


def abandon_first_commit(
    catalog: Catalog,
    ident: tuple[str, str],
    store: ObjectStore,
    staged: str | None,
    has_versions: Callable[[], bool],
) -> list[str]:
    """Remove the declared table ``ident`` (no version yet) and what its
    refused first commit wrote: the staged manifest ``staged`` (table-relative;
    None when the request named none usable) and the files it references.  ``has_versions`` tells whether the table
    has a version now.  Returns the paths removed; removes nothing when the
    table has a version or its coordinator cannot say."""
    try:
        if has_versions():
            return []
    except Exception:  # noqa: BLE001 - the coordinator cannot say: touch nothing
        return []
    name, uri, recorded = catalog._table_row(ident)
    doomed = [] if staged is None else [staged]
    try:
        if staged is not None:
            mfile = mf.read_manifest(store.read(staged), f"{store.uri}/{staged}")
            doomed += sorted(referenced_paths(store, [mfile]))
    except (ObjectNotFoundError, FormatError, StoreError, OSError):
        pass  # no readable staged manifest: only the declaration goes
    removed = []
    for path in expand_dirs(store, doomed):
        with contextlib.suppress(StoreError, OSError):
            store.delete(path)
            removed.append(path)
    catalog.drop_table(ident, purge=False)
    try:
        landed = has_versions()
    except Exception:  # noqa: BLE001 - cannot tell: keep the table declared, to be safe
        landed = True
    if landed:  # a concurrent creator's version 1 landed meanwhile: its table keeps its name
        with contextlib.suppress(Exception):
            catalog.declare_table(ident, location=uri, commit_store=recorded)
        return removed
    _remove_empty_folders(store)
    log.warning(
        "%s: its first commit was refused; removed its declaration and the %d files it wrote",
        name,
        len(removed),
    )
    return removed


def _remove_empty_folders(store: ObjectStore) -> None:
    """The table's folders on local disk, when empty (S3 has none)."""
    if not isinstance(store, LocalObjectStore):
        return
    for dirpath, _dirs, _files in os.walk(store.root, topdown=False):
        with contextlib.suppress(OSError):
            os.rmdir(dirpath)  # only an empty folder goes
