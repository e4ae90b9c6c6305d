"""Managed versioning's server half: a manifest a writer staged becomes a version.

Through a Lance Namespace with managed versioning (``create_table_version``
of Tessera's namespace, catalog/namespace/versions.py) a writer (pylance, or
:class:`~commit.handlers.namespace_client.NamespaceCommitHandler`) stages its
manifest at ``_versions/{final}-{uuid}`` and asks for the version.
:func:`accept_staged` checks the staged path, the manifest, the version order
and the incarnation, then the table's own handler commits it
(:meth:`CommitHandler.commit_staged`: the native put, or reserve, publish and
flip) and the staged file goes.  :func:`describe_version` is a version as the
namespace describes it.

:func:`accept_transaction` is the served commit's server half
(:mod:`commit.served`): a transaction a client built on a version it read is
checked against every version since, rebuilt on the latest and committed by
the table's own handler, the rebase loop running next to the store.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Callable

import numpy as np

from tessera.format.protos import transaction_pb2
from tessera.format.table import manifest as mf
from tessera.format.table import paths
from tessera.stores.errors import IncarnationMismatchError, ObjectNotFoundError, StoreError
from tessera.stores.object_store import ObjectStore

from . import faults
from . import store as tstore
from .errors import (
    BaseVersionGoneError,
    ServedCommitRequestError,
    StagedManifestError,
    VersionNotFoundError,
    VersionTakenError,
)
from .handlers.base import CommitHandler, VersionEntry
from .lineage import foreign_base, fragment_sample, incarnation_of, transaction_uuid
from .operation import AlreadyCommitted, commit_transaction, rebase
from .retry import DEFAULT_POLICY

__all__ = ["accept_staged", "accept_transaction", "describe_version", "is_staged_manifest", "latest_to_build_on"]

_STAGED = re.compile(r"^_versions/(?P<final>[0-9]{1,20}\.manifest)-[0-9A-Za-z-]{1,64}$")


def is_staged_manifest(path: str) -> bool:
    """Whether the table-relative ``path`` names a staged manifest."""
    return _STAGED.match(path) is not None


def describe_version(handler: CommitHandler, store: ObjectStore, version: int) -> VersionEntry:
    """``version``'s entry with its timestamp (reads the manifest)."""
    mfile = handler.load(store, version)
    scheme = mfile.naming or tstore.list_versions(store)[1] or mf.NamingScheme.V2
    rel = paths.manifest_path(version, scheme)
    return _entry(version, rel, store.size(rel), mfile)


