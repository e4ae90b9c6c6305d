"""Served commits: a Tessera writer that reaches a table through ``tessera serve``
sends its transaction, and the server rebases and commits it next to the
store, in one request (``POST /v1/table/{id}/tessera/commit``; commit/served.py).

Against a real server process on loopback: the requests a commit costs (from
the server's own log), a stale writer rebased by the server, a lost reply and
a re-sent request that commit once, the server dying at each step of a served
commit, typed errors for bad requests, and the fall-back to managed
versioning where a server has no such route."""

from __future__ import annotations

import base64
import os
import re
import time

import pyarrow as pa
import pytest

import tessera
from tessera.commit import CommitOutcomeUnknownError, RetryPolicy
from tessera.commit.served import HttpServedCommits, encode_served_request
from tessera.format.protos import transaction_pb2

lance = pytest.importorskip("lance")
lance_namespace = pytest.importorskip("lance_namespace")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
from tessera_test_fault_proxy import FaultProxy  # noqa: E402
from tessera_test_services import TesseraServer  # noqa: E402

TOKEN = "served-commit-token-0123456789"
AUTH = {"header.Authorization": f"Bearer {TOKEN}"}
COMMIT_ROUTE = "/v1/table/{id}/tessera/commit"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("served")
    token_file = tmp / "token"
    token_file.write_text(TOKEN + "\n")
    srv = TesseraServer(tmp, "--token-file", str(token_file), token=TOKEN)
    yield srv
    srv.stop()


MARK = "/v1/namespace/{id}/exists"


def _requests(srv: TesseraServer) -> list[tuple[str, str, int]]:
    """(method, route, status) of every request the server answered so far.
    A request's line is logged just after its reply is sent: one more request
    (a marker, left out) is waited for, so the lines before it are all there."""

    def lines() -> list[tuple[str, str, int]]:
        found = re.finditer(r"request method=(\S+) route=(\S+) status=(\d+)", srv.log())
        return [(m.group(1), m.group(2), int(m.group(3))) for m in found]

    marks = sum(1 for r in lines() if r[1] == MARK)
    srv.http("POST", "/v1/namespace/%24/exists", {})
    deadline = time.monotonic() + 10
    while sum(1 for r in lines() if r[1] == MARK) <= marks and time.monotonic() < deadline:
        time.sleep(0.02)
    return [r for r in lines() if r[1] != MARK]


def _new_table(srv: TesseraServer, name: str, rows: list[int]) -> list[str]:
    ns = srv.client()
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=[name], mode="exist_ok"))
    tid = [name, "t"]
    lance.write_dataset(pa.table({"i": rows}), namespace_client=ns, table_id=tid)
    return tid


def _rows(srv: TesseraServer, tid: list[str]) -> list[int]:
    ds = lance.dataset(namespace_client=srv.client(), table_id=tid)
    return sorted(ds.to_table().column("i").to_pylist())


def _no_staged(srv: TesseraServer, tid: list[str]) -> None:
    cat = tessera.connect(warehouse=srv.warehouse)
    try:
        uri = cat.load_table(".".join(tid)).uri
    finally:
        cat.close()
    assert [n for n in os.listdir(os.path.join(uri, "_versions")) if ".manifest-" in n] == []


def test_a_commit_is_one_request_and_pylance_reads_it(server):
    tid = _new_table(server, "one", [1])
    t = tessera.Table.open("one.t", namespace=server.uri, namespace_properties=AUTH)
    before = len(_requests(server))
    t.append(pa.table({"i": [2]}))
    t.delete("i = 1")
    t.append(pa.table({"i": [3]}))
    asked = _requests(server)[before:]
    served = [r for r in asked if r[1] == COMMIT_ROUTE]
    assert served == [("POST", COMMIT_ROUTE, 200)] * 3, asked
    assert not [r for r in asked if r[1].endswith("/version/create")], asked  # no managed versioning
    assert len(asked) == 3, asked  # nothing else: the writer reads the committed manifest from the store
    assert t.version == 4
    assert _rows(server, tid) == [2, 3]
    assert [v["version"] for v in t.versions()] == [1, 2, 3, 4]
    _no_staged(server, tid)


def test_a_stale_writer_is_rebased_by_the_server_in_the_same_request(server):
    tid = _new_table(server, "stale", [1])
    t = tessera.Table.open("stale.t", namespace=server.uri, namespace_properties=AUTH)
    ns = server.client()
    for i in (10, 11, 12):  # pylance commits three versions the Tessera writer has not seen
        lance.write_dataset(pa.table({"i": [i]}), namespace_client=ns, table_id=tid, mode="append")
    before = len(_requests(server))
    t.append(pa.table({"i": [2]}))
    asked = _requests(server)[before:]
    assert asked == [("POST", COMMIT_ROUTE, 200)], asked  # no refusal, no second try
    assert t.version == 5
    assert _rows(server, tid) == [1, 2, 10, 11, 12]
    # the server rebased a delete too: the rows the writer deletes are all still there
    lance.write_dataset(pa.table({"i": [13]}), namespace_client=ns, table_id=tid, mode="append")
    t.delete("i = 1")
    assert _rows(server, tid) == [2, 10, 11, 12, 13]


