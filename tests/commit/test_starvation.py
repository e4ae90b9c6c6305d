"""A slow writer is never starved by fast ones (issue 28).

Two processes append to one table as fast as they can while a third writer,
whose every store reply comes back 50 ms late (a loopback delay proxy, the
one fake: a real store cannot be made far away), appends five times: each of
its appends must be acknowledged within 20 s, and every acknowledged row is
in the table exactly once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pyarrow as pa
import pytest
from tessera_test_fault_proxy import FaultProxy, _target, _via_proxy

from tessera.catalog import Table

DELAY = 0.05
APPENDS = 5
EACH_WITHIN = 20.0

_FAST_WRITER = """
import os, sys
import pyarrow as pa
from tessera.catalog import Table
uri, store, writer, stop = sys.argv[1], sys.argv[2] or None, int(sys.argv[3]), sys.argv[4]
t = Table.open(uri, commit_store=store, durability="none")
n = 0
while not os.path.exists(stop):
    t.append(pa.table({"writer": pa.array([writer], pa.int64()), "n": pa.array([n], pa.int64())}))
    n += 1
print(n)
"""


def _rows(writer: int, n: int) -> pa.Table:
    return pa.table({"writer": pa.array([writer], pa.int64()), "n": pa.array([n], pa.int64())})


@pytest.fixture(params=["redis", "sqlite"])
def coordinated(request, tmp_path):
    """(store URL for the fast writers, the same store behind a 50 ms delay proxy)."""
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        proxy = FaultProxy(*_target(url))
        proxy.delay = DELAY
        yield url, _via_proxy(url, proxy.port)
        proxy.close()
    else:  # embedded: no server to put far away; the slow writer is slowed by its CPU share only
        url = f"sqlite:///{tmp_path / 'versions.db'}"
        yield url, url


def test_a_slow_writer_gets_through_while_two_fast_ones_keep_committing(tmp_path, coordinated):
    fast_url, slow_url = coordinated
    uri = str(tmp_path / "t")
    Table.create(uri, _rows(-1, 0), commit_store=fast_url, durability="none")
    stop = tmp_path / "stop"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    fast = [
        subprocess.Popen(
            [sys.executable, "-c", _FAST_WRITER, uri, fast_url, str(w), str(stop)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for w in (1, 2)
    ]
    took: list[float] = []
    try:
        slow = Table.open(uri, commit_store=slow_url, durability="none")
        start = slow.version
        deadline = time.monotonic() + 60
        while slow.refresh().version < start + 20 and time.monotonic() < deadline:
            time.sleep(0.05)  # the fast writers are committing
        assert slow.version >= start + 20, "the fast writers did not get going"
        for i in range(APPENDS):
            began = time.monotonic()
            slow.append(_rows(0, i))
            took.append(time.monotonic() - began)
        during = slow.version
        time.sleep(0.3)
        assert slow.refresh().version > during, "the fast writers stopped committing meanwhile"
    finally:
        stop.touch()
        outs = [p.communicate(timeout=120) for p in fast]
    for p, (_out, err) in zip(fast, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    counts = [int(out.strip()) for out, _ in outs]
    assert all(t < EACH_WITHIN for t in took), took
    got = Table.open(uri, commit_store=fast_url).to_arrow()
    pairs = sorted(zip(got.column("writer").to_pylist(), got.column("n").to_pylist(), strict=True))
    fast_rows = [(w, n) for w, c in zip((1, 2), counts, strict=True) for n in range(c)]
    want = sorted([(-1, 0)] + [(0, i) for i in range(APPENDS)] + fast_rows)
    assert pairs == want  # every acknowledged row exactly once
