"""Tessera as a Lance REST Namespace server: pylance commits through a Tessera process over HTTP.

``tessera --warehouse DIR serve --port 2333`` serves the catalog; pylance (its
Rust ``RestNamespace``) connects with
``lance_namespace.connect("rest", {"uri": "http://127.0.0.1:2333"})`` and, with a
token, ``"header.Authorization": "Bearer <token>"``.  Every route of the Lance
REST Namespace spec that this server knows is one :class:`TesseraNamespace`
call: the request is parsed with the spec's own pydantic models
(``lance_namespace``), the call runs on the app's thread pool (it blocks on
the catalog database and the object store), and the response model is
serialised back (the routes, the status of each error code and the checks
of ids and query parameters are :mod:`.routes`'s).  A method TesseraNamespace does not implement answers the
spec's "unsupported" error (406, code 0); an unknown route answers 404, code 0.

Errors are ``{"error": message, "code": n}`` with ``n`` the Lance Namespace
error code (pylance dispatches on it) and the HTTP status of :data:`.routes.STATUS`.
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

import asyncio
import functools
import hmac
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from lance_namespace import errors as nserr
from lance_namespace.errors import ErrorCode
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tessera.commit import SERVED_MAX_BODY_BYTES, SERVED_ROUTE, served_error_name
from tessera.commit.errors import IncompatibleTransactionError, TooMuchContentionError
from tessera.format.errors import TesseraError

from .. import errors as E
from .plugin import TesseraNamespace
from .routes import DEFAULT_DELIMITER, OPS, QUERY, STATUS, Op, Refused, invalid, parse_id
from .translate import namespace_error

__all__ = ["ServerConfig", "app_from_env", "create_app", "read_token", "serve"]

log = logging.getLogger("tessera.server")

CONFIG_ENV = "TESSERA_SERVER_CONFIG"  # how `tessera serve` hands its settings to the worker processes
TOKEN_ENV = "TESSERA_SERVER_TOKEN"
DEFAULT_PORT = 2333  # the Lance REST Namespace spec's
DEFAULT_MAX_BODY_BYTES = 1 << 20


def _error(status: int, code: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"error": message, "code": int(code)}, status_code=status, headers=headers)


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


_SERVED_SUFFIX = SERVED_ROUTE.rsplit("}", 1)[1]  # "/tessera/commit"


def _body_limit(path: str, default: int) -> int:
    """A served commit carries a whole transaction (thousands of fragments): its own, larger limit."""
    return max(default, SERVED_MAX_BODY_BYTES) if path.endswith(_SERVED_SUFFIX) else default


class _Guard:
    """Outermost middleware: the token, '/' smuggled into an id (``%2F``), the
    declared body size; then one log line per request."""

    def __init__(self, app: ASGIApp, token: str | None, max_body_bytes: int) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.max_body_bytes = max_body_bytes

    def _refusal(self, scope: Scope) -> Refused | None:
        headers = dict(scope.get("headers") or [])  # the last of a repeated header wins; no header is repeated here
        if self.token is not None:
            scheme, _, presented = headers.get(b"authorization", b"").partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(presented.strip(), self.token):
                return Refused(401, ErrorCode.UNAUTHENTICATED, "missing or invalid bearer token")
        raw = scope.get("raw_path") or scope.get("path", "").encode()
        if b"%2f" in raw.lower() or b"%5c" in raw.lower():
            return invalid("ids must not contain '/' or '\\'")
        length = headers.get(b"content-length")
        if length is not None:
            try:
                size = int(length)
            except ValueError:
                return invalid("bad Content-Length")
            limit = _body_limit(scope.get("path", ""), self.max_body_bytes)
            if size > limit:
                return Refused(413, ErrorCode.INVALID_INPUT, f"the request body exceeds {limit} bytes")
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


#: bytes of an oversized streamed body read and discarded before the 413 answer
_DRAIN_BYTES = 8 << 20


async def _read_json(request: Request, limit: int) -> dict[str, Any]:
    """The JSON object in the body, read up to ``limit`` bytes: ``{}`` for an
    empty body and for JSON ``null``, which LanceDB's REST client sends where
    a request has no field but the id (``version/list``); the model then says
    whether a required field is missing."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit + _DRAIN_BYTES:
            break
        if size <= limit:
            chunks.append(chunk)
        # beyond the limit: read on, discarding, up to a bound, so that a client
        # writing its whole body before it reads gets the answer, not a reset
    if size > limit:
        raise Refused(413, ErrorCode.INVALID_INPUT, f"the request body exceeds {limit} bytes")
    body = b"".join(chunks)
    if not body.strip():
        return {}
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise invalid(f"the body is not JSON: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise invalid(f"the body must be a JSON object, got {type(data).__name__}")
    return data


class _App:
    """The namespace behind the routes, and what they share."""

    #: threads for the namespace's blocking calls (the catalog database, the object store)
    THREADS = 40

    def __init__(self, ns: TesseraNamespace, config: ServerConfig) -> None:
        self.ns = ns
        self.config = config
        self.pool = ThreadPoolExecutor(self.THREADS, thread_name_prefix="tessera-serve")

    async def blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on one of the pool's threads (the event loop's own
        executor hand-over: about 60 us less per request than anyio's, with
        its context copy and capacity limiter, on the development machine)."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, functools.partial(fn, *args))

    def endpoint(self, op: Op) -> Callable[[Request], Awaitable[Response]]:
        call = getattr(self.ns, op.call)

        async def endpoint(request: Request) -> Response:
            try:
                req = await self._request(op, request)
                resp = await self.blocking(call, req)
                return self._reply(op, resp)
            except nserr.LanceNamespaceError as exc:
                return self._failed(request, STATUS.get(exc.code, 500), exc.code, str(exc))
            except Refused as exc:
                return self._failed(request, exc.status, exc.code, str(exc))
            except Exception:  # noqa: BLE001 - anything else is the server's fault, and says so without details
                log.exception("%s %s failed", request.method, op.path)
                return self._failed(
                    request, 500, ErrorCode.INTERNAL, f"internal error in {op.call} (see the server log)"
                )

        endpoint.__name__ = op.call
        return endpoint

    async def _request(self, op: Op, request: Request) -> BaseModel:
        params = request.query_params
        ident = parse_id(request.path_params["id"], params.get("delimiter", DEFAULT_DELIMITER), op.what)
        data = await _read_json(request, self.config.max_body_bytes) if op.verb == "POST" else {}
        for name in op.query:
            if name in params:
                try:
                    data[name] = QUERY[name](params[name])
                except ValueError as exc:
                    raise invalid(f"bad query parameter {name}={params[name]!r}: {exc}") from None
        given = data.get("id")
        if given is not None and given != ident:
            raise invalid(f"the id in the body ({given!r}) is not the id in the path ({ident!r})")
        data["id"] = ident
        try:
            req = op.model.model_validate(data)
        except ValidationError as exc:
            raise invalid(f"bad {op.model.__name__}: {exc}"[:2000]) from None
        location = getattr(req, "location", None) if op.call in ("declare_table", "register_table") else None
        if location and not self.config.allow_client_locations and not self._in_warehouse(location):
            raise invalid(
                f"{op.call}: {location!r} is outside the server's warehouse (the server chooses table locations)"
            )
        return req

    async def serve_commit(self, request: Request) -> Response:
        """A served commit (:mod:`tessera.commit.served`): Tessera's errors
        answer with their class name beside the namespace's code."""
        try:
            ident = parse_id(
                request.path_params["id"], request.query_params.get("delimiter", DEFAULT_DELIMITER), "table"
            )
            data = await _read_json(request, _body_limit(request.url.path, self.config.max_body_bytes))
            given = data.pop("id", None)
            if given is not None and given != ident:
                raise invalid(f"the id in the body ({given!r}) is not the id in the path ({ident!r})")
            answer = await self.blocking(self.ns.serve_commit, ident, data)
            return JSONResponse(answer)
        except Refused as exc:
            return self._failed(request, exc.status, exc.code, str(exc))
        except nserr.LanceNamespaceError as exc:
            return self._failed(request, STATUS.get(exc.code, 500), exc.code, str(exc))
        except TesseraError as exc:
            return self._tessera_failed(request, exc)
        except Exception:  # noqa: BLE001 - anything else is the server's fault, and says so without details
            log.exception("POST %s failed", SERVED_ROUTE)
            message = "internal error in a served commit (see the server log)"
            return self._failed(request, 500, ErrorCode.INTERNAL, message)

    def _tessera_failed(self, request: Request, exc: TesseraError) -> Response:
        name = "TableNotFoundError" if isinstance(exc, E.NoSuchTableError) else served_error_name(exc)
        if isinstance(exc, IncompatibleTransactionError | TooMuchContentionError):
            code = ErrorCode.CONCURRENT_MODIFICATION  # the client's to re-run or give up, not the server's failure
        else:
            translated = namespace_error(exc)
            code = translated.code if translated is not None else ErrorCode.INTERNAL
        request.state.error_code = int(code)
        body: dict[str, Any] = {"error": str(exc), "code": int(code), "tessera_error": name}
        version = getattr(exc, "version", None)
        if isinstance(version, int):
            body["version"] = version
        return JSONResponse(body, status_code=STATUS.get(code, 500))

    def _in_warehouse(self, location: str) -> bool:
        """Whether ``location`` lies inside the catalog's warehouse (no '..' tricks)."""
        root = self.ns.catalog.warehouse.rstrip("/")
        if "://" not in root and "://" not in location:
            root, location = os.path.realpath(root), os.path.realpath(location)
        parts = location.replace("\\", "/").split("/")
        return ".." not in parts and location.startswith(root + "/")

    def _reply(self, op: Op, resp: Any) -> Response:
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


