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
    yield LocalObjectStore(str(tmp_path))
    # every turn a test made was released: no heartbeat goes on renewing
    deadline = time.monotonic() + 2
    while _beats() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _beats()


def _beats() -> list[threading.Thread]:
    return [th for th in threading.enumerate() if th.name == "tessera-commit-intent"]


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
    assert time.monotonic() - started < 1.0  # not until the live intent is released
    other.release()


def test_others_wait_until_the_holder_commits(store):
    holder = Turn(store)
    holder.lost(), holder.lost()
    waiter = _elsewhere(store)
    released = threading.Timer(0.3, holder.release)
    released.start()
    started = time.monotonic()
    waiter.wait(time.monotonic() + 10)
    took = time.monotonic() - started
    assert 0.25 < took < 2.0, took  # released after 0.3 s: not the intent's 5 s expiry
    assert store.uri not in intent._hot  # gone: back to looking every CHECK_EVERY commits


@pytest.fixture
def quick(monkeypatch):
    """Intents that expire in 1 s unless renewed, renewed every 0.1 s (a put
    here is a local write with an fsync: under load it can take a good part
    of a second, and an intent must outlive its own write)."""
    monkeypatch.setattr(intent, "INTENT_SECONDS", 1.0)
    monkeypatch.setattr(intent, "RENEW_EVERY", 0.1)
    monkeypatch.setattr(intent, "_seen", {})


def _waited(store, seconds: float = 10.0) -> float:
    t = _elsewhere(store)
    started = time.monotonic()
    t.wait(time.monotonic() + seconds)
    return time.monotonic() - started


def test_a_holder_whose_tries_take_long_keeps_its_turn(store, quick):
    # its heartbeat renews the intent while the commit runs, however long a try takes:
    # the others wait for its release, not for an expiry in the middle of its try
    holder = Turn(store)
    holder.lost(), holder.lost()
    released = threading.Timer(2.0, holder.release)
    released.start()
    took = _waited(store)
    assert 1.9 < took < 5.0, took  # without the heartbeat it expired after 1 s
    assert not store.exists(INTENT_FILE)


def test_everyones_wait_is_bounded(store, quick, monkeypatch):
    monkeypatch.setattr(intent, "HOLD_MAX", 1.0)
    holder = Turn(store)
    holder.lost(), holder.lost()  # keeps renewing and never commits
    try:
        took = _waited(store)
        assert 0.5 < took < 4.0, took  # renewed for HOLD_MAX, then expired: at most 2 s
    finally:
        holder.release()
    # a holder that crashed: nothing renews its intent
    now = time.time()
    store.put(INTENT_FILE, json.dumps({"owner": "crashed", "since": now, "held": now, "until": now + 1.0}).encode())
    assert 0.3 < _waited(store) < 3.0
    # a holder whose clock is an hour ahead: bounded by this process's own clock
    later = time.time() + 3600
    store.put(INTENT_FILE, json.dumps({"owner": "ahead", "since": later, "held": later, "until": later}).encode())
    assert 1.5 < _waited(store) < 5.0  # HOLD_MAX + INTENT_SECONDS since it was first seen, not an hour
    # and never past the operation's deadline
    store.put(INTENT_FILE, json.dumps({"owner": "x", "since": now, "held": time.time(), "until": later}).encode())
    assert _waited(store, seconds=0.05) < 0.5


def test_the_oldest_writer_has_the_right_of_way(store, quick):
    older = Turn(store)  # its commit began first
    time.sleep(0.01)
    younger = Turn(store)
    younger.lost(), younger.lost()
    assert younger.claimed and _holder(store) == younger.owner
    older.lost(), older.lost()  # takes it from the younger holder
    assert older.claimed and _holder(store) == older.owner
    younger.lost()  # loses again: gives way, does not write its own back
    assert not younger.claimed and _holder(store) == older.owner
    time.sleep(0.3)  # heartbeats: the older one renews, the younger one's has stopped
    assert _holder(store) == older.owner
    released = threading.Timer(0.5, older.release)
    released.start()
    started = time.monotonic()
    younger.wait(time.monotonic() + 10)  # waits for the older one's commit
    assert 0.4 < time.monotonic() - started < 3.0
    younger.release()
    assert not store.exists(INTENT_FILE)


def test_a_holder_whose_intent_an_older_writer_took_gives_way_by_its_heartbeat(store, quick):
    older = Turn(store)
    time.sleep(0.01)
    younger = Turn(store)
    younger.lost(), younger.lost()
    older.lost(), older.lost()
    deadline = time.monotonic() + 2
    while younger.claimed and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not younger.claimed  # without losing a try: its heartbeat saw the older intent
    time.sleep(0.2)
    assert _holder(store) == older.owner
    older.release(), younger.release()


def test_no_renewal_after_the_release(store, quick, monkeypatch):
    monkeypatch.setattr(intent, "RENEW_EVERY", 0.001)
    for _ in range(20):
        t = Turn(store)
        t.lost(), t.lost()
        time.sleep(0.005)
        t.release()
        time.sleep(0.01)
        assert not store.exists(INTENT_FILE)


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
    other.release(), mine.release()


def test_the_commit_counts_stay_bounded_in_a_process_serving_many_tables(store, tmp_path, monkeypatch):
    monkeypatch.setattr(intent, "_TABLES_KEPT", 3)
    for i in range(5):
        Turn(LocalObjectStore(str(tmp_path / f"t{i}")))
        assert len(intent._commits) <= 3
    Turn(store), Turn(store)
    assert intent._commits[store.uri] == 2
