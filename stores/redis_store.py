"""Redis manifest store (redis-py, standalone or Sentinel-managed primary).

Layout, for a key prefix ``tessera`` (configurable) and table key ``K``:

* ``tessera:{K}:v:{version}``: a hash with table_key, version, path, size,
  transaction_uuid, incarnation, created_at;
* ``tessera:{K}:versions``: a sorted set of the table's versions (member and
  score = version), for ``latest`` and ``versions_after``.
* ``tessera:store``: a hash describing the store itself: ``id`` (a random
  uuid4 hex, created once by the first :meth:`~RedisManifestStore.store_id`
  through a script that writes it only while absent, so concurrent first uses
  converge on one id), ``layout`` (the version of this key layout, ``1``; a
  store with another layout is refused by ``check``) and ``created_at``.  A
  table key always holds a ``{`` so no table's keys can be this one, and
  ``delete_table`` never touches it.  A Redis that lost its data answers with
  a new id, which the tables bound to the old one refuse.

The ``{K}`` hash tag keeps a table's keys in one slot, but Redis Cluster is not
supported: the scripts derive row keys from the table's prefix instead of
declaring them.  Every write is one Lua script, so atomic: ``reserve`` checks
that the predecessor (beyond version 1) exists with the same incarnation and
that the row is absent, then writes the hash and adds to the sorted set;
``flip`` rewrites ``path`` only while it holds the staged path; ``delete_table``
removes the rows and the index together.  Versions must be below 2**53 (sorted
set scores are doubles).

Durability.  A commit acknowledged by this store is durable only when Redis
runs with ``appendonly yes`` and ``appendfsync always`` (every write is fsynced
before the reply).  With ``appendfsync everysec`` up to a second of
acknowledged commits can vanish in a crash; with no persistence, all of them.
With replicas and failover (Sentinel, managed Redis), a promoted replica may
lack the latest writes: pass ``wait_replicas=N`` so every write is followed by
``WAIT N timeout`` on the same connection, and a write that fewer than N
replicas acknowledged raises AmbiguousStoreError (it is applied on the primary
but could be lost by a failover).  ``maxmemory-policy`` must be
``noeviction``, or Redis may evict reservations.  :meth:`check` reads these
settings (when CONFIG is permitted) and logs a warning when commits are not
durable.

Errors: failing to connect (short connect timeout, no retries) is
StoreUnavailableError; a write whose connection drops or times out after the
command was sent is AmbiguousStoreError.  redis-py's automatic retries are
disabled, because a retried reservation whose first attempt landed would
report someone else's win.

Timeouts.  ``io_timeout`` (seconds, default 5; ``socket_timeout`` is accepted
as an alias) is redis-py's ``socket_timeout``: every read and write on the
socket gives up after it, so a command whose reply does not come within
``io_timeout`` fails - a write with AmbiguousStoreError (read back), a read
with StoreUnavailableError - and its connection is discarded.  Nothing is
retried, so that is the bound a caller sees.  With ``wait_replicas`` the
socket timeout is raised to at least ``wait_timeout_ms`` + 1 s, so it outlives
the ``WAIT`` it carries.  ``connect_timeout`` (default 1; alias
``socket_connect_timeout``) bounds opening a connection.  These, ``prefix``,
``wait_replicas``, ``wait_timeout_ms`` and ``max_connections`` may be keyword
arguments or query parameters (``redis://host:6379/0?io_timeout=2``; a
keyword argument wins, see :mod:`stores.store_options`); they are removed
before the URL reaches redis-py, and never appear in :meth:`identity`.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlparse, urlunparse

import redis
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from . import store_options
from .errors import (
    AmbiguousStoreError,
    InvalidStorageOptionError,
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

#: (store identity, problem) already warned about in this process: a fleet of
#: short-lived writers opens the store per commit and must not log it each time
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()

MAX_VERSION = 2**53 - 1


def _key_prefix(value: Any) -> str:
    prefix = store_options.text(value)
    if any(c in prefix for c in "{}"):
        raise ValueError("must not contain '{' or '}' (they delimit the table's hash tag)")
    return prefix


#: the settings from_url takes as keyword arguments or URL query parameters
_SETTINGS = StoreSettings(
    "Redis store",
    {
        "prefix": _key_prefix,
        "wait_replicas": store_options.whole(0),
        "wait_timeout_ms": store_options.whole(0),
        "io_timeout": store_options.seconds,
        "connect_timeout": store_options.seconds,
        "max_connections": store_options.whole(1),
    },
    {
        "prefix": "tessera",
        "wait_replicas": 0,
        "wait_timeout_ms": 1000,
        "io_timeout": 5.0,
        "connect_timeout": 1.0,
        "max_connections": None,  # redis-py: unbounded
    },
    {"socket_timeout": "io_timeout", "socket_connect_timeout": "connect_timeout"},
)


def _redis_query_keys() -> frozenset[str]:
    """Query parameters redis-py itself accepts (passed on to it)."""
    import inspect

    from redis import connection as rc

    keys = set(getattr(rc, "URL_QUERY_ARGUMENT_PARSERS", {}))
    for cls in ("AbstractConnection", "Connection", "SSLConnection", "UnixDomainSocketConnection"):
        init = getattr(getattr(rc, cls, None), "__init__", None)
        if init is not None:
            keys.update(inspect.signature(init).parameters)
    return frozenset(keys - {"self", "kwargs", "args"})


def _redacted(url: str) -> str:
    """``url`` without its password (for messages)."""
    try:
        p = urlparse(url)
        if p.password:
            return urlunparse(p._replace(netloc=p.netloc.replace(f":{p.password}@", ":***@")))
    except ValueError:
        pass
    return url


_REFUSED = ("READONLY", "NOPERM", "NOAUTH", "WRONGPASS", "OOM", "LOADING", "MASTERDOWN", "MISCONF", "BUSY ")

_RESERVE = """
if tonumber(ARGV[2]) > 1 then
  local pred = redis.call('HGET', KEYS[3], 'incarnation')
  if not pred then return {2, ''} end
  if pred ~= ARGV[6] then return {2, pred} end
