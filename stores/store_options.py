"""Manifest-store settings given as keyword arguments or in the store URL's query.

Every manifest store's ``from_url`` accepts its settings (``io_timeout``,
``connect_timeout``, ``pool_size``, ``prefix``, ``wait_replicas`` ...) either
as keyword arguments of :func:`stores.registry.open_manifest_store` or
as query parameters of the store URL::

    postgresql+psycopg://user@host:5432/db?io_timeout=5&pool_size=10
    redis://host:6379/0?io_timeout=5&prefix=tessera
    dynamodb:///TABLE?region=us-east-1&io_timeout=5

Rules, the same for every store:

* Tessera's parameters are removed from the URL before it reaches the driver
  (SQLAlchemy, redis-py, botocore); any other parameter is left for the driver
  (``sslmode``, ``application_name``, ``ssl_cert_reqs`` ...).
* A keyword argument wins over the same setting in the URL (so a program can
  override what a configuration file says).  A setting given twice in the URL,
  or under two of its names (``io_timeout`` and its alias ``socket_timeout``)
  with different values, is an error.
* A value that does not parse (``io_timeout=soon``, a negative or zero
  timeout, ``pool_size=-1``) is InvalidURIError when it came from the URL and
  InvalidStorageOptionError when it came from a keyword argument; both name
  the setting.  An unknown query parameter that looks like one of Tessera's
  (a misspelling such as ``io_timout``, or any ``..._timeout`` the driver does
  not know) is InvalidURIError too, rather than being passed on to the driver.
* Durations are seconds: a number (``5``, ``0.5``) or a string with a unit
  (``"500ms"``, ``"5s"``, ``"2m"``); they must be positive and at most a day.
* Store identities never include these parameters.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Container, Iterable, Mapping
from typing import Any

from .errors import InvalidStorageOptionError, InvalidURIError

__all__ = [
    "Converter",
    "flag",
    "from_kwargs",
    "from_query",
    "looks_like_ours",
    "resolve",
    "seconds",
    "text",
    "whole",
]

#: (value) -> converted value; raises ValueError with a short reason
Converter = Callable[[Any], Any]

_MAX_SECONDS = 86_400.0
_DURATION = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|m)?\s*")


def seconds(value: Any) -> float:
    """A positive duration in seconds (see the module)."""
    if isinstance(value, bool):
        raise ValueError("must be a number of seconds")
    if isinstance(value, (int, float)):
        result = float(value)
    elif isinstance(value, str):
        m = _DURATION.fullmatch(value)
        if not m:
            raise ValueError("must be a number of seconds such as 5, 0.5, '500ms' or '5s'")
        result = float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]
    else:
        raise ValueError("must be a number of seconds")
    if not math.isfinite(result) or result <= 0:
        raise ValueError("must be a positive number of seconds")
    if result > _MAX_SECONDS:
        raise ValueError(f"must be at most {_MAX_SECONDS:g} seconds")
    return result


def whole(minimum: int) -> Converter:
    """A whole number of at least ``minimum``."""

    def convert(value: Any) -> int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError("must be a whole number")
        try:
            n = int(value.strip()) if isinstance(value, str) else int(value)
        except (TypeError, ValueError):
            raise ValueError("must be a whole number") from None
        if n < minimum:
            raise ValueError(f"must be at least {minimum}")
        return n

    return convert


def flag(value: Any) -> bool:
    """true/false, 1/0, yes/no, on/off."""
    if isinstance(value, bool):
        return value
    text_value = str(value).strip().lower()
    if text_value in ("1", "true", "yes", "on"):
        return True
    if text_value in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


def text(value: Any) -> str:
    """A non-empty string."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty string")
    return value


def _names(spec: Mapping[str, Converter], aliases: Mapping[str, str]) -> list[str]:
    return sorted(set(spec) | set(aliases))


