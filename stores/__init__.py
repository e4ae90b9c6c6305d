"""Object stores (local disk, S3, Google Cloud Storage, Azure Blob) and external manifest stores."""

from .errors import AlreadyExistsError, ObjectNotFoundError, StoreError
from .local import LocalObjectStore
from .object_store import ObjectStore
from .registry import open_manifest_store, open_object_store
from .uri import TableURI, parse_table_uri

__all__ = [
    "AlreadyExistsError",
    "LocalObjectStore",
    "ObjectNotFoundError",
    "ObjectStore",
    "StoreError",
    "TableURI",
    "open_manifest_store",
    "open_object_store",
    "parse_table_uri",
]