end
local txn = redis.call('HGET', KEYS[1], 'transaction_uuid')
if txn then
  if txn == ARGV[5] then return {3, txn} end
  return {1, txn}
end
redis.call('HSET', KEYS[1], 'table_key', ARGV[1], 'version', ARGV[2], 'path', ARGV[3], 'size', ARGV[4],
           'transaction_uuid', ARGV[5], 'incarnation', ARGV[6], 'created_at', ARGV[7])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[2])
return {0, ''}
"""

_FLIP = """
local p = redis.call('HGET', KEYS[1], 'path')
if not p then return 0 end
if p == ARGV[2] then return 1 end
if p ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'path', ARGV[2])
return 2
"""

# KEYS[1] = index; ARGV[1] = row-key prefix, ARGV[2] = exclusive lower bound ('-inf' for latest),
# ARGV[3] = 'latest' or 'after'.  The row keys share the index's hash tag.
_READ = """
local members
if ARGV[3] == 'latest' then
  members = redis.call('ZREVRANGE', KEYS[1], 0, 0)
else
  members = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[2], '+inf')
end
local out = {}
for _, m in ipairs(members) do
  local row = redis.call('HGETALL', ARGV[1] .. m)
  if #row > 0 then table.insert(out, row) end
end
return out
"""

_DELETE = """
local members = redis.call('ZRANGE', KEYS[1], 0, -1)
for _, m in ipairs(members) do redis.call('DEL', ARGV[1] .. m) end
redis.call('DEL', KEYS[1])
return #members
"""


class _Script:
    def __init__(self, source: str) -> None:
        import hashlib

        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()


# a foreign writer's manifest took the final name: the row follows it (ARGV: staged, final, txn)
_ADOPT = """
local p = redis.call('HGET', KEYS[1], 'path')
if not p then return 0 end
if p == ARGV[2] then
  if redis.call('HGET', KEYS[1], 'transaction_uuid') == ARGV[3] then return 1 end
  return 0
