"""Object stores (local disk, S3) and external manifest stores."""

from .errors import AlreadyExistsError, ObjectNotFoundError, StoreError
from .local import LocalObjectStore
from .object_store import ObjectStore, open_object_store

__all__ = [
    "AlreadyExistsError",
    "LocalObjectStore",
    "ObjectNotFoundError",
    "ObjectStore",
    "StoreError",
    "open_object_store",
]
