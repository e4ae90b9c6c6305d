"""The DynamoDB table behind :class:`~stores.dynamodb_store.DynamoDBManifestStore`:
its key schema, an idempotent :func:`ensure_table` (used by
``deploy/provision_dynamodb.py`` and ``from_url(create=True)``), and the
client every caller uses (:func:`make_client`: botocore retries off, short
timeouts; one per process per region, endpoint, credentials and timeouts).

Besides the version rows, the table holds one item describing the store
itself, under :data:`STORE_ITEM_KEY` (``table_key`` ``tessera#store``,
``version`` 0): ``store_id`` (a random uuid4 hex, written once by a
conditional put), ``layout`` (:data:`LAYOUT`) and ``created_at``.  That key can
never be a table's: table keys are normalised URIs (``s3://...``,
``file:///...``), which the stores' argument checks enforce.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from botocore.exceptions import ClientError

from .errors import InvalidURIError, StoreSchemaError, StoreUnavailableError
from .s3_options import aws_session

log = logging.getLogger(__name__)

KEY_SCHEMA = [
    {"AttributeName": "table_key", "KeyType": "HASH"},
    {"AttributeName": "version", "KeyType": "RANGE"},
]
ATTRIBUTE_DEFINITIONS = [
    {"AttributeName": "table_key", "AttributeType": "S"},
    {"AttributeName": "version", "AttributeType": "N"},
]
PROVISION_HINT = "create it with `python deploy/provision_dynamodb.py TABLE --region REGION`"

#: the key of the item describing the store (never a normalised table URI)
STORE_ITEM_KEY = {"table_key": {"S": "tessera#store"}, "version": {"N": "0"}}
#: the version of the item layout described above
LAYOUT = "1"

_TYPE_NAMES = {"S": "S (string)", "N": "N (number)", "B": "B (binary)"}


def key_schema_problem(description: dict[str, Any]) -> str | None:
    """What is wrong with a DescribeTable ``Table`` for this store, or None:
    the key schema must be HASH ``table_key`` of type S and RANGE ``version``
    of type N (a string version would order "9" after "12")."""
    keys = {k["KeyType"]: k["AttributeName"] for k in description.get("KeySchema", [])}
    types = {a["AttributeName"]: a["AttributeType"] for a in description.get("AttributeDefinitions", [])}
    found = ", ".join(f"{kind} key {name!r} ({types.get(name, '?')})" for kind, name in sorted(keys.items()))
    if (
        keys == {"HASH": "table_key", "RANGE": "version"}
        and types.get("table_key") == "S"
        and types.get("version") == "N"
    ):
        return None
    msg = f"has {found or 'no key schema'}; Tessera needs HASH key 'table_key' (S) and RANGE key 'version' (N)"
    if keys == {"HASH": "table_key", "RANGE": "version"}:
        wrong = [
            f"key attribute {name!r} is {_TYPE_NAMES.get(types.get(name, '?'), types.get(name, '?'))}, "
            f"expected {_TYPE_NAMES[want]}"
            for name, want in (("table_key", "S"), ("version", "N"))
            if types.get(name) != want
        ]
        msg += " (" + "; ".join(wrong) + ")"
    if keys.get("HASH") == "base_uri":
        msg += " (this is a Lance external-manifest table, whose key omits the bucket; give Tessera its own table)"
    else:
        msg += (
            "; key types cannot be changed in place: give Tessera a new table "
            f"({PROVISION_HINT}) and leave this one to whatever created it"
        )
    return msg


def ensure_table(
    client: Any,
    name: str,
    *,
    billing_mode: str = "PAY_PER_REQUEST",
    wait: bool = True,
    timeout: float = 120.0,
) -> bool:
    """Create the table if it does not exist (idempotent); returns True if it
    was created.  An existing table with other keys is StoreSchemaError."""
    try:
        desc = client.describe_table(TableName=name)["Table"]
        created = False
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ResourceNotFoundException":
            raise
        try:
            desc = client.create_table(
                TableName=name,
                KeySchema=KEY_SCHEMA,
                AttributeDefinitions=ATTRIBUTE_DEFINITIONS,
                BillingMode=billing_mode,
                Tags=[{"Key": "created-by", "Value": "tessera"}],
            )["TableDescription"]
            created = True
            log.info("created DynamoDB table %s", name)
        except ClientError as exc2:
            if exc2.response["Error"]["Code"] != "ResourceInUseException":  # created concurrently
                raise
            desc = client.describe_table(TableName=name)["Table"]
            created = False
    problem = key_schema_problem(desc)
    if problem:
        raise StoreSchemaError(f"DynamoDB table {name} {problem}; nothing was changed")
    deadline = time.monotonic() + timeout
    while wait and desc.get("TableStatus") not in ("ACTIVE", "UPDATING"):
        if time.monotonic() > deadline:
            raise StoreUnavailableError(f"DynamoDB table {name} is still {desc.get('TableStatus')} after {timeout}s")
        time.sleep(1.0)
        desc = client.describe_table(TableName=name)["Table"]
    return created


_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()


def make_client(
    region: str | None,
    endpoint_url: str | None = None,
    *,
    aws_access_key_id: str | None = None,
    aws_secret_access_key: str | None = None,
    aws_session_token: str | None = None,
    profile_name: str | None = None,
    connect_timeout: float = 2.0,
    read_timeout: float = 10.0,
) -> Any:
    """A DynamoDB client with botocore retries off and short timeouts.

    Made once per process per set of arguments (region, endpoint, credentials,
    profile, timeouts) and shared (botocore clients are thread-safe), from the
    process's botocore session (:func:`stores.s3_options.aws_session`, shared
    with S3): building a client loads botocore's service model, the slow part.
    A shared client stays usable after ``close()`` (botocore reopens its
    connection pool), so a caller that closes it harms no one."""
    key = (
        region,
        endpoint_url,
        aws_access_key_id,
        aws_secret_access_key,
        aws_session_token,
        profile_name,
        connect_timeout,
        read_timeout,
    )
    with _clients_lock:
        client = _clients.get(key)
        if client is not None:
            return client
        from botocore.config import Config
        from botocore.exceptions import NoRegionError, ProfileNotFound

        config = Config(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"total_max_attempts": 1, "mode": "standard"},
            tcp_keepalive=True,
            max_pool_connections=64,
        )
        try:
            client = aws_session(profile_name).create_client(
                "dynamodb",
                region_name=region,
                endpoint_url=endpoint_url,
                aws_access_key_id=aws_access_key_id,
                aws_secret_access_key=aws_secret_access_key,
                aws_session_token=aws_session_token,
                config=config,
            )
        except NoRegionError:
            raise InvalidURIError("no AWS region: pass region= or set AWS_REGION") from None
        except ProfileNotFound as exc:
            raise StoreUnavailableError(f"AWS profile {profile_name!r} is not configured: {exc}") from None
        except ValueError as exc:
            raise InvalidURIError(f"bad DynamoDB endpoint or region: {exc}") from None
        if len(_clients) >= 64:
            _clients.pop(next(iter(_clients)))
        _clients[key] = client
        return client


def is_shared(client: Any) -> bool:
    """Whether ``client`` is one :func:`make_client` shares in this process."""
    with _clients_lock:
        return any(c is client for c in _clients.values())
