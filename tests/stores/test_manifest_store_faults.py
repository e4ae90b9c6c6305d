"""Lost responses: a TCP proxy between the store and its server swallows the
reply to one write (the server applied it) or stalls it.  The store must raise
AmbiguousStoreError, never VersionExistsError or a plain failure, and the row
must be readable afterwards; a retry of the same reservation succeeds."""

from __future__ import annotations

import os
import socket
import sys
import uuid

import pytest
from tessera_test_fault_proxy import FaultProxy, _target, _via_proxy
from tessera_test_store_fixtures import dynamodb_table, dynamodb_url  # noqa: F401

from tessera.stores.errors import AmbiguousStoreError
from tessera.stores.manifest_store import VersionRecord
from tessera.stores.registry import open_manifest_store
from tessera.stores.uri import normalize_table_uri


@pytest.fixture(params=["postgresql", "mysql", "redis", "dynamodb"])
def direct_url(request):
    if request.param == "postgresql":
        return request.getfixturevalue("postgres_url")
    if request.param == "mysql":
        return request.getfixturevalue("mysql_url")
    if request.param == "redis":
        return request.getfixturevalue("redis_url")
    return dynamodb_url(request.getfixturevalue("moto_server"), request.getfixturevalue("dynamodb_table"))


def _open(url: str, **extra):
    sql = not url.startswith(("redis", "dynamodb"))
    return open_manifest_store(url, **({"create": True} if sql else {}), **extra)


def _record(key: str, version: int) -> VersionRecord:
    return VersionRecord(
        key, version, f"_versions/{version:020d}.manifest-{uuid.uuid4()}", 10, f"txn-{uuid.uuid4()}", "inc"
    )


def test_lost_reply_to_reserve_and_flip_is_ambiguous(direct_url):
    direct = _open(direct_url)
    proxy = FaultProxy(*_target(direct_url))
    proxied = _open(_via_proxy(direct_url, proxy.port))
    key = normalize_table_uri(f"s3://fault-{uuid.uuid4().hex[:10]}/t")
    try:
        first = _record(key, 1)
        proxied.reserve(first)  # the path through the proxy works
        record = _record(key, 2)
        proxy.arm(record.transaction_uuid)
        with pytest.raises(AmbiguousStoreError):
            proxied.reserve(record)
        assert proxy.fired.is_set()
        assert direct.get(key, 2) == record  # the server applied it
        proxied.reserve(record)  # the retry finds its own row: success, not VersionExistsError
        final = record.path[: record.path.rindex(".manifest-") + len(".manifest")]
        proxy.arm(final)
        with pytest.raises(AmbiguousStoreError):
            proxied.flip(key, 2, record.path, final)
        assert direct.get(key, 2).path == final
        assert proxied.flip(key, 2, record.path, final) is True  # idempotent retry
    finally:
        direct.delete_table(key)
        direct.close()
        proxied.close()
        proxy.close()


@pytest.mark.parametrize("kind", ["redis", "mysql", "dynamodb"])
def test_stalled_reply_times_out_as_ambiguous(kind, request):
    if kind == "redis":
        direct_url, extra = request.getfixturevalue("redis_url"), {"socket_timeout": 0.5}
    elif kind == "mysql":
        direct_url, extra = request.getfixturevalue("mysql_url"), {"io_timeout": 1.0}
    else:
        moto = request.getfixturevalue("moto_server")
        direct_url, extra = dynamodb_url(moto, request.getfixturevalue("dynamodb_table")), {"read_timeout": 1.0}
    direct = _open(direct_url)
    proxy = FaultProxy(*_target(direct_url))
    proxied = _open(_via_proxy(direct_url, proxy.port), **extra)
    key = normalize_table_uri(f"s3://stall-{uuid.uuid4().hex[:10]}/t")
    try:
        record = _record(key, 1)
        proxy.arm(record.transaction_uuid, mode="stall")
        with pytest.raises(AmbiguousStoreError):
            proxied.reserve(record)
        assert direct.get(key, 1) == record
    finally:
        direct.delete_table(key)
        direct.close()
        proxied.close()
        proxy.close()


# ------------------------------------------------- Redis with a real replica: WAIT
def _redis_server(tmp_path, name: str, *extra: str):
    import shutil
    import subprocess
    import time

    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("redis-server is not on PATH (CI=true: services must be up)")
        pytest.skip("redis-server is not on PATH")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = tmp_path / name
    workdir.mkdir()
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(workdir),
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    pytest.fail(f"redis-server on port {port} did not start")


def test_redis_wait_replicas_with_a_real_replica(tmp_path):
    import time

    import redis as redis_py

    primary, pport = _redis_server(tmp_path, "primary", "--repl-diskless-sync-delay", "0")
    replica, rport = _redis_server(tmp_path, "replica")
    try:
        redis_py.Redis(port=rport).replicaof("127.0.0.1", pport)
        deadline = time.monotonic() + 10
        while redis_py.Redis(port=pport).info("replication").get("slave0", {}).get("state") != "online":
            assert time.monotonic() < deadline, "the replica did not attach"
            time.sleep(0.05)
        url = f"redis://127.0.0.1:{pport}/0"
        store = open_manifest_store(url, wait_replicas=1, wait_timeout_ms=2000)
        assert store.durability_problems() == []  # AOF fsync always, one replica, WAIT 1
        key = normalize_table_uri(f"s3://wait-{uuid.uuid4().hex[:8]}/t")
        record = _record(key, 1)
        store.reserve(record)  # acknowledged by the replica
        assert redis_py.Redis(port=rport, decode_responses=True).hget(store._row_key(key, 1), "transaction_uuid") == (
            record.transaction_uuid
        )
        import subprocess

        out = subprocess.run(
            [
                sys.executable,
                os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "check_redis.py"),
                url,
                "--wait-replicas",
                "1",
                "--strict",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 0 and "ok: acknowledged commits are durable" in out.stdout, out.stdout + out.stderr
        unwaited = open_manifest_store(url)
        assert any("wait_replicas=0" in p for p in unwaited.durability_problems())
        unwaited.close()
        replica.terminate()
        replica.wait(timeout=10)
        second = _record(key, 2)
        store.wait_timeout_ms = 200
        with pytest.raises(AmbiguousStoreError, match="0 of 1 replicas"):
            store.reserve(second)  # applied on the primary only
        assert store.get(key, 2) == second
        store.close()
    finally:
        for proc in (replica, primary):
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=10)
