"""The one retry policy of the commit path (tenacity), defined once.

Three kinds of waiting share it:

* **version taken** - another writer won the version we tried: rebase on it
  and try the next one (:func:`commit.operation.commit_transaction`);
* **operation re-run** - a concurrent commit forces the operation itself to be
  rebuilt on the latest version (a delete whose rows were rewritten, ...):
  :func:`commit.operation.commit_operation`, used by ``Table``, the catalog's
  multi-table transaction and the Spark driver;
* **read-back** - a store answered ambiguously (timeout, lost reply): read the
  outcome back with jittered backoff for ``read_back_seconds`` before giving
  up with :class:`~commit.errors.CommitOutcomeUnknownError`.

All attempts of one commit share one wall-clock budget (``max_seconds``), so
nested loops never multiply it.  Users set it with ``Table.open(...,
retry=RetryPolicy(...))`` or the catalog properties ``commit.retry.*``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_none,
)
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from tessera.stores.errors import AmbiguousStoreError, StoreUnavailableError

from .errors import CommitError

T = TypeVar("T")

#: catalog / Spark property prefix: ``commit.retry.max-attempts=50`` ...
PROPERTY_PREFIX = "commit.retry."


class InvalidRetryPolicyError(CommitError, ValueError):
    """A retry setting that is not a positive number (or an unknown one)."""


class _PastDeadline(stop_base):
    """Stop once ``time.monotonic()`` reaches ``end`` (a deadline shared by several loops)."""

    def __init__(self, end: float) -> None:
        self.end = end

    def __call__(self, retry_state: RetryCallState) -> bool:
        return time.monotonic() >= self.end


class _ContentionWait(wait_base):
    """The wait before retrying after another writer won: uniform in
    ``[0, min(cap, base * max(1, attempt / 2)))``.

    Losing a version race is not a failure to back off from: the loser has
    already rebased on the winner, and every round of a race has a winner, so
    the table moves on whatever the waits.  A long wait only idles the loser
    (exponential backoff made 4 appending processes 2.4x slower than pylance's;
    ``tests/bench/bench_commit.py --local-only``).  The jitter spreads the
    retries of writers that lost together; it grows slowly (linearly) so many
    writers that keep colliding space out, up to ``cap``."""

    def __init__(self, base: float, cap: float) -> None:
        self.base, self.cap = base, cap

    def __call__(self, retry_state: RetryCallState) -> float:
        top = min(self.cap, self.base * max(1.0, retry_state.attempt_number / 2))
        return random.uniform(0, top)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds on retries: attempts, one wall-clock budget, backoff, read-back.

    Args:
        max_attempts: version-taken retries of one commit, and re-runs of one
            operation, each at most this many.
        max_seconds: the wall-clock budget of one operation, all retries and
            read-backs included.
        base_delay: the jitter of a retry after another writer won (seconds):
            uniform in [0, base_delay * max(1, attempt / 2)), see _ContentionWait.
        max_delay: the longest single wait (seconds), also of read-back backoff.
        read_back_seconds: after an ambiguous store error, how long the outcome
            is read back (with jittered backoff) before
            CommitOutcomeUnknownError.
    """

    max_attempts: int = 200
    max_seconds: float = 120.0
    base_delay: float = 0.01
    max_delay: float = 1.0
    read_back_seconds: float = 5.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise InvalidRetryPolicyError(f"retry {f.name} must be a non-negative number, got {value!r}")
        if self.max_attempts < 1:
            raise InvalidRetryPolicyError(f"retry max_attempts must be at least 1, got {self.max_attempts!r}")

    # -- construction -----------------------------------------------------------------

    @classmethod
    def from_properties(cls, props: Mapping[str, str] | None, prefix: str = PROPERTY_PREFIX) -> RetryPolicy:
        """A policy from ``{prefix}max-attempts``-style properties (others ignored)."""
        values: dict[str, float | int] = {}
        names = {f.name.replace("_", "-"): f for f in fields(cls)}
        for key, raw in (props or {}).items():
            if not key.startswith(prefix):
                continue
            name = key[len(prefix) :]
            f = names.get(name)
            if f is None:
                raise InvalidRetryPolicyError(
                    f"unknown retry property {key!r}; known: {sorted(prefix + n for n in names)}"
                )
            try:
                values[f.name] = int(raw) if f.name == "max_attempts" else float(raw)
            except (TypeError, ValueError):
                raise InvalidRetryPolicyError(f"retry property {key!r} must be a number, got {raw!r}") from None
        return cls(**values)  # type: ignore[arg-type]

    def with_(self, **changes: float) -> RetryPolicy:
        return replace(self, **changes)  # type: ignore[arg-type]

    # -- use --------------------------------------------------------------------------

    def deadline(self) -> float:
        """The monotonic time at which an operation starting now must stop."""
        return time.monotonic() + self.max_seconds

    def retrying(
        self,
        exc_types: type[BaseException] | tuple[type[BaseException], ...],
        deadline: float | None = None,
        contention_wait: bool = True,
    ) -> Retrying:
        """A tenacity loop retrying ``exc_types`` within the attempts and the
        shared ``deadline`` (default: ``max_seconds`` from now).
        ``contention_wait=False``: retry at once (a writer that holds the
        local commit lock lost only to a writer outside it, and has rebased)."""
        end = deadline if deadline is not None else self.deadline()
        return Retrying(
            stop=stop_after_attempt(self.max_attempts) | _PastDeadline(end),
            wait=_ContentionWait(self.base_delay, self.max_delay) if contention_wait else wait_none(),
            retry=retry_if_exception_type(exc_types),
            reraise=False,
        )

    def read_back(self, fn: Callable[[], T], deadline: float | None = None) -> T:
        """Call ``fn`` until it answers, retrying ambiguous/unavailable store
        errors with jittered backoff for ``read_back_seconds`` (never past
        ``deadline``).  The last error is re-raised when the window closes."""
        end = time.monotonic() + self.read_back_seconds
        if deadline is not None:
            end = min(end, max(deadline, time.monotonic() + min(self.read_back_seconds, 1.0)))
        attempt = 0
        while True:
            try:
                return fn()
            except (AmbiguousStoreError, StoreUnavailableError):
                now = time.monotonic()
                if now >= end:
                    raise
                attempt += 1
                step = min(self.max_delay, max(self.base_delay, 0.05) * 2 ** min(attempt, 10))
                time.sleep(min(random.uniform(step / 2, step), max(0.0, end - now)))


DEFAULT_POLICY = RetryPolicy()
