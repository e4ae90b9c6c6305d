"""pylance's create_table_version through the namespace plugin on an external
manifest store (the catalog's SQLite, Redis, PostgreSQL): the short way
reserves the staged manifest's row straight away, the store checking in that
one request that the version is free and its predecessor the claimed
incarnation's (commit/handlers/external.py: ``claim_staged``).

What must hold: one append asks the store three things (the latest row for
the listing, then reserve and flip), nothing more; a create the store refuses
falls back to the long way with the staged manifest kept, and the long way
says what is wrong; a table recreated under a writer is refused; every row
lands exactly once."""

from __future__ import annotations

import collections
import dataclasses
import os

import pyarrow as pa
import pytest
from tessera_test_services import namespace_warehouse

from tessera.catalog.namespace import TesseraNamespace
from tessera.commit.handlers import external
from tessera.format.table import manifest as mf
from tessera.stores.redis_store import RedisManifestStore
from tessera.stores.sql_store import SqlManifestStore

lance = pytest.importorskip("lance")
lance_namespace = pytest.importorskip("lance_namespace")
from lance_namespace import errors as nserr  # noqa: E402

_CALLS = ("reserve", "flip", "adopt", "get", "latest", "versions_after", "delete_table")


@pytest.fixture(params=["catalog", "redis", "postgres"])
def warehouse(request, tmp_path):
    with namespace_warehouse(request, tmp_path, request.param, "b") as got:
        yield got


@pytest.fixture
def store_calls(monkeypatch) -> collections.Counter:
    """Every manifest-store request of this process, by method (each is one round trip)."""
    counts: collections.Counter = collections.Counter()
    for cls in (RedisManifestStore, SqlManifestStore):
        for name in _CALLS:
            real = getattr(cls, name)

            def counted(self, *args, _real=real, _name=name, **kwargs):
                counts[_name] += 1
                return _real(self, *args, **kwargs)

            monkeypatch.setattr(cls, name, counted)
    return counts


def _col(i: list[int]) -> pa.Table:
    return pa.table({"i": pa.array(i, pa.int64())})


def _rows(cat, name: str) -> list[int]:
    return sorted(cat.load_table(name).to_arrow().column("i").to_pylist())


def test_an_append_asks_the_store_three_times(warehouse, store_calls):
    """describe + list + create of one pylance append: the latest row once,
    then reserve and flip; the rows are read nowhere else."""
    props, cat = warehouse
    ns = lance_namespace.connect("tessera", props)
    tid = ["b", "t"]
    lance.write_dataset(_col([0]), namespace_client=ns, table_id=tid, mode="create")
    lance.write_dataset(_col([1]), namespace_client=ns, table_id=tid, mode="append")
    store_calls.clear()
    for i in range(2, 7):
        lance.write_dataset(_col([i]), namespace_client=ns, table_id=tid, mode="append")
    assert dict(store_calls) == {"latest": 5, "reserve": 5, "flip": 5}
    assert _rows(cat, "b.t") == list(range(7))
    ns.close()


class _Hooked(TesseraNamespace):
    """Runs ``before(namespace, request)`` just before each
    create_table_version and records the store requests each create made."""

    def __init__(self, counts: collections.Counter, before=None, **props: str) -> None:
        super().__init__(**props)
        self.counts, self.before = counts, before
        self.creates: list[dict[str, int]] = []

    def create_table_version(self, request):  # type: ignore[override]
        if not isinstance(request, lance_namespace.CreateTableVersionRequest):
            request = lance_namespace.CreateTableVersionRequest(**dict(request))  # pylance may pass a dict
        if self.before is not None:
            self.before(self, request)
        self.counts.clear()
        try:
            return super().create_table_version(request)
        finally:
            self.creates.append(dict(self.counts))


def _forget(ns: TesseraNamespace, request) -> None:
    """As if pylance's listing ran in another process: no incarnation remembered."""
    external._SEEN.clear()


def _staged(request) -> str:
    path = request.manifest_path
    return path if os.path.isabs(path) else "/" + path


def _restage(request, **changes) -> lance_namespace.CreateTableVersionRequest:
    """A copy of the request's staged manifest with ``version`` and/or the
    incarnation in its config changed, staged under a name of its own."""
    path = _staged(request)
    with open(path, "rb") as f:
        mfile = mf.read_manifest(f.read())
    manifest, txn = mfile.manifest, mfile.transaction
    version = changes.get("version", manifest.version)
    manifest.version = version
    if "incarnation" in changes:
        manifest.config["tessera.commit.incarnation"] = changes["incarnation"]
    data = mf.write_manifest(manifest, txn)
    versions = os.path.dirname(path)
    new = os.path.join(versions, f"{mf.manifest_name(version)}-forged")
    with open(new, "wb") as f:
        f.write(data)
    return lance_namespace.CreateTableVersionRequest(
        id=request.id, version=version, manifest_path=new.lstrip("/"), naming_scheme=request.naming_scheme
    )


