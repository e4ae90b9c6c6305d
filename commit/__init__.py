"""The commit protocol's public face: everything above commit/ imports from here.

* a table's coordinator: :func:`open_handler` (native, or an external
  manifest store by URL through the process's :func:`shared_manifest_store`),
  or a :class:`NamespaceCommitHandler` through a Lance Namespace;
* a commit: :func:`commit_operation` (build, commit, re-run on conflicts)
  over :func:`commit_transaction` (build the manifest, win the version,
  rebase), bounded by one :class:`RetryPolicy`; :func:`commit_many` for
  several tables at once;
* managed versioning's server half: :func:`accept_staged` (a manifest a
  writer staged becomes a version) and :func:`describe_version`, :func:`latest_to_build_on`; served
  commits' (:mod:`commit.served`): :func:`accept_transaction` (a transaction
  a client sends is rebased and committed next to the store);
* reading versions (:func:`list_versions`, :func:`load_manifest`), clean-up,
  and the errors (:mod:`commit.errors`).

Inside: ``handlers/`` (the coordinators), ``operation`` (the rebase loop),
``builder`` (transaction -> manifest), ``conflicts``, ``multi``, ``managed``,
``cleanup/``, ``retry``, ``lineage``, ``store``, ``txn_files``, ``faults``.
"""

from .app_txn import check_app_transaction, recorded_version
from .app_txn import tag as tag_app_transaction
from .builder import fragment_live_rows
from .cleanup import (
    DEFAULT_ORPHAN_AGE,
    CleanupReport,
    Progress,
    VersionCleanupReport,
    cleanup_old_versions,
    expand_dirs,
    referenced_paths,
    remove_orphans,
)
from .errors import (
    BaseVersionGoneError,
    CommitConflictError,
    CommitError,
    CommitOutcomeUnknownError,
    CoordinatorMismatchError,
    IncompatibleTransactionError,
    IndexReplacedError,
    InvalidAppTransactionError,
    NamespaceError,
    PartialTransactionError,
    ServedCommitRequestError,
    StagedManifestError,
    StoreIdentityMismatchError,
    TableNotFoundError,
    TaggedVersionError,
    TooMuchContentionError,
    UnrecoverableCommitError,
    VersionNotFoundError,
    VersionTakenError,
)
from .handlers import (
    CommitHandler,
    ExternalCommitHandler,
    NamespaceCommitHandler,
    NativeCommitHandler,
    VersionEntry,
    call_namespace,
    connect_namespace,
    namespace_handler,
    open_handler,
    recorded_store,
    root_relative,
    shared_manifest_store,
)
from .managed import accept_staged, accept_transaction, describe_version, is_staged_manifest, latest_to_build_on
from .multi import TableVersion, commit_many, stage_version
from .operation import commit_operation, commit_transaction, new_transaction
from .retry import InvalidRetryPolicyError, RetryPolicy
from .served import SERVED_MAX_BODY_BYTES, SERVED_ROUTE, decode_served_request, served_error_name
from .store import list_versions, load_manifest

__all__ = [
    "InvalidAppTransactionError",
    "check_app_transaction",
    "recorded_version",
    "tag_app_transaction",
    "DEFAULT_ORPHAN_AGE",
    "SERVED_MAX_BODY_BYTES",
    "SERVED_ROUTE",
    "BaseVersionGoneError",
    "CleanupReport",
    "CommitConflictError",
    "CommitError",
    "CommitHandler",
    "CommitOutcomeUnknownError",
    "CoordinatorMismatchError",
    "ExternalCommitHandler",
    "IncompatibleTransactionError",
    "IndexReplacedError",
    "InvalidRetryPolicyError",
    "NamespaceCommitHandler",
    "NamespaceError",
    "NativeCommitHandler",
    "PartialTransactionError",
    "ServedCommitRequestError",
    "Progress",
    "RetryPolicy",
    "StagedManifestError",
    "StoreIdentityMismatchError",
    "TableNotFoundError",
    "TaggedVersionError",
    "TableVersion",
    "TooMuchContentionError",
    "UnrecoverableCommitError",
    "VersionCleanupReport",
    "VersionEntry",
    "VersionNotFoundError",
    "VersionTakenError",
    "accept_staged",
    "accept_transaction",
    "call_namespace",
    "cleanup_old_versions",
    "commit_many",
    "commit_operation",
    "commit_transaction",
    "connect_namespace",
    "decode_served_request",
    "describe_version",
    "latest_to_build_on",
    "expand_dirs",
    "fragment_live_rows",
    "is_staged_manifest",
    "list_versions",
    "load_manifest",
    "namespace_handler",
    "new_transaction",
    "open_handler",
    "recorded_store",
    "referenced_paths",
    "remove_orphans",
    "root_relative",
    "served_error_name",
    "shared_manifest_store",
    "stage_version",
]
