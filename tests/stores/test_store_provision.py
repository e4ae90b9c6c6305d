"""deploy/: provision_sql.py, provision_dynamodb.py and check_redis.py, run as
scripts and (provision_dynamodb.create_table) imported."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest
from tessera_test_store_fixtures import REPO, load_deploy_module, serialize_moto_dynamodb

from tessera.stores import sql_migrate
from tessera.stores.errors import StoreSchemaError
from tessera.stores.registry import open_manifest_store

SCRIPTS = ["provision_sql", "provision_dynamodb", "check_redis"]


def run(script: str, *args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "deploy" / f"{script}.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(REPO),
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("script", SCRIPTS)
def test_provision_scripts_have_help(script):
    out = run(script, "--help")
    assert out.returncode == 0, out.stderr
    assert "usage:" in out.stdout


def test_provision_sql_upgrades_once(tmp_path):
    url = f"sqlite:///{tmp_path}/m.db"
    check = run("provision_sql", url, "--check")
    assert check.returncode == 3 and "(none)" in check.stdout
    first = run("provision_sql", url)
    assert first.returncode == 0, first.stderr
    assert f"-> {sql_migrate.head_revision()}" in first.stdout
    second = run("provision_sql", url)
    assert second.returncode == 0 and "already at revision" in second.stdout
    assert run("provision_sql", url, "--check").returncode == 0
    open_manifest_store(url, create=False).close()


def test_provision_sql_on_postgres_hides_the_password(postgres_url):
    url = postgres_url.replace("postgres@", "postgres:hunter2@")  # trust auth ignores it
    out = run("provision_sql", url)
    assert out.returncode == 0, out.stderr
    assert "hunter2" not in out.stdout + out.stderr


def test_provision_sql_unreachable_fails():
    out = run("provision_sql", "postgresql+psycopg://postgres@127.0.0.1:1/test")
    assert out.returncode == 1 and "error" in out.stderr


def test_provision_dynamodb_function_is_idempotent(moto_server):
    serialize_moto_dynamodb()
    mod = load_deploy_module("provision_dynamodb")
    name = f"prov-{uuid.uuid4().hex[:8]}"
    try:
        first = mod.create_table(name, "us-east-1", moto_server.endpoint)
        assert first["created"] is True and first["status"] == "ACTIVE"
        second = mod.create_table(name, "us-east-1", moto_server.endpoint)
        assert second["created"] is False
        desc = moto_server.client("dynamodb").describe_table(TableName=name)["Table"]
        assert desc["KeySchema"] == [
            {"AttributeName": "table_key", "KeyType": "HASH"},
            {"AttributeName": "version", "KeyType": "RANGE"},
        ]
        assert desc["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
        store = open_manifest_store(first["store_url"])
        store.check()
        store.close()
    finally:
        moto_server.client("dynamodb").delete_table(TableName=name)


def test_provision_dynamodb_script_and_a_foreign_table(moto_server):
    serialize_moto_dynamodb()
    name = f"prov-cli-{uuid.uuid4().hex[:8]}"
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    try:
        out = run("provision_dynamodb", name, "--region", "us-east-1", "--endpoint-url", moto_server.endpoint, env=env)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("created:") and f"dynamodb:///{name}?region=us-east-1" in out.stdout
        again = run(
            "provision_dynamodb", name, "--region", "us-east-1", "--endpoint-url", moto_server.endpoint, env=env
        )
        assert again.returncode == 0 and again.stdout.startswith("exists:")
    finally:
        moto_server.client("dynamodb").delete_table(TableName=name)
    lance = f"lance-style-{uuid.uuid4().hex[:8]}"
    moto_server.client("dynamodb").create_table(
        TableName=lance,
        KeySchema=[{"AttributeName": "base_uri", "KeyType": "HASH"}, {"AttributeName": "version", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "base_uri", "AttributeType": "S"},
            {"AttributeName": "version", "AttributeType": "N"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    try:
        with pytest.raises(StoreSchemaError, match="base_uri"):
            load_deploy_module("provision_dynamodb").create_table(lance, "us-east-1", moto_server.endpoint)
        out = run("provision_dynamodb", lance, "--region", "us-east-1", "--endpoint-url", moto_server.endpoint, env=env)
        assert out.returncode == 1 and "base_uri" in out.stderr
    finally:
        moto_server.client("dynamodb").delete_table(TableName=lance)


def test_check_redis_reports_persistence(redis_url):
    import redis as redis_py

    appendonly = redis_py.Redis.from_url(redis_url).config_get("appendonly")["appendonly"]
    out = run("check_redis", redis_url)
    assert out.returncode == 0, out.stderr
    assert f"appendonly: {appendonly}" in out.stdout and "appendfsync:" in out.stdout
    strict = run("check_redis", redis_url, "--strict")
    durable = "ok: acknowledged commits are durable" in out.stdout
    assert strict.returncode == (0 if durable else 3)
    if not durable:
        assert "warning:" in out.stdout
    waiting = run("check_redis", redis_url, "--wait-replicas", "2")
    assert "wait_replicas=2 but only" in waiting.stdout


def test_check_redis_unreachable_exits_non_zero():
    t0 = time.monotonic()
    out = run("check_redis", "redis://127.0.0.1:1/0")
    assert out.returncode == 1 and "cannot connect" in out.stderr
    assert time.monotonic() - t0 < 10
