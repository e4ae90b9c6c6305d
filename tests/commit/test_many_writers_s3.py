"""8 processes x 8 appends on one table on S3 (moto), once per coordinator:
every call succeeds, 64 new versions, contiguous, nothing lost or doubled,
no staged manifest left behind.  (8 x 25 took 25-60 s per coordinator on
moto, a sixth of the whole test run, and 8 x 12 10-18 s; 8 rounds race every
writer just as hard: all 8 start together and every round has 7 losers.
The three SQL stores share one commit code path (SQLAlchemy; only the
dialect differs): 4 rounds each, 16-26 s of the suite's time less.
tests/bench/bench_commit.py measures throughput.)"""

from __future__ import annotations

import multiprocessing as mp
import uuid

import pyarrow as pa
import pytest

from tessera.catalog import Table

WRITERS = 8
#: rounds (appends per writer) per coordinator
APPENDS = {"native": 8, "dynamodb": 8, "redis": 8, "postgres": 4, "mysql": 4, "sqlite": 4}


@pytest.fixture(params=["native", "dynamodb", "redis", "postgres", "mysql", "sqlite"])
def coordinator(request, moto_server, tmp_path):
    kind = request.param
    if kind == "native":
        return None
    if kind == "dynamodb":
        from deploy.provision_dynamodb import create_table

        name = f"tessera-{uuid.uuid4().hex[:8]}"
        create_table(name, region="us-east-1", endpoint_url=moto_server.endpoint)
        return f"dynamodb:///{name}?region=us-east-1&endpoint_url={moto_server.endpoint}"
    if kind == "redis":
        return request.getfixturevalue("redis_url")
    if kind == "postgres":
        return request.getfixturevalue("postgres_url")
    if kind == "mysql":
        return request.getfixturevalue("mysql_url")
    return f"sqlite:///{tmp_path}/commits.db"


def _writer(uri, store, opts, w, q, appends):
    try:
        t = Table.open(uri, commit_store=store, storage_options=opts)
        for k in range(appends):
            t.append(
                pa.table(
                    {
                        "w": pa.array([w, w], pa.int32()),
                        "k": pa.array([k, k], pa.int32()),
                        "half": pa.array([0, 1], pa.int8()),
                    }
                )
            )
        q.put((w, "ok"))
    except BaseException as exc:  # noqa: BLE001 - report to the parent
        q.put((w, f"{type(exc).__name__}: {exc}"))
        raise


def test_eight_writers_eight_appends(request, moto_server, coordinator):
    appends = APPENDS[request.node.callspec.params["coordinator"]]
    bucket = moto_server.new_bucket()
    uri = f"s3://{bucket}/many"
    opts = moto_server.storage_options()
    Table.create(
        uri,
        pa.schema([("w", pa.int32()), ("k", pa.int32()), ("half", pa.int8())]),
        commit_store=coordinator,
        storage_options=opts,
    )
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(uri, coordinator, opts, w, q, appends)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    results = [q.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
    assert sorted(results) == [(w, "ok") for w in range(WRITERS)], results
    t = Table.open(uri, commit_store=coordinator, storage_options=opts)
    assert t.version == 1 + WRITERS * appends
    hist = t.versions()
    assert [h["version"] for h in hist] == list(range(1, t.version + 1))  # contiguous
    rows = t.to_arrow()
    keys = list(zip(rows.column("w").to_pylist(), rows.column("k").to_pylist(), rows.column("half").to_pylist()))
    assert len(keys) == len(set(keys)) == WRITERS * appends * 2
    assert set(keys) == {(w, k, h) for w in range(WRITERS) for k in range(appends) for h in (0, 1)}
    staged = [n for n in t.store.list("_versions") if ".manifest-" in n]
    assert staged == []