def _unrouted(request: Request, allow: str | None) -> Response:
    """No route for the request's path (404), or not for its method (405)."""
    request.state.error_code = int(ErrorCode.UNSUPPORTED)
    what = "no such route" if allow is None else f"{request.method} is not allowed here"
    headers = None if allow is None else {"Allow": allow}
    return _error(
        404 if allow is None else 405, ErrorCode.UNSUPPORTED, f"{what}: {request.method} {request.url.path}", headers
    )


@dataclass(frozen=True)
class _Route:
    """A route's method and template (the log line names the template)."""

    verb: str
    path: str


def _route_key(template: str) -> tuple[str, str]:
    """``/v1/{kind}/{id}/{action...}`` -> (kind, action)."""
    parts = template.split("/")
    return parts[2], "/".join(parts[4:])


class _Routes:
    """The routes, as an ASGI application: every path is
    ``/v1/{kind}/{id}/{action...}``, so one dictionary lookup on (kind,
    action) finds its endpoint (a framework's router tries its patterns one
    by one, and its middleware stack adds a layer per request: about 100 us
    per request together on the development machine).  The id is one path
    segment (the guard refuses an encoded '/'), ``/x/`` is not ``/x`` (404),
    a GET route answers HEAD too; an unknown path answers 404 and a known one
    with another method 405 (``Allow`` names the route's), both code 0.
    ``close`` runs when the server shuts down (ASGI lifespan)."""

    def __init__(
        self, endpoints: list[tuple[_Route, Callable[[Request], Awaitable[Response]]]], close: Callable[[], None]
    ) -> None:
        self.routes = {_route_key(route.path): (route, endpoint) for route, endpoint in endpoints}
        self.close = close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # no websockets here
        parts = scope["path"].split("/")
        hit = None
        if len(parts) >= 5 and parts[0] == "" and parts[1] == "v1" and parts[3]:
            hit = self.routes.get((parts[2], "/".join(parts[4:])))
        request = Request(scope, receive)
        if hit is None:
            response = _unrouted(request, None)
        else:
            route, endpoint = hit
            method = scope["method"]
            if method != route.verb and not (method == "HEAD" and route.verb == "GET"):
                response = _unrouted(request, route.verb if route.verb != "GET" else "GET, HEAD")
            else:
                scope["path_params"] = {"id": parts[3]}
                scope["route"] = route
                try:
                    response = await endpoint(request)
                except Exception:  # noqa: BLE001 - the endpoints answer their own errors: this is a bug
                    log.exception("%s %s failed", method, route.path)
                    request.state.error_code = int(ErrorCode.INTERNAL)
                    response = _error(500, ErrorCode.INTERNAL, "internal error (see the server log)")
        await response(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                try:
                    self.close()
                except Exception as exc:  # noqa: BLE001 - reported to the server, which logs it
                    await send({"type": "lifespan.shutdown.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.shutdown.complete"})
                return


def create_app(config: ServerConfig, namespace: TesseraNamespace | None = None) -> ASGIApp:
    """The ASGI application serving ``namespace`` (by default one built from
    ``config.properties``, closed when the application shuts down)."""
    if config.max_body_bytes < 1:
        raise ValueError("max_body_bytes must be positive")
    ns = namespace if namespace is not None else TesseraNamespace(**config.properties)
    app_state = _App(ns, config)
    endpoints: list[tuple[_Route, Callable[[Request], Awaitable[Response]]]] = [
        (_Route(op.verb, op.path), app_state.endpoint(op)) for op in OPS
    ]
    endpoints.append((_Route("POST", SERVED_ROUTE), app_state.serve_commit))

    def close() -> None:
        app_state.pool.shutdown(wait=True)  # the calls under way finish before the namespace closes
        if namespace is None:
            ns.close()

    return _Guard(_Routes(endpoints, close), token=config.token, max_body_bytes=config.max_body_bytes)


# -- running -----------------------------------------------------------------------------


def _setup_logging() -> None:
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s[%(process)d] %(message)s"))
        log.addHandler(handler)
        log.propagate = False
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)


def app_from_env() -> ASGIApp:
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
        "tessera.catalog.namespace.server:app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        access_log=False,  # our own line per request (tessera.server)
        server_header=False,
        proxy_headers=False,
        log_level="info",
    )
