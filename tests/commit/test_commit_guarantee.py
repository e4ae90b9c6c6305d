"""The commit guarantee on every coordinator: a writer holding a dropped and
recreated table's view is refused (nothing lands in the new table), and
writers outside an external store (pylance by URI) are adopted, never
overwritten and never mistaken for ours."""

from __future__ import annotations

import multiprocessing as mp
import os
import uuid

import numpy as np
import pyarrow as pa
import pytest
from tessera_test_services import create_lance_dynamodb_table

from tessera.catalog import Table
from tessera.catalog import errors as E
from tessera.stores.registry import open_manifest_store, open_object_store
from tessera.stores.uri import normalize_table_uri

COORDINATORS = ["native-local", "native-s3", "redis", "sqlite", "postgres", "mysql", "dynamodb"]


def _rows(start: int, n: int = 2) -> pa.Table:
    return pa.table({"i": pa.array(np.arange(start, start + n), pa.int64())})


class Setup:
    """A table location and coordinator of one kind, plus pylance's view of it."""

    def __init__(self, kind: str, request, tmp_path) -> None:
        self.kind = kind
        self.opts: dict | None = None
        self.lance_opts: dict | None = None
        if kind in ("native-s3", "dynamodb"):
            moto = request.getfixturevalue("moto_server")
            bucket = moto.new_bucket()
            self.uri = f"s3://{bucket}/t"
            self.opts = moto.storage_options()
            self.lance_opts = moto.lance_storage_options()
        else:
            self.uri = str(tmp_path / "t")
        if kind.startswith("native"):
            self.store_url = None
        elif kind == "sqlite":
            self.store_url = f"sqlite:///{tmp_path}/commits.db"
        elif kind == "dynamodb":
            from tessera_test_services import new_dynamodb_store_url

            self.store_url = new_dynamodb_store_url(request.getfixturevalue("moto_server"))
        else:
            self.store_url = request.getfixturevalue(
                {"redis": "redis_url", "postgres": "postgres_url", "mysql": "mysql_url"}[kind]
            )

    def create(self, data) -> Table:
        return Table.create(self.uri, data, commit_store=self.store_url, storage_options=self.opts)

    def open(self, **kw) -> Table:
        return Table.open(self.uri, commit_store=self.store_url, storage_options=self.opts, **kw)

    def purge(self) -> None:
        """What ``Catalog.drop_table(purge=True)`` does: every object, every row."""
        obj = open_object_store(self.uri, self.opts)
        for path, _, _ in obj.walk(""):
            obj.delete(path)
        if self.store_url is not None:
            ms = open_manifest_store(self.store_url)
            ms.delete_table(normalize_table_uri(self.uri))
            ms.close()

    def cleanup(self) -> None:
        if self.store_url is not None:
            try:
                self.purge()
            except Exception:  # noqa: BLE001 - best effort in the shared databases
                pass


@pytest.fixture(params=COORDINATORS)
def setup(request, tmp_path):
    s = Setup(request.param, request, tmp_path)
    yield s
    s.cleanup()


def _ids(t: Table) -> list[int]:
    return sorted(t.to_arrow().column("i").to_pylist())


@pytest.mark.parametrize("new_versions", [1, 4, 7])
def test_stale_writer_is_refused_after_drop_and_recreate(setup, new_versions, lance):
    old = setup.create(_rows(0))
    for k in range(3):
        old.append(_rows(100 + 10 * k))
    stale = setup.open()
    assert stale.version == 4
    setup.purge()
    new = setup.create(_rows(1000))
    for k in range(new_versions - 1):
        new.append(_rows(2000 + 10 * k))
    expected = _ids(new)
    with pytest.raises(E.IncarnationMismatchError):
        stale.append(_rows(9000))
    with pytest.raises(E.IncarnationMismatchError):
        stale.delete("i >= 0")
    fresh = setup.open()
    assert fresh.version == new_versions, "the stale writer added a version"
    assert _ids(fresh) == expected
    assert [v["version"] for v in fresh.versions()] == list(range(1, new_versions + 1))
    # an independent reader agrees
    ds = lance.dataset(setup.uri, storage_options=setup.lance_opts)
    assert ds.version == new_versions and ds.count_rows() == len(expected)
    # the new table goes on working
    fresh.append(_rows(5000))
    assert setup.open().count_rows() == len(expected) + 2


