"""moto's S3/DynamoDB server in a process of its own, for benchmarks.

An in-process moto server shares the benchmark's interpreter (and its GIL)
with Tessera's Python reader and writer, while pylance's Rust client runs
beside it freely: the comparison would charge moto's request handling to
Tessera.  Here the server runs in a child process, and it is the server that
adds ``latency_ms`` to every GET it answers (a real store's round trip), so
pylance's and Tessera's requests pay the same.  The server also counts the
requests it answers, by method, for everyone: ``counts()`` reads them through
a path of its own (``/_bench/counts``, not an S3 request), ``reset()``
zeroes them.

    with MotoProcess(latency_ms=10) as moto:
        bucket = moto.new_bucket()
        ...  # moto.storage_options() for Tessera/boto3, moto.lance_storage_options() for pylance
        print(moto.counts())  # {"GET": 24, "PUT": 3, "DDB:PutItem": 1, ...}
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request

_SERVER = r"""
import collections, json, sys, threading, time
from moto.moto_server import werkzeug_app
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
import logging
logging.getLogger("werkzeug").setLevel(logging.ERROR)

port, latency = int(sys.argv[1]), float(sys.argv[2]) / 1000
counts, lock = collections.Counter(), threading.Lock()
real_call = werkzeug_app.DomainDispatcherApplication.__call__

def call(self, environ, start_response):
    path, method = environ.get("PATH_INFO", ""), environ["REQUEST_METHOD"]
    if path == "/_bench/counts":
        with lock:
            body = json.dumps(dict(counts)).encode()
            if method == "DELETE":
                counts.clear()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    with lock:  # DynamoDB requests by action, S3 requests by method
        counts["DDB:" + target.rsplit(".", 1)[-1] if target else method] += 1
    if method == "GET" and latency:
        time.sleep(latency)
    return real_call(self, environ, start_response)

werkzeug_app.DomainDispatcherApplication.__call__ = call
server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
server.start()
print("ready", flush=True)
sys.stdin.read()  # until the parent closes our stdin (or dies)
server.stop()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _services():
    """tests/services.py, loaded by path (tests/ on sys.path would shadow packages)."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("tessera_bench_services", os.path.join(here, "..", "services.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_SERVICES = _services()


class MotoProcess(_SERVICES.MotoServer):  # its storage options, clients and buckets; a server of its own
    def __init__(self, latency_ms: float = 0.0) -> None:  # not super().__init__: that starts an in-process server
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, str(self.port), str(latency_ms)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("moto server did not start")
        _SERVICES.wait_for_port(self.port)

    def __enter__(self) -> MotoProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def counts(self) -> dict[str, int]:
        """Requests answered since the last ``reset``, by HTTP method."""
        with urllib.request.urlopen(f"{self.endpoint}/_bench/counts", timeout=10) as r:
            return json.loads(r.read())

    def reset(self) -> dict[str, int]:
        """The counts so far, then zero."""
        req = urllib.request.Request(f"{self.endpoint}/_bench/counts", method="DELETE")
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def stop(self) -> None:  # the child process, not the in-process server
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
