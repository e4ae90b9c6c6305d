"""Tessera as a Lance REST Namespace server: pylance commits through a Tessera process over HTTP.

``tessera --warehouse DIR serve --port 2333`` serves the catalog; pylance (its
Rust ``RestNamespace``) connects with
``lance_namespace.connect("rest", {"uri": "http://127.0.0.1:2333"})`` and, with a
token, ``"header.Authorization": "Bearer <token>"``.  Every route of the Lance
REST Namespace spec that this server knows is one :class:`TesseraNamespace`
call: the request is parsed with the spec's own pydantic models
(``lance_namespace``), the call runs in Starlette's thread pool (it blocks on
the catalog database and the object store), and the response model is
serialised back.  A method TesseraNamespace does not implement answers the
spec's "unsupported" error (406, code 0); an unknown route answers 404, code 0.

Errors are ``{"error": message, "code": n}`` with ``n`` the Lance Namespace
error code (pylance dispatches on it) and the HTTP status of :data:`STATUS`.
Before a request reaches the namespace the server checks, in this order: the
bearer token (401, code 16), the ids in the path (400, code 13: bounded length
and part count, no empty part, no '/', '.', '..', control character or
delimiter inside a part) and the body size (413, code 13).  One log line per
request (logger ``tessera.server``): method, route template, status, time.

Several worker processes can serve one catalog: each builds its own
TesseraNamespace from the same properties (handed over in the environment
variable :data:`CONFIG_ENV`), and Tessera's commit protocol arbitrates between
processes as it does between any writers.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
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
from lance_namespace import errors as nserr
from lance_namespace.errors import ErrorCode
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .namespace import TesseraNamespace

__all__ = ["STATUS", "ServerConfig", "app_from_env", "create_app", "read_token", "serve"]

log = logging.getLogger("tessera.server")

CONFIG_ENV = "TESSERA_SERVER_CONFIG"  # how `tessera serve` hands its settings to the worker processes
TOKEN_ENV = "TESSERA_SERVER_TOKEN"
DEFAULT_PORT = 2333  # the Lance REST Namespace spec's
DEFAULT_MAX_BODY_BYTES = 1 << 20
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


class _Refused(Exception):
    """A request refused by the server itself (before or instead of the namespace)."""

    def __init__(self, status: int, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


def _invalid(message: str) -> _Refused:
    return _Refused(400, ErrorCode.INVALID_INPUT, message)


def _error(status: int, code: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"error": message, "code": int(code)}, status_code=status, headers=headers)


# -- ids ---------------------------------------------------------------------------------


def _check_delimiter(delimiter: str) -> str:
    if not delimiter or len(delimiter) > MAX_DELIMITER_CHARS or "/" in delimiter or not delimiter.isprintable():
        raise _invalid(f"bad delimiter {delimiter!r}: 1 to {MAX_DELIMITER_CHARS} printable characters other than '/'")
    return delimiter


def _check_part(part: object, delimiter: str, what: str) -> str:
    if not isinstance(part, str):
        raise _invalid(f"{what} id parts must be strings, got {type(part).__name__}")
    if not part:
        raise _invalid(f"{what} id has an empty part")
    if len(part) > MAX_PART_CHARS:
        raise _invalid(f"{what} id part is longer than {MAX_PART_CHARS} characters")
    if not part.isprintable():
        raise _invalid(f"{what} id part {part!r} contains a control or invisible character")
    for bad, why in (
        ("/", "'/'"),
        ("\\", "'\\'"),
        (".", "'.' (it would name a nested namespace)"),
        (delimiter, "the delimiter"),
    ):
        if bad in part:
            raise _invalid(f"{what} id part {part!r} contains {why}")
    return part


def parse_id(text: str, delimiter: str, what: str) -> list[str]:
    """The id in a route (``a$b$t``) as its parts, validated; the delimiter
    alone is the root namespace (``[]``), which only namespace routes accept."""
    delimiter = _check_delimiter(delimiter)
    if text == delimiter:
        if what != "namespace":
            raise _invalid(f"a {what} id needs at least one part")
        return []
    parts = text.split(delimiter)
    if len(parts) > MAX_ID_PARTS:
        raise _invalid(f"{what} id has more than {MAX_ID_PARTS} parts")
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


_QUERY: dict[str, Callable[[str], Any]] = {
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
class _Op:
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


OPS: tuple[_Op, ...] = (
    # namespaces
    _Op("POST", "/v1/namespace/{id}/create", "create_namespace", CreateNamespaceRequest),
    _Op("GET", "/v1/namespace/{id}/list", "list_namespaces", ListNamespacesRequest, _PAGED),
    _Op("POST", "/v1/namespace/{id}/describe", "describe_namespace", DescribeNamespaceRequest),
    _Op("POST", "/v1/namespace/{id}/drop", "drop_namespace", DropNamespaceRequest),
    _Op("POST", "/v1/namespace/{id}/exists", "namespace_exists", NamespaceExistsRequest, reply="empty"),
    _Op("GET", "/v1/namespace/{id}/table/list", "list_tables", ListTablesRequest, (*_PAGED, "include_declared")),
    # tables
    _Op("POST", "/v1/table/{id}/declare", "declare_table", DeclareTableRequest),
    _Op(
        "POST",
        "/v1/table/{id}/describe",
        "describe_table",
        DescribeTableRequest,
        ("with_table_uri", "load_detailed_metadata", "check_declared"),
    ),
    _Op("POST", "/v1/table/{id}/exists", "table_exists", TableExistsRequest, reply="empty"),
    _Op("POST", "/v1/table/{id}/drop", "drop_table", DropTableRequest),
    _Op("POST", "/v1/table/{id}/register", "register_table", RegisterTableRequest),
    _Op("POST", "/v1/table/{id}/deregister", "deregister_table", DeregisterTableRequest),
    _Op("POST", "/v1/table/{id}/rename", "rename_table", RenameTableRequest),
    _Op("POST", "/v1/table/{id}/restore", "restore_table", RestoreTableRequest),
    _Op("POST", "/v1/table/{id}/count_rows", "count_table_rows", CountTableRowsRequest, reply="count"),
    # table versions (managed versioning: pylance's commit path)
    _Op("POST", "/v1/table/{id}/version/create", "create_table_version", CreateTableVersionRequest),
    _Op("POST", "/v1/table/{id}/version/describe", "describe_table_version", DescribeTableVersionRequest),
    _Op(
        "POST",
        "/v1/table/{id}/version/list",
        "list_table_versions",
        ListTableVersionsRequest,
        (*_PAGED, "descending", "branch"),
    ),
    # tags
    _Op("POST", "/v1/table/{id}/tags/list", "list_table_tags", ListTableTagsRequest, _PAGED),
    _Op("POST", "/v1/table/{id}/tags/version", "get_table_tag_version", GetTableTagVersionRequest),
    _Op("POST", "/v1/table/{id}/tags/create", "create_table_tag", CreateTableTagRequest),
    _Op("POST", "/v1/table/{id}/tags/delete", "delete_table_tag", DeleteTableTagRequest),
    _Op("POST", "/v1/table/{id}/tags/update", "update_table_tag", UpdateTableTagRequest),
)


# -- configuration -----------------------------------------------------------------------


@dataclass(frozen=True)
class ServerConfig:
    """What a server process needs: TesseraNamespace's properties, the token
    clients must present (None: no authentication) and the body limit."""

    properties: dict[str, str] = field(default_factory=dict)
    token: str | None = field(default=None, repr=False)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    allow_client_locations: bool = False  # declare_table's `location`: a path on this server, chosen by a client


def read_token(token_file: str | None) -> str | None:
    """The bearer token: the file's content (stripped) if one is named, else
    ``$TESSERA_SERVER_TOKEN`` if set, else None (no authentication)."""
    if token_file:
        try:
            with open(token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read the token file {token_file}: {exc}") from None
        if not token:
            raise ValueError(f"the token file {token_file} is empty")
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
        if not token:
            return None
    if not token.isprintable() or " " in token:
        raise ValueError("the token must be printable characters without spaces")
    return token


# -- the application ---------------------------------------------------------------------


class _Guard:
    """Outermost middleware: the token, '/' smuggled into an id (``%2F``), the
    declared body size; then one log line per request."""

    def __init__(self, app: ASGIApp, token: str | None, max_body_bytes: int) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.max_body_bytes = max_body_bytes

    def _refusal(self, scope: Scope) -> _Refused | None:
        headers = dict(scope.get("headers") or [])  # the last of a repeated header wins; no header is repeated here
        if self.token is not None:
            scheme, _, presented = headers.get(b"authorization", b"").partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(presented.strip(), self.token):
                return _Refused(401, ErrorCode.UNAUTHENTICATED, "missing or invalid bearer token")
        raw = scope.get("raw_path") or scope.get("path", "").encode()
        if b"%2f" in raw.lower() or b"%5c" in raw.lower():
            return _invalid("ids must not contain '/' or '\\'")
        length = headers.get(b"content-length")
        if length is not None:
            try:
                size = int(length)
            except ValueError:
                return _invalid("bad Content-Length")
            if size > self.max_body_bytes:
                return _Refused(413, ErrorCode.INVALID_INPUT, f"the request body exceeds {self.max_body_bytes} bytes")
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        refused = self._refusal(scope)
        try:
            if refused is not None:
                scope.setdefault("state", {})["error_code"] = int(refused.code)
                headers = {"WWW-Authenticate": "Bearer"} if refused.status == 401 else None
                await _error(refused.status, refused.code, str(refused), headers)(scope, receive, sending)
            else:
                await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", None) or "-"
            code = (scope.get("state") or {}).get("error_code")
            log.info(
                "request method=%s route=%s status=%d ms=%.1f%s",
                scope.get("method"),
                route,
                status,
                (time.perf_counter() - start) * 1000,
                "" if code is None else f" code={code}",
            )


async def _read_json(request: Request, limit: int) -> dict[str, Any]:
    """The JSON object in the body, read up to ``limit`` bytes: ``{}`` for an
    empty body and for JSON ``null``, which LanceDB's REST client sends where
    a request has no field but the id (``version/list``); the model then says
    whether a required field is missing."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _Refused(413, ErrorCode.INVALID_INPUT, f"the request body exceeds {limit} bytes")
        chunks.append(chunk)
    body = b"".join(chunks)
    if not body.strip():
        return {}
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise _invalid(f"the body is not JSON: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _invalid(f"the body must be a JSON object, got {type(data).__name__}")
    return data


class _App:
    """The namespace behind the routes, and what they share."""

    def __init__(self, ns: TesseraNamespace, config: ServerConfig) -> None:
        self.ns = ns
        self.config = config

    def endpoint(self, op: _Op) -> Callable[[Request], Awaitable[Response]]:
        call = getattr(self.ns, op.call)

        async def endpoint(request: Request) -> Response:
            try:
                req = await self._request(op, request)
                resp = await run_in_threadpool(call, req)  # blocking: the catalog database, the object store
                return self._reply(op, resp)
            except nserr.LanceNamespaceError as exc:
                return self._failed(request, STATUS.get(exc.code, 500), exc.code, str(exc))
            except _Refused as exc:
                return self._failed(request, exc.status, exc.code, str(exc))
            except Exception:  # noqa: BLE001 - anything else is the server's fault, and says so without details
                log.exception("%s %s failed", request.method, op.path)
                return self._failed(
                    request, 500, ErrorCode.INTERNAL, f"internal error in {op.call} (see the server log)"
                )

        endpoint.__name__ = op.call
        return endpoint

    async def _request(self, op: _Op, request: Request) -> BaseModel:
        params = request.query_params
        ident = parse_id(request.path_params["id"], params.get("delimiter", DEFAULT_DELIMITER), op.what)
        data = await _read_json(request, self.config.max_body_bytes) if op.verb == "POST" else {}
        for name in op.query:
            if name in params:
                try:
                    data[name] = _QUERY[name](params[name])
                except ValueError as exc:
                    raise _invalid(f"bad query parameter {name}={params[name]!r}: {exc}") from None
        given = data.get("id")
        if given is not None and given != ident:
            raise _invalid(f"the id in the body ({given!r}) is not the id in the path ({ident!r})")
        data["id"] = ident
        try:
            req = op.model.model_validate(data)
        except ValidationError as exc:
            raise _invalid(f"bad {op.model.__name__}: {exc}"[:2000]) from None
        location = getattr(req, "location", None) if op.call in ("declare_table", "register_table") else None
        if location and not self.config.allow_client_locations and not self._in_warehouse(location):
            raise _invalid(
                f"{op.call}: {location!r} is outside the server's warehouse (the server chooses table locations)"
            )
        return req

    def _in_warehouse(self, location: str) -> bool:
        """Whether ``location`` lies inside the catalog's warehouse (no '..' tricks)."""
        root = self.ns.catalog.warehouse.rstrip("/")
        if "://" not in root and "://" not in location:
            root, location = os.path.realpath(root), os.path.realpath(location)
        parts = location.replace("\\", "/").split("/")
        return ".." not in parts and location.startswith(root + "/")

    def _reply(self, op: _Op, resp: Any) -> Response:
        if op.reply == "empty":
            return Response(status_code=200)
        body = resp.model_dump(mode="json", by_alias=True, exclude_none=True) if isinstance(resp, BaseModel) else resp
        if not isinstance(body, dict):
            raise TypeError(f"{op.call} returned {type(resp).__name__}")
        body.pop("context", None)
        if op.reply == "count":
            return JSONResponse(body.get("count"))  # the spec's bare number
        if not self.ns.vend_storage_options:
            body.pop("storage_options", None)
        return JSONResponse(body)

    @staticmethod
    def _failed(request: Request, status: int, code: int, message: str) -> Response:
        request.state.error_code = int(code)
        return _error(status, code, message)


async def _no_route(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 404
    request.state.error_code = int(ErrorCode.UNSUPPORTED)
    what = "no such route" if status == 404 else f"{request.method} is not allowed here"
    headers = dict(exc.headers or {}) if isinstance(exc, HTTPException) else None
    return _error(status, ErrorCode.UNSUPPORTED, f"{what}: {request.method} {request.url.path}", headers)


def create_app(config: ServerConfig, namespace: TesseraNamespace | None = None) -> Starlette:
    """The ASGI application serving ``namespace`` (by default one built from
    ``config.properties``, closed when the application shuts down)."""
    if config.max_body_bytes < 1:
        raise ValueError("max_body_bytes must be positive")
    ns = namespace if namespace is not None else TesseraNamespace(**config.properties)
    app_state = _App(ns, config)
    routes = [Route(op.path, app_state.endpoint(op), methods=[op.verb], name=op.call) for op in OPS]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if namespace is None:
                ns.close()

    app = Starlette(
        routes=routes,
        exception_handlers={404: _no_route, 405: _no_route},
        lifespan=lifespan,
    )
    app.router.redirect_slashes = False  # /x/ is not /x: 404, not a redirect
    app.add_middleware(_Guard, token=config.token, max_body_bytes=config.max_body_bytes)
    app.state.namespace = ns
    return app


# -- running -----------------------------------------------------------------------------


def _setup_logging() -> None:
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s[%(process)d] %(message)s"))
        log.addHandler(handler)
        log.propagate = False
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)


def app_from_env() -> Starlette:
    """The application of one worker process, from :data:`CONFIG_ENV` (set by :func:`serve`)."""
    _setup_logging()
    raw = os.environ.get(CONFIG_ENV)
    if not raw:
        raise RuntimeError(f"{CONFIG_ENV} is not set: start the server with `tessera serve`")
    settings = json.loads(raw)
    config = ServerConfig(
        properties={str(k): str(v) for k, v in settings["properties"].items()},
        token=read_token(settings.get("token_file")),
        max_body_bytes=int(settings["max_body_bytes"]),
    )
    if settings.get("authenticate") and config.token is None:
        raise RuntimeError("the token vanished between the start of the server and this worker")
    return create_app(config)


def serve(
    properties: dict[str, str],
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    workers: int = 1,
    token_file: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> None:
    """Serve TesseraNamespace(**properties) with uvicorn until interrupted.
    The token is read from ``token_file`` or ``$TESSERA_SERVER_TOKEN`` by
    every worker (it is never put in the environment by this function)."""
    import uvicorn

    _setup_logging()
    token = read_token(token_file)  # refuse a bad token file now rather than in every worker
    if max_body_bytes < 1:
        raise ValueError("max_body_bytes must be positive")
    if token is None and host not in ("127.0.0.1", "::1", "localhost"):
        log.warning("serving %s without a token: anyone who reaches it can write every table", host)
    os.environ[CONFIG_ENV] = json.dumps(
        {
            "properties": properties,
            "token_file": os.path.abspath(token_file) if token_file else None,
            "authenticate": token is not None,
            "max_body_bytes": max_body_bytes,
        }
    )
    log.info(
        "serving the Lance REST Namespace on http://%s:%d (%d worker%s, %s)",
        host,
        port,
        workers,
        "s" if workers > 1 else "",
        "bearer token required" if token else "no authentication",
    )
    uvicorn.run(
        "tessera.catalog.server:app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        access_log=False,  # our own line per request (tessera.server)
        server_header=False,
        proxy_headers=False,
        log_level="info",
    )
