"""Served commits: a Tessera client sends its transaction, the server commits it next to the store.

Managed versioning (``create_table_version``) makes the client build the
manifest, stage it and ask for one version number: every version another
writer wins meanwhile costs the client a round trip to the server and a
rebase on its side, so a client far from the store keeps losing.  A served
commit moves the rebase loop to the server: the client sends the
transaction it built on version ``read_version`` (the fragments it wrote
itself), and the server (:func:`commit.managed.accept_transaction`) checks it
against every version committed since, rebuilds it on the latest and wins
the version with the table's own coordinator, in one request.

This module is the wire format both halves share, and the client's
transports: :class:`HttpServedCommits` (``POST
/v1/table/{id}/tessera/commit`` of ``tessera serve``, a Tessera extension of
the Lance REST Namespace routes) and :class:`InProcessServedCommits` (a
:class:`~tessera.catalog.namespace.TesseraNamespace` in this process).

Request (JSON): ``read_version``, ``transaction`` (the Transaction protobuf,
base64), ``affected_rows`` (fragment id -> the row offsets the transaction
deletes in it, little-endian uint64, base64; only for deletes and updates),
``seconds`` (the client's remaining time), ``base_transaction`` (the uuid of
the transaction that made the version the client read: the server refuses
the commit with IncarnationMismatchError when its version ``read_version``
is another transaction's, a table dropped and recreated since the client
read it; a server from before this field refuses it as unknown, and the
client sends again without it).  Reply: ``version``,
``manifest_path`` (relative to the store's root, as the namespace names
manifests) and ``manifest_size``; an error is ``{"error", "code",
"tessera_error"}`` with the name of the Tessera error class, raised again as
that class on the client (:data:`ERRORS`).

Exactly once: a request sent again (a lost reply, a timeout) carries the
same transaction uuid and read version; the server's rebase finds that
uuid in a version since ``read_version`` and answers that version instead
of committing it twice (:class:`commit.operation.AlreadyCommitted`).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from tessera.format.protos import transaction_pb2
from tessera.stores.errors import IncarnationMismatchError, StoreUnavailableError

from .errors import (
    BaseVersionGoneError,
    CommitConflictError,
    CommitError,
    CommitOutcomeUnknownError,
    CoordinatorMismatchError,
    IncompatibleTransactionError,
    NamespaceError,
    ServedCommitRequestError,
    StoreIdentityMismatchError,
    TableNotFoundError,
    TooMuchContentionError,
    VersionNotFoundError,
)

if TYPE_CHECKING:
    import urllib.error

__all__ = [
    "ERRORS",
    "SERVED_ROUTE",
    "HttpServedCommits",
    "InProcessServedCommits",
    "ServedCommits",
    "ServedRequest",
    "decode_served_request",
    "encode_served_request",
    "refuses_base_transaction",
    "served_error_name",
]

#: the route of ``tessera serve`` (a Tessera extension; the spec's routes are catalog/namespace/routes.py's)
SERVED_ROUTE = "/v1/table/{id}/tessera/commit"

#: the largest served-commit body a server reads (a transaction of many thousand fragments)
SERVED_MAX_BODY_BYTES = 64 << 20


#: the Tessera errors a served commit may answer with, by class name; any other is a NamespaceError
ERRORS: dict[str, type[Exception]] = {
    cls.__name__: cls
    for cls in (
        BaseVersionGoneError,
        CommitConflictError,
        CommitOutcomeUnknownError,
        CoordinatorMismatchError,
        IncompatibleTransactionError,
        ServedCommitRequestError,
        StoreIdentityMismatchError,
        TableNotFoundError,
        TooMuchContentionError,
        VersionNotFoundError,
        IncarnationMismatchError,
    )
}


def served_error_name(exc: BaseException) -> str | None:
    """The name under which ``exc`` travels (its class or the nearest known base), or None."""
    for cls in type(exc).__mro__:
        if ERRORS.get(cls.__name__) is cls:
            return cls.__name__
    return None


def rebuilt_error(name: str | None, message: str, version: int | None) -> Exception:
    """The client's exception for a server's error reply."""
    cls = ERRORS.get(name or "")
    if cls is None:
        return NamespaceError(f"the server refused the commit: {message}")
    if issubclass(cls, CommitConflictError):
        exc = cls.__new__(cls)
        CommitError.__init__(exc, message)
        exc.version = int(version or 0)
        return exc
    return cls(message)


# -- the wire format -----------------------------------------------------------------------


@dataclass(frozen=True)
class ServedRequest:
    """A served commit, decoded: the transaction, the version it was built on,
    the rows it deletes per fragment, and the client's remaining seconds."""

    transaction: transaction_pb2.Transaction
    read_version: int
    affected_rows: dict[int, np.ndarray] | None
    seconds: float | None
    #: the transaction uuid of the version the client read (None: not sent)
    base_transaction: str | None = None


def encode_served_request(
    txn: transaction_pb2.Transaction,
    read_version: int,
    affected_rows: dict[int, np.ndarray] | None,
    seconds: float | None,
    base_transaction: str | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "read_version": int(read_version),
        "transaction": base64.b64encode(txn.SerializeToString()).decode("ascii"),
    }
    if affected_rows:
        body["affected_rows"] = {
            str(int(k)): base64.b64encode(np.asarray(v, dtype="<u8").tobytes()).decode("ascii")
            for k, v in affected_rows.items()
        }
    if seconds is not None:
        body["seconds"] = max(0.0, float(seconds))
    if base_transaction:
        body["base_transaction"] = base_transaction
    return body


