"""Multi-table commits at their failure points: a crash after each step, a
lost reply to the one SQL transaction, a store that is down while the outcome
is read back.  Always all tables or none, never one of them."""

from __future__ import annotations

import multiprocessing as mp
import os
import uuid

import pyarrow as pa
import pytest

from tessera.catalog import errors as E
from tessera.catalog.catalog import connect
from tessera.commit import faults
from tessera.commit.retry import RetryPolicy
from tessera.stores.errors import AmbiguousStoreError, StoreUnavailableError


def _rows(tag: int, n: int = 2) -> pa.Table:
    return pa.table({"tag": pa.array([tag] * n, pa.int64())})


@pytest.fixture(params=["sqlite", "postgres"])
def cat(request, tmp_path):
    if request.param == "sqlite":
        c = connect(warehouse=str(tmp_path / "wh"))
    else:
        c = connect(request.getfixturevalue("postgres_url"), warehouse=str(tmp_path / "wh"))
    ns = f"mt_{uuid.uuid4().hex[:10]}"
    c.create_namespace(ns)
    c.create_table(f"{ns}.a", _rows(0), commit_store="catalog")
    c.create_table(f"{ns}.b", _rows(0), commit_store="catalog")
    c.ns = ns
    yield c
    for t in ("a", "b"):
        c.drop_table(f"{ns}.{t}", purge=True)
    c.drop_namespace(ns)
    c.close()


def _tags(cat, name: str) -> list[int]:
    return sorted(cat.load_table(f"{cat.ns}.{name}").to_arrow().column("tag").to_pylist())


def _both(cat) -> tuple[list[int], list[int]]:
    return _tags(cat, "a"), _tags(cat, "b")


class _Countdown:
    """Runs ``action`` the n-th time the point is reached (n = 1: the first)."""

    def __init__(self, n: int, action) -> None:
        self.left, self.action = n, action

    def __call__(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.action()


def _crashing_transaction(uri, warehouse, ns, point, nth):
    faults.set_action(point, _Countdown(nth, lambda: os._exit(17)))
    c = connect(uri, warehouse=warehouse)
    with c.transaction() as tx:
        tx.load_table(f"{ns}.a").append(_rows(1))
        tx.load_table(f"{ns}.b").append(_rows(2))


@pytest.mark.parametrize(
    "point,nth,committed",
    [
        (faults.STAGED, 1, False),  # after the first table's staged manifest
        (faults.STAGED, 2, False),  # after both staged, before the reservation
        (faults.RESERVED, 1, True),  # after the one SQL transaction
        (faults.COPIED, 1, True),  # after the first table's manifest is published
        (faults.FLIPPED, 1, True),  # after the first table's row is flipped
        (faults.COPIED, 2, True),  # after the second table's manifest is published
    ],
)
def test_crash_at_each_step_is_all_or_none(cat, point, nth, committed):
    proc = mp.get_context("fork").Process(
        target=_crashing_transaction, args=(cat.uri, cat.warehouse, cat.ns, point, nth)
    )
    proc.start()
    proc.join(60)
    assert proc.exitcode == 17, "the transaction did not reach the crash point"
    a, b = _both(cat)
    if committed:
        assert (a, b) == ([0, 0, 1, 1], [0, 0, 2, 2])
    else:
        assert (a, b) == ([0, 0], [0, 0])
    # the next transaction commits on top, and both tables read back whole
    with cat.transaction() as tx:
        tx.load_table(f"{cat.ns}.a").append(_rows(5))
        tx.load_table(f"{cat.ns}.b").append(_rows(5))
    a2, b2 = _both(cat)
    assert a2 == sorted(a + [5, 5]) and b2 == sorted(b + [5, 5])
    for name in ("a", "b"):
        versions = [v["version"] for v in cat.load_table(f"{cat.ns}.{name}").versions()]
        assert versions == list(range(1, len(versions) + 1))


class _Flaky:
    """A real store whose chosen method misbehaves: ``lose`` applies the call
    and reports a lost reply; ``refuse`` fails before sending (not applied);
    ``down`` makes every call fail for the next ``n`` calls."""

    def __init__(self, real, method: str, mode: str, n: int = 1) -> None:
        self._real, self._method, self._mode, self._left = real, method, mode, n
        self.kind = real.kind

    def __getattr__(self, name):
        attr = getattr(self._real, name)
        if name != self._method:
            return attr

        def call(*a, **kw):
            if self._left <= 0:
                return attr(*a, **kw)
            self._left -= 1
            if self._mode == "lose":
                attr(*a, **kw)
                raise AmbiguousStoreError(f"injected lost reply to {name}")
            if self._mode == "refuse":
                raise AmbiguousStoreError(f"injected: {name} timed out before reaching the server")
            raise StoreUnavailableError(f"injected: the store is down ({name})")

        return call


@pytest.mark.parametrize("mode", ["lose", "refuse"])
def test_ambiguous_reply_to_the_sql_transaction_is_read_back(cat, mode):
    real = cat.manifest_store
    try:
        with cat.transaction() as tx:
            tx.load_table(f"{cat.ns}.a").append(_rows(1))
            tx.load_table(f"{cat.ns}.b").append(_rows(2))
            cat._manifest_store = _Flaky(real, "reserve_many", mode)  # used by the commit at the block's end
    finally:
        cat._manifest_store = real
    assert _both(cat) == ([0, 0, 1, 1], [0, 0, 2, 2])
    assert cat.load_table(f"{cat.ns}.a").version == 2 and cat.load_table(f"{cat.ns}.b").version == 2


def test_store_down_during_read_back_is_waited_for(cat):
    """A lost reply, then the store is unreachable for the next few reads:
    the read-back waits (jittered backoff) and finds the transaction."""
    real = cat.manifest_store
    try:
        with cat.transaction() as tx:
            tx.load_table(f"{cat.ns}.a").append(_rows(1))
            tx.load_table(f"{cat.ns}.b").append(_rows(2))
            cat._manifest_store = _Flaky(_Flaky(real, "reserve_many", "lose"), "get", "down", n=4)
    finally:
        cat._manifest_store = real
    assert _both(cat) == ([0, 0, 1, 1], [0, 0, 2, 2])


def test_store_down_past_the_read_back_window_is_unknown_then_repaired(cat):
    real = cat.manifest_store
    try:
        with pytest.raises(E.CommitOutcomeUnknownError):
            with cat.transaction() as tx:
                for name, tag in (("a", 1), ("b", 2)):
                    t = tx.load_table(f"{cat.ns}.{name}")
                    t._handler.policy = RetryPolicy(read_back_seconds=0.3)
                    t.append(_rows(tag))
                cat._manifest_store = _Flaky(_Flaky(real, "reserve_many", "lose"), "get", "down", n=10_000)
    finally:
        cat._manifest_store = real
    # it had landed: the next opens finish both commits
    assert _both(cat) == ([0, 0, 1, 1], [0, 0, 2, 2])
