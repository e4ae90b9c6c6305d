"""Commit handlers: how a version is won, found and repaired.

``base`` (the protocol every handler follows), ``native`` (put-if-not-exists
of the manifest itself), ``external`` (reserve in a manifest store, then
publish), ``namespace_client`` (through a Lance Namespace), and ``factory``
(which handler a table gets, and the process's manifest stores).
"""

from .base import CONFIG_COORDINATOR, CONFIG_INCARNATION, CONFIG_STORE, CONFIG_STORE_ID, CommitHandler, VersionEntry
from .external import ExternalCommitHandler
from .factory import open_handler, recorded_store, shared_manifest_store
from .namespace_client import (
    NamespaceCommitHandler,
    call_namespace,
    connect_namespace,
    namespace_handler,
    root_relative,
)
from .native import NativeCommitHandler

__all__ = [
    "CONFIG_COORDINATOR",
    "CONFIG_INCARNATION",
    "CONFIG_STORE",
    "CONFIG_STORE_ID",
    "CommitHandler",
    "ExternalCommitHandler",
    "NamespaceCommitHandler",
    "NativeCommitHandler",
    "VersionEntry",
    "call_namespace",
    "connect_namespace",
    "namespace_handler",
    "open_handler",
    "recorded_store",
    "root_relative",
    "shared_manifest_store",
]
