"""Idempotent writes: an application's transaction committed at most once
(Delta's ``txnAppId``/``txnVersion``).

A writer that may send the same write twice (a Spark micro-batch replayed
after a crash, a job retried by its scheduler) names it: an application id
and a version that grows with each write of that application.  The commit
records, in the manifest it makes, the highest version of each application
(config ``tessera.txn.<app id>``) and, in its transaction's properties, the
pair itself (pylance keeps both and ignores them).  A write whose version
the table already records for its application commits nothing: every try of
a commit first reads the manifest it builds on, so two writers sending the
same write at the same moment cannot both win (the second loses the version
race, rebases onto the first's manifest, finds the record and stops).

Undoing a version by ``restore`` restores the records of that older version
too: writes recorded only after it may then be committed again, which is
what undoing them means.
"""

from __future__ import annotations

import re

from tessera.format.protos import table_pb2, transaction_pb2

from .errors import InvalidAppTransactionError

__all__ = [
    "APP_ID",
    "APP_VERSION",
    "CONFIG_PREFIX",
    "InvalidAppTransactionError",
    "app_of",
    "check_app_transaction",
    "recorded_version",
    "record",
    "tag",
]

#: transaction properties naming the write
APP_ID = "tessera.txn.app_id"
APP_VERSION = "tessera.txn.version"
#: manifest config: ``tessera.txn.<app id>`` -> the highest version committed
CONFIG_PREFIX = "tessera.txn."
_APP = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$")
_RESERVED = {"app_id", "version"}


def check_app_transaction(app_id: object, version: object) -> tuple[str, int] | None:
    """``(app_id, version)`` checked, or None when neither is given."""
    if app_id is None and version is None:
        return None
    if app_id is None or version is None:
        raise InvalidAppTransactionError("give both txn_app_id and txn_version, or neither")
    if not isinstance(app_id, str) or not _APP.match(app_id) or app_id in _RESERVED:
        raise InvalidAppTransactionError(
            f"txn_app_id must be 1-128 of letters, digits, '_', '.', ':', '-' (starting with a letter or digit; "
            f"not {sorted(_RESERVED)}), got {app_id!r}"
        )
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version < 2**63:
        raise InvalidAppTransactionError(f"txn_version must be a non-negative integer, got {version!r}")
    return app_id, version


def recorded_version(manifest: table_pb2.Manifest, app_id: str) -> int | None:
    """The highest version of ``app_id`` the table records at ``manifest``."""
    raw = manifest.config.get(CONFIG_PREFIX + app_id)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None  # not a record of ours: never taken for one


def tag(txn: transaction_pb2.Transaction, app_id: str, version: int) -> None:
    """Name ``txn`` as version ``version`` of application ``app_id``."""
    txn.transaction_properties[APP_ID] = app_id
    txn.transaction_properties[APP_VERSION] = str(version)


def app_of(txn: transaction_pb2.Transaction) -> tuple[str, int] | None:
    """The application write ``txn`` is (see :func:`tag`), or None."""
    props = txn.transaction_properties
    if APP_ID not in props:
        return None
    try:
        return props[APP_ID], int(props[APP_VERSION])
    except (KeyError, ValueError):
        return None


def applied(manifest: table_pb2.Manifest, txn: transaction_pb2.Transaction) -> bool:
    """Whether the table at ``manifest`` already holds the write ``txn`` is."""
    app = app_of(txn)
    if app is None:
        return False
    done = recorded_version(manifest, app[0])
    return done is not None and done >= app[1]


def record(manifest: table_pb2.Manifest, txn: transaction_pb2.Transaction) -> None:
    """Record in ``manifest`` (being built from ``txn``) the write ``txn`` is."""
    app = app_of(txn)
    if app is not None:
        manifest.config[CONFIG_PREFIX + app[0]] = str(app[1])