end
if p ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'path', ARGV[2], 'transaction_uuid', ARGV[3])
return 2
"""

_SCRIPTS = {
    name: _Script(src)
    for name, src in (("reserve", _RESERVE), ("flip", _FLIP), ("read", _READ), ("delete", _DELETE), ("adopt", _ADOPT))
}

#: the version of the key layout described in the module docstring
LAYOUT = "1"

# KEYS[1] = the store hash; ARGV[1] = a new id, ARGV[2] = our layout, ARGV[3] = created_at.
# Writes the id only while there is none; returns {id, layout} as stored.
_STORE = """
local id = redis.call('HGET', KEYS[1], 'id')
if not id then
  redis.call('HSETNX', KEYS[1], 'layout', ARGV[2])
  redis.call('HSET', KEYS[1], 'id', ARGV[1], 'created_at', ARGV[3])
  id = ARGV[1]
end
return {id, redis.call('HGET', KEYS[1], 'layout') or ''}
"""
_SCRIPTS["store"] = _Script(_STORE)


def _as_dict(row: Any) -> dict[str, str]:
    if isinstance(row, dict):
        return row
    return {row[i]: row[i + 1] for i in range(0, len(row), 2)}


def _record(row: Any) -> VersionRecord:
    d = _as_dict(row)
    return VersionRecord(
        table_key=d["table_key"],
        version=int(d["version"]),
        path=d["path"],
        size=int(d["size"]),
        transaction_uuid=d["transaction_uuid"],
        incarnation=d["incarnation"],
    )


class RedisManifestStore(ManifestStore):
    """A :class:`~stores.manifest_store.ManifestStore` in Redis."""

    kind = "redis"

    def __init__(
        self,
        pool: redis.ConnectionPool,
        identity: str,
        *,
        prefix: str = "tessera",
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1000,
    ) -> None:
        if isinstance(wait_replicas, bool) or not isinstance(wait_replicas, int) or wait_replicas < 0:
            raise InvalidStorageOptionError(f"wait_replicas must be a non-negative integer, got {wait_replicas!r}")
        if isinstance(wait_timeout_ms, bool) or not isinstance(wait_timeout_ms, int) or wait_timeout_ms < 0:
            raise InvalidStorageOptionError(f"wait_timeout_ms must be a non-negative integer, got {wait_timeout_ms!r}")
        self._pool = pool
        self._identity = identity
        self._prefix = prefix
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str | None = None,
        wait_replicas: int | None = None,
        wait_timeout_ms: int | None = None,
        io_timeout: float | None = None,
        socket_timeout: float | None = None,
        connect_timeout: float | None = None,
        max_connections: int | None = None,
        create: bool = False,
        check: bool = True,
    ) -> RedisManifestStore:
        """Open ``redis://[user:password@]host:port/db`` (also ``rediss://``,
        ``unix://``).  The settings ``prefix`` (default ``tessera``),
        ``wait_replicas`` (0), ``wait_timeout_ms`` (1000), ``io_timeout`` (5 s;
        alias ``socket_timeout``), ``connect_timeout`` (1 s; alias
        ``socket_connect_timeout``) and ``max_connections`` may also be given
        as query parameters; a keyword argument wins over the query.  Bad
        values are InvalidURIError (query) or InvalidStorageOptionError
        (keyword).  With ``check`` the server is pinged
        (StoreUnavailableError) and its durability settings logged.
        ``create`` is accepted for symmetry with the other stores: Redis needs
        no schema."""
        if not isinstance(url, str):
            raise InvalidURIError(f"not a Redis URL: {url!r}")
        shown = _redacted(url)
        try:
            parsed = urlparse(url)
            items = parse_qsl(parsed.query, keep_blank_values=True)
            port = parsed.port
        except ValueError as exc:
            raise InvalidURIError(f"malformed Redis URL {shown!r}: {exc}") from None
        if parsed.scheme not in ("redis", "rediss", "unix"):
            raise InvalidURIError(f"not a Redis URL: {shown!r}")
        if parsed.scheme != "unix" and not parsed.hostname:
            raise InvalidURIError(f"Redis URL {shown!r} names no host")
        settings, rest = resolve_settings(
            _SETTINGS,
            items,
            {
                "prefix": prefix,
                "wait_replicas": wait_replicas,
                "wait_timeout_ms": wait_timeout_ms,
                "io_timeout": io_timeout,
                "socket_timeout": socket_timeout,
                "connect_timeout": connect_timeout,
                "max_connections": max_connections,
            },
            driver_keys=_redis_query_keys(),
        )
        query = dict(rest)
        if parsed.scheme == "unix":
            db_text = query.get("db", "0")
        else:
            db_text = query.get("db") or parsed.path.strip("/")
        if db_text and not db_text.isdigit():
            raise InvalidURIError(f"Redis database must be a number in {shown!r}")
        prefix = settings["prefix"]
        wait_replicas, wait_timeout_ms = settings["wait_replicas"], settings["wait_timeout_ms"]
        socket_timeout = settings["io_timeout"]
        if wait_replicas:  # the socket must outlive the WAIT it carries
            socket_timeout = max(socket_timeout, wait_timeout_ms / 1000 + 1.0)
        redis_url = urlunparse(parsed._replace(query=urlencode(rest)))  # our settings never reach redis-py
        try:
            pool = redis.ConnectionPool.from_url(
                redis_url,
                decode_responses=True,
                socket_connect_timeout=settings["connect_timeout"],
                socket_timeout=socket_timeout,
                retry=Retry(NoBackoff(), 0),
                health_check_interval=0,
                max_connections=settings["max_connections"],
            )
        except (ValueError, TypeError) as exc:
            raise InvalidURIError(f"malformed Redis URL {shown!r}: {exc}") from None
        if parsed.scheme == "unix":
            where = f"unix://{parsed.path}?db={db_text or 0}"
        else:
            where = f"{parsed.scheme}://{parsed.hostname}:{port or 6379}/{db_text or 0}"
        store = cls(
            pool,
            f"{where}#{prefix}",
            prefix=prefix,
            wait_replicas=wait_replicas,
            wait_timeout_ms=wait_timeout_ms,
        )
        return provisioned(store, None, check=check)

    # ------------------------------------------------------------ the protocol
    def identity(self) -> str:
        """``redis://host:port/db#prefix`` with no user or password."""
        return self._identity

    def reserve(self, record: VersionRecord) -> bool:
        """Insert ``record`` atomically (one Lua script); False when the row
        already held this transaction."""
        check_record(record, max_version=MAX_VERSION, max_id_chars=256)
        k = record.table_key
        keys = [self._row_key(k, record.version), self._index_key(k), self._row_key(k, record.version - 1)]
        args = [
            k,
            str(record.version),
            record.path,
            str(record.size),
            record.transaction_uuid,
            record.incarnation,
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        ]
        what = f"reserve {k} v{record.version}"
        code, other = self._script("reserve", keys, args, write=True, what=what, wait_if=lambda r: r[0] in (0, 3))
        if code in (0, 3):
            if code == 3:
                log.info("%s: the row already holds this transaction (an earlier attempt landed)", what)
            return code == 0
        if code == 1:
            raise VersionExistsError(f"version {record.version} of {k} is already reserved by transaction {other}")
        raise predecessor_error(what, record, other or None)

    def flip(self, table_key: str, version: int, staged_path: str, final_path: str) -> bool:
        """Point the row at ``final_path`` if it still holds ``staged_path``
        (``final_path`` + ``-<uuid>``; anything else is a ValueError)."""
        check_key(table_key)
        check_version(version, MAX_VERSION)
        check_flip_paths(staged_path, final_path)
        result = self._script(
            "flip",
            [self._row_key(table_key, version)],
            [staged_path, final_path],
            write=True,
            what=f"flip {table_key} v{version}",
            wait_if=lambda r: r != 0,
        )
        return int(result) != 0

    def adopt(self, table_key: str, version: int, expected_path: str, final_path: str, transaction_uuid: str) -> bool:
        """Point the row at a foreign writer's final manifest and transaction,
        if it still holds ``expected_path`` (one script)."""
        check_key(table_key)
        check_version(version, MAX_VERSION)
        check_flip_paths(expected_path, final_path)
        check_record(VersionRecord(table_key, version, final_path, 0, transaction_uuid, "x"))
        result = self._script(
            "adopt",
            [self._row_key(table_key, version)],
            [expected_path, final_path, transaction_uuid],
            write=True,
            what=f"adopt {table_key} v{version}",
            wait_if=lambda r: r != 0,
        )
        return int(result) != 0

    def get(self, table_key: str, version: int) -> VersionRecord | None:
        """The row of ``version``, or None."""
        check_key(table_key)
        check_version(version, MAX_VERSION)
        row = self._command("HGETALL", self._row_key(table_key, version))
        return _record(row) if row else None

    def latest(self, table_key: str) -> VersionRecord | None:
        """The row with the highest version, or None."""
        check_key(table_key)
        rows = self._script("read", [self._index_key(table_key)], [self._row_prefix(table_key), "-inf", "latest"])
        return _record(rows[0]) if rows else None

    def versions_after(self, table_key: str, version: int) -> list[VersionRecord]:
        """Rows with a version greater than ``version``, ascending."""
        check_key(table_key)
        check_bound(version)
        rows = self._script("read", [self._index_key(table_key)], [self._row_prefix(table_key), str(version), "after"])
        return [_record(r) for r in rows]

    def delete_table(self, table_key: str) -> int:
        """Remove every row of a table (one script); returns the count."""
        check_key(table_key)
        return int(
            self._script(
                "delete",
                [self._index_key(table_key)],
                [self._row_prefix(table_key)],
                write=True,
                what=f"delete {table_key}",
                wait_if=lambda r: True,
            )
        )

    def store_id(self) -> str:
        """This store's id: the ``id`` field of the ``{prefix}:store`` hash,
        created on first use by a script that writes it only while absent (so
        concurrent first uses converge on one id).  Cached on this object.

        Raises StoreSchemaError when that key is not Tessera's store hash or
        records another layout, StoreUnavailableError when unreachable or
        refused, AmbiguousStoreError when the creating write's outcome is
        unknown and the id cannot be read back (call again)."""
        cached = self._store_id
        if cached is not None:
            return cached
        fields = self._store_fields()
        if not fields.get("id"):
            new = uuid.uuid4().hex
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            for attempt in range(2):
                # the script only ever returns the id already there, so running it again after an
                # unknown outcome is safe; with wait_replicas it also waits again for the replicas
                try:
                    sid, layout = self._script(
                        "store",
                        [self._store_key()],
                        [new, LAYOUT, now],
                        write=True,
                        what="create the store id",
                        wait_if=lambda r: True,
                    )
                    fields = {"id": sid, "layout": layout}
                    break
                except AmbiguousStoreError:
                    if attempt:
                        raise
        self._check_layout(fields)
        self._store_id = str(fields["id"])
        return self._store_id

    def check(self) -> None:
        """Ping the server, verify the key layout recorded in the
        ``{prefix}:store`` hash (when there is one) is this module's
        (StoreSchemaError otherwise), and log a warning when acknowledged
        commits are not durable (AOF off or not fsynced on every write,
        eviction enabled, replicas without ``wait_replicas``).  Raises
        StoreUnavailableError when unreachable.  Each durability problem is a
        warning once per process, then debug."""
        self._command("PING")
        self._check_layout(self._store_fields())
        for problem in self.durability_problems():
            with _warned_lock:
                first = (self._identity, problem) not in _warned
                _warned.add((self._identity, problem))
            log.log(logging.WARNING if first else logging.DEBUG, "Redis manifest store %s: %s", self._identity, problem)

    def server_settings(self) -> dict[str, str]:
        """The persistence and replication settings that decide durability:
        appendonly, appendfsync, maxmemory-policy, save (when CONFIG is
        permitted) and role, connected_slaves (from INFO replication)."""
        settings: dict[str, str] = {}
        try:
            for name in ("appendonly", "appendfsync", "maxmemory-policy", "save"):
                settings.update(_as_dict(self._command("CONFIG", "GET", name)))
        except StoreError as exc:
            log.info("Redis manifest store %s: cannot read CONFIG (%s); durability not verified", self._identity, exc)
        try:
            info = _parse_info(self._command("INFO", "replication"))
        except StoreError as exc:
            log.info("Redis manifest store %s: cannot read INFO (%s); replication not verified", self._identity, exc)
            info = {}
        settings.update({k: info[k] for k in ("role", "connected_slaves") if k in info})
        return settings

    def durability_problems(self, settings: dict[str, str] | None = None) -> list[str]:
        """Why commits acknowledged by this server could be lost (empty when
        the settings are durable or cannot be read)."""
        config = self.server_settings() if settings is None else settings
        problems: list[str] = []
        if "appendonly" in config:
            if config.get("appendonly") != "yes":
                problems.append("appendonly is not 'yes': acknowledged commits are lost if Redis restarts")
            elif config.get("appendfsync") != "always":
                problems.append(
                    f"appendfsync is {config.get('appendfsync')!r}, not 'always': "
                    "about a second of acknowledged commits can be lost in a crash"
                )
        if config.get("maxmemory-policy", "noeviction") != "noeviction":
            problems.append(f"maxmemory-policy is {config['maxmemory-policy']!r}: reservations may be evicted")
        replicas = int(config.get("connected_slaves", "0") or 0)
        if config.get("role") == "slave":
            problems.append("this server is a replica: writes will be refused")
        elif replicas and not self.wait_replicas:
            problems.append(
                f"{replicas} replica(s) connected but wait_replicas=0: a failover can lose acknowledged commits"
            )
        elif self.wait_replicas > replicas:
            problems.append(f"wait_replicas={self.wait_replicas} but only {replicas} replica(s) connected")
        return problems

    def close(self) -> None:
        """Disconnect every pooled connection."""
        self._pool.disconnect()

    def __repr__(self) -> str:
        return f"RedisManifestStore({self._identity!r})"

    # --------------------------------------------------------------- internals
    def _store_key(self) -> str:
        return f"{self._prefix}:store"

    def _store_fields(self) -> dict[str, str]:
        """The ``{prefix}:store`` hash ({} when absent); StoreSchemaError when
        the key holds something else than a hash."""
        key = self._store_key()
        kind = self._command("TYPE", key)
        if kind not in ("none", "hash"):
            raise StoreSchemaError(
                f"Redis at {self._identity}: key {key!r} is a {kind}, expected Tessera's store hash (id, layout); "
                "another application uses this key prefix - give Tessera its own prefix (?prefix=...) or database"
            )
        return _as_dict(self._command("HGETALL", key)) if kind == "hash" else {}

    def _check_layout(self, fields: dict[str, str]) -> None:
        """StoreSchemaError unless the store hash (when present) records our layout."""
        if not fields:
            return  # nothing recorded yet: layout 1 (stores older than the hash) or an empty store
        layout = fields.get("layout")
        if layout != LAYOUT:
            newer = layout is not None and layout.isdigit() and int(layout) > int(LAYOUT)
            raise StoreSchemaError(
                f"Redis at {self._identity}: key {self._store_key()!r} records key layout {layout!r}, "
                f"this Tessera reads and writes layout {LAYOUT!r}; "
                + (
                    "upgrade Tessera to a release that knows that layout"
                    if newer
                    else "the keys under this prefix were not written by Tessera - "
                    "give Tessera its own prefix (?prefix=...) or database"
                )
            )
        if not fields.get("id"):
            raise StoreSchemaError(
                f"Redis at {self._identity}: key {self._store_key()!r} has no 'id' field; "
                "it was altered by hand - restore it from a backup, or delete it to give this store a new id "
                "(tables bound to the old id will refuse it)"
            )

    def _row_prefix(self, table_key: str) -> str:
        return f"{self._prefix}:{{{table_key}}}:v:"

    def _row_key(self, table_key: str, version: int) -> str:
        return f"{self._row_prefix(table_key)}{version}"

    def _index_key(self, table_key: str) -> str:
        return f"{self._prefix}:{{{table_key}}}:versions"

    def _checkout(self) -> Any:
        try:
            return self._pool.get_connection()
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise StoreUnavailableError(f"cannot connect to Redis at {self._identity}: {exc}") from exc
        except ResponseError as exc:  # AUTH / HELLO refused
            raise StoreUnavailableError(f"Redis at {self._identity} refused the connection: {exc}") from exc

    def _command(self, *args: Any) -> Any:
        """A read-only command; any failure is StoreUnavailableError."""
        conn = self._checkout()
        try:
            conn.send_command(*args)
            return conn.read_response()
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            conn.disconnect()
            raise StoreUnavailableError(f"Redis {args[0]} on {self._identity} failed: {exc}") from exc
        except ResponseError as exc:
            raise StoreUnavailableError(f"Redis {args[0]} on {self._identity} failed: {exc}") from exc
        finally:
            self._pool.release(conn)

    def _script(
        self,
        name: str,
        keys: Sequence[str],
        args: Sequence[str],
        *,
        write: bool = False,
        what: str = "",
        wait_if: Any = None,
    ) -> Any:
        """Run a script on one connection; for writes, then WAIT on the same
        connection when ``wait_replicas`` is set and ``wait_if(result)``."""
        script = _SCRIPTS[name]
        conn = self._checkout()  # a failure here is before anything was sent
        try:
            try:
                conn.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
                result = conn.read_response()
            except NoScriptError:  # definite: nothing ran
                conn.send_command("EVAL", script.source, len(keys), *keys, *args)
                result = conn.read_response()
            if write and self.wait_replicas and wait_if is not None and wait_if(result):
                conn.send_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
                acked = int(conn.read_response())
                if acked < self.wait_replicas:
                    raise AmbiguousStoreError(
                        f"{what}: applied on the primary but acknowledged by {acked} of {self.wait_replicas} "
                        f"replicas within {self.wait_timeout_ms} ms; a failover could lose it - read the row back"
                    )
            return result
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            conn.disconnect()
            if write:
                raise AmbiguousStoreError(
                    f"{what}: the connection to {self._identity} failed after the command was sent ({exc}); "
                    "it may or may not have been applied - read the row back"
                ) from exc
            raise StoreUnavailableError(f"Redis read on {self._identity} failed: {exc}") from exc
        except ResponseError as exc:  # the server refused the script: nothing was applied
            if any(str(exc).startswith(p.strip()) for p in _REFUSED):
                raise StoreUnavailableError(f"Redis at {self._identity} refused {what or name}: {exc}") from exc
            raise StoreError(f"Redis script {name} failed on {self._identity}: {exc}") from exc
        finally:
            self._pool.release(conn)


def _parse_info(text: Any) -> dict[str, str]:
    if isinstance(text, dict):
        return {str(k): str(v) for k, v in text.items()}
    out: dict[str, str] = {}
    for line in str(text).splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k.strip()] = v.strip()
    return out
