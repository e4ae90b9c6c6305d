"""The latest version as the namespace plugin answers pylance before each
append, and the lineage check of the commit that follows, when both use what
this process saw last instead of listing ``_versions/`` and parsing the latest
manifest again (commit/managed.py: ``latest_to_build_on``, ``_current``).

What must hold: a version committed by anyone else (pylance by URI, another
process), a clean-up, a tag, a hint file that lies and a table dropped and
recreated at the same place are all seen; no row is lost or doubled and a
writer of another incarnation is refused."""

from __future__ import annotations

import datetime as dt
import json
import os

import pyarrow as pa
import pytest

import tessera
from tessera.catalog.namespace import TesseraNamespace
from tessera.format.table import manifest as mf
from tessera.stores.local import LocalObjectStore

lance = pytest.importorskip("lance")
lance_namespace = pytest.importorskip("lance_namespace")
from lance_namespace import errors as nserr  # noqa: E402


def _col(i: list[int]) -> pa.Table:
    return pa.table({"i": pa.array(i, pa.int64())})


class _Spy(TesseraNamespace):
    """Records each create_table_version's version and outcome, and what each list_table_versions answered."""

    def __init__(self, **props: str) -> None:
        super().__init__(**props)
        self.creates: list[tuple[int, str]] = []
        self.answers: list[int] = []

    def create_table_version(self, request):  # type: ignore[override]
        version = int(dict(request)["version"]) if not hasattr(request, "version") else int(request.version)
        try:
            out = super().create_table_version(request)
        except nserr.LanceNamespaceError as exc:
            self.creates.append((version, type(exc).__name__))
            raise
        self.creates.append((version, "ok"))
        return out

    def list_table_versions(self, request):  # type: ignore[override]
        out = super().list_table_versions(request)
        self.answers.extend(v.version for v in out.versions)
        return out


@pytest.fixture
def plugin(tmp_path):
    ns = _Spy(warehouse=str(tmp_path / "wh"), commit_store="native")
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["s"]))
    cat = tessera.connect(warehouse=str(tmp_path / "wh"))
    yield ns, cat
    cat.close()
    ns.close()


def _append(ns, i: int):
    return lance.write_dataset(_col([i]), namespace_client=ns, table_id=["s", "t"], mode="append")


def _ids(cat) -> list[int]:
    return sorted(cat.load_table("s.t").to_arrow().column("i").to_pylist())


def _seen_then_gone_by_uri(ns, cat) -> str:
    """Versions 1 and 2 through the plugin (it remembers 2), 2 tagged, 3 and
    4 by pylance by URI, then a clean-up keeps only 2 (tag) and 4 (latest);
    the table's location."""
    lance.write_dataset(_col([1]), namespace_client=ns, table_id=["s", "t"], mode="create")
    ds = _append(ns, 2)
    ds.tags.create("keep", 2)
    uri = cat.table_info("s.t")["uri"]
    lance.write_dataset(_col([3]), uri, mode="append")
    ds = lance.write_dataset(_col([4]), uri, mode="append")
    ds.cleanup_old_versions(older_than=dt.timedelta(0), error_if_tagged_old_versions=False)
    return uri


def test_an_append_after_foreign_commits_and_a_cleanup_builds_on_the_true_latest(plugin):
    """The version seen last (2) is kept by a tag; pylance by URI commits 3 and
    4 and a clean-up removes 1 and 3: version 2 is there and 3 is not, but the
    hint file says 4, so the plugin lists and answers 4 (no refused commit)."""
    ns, cat = plugin
    uri = _seen_then_gone_by_uri(ns, cat)
    names = os.listdir(os.path.join(uri, "_versions"))
    assert sorted(v for v, _ in (mf.parse_manifest_name(n) or (0, 0) for n in names) if v) == [2, 4]
    ns.creates.clear()
    ns.answers.clear()
    assert _append(ns, 5).version == 5
    assert ns.answers == [4] and ns.creates == [(5, "ok")]
    assert _ids(cat) == [1, 2, 3, 4, 5]


def test_a_lying_hint_costs_at_most_a_refused_commit_never_a_row(plugin):
    """The same, but the hint file still names version 2 (as if the writer of 4
    had stopped before rewriting it): the plugin answers 2, the commit built on
    it is refused as out of order (nothing committed), and the listing that
    refused it corrects what the plugin remembers: every row is there once."""
    ns, cat = plugin
    uri = _seen_then_gone_by_uri(ns, cat)
    with open(os.path.join(uri, "_versions", "latest_version_hint.json"), "w") as f:
        json.dump({"version": 2}, f)
    ns.creates.clear()
    ns.answers.clear()
    try:
        landed = _append(ns, 5).version
    except OSError:  # pylance gives up when it cannot read the refused version back: nothing was committed
        landed = None
    assert ns.answers[0] == 2 and ns.creates[0] == (3, "ConcurrentModificationError")
    assert cat.load_table("s.t").version == (landed or 4)
    if landed is None:
        assert _append(ns, 5).version == 5  # asked again: the true latest
    assert _ids(cat) == [1, 2, 3, 4, 5]
    assert ns.answers[-1] == 4


