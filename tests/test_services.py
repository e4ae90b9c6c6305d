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


def test_moto_decides_each_conditional_put_alone_as_s3_does(moto_server, monkeypatch):
    """Many conditional PUTs of one key at once: exactly one succeeds and the
    object holds its bytes.  moto alone checks ``If-None-Match`` and stores in
    two steps (services._serialize_moto_s3_puts makes them one); a delay
    injected after the check that finds no object opens the window wide."""
    import time

    from botocore.exceptions import ClientError
    from moto.s3.models import S3Backend

    real_get = S3Backend.get_object

    def slow_miss(self, bucket_name, key_name, *args, **kwargs):
        got = real_get(self, bucket_name, key_name, *args, **kwargs)
        if got is None and key_name.startswith("race-"):
            time.sleep(0.05)  # between the check and the store
        return got

    monkeypatch.setattr(S3Backend, "get_object", slow_miss)

    bucket = moto_server.new_bucket()
    for round_ in range(5):
        key = f"race-{round_}"
        won: list[bytes] = []
        lock = threading.Lock()
        start = threading.Barrier(8)

        def put(k: int) -> None:
            s3 = moto_server.client("s3")
            body = f"writer {k}".encode() * 1000
            start.wait()
            try:
                s3.put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")
            except ClientError as exc:
                assert exc.response["Error"]["Code"] in ("PreconditionFailed", "ConditionalRequestConflict"), exc
                return
            with lock:
                won.append(body)

        threads = [threading.Thread(target=put, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1, f"{len(won)} conditional PUTs of one key succeeded"
        stored = moto_server.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
        assert stored == won[0]
