"""format/table/paths.py: the dataset's path names are Lance's (pylance reads
what they name), and a path a store cannot name is a format-level error."""

from __future__ import annotations

import re

import pytest

from tessera.format.errors import FormatError, InvalidPathError
from tessera.format.protos import table_pb2
from tessera.format.table import deletion as ldeletion
from tessera.format.table import paths
from tessera.format.table.fragments import FileReaderCache, open_data_file
from tessera.format.table.manifest import NamingScheme


def test_directory_names():
    assert (paths.VERSIONS_DIR, paths.TRANSACTIONS_DIR, paths.DATA_DIR) == ("_versions", "_transactions", "data")
    assert (paths.DELETIONS_DIR, paths.INDICES_DIR, paths.TAGS_DIR) == ("_deletions", "_indices", "_refs/tags")
    assert paths.HINT_FILE == "_versions/latest_version_hint.json"


def test_manifest_paths():
    assert paths.manifest_path(1, NamingScheme.V1) == "_versions/1.manifest"
    assert paths.manifest_path(1, NamingScheme.V2) == "_versions/18446744073709551614.manifest"
    assert paths.version_path("7.manifest") == "_versions/7.manifest"
    final = paths.manifest_path(3, NamingScheme.V2)
    staged = paths.staged_manifest_path(final)
    assert re.fullmatch(re.escape(final) + r"-[0-9a-f-]{36}", staged)
    assert paths.is_staged_manifest(staged) and not paths.is_staged_manifest(final)
    assert paths.final_manifest_path(staged) == final
    assert paths.final_manifest_path(final) is None


def test_file_paths():
    assert paths.new_transaction_path(4, "abc") == "_transactions/4-abc.txn"
    assert paths.transaction_path("4-abc.txn") == "_transactions/4-abc.txn"
    assert re.fullmatch(r"[0-9a-f]{32}\.lance", paths.new_data_file_name())
    assert paths.data_path("x.lance") == "data/x.lance"
    assert re.fullmatch(r"data/[0-9a-f]{32}\.rowids", paths.new_sequence_path())
    arrow = table_pb2.DeletionFile(file_type=table_pb2.ARROW_ARRAY, read_version=2, id=9)
    bitmap = table_pb2.DeletionFile(file_type=table_pb2.BITMAP, read_version=2, id=9)
    assert paths.deletion_file_path(5, arrow) == "_deletions/5-2-9.arrow"
    assert paths.deletion_file_path(5, bitmap) == "_deletions/5-2-9.bin"
    assert ldeletion.deletion_file_path is paths.deletion_file_path
    assert paths.index_path("u-u-i-d", "zonemap.lance") == "_indices/u-u-i-d/zonemap.lance"
    assert paths.tag_path("v1") == "_refs/tags/v1.json"


class _Store:
    """A store refusing every name, as the stores' InvalidURIError (a ValueError) does."""

    uri = "mem://t"

    def open_reader(self, path):
        raise ValueError(f"{path}: a name in the path is too long")


def test_a_name_the_store_refuses_is_a_format_error():
    with pytest.raises(InvalidPathError, match="too long") as info:
        open_data_file(_Store(), "x.lance")
    assert isinstance(info.value, FormatError) and isinstance(info.value, ValueError)
    with pytest.raises(InvalidPathError):
        FileReaderCache(_Store()).get("x.lance")


def test_a_local_name_too_long(tmp_path):
    from tessera.stores.local import LocalObjectStore

    (tmp_path / "data").mkdir()
    with pytest.raises(InvalidPathError, match="too long"):
        open_data_file(LocalObjectStore(str(tmp_path)), "x" * 300 + ".lance")
