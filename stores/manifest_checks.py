"""Argument checks shared by the manifest stores (SQL, Redis, DynamoDB).

Every store refuses the same bad inputs the same way, before anything is sent:
table keys must already be normalised full URIs (so two spellings of one
table, or two buckets with one path, can never share or split rows), versions
are non-negative integers, and a flip goes only from ``<final>-<uuid>`` to
``<final>`` (a ``*.manifest`` name).
"""

from __future__ import annotations

from .errors import InvalidURIError
from .manifest_store import VersionRecord
from .uri import normalize_table_uri

#: The largest table key any store accepts (DynamoDB's partition-key limit; the SQL column size).
MAX_KEY_BYTES = 2048


#: keys that passed :func:`check_key` (a pure function of the string): every
#: store call checks its key, and a commit makes several (bounded)
_CHECKED_KEYS: set[str] = set()
_CHECKED_MAX = 4096


def check_key(table_key: str) -> str:
    """A normalised table key (InvalidURIError otherwise)."""
    if type(table_key) is str and table_key in _CHECKED_KEYS:
        return table_key
    if not isinstance(table_key, str) or not table_key:
        raise InvalidURIError(f"table key must be a non-empty string, got {table_key!r}")
    if normalize_table_uri(table_key) != table_key:
        raise InvalidURIError(f"table key {table_key!r} is not normalised; pass it through normalize_table_uri()")
    if len(table_key.encode("utf-8")) > MAX_KEY_BYTES:
        raise InvalidURIError(f"table key is longer than {MAX_KEY_BYTES} bytes")
    if type(table_key) is str:  # not a subclass, whose equality could differ
        if len(_CHECKED_KEYS) >= _CHECKED_MAX:
            _CHECKED_KEYS.clear()
        _CHECKED_KEYS.add(table_key)
    return table_key


def check_version(version: int, max_version: int = 2**63 - 1) -> int:
    """A version in ``[0, max_version]`` (ValueError otherwise; bools refused)."""
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= max_version:
        raise ValueError(f"version must be an integer in [0, {max_version}], got {version!r}")
    return version


def check_bound(version: int) -> int:
    """A lower bound for ``versions_after`` (any integer)."""
    if isinstance(version, bool) or not isinstance(version, int):
        raise ValueError(f"version must be an integer, got {version!r}")
    return version


def check_record(record: VersionRecord, *, max_version: int = 2**63 - 1, max_id_chars: int = 64) -> None:
    """Every field of a reservation (InvalidURIError / ValueError)."""
    check_key(record.table_key)
    check_version(record.version, max_version)
    if not isinstance(record.path, str) or not record.path or len(record.path.encode("utf-8")) > MAX_KEY_BYTES:
        raise ValueError(f"path must be a non-empty string of at most {MAX_KEY_BYTES} bytes")
    if isinstance(record.size, bool) or not isinstance(record.size, int) or not 0 <= record.size <= 2**63 - 1:
        raise ValueError(f"size must be a non-negative 64-bit integer, got {record.size!r}")
    for name in ("transaction_uuid", "incarnation"):
        value = getattr(record, name)
        if not isinstance(value, str) or not value or len(value) > max_id_chars or not value.isascii():
            raise ValueError(f"{name} must be a non-empty ASCII string of at most {max_id_chars} characters")


def check_flip_paths(staged_path: str, final_path: str) -> None:
    """A flip goes from ``{final}-{uuid}`` to ``{final}`` (``*.manifest``), never elsewhere."""
    if not (
        isinstance(final_path, str)
        and isinstance(staged_path, str)
        and final_path.endswith(".manifest")
        and staged_path.startswith(final_path + "-")
    ):
        raise ValueError(
            "a flip must go from a staged path '<final>-<uuid>' to its final '*.manifest' path, "
            f"got {staged_path!r} -> {final_path!r}"
        )
