#!/usr/bin/env python3
"""Create or upgrade Tessera's SQL schema (Alembic migrations) on a database.

    python deploy/provision_sql.py postgresql+psycopg://tessera@db.example/tessera
    python deploy/provision_sql.py mysql+pymysql://tessera@db.example/tessera
    python deploy/provision_sql.py sqlite:///var/lib/tessera/manifests.db
    python deploy/provision_sql.py URL --check      # report the revision, change nothing

The upgrade to the head revision creates the store's id (a row of
tessera_store_meta), which is printed.  Running it again is a no-op.  The
password may be given through the TESSERA_SQL_PASSWORD environment variable
instead of the URL.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

try:
    from tessera.stores import sql_migrate, sql_store
    from tessera.stores.errors import StoreError
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tessera.stores import sql_migrate, sql_store
    from tessera.stores.errors import StoreError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("url", help="SQLAlchemy URL of the database")
    parser.add_argument("--check", action="store_true", help="only report the current and head revisions")
    parser.add_argument("--revision", default="head", help="upgrade to this revision (default: head)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show Alembic's log")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not args.verbose:
        logging.getLogger("alembic").setLevel(logging.WARNING)
    try:
        url = sql_migrate.parse_sql_url(args.url)
        if os.environ.get("TESSERA_SQL_PASSWORD") and not url.password:
            url = url.set(password=os.environ["TESSERA_SQL_PASSWORD"])
        head = sql_migrate.head_revision()
        where = url.render_as_string(hide_password=True)
        if args.check:
            current = sql_migrate.current_revision(url)
            print(f"{where}: revision {current or '(none)'}, head {head}")
            if current == head:
                print(f"store id: {sql_migrate.read_store_id(url) or '(none yet: created on first use)'}")
            return 0 if current == head else 3
        before = sql_migrate.current_revision(url)
        after = sql_migrate.upgrade(url, args.revision)
        store_id = sql_store.ensure_store_id(url) if after == head else None
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - driver errors, reported plainly
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if before == after:
        print(f"{where}: already at revision {after} (head {head})")
    else:
        print(f"{where}: upgraded {before or '(empty)'} -> {after} (head {head})")
    if store_id:
        print(f"store id: {store_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
