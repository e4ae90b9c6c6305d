"""Real services for the tests: moto's HTTP server (S3, DynamoDB), Redis,
PostgreSQL and MariaDB on 127.0.0.1.

With ``CI=true`` a missing service is a failure, never a skip; elsewhere the
tests that need it are skipped with the reason.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import subprocess
import sys
import time
import uuid

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

REDIS_URL = os.environ.get("TESSERA_TEST_REDIS", "redis://127.0.0.1:6379/15")
POSTGRES_URL = os.environ.get("TESSERA_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
MYSQL_URL = os.environ.get("TESSERA_TEST_MYSQL", "mysql+pymysql://root@127.0.0.1:3306/test")

AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def unavailable(what: str, why: str) -> None:
    """Fail in CI, skip elsewhere."""
    msg = f"{what} is not available: {why}"
    if IN_CI:
        pytest.fail(msg + " (CI=true: services must be up)")
    pytest.skip(msg)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_DYNAMO_LOCK = __import__("threading").Lock()

#: buckets this session created on moto (their manifest-store rows are swept at the end)
CREATED_BUCKETS: list[str] = []


def _serialize_moto_dynamodb() -> None:
    """moto's DynamoDB is not safe under concurrent requests (a cancelled
    TransactWriteItems restores a stale copy of the table, erasing writes that
    landed meanwhile); real DynamoDB isolates each request.  Make moto handle
    one DynamoDB request at a time, as the real service behaves."""
    from moto.dynamodb.responses import DynamoHandler

    if getattr(DynamoHandler.call_action, "_tessera_serialised", False):
        return
    original = DynamoHandler.call_action

    def call_action(self):  # type: ignore[no-untyped-def]
        with _DYNAMO_LOCK:
            return original(self)

    call_action._tessera_serialised = True  # type: ignore[attr-defined]
    DynamoHandler.call_action = call_action  # type: ignore[method-assign]


_S3_PUT_LOCK = __import__("threading").Lock()


def _serialize_moto_s3_puts() -> None:
    """moto's S3 checks ``If-None-Match: *`` and then stores the object, with
    nothing between the two: two conditional PUTs of one key that arrive
    together both succeed, the second replacing the first (an acknowledged
    commit lost; writers racing on a native table saw a version's manifest
    change under them).  Real S3 decides each conditional PUT atomically.
    Make moto store one object (PUT, or the completion of a multipart upload)
    at a time, so the check and the store happen together."""
    from moto.s3.responses import S3Response

    if getattr(S3Response.put_object, "_tessera_serialised", False):
        return
    for name in ("put_object", "_key_response_post"):
        original = getattr(S3Response, name)

        def serialised(self, *args, _original=original, **kwargs):  # type: ignore[no-untyped-def]
            with _S3_PUT_LOCK:
                return _original(self, *args, **kwargs)

        serialised._tessera_serialised = True  # type: ignore[attr-defined]
        setattr(S3Response, name, serialised)


def wait_for_port(port: int, seconds: float = 20.0) -> None:
    """Until something accepts connections on 127.0.0.1:``port`` (at most ``seconds``)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)


class MotoServer:
    """moto's threaded HTTP server: boto3 talks to it over real HTTP."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        _serialize_moto_dynamodb()
        _serialize_moto_s3_puts()
        # the server's threads must not write to the (shared) log streams: a
        # forked writer process can inherit a stream lock held by one of them
        import logging

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        # port 0: the server's own socket takes a free port, so no other process can take it first
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        self.port = self.server.get_host_and_port()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        wait_for_port(self.port)

    def lance_storage_options(self) -> dict:
        """The same server as pylance's object store options."""
        return {
            "aws_endpoint": self.endpoint,
            "allow_http": "true",
            "aws_region": "us-east-1",
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
        }

    def storage_options(self) -> dict:
        return {
            "endpoint_url": self.endpoint,
            "region": "us-east-1",
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
        }

    def client(self, service: str):
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def new_bucket(self) -> str:
        name = f"tessera-{uuid.uuid4().hex[:12]}"
        self.client("s3").create_bucket(Bucket=name)
        CREATED_BUCKETS.append(name)
        return name

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture(scope="session")
def moto_server():
    for k, v in AWS_ENV.items():
        os.environ.setdefault(k, v)
    try:
        server = MotoServer()
    except ImportError as exc:  # moto[server] missing
        unavailable("moto's server", str(exc))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_url():
    try:
        import redis

        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "not there"
        unavailable(f"Redis at {REDIS_URL}", str(exc))
    return REDIS_URL