def test_tables_from_before_incarnations_adopt_one_on_first_write(tmp_path):
    """A native table whose manifests carry no incarnation keeps working; its
    first write records one, which later writers then check."""
    import lance as lance_mod

    from tessera.format.table import manifest as mf

    uri = str(tmp_path / "legacy")
    lance_mod.write_dataset(_rows(0), uri)  # pylance: no Tessera config at all
    a, b = Table.open(uri), Table.open(uri)
    a.append(_rows(10))
    inc = a.manifest.config["tessera.commit.incarnation"]
    b.append(_rows(20))  # rebased over a's version: adopts its incarnation
    assert b.manifest.config["tessera.commit.incarnation"] == inc
    assert _ids(Table.open(uri)) == [0, 1, 10, 11, 20, 21]
    assert mf.FLAG_TABLE_CONFIG & Table.open(uri).manifest.writer_feature_flags


def test_cleaned_up_base_version_reruns_on_the_latest(tmp_path):
    """The version a writer read was removed by clean-up (same table): the
    operation is re-run on the latest version, not refused."""
    import datetime as dt

    uri = str(tmp_path / "t")
    t = Table.create(uri, _rows(0))
    stale = Table.open(uri)
    for k in range(3):
        t.append(_rows(10 * (k + 1)))
    t.cleanup(older_than=dt.timedelta(0), orphan_age=None)
    assert 1 not in [v["version"] for v in Table.open(uri).versions()]
    stale.append(_rows(100))
    assert _ids(Table.open(uri)) == [0, 1, 10, 11, 20, 21, 30, 31, 100, 101]


# ------------------------------------------------------- writers outside the store

EXTERNAL = ["redis", "sqlite", "postgres", "mysql", "dynamodb"]


@pytest.fixture(params=EXTERNAL)
def external(request, tmp_path):
    s = Setup(request.param, request, tmp_path)
    yield s
    s.cleanup()


def _lance_append(lance, setup: Setup, start: int) -> int:
    ds = lance.write_dataset(_rows(start), setup.uri, mode="append", storage_options=setup.lance_opts)
    return ds.version


def test_foreign_writer_by_uri_is_adopted_never_overwritten(external, lance):
    """pylance commits by URI around the store; Tessera writers that held an
    older view reserve a version pylance already has: the foreign manifest is
    adopted (the store row now names pylance's transaction), the Tessera
    commit is rebased and lands at the next version, and nothing is lost."""
    t = external.create(_rows(0))
    a = external.open()
    assert _lance_append(lance, external, 100) == 2  # around the store
    a.append(_rows(200))  # reserves v2, finds pylance's manifest there: adopted, rebased to v3
    assert a.version == 3
    ms = open_manifest_store(external.store_url)
    key = normalize_table_uri(external.uri)
    try:
        row2 = ms.get(key, 2)
        assert row2 is not None and row2.is_final
        from tessera.format.table import manifest as mf

        theirs = mf.read_manifest(open_object_store(external.uri, external.opts).read(row2.path))
        assert theirs.transaction.uuid == row2.transaction_uuid  # pylance's transaction, not ours
        assert lance.dataset(external.uri, storage_options=external.lance_opts).version == 3
        # pylance commits again past the store's latest: a Tessera reader adopts it
        assert _lance_append(lance, external, 300) == 4
        r = external.open()
        assert r.version == 4 and ms.get(key, 4) is not None
        t.append(_rows(400))  # t still holds v1: rebased over 2, 3, 4
        assert t.version == 5
        assert _lance_append(lance, external, 500) == 6
        final = external.open()
        expected = [0, 1, 100, 101, 200, 201, 300, 301, 400, 401, 500, 501]
        assert _ids(final) == expected
        assert [v["version"] for v in final.versions()] == [1, 2, 3, 4, 5, 6]
        assert [r.version for r in ms.versions_after(key, 0)] == [1, 2, 3, 4, 5, 6]
        ds = lance.dataset(external.uri, storage_options=external.lance_opts)
        assert ds.version == 6 and sorted(ds.to_table().column("i").to_pylist()) == expected
        for v in range(1, 7):  # the two readers agree on every version
            assert sorted(external.open(version=v).to_arrow().column("i").to_pylist()) == sorted(
                lance.dataset(external.uri, version=v, storage_options=external.lance_opts)
                .to_table()
                .column("i")
                .to_pylist()
            )
    finally:
        ms.close()