def test_a_tessera_table_claims_the_incarnation_its_staged_manifest_carries(warehouse, store_calls):
    """A table Tessera created records its coordinator and incarnation in
    every manifest and pylance's staged manifest carries them: the create
    claims that incarnation with nothing remembered (reserve and flip only)."""
    props, cat = warehouse
    cat.create_table("b.own", _col([0]), commit_store=props["commit_store"])
    ns = _Hooked(store_calls, _forget, **props)
    for i in (1, 2):
        lance.write_dataset(_col([i]), namespace_client=ns, table_id=["b", "own"], mode="append")
    assert ns.creates == [{"reserve": 1, "flip": 1}] * 2
    assert _rows(cat, "b.own") == [0, 1, 2]
    ns.close()


def test_with_no_incarnation_known_the_long_way_commits(warehouse, store_calls):
    """A table pylance created through the namespace has manifests without
    Tessera's entries; with nothing remembered the create reads the latest
    row and commits as before."""
    props, cat = warehouse
    ns = _Hooked(store_calls, _forget, **props)
    tid = ["b", "plain"]
    lance.write_dataset(_col([0]), namespace_client=ns, table_id=tid, mode="create")
    lance.write_dataset(_col([1]), namespace_client=ns, table_id=tid, mode="append")
    created = ns.creates[-1]
    assert created["latest"] >= 1 and created["reserve"] == 1 and created["flip"] == 1, created
    assert _rows(cat, "b.plain") == [0, 1]
    ns.close()


def test_a_wrong_remembered_incarnation_is_refused_by_the_store_and_the_long_way_commits(warehouse, store_calls):
    """The incarnation remembered is not the table's (it was recreated since,
    as another process saw): the store refuses the reservation, nothing is
    written, the staged manifest is kept, and the long way commits it."""
    props, cat = warehouse

    def poison(ns, request) -> None:
        for key, seen in list(external._SEEN.items()):
            external._SEEN[key] = dataclasses.replace(seen, incarnation="an-incarnation-long-gone")

    ns = _Hooked(store_calls, poison, **props)
    tid = ["b", "poisoned"]
    lance.write_dataset(_col([0]), namespace_client=ns, table_id=tid, mode="create")
    lance.write_dataset(_col([1]), namespace_client=ns, table_id=tid, mode="append")
    created = ns.creates[-1]
    assert created["reserve"] == 2 and created["flip"] == 1, created  # refused, then the long way's
    assert _rows(cat, "b.poisoned") == [0, 1]
    assert cat.load_table("b.poisoned").version == 2
    lance.write_dataset(_col([2]), namespace_client=ns, table_id=tid, mode="append")
    assert _rows(cat, "b.poisoned") == [0, 1, 2]
    ns.close()


def test_an_out_of_order_create_is_refused_with_its_staged_manifest_kept(warehouse, store_calls):
    """A create for the version after next: the store refuses its
    predecessor, the long way says "out of order" (a conflict, which pylance
    retries), nothing is committed and the staged file stays for a clean-up."""
    props, cat = warehouse
    refused: list[str] = []

    def skip_ahead(ns, request) -> None:
        if refused:
            return
        forged = _restage(request, version=request.version + 1)
        with pytest.raises(nserr.ConcurrentModificationError, match="out of order") as info:
            TesseraNamespace.create_table_version(ns, forged)
        refused.append(str(info.value))
        assert os.path.exists(_staged(forged))

    ns = _Hooked(store_calls, skip_ahead, **props)
    tid = ["b", "ahead"]
    lance.write_dataset(_col([0]), namespace_client=_Hooked(store_calls, **props), table_id=tid, mode="create")
    lance.write_dataset(_col([1]), namespace_client=ns, table_id=tid, mode="append")
    assert refused and cat.load_table("b.ahead").version == 2
    assert _rows(cat, "b.ahead") == [0, 1]
    ns.close()


def test_a_staged_manifest_of_another_incarnation_is_refused(warehouse, store_calls):
    """A staged manifest built on another incarnation of the table (it was
    dropped and recreated under the writer): the short way claims the staged
    manifest's incarnation (never the remembered one, which is the table's),
    the store refuses it and the long way reports the incarnations."""
    props, cat = warehouse
    cat.create_table("b.other", _col([0]), commit_store=props["commit_store"])
    seen: list[str] = []

    def other_incarnation(ns, request) -> None:
        if seen:
            return
        forged = _restage(request, incarnation="f" * 32)
        with pytest.raises(nserr.InvalidTableStateError, match="incarnation") as info:
            TesseraNamespace.create_table_version(ns, forged)
        seen.append(str(info.value))

    ns = _Hooked(store_calls, other_incarnation, **props)
    lance.write_dataset(_col([1]), namespace_client=ns, table_id=["b", "other"], mode="append")
    assert seen and cat.load_table("b.other").version == 2
    assert _rows(cat, "b.other") == [0, 1]
    ns.close()