def test_a_lost_reply_is_sent_again_and_commits_once(server):
    tid = _new_table(server, "lossy", [1])
    with FaultProxy("127.0.0.1", server.port) as proxy:
        t = tessera.Table.open("lossy.t", namespace=f"http://127.0.0.1:{proxy.port}", namespace_properties=AUTH)
        proxy.arm("/tessera/commit", "drop")
        before = len(_requests(server))
        t.append(pa.table({"i": [2]}))
        assert proxy.fired.is_set()  # the server committed, the writer never heard
    asked = [r for r in _requests(server)[before:] if r[1] == COMMIT_ROUTE]
    assert asked == [("POST", COMMIT_ROUTE, 200)] * 2, asked  # sent again: the same version answered
    assert t.version == 2
    assert _rows(server, tid) == [1, 2]
    cat = tessera.connect(warehouse=server.warehouse)
    try:
        assert [v["version"] for v in cat.load_table("lossy.t").versions()] == [1, 2]
    finally:
        cat.close()


class _Recording:
    """The writer's transport to the server, keeping each request body it sends (to send again by hand)."""

    def __init__(self, inner: HttpServedCommits) -> None:
        self.inner = inner
        self.bodies: list[dict] = []

    def send(self, table_id, body, timeout):
        self.bodies.append(dict(body))
        return self.inner.send(table_id, body, timeout)


def _recorded_append(srv: TesseraServer, name: str, rows: list[int]) -> dict:
    """Append ``rows`` to ``name`` through the server; the request body the writer sent."""
    t = tessera.Table.open(name, namespace=srv.uri, namespace_properties=AUTH)
    rec = _Recording(t._handler.served)
    t._handler.served = rec
    t.append(pa.table({"i": rows}))
    assert len(rec.bodies) == 1
    return rec.bodies[0]


def test_the_same_request_sent_again_later_is_the_same_version(server):
    """A writer that sends its request again after others committed (its
    reply lost, it timed out) gets the version it has, not a second one."""
    tid = _new_table(server, "twice", [1])
    body = _recorded_append(server, "twice.t", [2])
    lance.write_dataset(pa.table({"i": [3]}), namespace_client=server.client(), table_id=tid, mode="append")
    got = server.http("POST", "/v1/table/twice%24t/tessera/commit", body)
    assert got[0] == 200 and got[1]["version"] == 2, got
    assert _rows(server, tid) == [1, 2, 3]
    assert tessera.Table.open("twice.t", namespace=server.uri, namespace_properties=AUTH).version == 3


def test_bad_requests_are_typed_errors_and_write_nothing(server):
    tid = _new_table(server, "bad", [1])
    good = _recorded_append(server, "bad.t", [2])
    path = "/v1/table/bad%24t/tessera/commit"
    restore = transaction_pb2.Transaction(read_version=1, uuid="r" * 32)
    restore.restore.version = 1
    other = transaction_pb2.Transaction.FromString(base64.b64decode(good["transaction"]))
    other.uuid = "o" * 32
    cases = [
        {**good, "read_version": 0},
        {**good, "transaction": "not base64!"},
        {**good, "surprise": 1},
        {**good, "read_version": 2},  # not the transaction's read version
        {**good, "affected_rows": {"0": base64.b64encode(b"abc").decode()}},
        {**good, "seconds": -1},
        encode_served_request(restore, 1, None, None),  # a restore goes through create_table_version
        encode_served_request(transaction_pb2.Transaction(read_version=1, uuid="x" * 32), 1, None, None),
    ]
    for body in cases:
        got = server.http("POST", path, body)
        assert (got[0], got[1].get("tessera_error")) == (400, "ServedCommitRequestError"), (body, got)
    got = server.http("POST", "/v1/table/bad%24missing/tessera/commit", good)
    assert (got[0], got[1]["tessera_error"]) == (404, "TableNotFoundError"), got
    got = server.http("POST", path, encode_served_request(other, 1, None, None), auth=False)
    assert got[0] == 401, got
    assert _rows(server, tid) == [1, 2]
    assert tessera.Table.open("bad.t", namespace=server.uri, namespace_properties=AUTH).version == 2


def test_a_server_without_the_route_means_managed_versioning(server):
    """A namespace server that does not know the route (another server, an
    older Tessera): the client falls back to create_table_version."""
    tid = _new_table(server, "fallback", [1])
    elsewhere = HttpServedCommits(server.uri + "/elsewhere", AUTH)
    assert elsewhere.send(tid, {}, 5.0) is None and elsewhere.supported is False
    t = tessera.Table.open("fallback.t", namespace=server.uri, namespace_properties=AUTH)
    t._handler.served = elsewhere  # the route answers 404 there, as on a server without it
    before = len(_requests(server))
    t.append(pa.table({"i": [2]}))
    asked = _requests(server)[before:]
    assert [r[1] for r in asked if r[1].endswith("/version/create")] == ["/v1/table/{id}/version/create"], asked
    assert t._handler.served is None  # not asked again
    assert _rows(server, tid) == [1, 2]