def _entry(version: int, path: str, size: int, mfile: mf.ManifestFile) -> VersionEntry:
    ts = mfile.manifest.timestamp
    return VersionEntry(version, path, size, ts.seconds * 1000 + ts.nanos // 1_000_000)


def accept_staged(
    handler: CommitHandler,
    store: ObjectStore,
    version: int,
    staged: str,
    naming_scheme: str | None = None,
    *,
    uri: str = "",
    label: str = "",
    shown: Callable[[str], str] = str,
    on_ask: Callable[[], None] | None = None,
) -> VersionEntry:
    """Win ``version`` of the table at ``uri`` for the manifest staged at
    ``staged`` (table-relative) with the naming scheme ``naming_scheme``;
    returns the version's entry.  ``label`` names the table in messages,
    ``shown`` a table-relative path as the client names it; ``on_ask`` is
    called once the checks passed, just before the coordinator is asked
    (from then on the outcome may be unknown).

    Raises:
        StagedManifestError: the request or its staged manifest cannot be a version.
        VersionTakenError: the version is another writer's, or not the next one.
        IncarnationMismatchError: the manifest was built on another incarnation of the table.
        and whatever :meth:`CommitHandler.commit_staged` raises."""
    if version < 1:
        raise StagedManifestError(f"version must be at least 1, got {version}")
    try:
        scheme = mf.NamingScheme((naming_scheme or "V2").upper())
    except ValueError:
        raise StagedManifestError(f"naming_scheme must be V1 or V2, got {naming_scheme!r}") from None
    final = paths.manifest_path(version, scheme)
    m = _STAGED.match(staged)
    if m is None or paths.version_path(m.group("final")) != final:
        raise StagedManifestError(
            f"{shown(staged)!r} is not a staged manifest of version {version} (expected {shown(final)}-<uuid>)"
        )
    try:
        data = store.read(staged)
    except ObjectNotFoundError:
        # a re-send after a lost reply finds its staged file removed: whose the
        # version is, describe_table_version tells (pylance reads it back)
        if _latest(handler, store) >= version:
            raise VersionTakenError(
                version,
                f"version {version} of {label} exists and {shown(staged)} is gone "
                "(committed already? describe_table_version tells whose it is)",
            ) from None
        raise StagedManifestError(f"the staged manifest {shown(staged)} does not exist") from None
    mfile = mf.read_manifest(data, f"{store.uri}/{staged}")
    if mfile.manifest.version != version:
        raise StagedManifestError(f"the staged manifest is version {mfile.manifest.version}, not {version}")
    mf.check_flags(mfile.manifest, writing=False)  # Tessera must be able to read what it publishes
    txn = transaction_uuid(mfile)
    if txn is None:
        raise StagedManifestError("the staged manifest names no transaction")
    claim = getattr(handler, "claim_staged", None)
    if (
        claim is not None
        and version > 1
        and _restored_version(mfile) is None
        and claim(store, staged, data, mfile, scheme, txn, uri, on_ask)
    ):
        return _entry(version, final, len(data), mfile)
    latest_entry = handler.latest_entry(store)
    latest = 0 if latest_entry is None else latest_entry.version
    if latest_entry is not None and handler.kind == "native":
        _latest_seen.remember(store.uri, latest_entry)
    if version <= latest:
        # taken: by this very manifest (a re-send whose staged file is still there), or by another writer
        try:
            there = transaction_uuid(handler.load(store, version))
        except VersionNotFoundError:
            there = None  # committed and cleaned up since (the latest is newer): not this staged manifest's
        if there != txn:
            raise VersionTakenError(version, f"version {version} of {label} is taken (the latest is {latest})")
        with contextlib.suppress(StoreError, OSError):
            store.delete(staged)
        return describe_version(handler, store, version)
    if version != latest + 1:
        raise VersionTakenError(version, f"version {version} of {label} is out of order (the latest is {latest})")
    if latest_entry is not None:
        _check_lineage(handler, store, uri, label, _current(handler, store, latest_entry), mfile)
    faults.point(faults.CHECKED)
    if on_ask is not None:
        on_ask()
    handler.commit_staged(store, version, staged, data, scheme, txn)
    remember = getattr(handler, "remember_accepted", None)
    if remember is not None:
        remember(mfile)
    if handler.kind == "native":
        _latest_seen.remember(store.uri, VersionEntry(version, final, len(data)), data, mfile)
    return _entry(version, final, len(data), mfile)


class _Latest:
    """Each native table's latest version as this process last saw it: its
    entry from the last listing, or the version a staged commit here made,
    with that manifest's bytes and parse.  By table URI.

    Two savings for managed versioning, where pylance asks for the latest
    version before every append and then stages its commit on it:
    :func:`latest_to_build_on` confirms the version seen (the hint file and
    two ``stat``s on local disk) instead of listing ``_versions/``; and the
    lineage check of the next commit compares the latest manifest's bytes
    with those accepted here instead of parsing them again.  Bounded: 1,024
    tables, and a manifest over 1 MiB is not kept (it is parsed again)."""

    MAX = 1024
    MAX_MANIFEST_BYTES = 1 << 20

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_uri: dict[str, tuple[VersionEntry, bytes | None, mf.ManifestFile | None]] = {}

    def remember(
        self, uri: str, entry: VersionEntry, data: bytes | None = None, mfile: mf.ManifestFile | None = None
    ) -> None:
        with self._lock:
            old = self._by_uri.get(uri)
            if data is None and old is not None and old[0] == entry:
                return  # listed again: what was accepted stays known
            if data is not None and len(data) > self.MAX_MANIFEST_BYTES:
                data = mfile = None
            if len(self._by_uri) >= self.MAX:
                self._by_uri.clear()
            self._by_uri[uri] = (entry, data, mfile)

    def forget(self, uri: str) -> None:
        with self._lock:
            self._by_uri.pop(uri, None)

    def entry(self, uri: str) -> VersionEntry | None:
        hit = self._by_uri.get(uri)
        return None if hit is None else hit[0]

    def accepted(self, uri: str, entry: VersionEntry) -> tuple[bytes, mf.ManifestFile] | None:
        hit = self._by_uri.get(uri)
        if hit is None or hit[0] != entry or hit[1] is None or hit[2] is None:
            return None
        return hit[1], hit[2]


_latest_seen = _Latest()


def _hinted_version(store: ObjectStore) -> int | None:
    """The version ``_versions/latest_version_hint.json`` names (written by
    pylance and Tessera after each commit on local disk); None when unreadable."""
    try:
        got = json.loads(store.read(paths.HINT_FILE))
        return got["version"] if isinstance(got, dict) and type(got.get("version")) is int else None
    except (StoreError, OSError, ValueError):
        return None


def latest_to_build_on(handler: CommitHandler, store: ObjectStore) -> VersionEntry | None:
    """The latest version, for a writer about to build its commit on it
    (pylance's ``list_table_versions(limit=1)`` before each append).

    On local disk, a native table's version seen last here is confirmed
    without listing ``_versions/``: the hint file every writer rewrites after
    its commit names it, its manifest is there and the next version's is not.
    The answer is then the latest.  It could only be an older one if the
    versions after it were committed, their last writer stopped before
    rewriting the hint, and a clean-up removed all of them but the latest
    while a tag kept this one: the writer's commit on it is then refused as
    out of order by :func:`accept_staged` (nothing is committed), whose
    listing corrects what is remembered here.  Anything else lists."""
    if handler.kind == "native" and not store.remote:
        seen = _latest_seen.entry(store.uri)
        if seen is not None and _hinted_version(store) == seen.version:
            parsed = mf.parse_manifest_name(seen.path.rsplit("/", 1)[-1])
            if parsed is not None:
                try:
                    size = store.size(seen.path)
                except ObjectNotFoundError:
                    size = None
                if size is not None and not store.exists(paths.manifest_path(seen.version + 1, parsed[1])):
                    return seen if size == seen.size else VersionEntry(seen.version, seen.path, size)
    entry = handler.latest_entry(store)
    if entry is None:
        _latest_seen.forget(store.uri)
    elif handler.kind == "native":
        _latest_seen.remember(store.uri, entry)
    return entry


def _current(handler: CommitHandler, store: ObjectStore, entry: VersionEntry) -> mf.ManifestFile:
    """The latest version's manifest, as ``handler.load`` reads it; parsed
    again only when it is not, byte for byte, the one accepted here last
    (read-only: the lineage check and ``bind`` only look at it)."""
    hit = _latest_seen.accepted(store.uri, entry) if handler.kind == "native" else None
    if hit is not None:
        try:
            data = store.read(entry.path)
        except ObjectNotFoundError:
            data = None
        if data == hit[0]:
            return hit[1]
    return handler.load(store, entry.version)


def _latest(handler: CommitHandler, store: ObjectStore) -> int:
    entry = handler.latest_entry(store)
    return 0 if entry is None else entry.version


def _check_lineage(
    handler: CommitHandler, store: ObjectStore, uri: str, label: str, current: mf.ManifestFile, staged: mf.ManifestFile
) -> None:
    """The staged manifest must continue this table: the coordinator and
    incarnation it carries (pylance keeps the config of the manifest it
    built on) are the latest version's.  A restore carries the config of
    the version it restores instead (pylance copies that manifest, which
    may predate the table's incarnation, written before a Tessera writer
    adopted one): that version of this table must carry the same.  A
    latest version without an incarnation (a table pylance created) is
    compared by its fragments' data files instead (:func:`lineage.foreign_base`)."""
    latest = current.manifest.version
    mine, theirs = incarnation_of(current.manifest), incarnation_of(staged.manifest)
    if mine is None:
        # a table without an incarnation (pylance created it): its data files tell
        why = foreign_base(staged, fragment_sample(current.manifest))
        if why is not None:
            raise IncarnationMismatchError(
                f"the manifest for {label} version {staged.manifest.version} was not built on its version "
                f"{latest} ({why}): the table was dropped and recreated since the writer read it"
            )
    if mine is not None and theirs != mine:
        restored = _restored_version(staged)
        if restored is None or not 0 < restored <= latest:
            raise IncarnationMismatchError(
                f"the manifest for {label} version {staged.manifest.version} was built on incarnation {theirs}, "
                f"but the table is incarnation {mine}: it was dropped and recreated since the writer read it"
            )
        try:
            old = handler.load(store, restored)
        except VersionNotFoundError:
            raise StagedManifestError(
                f"the manifest for {label} version {staged.manifest.version} restores version {restored}, "
                "which no longer exists (cleaned up)"
            ) from None
        if incarnation_of(old.manifest) != theirs:
            raise IncarnationMismatchError(
                f"the manifest for {label} version {staged.manifest.version} restores version {restored} of "
                f"incarnation {theirs}, but this table's version {restored} is incarnation "
                f"{incarnation_of(old.manifest)}: the table was dropped and recreated since the writer read it"
            )
    handler.bind(current.manifest, uri)


def _restored_version(mfile: mf.ManifestFile) -> int | None:
    """The version a manifest's transaction restores, or None when it is no restore."""
    txn = mfile.transaction
    if txn is None or txn.WhichOneof("operation") != "restore":
        return None
    return int(txn.restore.version)


#: the operations a served commit takes: a restore and a table's first version go through managed versioning
_SERVED_OPERATIONS = frozenset(
    {
        "append",
        "delete",
        "overwrite",
        "create_index",
        "rewrite",
        "merge",
        "project",
        "update",
        "update_config",
        "data_replacement",
    }
)


def accept_transaction(
    handler: CommitHandler,
    store: ObjectStore,
    txn: transaction_pb2.Transaction,
    read_version: int,
    *,
    affected_rows: dict[int, np.ndarray] | None = None,
    seconds: float | None = None,
    label: str = "",
    base_transaction: str | None = None,
) -> VersionEntry:
    """Commit ``txn``, which a client built on ``read_version`` of the table
    (a served commit); returns the version's entry.  ``base_transaction``:
    the uuid of the transaction that made the version the client read; when
    this table's ``read_version`` is another's, the table was dropped and
    recreated since the client read it, and the commit is refused.  Checked against every
    version since ``read_version`` first (a request sent again finds its own
    transaction there and gets that version back), then committed by the
    table's handler, rebased on whatever wins meanwhile, within the handler's
    policy and the client's remaining ``seconds``.

    Raises:
        ServedCommitRequestError: the transaction cannot be a served commit.
        BaseVersionGoneError: ``read_version`` was cleaned up (re-run on the latest).
        IncarnationMismatchError: ``read_version`` is not the version the client read.
        and whatever :func:`commit_transaction` raises."""
    op = txn.WhichOneof("operation")
    if op is None or not txn.uuid:
        raise ServedCommitRequestError(f"a served commit to {label} needs a transaction with an operation and a uuid")
    if op not in _SERVED_OPERATIONS:
        raise ServedCommitRequestError(f"a served commit does not take a {op} (commit it through create_table_version)")
    if txn.read_version != read_version:
        raise ServedCommitRequestError(
            f"the transaction was built on version {txn.read_version}, the request says {read_version}"
        )
    policy = handler.policy or DEFAULT_POLICY
    deadline = policy.deadline()
    if seconds is not None:
        deadline = min(deadline, time.monotonic() + seconds)
    try:
        base = handler.load(store, read_version)
    except VersionNotFoundError:
        raise BaseVersionGoneError(read_version, f"version {read_version} of {label} is gone") from None
    if base_transaction is not None and transaction_uuid(base) != base_transaction:
        raise IncarnationMismatchError(
            f"version {read_version} of {label} is not the one the writer read (transaction "
            f"{transaction_uuid(base)}, not {base_transaction}): the table was dropped and recreated since; reopen it"
        )
    handler.bind(base.manifest, store.uri)
    try:
        # every version since the client's read at once: its own transaction
        # there (sent again) is the answer; a conflict fails the request
        newest = rebase(store, handler, txn, base, affected_rows)
    except AlreadyCommitted as done:
        return _served_entry(store, done.mfile)
    faults.point(faults.SERVED_CHECKED)
    mfile = commit_transaction(store, txn, newest, handler=handler, affected_rows=affected_rows, deadline=deadline)
    faults.point(faults.SERVED_COMMITTED)
    return _served_entry(store, mfile)


def _served_entry(store: ObjectStore, mfile: mf.ManifestFile) -> VersionEntry:
    scheme = mfile.naming or tstore.list_versions(store)[1] or mf.NamingScheme.V2
    path = paths.manifest_path(mfile.version, scheme)
    # the size is in the fingerprint the commit (or the read) took; else one HEAD
    size = int.from_bytes(mfile.fingerprint[:8], "little") if mfile.fingerprint else store.size(path)
    return _entry(mfile.version, path, size, mfile)
