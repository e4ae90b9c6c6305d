"""Managed versioning as the namespace answers it: a table's versions listed
and described, and ``create_table_version`` as request ->
:func:`tessera.commit.accept_staged` -> response."""

from __future__ import annotations

import contextlib

from lance_namespace import (
    CreateTableVersionRequest,
    CreateTableVersionResponse,
    DescribeTableVersionRequest,
    DescribeTableVersionResponse,
    ListTableVersionsRequest,
    ListTableVersionsResponse,
    TableVersion,
)
from lance_namespace import errors as nserr

from tessera.commit import accept_staged
from tessera.commit.errors import VersionNotFoundError

from .. import errors as E
from ..catalog import Catalog
from .parsing import page
from .rollback import abandon_refused_create
from .tables import TableAccess


def list_table_versions(t: TableAccess, request: ListTableVersionsRequest) -> ListTableVersionsResponse:
    """A page of the table's versions (the latest alone in one listing or row)."""
    if request.limit == 1 and request.descending and not request.page_token:
        latest = t.latest_to_build_on()  # every open and append asks this: no manifest read
        return ListTableVersionsResponse(versions=[] if latest is None else [latest])
    versions = t.handler.versions_after(t.store, 0) if t.latest() is not None else []
    if request.descending:
        versions = versions[::-1]
    items, token = page(versions, request.page_token, request.limit)
    entries = []
    for v in items:
        try:
            entries.append(t.version_entry(v))
        except VersionNotFoundError:
            continue  # recorded, but its manifest was cleaned up behind the store (pylance's cleanup)
    return ListTableVersionsResponse(versions=entries, page_token=token)


def describe_table_version(t: TableAccess, request: DescribeTableVersionRequest) -> DescribeTableVersionResponse:
    """The requested version's entry (the latest when none is named), read from the coordinator."""
    version = request.version if request.version is not None else t.latest_version()
    if version == 0:
        raise nserr.TableVersionNotFoundError(f"table {t.name} has no versions yet")
    return DescribeTableVersionResponse(version=t.version_entry(version))


def create_table_version(
    catalog: Catalog, t: TableAccess, request: CreateTableVersionRequest
) -> CreateTableVersionResponse:
    """Win ``request.version`` for the staged manifest at ``request.manifest_path``."""
    try:
        entry = _accept(t, request)
    except Exception:
        if request.version == 1 and not t.asked:
            abandon_refused_create(catalog, t, request.manifest_path)  # a refused create leaves nothing behind
        raise
    if request.version == 1 and not catalog.table_exists(t.ident):
        # a concurrent creator's refused create removed the declaration while
        # this one committed: an acknowledged table keeps its name
        with contextlib.suppress(E.TableExistsError):
            catalog.declare_table(t.ident, location=t.uri, commit_store=t.recorded)
    return CreateTableVersionResponse(version=entry)


def _accept(t: TableAccess, request: CreateTableVersionRequest) -> TableVersion:
    """Managed versioning's server half (``commit.accept_staged``), as the namespace answers it."""
    entry = accept_staged(
        t.handler,
        t.store,
        request.version,
        t.table_relative(request.manifest_path),
        request.naming_scheme,
        uri=t.uri,
        label=t.name,
        shown=t.full_path,
        on_ask=t.mark_asked,
    )
    return t.entry(entry)
