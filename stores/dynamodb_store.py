"""DynamoDB manifest store (botocore).

The table has HASH key ``table_key`` (S, the normalised full table URI,
bucket included) and RANGE key ``version`` (N); items carry path, size,
transaction_uuid, incarnation and created_at.  Tables are created by
``deploy/provision_dynamodb.py`` (or ``from_url(..., create=True)``), both
through :func:`stores.dynamodb_table.ensure_table`.  Lance's own external-manifest tables (HASH
``base_uri``) are refused: their key omits the bucket.

* ``reserve`` is one ``TransactWriteItems``: a ``ConditionCheck`` that the
  predecessor (version - 1) exists with this incarnation, and a ``Put``
  with ``attribute_not_exists(table_key)``.  DynamoDB transactions are
  serializable, so the check and the insert are atomic.  Cancellation reasons
  map to IncarnationMismatchError (the check) or VersionExistsError (the put);
  ``TransactionConflict`` and throttling cancel without applying anything and
  are retried.  Version 1 (no predecessor) uses a conditional ``PutItem``.
* ``flip`` is ``UpdateItem SET path = :final`` with ``path = :staged``.
* Reads are strongly consistent.
* Opening a store (``from_url``) checks the table with ``DescribeTable`` once
  per process per table, endpoint and region, and reads the store item (its
  layout and id) each time; the client is shared by the process
  (:func:`stores.dynamodb_table.make_client`).  So ``Table.open`` with a
  store URL costs a ``GetItem`` (the store item, which also gives the store
  id the table's manifest is checked against) and the ``Query`` of the
  table's latest row, plus ``DescribeTable`` the first time in a process.

botocore's own retries are off: a retried write whose first attempt landed
would otherwise look like someone else's win.  This store retries only what
DynamoDB guarantees was not applied (throttling, transaction conflicts), and
a reservation that finds its own transaction uuid already in the row reports
success.  A connection that cannot be opened is StoreUnavailableError; a
write that times out, loses its connection or gets a 5xx after it was sent is
AmbiguousStoreError.

Timeouts.  ``io_timeout`` (seconds, default 10; ``read_timeout`` is accepted as
an alias) is botocore's ``read_timeout``: a request whose reply (or the next
part of it) does not arrive within ``io_timeout`` fails.  As botocore's
retries are off and this store never repeats a timed-out request, that is the
bound a caller sees: a write -> AmbiguousStoreError (read back), a read ->
StoreUnavailableError.  ``connect_timeout`` (default 2) bounds opening a
connection (a read whose connection could not be opened is tried twice).
Answers that say "not applied" (throttling, transaction conflicts) are
retried, ``max_attempts`` (default 8) times in all, with a backoff under a
second each.  ``region``, ``endpoint_url``, ``io_timeout``,
``connect_timeout`` and ``max_attempts`` may be query parameters of the URL or
keyword arguments (a keyword argument wins; see :mod:`stores.store_options`);
credentials may not be in the URL.  The identity names only the table, region
and endpoint.

Emulators: moto (5.2.5) evaluates TransactWriteItems conditions and reports
cancellation reasons (with ALL_OLD items) correctly, but does not isolate
concurrent requests: a cancelled transaction restores a deep copy of the whole
table taken when it started, erasing writes that landed meanwhile, so two
concurrent reservations of one version can both "win" (seen in 1 of 100 rounds
of 32 racing threads on a 20-item table, 2 of 20 on 3,000 items, along with
HTTP 500s "dictionary changed size during iteration").  Single-item
conditional writes were not seen to fail that way.  The tests therefore run
moto's DynamoDB requests one at a time, which is the isolation DynamoDB gives.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import uuid
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlparse, urlunparse

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
    ReadTimeoutError,
)

from . import store_options
from .backoff import backoff
from .dynamodb_table import (  # noqa: F401 - re-exported for callers of the store module
    ATTRIBUTE_DEFINITIONS,
    KEY_SCHEMA,
    PROVISION_HINT,
    STORE_ITEM_KEY,
    ensure_table,
    is_shared,
    key_schema_problem,
    make_client,
)
from .dynamodb_table import LAYOUT as STORE_LAYOUT
from .errors import (
    AmbiguousStoreError,
    InvalidURIError,
    StoreError,
    StoreSchemaError,
    StoreUnavailableError,
    VersionExistsError,
)
from .manifest_checks import check_bound, check_flip_paths, check_key, check_record, check_version
from .manifest_store import ManifestStore, VersionRecord, predecessor_error
from .store_url import StoreSettings, provisioned, resolve_settings

log = logging.getLogger(__name__)

_TABLE_NAME = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")
_THROTTLED = {
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TransactionInProgressException",
}
_RETRY_REASONS = {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded"}
_AUTH = {
    "UnrecognizedClientException",
    "InvalidSignatureException",
    "AccessDeniedException",
    "ExpiredTokenException",
    "MissingAuthenticationTokenException",
    "InvalidClientTokenId",
}


#: the settings from_url takes as keyword arguments or URL query parameters
_SETTINGS = StoreSettings(
    "DynamoDB store",
    {
        "region": store_options.text,
        "endpoint_url": store_options.text,
        "io_timeout": store_options.seconds,
        "connect_timeout": store_options.seconds,
        "max_attempts": store_options.whole(1),
    },
    {
        "region": None,
        "endpoint_url": None,
        "io_timeout": 10.0,
        "connect_timeout": 2.0,
        "max_attempts": 8,
    },
    {"read_timeout": "io_timeout"},
)


#: identities of the tables this process found usable (DescribeTable is sent once per process and table)
_described: set[str] = set()
_described_lock = threading.Lock()


def _record(item: dict[str, Any]) -> VersionRecord:
    return VersionRecord(
        table_key=item["table_key"]["S"],
        version=int(item["version"]["N"]),
        path=item["path"]["S"],
        size=int(item["size"]["N"]),
        transaction_uuid=item["transaction_uuid"]["S"],
        incarnation=item["incarnation"]["S"],
    )


def _backoff(attempt: int) -> None:
    backoff(attempt, first=0.01, cap=1.0)


class DynamoDBManifestStore(ManifestStore):
    """A :class:`~stores.manifest_store.ManifestStore` in a DynamoDB table."""

    kind = "dynamodb"

    def __init__(self, client: Any, table: str, identity: str, *, max_attempts: int = 8) -> None:
        self._client = client
        self._table = table
        self._identity = identity
        self._max_attempts = max_attempts

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        profile_name: str | None = None,
        io_timeout: float | None = None,
        read_timeout: float | None = None,
        connect_timeout: float | None = None,
        max_attempts: int | None = None,
        create: bool = False,
        check: bool = True,
    ) -> DynamoDBManifestStore:
        """Open ``dynamodb:///TABLE?region=us-east-1&endpoint_url=http://...``.
        ``region``, ``endpoint_url``, ``io_timeout`` (alias ``read_timeout``,
        default 10 s), ``connect_timeout`` (2 s) and ``max_attempts`` (8) may
        be query parameters; explicit keyword arguments win over the query.
        Credentials come from the arguments, a profile or boto3's usual chain
        (environment, files, instance role) - never from the URL.  ``create``
        creates a missing table; ``check`` verifies its key schema
        (StoreSchemaError)."""
        if not isinstance(url, str):
            raise InvalidURIError(f"not a DynamoDB URL: {url!r}")
        try:
            parsed = urlparse(url)
            query = parse_qsl(parsed.query, keep_blank_values=True, strict_parsing=bool(parsed.query))
        except ValueError as exc:
            raise InvalidURIError(f"malformed DynamoDB URL {url!r}: {exc}") from None
        if parsed.scheme.lower() != "dynamodb":
            raise InvalidURIError(f"not a DynamoDB URL: {url!r}")
        if parsed.netloc:
            raise InvalidURIError(f"DynamoDB URL {url!r} has a host; use dynamodb:///TABLE?region=...")
        table = parsed.path.lstrip("/")
        if not _TABLE_NAME.match(table):
            raise InvalidURIError(f"DynamoDB URL {url!r}: table name {table!r} is not 3-255 of [A-Za-z0-9_.-]")
        names = sorted(_SETTINGS.spec)
        for k, _ in query:
            if (
                k not in _SETTINGS.spec
                and k not in _SETTINGS.aliases
                and store_options.looks_like_ours(k, names) is None
            ):
                raise InvalidURIError(
                    f"DynamoDB URL: unsupported parameter {k!r} (only {', '.join(names)}; "
                    "pass credentials as options or through the environment)"
                )
        settings, _ = resolve_settings(
            _SETTINGS,
            query,
            {
                "region": region,
                "endpoint_url": endpoint_url,
                "io_timeout": io_timeout,
                "read_timeout": read_timeout,
                "connect_timeout": connect_timeout,
                "max_attempts": max_attempts,
            },
            strict=True,
        )
        region = settings["region"] or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        endpoint_url = settings["endpoint_url"]
        if endpoint_url:
            ep = urlparse(endpoint_url)
            if ep.scheme not in ("http", "https") or not ep.hostname:
                raise InvalidURIError(f"endpoint_url {endpoint_url!r} must be http(s)://host[:port]")
            try:
                _ = ep.port  # parsing the port raises on a bad one
            except ValueError as exc:
                raise InvalidURIError(f"endpoint_url {endpoint_url!r}: {exc}") from None
        client = make_client(
            region,
            endpoint_url,
            aws_access_key_id=aws_access_key_id,
            aws_secret_access_key=aws_secret_access_key,
            aws_session_token=aws_session_token,
            profile_name=profile_name,
            connect_timeout=settings["connect_timeout"],
            read_timeout=settings["io_timeout"],
        )
        identity = f"dynamodb:///{table}?region={client.meta.region_name}"
        if endpoint_url:
            ep = urlparse(endpoint_url)
            assert ep.hostname is not None  # checked above: an endpoint_url without a host is refused
            netloc = ep.hostname + (f":{ep.port}" if ep.port else "")
            identity += "&endpoint_url=" + urlunparse((ep.scheme, netloc, ep.path, "", "", ""))
        store = cls(client, table, identity, max_attempts=settings["max_attempts"])
        return provisioned(store, DynamoDBManifestStore._create_table if create else None, check=check)

    def _create_table(self) -> None:
        """Create the table when it is missing (``from_url(create=True)``)."""
        try:
            ensure_table(self._client, self._table)
        except ClientError as exc:
            raise StoreUnavailableError(f"cannot create {self._identity}: {exc}") from exc
        except (EndpointConnectionError, ConnectTimeoutError, NoCredentialsError, PartialCredentialsError) as exc:
            raise StoreUnavailableError(f"cannot reach {self._identity}: {exc}") from exc

    # ------------------------------------------------------------ the protocol
    def identity(self) -> str:
        """``dynamodb:///TABLE?region=...`` (plus the endpoint), no credentials."""
        return self._identity

    def reserve(self, record: VersionRecord) -> bool:
        """Insert ``record`` with an atomic predecessor-incarnation check;
        False when the row already held this transaction."""
        check_record(record, max_id_chars=256)
        what = f"reserve {record.table_key} v{record.version}"
        put = {
            "TableName": self._table,
            "Item": {
                "table_key": {"S": record.table_key},
                "version": {"N": str(record.version)},
                "path": {"S": record.path},
                "size": {"N": str(record.size)},
                "transaction_uuid": {"S": record.transaction_uuid},
                "incarnation": {"S": record.incarnation},
                "created_at": {"S": datetime.now(UTC).isoformat(timespec="milliseconds")},
            },
            "ConditionExpression": "attribute_not_exists(#k)",
            "ExpressionAttributeNames": {"#k": "table_key"},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if record.version <= 1:  # the first version has no predecessor to check
            try:
                self._call("put_item", write=True, what=what, **put)
                return True
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise  # pragma: no cover - _call maps the others
                return self._lost(record, exc.response.get("Item"))
        check = {
            "TableName": self._table,
            "Key": {"table_key": {"S": record.table_key}, "version": {"N": str(record.version - 1)}},
            "ConditionExpression": "#i = :inc",  # false when the predecessor is missing
            "ExpressionAttributeNames": {"#i": "incarnation"},
            "ExpressionAttributeValues": {":inc": {"S": record.incarnation}},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        for attempt in range(self._max_attempts):
            try:
                self._call(
                    "transact_write_items",
                    write=True,
                    what=what,
                    TransactItems=[{"ConditionCheck": check}, {"Put": put}],
                )
                return True
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "TransactionCanceledException":
                    raise  # pragma: no cover - _call maps the others
                reasons = exc.response.get("CancellationReasons") or []
                codes = [r.get("Code", "None") for r in reasons] + ["None", "None"]
                if codes[0] == "ConditionalCheckFailed":
                    pred = (reasons[0].get("Item") or {}).get("incarnation", {}).get("S")
                    raise predecessor_error(what, record, pred) from None
                if codes[1] == "ConditionalCheckFailed":
                    return self._lost(record, reasons[1].get("Item"))
                if set(codes[:2]) & _RETRY_REASONS:  # cancelled, nothing applied
                    log.debug("%s: transaction cancelled (%s), retrying", what, codes[:2])
                    _backoff(attempt)
                    continue
                raise StoreError(f"{what}: transaction cancelled for {codes[:2]}: {exc}") from None
        raise StoreUnavailableError(f"{what}: gave up after {self._max_attempts} transaction conflicts")

    def flip(self, table_key: str, version: int, staged_path: str, final_path: str) -> bool:
        """Point the row at ``final_path`` if it still holds ``staged_path``
        (``final_path`` + ``-<uuid>``; anything else is a ValueError)."""
        check_key(table_key)
        check_version(version)
        check_flip_paths(staged_path, final_path)
        return self._set_path(table_key, version, staged_path, final_path, None, "flip")

    def adopt(self, table_key: str, version: int, expected_path: str, final_path: str, transaction_uuid: str) -> bool:
        """Point the row at a foreign writer's final manifest and transaction,
        if it still holds ``expected_path`` (one conditional UpdateItem)."""
        check_key(table_key)
        check_version(version)
        check_flip_paths(expected_path, final_path)
        check_record(VersionRecord(table_key, version, final_path, 0, transaction_uuid, "x"))
        return self._set_path(table_key, version, expected_path, final_path, transaction_uuid, "adopt")

    def _set_path(self, table_key: str, version: int, expected: str, final: str, txn: str | None, what: str) -> bool:
        """One UpdateItem: the row's path (and transaction uuid) while it holds
        ``expected``; True if the row now holds them."""
        names, values = {"#p": "path"}, {":final": {"S": final}, ":staged": {"S": expected}}
        update = "SET #p = :final"
        if txn is not None:
            names["#t"], values[":txn"] = "transaction_uuid", {"S": txn}
            update += ", #t = :txn"
        try:
            self._call(
                "update_item",
                write=True,
                what=f"{what} {table_key} v{version}",
                TableName=self._table,
                Key={"table_key": {"S": table_key}, "version": {"N": str(version)}},
                UpdateExpression=update,
                ConditionExpression="#p = :staged",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
            return True
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise  # pragma: no cover
            old = exc.response.get("Item") or {}
            return old.get("path", {}).get("S") == final and (
                txn is None or old.get("transaction_uuid", {}).get("S") == txn
            )

    def get(self, table_key: str, version: int) -> VersionRecord | None:
        """The row of ``version`` (consistent read), or None."""
        check_key(table_key)
        check_version(version)
        item = self._call(
            "get_item",
            TableName=self._table,
            Key={"table_key": {"S": table_key}, "version": {"N": str(version)}},
            ConsistentRead=True,
        ).get("Item")
        return _record(item) if item else None

    def latest(self, table_key: str) -> VersionRecord | None:
        """The row with the highest version (consistent query), or None."""
        check_key(table_key)
        items = self._call(
            "query",
            TableName=self._table,
            KeyConditionExpression="#k = :k",
            ExpressionAttributeNames={"#k": "table_key"},
            ExpressionAttributeValues={":k": {"S": table_key}},
            ScanIndexForward=False,
            Limit=1,
            ConsistentRead=True,
        ).get("Items", [])
        return _record(items[0]) if items else None

    def versions_after(self, table_key: str, version: int) -> list[VersionRecord]:
        """Rows with a version greater than ``version``, ascending."""
        check_key(table_key)
        check_bound(version)
        return [_record(i) for i in self._query_all(table_key, version)]

    def delete_table(self, table_key: str) -> int:
        """Remove every row of a table (BatchWriteItem); returns the count."""
        check_key(table_key)
        keys = [
            {"table_key": i["table_key"], "version": i["version"]}
            for i in self._query_all(table_key, None, keys_only=True)
        ]
        for start in range(0, len(keys), 25):
            pending = [{"DeleteRequest": {"Key": k}} for k in keys[start : start + 25]]
            for attempt in range(self._max_attempts):
                resp = self._call(
                    "batch_write_item", write=True, what=f"delete {table_key}", RequestItems={self._table: pending}
                )
                pending = resp.get("UnprocessedItems", {}).get(self._table, [])
                if not pending:
                    break
                _backoff(attempt)
            else:
                raise StoreUnavailableError(f"delete {table_key}: {len(pending)} rows still unprocessed after retries")
        return len(keys)

    def store_id(self) -> str:
        """This store's id: the ``store_id`` of the item under the reserved
        key ``tessera#store`` / version 0, created on first use (or by
        ``deploy/provision_dynamodb.py``) with a put conditional on the item's
        absence, so concurrent first uses converge on one id.  Cached on this
        object.

        Raises StoreSchemaError when the table is missing or that item is not
        Tessera's (another layout, no id), StoreUnavailableError when
        unreachable, AmbiguousStoreError when the creating put's outcome is
        unknown and the item cannot be read back (call again)."""
        cached = self._store_id
        if cached is not None:
            return cached
        item = self._store_item()
        if item is None:
            try:
                self._call(
                    "put_item",
                    write=True,
                    what="create the store id",
                    TableName=self._table,
                    Item={
                        **STORE_ITEM_KEY,
                        "store_id": {"S": uuid.uuid4().hex},
                        "layout": {"N": STORE_LAYOUT},
                        "created_at": {"S": datetime.now(UTC).isoformat(timespec="milliseconds")},
                    },
                    ConditionExpression="attribute_not_exists(#k)",
                    ExpressionAttributeNames={"#k": "table_key"},
                )
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise  # pragma: no cover - _call maps the others
                log.debug("%s: another process created the store id first", self._identity)
            except AmbiguousStoreError:
                if self._store_item() is None:
                    raise
            item = self._store_item()
            if item is None:  # pragma: no cover - deleted between the put and the read
                raise StoreSchemaError(
                    f"DynamoDB table {self._table} at {self._identity}: the store item vanished right after it was "
                    "written; something is deleting it - stop it, then retry"
                )
        self._check_store_item(item)
        self._store_id = item["store_id"]["S"]
        return self._store_id

    def check(self) -> None:
        """DescribeTable: the table must exist, be usable and have the
        (table_key S, version N) key schema, names and attribute types; the
        store item, when present, must record this layout
        (StoreSchemaError / StoreUnavailableError otherwise).

        A table found usable is not described again by this process (a key
        schema cannot change; a table deleted since fails its next request
        with StoreSchemaError).  The store item is read on every check, and
        its id kept: :meth:`store_id` then needs no request of its own."""
        with _described_lock:
            described = self._identity in _described
        if not described:
            desc = self._call("describe_table", TableName=self._table)["Table"]
            problem = key_schema_problem(desc)
            if problem:
                raise StoreSchemaError(f"DynamoDB table {self._table} at {self._identity} {problem}")
            if desc.get("TableStatus") not in ("ACTIVE", "UPDATING"):
                raise StoreUnavailableError(f"DynamoDB table {self._table} is {desc.get('TableStatus')}")
            with _described_lock:
                _described.add(self._identity)
        item = self._store_item()
        if item is not None:
            self._check_store_item(item)
            self._store_id = item["store_id"]["S"]

    def close(self) -> None:
        """Close the client's connection pool, unless the client is the
        process's shared one (:func:`make_client`), which other stores use."""
        if is_shared(self._client):
            return
        try:
            self._client.close()
        except AttributeError:  # pragma: no cover - very old botocore
            pass

    def __repr__(self) -> str:
        return f"DynamoDBManifestStore({self._identity!r})"

    # --------------------------------------------------------------- internals
    def _store_item(self) -> dict[str, Any] | None:
        """The item describing the store (consistent read), or None."""
        return self._call("get_item", TableName=self._table, Key=STORE_ITEM_KEY, ConsistentRead=True).get("Item")

    def _check_store_item(self, item: dict[str, Any]) -> None:
        """StoreSchemaError unless ``item`` is a store item of this layout with an id."""
        where = (
            f"DynamoDB table {self._table} at {self._identity}: the store item (table_key 'tessera#store', version 0)"
        )
        layout = item.get("layout", {}).get("N")
        if layout != STORE_LAYOUT:
            newer = layout is not None and layout.isdigit() and int(layout) > int(STORE_LAYOUT)
            raise StoreSchemaError(
                f"{where} records layout {layout!r}, this Tessera reads and writes layout {STORE_LAYOUT!r}; "
                + (
                    "upgrade Tessera to a release that knows that layout"
                    if newer
                    else f"the table was not written by Tessera - give Tessera its own table ({PROVISION_HINT})"
                )
            )
        sid = item.get("store_id", {}).get("S")
        if not sid:
            raise StoreSchemaError(
                f"{where} has no string 'store_id'; it was altered by hand - restore it from a backup, or delete it "
                "to give this store a new id (tables bound to the old id will refuse it)"
            )

    def _lost(self, record: VersionRecord, item: dict[str, Any] | None) -> bool:
        """False when the row ``item`` already holds this transaction; else VersionExistsError."""
        if item and item.get("transaction_uuid", {}).get("S") == record.transaction_uuid:
            log.info("reserve %s v%s: the row already holds this transaction", record.table_key, record.version)
            return False
        winner = item.get("transaction_uuid", {}).get("S") if item else None
        raise VersionExistsError(
            f"version {record.version} of {record.table_key} is already reserved"
            + (f" by transaction {winner}" if winner else "")
        )

    def _query_all(self, table_key: str, after: int | None, keys_only: bool = False) -> list[dict[str, Any]]:
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "#k = :k" + ("" if after is None else " AND #v > :v"),
            "ExpressionAttributeNames": {
                "#k": "table_key",
                **({} if after is None and not keys_only else {"#v": "version"}),
            },
            "ExpressionAttributeValues": {
                ":k": {"S": table_key},
                **({} if after is None else {":v": {"N": str(after)}}),
            },
            "ConsistentRead": True,
        }
        if keys_only:
            kwargs["ProjectionExpression"] = "#k, #v"
        items: list[dict[str, Any]] = []
        while True:
            resp = self._call("query", **kwargs)
            items.extend(resp.get("Items", []))
            if "LastEvaluatedKey" not in resp:
                return items
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def _call(self, op: str, *, write: bool = False, what: str = "", **kwargs: Any) -> Any:
        """One API call with the store's error mapping; retries what was
        definitely not applied (and, for reads, anything transient)."""
        what = what or op
        for attempt in range(self._max_attempts):
            try:
                return getattr(self._client, op)(**kwargs)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
                if code in ("ConditionalCheckFailedException", "TransactionCanceledException"):
                    raise
                if code in _THROTTLED:
                    _backoff(attempt)
                    continue
                if code == "ResourceNotFoundException":
                    raise StoreSchemaError(
                        f"DynamoDB table {self._table} does not exist ({self._identity}); {PROVISION_HINT}"
                    ) from exc
                if code in _AUTH:
                    raise StoreUnavailableError(
                        f"DynamoDB refused the credentials for {self._identity}: {code}"
                    ) from exc
                if status >= 500:
                    if write:
                        raise AmbiguousStoreError(
                            f"{what}: DynamoDB answered {status} {code}; the write may have been applied - read it back"
                        ) from exc
                    if attempt < 2:
                        _backoff(attempt)
                        continue
                    raise StoreUnavailableError(f"{what} on {self._identity}: {status} {code}") from exc
                raise StoreError(f"{what} on {self._identity} failed: {code}: {exc}") from exc
            except (EndpointConnectionError, ConnectTimeoutError) as exc:  # nothing was sent
                if not write and attempt < 1:
                    _backoff(attempt)
                    continue
                raise StoreUnavailableError(f"cannot reach DynamoDB at {self._identity}: {exc}") from exc
            except (NoCredentialsError, PartialCredentialsError) as exc:
                raise StoreUnavailableError(f"no AWS credentials for {self._identity}: {exc}") from exc
            except ParamValidationError as exc:  # rejected client-side, nothing was sent
                raise StoreError(f"{what}: invalid request: {exc}") from exc
            except BotoCoreError as exc:  # read timeout, connection closed mid-request, ...
                if write:
                    raise AmbiguousStoreError(
                        f"{what}: the request to {self._identity} failed after it was sent ({exc}); "
                        "it may or may not have been applied - read the row back"
                    ) from exc
                # a read that timed out is not repeated: the bound stays io_timeout
                if attempt < 2 and not isinstance(exc, ReadTimeoutError):
                    _backoff(attempt)
                    continue
                raise StoreUnavailableError(f"{what} on {self._identity} failed: {exc}") from exc
        raise StoreUnavailableError(f"{what} on {self._identity}: still throttled after {self._max_attempts} attempts")
