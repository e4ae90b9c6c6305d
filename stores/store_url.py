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
