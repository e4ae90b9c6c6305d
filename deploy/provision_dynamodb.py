#!/usr/bin/env python3
"""Create Tessera's DynamoDB manifest-store table (idempotent).

The table has HASH key ``table_key`` (S) and RANGE key ``version`` (N) and is
billed per request.  Once it is active, the store's id is created in it (one
item under the reserved key ``tessera#store``, written only if absent) and
printed.  Running this again on an existing, correct table changes nothing;
an existing table with other keys is reported and left alone.

    python deploy/provision_dynamodb.py tessera-manifests --region us-east-1
    python deploy/provision_dynamodb.py tessera-manifests --region us-east-1 --endpoint-url http://127.0.0.1:5000

Credentials come from boto3's usual chain (environment, ~/.aws, instance role)
unless --profile is given.  Import :func:`create_table` to do the same from
Python.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

try:
    from tessera.stores.dynamodb_store import DynamoDBManifestStore, ensure_table, make_client
    from tessera.stores.errors import StoreError
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tessera.stores.dynamodb_store import DynamoDBManifestStore, ensure_table, make_client
    from tessera.stores.errors import StoreError

log = logging.getLogger("tessera.deploy.provision_dynamodb")


def create_table(
    name: str,
    region: str | None = None,
    endpoint_url: str | None = None,
    *,
    aws_access_key_id: str | None = None,
    aws_secret_access_key: str | None = None,
    aws_session_token: str | None = None,
    profile_name: str | None = None,
    billing_mode: str = "PAY_PER_REQUEST",
    point_in_time_recovery: bool = False,
    wait: bool = True,
) -> dict[str, Any]:
    """Create the table if missing, and the store's id once the table is
    active; return ``{"table", "created", "status", "store_url", "store_id"}``
    (``store_id`` is None while the table is still being created, with
    ``wait=False``).  Raises StoreSchemaError when a table of that name exists
    with other keys, botocore errors when AWS refuses."""
    client = make_client(
        region,
        endpoint_url,
        aws_access_key_id=aws_access_key_id,
        aws_secret_access_key=aws_secret_access_key,
        aws_session_token=aws_session_token,
        profile_name=profile_name,
        read_timeout=30.0,
    )
    try:
        created = ensure_table(client, name, billing_mode=billing_mode, wait=wait)
        if point_in_time_recovery:
            client.update_continuous_backups(
                TableName=name, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
            )
        status = client.describe_table(TableName=name)["Table"].get("TableStatus", "?")
        url = f"dynamodb:///{name}?region={client.meta.region_name}"
        if endpoint_url:
            url += f"&endpoint_url={endpoint_url}"
        store_id = None
        if status in ("ACTIVE", "UPDATING"):
            store_id = DynamoDBManifestStore(client, name, url).store_id()
    finally:
        client.close()
    return {"table": name, "created": created, "status": status, "store_url": url, "store_id": store_id}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("table", help="DynamoDB table name (3-255 of A-Z a-z 0-9 _ . -)")
    parser.add_argument("--region", default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))
    parser.add_argument("--endpoint-url", help="a DynamoDB-compatible endpoint (emulators, VPC endpoints)")
    parser.add_argument("--profile", help="an AWS profile from ~/.aws")
    parser.add_argument("--billing-mode", default="PAY_PER_REQUEST", choices=["PAY_PER_REQUEST", "PROVISIONED"])
    parser.add_argument("--point-in-time-recovery", action="store_true", help="enable PITR backups")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not args.region:
        parser.error("no region: pass --region or set AWS_REGION")
    try:
        result = create_table(
            args.table,
            args.region,
            args.endpoint_url,
            profile_name=args.profile,
            billing_mode=args.billing_mode,
            point_in_time_recovery=args.point_in_time_recovery,
        )
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - botocore's errors, reported plainly
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(f"{'created' if result['created'] else 'exists'}: {result['table']} ({result['status']})")
    print(f"store URL: {result['store_url']}")
    if result["store_id"]:
        print(f"store id: {result['store_id']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
