"""The routes of the Lance REST Namespace spec that the server knows (each one
``TesseraNamespace`` call), the HTTP status of each namespace error code, and
the checks of a route's ids and query parameters."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lance_namespace import (
    CountTableRowsRequest,
    CreateNamespaceRequest,
    CreateTableTagRequest,
    CreateTableVersionRequest,
    DeclareTableRequest,
    DeleteTableTagRequest,
    DeregisterTableRequest,
    DescribeNamespaceRequest,
    DescribeTableRequest,
    DescribeTableVersionRequest,
    DropNamespaceRequest,
    DropTableRequest,
    GetTableTagVersionRequest,
    ListNamespacesRequest,
    ListTablesRequest,
    ListTableTagsRequest,
    ListTableVersionsRequest,
    NamespaceExistsRequest,
    RegisterTableRequest,
    RenameTableRequest,
    RestoreTableRequest,
    TableExistsRequest,
    UpdateTableTagRequest,
)
from lance_namespace.errors import ErrorCode
from pydantic import BaseModel

__all__ = ["DEFAULT_DELIMITER", "OPS", "QUERY", "STATUS", "Op", "Refused", "invalid", "parse_id"]

DEFAULT_DELIMITER = "$"
MAX_ID_PARTS = 16
MAX_PART_CHARS = 256
MAX_DELIMITER_CHARS = 8

#: HTTP status of each Lance Namespace error code (the spec's error responses:
#: 400 bad request, 401, 403, 404 not found, 406 unsupported, 409 conflict,
#: 429, 503, 500).
STATUS: dict[ErrorCode, int] = {
    ErrorCode.UNSUPPORTED: 406,
    ErrorCode.NAMESPACE_NOT_FOUND: 404,
    ErrorCode.NAMESPACE_ALREADY_EXISTS: 409,
    ErrorCode.NAMESPACE_NOT_EMPTY: 409,
    ErrorCode.TABLE_NOT_FOUND: 404,
    ErrorCode.TABLE_ALREADY_EXISTS: 409,
    ErrorCode.TABLE_INDEX_NOT_FOUND: 404,
    ErrorCode.TABLE_INDEX_ALREADY_EXISTS: 409,
    ErrorCode.TABLE_TAG_NOT_FOUND: 404,
    ErrorCode.TABLE_TAG_ALREADY_EXISTS: 409,
    ErrorCode.TRANSACTION_NOT_FOUND: 404,
    ErrorCode.TABLE_VERSION_NOT_FOUND: 404,
    ErrorCode.TABLE_COLUMN_NOT_FOUND: 404,
    ErrorCode.INVALID_INPUT: 400,
    ErrorCode.CONCURRENT_MODIFICATION: 409,
    ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.SERVICE_UNAVAILABLE: 503,
    ErrorCode.INTERNAL: 500,
    ErrorCode.INVALID_TABLE_STATE: 409,
    ErrorCode.TABLE_SCHEMA_VALIDATION_ERROR: 400,
    ErrorCode.THROTTLING: 429,
    ErrorCode.TABLE_BRANCH_NOT_FOUND: 404,
    ErrorCode.TABLE_BRANCH_ALREADY_EXISTS: 409,
}


class Refused(Exception):
    """A request refused by the server itself (before or instead of the namespace)."""

    def __init__(self, status: int, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


def invalid(message: str) -> Refused:
    return Refused(400, ErrorCode.INVALID_INPUT, message)


# -- ids ---------------------------------------------------------------------------------


def _check_delimiter(delimiter: str) -> str:
    if not delimiter or len(delimiter) > MAX_DELIMITER_CHARS or "/" in delimiter or not delimiter.isprintable():
        raise invalid(f"bad delimiter {delimiter!r}: 1 to {MAX_DELIMITER_CHARS} printable characters other than '/'")
    return delimiter


def _check_part(part: object, delimiter: str, what: str) -> str:
    if not isinstance(part, str):
        raise invalid(f"{what} id parts must be strings, got {type(part).__name__}")
    if not part:
        raise invalid(f"{what} id has an empty part")
    if len(part) > MAX_PART_CHARS:
        raise invalid(f"{what} id part is longer than {MAX_PART_CHARS} characters")
    if not part.isprintable():
        raise invalid(f"{what} id part {part!r} contains a control or invisible character")
    for bad, why in (
        ("/", "'/'"),
        ("\\", "'\\'"),
        (".", "'.' (it would name a nested namespace)"),
        (delimiter, "the delimiter"),
    ):
        if bad in part:
            raise invalid(f"{what} id part {part!r} contains {why}")
    return part


def parse_id(text: str, delimiter: str, what: str) -> list[str]:
    """The id in a route (``a$b$t``) as its parts, validated; the delimiter
    alone is the root namespace (``[]``), which only namespace routes accept."""
    delimiter = _check_delimiter(delimiter)
    if text == delimiter:
        if what != "namespace":
            raise invalid(f"a {what} id needs at least one part")
        return []
    parts = text.split(delimiter)
    if len(parts) > MAX_ID_PARTS:
        raise invalid(f"{what} id has more than {MAX_ID_PARTS} parts")
    return [_check_part(p, delimiter, what) for p in parts]


# -- routes ------------------------------------------------------------------------------


def _bool(text: str) -> bool:
    low = text.lower()
    if low in ("true", "1"):
        return True
    if low in ("false", "0"):
        return False
    raise ValueError("expected true or false")


def _limit(text: str) -> int:
    value = int(text)
    if not 0 <= value < 2**31:
        raise ValueError("expected an integer from 0 to 2^31-1")
    return value


def _token(text: str) -> str:
    if len(text) > 1024 or not text.isprintable():
        raise ValueError("expected at most 1024 printable characters")
    return text


QUERY: dict[str, Callable[[str], Any]] = {
    "page_token": _token,
    "limit": _limit,
    "descending": _bool,
    "branch": _token,
    "with_table_uri": _bool,
    "load_detailed_metadata": _bool,
    "check_declared": _bool,
    "include_declared": _bool,
}
_PAGED = ("page_token", "limit")


@dataclass(frozen=True)
class Op:
    """A route: ``verb path`` is one ``TesseraNamespace.<call>(<model>)``."""

    verb: str
    path: str
    call: str
    model: type[BaseModel]
    query: tuple[str, ...] = ()
    reply: str = "json"  # "json" (the response model), "empty" (exists: the status says it), "count"

    @property
    def what(self) -> str:
        return "namespace" if self.path.startswith("/v1/namespace/") else "table"


OPS: tuple[Op, ...] = (
    # namespaces
    Op("POST", "/v1/namespace/{id}/create", "create_namespace", CreateNamespaceRequest),
    Op("GET", "/v1/namespace/{id}/list", "list_namespaces", ListNamespacesRequest, _PAGED),
    Op("POST", "/v1/namespace/{id}/describe", "describe_namespace", DescribeNamespaceRequest),
    Op("POST", "/v1/namespace/{id}/drop", "drop_namespace", DropNamespaceRequest),
    Op("POST", "/v1/namespace/{id}/exists", "namespace_exists", NamespaceExistsRequest, reply="empty"),
    Op("GET", "/v1/namespace/{id}/table/list", "list_tables", ListTablesRequest, (*_PAGED, "include_declared")),
    # tables
    Op("POST", "/v1/table/{id}/declare", "declare_table", DeclareTableRequest),
    Op(
        "POST",
        "/v1/table/{id}/describe",
        "describe_table",
        DescribeTableRequest,
        ("with_table_uri", "load_detailed_metadata", "check_declared"),
    ),
    Op("POST", "/v1/table/{id}/exists", "table_exists", TableExistsRequest, reply="empty"),
    Op("POST", "/v1/table/{id}/drop", "drop_table", DropTableRequest),
    Op("POST", "/v1/table/{id}/register", "register_table", RegisterTableRequest),
    Op("POST", "/v1/table/{id}/deregister", "deregister_table", DeregisterTableRequest),
    Op("POST", "/v1/table/{id}/rename", "rename_table", RenameTableRequest),
    Op("POST", "/v1/table/{id}/restore", "restore_table", RestoreTableRequest),
    Op("POST", "/v1/table/{id}/count_rows", "count_table_rows", CountTableRowsRequest, reply="count"),
    # table versions (managed versioning: pylance's commit path)
    Op("POST", "/v1/table/{id}/version/create", "create_table_version", CreateTableVersionRequest),
    Op("POST", "/v1/table/{id}/version/describe", "describe_table_version", DescribeTableVersionRequest),
    Op(
        "POST",
        "/v1/table/{id}/version/list",
        "list_table_versions",
        ListTableVersionsRequest,
        (*_PAGED, "descending", "branch"),
    ),
    # tags
    Op("POST", "/v1/table/{id}/tags/list", "list_table_tags", ListTableTagsRequest, _PAGED),
    Op("POST", "/v1/table/{id}/tags/version", "get_table_tag_version", GetTableTagVersionRequest),
    Op("POST", "/v1/table/{id}/tags/create", "create_table_tag", CreateTableTagRequest),
    Op("POST", "/v1/table/{id}/tags/delete", "delete_table_tag", DeleteTableTagRequest),
    Op("POST", "/v1/table/{id}/tags/update", "update_table_tag", UpdateTableTagRequest),
)
