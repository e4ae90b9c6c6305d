"""What a namespace request carries, checked: its id parts, its model, the page it asks for."""

from __future__ import annotations

from typing import Any, TypeVar

from lance_namespace import errors as nserr
from pydantic import BaseModel

_M = TypeVar("_M", bound=BaseModel)


def id_parts(id: list[str]) -> list[str]:
    """An id's parts, each one catalog name part ('.' joins them: a '.' inside
    one would silently name a nested namespace)."""
    for part in id:
        if not isinstance(part, str) or not part or "." in part:
            raise nserr.InvalidInputError(f"invalid id part {part!r}: parts are non-empty and hold no '.'")
    return list(id)


def as_model(model: type[_M], request: object) -> _M:
    """A request as its model: pylance's Rust side passes plain dicts."""
    if isinstance(request, model):
        return request
    try:
        return model.model_validate(dict(request) if isinstance(request, dict) else request)
    except ValueError as exc:  # pydantic's ValidationError
        raise nserr.InvalidInputError(f"bad {model.__name__}: {exc}") from None


def page(items: list[Any], token: str | None, limit: int | None) -> tuple[list[Any], str | None]:
    """A page of ``items`` after the position ``token`` names; the next token or None."""
    start = 0
    if token:
        try:
            start = int(token)
        except ValueError:
            raise nserr.InvalidInputError(f"bad page_token {token!r}") from None
        if start < 0 or start > len(items):
            raise nserr.InvalidInputError(f"bad page_token {token!r}")
    if limit is not None and limit < 0:
        raise nserr.InvalidInputError(f"limit must not be negative, got {limit}")
    stop = len(items) if not limit else min(len(items), start + limit)
    return items[start:stop], (str(stop) if stop < len(items) else None)
