"""Shared fixtures of the manifest-store tests: one store URL per backend.

Import the fixtures into a test module (``from tessera_test_store_fixtures
import ...``: tests/conftest.py loads this file under that name).

moto's DynamoDB does not isolate concurrent requests: a cancelled
TransactWriteItems restores a deep copy of the whole table taken when it
started (erasing writes that landed meanwhile), and deep-copying while another
thread writes fails with "dictionary changed size during iteration".  Real
DynamoDB transactions are serializable, so the tests run moto's DynamoDB
requests one at a time (:func:`serialize_moto_dynamodb`).
"""

from __future__ import annotations

import importlib.util
import os
import threading
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from tessera.stores.manifest_store import ManifestStore
from tessera.stores.registry import open_manifest_store
from tessera.stores.uri import normalize_table_uri

REPO = Path(__file__).resolve().parents[2]
STORE_KINDS = ["sqlite", "postgresql", "mysql", "redis", "dynamodb"]

_moto_lock = threading.Lock()


def serialize_moto_dynamodb() -> None:
    """Make moto's in-process DynamoDB handle one request at a time
    (idempotent; affects only this process's moto server)."""
    from moto.dynamodb.responses import DynamoHandler

    if getattr(DynamoHandler.call_action, "_tessera_serialised", False):
        return
    original = DynamoHandler.call_action

    def call_action(self):  # type: ignore[no-untyped-def]
        with _moto_lock:
            return original(self)

    call_action._tessera_serialised = True  # type: ignore[attr-defined]
    DynamoHandler.call_action = call_action  # type: ignore[method-assign]


def load_deploy_module(name: str):
    """Import ``deploy/<name>.py`` (deploy/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"tessera_deploy_{name}", REPO / "deploy" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dynamodb_url(moto_server, table: str) -> str:
    return f"dynamodb:///{table}?region=us-east-1&endpoint_url={moto_server.endpoint}"


@pytest.fixture(scope="module")
def dynamodb_table(moto_server) -> str:
    """A fresh manifest-store table on the moto server, created by the
    provisioning script's function."""
    serialize_moto_dynamodb()
    name = f"tessera-manifests-{uuid.uuid4().hex[:10]}"
    load_deploy_module("provision_dynamodb").create_table(
        name, "us-east-1", moto_server.endpoint, aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    yield name
    moto_server.client("dynamodb").delete_table(TableName=name)


_migrated: set[str] = set()


def open_options(kind: str, url: str | None = None) -> dict:
    """Options for open_manifest_store per backend: SQL stores run the
    migrations (once per server database and process; then only check)."""
    if kind not in ("sqlite", "postgresql", "mysql"):
        return {}
    if kind == "sqlite" or url is None or url not in _migrated:
        if url is not None:
            _migrated.add(url)
        return {"create": True}
    return {"create": False}


@pytest.fixture(params=STORE_KINDS)
def store_url(request, tmp_path) -> str:
    """The URL of one store of each kind (sqlite is a fresh file)."""
    kind = request.param
    if kind == "sqlite":
        return f"sqlite:///{tmp_path}/manifests.db"
    if kind == "postgresql":
        return request.getfixturevalue("postgres_url")
    if kind == "mysql":
        return request.getfixturevalue("mysql_url")
    if kind == "redis":
        return request.getfixturevalue("redis_url")
    return dynamodb_url(request.getfixturevalue("moto_server"), request.getfixturevalue("dynamodb_table"))


def kind_of(url: str) -> str:
    scheme = url.split("://", 1)[0].split("+", 1)[0]
    return {"postgres": "postgresql", "mariadb": "mysql"}.get(scheme, scheme)


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def scratch_sql_url(request, tmp_path):
    """A fresh, empty database of each SQL kind (dropped afterwards)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/scratch.db"
        return
    base = request.getfixturevalue("postgres_url" if request.param == "postgresql" else "mysql_url")
    name = f"tessera_scratch_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text(f"CREATE DATABASE {name}"))
    yield str(sa.engine.make_url(base).set(database=name).render_as_string(hide_password=False))
    with admin.connect() as c:
        c.execute(sa.text(f"DROP DATABASE {name}" + (" WITH (FORCE)" if request.param == "postgresql" else "")))
    admin.dispose()


class Tables:
    """Unique table keys for one test; every table is deleted afterwards."""

    def __init__(self, store: ManifestStore) -> None:
        self.store = store
        self.keys: list[str] = []

    def new(self, bucket: str | None = None, path: str = "warehouse/t") -> str:
        bucket = bucket or f"bucket-{uuid.uuid4().hex[:12]}"
        key = normalize_table_uri(f"s3://{bucket}/{path}")
        self.keys.append(key)
        return key

    def cleanup(self) -> None:
        for key in self.keys:
            self.store.delete_table(key)


@pytest.fixture
def store(store_url):
    """An open store of each kind."""
    s = open_manifest_store(store_url, **open_options(kind_of(store_url), store_url))
    yield s
    s.close()


@pytest.fixture
def tables(store):
    t = Tables(store)
    yield t
    t.cleanup()


__all__ = [
    "REPO",
    "STORE_KINDS",
    "Tables",
    "dynamodb_table",
    "dynamodb_url",
    "kind_of",
    "load_deploy_module",
    "open_options",
    "scratch_sql_url",
    "serialize_moto_dynamodb",
    "store",
    "store_url",
    "tables",
]

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
