"""S3 ``storage_options``: validated into :class:`S3Options` (the table URI is parsed by :mod:`stores.uri`).

Option keys are case-insensitive and accept the spellings Lance and the Rust
``object_store`` crate use (``aws_endpoint``, ``aws_region``, ...), so a
pylance ``storage_options`` dict works unchanged.  Anything not given here is
resolved by botocore the usual way (environment, ``~/.aws`` profiles, instance
metadata).

Accepted keys (aliases in brackets): ``endpoint_url`` [``aws_endpoint``,
``endpoint``, ``aws_endpoint_url``], ``region`` [``aws_region``,
``region_name``, ``aws_default_region``], ``aws_access_key_id``,
``aws_secret_access_key``, ``aws_session_token`` [``session_token``],
``profile`` [``aws_profile``], ``allow_http``, ``addressing_style``
(``path``/``virtual``/``auto``) [``virtual_hosted_style_request``],
``connect_timeout`` and ``io_timeout`` [``read_timeout``] (seconds, or
``"5s"``/``"500ms"``), ``max_retries`` and ``max_pool_connections``.

``io_timeout`` is how long a request waits for S3's reply, or for the next
part of it (botocore's ``read_timeout``, 60 s when not given);
``connect_timeout`` bounds opening a connection (botocore's default: 60 s).
``max_retries`` is how many times botocore repeats a failed idempotent request
(standard mode; default 2, so 3 attempts): a server that stops answering fails
a read after at most ``(max_retries + 1) * (connect_timeout + io_timeout)``
plus botocore's backoff between attempts (at most 1 s, 2 s, 4 s ...; recent
botocore waits only 50 ms, 100 ms ... after a timeout).
Conditional creates are never repeated by botocore (see :mod:`stores.s3`).

``allow_http`` only matters with an endpoint: an endpoint without a scheme
gets ``http://`` when it is true and ``https://`` otherwise, and an explicit
``allow_http=false`` refuses a plain ``http://`` endpoint.  A custom endpoint
defaults to path-style addressing, which S3-compatible servers expect.

:func:`aws_session` is the process's botocore session per profile, shared by
the S3 object store and the DynamoDB manifest store.  botocore is imported
there, on first use: importing Tessera, or opening a local table, never
imports it.  boto3 is not used at all (its import pulls in s3transfer and
costs ~25 ms more; Tessera needs none of its resource layer).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from .errors import InvalidStorageOptionError

_ALIASES: dict[str, str] = {
    "endpoint_url": "endpoint_url",
    "aws_endpoint": "endpoint_url",
    "endpoint": "endpoint_url",
    "aws_endpoint_url": "endpoint_url",
    "region": "region",
    "aws_region": "region",
    "region_name": "region",
    "aws_default_region": "region",
    "aws_access_key_id": "access_key_id",
    "access_key_id": "access_key_id",
    "aws_secret_access_key": "secret_access_key",
    "secret_access_key": "secret_access_key",
    "aws_session_token": "session_token",
    "session_token": "session_token",
    "aws_token": "session_token",
    "profile": "profile",
    "aws_profile": "profile",
    "profile_name": "profile",
    "allow_http": "allow_http",
    "aws_allow_http": "allow_http",
    "addressing_style": "addressing_style",
    "virtual_hosted_style_request": "virtual_hosted_style_request",
    "aws_virtual_hosted_style_request": "virtual_hosted_style_request",
    "connect_timeout": "connect_timeout",
    "read_timeout": "read_timeout",
    "io_timeout": "read_timeout",
    "max_retries": "max_retries",
    "max_pool_connections": "max_pool_connections",
}


def _as_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise InvalidStorageOptionError(f"storage option {key!r} must be true or false, got {value!r}")


def _as_seconds(key: str, value: Any) -> float:
    """A duration: a number of seconds, or a string like ``"5s"``, ``"500ms"``, ``"2m"``."""
    if isinstance(value, bool):
        raise InvalidStorageOptionError(f"storage option {key!r} must be a duration, got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m)?\s*", str(value))
        if not m:
            raise InvalidStorageOptionError(
                f"storage option {key!r} must be a duration such as 5, '5s' or '500ms', got {value!r}"
            )
        seconds = float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]
    if seconds <= 0:
        raise InvalidStorageOptionError(f"storage option {key!r} must be positive, got {value!r}")
    return seconds


def _as_count(key: str, value: Any, minimum: int) -> int:
    try:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError
        n = int(value)
    except (TypeError, ValueError):
        raise InvalidStorageOptionError(f"storage option {key!r} must be a whole number, got {value!r}") from None
    if n < minimum:
        raise InvalidStorageOptionError(f"storage option {key!r} must be at least {minimum}, got {n}")
    return n


def _as_str(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidStorageOptionError(f"storage option {key!r} must be a non-empty string, got {value!r}")
    return value.strip()


def _canonical(
    options: Mapping[str, Any] | None,
    aliases: dict[str, str],
    what: str,
    convert: Mapping[str, Callable[[str, Any], Any]],
) -> dict[str, Any]:
    """``options`` by canonical name (``aliases`` maps each accepted lowercase
    key to it), each value converted by ``convert`` (default :func:`_as_str`);
    unknown keys and aliases given different values are refused."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise InvalidStorageOptionError(f"storage_options must be a dict, got {type(options).__name__}")
    canon: dict[str, tuple[str, Any]] = {}
    for raw_key, value in options.items():
        if not isinstance(raw_key, str):
            raise InvalidStorageOptionError(f"storage option keys must be strings, got {raw_key!r}")
        name = aliases.get(raw_key.strip().lower())
        if name is None:
            raise InvalidStorageOptionError(
                f"unknown {what} storage option {raw_key!r}; accepted: {', '.join(sorted(aliases))}"
            )
        if value is None:
            continue
        if name in canon and canon[name][1] != value:
            raise InvalidStorageOptionError(
                f"storage options {canon[name][0]!r} and {raw_key!r} give different values for {name}"
            )
        canon[name] = (raw_key, value)
    return {name: convert.get(name, _as_str)(key, v) for name, (key, v) in canon.items()}


