"""Errors a user of the catalog and table API can hit.

Every class says what went wrong; the message says what to do about it.
Errors from the layers below (format, commit, stores) are re-exported here so
callers can catch everything from one module.
"""

from __future__ import annotations

from tessera.commit.errors import (  # noqa: F401  (re-exported)
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
from tessera.commit.retry import InvalidRetryPolicyError  # noqa: F401
from tessera.format.errors import (  # noqa: F401
    ChecksumMismatchError,
    ClosedFileError,
    ColumnNotFoundError,
    CorruptFileError,
    FileAccessError,
    FormatError,
    InvalidColumnNameError,
    InvalidPathError,
    InvalidSettingError,
    MissingFileError,
    NotABlobColumnError,
    RewriteError,
    RowOutOfRangeError,
    SchemaMismatchError,
    TesseraError,
    TruncatedFileError,
    UnsupportedEncodingError,
    UnsupportedTypeError,
)
from tessera.format.file.dictionary import DictionaryOverflowError  # noqa: F401
from tessera.format.table.manifest import MixedNamingError, UnknownFeatureFlagError  # noqa: F401
from tessera.stores.errors import (  # noqa: F401
    AlreadyExistsError,
    AmbiguousStoreError,
    BucketNotFoundError,
    ConditionalWriteUnsupportedError,
    IncarnationMismatchError,
    InvalidStorageOptionError,
    InvalidURIError,
    ObjectChangedError,
    ObjectNotFoundError,
    StoreError,
    StoreSchemaError,
    StoreUnavailableError,
    VersionExistsError,
)


class TableExistsError(TesseraError, FileExistsError):
    """A table already exists where one was to be created."""


class TagError(TesseraError, LookupError):
    """A tag that does not exist, or one that already does."""


class InvalidArgumentError(TesseraError, ValueError):
    """An argument that cannot be honoured (a bad column list, a negative limit...)."""


class TypeChangeError(InvalidArgumentError):
    """A column type change ``alter_columns`` refuses: one that could lose
    values (a narrowing or lossy cast) or that Lance cannot make (a struct as a
    whole); nothing was written."""


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


class NotAPredicateError(PredicateError, TypeError):
    """A filter that is neither SQL text nor a pyarrow.compute.Expression."""


class PredicateTypeError(PredicateError):
    """A predicate that parses but does not type-check: a non-boolean predicate,
    a string column compared with a number, a literal that cannot be read as
    the column's type (``DATE '2024-13-01'``)."""


class InvalidNameError(TesseraError, ValueError):
    """A namespace or table name that is not allowed."""


class NamespaceExistsError(TesseraError, FileExistsError):
    """The namespace already exists."""


class NamespaceNotFoundError(TesseraError, LookupError):
    """No such namespace."""


class NamespaceNotEmptyError(TesseraError):
    """The namespace still holds tables or namespaces."""


class NoSuchTableError(TesseraError, LookupError):
    """No table of that name in the catalog."""


class CatalogConnectionError(TesseraError, ConnectionError):
    """The catalog database cannot be reached or opened."""


class WarehouseNotWritableError(TesseraError, PermissionError):
    """The warehouse location cannot be written."""


class TransactionError(TesseraError):
    """A multi-table transaction that cannot be committed as asked."""


class UnsupportedSparkTypeError(TesseraError, TypeError):
    """A Spark column type a Tessera table cannot store (maps, variants,
    calendar intervals...), or a stored type Spark cannot read."""


class SparkOptionError(TesseraError, ValueError):
    """A ``tessera`` Spark data source option that is missing or malformed."""


class SparkWorkerPythonError(TesseraError):
    """Spark's Python workers run an interpreter that cannot import Tessera
    (``PYSPARK_PYTHON`` unset: ``python3`` from PATH, not this venv's)."""


class SparkStreamError(TesseraError):
    """A streaming read that cannot go on as asked (a version that updates or
    deletes rows in a stream of appends)."""


class SparkWriteError(TesseraError):
    """A Spark write that cannot be committed as asked (for example a table
    created concurrently with a different schema)."""


class TableNameError(InvalidArgumentError):
    """A bare table name (``ns.t2``, ``t2``: no scheme, not absolute, no path
    separator) given where a table's path or URI was expected, with no catalog
    or namespace named to look it up in (see :mod:`tessera.catalog.names`).
    The message says how to write it as a folder (``./ns.t2``) or how to name
    the catalog."""


class SparkTableNameError(SparkOptionError, TableNameError):
    """:class:`TableNameError` from the ``tessera`` Spark data source's options."""


class ReplaceWhereMismatchError(SparkWriteError, ValueError):
    """A Spark write with ``replaceWhere`` whose DataFrame holds a row that
    does not match the predicate (Delta: "Data written out does not match
    replaceWhere"); the job fails and nothing is committed."""


class RowIdError(TesseraError):
    """A problem with a table's stable row ids."""


class DuplicateRowIdError(RowIdError):
    """The same row id is live at two row addresses, or a fragment of a
    stable-row-id table has no row id sequence: the table's metadata is corrupt."""


class RowIdNotFoundError(RowIdError, KeyError):
    """``take_rows`` asked for row ids that are not live in this version
    (never assigned, deleted, or replaced by an update)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class CompactionError(TesseraError):
    """A compaction that cannot be done as asked."""


class CleanupError(TesseraError):
    """A version clean-up that cannot be done as asked."""


class CatalogConfigError(TesseraError, LookupError):
    """A catalog named in ``connect(name)`` that no config file or environment
    variable defines, or a config file that cannot be read."""


class NoCatalogError(CatalogConnectionError, FileNotFoundError):
    """``connect(create=False)`` found no catalog database (or one without the
    catalog's tables) where it looked; nothing was created."""


class UnsupportedDatasetOperationError(TesseraError, NotImplementedError):
    """A pyarrow Dataset operation the Tessera view (``Table.to_dataset()``) does not offer."""
