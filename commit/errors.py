"""Errors raised while committing a transaction."""

from __future__ import annotations

from tessera.format.errors import TesseraError


class CommitError(TesseraError):
    """Base class of commit errors."""


class CommitConflictError(CommitError):
    """Another writer committed the version we tried to create.

    Retryable: rebuild on the new latest version and try again."""

    def __init__(self, version: int, detail: str = "") -> None:
        self.version = version
        super().__init__(f"version {version} was committed by another writer{': ' + detail if detail else ''}")


class IncompatibleTransactionError(CommitError):
    """A concurrent commit changed the table in a way this transaction cannot be
    rebased onto (for example an overwrite, or a delete of the same rows)."""


class TooMuchContentionError(CommitError):
    """The retry budget (attempts or time) ran out while other writers kept winning."""


class TableNotFoundError(CommitError, FileNotFoundError):
    """No table (no manifest) at the location."""


class VersionNotFoundError(CommitError, LookupError):
    """The requested version does not exist."""


class CommitOutcomeUnknownError(CommitError):
    """The store did not say whether our version was recorded, and reading it
    back did not tell either.  Nothing was deleted: a later open finishes the
    commit if it happened.  Check the table's history before retrying."""


class UnrecoverableCommitError(CommitError):
    """A version's row points at neither a staged nor a final manifest."""

    def __init__(self, version: int, path: str, table: str) -> None:
        self.version, self.path, self.table = version, path, table
        super().__init__(
            f"version {version} of {table} is recorded in the manifest store at {path!r}, "
            f"but neither that staged manifest nor the final one exists; "
            f"run `tessera repair {table}` (Table.repair()) to decide what to do with it"
        )


class CoordinatorMismatchError(CommitError):
    """The table is coordinated by another commit coordinator than this writer's."""


class StoreIdentityMismatchError(CoordinatorMismatchError):
    """The manifest store reached by this writer is not the one the table
    records (another store, or the same address answering with a store that
    lost its data)."""

    def __init__(self, table: str, recorded_id: str, recorded_at: str | None, found_id: str, found_at: str) -> None:
        self.table, self.recorded_id, self.found_id = table, recorded_id, found_id
        super().__init__(
            f"{table} is coordinated by the manifest store with id {recorded_id}"
            + (f" (recorded at {recorded_at})" if recorded_at else "")
            + f", but the store at {found_at} has id {found_id}: it is another store, or one that lost "
            "its data. Point commit_store at the table's own store; do not write through this one"
        )


class BaseVersionGoneError(CommitConflictError):
    """The version this writer read was removed (version clean-up) from a
    table that is otherwise the same: the operation must be re-run on the
    latest version."""


class IndexReplacedError(CommitConflictError):
    """An index this transaction replaces was replaced or dropped by a concurrent
    commit (or a concurrent commit created one of the same name): rebuild the
    index on the latest version."""


class PartialTransactionError(CommitError):
    """A multi-table transaction was decided in the manifest store, but a
    writer outside the store took the version of some of its tables first
    (their manifests are adopted as that writer's).  ``committed`` and
    ``lost`` name the tables on each side."""

    def __init__(self, committed: list[str], lost: list[str]) -> None:
        self.committed, self.lost = committed, lost
        super().__init__(
            f"the transaction committed {committed} but a writer outside the manifest store took the versions "
            f"of {lost} first; those tables do not hold this transaction's changes. Do not let writers commit "
            "by URI around the store to tables used in multi-table transactions"
        )


class NamespaceError(CommitError):
    """A Lance Namespace (a table reached through one) refused or failed a
    request: unreachable, unauthenticated, or an error of its own."""


class StagedManifestError(CommitError, ValueError):
    """A request to make a staged manifest a version (managed versioning)
    that cannot be honoured: a bad version or naming scheme, a path that is
    no staged manifest of that version, or a manifest that is not one."""


class VersionTakenError(CommitConflictError):
    """The version a staged manifest asks for is another writer's, or is not
    the table's next one (managed versioning)."""

    def __init__(self, version: int, message: str) -> None:
        self.version = version
        CommitError.__init__(self, message)


class TaggedVersionError(CommitError):
    """A clean-up that may not remove tagged versions would have removed one
    (a table's automatic clean-up, as pylance's: nothing was removed)."""


class ServedCommitRequestError(CommitError, ValueError):
    """A served commit (a transaction sent to ``tessera serve`` to commit)
    that cannot be one: a malformed request, a transaction without an
    operation or uuid, or an operation the server does not commit for clients."""


class InvalidAppTransactionError(CommitError, ValueError):
    """An application id or version that cannot name an idempotent write
    (``txn_app_id``/``txn_version``: see :mod:`tessera.commit.app_txn`)."""
