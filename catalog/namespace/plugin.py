"""``TesseraNamespace``: the Lance Namespace operations over a Tessera catalog
(namespaces, tables, tags; managed versioning through :mod:`.versions`)."""

from __future__ import annotations

from typing import Any

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
    UpdateTableTagRequest,
    UpdateTableTagResponse,
)
from lance_namespace import errors as nserr
from lance_namespace_urllib3_client.models.tag_contents import TagContents

from tessera.commit import accept_transaction, decode_served_request, list_versions
from tessera.stores.local import check_durability, durability
from tessera.stores.registry import open_object_store

from ..catalog import Catalog, connect
from . import versions
from .parsing import as_model, id_parts, page
from .tables import SharedStores, TableAccess, str_props
from .translate import translated

__all__ = ["TesseraNamespace"]

_TRUE = ("1", "true", "yes", "on")


class TesseraNamespace(LanceNamespace):
    """A Lance Namespace whose tables are a Tessera catalog's (managed versioning)."""

    def __init__(self, **properties: str) -> None:
        props = {str(k): str(v) for k, v in properties.items()}
        storage = {k[len("storage.") :]: v for k, v in props.items() if k.startswith("storage.")}
        retry = {k: v for k, v in props.items() if k.startswith("commit.retry.")}
        known = {
            "name",
            "warehouse",
            "uri",
            "root_namespace",
            "vend_storage_options",
            "create",
            "commit_store",
            "durability",
        }
        unknown = sorted(
            k for k in props if k not in known and k not in storage and not k.startswith(("storage.", "commit.retry."))
        )
        if unknown:
            raise nserr.InvalidInputError(f"unknown TesseraNamespace properties: {', '.join(unknown)}")
        with translated():
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
        #: what the commits made here sync on local disk: "sync" (the default) or
        #: "none" (pylance's own behaviour; see README, "What a commit guarantees")
        try:
            self.durability = check_durability(props.get("durability", "sync"))
        except ValueError as exc:
            self.catalog.close()
            raise nserr.InvalidInputError(str(exc)) from exc
        self.stores = SharedStores(self.catalog)

    def namespace_id(self) -> str:
        return f"TesseraNamespace({self.catalog.uri!r})"

    def close(self) -> None:
        self.stores.close()
        self.catalog.close()

    # -- ids -----------------------------------------------------------------------------

    def _ns(self, id: list[str] | None) -> str:
        if not id:
            raise nserr.InvalidInputError("a namespace id needs at least one part")
        return ".".join(id_parts(id))

    def _table(self, id: list[str] | None) -> tuple[str, str]:
        if not id:
            raise nserr.InvalidInputError("a table id needs at least one part")
        id = id_parts(id)
        if len(id) == 1:
            return self.root_namespace, id[0]
        return ".".join(id[:-1]), id[-1]

    def _access(self, id: list[str] | None) -> TableAccess:
        return TableAccess(self.stores, self._table(id))

    # -- namespaces ----------------------------------------------------------------------

    def create_namespace(self, request: CreateNamespaceRequest) -> CreateNamespaceResponse:
        request = as_model(CreateNamespaceRequest, request)
        mode = (request.mode or "create").lower()
        with translated():
            name = self._ns(request.id)
            if mode == "overwrite":
                raise nserr.UnsupportedOperationError("create_namespace mode 'overwrite' is not supported")
            self.catalog.create_namespace(name, dict(request.properties or {}), exist_ok=mode == "exist_ok")
            return CreateNamespaceResponse(properties=self._str_props(self.catalog.namespace_properties(name)))

    def list_namespaces(self, request: ListNamespacesRequest) -> ListNamespacesResponse:
        request = as_model(ListNamespacesRequest, request)
        with translated():
            parent = ".".join(request.id) if request.id else None
            names = self.catalog.list_namespaces(parent)
            children = sorted(n.rsplit(".", 1)[-1] for n in names)
            items, token = page(children, request.page_token, request.limit)
            return ListNamespacesResponse(namespaces=items, page_token=token)

    def describe_namespace(self, request: DescribeNamespaceRequest) -> DescribeNamespaceResponse:
        request = as_model(DescribeNamespaceRequest, request)
        with translated():
            return DescribeNamespaceResponse(
                properties=self._str_props(self.catalog.namespace_properties(self._ns(request.id)))
            )

    def namespace_exists(self, request: NamespaceExistsRequest) -> NamespaceExistsResponse:
        request = as_model(NamespaceExistsRequest, request)
        with translated():
            name = self._ns(request.id)
            if not self.catalog.namespace_exists(name):
                raise nserr.NamespaceNotFoundError(f"namespace {name!r} does not exist")
            return NamespaceExistsResponse()

    def drop_namespace(self, request: DropNamespaceRequest) -> DropNamespaceResponse:
        request = as_model(DropNamespaceRequest, request)
        with translated():
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
        request = as_model(ListTablesRequest, request)
        with translated():
            ns = ".".join(request.id) if request.id else self.root_namespace
            names = sorted(t.rsplit(".", 1)[-1] for t in self.catalog.list_tables(ns))
            items, token = page(names, request.page_token, request.limit)
            return ListTablesResponse(tables=items, page_token=token)

    def declare_table(self, request: DeclareTableRequest) -> DeclareTableResponse:
        request = as_model(DeclareTableRequest, request)
        with translated():
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
        request = as_model(DescribeTableRequest, request)
        if request.version is not None or request.tag is not None:
            raise nserr.UnsupportedOperationError("describe_table of a version or tag: use describe_table_version")
        with translated():
            ns, name = self._table(request.id)
            table = self.stores.resolve((ns, name))  # pylance asks before every append: derived once per row
            return DescribeTableResponse(
                table=name,
                namespace=list(request.id or [])[:-1] or [ns],
                location=table.uri,
                table_uri=table.uri,
                managed_versioning=True,
                storage_options=self._vended(),
                properties=dict(table.properties) or None,
            )

    def table_exists(self, request: TableExistsRequest) -> TableExistsResponse:
        request = as_model(TableExistsRequest, request)
        with translated():
            if not self.catalog.table_exists(self._table(request.id)):
                raise nserr.TableNotFoundError(f"table {'.'.join(self._table(request.id))} does not exist")
            return TableExistsResponse()

    def drop_table(self, request: DropTableRequest) -> DropTableResponse:
        request = as_model(DropTableRequest, request)
        with translated():
            ident = self._table(request.id)
            info = self.catalog.table_info(ident)
            self.catalog.drop_table(ident, purge=True)
            return DropTableResponse(id=request.id, location=info["uri"])

    def register_table(self, request: RegisterTableRequest) -> RegisterTableResponse:
        request = as_model(RegisterTableRequest, request)
        with translated():
            if (request.mode or "create").lower() != "create":
                raise nserr.UnsupportedOperationError("register_table supports mode 'create' only")
            ident = self._table(request.id)
            store = open_object_store(request.location, self.catalog.storage_options)
            if not list_versions(store)[0]:
                raise nserr.InvalidInputError(f"no Lance table at {request.location}: nothing to register")
            info = self.catalog.declare_table(
                ident, location=request.location, commit_store="native", properties=dict(request.properties or {})
            )
            return RegisterTableResponse(location=info["uri"], properties=self._str_props(info["properties"]) or None)

    def deregister_table(self, request: DeregisterTableRequest) -> DeregisterTableResponse:
        request = as_model(DeregisterTableRequest, request)
        with translated():
            ident = self._table(request.id)
            info = self.catalog.table_info(ident)
            self.catalog.drop_table(ident, purge=False)  # the data stays where it is
            return DeregisterTableResponse(id=request.id, location=info["uri"])

    def rename_table(self, request: RenameTableRequest) -> RenameTableResponse:
        request = as_model(RenameTableRequest, request)
        with translated():
            old = self._table(request.id)
            ns = ".".join(id_parts(request.new_namespace_id)) if request.new_namespace_id else old[0]
            self.catalog.rename_table(old, (ns, id_parts([request.new_table_name])[0]))
            return RenameTableResponse()

    def count_table_rows(self, request: CountTableRowsRequest) -> CountTableRowsResponse:
        request = as_model(CountTableRowsRequest, request)
        if request.branch:
            raise nserr.UnsupportedOperationError("branches are not supported")
        with translated():
            t = self.catalog.load_table(self._table(request.id), request.version)
            return CountTableRowsResponse(count=t.count_rows(request.predicate))

    def restore_table(self, request: RestoreTableRequest) -> RestoreTableResponse:
        request = as_model(RestoreTableRequest, request)
        if request.branch:
            raise nserr.UnsupportedOperationError("branches are not supported")
        with translated(), durability(self.durability):
            self.catalog.load_table(self._table(request.id)).restore(request.version)
            return RestoreTableResponse()

    # -- tags (the table's own _refs/tags, shared with pylance) --------------------------

    def list_table_tags(self, request: ListTableTagsRequest) -> ListTableTagsResponse:
        request = as_model(ListTableTagsRequest, request)
        with translated():
            tags = self._access(request.id).tags().list()
            names, token = page(sorted(tags), request.page_token, request.limit)
            contents = {
                n: TagContents.model_validate(
                    {"version": int(tags[n]["version"]), "manifestSize": int(tags[n].get("manifestSize") or 0)}
                )
                for n in names
            }
            return ListTableTagsResponse(tags=contents, page_token=token)

    def get_table_tag_version(self, request: GetTableTagVersionRequest) -> GetTableTagVersionResponse:
        request = as_model(GetTableTagVersionRequest, request)
        with translated():
            return GetTableTagVersionResponse(version=self._access(request.id).tags().version_of(request.tag))

    def create_table_tag(self, request: CreateTableTagRequest) -> CreateTableTagResponse:
        request = as_model(CreateTableTagRequest, request)
        if request.branch:
            raise nserr.UnsupportedOperationError("branches are not supported")
        with translated():
            self._access(request.id).tags().create(request.tag, request.version)
            return CreateTableTagResponse()

    def update_table_tag(self, request: UpdateTableTagRequest) -> UpdateTableTagResponse:
        request = as_model(UpdateTableTagRequest, request)
        if request.branch:
            raise nserr.UnsupportedOperationError("branches are not supported")
        with translated():
            self._access(request.id).tags().update(request.tag, request.version)
            return UpdateTableTagResponse()

    def delete_table_tag(self, request: DeleteTableTagRequest) -> DeleteTableTagResponse:
        request = as_model(DeleteTableTagRequest, request)
        with translated():
            self._access(request.id).tags().delete(request.tag)
            return DeleteTableTagResponse()

    # -- versions (managed versioning) -------------------------------------------------

    def list_table_versions(self, request: ListTableVersionsRequest) -> ListTableVersionsResponse:
        request = as_model(ListTableVersionsRequest, request)
        if request.branch:
            raise nserr.UnsupportedOperationError("branches are not supported")
        with translated():
            return versions.list_table_versions(self._access(request.id), request)

    def describe_table_version(self, request: DescribeTableVersionRequest) -> DescribeTableVersionResponse:
        request = as_model(DescribeTableVersionRequest, request)
        if request.branch:
            raise nserr.UnsupportedOperationError("branches are not supported")
        with translated():
            return versions.describe_table_version(self._access(request.id), request)

    def create_table_version(self, request: CreateTableVersionRequest) -> CreateTableVersionResponse:
        """Win ``request.version`` for the staged manifest at ``request.manifest_path``."""
        request = as_model(CreateTableVersionRequest, request)
        if request.branch:
            raise nserr.UnsupportedOperationError("branches are not supported")
        with translated(), durability(self.durability):
            return versions.create_table_version(self.catalog, self._access(request.id), request)

    def serve_commit(self, id: list[str], body: dict[str, Any]) -> dict[str, Any]:
        """A served commit (:mod:`tessera.commit.served`): the transaction in
        ``body``, which a client built on a version of the table ``id`` it
        read, rebased and committed here; the version's entry as a dict
        (version, manifest_path, manifest_size).  Tessera's errors are raised
        as they are (``tessera serve`` sends their names)."""
        request = decode_served_request(body)
        t = self._access(id)
        with durability(self.durability):
            version = accept_transaction(
                t.handler,
                t.store,
                request.transaction,
                request.read_version,
                affected_rows=request.affected_rows,
                seconds=request.seconds,
                label=t.name,
                base_transaction=request.base_transaction,
            )
        entry = t.entry(version)
        return {"version": entry.version, "manifest_path": entry.manifest_path, "manifest_size": entry.manifest_size}

    # -- helpers -------------------------------------------------------------------------

    def _vended(self) -> dict[str, str] | None:
        if not self.vend_storage_options or not self.catalog.storage_options:
            return None
        return {str(k): str(v) for k, v in self.catalog.storage_options.items()}

    @staticmethod
    def _str_props(props: dict[str, Any]) -> dict[str, str]:
        return str_props(props)
