"""A real race on every store: 32 threads and 4 processes (fork; each builds its
own store from the URL) reserve the same version, 20 rounds in a row.  Every
round must have exactly one winner, every loser must see VersionExistsError,
and the stored row must be the winner's."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
import traceback
import uuid

import pytest
from tessera_test_store_fixtures import dynamodb_table, kind_of, open_options, store_url  # noqa: F401

from tessera.stores.errors import VersionExistsError
from tessera.stores.manifest_store import VersionRecord
from tessera.stores.registry import open_manifest_store
from tessera.stores.uri import normalize_table_uri

ROUNDS = 20
THREADS = 32
PROCESSES = 4
BARRIER_TIMEOUT = 60.0


def _contend(store, key: str, incarnation: str, party: str, barrier, out: list) -> None:
    """Reserve versions 1..ROUNDS, one per round, in step with every other party."""
    for rnd in range(ROUNDS):
        version = rnd + 1
        txn = f"{party}-{uuid.uuid4().hex[:8]}"
        path = f"_versions/{2**64 - 1 - version:020d}.manifest-{uuid.uuid4()}"
        barrier.wait()
        try:
            store.reserve(VersionRecord(key, version, path, 100 + rnd, txn, incarnation))
            outcome = "won"
        except VersionExistsError:
            outcome = "lost"
        except Exception as exc:  # noqa: BLE001 - reported by the test
            outcome = f"error: {type(exc).__name__}: {exc}"
        out.append((version, party, outcome, txn))


def _process_main(url: str, options: dict, key: str, incarnation: str, party: str, barrier, queue) -> None:
    out: list = []
    try:
        store = open_manifest_store(url, **options)
    except Exception:  # noqa: BLE001
        queue.put([(0, party, "error: open: " + traceback.format_exc(), "")])
        barrier.abort()
        return
    try:
        _contend(store, key, incarnation, party, barrier, out)
    except Exception:  # noqa: BLE001 - a broken barrier
        out.append((0, party, "error: " + traceback.format_exc(), ""))
    finally:
        queue.put(out)
        store.close()


@pytest.mark.slow
def test_exactly_one_winner_per_round(store_url):
    kind = kind_of(store_url)
    options = open_options(kind)
    parent_store = open_manifest_store(store_url, **options)  # runs migrations before anyone races
    key = normalize_table_uri(f"s3://race-{uuid.uuid4().hex[:12]}/t")
    incarnation = uuid.uuid4().hex
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(THREADS + PROCESSES, timeout=BARRIER_TIMEOUT)
    queue = ctx.Queue()
    started = time.monotonic()
    procs = [
        ctx.Process(target=_process_main, args=(store_url, options, key, incarnation, f"p{i}", barrier, queue))
        for i in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    results: list = []
    thread_out: list = []

    def thread_main(i: int) -> None:
        try:
            _contend(parent_store, key, incarnation, f"t{i}", barrier, thread_out)
        except threading.BrokenBarrierError:
            thread_out.append((0, f"t{i}", "error: broken barrier", ""))

    threads = [threading.Thread(target=thread_main, args=(i,)) for i in range(THREADS)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=BARRIER_TIMEOUT * 2)
        for _ in procs:
            results.extend(queue.get(timeout=BARRIER_TIMEOUT))
        for p in procs:
            p.join(timeout=30)
        elapsed = time.monotonic() - started
        results.extend(thread_out)

        errors = [r for r in results if r[2].startswith("error")]
        assert not errors, errors[:3]
        assert len(results) == ROUNDS * (THREADS + PROCESSES)
        rows = {r.version: r for r in parent_store.versions_after(key, 0)}
        assert sorted(rows) == list(range(1, ROUNDS + 1))
        for version in range(1, ROUNDS + 1):
            outcomes = [r for r in results if r[0] == version]
            winners = [r for r in outcomes if r[2] == "won"]
            assert len(outcomes) == THREADS + PROCESSES
            assert len(winners) == 1, f"{kind}: version {version} had {len(winners)} winners: {winners}"
            assert rows[version].transaction_uuid == winners[0][3], f"{kind}: v{version} row is not the winner's"
            assert rows[version].incarnation == incarnation
        process_wins = sum(1 for r in results if r[2] == "won" and r[1].startswith("p"))
        print(
            f"{kind}: {ROUNDS} rounds x {THREADS + PROCESSES} contenders in {elapsed:.2f}s; "
            f"processes won {process_wins} rounds"
        )
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        parent_store.delete_table(key)
        parent_store.close()