def _endpoint(value: str, allow_http: bool | None, refused_hint: str = "") -> str:
    """An endpoint URL (``https://`` added to a bare host, ``http://`` with
    ``allow_http``); a plain-http one with ``allow_http`` false is refused
    (``refused_hint`` ends that message)."""
    if "://" not in value:
        value = ("http://" if allow_http else "https://") + value
    ep = urlparse(value)
    if ep.scheme not in ("http", "https") or not ep.netloc:
        raise InvalidStorageOptionError(f"endpoint_url {value!r} is not an http(s) URL")
    if ep.scheme == "http" and allow_http is False:
        raise InvalidStorageOptionError(f"endpoint_url {value!r} is plain http but allow_http is false{refused_hint}")
    return value.rstrip("/")


@dataclass(frozen=True)
class S3Options:
    """Resolved S3 settings; ``None`` means "let boto3 decide"."""

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    profile: str | None = None
    allow_http: bool | None = None
    addressing_style: str | None = None
    connect_timeout: float | None = None
    read_timeout: float | None = None
    max_retries: int | None = None
    max_pool_connections: int = 32

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None) -> S3Options:
        """Validate ``storage_options``; unknown keys raise InvalidStorageOptionError."""
        conv: dict[str, Callable[[str, Any], Any]] = {
            "endpoint_url": _as_str,
            "region": _as_str,
            "access_key_id": _as_str,
            "secret_access_key": _as_str,
            "session_token": _as_str,
            "profile": _as_str,
            "allow_http": _as_bool,
            "virtual_hosted_style_request": _as_bool,
            "addressing_style": _as_str,
            "connect_timeout": _as_seconds,
            "read_timeout": _as_seconds,
            "max_retries": lambda k, v: _as_count(k, v, 0),
            "max_pool_connections": lambda k, v: _as_count(k, v, 1),
        }
        values = _canonical(options, _ALIASES, "S3", conv)

        virtual = values.pop("virtual_hosted_style_request", None)
        style = values.get("addressing_style")
        if style is not None:
            style = style.lower()
            if style not in ("path", "virtual", "auto"):
                raise InvalidStorageOptionError(f"addressing_style must be 'path', 'virtual' or 'auto', got {style!r}")
            if virtual is not None and (style == "virtual") != virtual:
                raise InvalidStorageOptionError("addressing_style and virtual_hosted_style_request disagree")
            values["addressing_style"] = style
        elif virtual is not None:
            values["addressing_style"] = "virtual" if virtual else "path"

        if ("access_key_id" in values) != ("secret_access_key" in values):
            raise InvalidStorageOptionError("give both aws_access_key_id and aws_secret_access_key, or neither")
        if "session_token" in values and "access_key_id" not in values:
            raise InvalidStorageOptionError("aws_session_token needs aws_access_key_id and aws_secret_access_key")

        endpoint = values.get("endpoint_url")
        allow_http = values.get("allow_http")
        if endpoint is not None:
            values["endpoint_url"] = _endpoint(endpoint, allow_http, "; use https or allow_http=true")
            # S3-compatible servers (MinIO, moto, Ceph) rarely resolve bucket subdomains
            values.setdefault("addressing_style", "path")
        return cls(**values)


_session_lock = threading.Lock()
_sessions: dict[str | None, Any] = {}


def aws_session(profile: str | None = None) -> Any:
    """The process's ``botocore.session.Session`` for ``profile`` (None: the
    default chain), created on first use.

    Every S3 and DynamoDB client is made from it, so botocore's data files
    (service models, endpoint rules, partitions) are read and parsed once per
    process, and credentials not given explicitly are resolved once per
    profile.  An unknown profile is reported when a client is made from it."""
    with _session_lock:
        session = _sessions.get(profile)
        if session is None:
            import botocore.session

            session = botocore.session.Session(profile=profile)
            _sessions[profile] = session
        return session
