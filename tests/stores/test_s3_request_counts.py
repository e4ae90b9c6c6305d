"""The requests one append costs on S3 (moto), counted where they arrive: at
moto's HTTP server.

Pinned exactly, so a change that adds a request fails here: with a held
``Table`` handle, with a fresh ``Table.open`` in the same process, and in a new
process, for native commits and for commits through DynamoDB.  A new process
trusts the conditional-put verdict the table's manifest records
(``tessera.commit.conditional_put``, see :mod:`stores.probe`) and sends no
probe; a store that ignores ``If-None-Match`` (a loopback proxy that strips the
header: moto honours it, so the fault is injected) is still refused before
anything is committed.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pytest
from tessera_test_http_proxy import HttpProxy

from tessera.catalog import Table
from tessera.stores import probe
from tessera.stores.errors import ConditionalWriteUnsupportedError
from tessera.stores.probe import CONFIG_CONDITIONAL_PUT, reset_probe_cache

# -- counting at the server --------------------------------------------------------------


class ServerLog:
    """Every request moto's server receives while a :func:`counting` block
    runs, as (method, path, If-None-Match header, DynamoDB operation, DynamoDB
    table names)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str, str, str, frozenset[str]]] = []

    def s3(self, bucket: str, prefix: str) -> list[tuple[str, str]]:
        """The S3 requests to ``s3://bucket/prefix`` as (method, what): what is
        "LIST" for a listing of the bucket, else the folder of the key under
        the prefix ("data", "_versions", "_transactions", "_tessera"),
        with " if-none-match" for a conditional PUT."""
        out = []
        for method, path, inm, _, _ in self.requests:
            if path.rstrip("/") == f"/{bucket}":
                out.append((method, "LIST"))
            elif path.startswith(f"/{bucket}/{prefix}/"):
                folder = path[len(f"/{bucket}/{prefix}/") :].split("/", 1)[0]
                out.append((method, folder + (" if-none-match" if inm else "")))
        return out

    def dynamodb(self, table: str) -> list[str]:
        """The DynamoDB operations on ``table``, in order."""
        return [op for _, _, _, op, tables in self.requests if op and table in tables]


def _table_names(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["TableName"]} if isinstance(node.get("TableName"), str) else set()
        for k, v in node.items():
            if k == "RequestItems" and isinstance(v, dict):
                found |= set(v)
            found |= _table_names(v)
        return found
    if isinstance(node, list):
        return set().union(*map(_table_names, node)) if node else set()
    return set()


@contextmanager
def counting(moto_server) -> Iterator[ServerLog]:
    """Record the requests moto's server answers (its WSGI app is wrapped;
    the requests are served unchanged)."""
    server = moto_server.server._server  # werkzeug's server: calls ``server.app`` per request
    app = server.app
    log = ServerLog()

    def recording(environ, start_response):
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        tables: frozenset[str] = frozenset()
        if target:
            body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
            environ["wsgi.input"] = io.BytesIO(body)
            try:
                tables = frozenset(_table_names(json.loads(body)))
            except ValueError:
                pass
        with log.lock:
            log.requests.append(
                (
                    environ["REQUEST_METHOD"],
                    environ.get("PATH_INFO", ""),
                    environ.get("HTTP_IF_NONE_MATCH", ""),
                    target.rsplit(".", 1)[-1] if target else "",
                    tables,
                )
            )
        return app(environ, start_response)

    server.app = recording
    try:
        yield log
    finally:
        server.app = app


def _in_new_process(code: str) -> dict:
    """Run ``code`` (which sets ``result``) in a fresh interpreter; its ``result``."""
    script = "import json\n" + textwrap.dedent(code) + "\nprint('RESULT ' + json.dumps(result))\n"
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=180, env={**os.environ}
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    assert out.returncode == 0 and lines, out.stdout + out.stderr
    return json.loads(lines[-1][len("RESULT ") :])


_APPEND_IN_NEW_PROCESS = """
import pyarrow as pa
from tessera.catalog import Table
from tessera.stores.errors import ConditionalWriteUnsupportedError
try:
    t = Table.open({uri!r}, storage_options={opts!r}, commit_store={store!r})
    result = {{"version": t.append(pa.table({{"a": [9]}})).version}}
except ConditionalWriteUnsupportedError as exc:
    result = {{"refused": str(exc)}}
"""

ROWS = pa.table({"a": [1, 2]})

