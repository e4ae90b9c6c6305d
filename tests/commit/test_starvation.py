"""A slow writer is never starved by fast ones (issue 28).

Two processes append to one table as fast as they can while a third writer,
whose every store reply comes back 50 ms late (a loopback delay proxy, the
one fake: a real store cannot be made far away), appends five times: each of
its appends must be acknowledged within 20 s, and every acknowledged row is
in the table exactly once.

On local disk the writers of one machine take turns through the commit lock
and the slow writer needs only to catch up in a constant number of round
trips (Redis, SQLite).  On S3 nothing orders writers of different machines:
there the slow writer's commit intent (commit/intent.py) makes the others
wait for it, a bounded time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pyarrow as pa
import pytest
from tessera_test_fault_proxy import FaultProxy, _target, _via_proxy

from tessera.catalog import Table

DELAY = 0.05
#: the slow writer's appends (on S3, where each try costs several 50 ms requests and the
#: others must first notice its intent, 3-5 s each: fewer, to keep the suite short)
APPENDS = {"redis": 5, "sqlite": 5, "s3": 3}
EACH_WITHIN = 20.0

_FAST_WRITER = """
import json, os, sys
import pyarrow as pa
from tessera.catalog import Table
uri, store, writer, stop = sys.argv[1], sys.argv[2] or None, int(sys.argv[3]), sys.argv[4]
options = json.loads(sys.argv[5]) or None
t = Table.open(uri, commit_store=store, storage_options=options, durability="none")
n = 0
while not os.path.exists(stop):
    t.append(pa.table({"writer": pa.array([writer], pa.int64()), "n": pa.array([n], pa.int64())}))
    n += 1
print(n)
"""


def _rows(writer: int, n: int) -> pa.Table:
    return pa.table({"writer": pa.array([writer], pa.int64()), "n": pa.array([n], pa.int64())})


@pytest.fixture(params=["redis", "sqlite", "s3"])
def where(request, tmp_path):
    """kind, (table URI, commit store, storage options) for the fast writers, and the
    same for the slow one (behind a 50 ms delay proxy where there is a server)."""
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        proxy = FaultProxy(*_target(url))
        proxy.delay = DELAY
        uri = str(tmp_path / "t")
        yield "redis", (uri, url, None), (uri, _via_proxy(url, proxy.port), None)
        proxy.close()
    elif request.param == "sqlite":  # embedded: no server to put far away; slowed by its CPU share only
        uri, url = str(tmp_path / "t"), f"sqlite:///{tmp_path / 'versions.db'}"
        yield "sqlite", (uri, url, None), (uri, url, None)
    else:  # native commits on S3: writers of "different machines" (no commit lock orders them)
        moto = request.getfixturevalue("moto_server")
        uri, opts = f"s3://{moto.new_bucket()}/t", moto.storage_options()
        proxy = FaultProxy(*_target(opts["endpoint_url"]))
        proxy.delay = DELAY
        slow = {**opts, "endpoint_url": _via_proxy(opts["endpoint_url"], proxy.port)}
        yield "s3", (uri, None, opts), (uri, None, slow)
        proxy.close()


def test_a_slow_writer_gets_through_while_two_fast_ones_keep_committing(tmp_path, where):
    kind, (uri, fast_url, fast_opts), (_, slow_url, slow_opts) = where
    appends = APPENDS[kind]
    Table.create(uri, _rows(-1, 0), commit_store=fast_url, storage_options=fast_opts, durability="none")
    stop = tmp_path / "stop"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    args = [uri, fast_url or "", None, str(stop), json.dumps(fast_opts)]
    fast = [
        subprocess.Popen(
            [sys.executable, "-c", _FAST_WRITER, *[str(w) if a is None else a for a in args]],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for w in (1, 2)
    ]
    took: list[float] = []
    try:
        slow = Table.open(uri, commit_store=slow_url, storage_options=slow_opts, durability="none")
        start = slow.version
        deadline = time.monotonic() + 60
        while slow.refresh().version < start + 10 and time.monotonic() < deadline:
            time.sleep(0.05)  # the fast writers are committing
        assert slow.version >= start + 10, "the fast writers did not get going"
        for i in range(appends):
            began = time.monotonic()
            slow.append(_rows(0, i))
            took.append(time.monotonic() - began)
        during = slow.version
        until = time.monotonic() + 15  # a loaded machine: a commit on moto can take seconds
        while slow.refresh().version <= during and time.monotonic() < until:
            time.sleep(0.05)
        assert slow.version > during, "the fast writers stopped committing meanwhile"
    finally:
        stop.touch()
        outs = [p.communicate(timeout=120) for p in fast]
    for p, (_out, err) in zip(fast, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    counts = [int(out.strip()) for out, _ in outs]
    assert all(t < EACH_WITHIN for t in took), took
    got = Table.open(uri, commit_store=fast_url, storage_options=fast_opts).to_arrow()
    pairs = sorted(zip(got.column("writer").to_pylist(), got.column("n").to_pylist(), strict=True))
    fast_rows = [(w, n) for w, c in zip((1, 2), counts, strict=True) for n in range(c)]
    want = sorted([(-1, 0)] + [(0, i) for i in range(appends)] + fast_rows)
    assert pairs == want  # every acknowledged row exactly once
