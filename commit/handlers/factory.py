"""Which commit handler a table commits through, and the process's cache of manifest stores."""

from __future__ import annotations

import threading

from tessera.format.protos import table_pb2
from tessera.stores.manifest_store import ManifestStore
from tessera.stores.registry import open_manifest_store
from tessera.stores.uri import normalize_table_uri

from ..retry import InvalidRetryPolicyError, RetryPolicy
from .base import CONFIG_COORDINATOR, CONFIG_STORE, CommitHandler
from .external import ExternalCommitHandler
from .native import NativeCommitHandler

__all__ = ["open_handler", "recorded_store", "shared_manifest_store"]


def open_handler(
    uri: str, commit_store: str | ManifestStore | None = None, retry: RetryPolicy | None = None
) -> CommitHandler:
    """The commit handler for a table: native, or through an external store
    (a URL or an already opened ManifestStore), with the retry policy ``retry``."""
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise InvalidRetryPolicyError(f"retry must be a commit.retry.RetryPolicy, got {type(retry).__name__}")
    if commit_store is None:
        return NativeCommitHandler(retry)
    ms = shared_manifest_store(commit_store) if isinstance(commit_store, str) else commit_store
    return ExternalCommitHandler(ms, normalize_table_uri(uri), policy=retry)


_shared_stores: dict[str, ManifestStore] = {}
_shared_lock = threading.Lock()


def shared_manifest_store(url: str) -> ManifestStore:
    """The process's store for ``url``, opened (and its schema checked) once:
    a ``Table.open`` by URL then costs no new connection pool, TCP connect,
    login or schema reflection (a SQL store's check is 11 queries).  Stores
    are thread-safe, and closing one only empties its connection pool (the
    next use reconnects).  A store that later finds its schema changed still
    raises StoreSchemaError on the statement that meets it, and its store id
    is read again on every open (a store recreated at the address is refused)."""
    with _shared_lock:
        ms = _shared_stores.get(url)
        if ms is None or ms.replaced():  # a SQLite file deleted or replaced
            ms = _shared_stores[url] = open_manifest_store(url)
        else:
            ms.forget_store_id()  # one small read per open: a recreated store is refused
        return ms


def recorded_store(manifest: table_pb2.Manifest) -> tuple[str, str] | None:
    """The external manifest store a table's manifest records as its
    coordinator: (kind, credential-free identity); None when it commits
    natively (or the manifest records nothing: pylance's own commits)."""
    kind = manifest.config.get(CONFIG_COORDINATOR, "native")
    return None if kind == "native" else (kind, manifest.config.get(CONFIG_STORE, ""))
