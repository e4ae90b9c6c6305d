"""Committing through a Lance Namespace with managed versioning (Tessera as a client).

``NamespaceCommitHandler`` lets a Tessera writer (``Table``, a Spark job)
reach a table through a Lance Namespace, Tessera's own server or another,
without credentials for the table's coordinator: the writer stages its
manifest at ``_versions/{final}.manifest-{uuid}`` and asks the namespace to
``create_table_version``; the namespace decides the version, publishes the
manifest and answers.  Exactly pylance's protocol, so the two interleave.

After any error the version is read back (``describe_table_version``): the
manifest there names our transaction (a lost reply: success), another's (a
conflict: rebase), or the version does not exist (outcome unknown, the staged
manifest is kept).  The namespace's own checks (coordinator, incarnation,
version order) stand in for the handler's ``bind`` and ``verify_base``.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np

from tessera.format.protos import table_pb2, transaction_pb2
from tessera.format.table import manifest as mf
from tessera.format.table import paths
from tessera.stores.errors import ObjectNotFoundError, StoreError, StoreUnavailableError
from tessera.stores.object_store import ObjectStore
from tessera.stores.uri import parse_table_uri

from .. import store as tstore
from ..errors import (
    CommitConflictError,
    CommitOutcomeUnknownError,
    NamespaceError,
    ServedCommitRequestError,
    TableNotFoundError,
    VersionNotFoundError,
)
from ..lineage import transaction_uuid, transaction_uuid_of
from ..retry import DEFAULT_POLICY, RetryPolicy
from ..served import (
    HttpServedCommits,
    InProcessServedCommits,
    ServedCommits,
    encode_served_request,
    refuses_base_transaction,
)
from ..txn_files import repair_transaction_files
from .base import VersionEntry

__all__ = [
    "NamespaceCommitHandler",
    "call_namespace",
    "connect_namespace",
    "namespace_handler",
    "root_relative",
]


def connect_namespace(namespace: Any, properties: dict[str, str] | None = None) -> Any:
    """A Lance Namespace client: an object as given, or an ``http(s)://`` URL
    of a REST namespace (pylance's REST client) with its ``properties``
    (``{"header.Authorization": "Bearer TOKEN"}``...)."""
    if isinstance(namespace, str):
        if not namespace.startswith(("http://", "https://")):
            raise ValueError(f"a namespace URL is http(s)://host:port, got {namespace!r}")
        import lance_namespace

        return lance_namespace.connect("rest", {**(properties or {}), "uri": namespace})
    if properties:
        raise ValueError("namespace properties go with a namespace URL, not with a client object")
    return namespace


def namespace_handler(
    namespace: Any,
    table_id: list[str],
    policy: RetryPolicy | None = None,
    properties: dict[str, str] | None = None,
) -> NamespaceCommitHandler:
    """The handler of the table ``table_id`` of ``namespace`` (a client object
    or an ``http(s)://`` URL with its ``properties``): commits are served by a
    Tessera namespace (:mod:`commit.served`: by ``tessera serve`` at that URL,
    or a TesseraNamespace object) and go through ``create_table_version``
    with any other namespace."""
    ns = connect_namespace(namespace, properties)
    served: ServedCommits | None = None
    if isinstance(namespace, str):
        served = HttpServedCommits(namespace, properties)
    elif callable(getattr(namespace, "serve_commit", None)):
        served = InProcessServedCommits(namespace)
    return NamespaceCommitHandler(ns, table_id, policy, served=served)


def root_relative(store: ObjectStore) -> str:
    """The table root as Lance namespaces name objects: relative to the object
    store's root (no scheme, no leading '/'; the key prefix in a bucket)."""
    return parse_table_uri(store.uri).root


_DICT_METHODS = frozenset({"create_table_version", "describe_table_version"})


def call_namespace(ns: Any, method: str, model: type[Any], **fields: Any) -> dict[str, Any]:
    """Call ``ns.method`` with a request built from ``fields``; the answer as a dict.
    Python namespaces take the pydantic request, pylance's REST client a dict."""
    request = model(**{k: v for k, v in fields.items() if v is not None})
    # pylance 14's own clients (lance.namespace) take dicts for these two, models for the rest
    as_dict = type(ns).__module__.startswith("lance.") and method in _DICT_METHODS
    try:
        answer = getattr(ns, method)(request.model_dump(exclude_none=True) if as_dict else request)
    except Exception as exc:  # noqa: BLE001 - every namespace failure, typed
        where = repr(".".join(fields.get("id") or []))  # as users name tables (the REST id's "$" is the wire's)
        if _is_version_missing(exc):
            raise VersionNotFoundError(f"version {fields.get('version')} of {where} does not exist") from exc
        if _is_table_missing(exc):
            raise TableNotFoundError(f"no table {where} in the namespace") from exc
        raise NamespaceError(f"{method} of {where} failed in the namespace: {exc}") from exc
    if hasattr(answer, "model_dump"):
        return dict(answer.model_dump())
    return dict(answer or {})


def _is_version_missing(exc: BaseException) -> bool:
    from lance_namespace import errors as nserr

    if isinstance(exc, nserr.TableVersionNotFoundError):
        return True
    text = str(exc).lower()
    return "version" in text and "not found" in text


def _is_table_missing(exc: BaseException) -> bool:
    from lance_namespace import errors as nserr

    if isinstance(exc, nserr.TableNotFoundError):
        return True
    text = str(exc).lower()
    return "table" in text and "not found" in text


class NamespaceCommitHandler:
    """Commit through a Lance Namespace's ``create_table_version``."""

    kind = "namespace"

    def __init__(
        self,
        namespace: Any,
        table_id: list[str],
        policy: RetryPolicy | None = None,
        *,
        served: ServedCommits | None = None,
    ) -> None:
        self.ns = namespace
        self.served = served
        #: the server refused ``base_transaction`` (it is from before it): not sent to it again
        self.served_legacy = False
        self.table_id = list(table_id)
        self.table_key = "$".join(self.table_id)
        self.policy = policy or DEFAULT_POLICY
        self.incarnation = uuid.uuid4().hex
        self.bound = False

    # -- identity: the namespace checks coordinator, incarnation and order ----------------

    def check_store(self, store: ObjectStore) -> None:
        pass

    def config(self) -> dict[str, str]:
        return {}  # the manifest keeps the config of the version it was built on (as pylance's do)

    def bind(self, manifest: table_pb2.Manifest, uri: str) -> None:
        pass

    def check_lineage(self, manifest: table_pb2.Manifest, uri: str) -> None:
        pass

    def verify_base(self, store: ObjectStore, base: mf.ManifestFile) -> None:
        pass

    # -- writing -----------------------------------------------------------------------

    def commit(
        self,
        store: ObjectStore,
        version: int,
        data: bytes,
        scheme: mf.NamingScheme,
        txn_uuid: str,
        base: mf.ManifestFile | None,
        deadline: float | None = None,
    ) -> None:
        staged = paths.staged_manifest_path(paths.manifest_path(version, scheme))
        store.put(staged, data)
        self.commit_staged(store, version, staged, data, scheme, txn_uuid, deadline)

    def commit_served(
        self,
        store: ObjectStore,
        txn: transaction_pb2.Transaction,
        base: mf.ManifestFile,
        affected_rows: dict[int, np.ndarray] | None,
        deadline: float,
    ) -> mf.ManifestFile | None:
        """Send ``txn`` (built on ``base``) for the namespace to commit; the
        committed manifest, or None when the namespace serves no commits.
        Sent again while the server cannot be reached or does not answer (it
        answers the version a transaction already has); past the deadline
        the outcome is unknown."""
        if self.served is None:
            return None
        served = self.served
        base_txn = transaction_uuid(base)

        def send() -> dict[str, Any] | None:
            left = deadline - time.monotonic()
            sent_base = None if self.served_legacy else base_txn
            body = encode_served_request(txn, base.version, affected_rows, left, sent_base)
            try:
                return served.send(self.table_id, body, left)
            except ServedCommitRequestError as exc:
                if sent_base is None or not refuses_base_transaction(exc):
                    raise
                self.served_legacy = True  # a server from before base_transaction: not sent again
                body.pop("base_transaction")
                return served.send(self.table_id, body, left)

        try:
            answer = self.policy.read_back(send, deadline)
        except StoreUnavailableError as exc:
            raise CommitOutcomeUnknownError(
                f"a served commit of {self.table_key} (transaction {txn.uuid}) got no answer: {exc}; "
                "whether it was committed, the table's versions tell"
            ) from exc
        if answer is None:
            self.served = None  # this namespace serves no commits: managed versioning from now on
            return None
        path = self._relative(store, str(answer.get("manifest_path") or ""), answer["version"])
        try:
            data = store.read(path)
        except ObjectNotFoundError as exc:
            raise VersionNotFoundError(f"the manifest {path} of {self.table_key} is gone") from exc
        mfile = self._parse(store, path, data)
        if transaction_uuid(mfile) != txn.uuid:
            raise CommitOutcomeUnknownError(
                f"the namespace answered version {answer['version']} of {self.table_key} for transaction "
                f"{txn.uuid}, but that version is another transaction's"
            )
        return mfile

    def commit_staged(
        self,
        store: ObjectStore,
        version: int,
        staged: str,
        data: bytes,
        scheme: mf.NamingScheme,
        txn_uuid: str,
        deadline: float | None = None,
    ) -> None:
        """Ask the namespace to commit the manifest staged at ``staged``; after
        an error, the version read back decides."""
        from lance_namespace import CreateTableVersionRequest

        root = root_relative(store)
        try:
            call_namespace(
                self.ns,
                "create_table_version",
                CreateTableVersionRequest,
                id=self.table_id,
                version=version,
                manifest_path=f"{root}/{staged}" if root else staged,
                manifest_size=len(data),
                naming_scheme=scheme.value,
            )
            return
        except Exception as exc:  # noqa: BLE001 - any error: the version read back decides
            owner = self._owner(store, version, deadline, exc)
        if owner == txn_uuid:
            return  # committed; the reply was lost or the namespace raised after recording
        if owner is None:
            raise CommitOutcomeUnknownError(
                f"the namespace did not commit version {version} of {self.table_key} and cannot say why; "
                f"the staged manifest {staged} is kept"
            )
        try:
            store.delete(staged)
        except (StoreError, OSError):
            pass
        raise CommitConflictError(version)

    def _owner(self, store: ObjectStore, version: int, deadline: float | None, cause: BaseException) -> str | None:
        """Whose manifest ``version`` is (its transaction uuid), or None when it does not exist."""

        def read() -> str | None:
            try:
                path = self._path_of(store, version)
            except VersionNotFoundError:
                return None
            try:
                return transaction_uuid_of(store.read(path)) or "?"
            except ObjectNotFoundError:
                return None

        try:
            return self.policy.read_back(read, deadline)
        except Exception as exc:  # noqa: BLE001 - the namespace is unreachable
            raise CommitOutcomeUnknownError(
                f"committing version {version} of {self.table_key} through the namespace failed ({cause}); "
                f"reading it back failed too ({exc})"
            ) from exc

    # -- reading -----------------------------------------------------------------------

    def _path_of(self, store: ObjectStore, version: int | None) -> str:
        """The table-relative manifest path of ``version`` (None: the latest)."""
        from lance_namespace import DescribeTableVersionRequest

        answer = call_namespace(
            self.ns, "describe_table_version", DescribeTableVersionRequest, id=self.table_id, version=version
        )
        entry = answer.get("version") or {}
        return self._relative(store, str(entry.get("manifest_path") or ""), version)

    @staticmethod
    def _relative(store: ObjectStore, path: str, version: int | None) -> str:
        root = root_relative(store)
        prefix = f"{root}/" if root else ""
        clean = path.lstrip("/") if prefix else path
        if not clean.startswith(prefix):
            raise VersionNotFoundError(f"the namespace named {path!r} for version {version}, outside {store.uri}")
        return clean[len(prefix) :]

    def latest_entry(self, store: ObjectStore) -> VersionEntry | None:
        try:
            version = self.latest_version(store)
        except TableNotFoundError:
            return None
        path = self._path_of(store, version)
        return VersionEntry(version, path, store.size(path))

    def latest_version(self, store: ObjectStore) -> int:
        from lance_namespace import ListTableVersionsRequest

        answer = call_namespace(
            self.ns, "list_table_versions", ListTableVersionsRequest, id=self.table_id, limit=1, descending=True
        )
        versions = answer.get("versions") or []
        if not versions:
            raise TableNotFoundError(f"table {self.table_key} has no versions in the namespace")
        return int(versions[0]["version"])

    def _listing(self) -> dict[int, str]:
        """Every version the namespace lists -> its manifest path as listed ("" when not given)."""
        from lance_namespace import ListTableVersionsRequest

        out: dict[int, str] = {}
        token: str | None = None
        while True:
            answer = call_namespace(
                self.ns, "list_table_versions", ListTableVersionsRequest, id=self.table_id, page_token=token
            )
            for v in answer.get("versions") or []:
                out[int(v["version"])] = str(v.get("manifest_path") or "")
            token = answer.get("page_token")
            if not token:
                break
        return out

    def versions_after(self, store: ObjectStore, version: int) -> list[int]:
        return sorted(v for v in self._listing() if v > version)

    def load_after(self, store: ObjectStore, version: int) -> list[mf.ManifestFile]:
        """One listing (its pages) names the manifests; they are read together."""
        listed = self._listing()
        newer = sorted(v for v in listed if v > version)
        names = [self._relative(store, listed[v], v) if listed[v] else self._path_of(store, v) for v in newer]
        try:
            datas = tstore.read_all(store, names)
        except ObjectNotFoundError as exc:
            raise VersionNotFoundError(f"a manifest of {self.table_key} after version {version} is gone") from exc
        return [self._parse(store, n, d) for n, d in zip(names, datas, strict=True)]

    def load(self, store: ObjectStore, version: int | None = None) -> mf.ManifestFile:
        path = self._path_of(store, version)
        try:
            data = store.read(path)
        except ObjectNotFoundError as exc:
            raise VersionNotFoundError(f"the manifest {path} of {self.table_key} is gone") from exc
        return self._parse(store, path, data)

    @staticmethod
    def _parse(store: ObjectStore, path: str, data: bytes) -> mf.ManifestFile:
        mfile = tstore.parsed_manifest(store, path, data)
        parsed = mf.parse_manifest_name(path.rsplit("/", 1)[-1])
        if parsed is not None and mfile.naming is None:
            mfile.naming = parsed[1]
        return mfile

    def table_exists(self, store: ObjectStore) -> bool:
        try:
            self.latest_version(store)
            return True
        except TableNotFoundError:
            return False

    def repair(self, store: ObjectStore) -> list[str]:
        """The namespace finishes its own half-done commits; transaction files
        a power loss emptied are rewritten from their manifests."""

        def manifests() -> Iterator[mf.ManifestFile]:
            for v in self.versions_after(store, 0):
                with contextlib.suppress(VersionNotFoundError):  # cleaned up behind the namespace
                    yield self.load(store, v)

        repair_transaction_files(store, manifests())
        return []

    def pending_paths(self) -> set[str]:
        return set()

    def close(self) -> None:
        pass

    def commit_lock(self, store: ObjectStore, deadline: float | None) -> contextlib.AbstractContextManager[bool]:
        return contextlib.nullcontext(False)  # the namespace orders its commits