#: a native append on a table already open: the data file, the transaction
#: file (as pylance writes it, before the manifest), the lineage check (a
#: ranged GET of the manifest read) and the conditional PUT of the manifest
NATIVE_HELD = [
    ("PUT", "data"),
    ("PUT", "_transactions"),
    ("GET", "_versions"),
    ("PUT", "_versions if-none-match"),
]
#: opening first: a LIST of _versions/ and the latest manifest (pylance: 6 requests
#: too, with a second LIST where Tessera re-reads the manifest's tail)
NATIVE_OPEN = [("GET", "LIST"), ("GET", "_versions"), *NATIVE_HELD]
#: a process's first commit of a table on an object store looks for a commit intent
#: (commit/intent.py: a writer that keeps losing asks the others to wait), one GET;
#: then every CHECK_EVERY-th commit and after a lost try


def first_commit(requests: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``requests`` with the intent GET a process's first commit of the table
    makes, after its data file and before its transaction file."""
    at = requests.index(("PUT", "_transactions"))
    return [*requests[:at], ("GET", "_versions"), *requests[at:]]


#: the probe a writer without a trusted verdict sends first
PROBE = [("PUT", "_tessera if-none-match"), ("PUT", "_tessera if-none-match"), ("DELETE", "_tessera")]
#: the same probe as moto sees it behind a proxy that strips the header
STRIPPED_PROBE = [("PUT", "_tessera"), ("PUT", "_tessera"), ("DELETE", "_tessera")]

#: through DynamoDB, on S3: data, the transaction file, the staged manifest,
#: its create-only publication at the final name, the staged copy's deletion
DYNAMO_HELD_S3 = [
    ("PUT", "data"),
    ("PUT", "_transactions"),
    ("PUT", "_versions"),
    ("PUT", "_versions if-none-match"),
    ("DELETE", "_versions"),
]
#: opening first: the manifest after the latest row (a version a writer outside
#: the store may have committed: 404) and the latest manifest
DYNAMO_OPEN_S3 = [("GET", "_versions"), ("GET", "_versions"), *DYNAMO_HELD_S3]
#: the reservation (with its predecessor check) and the flip to the final path
DYNAMO_HELD = ["TransactWriteItems", "UpdateItem"]
#: opening (the store object is the process's, checked once): the latest row,
#: then the store item read again for its id (a recreated store is refused)
DYNAMO_OPEN = ["Query", "GetItem", *DYNAMO_HELD]


@pytest.fixture
def bucket(moto_server) -> str:
    return moto_server.new_bucket()


def _versions(moto_server, bucket: str, prefix: str) -> list[str]:
    resp = moto_server.client("s3").list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/_versions/")
    return sorted(o["Key"] for o in resp.get("Contents", []) if o["Key"].endswith(".manifest"))


# -- native ------------------------------------------------------------------------------


def test_native_append_requests(moto_server, bucket):
    uri, opts = f"s3://{bucket}/t", moto_server.storage_options()
    reset_probe_cache()
    with counting(moto_server) as created:
        t = Table.create(uri, ROWS, storage_options=opts)
    assert created.s3(bucket, "t")[:3] == PROBE  # a new table is always probed
    record = t.manifest.config[CONFIG_CONDITIONAL_PUT]
    assert record.split()[0] == "verified"

    with counting(moto_server) as held:
        t = t.append(ROWS)
    assert held.s3(bucket, "t") == NATIVE_HELD
    assert t.manifest.config[CONFIG_CONDITIONAL_PUT] == record  # carried forward

    with counting(moto_server) as fresh:
        Table.open(uri, storage_options=opts).append(ROWS)
    assert fresh.s3(bucket, "t") == NATIVE_OPEN

    code = _APPEND_IN_NEW_PROCESS.format(uri=uri, opts=opts, store=None)
    with counting(moto_server) as new:
        assert _in_new_process(code) == {"version": 4}
    assert new.s3(bucket, "t") == first_commit(NATIVE_OPEN)  # no probe: the manifest records the verdict
    assert Table.open(uri, storage_options=opts).manifest.config[CONFIG_CONDITIONAL_PUT] == record


def test_an_expired_or_foreign_record_is_probed_again(moto_server, bucket, monkeypatch):
    """A record older than the TTL, or made for another endpoint or bucket,
    is not trusted: the writer probes (3 requests) and records its own verdict."""
    uri, opts = f"s3://{bucket}/t", moto_server.storage_options()
    t = Table.create(uri, ROWS, storage_options=opts)
    record = t.manifest.config[CONFIG_CONDITIONAL_PUT]

    reset_probe_cache()  # as a new process
    later = time.time() + probe.VERDICT_TTL + 60
    monkeypatch.setattr(probe, "_now", lambda: later)
    with counting(moto_server) as log:
        t = Table.open(uri, storage_options=opts).append(ROWS)
    assert log.s3(bucket, "t") == NATIVE_OPEN[:3] + PROBE + NATIVE_OPEN[3:]
    refreshed = t.manifest.config[CONFIG_CONDITIONAL_PUT]
    assert refreshed.split()[:2] == record.split()[:2] and int(refreshed.split()[2]) == int(later)
    monkeypatch.undo()

    # the same table reached through another endpoint (a proxy): another scope
    with HeaderProxy(moto_server.port) as proxy:
        reset_probe_cache()
        popts = {**opts, "endpoint_url": proxy.endpoint}
        with counting(moto_server) as log:
            Table.open(uri, storage_options=popts).append(ROWS)
        assert log.s3(bucket, "t") == NATIVE_OPEN[:3] + PROBE + NATIVE_OPEN[3:]


# -- a store that ignores If-None-Match (fault injected by a proxy) ----------------------


class HeaderProxy(HttpProxy):
    """A loopback HTTP proxy in front of moto.  ``mode`` says what it does to a
    PUT carrying ``If-None-Match``: "pass" (forward it), "strip" (forward it
    without the header: the store then overwrites, like COS on a bucket that
    had versioning) or "501" (answer NotImplemented, as S3 did before it
    supported the header)."""

    def __init__(self, target_port: int, mode: str = "pass") -> None:
        self.mode = mode
        super().__init__(target_port)

    def handle(self, h, body: bytes) -> None:
        conditional = h.command == "PUT" and "If-None-Match" in h.headers
        if conditional and self.mode == "501":
            payload = (
                b"<Error><Code>NotImplemented</Code><Message>A header you provided implies "
                b"functionality that is not implemented</Message><Header>If-None-Match</Header></Error>"
            )
            self.reply(h, 501, [("Content-Type", "application/xml")], payload)
        elif conditional and self.mode == "strip":
            self.reply(h, *self.forward(h, body, drop=("If-None-Match",)))
        else:
            self.reply(h, *self.forward(h, body))


def test_a_store_that_ignores_the_condition_is_refused(moto_server, bucket):
    """Creating a table, and a new process opening a table whose verdict was
    recorded on another endpoint: both probe, and nothing is committed."""
    opts = moto_server.storage_options()
    with HeaderProxy(moto_server.port, "strip") as proxy:
        popts = {**opts, "endpoint_url": proxy.endpoint}
        reset_probe_cache()
        with counting(moto_server) as log, pytest.raises(ConditionalWriteUnsupportedError, match="ignores"):
            Table.create(f"s3://{bucket}/new", ROWS, storage_options=popts)
        assert log.s3(bucket, "new") == STRIPPED_PROBE  # the probe, and nothing of the table

        uri = f"s3://{bucket}/t"
        Table.create(uri, ROWS, storage_options=opts)  # verified and recorded on moto's own endpoint
        code = _APPEND_IN_NEW_PROCESS.format(uri=uri, opts=popts, store=None)
        with counting(moto_server) as log:
            got = _in_new_process(code)
        assert "ignores the If-None-Match condition" in got["refused"]
        assert log.s3(bucket, "t") == [("GET", "LIST"), ("GET", "_versions"), ("PUT", "data"), *STRIPPED_PROBE]
        assert len(_versions(moto_server, bucket, "t")) == 1  # no version was added


def test_a_recorded_verdict_is_dropped_when_the_store_says_it_cannot(moto_server, bucket, monkeypatch):
    """The record names this very endpoint, so a new process trusts it; when the
    store then answers the conditional PUT "not implemented", that commit is
    refused, the process distrusts the record and probes before the next one."""
    opts = moto_server.storage_options()
    with HeaderProxy(moto_server.port, "pass") as proxy:
        popts = {**opts, "endpoint_url": proxy.endpoint}
        uri = f"s3://{bucket}/t"
        Table.create(uri, ROWS, storage_options=popts)  # verified through the proxy, honest for now
        proxy.mode = "501"
        reset_probe_cache()  # as a new process
        t = Table.open(uri, storage_options=popts)
        with counting(moto_server) as log, pytest.raises(ConditionalWriteUnsupportedError, match="does not support"):
            t.append(ROWS)
        # trusted: no probe; the conditional PUT never reached moto
        assert log.s3(bucket, "t") == [("PUT", "data"), ("PUT", "_transactions"), ("GET", "_versions")]
        with counting(moto_server) as log, pytest.raises(ConditionalWriteUnsupportedError):
            t.append(ROWS)
        assert log.s3(bucket, "t")[1:] == [("DELETE", "_tessera")]  # probed again (the PUTs got 501)
        assert len(_versions(moto_server, bucket, "t")) == 1

        proxy.mode = "strip"  # and a store that overwrites after the record expired
        reset_probe_cache()
        t = Table.open(uri, storage_options=popts)
        later = time.time() + probe.VERDICT_TTL + 60
        monkeypatch.setattr(probe, "_now", lambda: later)
        with counting(moto_server) as log, pytest.raises(ConditionalWriteUnsupportedError, match="ignores"):
            t.append(ROWS)
        assert log.s3(bucket, "t") == [("PUT", "data"), *STRIPPED_PROBE]
        assert len(_versions(moto_server, bucket, "t")) == 1


# -- through DynamoDB --------------------------------------------------------------------


def test_dynamodb_append_requests(moto_server, bucket):
    from tessera_test_services import new_dynamodb_store_url

    uri, opts = f"s3://{bucket}/t", moto_server.storage_options()
    store = new_dynamodb_store_url(moto_server)
    ddb_table = store.split("?")[0].rsplit("/", 1)[1]
    with counting(moto_server) as created:
        t = Table.create(uri, ROWS, storage_options=opts, commit_store=store)
    assert not [r for r in created.requests if "/_tessera/" in r[1]]  # the external store decides: no probe

    with counting(moto_server) as held:
        t = t.append(ROWS)
    assert held.s3(bucket, "t") == DYNAMO_HELD_S3
    assert held.dynamodb(ddb_table) == DYNAMO_HELD

    with counting(moto_server) as fresh:
        Table.open(uri, storage_options=opts, commit_store=store).append(ROWS)
    assert fresh.s3(bucket, "t") == DYNAMO_OPEN_S3
    assert fresh.dynamodb(ddb_table) == DYNAMO_OPEN  # DescribeTable: once per process

    code = _APPEND_IN_NEW_PROCESS.format(uri=uri, opts=opts, store=store)
    with counting(moto_server) as new:
        assert _in_new_process(code) == {"version": 4}
    assert new.s3(bucket, "t") == first_commit(DYNAMO_OPEN_S3)
    # a new process opens the store: DescribeTable and the store item (its id), then the latest row
    assert new.dynamodb(ddb_table) == ["DescribeTable", "GetItem", "Query", *DYNAMO_HELD]


def test_clients_are_built_once_per_process(moto_server, bucket):
    """Opening tables again builds no client: S3's and DynamoDB's are shared
    per endpoint, region and credentials."""
    from tessera.stores.dynamodb_table import make_client
    from tessera.stores.s3 import S3ObjectStore

    opts = moto_server.storage_options()
    a = S3ObjectStore(f"s3://{bucket}/a", opts)
    b = S3ObjectStore(f"s3://{bucket}/b", dict(opts))
    assert a._client is b._client
    other = S3ObjectStore(f"s3://{bucket}/a", {**opts, "aws_access_key_id": "other"})
    assert other._client is not a._client
    assert make_client("us-east-1", moto_server.endpoint) is make_client("us-east-1", moto_server.endpoint)
    assert make_client("us-east-1", moto_server.endpoint) is not make_client("us-west-2", moto_server.endpoint)
    assert [] == _in_new_process(
        f"""
        import sys
        import pyarrow as pa
        from tessera.catalog import Table
        t = Table.create("s3://{bucket}/{uuid.uuid4().hex}", pa.table({{"a": [1]}}), storage_options={opts!r})
        result = sorted(m for m in sys.modules if m.split(".")[0] in ("boto3", "s3transfer"))
        """
    )


def test_a_new_process_makes_one_s3_client(moto_server, bucket):
    """A process that opens a table on S3 and commits to it (the conditional
    create of its manifest included) makes one botocore client, and botocore
    loads the S3 service model once."""
    opts = moto_server.storage_options()
    uri = f"s3://{bucket}/{uuid.uuid4().hex}"
    Table.create(uri, ROWS, storage_options=opts)
    made = _in_new_process(
        f"""
        import botocore.client, botocore.loaders
        import pyarrow as pa
        from tessera.catalog import Table
        made, models = [], []
        real_client = botocore.client.ClientCreator.create_client
        real_model = botocore.loaders.Loader.load_service_model
        def create_client(self, service_name, *a, **k):
            made.append(service_name)
            return real_client(self, service_name, *a, **k)
        def load_service_model(self, service_name, type_name, *a, **k):
            models.append((service_name, type_name))
            return real_model(self, service_name, type_name, *a, **k)
        botocore.client.ClientCreator.create_client = create_client
        botocore.loaders.Loader.load_service_model = load_service_model
        t = Table.open({uri!r}, storage_options={opts!r})
        t.append(pa.table({{"a": [3]}}))
        t.append(pa.table({{"a": [4]}}))
        result = [made, models.count(("s3", "service-2")), t.count_rows()]
        """
    )
    assert made == [["s3"], 1, 4]
