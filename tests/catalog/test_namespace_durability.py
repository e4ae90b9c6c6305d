"""The namespace's ``durability`` property: the versions pylance commits
through it are fsynced by default ("sync"), not with "none" (pylance's own
behaviour by path); anything else is refused by name."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")
lance_namespace = pytest.importorskip("lance_namespace")
from lance_namespace import errors as nserr  # noqa: E402

import tessera  # noqa: E402,F401 - registers "tessera"


def _fsyncs_per_append(tmp_path, monkeypatch, **props: str) -> int:
    ns = lance_namespace.connect("tessera", {"warehouse": str(tmp_path / "wh"), "commit_store": "native", **props})
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["s"]))
    tid = ["s", "t"]
    lance.write_dataset(pa.table({"i": [0]}), namespace_client=ns, table_id=tid, mode="create")
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd) or real(fd))
    try:
        lance.write_dataset(pa.table({"i": [1]}), namespace_client=ns, table_id=tid, mode="append")
    finally:
        monkeypatch.setattr(os, "fsync", real)
    assert lance.dataset(namespace_client=ns, table_id=tid).count_rows() == 2
    ns.close()
    return len(calls)


def test_sync_by_default_and_none_on_request(tmp_path, monkeypatch):
    assert _fsyncs_per_append(tmp_path / "a", monkeypatch) >= 2  # the manifest and its directory
    assert _fsyncs_per_append(tmp_path / "b", monkeypatch, durability="none") == 0


def test_a_bad_durability_is_refused(tmp_path):
    from tessera.catalog.namespace import TesseraNamespace

    with pytest.raises(nserr.InvalidInputError, match="durability"):
        TesseraNamespace(warehouse=str(tmp_path / "wh"), durability="fast")
