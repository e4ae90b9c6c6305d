"""How a table opened by path, without ``commit_store``, finds the store that
coordinates its commits.

A table committed through an external manifest store records that store's
identity in every manifest (``tessera.commit.store``: a credential-free
address such as ``redis://host:6379/0#tessera``) and its id
(``tessera.commit.store_id``).  ``Table.open(path)`` reads the latest
manifest on storage; when it names an external store, the table is opened
through, in this order:

1. a URL listed in the configuration's ``commit_stores`` (or
   ``TESSERA_COMMIT_STORES``) whose identity is the recorded one: the user's
   own URL, with whatever credentials it carries;
2. the recorded address itself (:func:`tessera.stores.store_url.url_of_identity`),
   unless the configuration says ``recorded_stores: false``: never one that
   carries credentials, never provisioning anything there, with credentials
   only from where each driver looks for them.

The store found must hold the table's rows and carry the recorded store id
(an empty or another store at that address is refused, as every write's
bind refuses it).  When none does, the table opens from storage alone,
readable, with one warning per table and process saying why; every write is
refused with :class:`CoordinatorMismatchError` carrying that reason (a writer
committing around the store would lose commits).  A table the catalog holds
is opened through the store its catalog row names; ``commit_store=`` always
wins.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from tessera.commit import (
    CommitHandler,
    NativeCommitHandler,
    RetryPolicy,
    call_namespace,
    list_versions,
    load_manifest,
    namespace_handler,
    open_handler,
    recorded_store,
)
from tessera.commit.errors import CoordinatorMismatchError, TableNotFoundError
from tessera.format.errors import TesseraError
from tessera.format.table import manifest as mf
from tessera.stores.object_store import ObjectStore
from tessera.stores.registry import MANIFEST_STORES, SQL_DIALECTS, open_manifest_store, open_object_store
from tessera.stores.store_url import url_of_identity

from ..config import commit_store_settings
from ..errors import InvalidArgumentError
from ..names import is_table_name
from .tags import Tags

if TYPE_CHECKING:
    from tessera.stores.manifest_store import ManifestStore

__all__ = ["open_by_path", "open_in_namespace", "open_recorded"]

log = logging.getLogger(__name__)
_WARNED: set[str] = set()
_WARNED_LOCK = threading.Lock()


def _kind_of(url: str) -> str | None:
    scheme = url.split("://", 1)[0].lower()
    if scheme in MANIFEST_STORES:
        return "dynamodb" if scheme == "dynamodb" else "redis"
    return "sql" if scheme.split("+", 1)[0] in SQL_DIALECTS else None


def _shown(url: str) -> str:
    """``url`` without its user and password."""
    try:
        parts = urlsplit(url)
        if parts.password or parts.username:
            host = parts.netloc.rsplit("@", 1)[1]
            return parts._replace(netloc=f"***@{host}").geturl()
    except ValueError:
        return url.split("://", 1)[0] + "://***"
    return url


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _configured(recorded: str, kind: str, urls: list[str], problems: list[str]) -> list[str]:
    """The configured URLs whose store identity is ``recorded`` (computed
    without connecting or creating anything)."""
    found = []
    for url in urls:
        if _kind_of(url) != kind:
            continue
        try:
            ms = open_manifest_store(url, check=False, create=False)
        except TesseraError as exc:
            problems.append(f"commit_stores entry {_shown(url)}: {_first_line(exc)}")
            continue
        try:
            if ms.identity() == recorded:
                found.append(url)
        finally:
            ms.close()
    return found


def open_recorded(
    store: ObjectStore, loaded: mf.ManifestFile, version: int | None, retry: RetryPolicy | None
) -> tuple[CommitHandler, mf.ManifestFile] | str | None:
    """The handler of the external store ``loaded`` (read from storage)
    records, bound, with the table's manifest read through it; None when the
    table commits natively; else why no store could be used."""
    found = recorded_store(loaded.manifest)
    if found is None:
        return None
    kind, recorded = found
    urls, follow = commit_store_settings()
    problems: list[str] = []
    candidates = [(url, f"commit_stores entry {_shown(url)}") for url in _configured(recorded, kind, urls, problems)]
    if not follow:
        problems.append("following recorded store addresses is turned off (recorded_stores: false)")
    else:
        reopened = url_of_identity(recorded)
        if reopened is None:
            problems.append(f"the recorded address {recorded!r} cannot be opened as it is")
        elif reopened not in urls:
            candidates.append((reopened, f"the recorded address {_shown(reopened)}"))
    for url, shown in candidates:
        try:
            handler = open_handler(store.uri, url, retry)
            mfile = handler.load(store, version)
            handler.bind(mfile.manifest, store.uri)
            return handler, mfile
        except TesseraError as exc:
            problems.append(f"{shown}: {_first_line(exc)}")
    if not candidates and not problems:
        problems.append("no commit_stores entry names it")
    why = (
        f"{store.uri} is coordinated by the {kind} store {recorded}, which this process could not use ("
        + "; ".join(problems)
        + "): pass commit_store=<its URL>, or list the URL under commit_stores in the configuration file"
    )
    with _WARNED_LOCK:
        first = store.uri not in _WARNED
        _WARNED.add(store.uri)
    if first:
        log.warning("%s; the table is open for reading only, from storage (a later commit may not be seen)", why)
    return why


def open_in_namespace(
    namespace: Any,
    table_id: str | Sequence[str],
    version: int | str | None,
    storage_options: dict[str, str] | None,
    retry: RetryPolicy | None,
    properties: dict[str, str] | None = None,
) -> tuple[ObjectStore, mf.ManifestFile, CommitHandler]:
    """A table named by its id in a Lance Namespace (a client, or a REST
    namespace's URL), whose commits go through the namespace: its object
    store, manifest and handler."""
    from lance_namespace import DescribeTableRequest  # half a second: imported with the first namespace

    if isinstance(table_id, str) and table_id and not is_table_name(table_id):
        raise InvalidArgumentError(
            f"{table_id!r} is a path or URI, but a table opened through a namespace is named by its id "
            "('namespace.table'); open a path without namespace="
        )
    parts = table_id.split(".") if isinstance(table_id, str) else list(table_id)
    if not parts or not all(isinstance(p, str) and p for p in parts):
        raise InvalidArgumentError(f"a table id is 'namespace.table' or a list of parts, got {table_id!r}")
    try:
        handler = namespace_handler(namespace, parts, retry, properties)
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None
    described = call_namespace(handler.ns, "describe_table", DescribeTableRequest, id=parts)
    location = described.get("location") or described.get("table_uri")
    if not location:
        raise TableNotFoundError(f"the namespace names no location for {'.'.join(parts)}")
    opts = {**(described.get("storage_options") or {}), **(storage_options or {})}
    store = open_object_store(str(location), opts or None)
    return store, handler.load(store, Tags(store).version_of(version) if version is not None else None), handler


def open_by_path(
    uri: str,
    store: ObjectStore,
    version: int | str | None,
    commit_store: str | ManifestStore | None,
    retry: RetryPolicy | None,
) -> tuple[mf.ManifestFile, CommitHandler]:
    """A table opened by location: its manifest (``version``: a number, a tag,
    or None for the latest) and the handler its commits go through
    (``commit_store``'s, else the one it records: :func:`open_recorded`).
    A handler that may not commit (another coordinator) is returned all the
    same: reading is allowed, every write binds again and is refused."""
    handler = open_handler(uri, commit_store, retry)
    number = Tags(store).version_of(version) if version is not None else None
    try:
        mfile = handler.load(store, number)
    except TableNotFoundError:
        if handler.kind != "native" and list_versions(store)[0]:
            # a table is on storage, but the store has no rows for it: say whose it is
            handler.bind(load_manifest(store).manifest, store.uri)
            raise CoordinatorMismatchError(
                f"{store.uri} has versions on storage, but the {handler.kind} store at "
                f"{handler.config().get('tessera.commit.store')} has no rows for it "
                "(the table was committed without this store, "
                "or the store lost them); open it without commit_store, or with its own store"
            ) from None
        raise
    if isinstance(handler, NativeCommitHandler) and commit_store is None:
        found = open_recorded(store, mfile, number, retry)  # the store the table records
        if isinstance(found, tuple):
            return found[1], found[0]
        handler.unreached = found
    try:
        handler.bind(mfile.manifest, store.uri)
    except CoordinatorMismatchError:
        pass  # reading is allowed; every write binds again and is refused
    return mfile, handler