def looks_like_ours(key: str, names: list[str]) -> str | None:
    """The setting ``key`` is probably a misspelling of ("" when it just looks like a timeout), or None."""
    k = key.strip().lower().replace("-", "_")
    if k in names:
        return k
    close = difflib.get_close_matches(k, names, n=1, cutoff=0.75)
    if close:
        return close[0]
    return "" if "timeout" in k else None


def from_query(
    store: str,
    items: Iterable[tuple[str, Any]],
    spec: Mapping[str, Converter],
    aliases: Mapping[str, str] | None = None,
    *,
    driver_keys: Container[str] = (),
    strict: bool = False,
) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """Split URL query ``items`` into Tessera's settings (converted, keyed by
    their canonical names) and the rest, in order, for the driver.

    ``store`` names the kind of URL in messages (never the URL itself: it may
    hold a password).  ``driver_keys`` are parameters the driver is known to
    accept; with ``strict`` every other parameter is refused."""
    aliases = aliases or {}
    names = _names(spec, aliases)
    ours: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    rest: list[tuple[str, Any]] = []
    for key, value in items:
        name = aliases.get(key, key)
        if name not in spec:
            guess = None if key in driver_keys and not strict else looks_like_ours(key, names)
            if strict or (guess is not None and key not in driver_keys):
                hint = f"; did you mean {guess!r}?" if guess and guess != key else ""
                raise InvalidURIError(
                    f"{store} URL: unknown query parameter {key!r}{hint} (Tessera's settings: {', '.join(names)})"
                )
            rest.append((key, value))
            continue
        if isinstance(value, (tuple, list)):  # SQLAlchemy gives a repeated parameter as a tuple
            raise InvalidURIError(f"{store} URL: query parameter {key!r} is given more than once")
        try:
            converted = spec[name](value)
        except ValueError as exc:
            raise InvalidURIError(f"{store} URL: query parameter {key}={value!r} {exc}") from None
        if name in given_as:
            if given_as[name] == key:
                raise InvalidURIError(f"{store} URL: query parameter {key!r} is given more than once")
            if ours[name] != converted:
                raise InvalidURIError(
                    f"{store} URL: query parameters {given_as[name]!r} and {key!r} give different values for {name}"
                )
        ours[name] = converted
        given_as.setdefault(name, key)
    return ours, rest


def from_kwargs(
    store: str,
    kwargs: Mapping[str, Any],
    spec: Mapping[str, Converter],
    aliases: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Convert the keyword arguments that were given (None means "not
    given"), keyed by canonical name; InvalidStorageOptionError names a bad one."""
    aliases = aliases or {}
    out: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    for key, value in kwargs.items():
        if value is None:
            continue
        name = aliases.get(key, key)
        if name not in spec:
            raise InvalidStorageOptionError(
                f"{store}: unknown setting {key!r} (accepted: {', '.join(_names(spec, aliases))})"
            )
        try:
            converted = spec[name](value)
        except ValueError as exc:
            raise InvalidStorageOptionError(f"{store}: setting {key}={value!r} {exc}") from None
        if name in out and out[name] != converted:
            raise InvalidStorageOptionError(f"{store}: {given_as[name]!r} and {key!r} give different values for {name}")
        out[name] = converted
        given_as.setdefault(name, key)
    return out


def resolve(
    store: str,
    query_items: Iterable[tuple[str, Any]],
    kwargs: Mapping[str, Any],
    spec: Mapping[str, Converter],
    defaults: Mapping[str, Any],
    aliases: Mapping[str, str] | None = None,
    *,
    driver_keys: Container[str] = (),
    strict: bool = False,
) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """Defaults, overridden by the URL query, overridden by keyword arguments;
    returns (settings, the query parameters left for the driver)."""
    from_url, rest = from_query(store, query_items, spec, aliases, driver_keys=driver_keys, strict=strict)
    given = from_kwargs(store, kwargs, spec, aliases)
    return {**defaults, **from_url, **given}, rest