def refuses_base_transaction(exc: BaseException) -> bool:
    """Whether ``exc`` is a server from before ``base_transaction`` refusing that field."""
    return isinstance(exc, ServedCommitRequestError) and "unknown fields base_transaction" in str(exc)


def _bad(message: str) -> ServedCommitRequestError:
    return ServedCommitRequestError(f"bad served commit request: {message}")


def decode_served_request(body: Any) -> ServedRequest:
    """A request body as the server reads it; ServedCommitRequestError names what is wrong."""
    if not isinstance(body, dict):
        raise _bad("the body must be a JSON object")
    unknown = sorted(set(body) - {"id", "read_version", "transaction", "affected_rows", "seconds", "base_transaction"})
    if unknown:
        raise _bad(f"unknown fields {', '.join(unknown)}")
    version = body.get("read_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _bad(f"read_version must be a version number (1 or more), got {version!r}")
    try:
        raw = base64.b64decode(str(body.get("transaction") or ""), validate=True)
        txn = transaction_pb2.Transaction.FromString(raw)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise _bad(f"transaction is not a base64 Transaction protobuf ({exc})") from None
    if not raw:
        raise _bad("transaction is missing")
    affected: dict[int, np.ndarray] | None = None
    given = body.get("affected_rows")
    if given is not None:
        if not isinstance(given, dict):
            raise _bad("affected_rows must map fragment ids to base64 row offsets")
        affected = {}
        for key, value in given.items():
            try:
                frag = int(key)
                rows = base64.b64decode(str(value), validate=True)
            except (binascii.Error, ValueError) as exc:
                raise _bad(f"affected_rows[{key!r}]: {exc}") from None
            if frag < 0 or len(rows) % 8:
                raise _bad(f"affected_rows[{key!r}] is not a fragment id and uint64 row offsets")
            affected[frag] = np.frombuffer(rows, dtype="<u8").astype(np.uint64)
    seconds = body.get("seconds")
    if seconds is not None and (not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0):
        raise _bad(f"seconds must be a non-negative number, got {seconds!r}")
    base = body.get("base_transaction")
    if base is not None and (not isinstance(base, str) or not 0 < len(base) <= 256 or not base.isprintable()):
        raise _bad(f"base_transaction must be a transaction uuid, got {base!r}"[:300])
    return ServedRequest(txn, version, affected, None if seconds is None else float(seconds), base)


# -- the client's transports -----------------------------------------------------------------


class ServedCommits(Protocol):
    """Where a client sends a served commit."""

    def send(self, table_id: list[str], body: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """The server's reply (version, manifest_path, manifest_size); None
        when the namespace serves no commits (then managed versioning it is).
        Raises the Tessera error the server answered with,
        StoreUnavailableError when the server could not be reached or did not
        answer (the commit may have happened: send again)."""


class InProcessServedCommits:
    """A TesseraNamespace in this process: its ``serve_commit``, called directly."""

    def __init__(self, namespace: Any) -> None:
        self.namespace = namespace

    def send(self, table_id: list[str], body: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        return dict(self.namespace.serve_commit(list(table_id), body))


class HttpServedCommits:
    """``POST {url}/v1/table/{id}/tessera/commit`` with the namespace client's headers."""

    def __init__(self, url: str, properties: dict[str, str] | None = None, delimiter: str = "$") -> None:
        self.url = url.rstrip("/")
        self.delimiter = delimiter
        self.headers = {"Content-Type": "application/json"}
        for key, value in (properties or {}).items():
            if key.startswith("header."):
                self.headers[key[len("header.") :]] = value
        self.supported: bool | None = None  # unknown until the first answer

    def send(self, table_id: list[str], body: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        if self.supported is False:
            return None
        import urllib.error  # on first use: a process that never sends pays nothing for http.client
        import urllib.request
        from urllib.parse import quote

        path = SERVED_ROUTE.format(id=quote(self.delimiter.join(table_id), safe=""))
        request = urllib.request.Request(
            self.url + path, data=json.dumps({**body, "id": list(table_id)}).encode(), headers=self.headers
        )
        try:
            with urllib.request.urlopen(request, timeout=max(timeout, 0.1)) as reply:
                answer = json.loads(reply.read() or b"{}")
        except urllib.error.HTTPError as exc:
            return self._refused(exc)
        except (TimeoutError, urllib.error.URLError, OSError, ValueError) as exc:
            raise StoreUnavailableError(f"the commit request to {self.url} got no answer: {exc}") from exc
        self.supported = True
        if not isinstance(answer, dict) or not isinstance(answer.get("version"), int):
            raise StoreUnavailableError(f"{self.url} answered a commit with {answer!r}")
        return answer

    def _refused(self, exc: urllib.error.HTTPError) -> dict[str, Any] | None:
        try:
            err = json.loads(exc.read() or b"{}")
        except (ValueError, OSError):
            err = {}
        if not isinstance(err, dict):
            err = {}
        name = err.get("tessera_error")
        if name is None and exc.code in (404, 405) and err.get("code", 0) == 0 and self.supported is not True:
            self.supported = False  # another namespace server, or an older Tessera: managed versioning
            return None
        message = str(err.get("error") or exc.reason)
        if name is None and (exc.code >= 500 or exc.code == 429):
            raise StoreUnavailableError(f"{self.url} failed the commit ({exc.code}): {message}") from None
        raise rebuilt_error(name, message, err.get("version")) from None
