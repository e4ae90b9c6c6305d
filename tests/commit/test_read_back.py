"""Read-back with patience: a short outage of the manifest store during a
commit (a real server behind a loopback proxy) ends in success, because the
outcome is read back with jittered backoff for a bounded window; a longer
outage ends in CommitOutcomeUnknownError, and the next open finishes a commit
that had landed."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from tessera_test_fault_proxy import FaultProxy, target_of, via_proxy

from tessera.catalog import Table
from tessera.catalog import errors as E
from tessera.commit import faults
from tessera.commit.retry import RetryPolicy
from tessera.stores.registry import open_manifest_store
from tessera.stores.uri import normalize_table_uri


@pytest.fixture(params=["postgres", "mysql", "redis", "dynamodb"])
def store_url(request):
    if request.param == "dynamodb":
        from tessera_test_services import new_dynamodb_store_url

        return new_dynamodb_store_url(request.getfixturevalue("moto_server"))
    return request.getfixturevalue(
        {"postgres": "postgres_url", "mysql": "mysql_url", "redis": "redis_url"}[request.param]
    )


def _rows(start: int) -> pa.Table:
    return pa.table({"i": pa.array([start, start + 1], pa.int64())})


def _with_timeout(url: str, seconds: float) -> str:
    return url + ("&" if "?" in url else "?") + f"io_timeout={seconds}"


@pytest.fixture
def proxied(store_url, tmp_path):
    proxy = FaultProxy(*target_of(store_url))
    uri = str(tmp_path / "t")
    Table.create(uri, _rows(0), commit_store=store_url)
    yield uri, store_url, _with_timeout(via_proxy(store_url, proxy.port), 2), proxy
    faults.clear()
    proxy.close()
    ms = open_manifest_store(store_url)
    ms.delete_table(normalize_table_uri(uri))
    ms.close()


@pytest.mark.parametrize("lost", [True, False], ids=["reply-lost", "not-sent"])
def test_half_second_outage_during_reserve_ends_in_success(proxied, lost):
    uri, direct, through, proxy = proxied
    t = Table.open(uri, commit_store=through)
    if lost:
        # the reservation reaches the server, its reply is lost, and the server is then
        # unreachable for 0.5 s: the read-back must wait for it and find our row
        faults.set_action(faults.STAGED, lambda: proxy.arm(".manifest-", "outage", outage=0.5))
    else:
        faults.set_action(faults.STAGED, lambda: proxy.start_outage(0.5))
    start = time.monotonic()
    t.append(_rows(10))
    faults.clear()
    assert t.version == 2
    assert time.monotonic() - start < 10
    if lost:
        assert proxy.fired.is_set()
    t2 = Table.open(uri, commit_store=direct)
    assert t2.version == 2 and sorted(t2.to_arrow().column("i").to_pylist()) == [0, 1, 10, 11]


def test_outage_longer_than_the_read_back_window_is_unknown_then_repaired(proxied):
    uri, direct, through, proxy = proxied
    t = Table.open(uri, commit_store=through, retry=RetryPolicy(read_back_seconds=0.5))
    faults.set_action(faults.STAGED, lambda: proxy.arm(".manifest-", "outage", outage=4.0))
    start = time.monotonic()
    with pytest.raises(E.CommitOutcomeUnknownError):
        t.append(_rows(10))
    assert time.monotonic() - start < 8  # bounded: io_timeout and the window, not the outage
    faults.clear()
    # the reservation had landed: the next open (direct) finishes the commit
    t2 = Table.open(uri, commit_store=direct)
    assert t2.version == 2 and sorted(t2.to_arrow().column("i").to_pylist()) == [0, 1, 10, 11]


def test_retry_policy_from_catalog_properties_and_bad_values(tmp_path):
    from tessera.catalog.catalog import connect
    from tessera.commit.retry import InvalidRetryPolicyError

    cat = connect(
        warehouse=str(tmp_path / "wh"),
        properties={"commit.retry.read-back-seconds": "0.25", "commit.retry.max-attempts": "7"},
    )
    cat.create_namespace("n")
    t = cat.create_table("n.t", _rows(0))
    assert t._handler.policy == RetryPolicy(read_back_seconds=0.25, max_attempts=7)
    assert cat.load_table("n.t")._handler.policy.read_back_seconds == 0.25
    cat.close()
    with pytest.raises(InvalidRetryPolicyError, match="max-seconds"):
        RetryPolicy.from_properties({"commit.retry.max-seconds": "soon"})
    with pytest.raises(InvalidRetryPolicyError, match="unknown retry property"):
        RetryPolicy.from_properties({"commit.retry.max-atempts": "3"})
    with pytest.raises(InvalidRetryPolicyError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(E.TesseraError):
        Table.open(str(tmp_path / "wh"), retry={"max_attempts": 3})


def test_contention_budget_is_shared_by_rerun_and_rebase(tmp_path):
    """One wall-clock budget: a writer that keeps losing gives up with
    TooMuchContentionError within max_seconds, however the loops nest."""
    from tessera.commit.errors import CommitConflictError
    from tessera.commit.handlers import NativeCommitHandler

    class AlwaysTaken(NativeCommitHandler):
        def commit(self, *a, **kw):
            raise CommitConflictError(0, "injected: someone else always wins")

        def versions_after(self, store, version):
            return []

    uri = str(tmp_path / "t")
    Table.create(uri, _rows(0))
    t = Table.open(uri)
    t._handler = AlwaysTaken(RetryPolicy(max_seconds=0.5, max_attempts=10_000, base_delay=0.001, max_delay=0.01))
    start = time.monotonic()
    with pytest.raises(E.TooMuchContentionError):
        t.delete("i = 0")
    assert time.monotonic() - start < 2.0


def test_waits_after_a_lost_race_are_short_jitter_growing_linearly():
    """A loser has already rebased on the winner: it waits a short uniform
    jitter, [0, base * max(1, attempt / 2)), capped at max_delay, never an
    exponential backoff (which left 4 appending processes idle most of the time)."""
    from tenacity import RetryCallState

    from tessera.commit.retry import _ContentionWait

    wait = _ContentionWait(0.01, 0.05)

    def waits(attempt: int) -> list[float]:
        state = RetryCallState(None, None, (), {})
        state.attempt_number = attempt
        return [wait(state) for _ in range(2000)]

    for attempt, top in ((1, 0.01), (2, 0.01), (4, 0.02), (8, 0.04), (30, 0.05), (1000, 0.05)):
        got = waits(attempt)
        assert 0 <= min(got) and max(got) <= top, (attempt, max(got))
        assert max(got) > 0.8 * top  # it does spread over the whole range
    policy = RetryPolicy(base_delay=0.01, max_delay=0.05)
    assert isinstance(policy.retrying(ValueError).wait, _ContentionWait)
