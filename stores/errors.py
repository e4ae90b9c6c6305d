"""Errors raised by object stores and manifest stores."""

from __future__ import annotations

from tessera.format.errors import TesseraError


class StoreError(TesseraError):
    """Base class of every store error."""


class ObjectNotFoundError(StoreError, FileNotFoundError):
    """The object does not exist."""


class AlreadyExistsError(StoreError, FileExistsError):
    """A put-if-not-exists found the object already there: someone else won."""


class InvalidURIError(StoreError, ValueError):
    """A table or store URI that cannot be parsed or is not supported."""


class VersionExistsError(StoreError):
    """A reservation found the (table, version) row already taken."""


class StoreUnavailableError(StoreError, ConnectionError):
    """The store cannot be reached (connection refused, DNS, auth)."""


class AmbiguousStoreError(StoreError):
    """A write whose outcome is unknown (timeout, lost response): it may or may
    not have been applied.  Callers must read back before deciding anything."""


class StoreSchemaError(StoreError):
    """The store's schema (DynamoDB key schema, SQL tables) is not the one
    Tessera expects; nothing was written."""


class IncarnationMismatchError(StoreError):
    """The table was dropped and recreated since this writer read it."""


class ConditionalWriteUnsupportedError(StoreError):
    """The store accepted a second conditional create of the same object: it
    silently ignores the condition, so it cannot decide commits."""


class InvalidStorageOptionError(StoreError, ValueError):
    """A ``storage_options`` key that is unknown, or a value that cannot be
    parsed (for example a timeout that is not a number of seconds)."""


class BucketNotFoundError(StoreError):
    """The bucket named by a table URI does not exist at the endpoint (or is
    not visible with these credentials): create it or fix the URI."""


class ObjectChangedError(StoreError):
    """An object was replaced while it was being read: its ETag no longer
    matches the one seen when the reader was opened."""
