"""Errors raised while committing a transaction."""

from __future__ import annotations


class CommitError(Exception):
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