@pytest.mark.parametrize("point", ["served_checked", "served_committed"])
def test_a_server_dying_in_a_served_commit(tmp_path, point):
    """The server exits at each step of a served commit: the writer's outcome
    is unknown (typed), and a restarted server shows the commit exactly once
    (after the commit) or not at all (before it); the table stays writable."""
    crash = f"import os\nfrom tessera.commit import faults\nfaults.set_action({point!r}, lambda: os._exit(17))"
    dying = TesseraServer(tmp_path, token=None, prelude=crash)
    tid = _new_table(dying, "crash", [1])  # pylance's create: managed versioning, no served commit
    try:
        quick = RetryPolicy(read_back_seconds=1.0, max_seconds=20.0)
        t = tessera.Table.open("crash.t", namespace=dying.uri, retry=quick)
        with pytest.raises(CommitOutcomeUnknownError):
            t.append(pa.table({"i": [2]}))
        assert dying.proc.wait(20) == 17  # it died at the fault point
    finally:
        dying.stop()
    again = TesseraServer(tmp_path, token=None)
    try:
        expected = [1, 2] if point == "served_committed" else [1]
        assert _rows(again, tid) == expected
        t = tessera.Table.open("crash.t", namespace=again.uri)
        t.append(pa.table({"i": [3]}))
        assert _rows(again, tid) == [*expected, 3]
        assert [v["version"] for v in t.versions()] == list(range(1, len(expected) + 2))
    finally:
        again.stop()


def test_deletes_of_one_fragment_by_two_stale_writers_are_merged_by_the_server(server):
    """Two writers delete different rows of one fragment from the same
    version: the second one's deletion vector is merged with the first's on
    the server (the rows it deletes travel with its transaction)."""
    tid = _new_table(server, "merge", list(range(10)))
    a = tessera.Table.open("merge.t", namespace=server.uri, namespace_properties=AUTH)
    b = tessera.Table.open("merge.t", namespace=server.uri, namespace_properties=AUTH)
    before = len(_requests(server))
    a.delete("i = 1")
    b.delete("i IN (2, 3)")  # stale: built on version 1, rebased over a's delete by the server
    asked = _requests(server)[before:]
    assert asked == [("POST", COMMIT_ROUTE, 200)] * 2, asked
    assert _rows(server, tid) == [0, 4, 5, 6, 7, 8, 9]
    assert b.version == 3 and b.count_rows() == 7


def test_a_writer_from_before_a_drop_and_recreate_is_refused(server):
    """A Tessera writer holds version 1 of a table; the table is dropped and
    created again at its place (version 1 again, another transaction): the
    writer's served commit names the transaction of the version it read, and
    the server refuses it (before, the append landed in the new table)."""
    tid = _new_table(server, "recreated", [1])
    stale = tessera.Table.open("recreated.t", namespace=server.uri, namespace_properties=AUTH)
    cat = tessera.connect(warehouse=server.warehouse)
    try:
        cat.drop_table("recreated.t", purge=True)
    finally:
        cat.close()
    lance.write_dataset(pa.table({"i": [10]}), namespace_client=server.client(), table_id=tid, mode="create")
    with pytest.raises(tessera.errors.IncarnationMismatchError, match="dropped and recreated"):
        stale.append(pa.table({"i": [2]}))
    assert _rows(server, tid) == [10]
    fresh = tessera.Table.open("recreated.t", namespace=server.uri, namespace_properties=AUTH)
    fresh.append(pa.table({"i": [11]}))
    assert _rows(server, tid) == [10, 11] and fresh.version == 2
    bad = {**encode_served_request(transaction_pb2.Transaction(read_version=1, uuid="b" * 32), 1, None, None)}
    for base in (7, "", "x" * 300):
        got = server.http("POST", "/v1/table/recreated%24t/tessera/commit", {**bad, "base_transaction": base})
        assert (got[0], got[1].get("tessera_error")) == (400, "ServedCommitRequestError"), (base, got)


def test_a_server_from_before_base_transaction_gets_requests_without_it(server):
    """An older server refuses the field as unknown: the client sends the
    request again without it, and leaves it out from then on."""
    from tessera.commit.errors import ServedCommitRequestError

    tid = _new_table(server, "older", [1])
    t = tessera.Table.open("older.t", namespace=server.uri, namespace_properties=AUTH)
    real = t._handler.served
    bodies: list[set[str]] = []

    class Older:
        def send(self, table_id, body, timeout):
            bodies.append(set(body))
            if "base_transaction" in body:
                raise ServedCommitRequestError("unknown fields base_transaction")
            return real.send(table_id, body, timeout)

    t._handler.served = Older()
    t.append(pa.table({"i": [2]}))
    t.append(pa.table({"i": [3]}))
    assert ["base_transaction" in b for b in bodies] == [True, False, False]
    assert _rows(server, tid) == [1, 2, 3]