def _sql_ok(url: str) -> None:
    """The server answers, and its database holds Tessera's schema at the head
    revision (a fresh machine's empty ``test`` database is provisioned as
    ``deploy/provision_sql.py`` would: idempotent, the rows tests add are
    removed by :func:`forget_session_leftovers`)."""
    import sqlalchemy as sa

    from tessera.stores import sql_migrate

    eng = sa.create_engine(url)
    try:
        with eng.connect() as c:
            c.execute(sa.text("SELECT 1"))
    finally:
        eng.dispose()
    sql_migrate.upgrade(url)


@pytest.fixture(scope="session")
def postgres_url():
    try:
        _sql_ok(POSTGRES_URL)
    except Exception as exc:  # noqa: BLE001
        unavailable(f"PostgreSQL at {POSTGRES_URL}", str(exc))
    return POSTGRES_URL


@pytest.fixture(scope="session")
def mysql_url():
    try:
        _sql_ok(MYSQL_URL)
    except Exception as exc:  # noqa: BLE001
        unavailable(f"MariaDB at {MYSQL_URL}", str(exc))
    return MYSQL_URL


def java_available() -> bool:
    try:
        return subprocess.run(["java", "-version"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def fresh_database(url: str):
    """A new, empty database on the server of ``url`` (dropped by the returned
    cleanup); tests that list 'everything' need one of their own."""
    import sqlalchemy as sa

    name = f"tessera_t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text(f"CREATE DATABASE {name}"))
    new_url = sa.engine.make_url(url).set(database=name).render_as_string(hide_password=False)

    def drop() -> None:
        with admin.connect() as c:
            if admin.dialect.name == "postgresql":
                c.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            else:
                c.execute(sa.text(f"DROP DATABASE IF EXISTS {name}"))
        admin.dispose()

    return new_url, drop


def forget_session_leftovers(basetemp: str) -> dict[str, int]:
    """Remove what this test session left in the shared services: manifest
    rows of tables under ``basetemp`` or in the moto buckets it created,
    catalog rows of tables under ``basetemp`` and the namespaces that held
    them once empty, and Redis keys naming ``basetemp``.  Only this session's
    own objects are touched (another session may be running; each
    pytest-xdist worker has a basetemp of its own, ``.../popen-gwN``, and
    sweeps only what it made).  Best effort: a service that is down is skipped."""
    import sqlalchemy as sa

    removed: dict[str, int] = {}
    prefix = "file://" + basetemp.rstrip("/") + "/%"
    uri_prefix = basetemp.rstrip("/") + "/%"
    for name, url in (("postgres", POSTGRES_URL), ("mysql", MYSQL_URL)):
        try:
            engine = sa.create_engine(url, connect_args={"connect_timeout": 3})
            with engine.begin() as c:
                insp = sa.inspect(c)
                n = 0
                if insp.has_table("tessera_manifest_versions"):
                    for pattern in [prefix] + [f"s3://{b}/%" for b in CREATED_BUCKETS]:
                        n += c.execute(
                            sa.text("DELETE FROM tessera_manifest_versions WHERE table_key LIKE :p"), {"p": pattern}
                        ).rowcount
                if insp.has_table("tessera_tables"):
                    spaces = [
                        r[0]
                        for r in c.execute(
                            sa.text("SELECT DISTINCT namespace FROM tessera_tables WHERE uri LIKE :p"),
                            {"p": uri_prefix},
                        )
                    ]
                    n += c.execute(sa.text("DELETE FROM tessera_tables WHERE uri LIKE :p"), {"p": uri_prefix}).rowcount
                    for ns in spaces:
                        n += c.execute(
                            sa.text(
                                "DELETE FROM tessera_namespaces WHERE name = :n AND name NOT IN "
                                "(SELECT namespace FROM tessera_tables)"
                            ),
                            {"n": ns},
                        ).rowcount
            engine.dispose()
            removed[name] = n
        except Exception:  # noqa: BLE001 - best effort
            continue
    try:
        import redis

        r = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
        keys = list(r.scan_iter(match=f"*{basetemp.rstrip('/')}/*", count=1000))
        if keys:
            r.delete(*keys)
        removed["redis"] = len(keys)
    except Exception:  # noqa: BLE001
        pass
    return removed


def new_dynamodb_store_url(moto: MotoServer) -> str:
    """A freshly provisioned DynamoDB manifest store on moto, as a store URL."""
    from deploy.provision_dynamodb import create_table

    name = f"tessera-{uuid.uuid4().hex[:8]}"
    create_table(name, region="us-east-1", endpoint_url=moto.endpoint)
    return f"dynamodb:///{name}?region=us-east-1&endpoint_url={moto.endpoint}"


class TesseraServer:
    """A ``tessera serve`` process on loopback, its warehouse and its log."""

    def __init__(
        self,
        tmp,
        *args: str,
        token: str | None,
        env: dict[str, str] | None = None,
        prelude: str | None = None,
        port: int | None = None,
        warehouse: str | None = None,
        catalog: str | None = None,
    ) -> None:
        """``prelude``: Python run in the server process before the CLI (a crash hook);
        ``warehouse`` (default ``tmp/wh``) and ``catalog`` (a database URL) as the CLI takes them."""
        self.warehouse = warehouse or str(tmp / "wh")
        self.token = token
        exe = os.path.join(os.path.dirname(sys.executable), "tessera")
        if prelude is not None:
            cmd = [sys.executable, "-c", f"{prelude}\nfrom tessera.catalog.cli import main\nmain()"]
        else:
            cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "tessera.catalog.cli"]
        cmd += ["--warehouse", self.warehouse, *(["--catalog", catalog] if catalog else [])]
        environ = {k: v for k, v in os.environ.items() if not k.startswith("TESSERA_")}
        environ.update(env or {})
        # a free port is free only until someone takes it (another test process, an
        # outgoing connection): a server that finds it taken is started again on another
        for attempt in range(1 if port else 3):
            self.port = port or free_port()
            self.log_path = tmp / f"server-{self.port}.log"
            with open(self.log_path, "wb") as out:  # a file, not a pipe: a full pipe would stall the server
                self.proc = subprocess.Popen(
                    [*cmd, "serve", "--port", str(self.port), *args], stdout=out, stderr=subprocess.STDOUT, env=environ
                )
            if self._wait_ready() or attempt == 2 or port:
                break
        if self.proc.poll() is not None:
            raise RuntimeError(f"the server exited ({self.proc.returncode}):\n{self.log()}")

    def _wait_ready(self) -> bool:
        """Until this process answers (True), or it exits because its port was
        taken (False); any other exit or a minute of silence is an error."""
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                if "address already in use" in self.log().lower():
                    return False
                raise RuntimeError(f"the server exited ({self.proc.returncode}):\n{self.log()}")
            try:
                self.http("GET", "/v1/namespace/%24/list")
                # the answer may come from whoever else holds the port: ours logs that it listens
                if f"running on http://127.0.0.1:{self.port}" in self.log():
                    return True
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server does not answer:\n{self.log()}")
            time.sleep(0.1)

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, token: str | None = "default"):
        """pylance's REST namespace client; the token (default: the server's) as
        the property ``header.Authorization``."""
        token = self.token if token == "default" else token
        props = {"uri": self.uri}
        if token is not None:
            props["header.Authorization"] = f"Bearer {token}"
        import lance_namespace

        return lance_namespace.connect("rest", props)

    def http(self, method: str, path: str, body=None, headers: dict[str, str] | None = None, auth: bool = True):
        """(status, JSON body or raw bytes, headers) of one request on a fresh connection."""
        hdrs = {"Connection": "close"}
        if auth and self.token:
            hdrs["Authorization"] = f"Bearer {self.token}"
        hdrs.update(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(
                method, path, body=body, headers=hdrs, encode_chunked=not isinstance(body, (bytes, type(None)))
            )
            resp = conn.getresponse()
            data = resp.read()
            try:
                parsed = json.loads(data) if data else None
            except ValueError:
                parsed = data
            return resp.status, parsed, dict(resp.getheaders())
        finally:
            conn.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@contextlib.contextmanager
def namespace_warehouse(request, tmp_path, store: str, namespace: str):
    """(namespace properties, the catalog) of a warehouse whose tables commit
    through ``store`` ("native", "catalog", or "redis" / "postgres": that
    service's fixture), with the namespace ``namespace`` created; its tables
    are dropped and purged afterwards."""
    import lance_namespace

    import tessera

    if store in ("redis", "postgres"):
        store = request.getfixturevalue(f"{store}_url")
    props = {"warehouse": str(tmp_path / "wh"), "commit_store": store}
    ns = lance_namespace.connect("tessera", props)
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=[namespace]))
    cat = tessera.connect(warehouse=props["warehouse"])
    try:
        yield props, cat
    finally:
        for name in cat.list_tables(namespace):
            cat.drop_table(name, purge=True)
        cat.close()
        ns.close()


def run_in_threads(target, n: int, timeout: float = 120) -> list[BaseException]:
    """``target(i)`` in ``n`` threads at once; the exceptions they raised."""
    import threading

    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            target(i)
        except BaseException as exc:  # noqa: BLE001 - returned to the caller
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout)
    return errors


def create_lance_dynamodb_table(ddb, name: str) -> None:
    """The DynamoDB table pylance's ``s3+ddb://`` commit store uses (its own
    key schema: ``base_uri``, ``version``), through boto3 client ``ddb``."""
    ddb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "base_uri", "KeyType": "HASH"}, {"AttributeName": "version", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "base_uri", "AttributeType": "S"},
            {"AttributeName": "version", "AttributeType": "N"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