def _tessera_writer(uri, store_url, opts, w, n, q):
    try:
        t = Table.open(uri, commit_store=store_url, storage_options=opts)
        for k in range(n):
            t.append(_rows(10_000 * (w + 1) + 10 * k))
        q.put((w, "ok"))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        q.put((w, f"{type(exc).__name__}: {exc}"))


_LANCE_WRITER = """
import sys, lance, numpy as np, pyarrow as pa
uri, w, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for k in range(n):
    start = 10_000 * (w + 1) + 10 * k
    for attempt in range(50):  # pylance's own retries can run out under contention: try again
        try:
            lance.write_dataset(pa.table({"i": pa.array(np.arange(start, start + 2), pa.int64())}), uri, mode="append")
            break
        except OSError as exc:
            if attempt == 49 or not any(s in str(exc).lower() for s in ("conflict", "retry", "exists")):
                raise
"""


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_tessera_and_pylance_writers_race_on_an_external_table(kind, request, tmp_path):

    s = Setup(kind, request, tmp_path)
    try:
        s.create(_rows(0))
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        n = 6
        procs = [ctx.Process(target=_tessera_writer, args=(s.uri, s.store_url, s.opts, w, n, q)) for w in (0, 1)]
        import subprocess
        import sys

        pylance = subprocess.Popen(
            [sys.executable, "-c", _LANCE_WRITER, s.uri, "2", str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for p in procs:
            p.start()
        results = dict(q.get(timeout=120) for _ in procs)
        for p in procs:
            p.join(30)
        out, _ = pylance.communicate(timeout=120)
        assert pylance.returncode == 0, out
        assert all(r == "ok" for r in results.values()), results
        final = s.open()
        expected = sorted([0, 1] + [10_000 * (w + 1) + 10 * k + j for w in range(3) for k in range(n) for j in (0, 1)])
        assert _ids(final) == expected  # every acknowledged commit exactly once
        assert [v["version"] for v in final.versions()] == list(range(1, 3 * n + 2))
        import lance  # after the forks: pylance is not fork-safe

        ds = lance.dataset(s.uri)
        assert ds.version == 3 * n + 1 and ds.count_rows() == len(expected)
        staged = [x for x in os.listdir(os.path.join(s.uri, "_versions")) if ".manifest-" in x]
        assert staged == []
    finally:
        s.cleanup()


def test_pylance_with_its_own_dynamodb_commit_store_is_adopted(request, tmp_path, lance):
    """pylance's ``s3+ddb://`` commit store is a writer outside Tessera's store
    (its items are keyed differently): its commits are adopted by Tessera's
    DynamoDB store, and Tessera's land after them."""
    s = Setup("dynamodb", request, tmp_path)
    moto = request.getfixturevalue("moto_server")
    ddb = moto.client("dynamodb")
    lance_table = f"lance-{uuid.uuid4().hex[:8]}"
    create_lance_dynamodb_table(ddb, lance_table)
    ddb_uri = s.uri.replace("s3://", "s3+ddb://", 1) + f"?ddbTableName={lance_table}"
    ddb_opts = {**s.lance_opts, "dynamodb_endpoint": moto.endpoint}
    try:
        t = s.create(_rows(0))
        ds = lance.write_dataset(_rows(100), ddb_uri, mode="append", storage_options=ddb_opts)
        assert ds.version == 2
        t.append(_rows(200))  # v2 is pylance's: adopted, ours lands at v3
        assert t.version == 3
        ds = lance.write_dataset(_rows(300), ddb_uri, mode="append", storage_options=ddb_opts)
        assert ds.version == 4
        final = s.open()
        assert final.version == 4
        assert _ids(final) == [0, 1, 100, 101, 200, 201, 300, 301]
        assert [v["version"] for v in final.versions()] == [1, 2, 3, 4]
        plain = lance.dataset(s.uri, storage_options=s.lance_opts)
        assert plain.version == 4 and plain.count_rows() == 8
    finally:
        s.cleanup()
        ddb.delete_table(TableName=lance_table)
