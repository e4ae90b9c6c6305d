"""The S3, GCS and Azure stores' conditional create under faults the emulators
(moto, fake-gcs-server, Azurite) cannot show, made by an HTTP proxy in front of them: a create applied whose
answer is lost is AmbiguousStoreError (never a loss, never a win), a request
refused before it was sent is retried, and a store that ignores the
condition is refused by the conditional-put probe."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta

import pytest
from tessera_test_http_proxy import HttpProxy

from tessera.stores import open_object_store
from tessera.stores.errors import (
    AlreadyExistsError,
    AmbiguousStoreError,
    ConditionalWriteUnsupportedError,
    StoreUnavailableError,
)
from tessera.stores.probe import probe_conditional_put, reset_probe_cache


def _conditional(h) -> bool:
    """A conditional create: S3's and Azure's ``If-None-Match: *``, GCS's ``ifGenerationMatch=0``."""
    return bool(h.headers.get("If-None-Match")) or "ifGenerationMatch=0" in h.path


class FaultProxy(HttpProxy):
    """Forwards to the emulator; ``plan`` says what to do with each conditional
    create in turn: "ok", "lost" (forward, then answer 500), "drop" (forward,
    then close the connection unanswered), "reject" (answer 503, not
    forwarded) or "ignore" (forward without the condition, as a store that
    ignores it would)."""

    def __init__(self, target_port: int, error_body: bytes = b"injected") -> None:
        self.plan: list[str] = []
        self.error_body = error_body
        super().__init__(target_port)

    def handle(self, h, body: bytes) -> None:
        action = self.plan.pop(0) if _conditional(h) and self.plan else "ok"
        if action == "ignore":
            h.path = h.path.replace("ifGenerationMatch=0", "ifGenerationMatch_ignored=0")
            answer = self.forward(h, body, drop=("If-None-Match",))
        elif action != "reject":
            answer = self.forward(h, body)
        if action == "drop":
            h.close_connection = True
            return
        if action in ("lost", "reject"):
            answer = (500 if action == "lost" else 503, [], self.error_body)
        self.reply(h, *answer)


@pytest.fixture(params=["azure", "gcs", "s3"])
def proxied(request):
    """(the proxy, a store that talks to the emulator through it)."""
    if request.param == "s3":
        server = request.getfixturevalue("moto_server")
        proxy = FaultProxy(server.port, b"<Error><Code>InternalError</Code><Message>injected</Message></Error>")
        store = open_object_store(
            f"s3://{server.new_bucket()}/t", {**server.storage_options(), "endpoint_url": proxy.endpoint}
        )
    elif request.param == "azure":
        from azure.storage.blob import ContainerSasPermissions, generate_container_sas

        server = request.getfixturevalue("azurite")
        container = server.new_container()
        proxy = FaultProxy(server.port)
        # a SAS token signs no headers, so the proxy may drop If-None-Match ("ignore")
        sas = generate_container_sas(
            server.account,
            container,
            account_key=server.key,
            permission=ContainerSasPermissions(read=True, write=True, delete=True, list=True, create=True),
            expiry=datetime.now(UTC) + timedelta(hours=1),
        )
        opts = {"account_name": server.account, "sas_token": sas, "endpoint_url": f"{proxy.endpoint}/{server.account}"}
        store = open_object_store(f"az://{container}/t", opts)
    else:
        server = request.getfixturevalue("fake_gcs")
        proxy = FaultProxy(server.port)
        store = open_object_store(
            f"gs://{server.new_bucket()}/t", {**server.storage_options(), "endpoint_url": proxy.endpoint}
        )
    yield proxy, store
    proxy.close()


@pytest.mark.parametrize("fault", ["lost", "drop"])
def test_lost_answer_is_ambiguous_not_a_loss(proxied, fault):
    proxy, store = proxied
    proxy.plan = [fault]  # applied, answer lost; the retry then finds our own object
    with pytest.raises(AmbiguousStoreError):
        store.put_if_not_exists("_versions/1.manifest", b"ours")
    assert store.read("_versions/1.manifest") == b"ours"


def test_rejected_then_retried_wins(proxied):
    proxy, store = proxied
    proxy.plan = ["reject", "reject"]  # 503 before reaching the store: retried, then applied
    store.put_if_not_exists("k", b"v")
    assert store.read("k") == b"v" and proxy.plan == []
    with pytest.raises(AlreadyExistsError):  # refused on the first attempt: a clean loss
        store.put_if_not_exists("k", b"w")
    proxy.plan = ["reject"]
    with pytest.raises(AmbiguousStoreError):  # a 503 could have been applied: a later refusal proves nothing
        store.put_if_not_exists("k", b"w")
    assert store.read("k") == b"v"


def test_a_store_that_ignores_the_condition_is_refused_by_the_probe(proxied):
    proxy, store = proxied
    reset_probe_cache()
    proxy.plan = ["ok", "ignore"]  # the probe's second create goes through unconditionally
    with pytest.raises(ConditionalWriteUnsupportedError):
        probe_conditional_put(store)
    reset_probe_cache()


def test_an_unreachable_store_is_unavailable_not_ambiguous(request):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    for uri, opts in (
        ("gs://bkt/t", {"endpoint_url": f"http://127.0.0.1:{port}", "skip_signature": True, "max_retries": 0}),
        (
            "az://ctr/t",
            {"account_name": "a", "account_key": "a2V5", "endpoint_url": f"http://127.0.0.1:{port}/a"},
        ),
    ):
        store = open_object_store(uri, opts)
        with pytest.raises(StoreUnavailableError) as err:
            store.put_if_not_exists("k", b"v")
        assert not isinstance(err.value, AmbiguousStoreError)