def test_a_table_recreated_in_its_place_refuses_the_old_incarnations_commit(plugin):
    """The plugin accepted version 2 of a table (and keeps its bytes for the
    next lineage check).  The table is dropped and recreated at the same
    location, with its own version 2 of the same size: a commit that carries
    the old table's incarnation is refused, one of the new table's accepted."""
    from lance_namespace import CreateTableVersionRequest

    from tessera.commit.handlers.namespace_client import root_relative
    from tessera.commit.lineage import CONFIG_INCARNATION
    from tessera.commit.operation import new_transaction
    from tessera.format.table import paths

    ns, cat = plugin
    tid = ["s", "t"]

    def send(t, version: int, incarnation: str, elsewhere: bool = False) -> None:
        """A staged manifest of ``version`` built on ``t``'s latest, claiming
        ``incarnation``, sent to the plugin (``elsewhere``: committed as
        another process's plugin would, this one knowing nothing of it)."""
        base = t.snapshot.mfile
        m = type(base.manifest)()
        m.CopyFrom(base.manifest)
        m.version = version
        m.config[CONFIG_INCARNATION] = incarnation
        m.timestamp.nanos = 999_999_999  # a varint of one length: both tables' version 2 have one size
        txn = new_transaction(version - 1)
        txn.append.SetInParent()
        final = paths.manifest_path(version, mf.NamingScheme.V2)
        data = mf.write_manifest(m, txn, base.index_section)
        if elsewhere:
            t.store.put_if_not_exists(final, data)
            return
        staged = paths.staged_manifest_path(final)
        t.store.put(staged, data)
        ns.create_table_version(
            CreateTableVersionRequest(
                id=tid, version=version, manifest_path=f"{root_relative(t.store)}/{staged}", naming_scheme="V2"
            )
        )

    cat.create_table("s.t", _col([1]))
    old = cat.load_table("s.t")
    old_incarnation = old.snapshot.mfile.manifest.config[CONFIG_INCARNATION]
    send(old, 2, old_incarnation)  # accepted here: its bytes are remembered
    location = cat.table_info("s.t")["uri"]
    size = os.path.getsize(os.path.join(location, "_versions", "18446744073709551613.manifest"))
    cat.drop_table("s.t", purge=True)
    cat.create_table("s.t", _col([10]))
    new = cat.load_table("s.t")
    new_incarnation = new.snapshot.mfile.manifest.config[CONFIG_INCARNATION]
    assert cat.table_info("s.t")["uri"] == location and new_incarnation != old_incarnation
    send(new, 2, new_incarnation, elsewhere=True)  # the new table's version 2, made as the old one's was
    assert os.path.getsize(os.path.join(location, "_versions", "18446744073709551613.manifest")) == size
    with pytest.raises(nserr.InvalidTableStateError, match="dropped and recreated"):
        send(cat.load_table("s.t"), 3, old_incarnation)
    assert cat.load_table("s.t").version == 2
    send(cat.load_table("s.t"), 3, new_incarnation)
    assert cat.load_table("s.t").version == 3 and _ids(cat) == [10]


def test_an_append_lists_the_versions_once_and_parses_one_manifest(plugin, monkeypatch):
    """Per pylance append through the plugin on local disk: ``_versions/`` is
    listed once (by the commit's order check; the latest pylance builds on is
    confirmed by the hint file and two stats) and one manifest is parsed (the
    staged one: the latest is compared byte for byte with the one accepted)."""
    ns, cat = plugin
    lance.write_dataset(_col([0]), namespace_client=ns, table_id=["s", "t"], mode="create")
    listings: list[str] = []
    parses: list[str] = []
    real_list, real_read = LocalObjectStore.list, mf.read_manifest
    monkeypatch.setattr(LocalObjectStore, "list", lambda self, p: listings.append(p) or real_list(self, p))
    monkeypatch.setattr(mf, "read_manifest", lambda data, where="": parses.append(where) or real_read(data, where))
    _append(ns, 1)  # learns the latest
    for i in range(2, 6):
        listings.clear()
        parses.clear()
        _append(ns, i)
        assert listings == ["_versions"], listings
        assert len(parses) == 1 and ".manifest-" in parses[0], parses
    assert _ids(cat) == [0, 1, 2, 3, 4, 5]


_WRITER = """
import sys
import lance, lance_namespace, pyarrow as pa
import tessera  # registers "tessera"
warehouse, w, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ns = lance_namespace.connect("tessera", {"warehouse": warehouse, "commit_store": "native"})
for k in range(n):
    lance.write_dataset(pa.table({"i": pa.array([1000 * w + k], pa.int64())}),
                        namespace_client=ns, table_id=["s", "t"], mode="append")
ns.close()
"""


def test_processes_appending_through_their_own_plugins_and_by_uri_land_every_row_once(plugin):
    """Three processes, each with its own plugin (and so its own idea of the
    version seen last), and pylance by URI in this one, append at once: every
    version the others made refutes what a plugin remembers, and every row is
    in the table exactly once."""
    import subprocess
    import sys

    ns, cat = plugin
    lance.write_dataset(_col([-1]), namespace_client=ns, table_id=["s", "t"], mode="create")
    warehouse = os.path.dirname(os.path.dirname(cat.table_info("s.t")["uri"]))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, warehouse, str(w), "8"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for w in (1, 2, 3)
    ]
    uri = cat.table_info("s.t")["uri"]
    for k in range(8):
        lance.write_dataset(_col([4000 + k]), uri, mode="append")
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()[-3000:]
    assert _append(ns, 9999).version == 34
    assert _ids(cat) == sorted([-1, 9999] + [1000 * w + k for w in (1, 2, 3, 4) for k in range(8)])
