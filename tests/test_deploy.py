"""deploy/: the local stack starts, verifies and stops what it started."""

from __future__ import annotations

import socket

from deploy.local_stack import LocalStack, main


def test_local_stack_starts_checks_and_stops(redis_url, postgres_url):
    stack = LocalStack(redis_url=redis_url, postgres_url=postgres_url).start()
    port = int(stack.endpoint.rsplit(":", 1)[1])
    status = stack.check()
    assert status == {"moto": "ok", "redis": "ok", "postgres": "ok"}
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=stack.endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    s3.create_bucket(Bucket="stack-check")
    stack.stop()
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0  # stopped


def test_local_stack_check_reports_a_dead_service(redis_url):
    assert (
        main(["--check", "--redis", "redis://127.0.0.1:1/0", "--postgres", "postgresql+psycopg://x@127.0.0.1:1/x"]) == 1
    )
