"""A loopback TCP proxy that injects the network faults a real server cannot:
a reply that never arrives, a connection that hangs, a short outage.

Import it from a test module as ``tessera_test_fault_proxy`` (tests/conftest.py
loads it from this file)::

    from tessera_test_fault_proxy import FaultProxy, _target, _via_proxy

Faults are triggered by a *marker*: bytes the client sends in the request
whose reply is to be lost (a transaction uuid, a key).  See :meth:`FaultProxy.arm`.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from urllib.parse import parse_qsl, urlencode, urlparse, urlunparse

__all__ = ["FaultProxy", "_target", "_via_proxy", "target_of", "via_proxy"]


class _Conn:
    """One proxied client connection and its server connection."""

    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client = client
        self.server = server
        self.hit = False  # the client sent the marker on this connection
        self.tail = b""  # the last bytes sent, so a marker split across two reads is seen
        self.muted = False  # forward no more replies (the client's bytes still reach the server)
        self.stalled = False  # forward nothing more, either way (a black-holed connection)
        self.closed = False

    def close(self) -> None:
        self.closed = True
        for s in (self.client, self.server):
            try:  # shutdown wakes a thread blocked in recv (close alone does not)
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass


class FaultProxy:
    """Forwards TCP from ``127.0.0.1:self.port`` to a server.

    When armed with a marker (:meth:`arm`), the first server reply that
    follows a client message containing it is swallowed, and then:

    * ``"drop"``: the client connection is closed (the server applied the
      request; the client never hears back);
    * ``"stall"``: no more replies are forwarded on that connection, which
      stays open (the client's bytes still reach the server; the client waits
      until its own timeout);
    * ``"outage"``: as ``"drop"``, and the server becomes unreachable for
      ``outage`` seconds (:meth:`start_outage`): every open connection is
      closed and new connections are refused (``refuse=True``: nothing listens
      on the port, a connect fails at once) or black-holed (``refuse=False``:
      accepted, never answered).  Afterwards the proxy forwards normally again
      (black-holed connections are closed then; clients must reconnect).

    ``fired`` is set once the armed fault has happened; ``outage_over`` is
    clear while an outage lasts.

    ``delay`` (seconds, default 0) holds back every server reply that long
    before the client gets it: a store far away (each request-reply round
    trip costs at least ``delay``).
    """

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._lock = threading.Lock()
        self.listener: socket.socket | None = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.marker: tuple[bytes, ...] | None = None
        self.mode = "drop"
        self.outage_seconds = 0.5
        self.refuse = True
        self.release_after: float | None = None
        self.delay = 0.0
        self.fired = threading.Event()
        self.outage_over = threading.Event()
        self.outage_over.set()
        self._outage_until = 0.0
        self._blackhole = False
        self._stop = False
        self._conns: list[_Conn] = []
        self._held: list[socket.socket] = []  # black-holed clients
        self._thread = threading.Thread(target=self._accept, daemon=True, name=f"fault-proxy-{self.port}")
        self._thread.start()

    # ------------------------------------------------------------------ faults
    def arm(
        self,
        marker: str,
        mode: str = "drop",
        *,
        outage: float = 0.5,
        refuse: bool = True,
        release_after: float | None = None,
    ) -> None:
        """Lose the reply to the next request containing ``marker`` (as text,
        or hex-encoded: how SQLAlchemy's MySQL dialect sends VARBINARY values).

        ``release_after`` (stall only) closes the stalled connection after
        that many seconds, so a client without a working timeout fails a
        test (late) instead of hanging it."""
        if mode not in ("drop", "stall", "outage"):
            raise ValueError(f"unknown fault mode {mode!r}")
        self.mode, self.outage_seconds, self.refuse = mode, outage, refuse
        self.release_after = release_after
        self.fired.clear()
        self.marker = (marker.encode(), marker.encode().hex().encode())

    def start_outage(self, seconds: float, *, refuse: bool = True) -> None:
        """Make the server unreachable for ``seconds`` from now (see the class)."""
        self._cut(self._begin_outage(seconds, refuse), refuse)

    def _begin_outage(self, seconds: float, refuse: bool) -> list[_Conn]:
        with self._lock:
            self._outage_until = time.monotonic() + seconds
            self._blackhole = not refuse
            self.outage_over.clear()
            listener = None
            if refuse:
                listener, self.listener = self.listener, None
            conns = [c for c in self._conns if not c.closed]
        if listener is not None:
            _close(listener)
        return conns

    @staticmethod
    def _cut(conns: list[_Conn], refuse: bool) -> None:
        for c in conns:
            if refuse:
                c.close()
            else:
                c.stalled = True

    def in_outage(self) -> bool:
        return not self.outage_over.is_set()

    # -------------------------------------------------------------- forwarding
    def _accept(self) -> None:
        while not self._stop:
            self._maybe_end_outage()
            listener = self.listener
            if listener is None:  # refusing connections
                time.sleep(0.005)
                continue
            try:
                ready, _, _ = select.select([listener], [], [], 0.02)
                if not ready:
                    continue
                client, _ = listener.accept()
            except (OSError, ValueError):  # closed by start_outage or close
                continue
            if self.in_outage():
                with self._lock:
                    self._held.append(client)  # black-holed: accepted, never answered
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            conn = _Conn(client, server)
            with self._lock:
                self._conns = [c for c in self._conns if not c.closed] + [conn]
            threading.Thread(target=self._up, args=(conn,), daemon=True).start()
            threading.Thread(target=self._down, args=(conn,), daemon=True).start()

    def _maybe_end_outage(self) -> None:
        if self.outage_over.is_set() or time.monotonic() < self._outage_until:
            return
        with self._lock:
            held, self._held = self._held, []
            stalled = [c for c in self._conns if c.stalled and not c.closed]
            reopen = self.listener is None
        for s in held:
            _close(s)
        for c in stalled:
            c.close()
        if reopen:
            listener = None
            for _ in range(100):  # the same port again (SO_REUSEADDR is set by create_server)
                try:
                    listener = socket.create_server(("127.0.0.1", self.port))
                    break
                except OSError:
                    time.sleep(0.01)
            if listener is None:
                raise RuntimeError(f"fault proxy could not listen on port {self.port} again")
            with self._lock:
                self.listener = listener
        with self._lock:
            self._blackhole = False
        self.outage_over.set()

    def _up(self, conn: _Conn) -> None:
        try:
            while data := conn.client.recv(65536):
                if conn.stalled:
                    continue  # swallowed
                marker = self.marker
                if marker and _contains(conn.tail, data, marker):
                    conn.hit = True
                conn.tail = data[-512:]
                conn.server.sendall(data)
        except OSError:
            pass

    def _down(self, conn: _Conn) -> None:
        try:
            if self.delay > 0:
                self._delayed(conn)
                return
            while data := conn.server.recv(65536):
                if conn.stalled or conn.muted:
                    continue  # swallowed; keep reading so the server is never blocked
                if conn.hit and self.marker:
                    with self._lock:
                        mine, self.marker = self.marker is not None, None
                    if mine:
                        # everything is in place before ``fired`` is set, and ``fired``
                        # is set before the client can notice anything
                        mode = self.mode
                        conn.muted = True
                        others = self._begin_outage(self.outage_seconds, self.refuse) if mode == "outage" else []
                        self.fired.set()
                        if mode == "stall":
                            if self.release_after is not None:
                                timer = threading.Timer(self.release_after, conn.close)
                                timer.daemon = True
                                timer.start()
                            continue
                        conn.close()
                        self._cut(others, self.refuse)
                        return
                conn.client.sendall(data)
        except OSError:
            pass

    def _delayed(self, conn: _Conn) -> None:
        """Forward the server's bytes to the client ``delay`` seconds after
        each piece arrived (a delay line: latency added, bandwidth kept)."""
        import queue

        line: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()

        def send() -> None:
            try:
                while True:
                    due, data = line.get()
                    if not data:
                        return
                    time.sleep(max(0.0, due - time.monotonic()))
                    conn.client.sendall(data)
            except OSError:
                pass

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        try:
            while data := conn.server.recv(65536):
                line.put((time.monotonic() + self.delay, data))
        except OSError:
            pass
        line.put((0.0, b""))
        sender.join()

    def close(self) -> None:
        self._stop = True
        with self._lock:
            listener, self.listener = self.listener, None
            conns, self._conns = self._conns, []
            held, self._held = self._held, []
        if listener is not None:
            _close(listener)
        for c in conns:
            c.close()
        for s in held:
            _close(s)
        self._thread.join(timeout=2)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _contains(tail: bytes, data: bytes, markers: tuple[bytes, ...]) -> bool:
    """Whether a marker occurs in ``tail + data`` and ends inside ``data``
    (``tail``, the end of the previous message, only catches a marker split
    across two reads; a marker seen before must not fire again)."""
    window = tail + data
    for m in markers:
        for needle in (m, m.upper()):
            if window.find(needle, max(0, len(tail) - len(needle) + 1)) != -1:
                return True
    return False


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass


# ------------------------------------------------------------ store URL helpers
def _dynamodb_endpoint(url: str) -> str:
    return dict(parse_qsl(urlparse(url).query))["endpoint_url"]


def _via_proxy(url: str, proxy_port: int) -> str:
    """``url`` (a manifest store URL, or an http(s) endpoint) pointed at the proxy;
    the rest of the URL, query included, is kept."""
    if url.startswith("dynamodb:"):
        p = urlparse(url)
        query = [(k, f"http://127.0.0.1:{proxy_port}" if k == "endpoint_url" else v) for k, v in parse_qsl(p.query)]
        return url.split("?", 1)[0] + "?" + urlencode(query, safe=":/")  # (urlunparse drops the empty host)
    if url.startswith(("redis:", "http:", "https:")):
        p = urlparse(url)
        netloc = p.netloc.rsplit("@", 1)[0] + "@" if "@" in p.netloc else ""
        return urlunparse(p._replace(netloc=f"{netloc}127.0.0.1:{proxy_port}"))
    import sqlalchemy as sa

    return sa.engine.make_url(url).set(host="127.0.0.1", port=proxy_port).render_as_string(hide_password=False)


def _target(url: str) -> tuple[str, int]:
    """(host, port) of the server a store URL (or an http(s) endpoint) names."""
    if url.startswith("dynamodb:"):
        ep = urlparse(_dynamodb_endpoint(url))
        return ep.hostname, ep.port or (443 if ep.scheme == "https" else 80)
    if url.startswith(("redis:", "http:", "https:")):
        p = urlparse(url)
        default = 6379 if p.scheme == "redis" else 443 if p.scheme == "https" else 80
        return p.hostname, p.port or default
    import sqlalchemy as sa

    u = sa.engine.make_url(url)
    return u.host, u.port or (5432 if u.get_backend_name() == "postgresql" else 3306)


via_proxy = _via_proxy
target_of = _target
