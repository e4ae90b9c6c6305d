"""Errors a user of the catalog and table API can hit.

Every class says what went wrong; the message says what to do about it.
Errors from the layers below (format, commit, stores) are re-exported here so
callers can catch everything from one module.
"""

from __future__ import annotations

from commit.errors import (  # noqa: F401  (re-exported)
    CommitConflictError,
    CommitError,
    IncompatibleTransactionError,
    TableNotFoundError,
    TooMuchContentionError,
    VersionNotFoundError,
)
from format.errors import (  # noqa: F401
    ColumnNotFoundError,
    CorruptFileError,
    FormatError,
    SchemaMismatchError,
    UnsupportedEncodingError,
    UnsupportedTypeError,
)
from format.manifest import MixedNamingError, UnknownFeatureFlagError  # noqa: F401
from stores.errors import InvalidURIError, StoreError  # noqa: F401


class TesseraError(Exception):
    """Base class of errors raised by the catalog and table API."""


class TableExistsError(TesseraError, FileExistsError):
    """A table already exists where one was to be created."""


class TagError(TesseraError, LookupError):
    """A tag that does not exist, or one that already does."""


class InvalidArgumentError(TesseraError, ValueError):
    """An argument that cannot be honoured (a bad column list, a negative limit...)."""


class PredicateError(TesseraError, ValueError):
    """A filter predicate that cannot be used."""


class PredicateSyntaxError(PredicateError):
    """A SQL predicate that does not parse."""


class UnknownColumnError(PredicateError, KeyError):
    """A predicate or column list names a column the table does not have."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnsupportedPredicateError(PredicateError):
    """A SQL construct outside the supported set (subqueries, aggregates...)."""


class PredicateTypeError(PredicateError):
    """A predicate that parses but does not type-check: a non-boolean predicate,
    a string column compared with a number, a literal that cannot be read as
    the column's type (``DATE '2024-13-01'``)."""
