"""The skeleton every manifest store's ``from_url`` follows: the store's
settings resolved from the URL's query and the keyword arguments
(:func:`resolve_settings`: defaults, overridden by the query, overridden by
the keyword arguments; see :mod:`stores.store_options`), the store connected,
then provisioned when asked (``create``) and checked (``check``), and closed
again when either fails (:func:`provisioned`).  What is the store's own: how
its URL is parsed and how it connects."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from . import store_options
from .manifest_store import ManifestStore

S = TypeVar("S", bound=ManifestStore)


@dataclass(frozen=True)
class StoreSettings:
    """The settings a store's ``from_url`` takes as keyword arguments or URL query parameters."""

    #: how messages name the store ("Redis store")
    label: str
    #: setting -> converter (raises ValueError on a bad value)
    spec: Mapping[str, store_options.Converter]
    #: setting -> its value when neither the URL nor a keyword argument gives one
    defaults: Mapping[str, Any]
    #: another spelling -> the setting it means
    aliases: Mapping[str, str] = field(default_factory=dict)


def resolve_settings(
    settings: StoreSettings,
    query_items: Iterable[tuple[str, Any]],
    kwargs: Mapping[str, Any],
    *,
    driver_keys: Iterable[str] = (),
    strict: bool = False,
) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """The store's settings, and the query parameters left for its driver."""
    return store_options.resolve(
        settings.label,
        query_items,
        kwargs,
        settings.spec,
        settings.defaults,
        settings.aliases,
        driver_keys=frozenset(driver_keys),
        strict=strict,
    )


def provisioned(store: S, provision: Callable[[S], None] | None, *, check: bool) -> S:
    """``store`` after ``provision(store)`` (when given: ``create`` was asked)
    and its ``check()`` (when ``check``); closed, and the error raised, when
    either fails."""
    try:
        if provision is not None:
            provision(store)
        if check:
            store.check()
    except BaseException:
        store.close()
        raise
    return store


def url_of_identity(identity: str) -> str | None:
    """A URL that opens the store an :meth:`ManifestStore.identity` names
    (what a table's manifest records as ``tessera.commit.store``), or None
    when the identity cannot be opened as it is: it carries credentials
    (identities never do; a manifest that says otherwise was not written by
    Tessera and is not followed), it is not in a form Tessera writes, or it
    is a SQLite file that does not exist on this machine.

    The inverse of each store's identity: ``redis://host:port/db#prefix``
    (``unix://path?db=N#prefix``) opens with ``?prefix=``; a SQL store's
    ``backend://host:port/database#tessera_manifest_versions`` opens with
    the backend's default driver and ``provision=false`` (following a
    recorded address never creates anything there); a DynamoDB identity is
    its URL.  Credentials come from where each driver looks for them when a
    URL has none (libpq's ``PGPASSWORD`` and ``~/.pgpass``, boto3's chain;
    Redis and MySQL have no such place: list their URLs in the config's
    ``commit_stores``)."""
    import os
    from urllib.parse import parse_qsl, urlencode, urlsplit

    from .sql_schema import TABLE_NAME

    if not isinstance(identity, str) or "://" not in identity:
        return None
    try:
        parts = urlsplit(identity)
        _ = parts.port  # a malformed port raises ValueError
    except ValueError:
        return None
    if "@" in parts.netloc or parts.username or parts.password:
        return None
    scheme = parts.scheme.lower()
    base = identity.split("#", 1)[0]  # urlunsplit would drop the empty host of sqlite:////path and unix:///path
    query = parse_qsl(parts.query, keep_blank_values=True)
    if scheme in ("redis", "rediss", "unix"):
        if not parts.fragment or any(k == "prefix" for k, _ in query):
            return None
        return f"{base}{'&' if parts.query else '?'}{urlencode({'prefix': parts.fragment})}"
    if scheme == "dynamodb":
        return None if parts.fragment or parts.netloc else identity
    if scheme in ("sqlite", "postgresql", "mysql", "mariadb"):
        if parts.fragment != TABLE_NAME or parts.query:
            return None
        if scheme == "sqlite":
            return base if os.path.isfile(parts.path) else None
        return f"{base}?provision=false" if parts.hostname else None
    return None
