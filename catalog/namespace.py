"""Tessera as a Lance Namespace: pylance and LanceDB commit through Tessera.

``TesseraNamespace`` is a :class:`lance_namespace.LanceNamespace` over a
Tessera catalog: namespaces and tables are the catalog's, every table has
*managed versioning*, so pylance sends each commit here as
``create_table_version``.  pylance writes the manifest to a staged name
(``_versions/{final}.manifest-{uuid}``); this class validates it, wins the
version through the table's own coordinator (the native put-if-not-exists of
the final name, or the external store's reserve, publish and flip), removes
the staged file and returns the final path: one protocol for pylance,
LanceDB, Tessera's Python writers and Spark.

Connect with ``lance_namespace.connect("tessera", {"warehouse": DIR})``
(after ``import tessera.catalog.namespace``) or by the class path
``tessera.catalog.namespace.TesseraNamespace`` without any import; the
properties are ``tessera.connect``'s: ``name`` (a configured catalog),
``warehouse``, ``uri`` (the catalog database), ``storage.<key>`` (object
store options), ``commit.retry.*``, plus ``root_namespace`` (where one-part
table ids live, default ``default``) and ``vend_storage_options``
(``true`` to hand the storage options to clients in ``describe_table``) and
``commit_store`` (the coordinator of the tables it declares, as in
``Catalog.create_table``: ``auto``, ``native``, ``catalog`` or a store URL).

Answers pylance depends on (see ``../shared/reference/lance-namespace.md``):
``describe_table_version`` is read-your-writes consistent (it reads the
coordinator), a version already taken is ``ConcurrentModificationError``,
and a re-sent commit of the same manifest succeeds.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from typing import Any, TypeVar

from lance_namespace import (
    CountTableRowsRequest,
    CountTableRowsResponse,
    CreateNamespaceRequest,
    CreateNamespaceResponse,
    CreateTableTagRequest,
    CreateTableTagResponse,
    CreateTableVersionRequest,
    CreateTableVersionResponse,
    DeclareTableRequest,
    DeclareTableResponse,
    DeleteTableTagRequest,
    DeleteTableTagResponse,
    DeregisterTableRequest,
    DeregisterTableResponse,
    DescribeNamespaceRequest,
    DescribeNamespaceResponse,
    DescribeTableRequest,
    DescribeTableResponse,
    DescribeTableVersionRequest,
    DescribeTableVersionResponse,
    DropNamespaceRequest,
    DropNamespaceResponse,
    DropTableRequest,
    DropTableResponse,
    GetTableTagVersionRequest,
    GetTableTagVersionResponse,
    LanceNamespace,
    ListNamespacesRequest,
    ListNamespacesResponse,
    ListTablesRequest,
    ListTablesResponse,
    ListTableTagsRequest,
    ListTableTagsResponse,
    ListTableVersionsRequest,
    ListTableVersionsResponse,
    NamespaceExistsRequest,
    NamespaceExistsResponse,
    RegisterTableRequest,
    RegisterTableResponse,
    RenameTableRequest,
    RenameTableResponse,
    RestoreTableRequest,
    RestoreTableResponse,
    TableExistsRequest,
    TableExistsResponse,
    TableVersion,
    UpdateTableTagRequest,
    UpdateTableTagResponse,
)
from lance_namespace import errors as nserr
from lance_namespace_urllib3_client.models.tag_contents import TagContents
from pydantic import BaseModel

from tessera.commit import faults
from tessera.commit import store as tstore
from tessera.commit.errors import (
    CommitConflictError,
    CommitError,
    CoordinatorMismatchError,
    TableNotFoundError,
    VersionNotFoundError,
)
from tessera.commit.handlers import CommitHandler, ExternalCommitHandler, NativeCommitHandler
from tessera.commit.lineage import incarnation_of, transaction_uuid
from tessera.commit.namespace_client import root_relative
from tessera.format import manifest as mf
from tessera.format.errors import FormatError
from tessera.format.table import paths
from tessera.stores.errors import IncarnationMismatchError, ObjectNotFoundError, StoreError
from tessera.stores.manifest_store import ManifestStore, VersionRecord, open_manifest_store
from tessera.stores.object_store import ObjectStore, open_object_store

from . import errors as E
from .catalog import Catalog, connect
from .namespace_rollback import abandon_first_commit
from .table import make_handler
from .tags import Tags

__all__ = ["TesseraNamespace", "register"]

log = logging.getLogger(__name__)

_M = TypeVar("_M", bound=BaseModel)

SHORT_NAME = "tessera"
CLASS_PATH = "tessera.catalog.namespace.TesseraNamespace"
_TRUE = ("1", "true", "yes", "on")


def register() -> None:
    """Make ``lance_namespace.connect("tessera", ...)`` build a TesseraNamespace."""
    import lance_namespace

    lance_namespace.register_namespace_impl(SHORT_NAME, CLASS_PATH)


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """Tessera's typed errors as the namespace's (the code travels to pylance and over REST)."""
    try:
        yield
    except nserr.LanceNamespaceError:
        raise
    except E.NoSuchTableError as exc:
        raise nserr.TableNotFoundError(str(exc)) from exc
    except TableNotFoundError as exc:
        raise nserr.TableNotFoundError(str(exc)) from exc
    except VersionNotFoundError as exc:
        raise nserr.TableVersionNotFoundError(str(exc)) from exc
    except E.TableExistsError as exc:
        raise nserr.TableAlreadyExistsError(str(exc)) from exc
    except E.NamespaceNotFoundError as exc:
        raise nserr.NamespaceNotFoundError(str(exc)) from exc
    except E.NamespaceExistsError as exc:
        raise nserr.NamespaceAlreadyExistsError(str(exc)) from exc
    except E.NamespaceNotEmptyError as exc:
        raise nserr.NamespaceNotEmptyError(str(exc)) from exc
    except E.TagError as exc:
        text = str(exc)
        if "already exists" in text:
            raise nserr.TableTagAlreadyExistsError(text) from exc
        if text.startswith("tag ") and "does not exist" in text:
            raise nserr.TableTagNotFoundError(text) from exc
        raise nserr.InvalidInputError(text) from exc
    except (E.InvalidNameError, E.InvalidArgumentError) as exc:
        raise nserr.InvalidInputError(str(exc)) from exc
    except CommitConflictError as exc:
        raise nserr.ConcurrentModificationError(str(exc)) from exc
    except (CoordinatorMismatchError, IncarnationMismatchError) as exc:
        raise nserr.InvalidTableStateError(str(exc)) from exc
    except FormatError as exc:
        raise nserr.InvalidInputError(str(exc)) from exc
    except (StoreError, CommitError) as exc:
        raise nserr.ServiceUnavailableError(str(exc)) from exc


_STAGED = re.compile(r"^_versions/(?P<final>[0-9]{1,20}\.manifest)-[0-9A-Za-z-]{1,64}$")


class _TableAccess:
    """One table's object store and coordinator, as the catalog records them
    (stores are the namespace's, shared between requests; the handler is
    fresh per request, so no request inherits another's bound identity)."""

    def __init__(self, ns: TesseraNamespace, ident: tuple[str, str]) -> None:
        self.ident = ident
        self.name, self.uri, recorded = ns.catalog._table_row(ident)
        self.recorded = recorded
        self.store = ns._object_store(self.uri)
        self.handler: CommitHandler = make_handler(self.uri, ns._commit_store(recorded), ns.catalog.retry)
        self.root = root_relative(self.store)
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
        h = self.handler
        if isinstance(h, ExternalCommitHandler):
            try:
                row = h._latest_row(self.store)
            except TableNotFoundError:
                return None
            # _latest_row finished the row's commit; a row read before that still names the staged file
            rel = row.path if row.is_final else (paths.final_manifest_path(row.path) or row.path)
            return TableVersion(version=row.version, manifest_path=self.full_path(rel), manifest_size=row.size)
        names, _ = tstore.list_versions(self.store)
        if not names:
            return None
        v = max(names)
        rel = paths.version_path(names[v])
        return TableVersion(version=v, manifest_path=self.full_path(rel), manifest_size=self.store.size(rel))

    def latest_version(self) -> int:
        entry = self.latest()
        return 0 if entry is None else int(entry.version)

    def version_entry(self, version: int) -> TableVersion:
        """``version``'s entry with its timestamp (reads the manifest)."""
        mfile = self.handler.load(self.store, version)
        scheme = mfile.naming or tstore.list_versions(self.store)[1] or mf.NamingScheme.V2
        rel = paths.manifest_path(version, scheme)
        return _entry(version, self.full_path(rel), self.store.size(rel), mfile)


def _entry(version: int, path: str, size: int, mfile: mf.ManifestFile) -> TableVersion:
    ts = mfile.manifest.timestamp
    return TableVersion(
        version=version,
        manifest_path=path,
        manifest_size=size,
        timestamp_millis=ts.seconds * 1000 + ts.nanos // 1_000_000,
    )


class TesseraNamespace(LanceNamespace):
    """A Lance Namespace whose tables are a Tessera catalog's (managed versioning)."""

    def __init__(self, **properties: str) -> None:
        props = {str(k): str(v) for k, v in properties.items()}
        storage = {k[len("storage.") :]: v for k, v in props.items() if k.startswith("storage.")}
        retry = {k: v for k, v in props.items() if k.startswith("commit.retry.")}
        known = {"name", "warehouse", "uri", "root_namespace", "vend_storage_options", "create", "commit_store"}
        unknown = sorted(
            k for k in props if k not in known and k not in storage and not k.startswith(("storage.", "commit.retry."))
        )
        if unknown:
            raise nserr.InvalidInputError(f"unknown TesseraNamespace properties: {', '.join(unknown)}")
        with _translated():
            self.catalog: Catalog = connect(
                props.get("name"),
                props.get("warehouse"),
                uri=props.get("uri"),
                storage_options=storage or None,
                properties=retry or None,
                create=props.get("create", "true").lower() in _TRUE,
            )
        self.root_namespace = props.get("root_namespace", "default")
        self.commit_store = props.get("commit_store")
        self.vend_storage_options = props.get("vend_storage_options", "false").lower() in _TRUE
        self._object_stores: dict[str, ObjectStore] = {}
        self._manifest_stores: dict[str, ManifestStore] = {}

    def namespace_id(self) -> str:
        return f"TesseraNamespace({self.catalog.uri!r})"

    def close(self) -> None:
        for ms in self._manifest_stores.values():
            ms.close()
        self._manifest_stores.clear()
        self.catalog.close()

    def _object_store(self, uri: str) -> ObjectStore:
        store = self._object_stores.get(uri)
        if store is None:
            store = self._object_stores[uri] = open_object_store(uri, self.catalog.storage_options)
        return store

    def _commit_store(self, recorded: str) -> str | ManifestStore | None:
        """A table's recorded commit store, opened once per namespace (its connections are pooled)."""
        cs = self.catalog._commit_store_for(recorded)
        if not isinstance(cs, str):
            return cs
        ms = self._manifest_stores.get(cs)
        if ms is None:
            ms = self._manifest_stores[cs] = open_manifest_store(cs)
        return ms

    # -- ids -----------------------------------------------------------------------------

    def _ns(self, id: list[str] | None) -> str:
        if not id:
            raise nserr.InvalidInputError("a namespace id needs at least one part")
        return ".".join(_parts(id))

    def _table(self, id: list[str] | None) -> tuple[str, str]:
        if not id:
            raise nserr.InvalidInputError("a table id needs at least one part")
        id = _parts(id)
        if len(id) == 1:
            return self.root_namespace, id[0]
        return ".".join(id[:-1]), id[-1]

    def _access(self, id: list[str] | None) -> _TableAccess:
        return _TableAccess(self, self._table(id))

    # -- namespaces ----------------------------------------------------------------------

    def create_namespace(self, request: CreateNamespaceRequest) -> CreateNamespaceResponse:
        request = _as(CreateNamespaceRequest, request)
        mode = (request.mode or "create").lower()
        with _translated():
            name = self._ns(request.id)
            if mode == "overwrite":
                raise nserr.UnsupportedOperationError("create_namespace mode 'overwrite' is not supported")
            self.catalog.create_namespace(name, dict(request.properties or {}), exist_ok=mode == "exist_ok")
            return CreateNamespaceResponse(properties=self._str_props(self.catalog.namespace_properties(name)))

    def list_namespaces(self, request: ListNamespacesRequest) -> ListNamespacesResponse:
        request = _as(ListNamespacesRequest, request)
        with _translated():
            parent = ".".join(request.id) if request.id else None
            names = self.catalog.list_namespaces(parent)
            children = sorted(n.rsplit(".", 1)[-1] for n in names)
            page, token = _page(children, request.page_token, request.limit)
            return ListNamespacesResponse(namespaces=page, page_token=token)

    def describe_namespace(self, request: DescribeNamespaceRequest) -> DescribeNamespaceResponse:
        request = _as(DescribeNamespaceRequest, request)
        with _translated():
            return DescribeNamespaceResponse(
                properties=self._str_props(self.catalog.namespace_properties(self._ns(request.id)))
            )

    def namespace_exists(self, request: NamespaceExistsRequest) -> NamespaceExistsResponse:
        request = _as(NamespaceExistsRequest, request)
        with _translated():
            name = self._ns(request.id)
            if not self.catalog.namespace_exists(name):
                raise nserr.NamespaceNotFoundError(f"namespace {name!r} does not exist")
            return NamespaceExistsResponse()

    def drop_namespace(self, request: DropNamespaceRequest) -> DropNamespaceResponse:
        request = _as(DropNamespaceRequest, request)
        with _translated():
            name = self._ns(request.id)
            if (request.behavior or "restrict").lower() == "cascade":
                raise nserr.UnsupportedOperationError("drop_namespace behavior 'cascade' is not supported")
            if not self.catalog.namespace_exists(name):
                if (request.mode or "fail").lower() == "skip":
                    return DropNamespaceResponse()
                raise nserr.NamespaceNotFoundError(f"namespace {name!r} does not exist")
            props = self.catalog.namespace_properties(name)
            self.catalog.drop_namespace(name)
            return DropNamespaceResponse(properties=self._str_props(props))

    # -- tables --------------------------------------------------------------------------

    def list_tables(self, request: ListTablesRequest) -> ListTablesResponse:
        request = _as(ListTablesRequest, request)
        with _translated():
            ns = ".".join(request.id) if request.id else self.root_namespace
            names = sorted(t.rsplit(".", 1)[-1] for t in self.catalog.list_tables(ns))
            page, token = _page(names, request.page_token, request.limit)
            return ListTablesResponse(tables=page, page_token=token)

    def declare_table(self, request: DeclareTableRequest) -> DeclareTableResponse:
        request = _as(DeclareTableRequest, request)
        with _translated():
            ns, name = self._table(request.id)
            if len(request.id or []) == 1:
                self.catalog.create_namespace(ns, exist_ok=True)
            info = self.catalog.declare_table((ns, name), location=request.location, commit_store=self.commit_store)
            return DeclareTableResponse(
                location=info["uri"],
                managed_versioning=True,
                storage_options=self._vended(),
                properties=self._str_props(info["properties"]) or None,
            )

    def describe_table(self, request: DescribeTableRequest) -> DescribeTableResponse:
        request = _as(DescribeTableRequest, request)
        if request.version is not None or request.tag is not None:
            raise nserr.UnsupportedOperationError("describe_table of a version or tag: use describe_table_version")
        with _translated():
            ns, name = self._table(request.id)
            info = self.catalog.table_info((ns, name))
            return DescribeTableResponse(
                table=name,
                namespace=list(request.id or [])[:-1] or [ns],
                location=info["uri"],
                table_uri=info["uri"],
                managed_versioning=True,
                storage_options=self._vended(),
                properties=self._str_props(info["properties"]) or None,
            )

    def table_exists(self, request: TableExistsRequest) -> TableExistsResponse:
        request = _as(TableExistsRequest, request)
        with _translated():
            if not self.catalog.table_exists(self._table(request.id)):
                raise nserr.TableNotFoundError(f"table {'.'.join(self._table(request.id))} does not exist")
            return TableExistsResponse()

    def drop_table(self, request: DropTableRequest) -> DropTableResponse:
        request = _as(DropTableRequest, request)
        with _translated():
            ident = self._table(request.id)
            info = self.catalog.table_info(ident)
            self.catalog.drop_table(ident, purge=True)
            return DropTableResponse(id=request.id, location=info["uri"])

    def register_table(self, request: RegisterTableRequest) -> RegisterTableResponse:
        request = _as(RegisterTableRequest, request)
        with _translated():
            if (request.mode or "create").lower() != "create":
                raise nserr.UnsupportedOperationError("register_table supports mode 'create' only")
            ident = self._table(request.id)
            store = open_object_store(request.location, self.catalog.storage_options)
            if not tstore.list_versions(store)[0]:
                raise nserr.InvalidInputError(f"no Lance table at {request.location}: nothing to register")
            info = self.catalog.declare_table(
                ident, location=request.location, commit_store="native", properties=dict(request.properties or {})
            )
            return RegisterTableResponse(location=info["uri"], properties=self._str_props(info["properties"]) or None)

    def deregister_table(self, request: DeregisterTableRequest) -> DeregisterTableResponse:
        request = _as(DeregisterTableRequest, request)
        with _translated():
            ident = self._table(request.id)
            info = self.catalog.table_info(ident)
            self.catalog.drop_table(ident, purge=False)  # the data stays where it is
            return DeregisterTableResponse(id=request.id, location=info["uri"])

    def rename_table(self, request: RenameTableRequest) -> RenameTableResponse:
        request = _as(RenameTableRequest, request)
        with _translated():
            old = self._table(request.id)
            ns = ".".join(_parts(request.new_namespace_id)) if request.new_namespace_id else old[0]
            self.catalog.rename_table(old, (ns, _parts([request.new_table_name])[0]))
            return RenameTableResponse()

    def count_table_rows(self, request: CountTableRowsRequest) -> CountTableRowsResponse:
        request = _as(CountTableRowsRequest, request)
        if request.branch:
            raise nserr.UnsupportedOperationError("branches are not supported")
        with _translated():
            t = self.catalog.load_table(self._table(request.id), request.version)
            return CountTableRowsResponse(count=t.count_rows(request.predicate))

    def restore_table(self, request: RestoreTableRequest) -> RestoreTableResponse:
        request = _as(RestoreTableRequest, request)
        if request.branch:
            raise nserr.UnsupportedOperationError("branches are not supported")
        with _translated():
            self.catalog.load_table(self._table(request.id)).restore(request.version)
            return RestoreTableResponse()

    # -- tags (the table's own _refs/tags, shared with pylance) --------------------------

    def list_table_tags(self, request: ListTableTagsRequest) -> ListTableTagsResponse:
        request = _as(ListTableTagsRequest, request)
        with _translated():
            tags = self._access(request.id).tags().list()
            names, token = _page(sorted(tags), request.page_token, request.limit)
            contents = {
                n: TagContents.model_validate(
                    {"version": int(tags[n]["version"]), "manifestSize": int(tags[n].get("manifestSize") or 0)}
                )
                for n in names
            }
            return ListTableTagsResponse(tags=contents, page_token=token)

    def get_table_tag_version(self, request: GetTableTagVersionRequest) -> GetTableTagVersionResponse:
        request = _as(GetTableTagVersionRequest, request)
        with _translated():
            return GetTableTagVersionResponse(version=self._access(request.id).tags().version_of(request.tag))

    def create_table_tag(self, request: CreateTableTagRequest) -> CreateTableTagResponse:
        request = _as(CreateTableTagRequest, request)
        if request.branch:
            raise nserr.UnsupportedOperationError("branches are not supported")
        with _translated():
            self._access(request.id).tags().create(request.tag, request.version)
            return CreateTableTagResponse()

    def update_table_tag(self, request: UpdateTableTagRequest) -> UpdateTableTagResponse:
        request = _as(UpdateTableTagRequest, request)
        if request.branch:
            raise nserr.UnsupportedOperationError("branches are not supported")
        with _translated():
            self._access(request.id).tags().update(request.tag, request.version)
            return UpdateTableTagResponse()

    def delete_table_tag(self, request: DeleteTableTagRequest) -> DeleteTableTagResponse:
        request = _as(DeleteTableTagRequest, request)
        with _translated():
            self._access(request.id).tags().delete(request.tag)
            return DeleteTableTagResponse()

    # -- versions ------------------------------------------------------------------------

    def list_table_versions(self, request: ListTableVersionsRequest) -> ListTableVersionsResponse:
        request = _as(ListTableVersionsRequest, request)
        if request.branch:
            raise nserr.UnsupportedOperationError("branches are not supported")
        with _translated():
            t = self._access(request.id)
            if request.limit == 1 and request.descending and not request.page_token:
                latest = t.latest()  # every open and append asks this: one listing (or row), no manifest read
                return ListTableVersionsResponse(versions=[] if latest is None else [latest])
            versions = t.handler.versions_after(t.store, 0) if t.latest() is not None else []
            if request.descending:
                versions = versions[::-1]
            page, token = _page(versions, request.page_token, request.limit)
            entries = []
            for v in page:
                try:
                    entries.append(t.version_entry(v))
                except VersionNotFoundError:
                    continue  # recorded, but its manifest was cleaned up behind the store (pylance's cleanup)
            return ListTableVersionsResponse(versions=entries, page_token=token)

    def describe_table_version(self, request: DescribeTableVersionRequest) -> DescribeTableVersionResponse:
        request = _as(DescribeTableVersionRequest, request)
        if request.branch:
            raise nserr.UnsupportedOperationError("branches are not supported")
        with _translated():
            t = self._access(request.id)
            version = request.version if request.version is not None else t.latest_version()
            if version == 0:
                raise nserr.TableVersionNotFoundError(f"table {t.name} has no versions yet")
            return DescribeTableVersionResponse(version=t.version_entry(version))

    def create_table_version(self, request: CreateTableVersionRequest) -> CreateTableVersionResponse:
        """Win ``request.version`` for the staged manifest at ``request.manifest_path``."""
        request = _as(CreateTableVersionRequest, request)
        if request.branch:
            raise nserr.UnsupportedOperationError("branches are not supported")
        with _translated():
            t = self._access(request.id)
            try:
                entry = self._commit(t, request)
            except Exception:
                if request.version == 1 and not t.asked:
                    self._abandon(t, request.manifest_path)  # a refused create leaves nothing behind
                raise
            if request.version == 1 and not self.catalog.table_exists(t.ident):
                # a concurrent creator's refused create removed the declaration while
                # this one committed: an acknowledged table keeps its name
                with contextlib.suppress(E.TableExistsError):
                    self.catalog.declare_table(t.ident, location=t.uri, commit_store=t.recorded)
            return CreateTableVersionResponse(version=entry)

    def _commit(self, t: _TableAccess, request: CreateTableVersionRequest) -> TableVersion:
        version = request.version
        if version < 1:
            raise nserr.InvalidInputError(f"version must be at least 1, got {version}")
        try:
            scheme = mf.NamingScheme((request.naming_scheme or "V2").upper())
        except ValueError:
            raise nserr.InvalidInputError(f"naming_scheme must be V1 or V2, got {request.naming_scheme!r}") from None
        final = paths.manifest_path(version, scheme)
        staged = t.table_relative(request.manifest_path)
        m = _STAGED.match(staged)
        if m is None or paths.version_path(m.group("final")) != final:
            raise nserr.InvalidInputError(
                f"{request.manifest_path!r} is not a staged manifest of version {version} "
                f"(expected {t.full_path(final)}-<uuid>)"
            )
        try:
            data = t.store.read(staged)
        except ObjectNotFoundError:
            # a re-send after a lost reply finds its staged file removed: whose the
            # version is, describe_table_version tells (pylance reads it back)
            if t.latest_version() >= version:
                raise nserr.ConcurrentModificationError(
                    f"version {version} of {t.name} exists and {request.manifest_path} is gone "
                    "(committed already? describe_table_version tells whose it is)"
                ) from None
            raise nserr.InvalidInputError(f"the staged manifest {request.manifest_path} does not exist") from None
        mfile = mf.read_manifest(data, f"{t.store.uri}/{staged}")
        if mfile.manifest.version != version:
            raise nserr.InvalidInputError(f"the staged manifest is version {mfile.manifest.version}, not {version}")
        mf.check_flags(mfile.manifest, writing=False)  # Tessera must be able to read what it publishes
        txn = transaction_uuid(mfile)
        if txn is None:
            raise nserr.InvalidInputError("the staged manifest names no transaction")
        latest = t.latest_version()
        if version <= latest:
            # taken: by this very manifest (a re-send whose staged file is still there), or by another writer
            if transaction_uuid(t.handler.load(t.store, version)) != txn:
                raise nserr.ConcurrentModificationError(f"version {version} of {t.name} is taken")
            with contextlib.suppress(StoreError, OSError):
                t.store.delete(staged)
            return t.version_entry(version)
        if version != latest + 1:
            raise nserr.ConcurrentModificationError(
                f"version {version} of {t.name} is out of order (the latest is {latest})"
            )
        if latest:
            self._check_lineage(t, latest, mfile)
        faults.point(faults.CHECKED)
        t.asked = True
        h = t.handler
        if isinstance(h, ExternalCommitHandler):
            record = VersionRecord(h.table_key, version, staged, len(data), txn, h.incarnation)
            h.reserve(t.store, record)
            faults.point(faults.RESERVED)
            h.complete(t.store, record, final, data)
        else:
            assert isinstance(h, NativeCommitHandler)
            h.commit(t.store, version, data, scheme, txn, None)
            with contextlib.suppress(StoreError, OSError):
                t.store.delete(staged)
        return _entry(version, t.full_path(final), len(data), mfile)

    def _abandon(self, t: _TableAccess, manifest_path: str) -> None:
        """Undo a declared table whose first commit was refused before its
        version was asked for (see :mod:`catalog.namespace_rollback`); never
        raises (the refusal is what the client must hear)."""
        try:
            staged: str | None = t.table_relative(manifest_path)
        except nserr.LanceNamespaceError:
            staged = None
        if staged is not None and not _STAGED.match(staged):
            staged = None  # only a staged manifest's own files are ever removed
        try:
            abandon_first_commit(self.catalog, t.ident, t.store, staged, lambda: t.latest() is not None)
        except Exception:  # noqa: BLE001 - best effort
            log.exception("%s: removing the declaration of a refused create failed", t.name)

    def _check_lineage(self, t: _TableAccess, latest: int, staged: mf.ManifestFile) -> None:
        """The staged manifest must continue this table: the coordinator and
        incarnation it carries (pylance keeps the config of the manifest it
        built on) are the latest version's.  A restore carries the config of
        the version it restores instead (pylance copies that manifest, which
        may predate the table's incarnation, written before a Tessera writer
        adopted one): that version of this table must carry the same."""
        current = t.handler.load(t.store, latest)
        mine, theirs = incarnation_of(current.manifest), incarnation_of(staged.manifest)
        if mine is not None and theirs != mine:
            restored = _restored_version(staged)
            if restored is None or not 0 < restored <= latest:
                raise IncarnationMismatchError(
                    f"the manifest for {t.name} version {staged.manifest.version} was built on incarnation {theirs}, "
                    f"but the table is incarnation {mine}: it was dropped and recreated since the writer read it"
                )
            try:
                old = t.handler.load(t.store, restored)
            except VersionNotFoundError:
                raise nserr.InvalidInputError(
                    f"the manifest for {t.name} version {staged.manifest.version} restores version {restored}, "
                    "which no longer exists (cleaned up)"
                ) from None
            if incarnation_of(old.manifest) != theirs:
                raise IncarnationMismatchError(
                    f"the manifest for {t.name} version {staged.manifest.version} restores version {restored} of "
                    f"incarnation {theirs}, but this table's version {restored} is incarnation "
                    f"{incarnation_of(old.manifest)}: the table was dropped and recreated since the writer read it"
                )
        t.handler.bind(current.manifest, t.uri)

    # -- helpers -------------------------------------------------------------------------

    def _vended(self) -> dict[str, str] | None:
        if not self.vend_storage_options or not self.catalog.storage_options:
            return None
        return {str(k): str(v) for k, v in self.catalog.storage_options.items()}

    @staticmethod
    def _str_props(props: dict[str, Any]) -> dict[str, str]:
        return {str(k): v if isinstance(v, str) else str(v) for k, v in props.items()}


def _restored_version(mfile: mf.ManifestFile) -> int | None:
    """The version a manifest's transaction restores, or None when it is no restore."""
    txn = mfile.transaction
    if txn is None or txn.WhichOneof("operation") != "restore":
        return None
    return int(txn.restore.version)


def _parts(id: list[str]) -> list[str]:
    """An id's parts, each one catalog name part ('.' joins them: a '.' inside
    one would silently name a nested namespace)."""
    for part in id:
        if not isinstance(part, str) or not part or "." in part:
            raise nserr.InvalidInputError(f"invalid id part {part!r}: parts are non-empty and hold no '.'")
    return list(id)


def _as(model: type[_M], request: object) -> _M:
    """A request as its model: pylance's Rust side passes plain dicts."""
    if isinstance(request, model):
        return request
    try:
        return model.model_validate(dict(request) if isinstance(request, dict) else request)
    except ValueError as exc:  # pydantic's ValidationError
        raise nserr.InvalidInputError(f"bad {model.__name__}: {exc}") from None


def _page(items: list[Any], token: str | None, limit: int | None) -> tuple[list[Any], str | None]:
    """A page of ``items`` after the position ``token`` names; the next token or None."""
    start = 0
    if token:
        try:
            start = int(token)
        except ValueError:
            raise nserr.InvalidInputError(f"bad page_token {token!r}") from None
        if start < 0 or start > len(items):
            raise nserr.InvalidInputError(f"bad page_token {token!r}")
    if limit is not None and limit < 0:
        raise nserr.InvalidInputError(f"limit must not be negative, got {limit}")
    stop = len(items) if not limit else min(len(items), start + limit)
    return items[start:stop], (str(stop) if stop < len(items) else None)


with contextlib.suppress(ImportError):
    register()
