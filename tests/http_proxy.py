"""A loopback HTTP proxy in front of moto, for faults a real S3 cannot show
(an answer lost after the write, a store that ignores a header).  Subclasses
override :meth:`HttpProxy.handle`; :meth:`forward` and :meth:`reply` do the
rest.  (``fault_proxy.py`` is the TCP-level proxy: lost replies by marker.)

Import it as ``tessera_test_http_proxy`` (tests/conftest.py loads it from this file)."""

from __future__ import annotations

import http.client
import http.server
import threading

_HOP = ("content-length", "transfer-encoding", "connection", "server", "date")


class HttpProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                proxy.handle(self, self.rfile.read(int(self.headers.get("Content-Length") or 0)))

            do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = _any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def handle(self, h: http.server.BaseHTTPRequestHandler, body: bytes) -> None:
        """What to do with one request (default: forward it and relay the answer)."""
        self.reply(h, *self.forward(h, body))

    def forward(
        self, h: http.server.BaseHTTPRequestHandler, body: bytes, drop: tuple[str, ...] = ()
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """Send the request on to moto (without the headers named in ``drop``); its answer."""
        skip = {"expect", *(d.lower() for d in drop)}
        headers = {k: v for k, v in h.headers.items() if k.lower() not in skip}
        conn = http.client.HTTPConnection("127.0.0.1", self.target_port, timeout=30)
        try:
            conn.request(h.command, h.path, body, headers)
            resp = conn.getresponse()
            return resp.status, resp.getheaders(), resp.read()
        finally:
            conn.close()

    @staticmethod
    def reply(
        h: http.server.BaseHTTPRequestHandler, status: int, headers: list[tuple[str, str]], payload: bytes
    ) -> None:
        h.send_response(status)
        for k, v in headers:
            if k.lower() not in _HOP:
                h.send_header(k, v)
        if h.command == "HEAD":  # no body, but the object's length
            h.send_header("Content-Length", dict(headers).get("Content-Length", "0"))
        else:
            h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(payload)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> HttpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
