"""Client-side deadlines for PostgreSQL, whose driver (libpq) has no read
timeout: one :class:`Attempt` of a store operation gets ``io_timeout`` from
the moment it has a connection, and a process-wide :class:`Watchdog` thread
shuts that connection's socket down when the deadline passes, so a blocked
driver call fails at once (see :mod:`stores.sql_store`)."""

from __future__ import annotations

import heapq
import itertools
import os
import socket
import threading
import time
from typing import Any


class Attempt:
    """One attempt of a store operation: when its time is up, and whether the
    watchdog had to cut it short.  The clock starts when the attempt first
    has a connection (:meth:`begin`): waiting for a free pooled connection is
    bounded by the pool's own timeout, not by io_timeout."""

    __slots__ = ("deadline", "io_timeout", "timed_out")

    def __init__(self, io_timeout: float) -> None:
        self.io_timeout = io_timeout
        self.deadline: float | None = None
        self.timed_out = False

    def begin(self) -> float:
        """The deadline, starting the clock now if it has not started."""
        if self.deadline is None:
            self.deadline = time.monotonic() + self.io_timeout
        return self.deadline


class _Timer:
    __slots__ = ("attempt", "deadline", "done", "fired", "sock")

    def __init__(self, sock: socket.socket, attempt: Attempt) -> None:
        self.sock = sock
        self.attempt = attempt
        self.deadline = attempt.begin()
        self.done = False
        self.fired = False


class Watchdog:
    """A process-wide daemon thread enforcing client-side read deadlines for
    drivers without a read timeout (libpq).

    :meth:`arm` takes the connection's socket descriptor and duplicates it, so
    the timer always refers to that connection's socket even if the driver
    closes its own descriptor (and the number is reused) meanwhile.  At the
    deadline the socket is shut down (both ways): the driver's blocked poll
    wakes up, reads end-of-file and reports a broken connection.  The caller
    must discard that connection (:meth:`disarm` says whether it fired)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        # also the after-fork hook: the child has no watchdog thread, and the
        # parent's lock may have been held when it forked
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, _Timer]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._finished = 0  # disarmed timers still in the heap

    def arm(self, fd: int, attempt: Attempt) -> _Timer:
        timer = _Timer(socket.socket(fileno=os.dup(fd)), attempt)
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tessera-sql-deadlines", daemon=True)
                self._thread.start()
            heapq.heappush(self._heap, (timer.deadline, next(self._seq), timer))
            if self._heap[0][2] is timer:
                self._cond.notify()
        return timer

    def disarm(self, timer: _Timer) -> bool:
        """Stop ``timer``; True if it fired (the connection is unusable)."""
        with self._cond:
            if not timer.done:
                timer.done = True
                self._finished += 1
                if self._finished > 256 and 2 * self._finished > len(self._heap):
                    self._heap = [e for e in self._heap if not e[2].done]
                    heapq.heapify(self._heap)
                    self._finished = 0
        timer.sock.close()
        return timer.fired

    def _run(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][2].done:
                    heapq.heappop(self._heap)
                    self._finished -= 1
                if not self._heap:
                    self._cond.wait()
                    continue
                delay = self._heap[0][0] - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                timer = heapq.heappop(self._heap)[2]
                timer.done = timer.fired = True
                timer.attempt.timed_out = True
                try:
                    timer.sock.shutdown(socket.SHUT_RDWR)
                except OSError:  # already closed by the peer
                    pass


WATCHDOG = Watchdog()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=WATCHDOG._reset)

#: the attempt whose connection is being checked out on this thread (read by
#: the pool's checkout hook, which pings under the attempt's deadline)
CHECKOUT = threading.local()


def pg_socket(dbapi_connection: Any) -> int:
    return int(dbapi_connection.pgconn.socket)
