"""Long-lived LanceDB handles across Tessera's commits (issue 25, items 6 and 7).

A LanceDB user opens a table once and keeps the handle; Tessera's writers
commit meanwhile.  LanceDB's core (Lance 13) rebases a write on every version
committed since its handle's, reading each one's transaction file, so the
handle's ``add`` and ``delete`` must go through on top of Tessera's commits,
and its searches (with ``read_consistency_interval=0``) must see them.  Through
the ``tessera`` namespace plugin (native and catalog-coordinated tables) and
through ``tessera serve`` with LanceDB's REST client.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest
from tessera_test_interop import assert_same, lancedb_ivf_pq, lancedb_table, rows, vector_of

CASES = [("plugin", "native"), ("plugin", "catalog"), ("rest", None)]


def _ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


@pytest.mark.parametrize("how,store", CASES, ids=[f"{h}-{s or 'server'}" for h, s in CASES])
def test_handles_opened_before_tessera_commits_keep_working(served, how, store):
    ns = served.namespace(f"handles_{how}_{store or 'server'}")
    name = f"{ns}.t"
    db = served.lancedb(how, store)
    writer = db.create_table("t", rows(0, 300), namespace_path=[ns])
    assert writer.version == 1
    lancedb_ivf_pq(writer)
    watcher = lancedb_table(served.lancedb(how, store, read_consistency_interval=dt.timedelta(0)), name)
    assert watcher.count_rows() == 300
    model = set(range(300))

    t = served.cat.load_table(name)
    for round_ in range(3):
        base = 1000 * (round_ + 1)
        # Tessera commits: an append, a delete, an update and a merge_insert
        t.append(rows(base, 10))
        t.delete(f"id = {base + 1} OR id = {round_}")
        t.update({"s": "'by tessera'"}, where=f"id = {base + 2}")
        t.merge_insert(rows(base + 8, 4), on="id")  # 2 matched, 2 new
        model |= set(range(base, base + 12))
        model -= {base + 1, round_}
        # the watcher sees them at once; its search finds the new (unindexed) rows, never the deleted ones
        assert watcher.count_rows() == len(model), f"round {round_}"
        hit = watcher.search(vector_of(base + 3)).limit(3).to_arrow()
        assert hit.column("id")[0].as_py() == base + 3
        assert round_ not in watcher.search(vector_of(round_)).limit(5).to_arrow().column("id").to_pylist()
        # the writer's handle, opened before all of it, adds and deletes on top
        writer.add(rows(base + 500, 3))
        model |= {base + 500, base + 501, base + 502}
        writer.delete(f"id = {base + 501}")
        model.discard(base + 501)
        assert writer.version == t.refresh().version
        assert writer.count_rows() == len(model)
        assert writer.search(vector_of(base + 502)).limit(1).to_arrow().column("id")[0].as_py() == base + 502
    writer.update(where="id = 1002", values={"s": "by lancedb"})
    # every commit is in the history once, versions contiguous, and everyone reads the same rows
    t = served.cat.load_table(name)
    versions = [v["version"] for v in t.versions()]
    assert versions == list(range(1, t.version + 1))
    ours = t.to_arrow()
    assert _ids(ours) == sorted(model)
    assert ours.filter(pa.compute.equal(ours.column("id"), 1002)).column("s").to_pylist() == ["by lancedb"]
    assert ours.filter(pa.compute.equal(ours.column("id"), 2002)).column("s").to_pylist() == ["by tessera"]
    writer.checkout_latest()
    assert_same(ours, writer.to_arrow(), "LanceDB's writer handle")
    assert_same(ours, watcher.to_arrow(), "LanceDB's watcher handle")
    import lance

    assert_same(ours, lance.dataset(t.uri).to_table(), "pylance 14")
    assert writer.version == t.version
    assert np.unique(ours.column("id").to_numpy()).size == ours.num_rows
