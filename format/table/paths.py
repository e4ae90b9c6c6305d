"""The path names inside a Lance dataset (a table's root), all relative to it.

These are Lance's own names: pylance reads and writes the same layout, so none
of them may change.  A manifest's or transaction's *file name* (without its
folder) is built in :mod:`tessera.format.table.manifest`; this module puts names into
their folders::

    _versions/{manifest}              committed manifests (V1 or V2 names)
    _versions/{manifest}-{uuid}       a staged manifest (external commit stores)
    _versions/latest_version_hint.json
    _transactions/{read_version}-{uuid}.txn
    data/{uuid}.lance                 data files (DataFile.path is the name under data/)
    data/{uuid}.rowids                external row id and version sequences
    _deletions/{fragment}-{read_version}-{id}.{arrow|bin}
    _indices/{index uuid}/...         index files (zonemap.lance, ...)
    _refs/tags/{name}.json            tags
"""

from __future__ import annotations

import uuid

from ..protos import table_pb2
from .manifest import NamingScheme, manifest_name, transaction_file_name

VERSIONS_DIR = "_versions"
TRANSACTIONS_DIR = "_transactions"
DATA_DIR = "data"
DELETIONS_DIR = "_deletions"
INDICES_DIR = "_indices"
TAGS_DIR = "_refs/tags"

HINT_NAME = "latest_version_hint.json"
HINT_FILE = f"{VERSIONS_DIR}/{HINT_NAME}"
#: the advisory lock Tessera's writers on one machine take while committing
#: (local disk only; ignored by pylance and by every listing of versions)
COMMIT_LOCK_NAME = ".tessera-commit.lock"
COMMIT_LOCK_FILE = f"{VERSIONS_DIR}/{COMMIT_LOCK_NAME}"
DATA_FILE_SUFFIX = ".lance"
SEQUENCE_FILE_SUFFIX = ".rowids"
_MANIFEST_SUFFIX = ".manifest"
#: what follows a staged manifest's final name (``{final}-{uuid}``)
_STAGED_MARK = f"{_MANIFEST_SUFFIX}-"


# -- manifests ---------------------------------------------------------------------------


def version_path(name: str) -> str:
    """The path of the manifest file ``name`` (a name listed under ``_versions/``)."""
    return f"{VERSIONS_DIR}/{name}"


def manifest_path(version: int, scheme: NamingScheme) -> str:
    """The final path of ``version``'s manifest under naming ``scheme``."""
    return version_path(manifest_name(version, scheme))


def staged_manifest_path(final: str) -> str:
    """A fresh staged path for the manifest whose final path is ``final``."""
    return f"{final}-{uuid.uuid4()}"


def is_staged_manifest(name: str) -> bool:
    """Whether ``name`` (a name or path under ``_versions/``) is a staged manifest."""
    return _STAGED_MARK in name


def final_manifest_path(staged: str) -> str | None:
    """The final manifest path a staged path (``{final}-{uuid}``) belongs to;
    None when ``staged`` is not a staged manifest's path."""
    cut = staged.rfind(_STAGED_MARK)
    if cut < 0:
        return None
    return staged[: cut + len(_MANIFEST_SUFFIX)]


# -- transactions ------------------------------------------------------------------------


def transaction_path(name: str) -> str:
    """The path of the transaction file ``name`` (``Manifest.transaction_file``)."""
    return f"{TRANSACTIONS_DIR}/{name}"


def new_transaction_path(read_version: int, txn_uuid: str) -> str:
    """The path of the transaction file of transaction ``txn_uuid`` built on ``read_version``."""
    return transaction_path(transaction_file_name(read_version, txn_uuid))


# -- data, deletion, sequence and index files --------------------------------------------


def new_data_file_name() -> str:
    """A fresh data file name (``DataFile.path``: relative to ``data/``)."""
    return f"{uuid.uuid4().hex}{DATA_FILE_SUFFIX}"


def data_path(name: str) -> str:
    """The path of data file ``name`` (a ``DataFile.path``)."""
    return f"{DATA_DIR}/{name}"


def new_sequence_path() -> str:
    """A fresh path for an external row id or version sequence file."""
    return f"{DATA_DIR}/{uuid.uuid4().hex}{SEQUENCE_FILE_SUFFIX}"


def deletion_file_path(fragment_id: int, d: table_pb2.DeletionFile) -> str:
    """The path of fragment ``fragment_id``'s deletion file ``d``."""
    ext = "arrow" if d.file_type == table_pb2.ARROW_ARRAY else "bin"
    return f"{DELETIONS_DIR}/{fragment_id}-{d.read_version}-{d.id}.{ext}"


def index_path(index_uuid: str, name: str) -> str:
    """The path of file ``name`` of the index whose uuid (as text) is ``index_uuid``."""
    return f"{INDICES_DIR}/{index_uuid}/{name}"


# -- tags --------------------------------------------------------------------------------


def tag_path(name: str) -> str:
    """The path of tag ``name``'s file (the name is checked by the caller)."""
    return f"{TAGS_DIR}/{name}.json"
