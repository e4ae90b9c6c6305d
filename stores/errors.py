"""Errors raised by object stores and manifest stores."""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every store error."""


class ObjectNotFoundError(StoreError, FileNotFoundError):
    """The object does not exist."""


class AlreadyExistsError(StoreError, FileExistsError):
    """A put-if-not-exists found the object already there: someone else won."""


class InvalidURIError(StoreError, ValueError):
    """A table or store URI that cannot be parsed or is not supported."""
