"""Errors raised while committing a transaction."""

from __future__ import annotations

from format.errors import TesseraError


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
