"""tests/services.py under parallel test processes: a ``tessera serve`` whose
port was taken between ``free_port()`` and its start (by another pytest-xdist
worker, by an outgoing connection) starts again on another port, and is never
mistaken for whatever answers on the taken one."""

from __future__ import annotations

import http.server
import json
import threading

import tessera_test_services as services  # loaded by tests/conftest.py


class _Impostor(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = json.dumps({"namespaces": ["not-ours"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_a_taken_port_is_retried_and_not_mistaken_for_our_server(tmp_path, monkeypatch):
    impostor = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Impostor)
    threading.Thread(target=impostor.serve_forever, daemon=True).start()
    taken = impostor.server_address[1]
    real = services.free_port
    ports = iter([taken])
    monkeypatch.setattr(services, "free_port", lambda: next(ports, None) or real())
    try:
        srv = services.TesseraServer(tmp_path, token=None)
        try:
            assert srv.port != taken and srv.proc.poll() is None
            status, body, _ = srv.http("GET", "/v1/namespace/%24/list")
            assert status == 200 and body.get("namespaces") != ["not-ours"], body
        finally:
            srv.stop()
    finally:
        impostor.shutdown()
