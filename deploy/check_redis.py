#!/usr/bin/env python3
"""Check a Redis server for use as Tessera's manifest store.

Connects, reports the persistence and replication settings, and warns when an
acknowledged commit would not be durable.  A commit is durable on one node
only with ``appendonly yes`` and ``appendfsync always``; with replicas and
failover, stores must also be opened with ``wait_replicas=N``; and
``maxmemory-policy`` must be ``noeviction``.

    python deploy/check_redis.py redis://127.0.0.1:6379/0
    python deploy/check_redis.py redis://host:6379/0 --wait-replicas 1 --strict

Exit status: 0 reachable (warnings printed), 1 unreachable or refused,
3 not durable and --strict given.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

try:
    from tessera.stores.errors import StoreError
    from tessera.stores.redis_store import RedisManifestStore
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tessera.stores.errors import StoreError
    from tessera.stores.redis_store import RedisManifestStore


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("url", help="redis://[user:password@]host:port/db")
    parser.add_argument("--wait-replicas", type=int, default=0, help="replicas each write will WAIT for")
    parser.add_argument("--connect-timeout", type=float, default=2.0)
    parser.add_argument("--strict", action="store_true", help="exit 3 when commits would not be durable")
    args = parser.parse_args(argv)
    try:
        store = RedisManifestStore.from_url(
            args.url, wait_replicas=args.wait_replicas, connect_timeout=args.connect_timeout, check=False
        )
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    logging.getLogger("tessera.stores.redis_store").setLevel(logging.ERROR)  # this script prints the warnings itself
    try:
        store.check()  # reachable, or StoreUnavailableError
        settings = store.server_settings()
        problems = store.durability_problems(settings)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        store.close()
    print(f"redis: {store.identity()}")
    if "appendonly" not in settings:
        print("warning: cannot read CONFIG (not permitted?); persistence not verified")
    for name, value in settings.items():
        print(f"  {name}: {value}")
    if not problems:
        print("ok: acknowledged commits are durable with these settings")
        return 0
    for problem in problems:
        print(f"warning: {problem}")
    return 3 if args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
