"""Commit intents (commit/intent.py): who records one, who waits for it and
how long, and that the wait is bounded whatever the holder does."""

from __future__ import annotations

import json
import threading
import time

import pytest

from tessera.commit import intent
from tessera.commit.intent import INTENT_FILE, Turn
from tessera.stores.local import LocalObjectStore


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setattr(intent, "_commits", {})
    monkeypatch.setattr(intent, "_hot", set())
    return LocalObjectStore(str(tmp_path))


def _elsewhere(store) -> Turn:
    """A turn of another process's first commit of the table (it looks for intents)."""
    intent._commits.clear()
    intent._hot.clear()
    return Turn(store)


def _holder(store) -> str | None:
    try:
        return json.loads(store.read(INTENT_FILE))["owner"]
    except Exception:  # noqa: BLE001
        return None


def test_an_intent_is_recorded_after_two_losses_and_removed_after(store):
    t = Turn(store)
    t.lost()
    assert _holder(store) is None
    t.lost()
    assert _holder(store) == t.owner
    t.release()
    assert _holder(store) is None and not store.exists(INTENT_FILE)


def test_a_writer_holding_the_commit_lock_neither_records_nor_waits(store):
    t = Turn(store)
    t.ordered = True
    for _ in range(5):
        t.lost()
    assert _holder(store) is None
    other = Turn(store)
    other.lost(), other.lost()
    started = time.monotonic()
    locked = Turn(store)
    locked.ordered = True
    locked.wait(time.monotonic() + 10)
    assert time.monotonic() - started < 1.0  # not the 5 s a wait for a live intent lasts


def test_others_wait_until_the_holder_commits(store):
    holder = Turn(store)
    holder.lost(), holder.lost()
    waiter = _elsewhere(store)
    released = threading.Timer(0.3, holder.release)
    released.start()
    started = time.monotonic()
    waiter.wait(time.monotonic() + 10)
    took = time.monotonic() - started
    assert 0.25 < took < 2.0, took  # released after 0.3 s: not the 5 s bound
    assert store.uri not in intent._hot  # gone: back to looking every CHECK_EVERY commits


def test_a_wait_is_bounded_and_repeats_while_the_intent_stays(store, monkeypatch):
    monkeypatch.setattr(intent, "MAX_WAIT", 0.2)
    holder = Turn(store)
    holder.lost(), holder.lost()  # never released: a holder that keeps losing (or crashed)
    waits = []
    for i in range(3):
        t = _elsewhere(store) if i == 0 else Turn(store)  # once it saw the intent, every commit looks
        started = time.monotonic()
        t.wait(time.monotonic() + 10)
        waits.append(time.monotonic() - started)
    assert all(0.18 < w < 1.0 for w in waits), waits
    # never past the operation's deadline
    monkeypatch.setattr(intent, "MAX_WAIT", 3.0)
    started = time.monotonic()
    Turn(store).wait(time.monotonic() + 0.05)
    assert time.monotonic() - started < 1.0  # 3 s without the deadline


def test_writers_look_every_check_every_commits_when_nothing_was_seen(store, monkeypatch):
    reads = []
    real = intent._read
    monkeypatch.setattr(intent, "_read", lambda s: reads.append(1) or real(s))
    for _ in range(2 * intent.CHECK_EVERY):
        Turn(store).wait(time.monotonic() + 10)
    assert len(reads) == 2


def test_expired_torn_and_own_intents_do_not_hold_anyone(store):
    store.put(INTENT_FILE, json.dumps({"owner": "gone", "until": time.time() - 1}).encode())
    started = time.monotonic()
    Turn(store).wait(time.monotonic() + 10)
    store.put(INTENT_FILE, b"{torn")
    intent._commits.clear()
    Turn(store).wait(time.monotonic() + 10)
    assert time.monotonic() - started < 1.0  # a live intent holds 5 s
    mine = Turn(store)
    mine.lost(), mine.lost()
    mine._due = True
    mine.wait(time.monotonic() + 10)  # its own: no wait
    assert time.monotonic() - started < 2.0
    # a second writer that keeps losing does not take a live intent from its holder
    other = Turn(store)
    other.lost(), other.lost()
    assert _holder(store) == mine.owner and not other.claimed


def test_the_commit_counts_stay_bounded_in_a_process_serving_many_tables(store, tmp_path, monkeypatch):
    monkeypatch.setattr(intent, "_TABLES_KEPT", 3)
    for i in range(5):
        Turn(LocalObjectStore(str(tmp_path / f"t{i}")))
        assert len(intent._commits) <= 3
    Turn(store), Turn(store)
    assert intent._commits[store.uri] == 2
