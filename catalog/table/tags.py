"""Tags: names for versions, stored as Lance does in ``_refs/tags/{name}.json``
so pylance sees them too."""

from __future__ import annotations

import datetime as dt
import json
import numbers
import re

from tessera.commit import list_versions
from tessera.format.table.paths import TAGS_DIR, tag_path, version_path
from tessera.stores.errors import AlreadyExistsError, ObjectNotFoundError
from tessera.stores.object_store import ObjectStore

from ..errors import InvalidArgumentError, TagError

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Tags:
    def __init__(self, store: ObjectStore) -> None:
        self._store = store

    def _path(self, name: str) -> str:
        if not isinstance(name, str) or not _NAME.match(name) or name.endswith(".lock") or ".." in name:
            raise InvalidArgumentError(f"invalid tag name {name!r}: use letters, digits, '_', '.', '-'")
        return tag_path(name)

    def list(self) -> dict[str, dict]:
        out = {}
        for entry in sorted(self._store.list(TAGS_DIR)):
            if entry.endswith(".json"):
                name = entry[: -len(".json")]
                out[name] = self.get(name)
        return out

    def version_of(self, version: int | str) -> int:
        """The version number ``version`` names: itself, or a tag's version."""
        if isinstance(version, str):
            return int(self.get(version)["version"])
        if isinstance(version, numbers.Integral) and not isinstance(version, bool):
            return int(version)
        raise InvalidArgumentError(f"a version is a number or a tag name, got {version!r}")

    def get(self, name: str) -> dict:
        try:
            raw = self._store.read(self._path(name))
        except ObjectNotFoundError as exc:
            raise TagError(f"tag {name!r} does not exist") from exc
        try:
            data = json.loads(raw)
            int(data["version"])
        except (ValueError, KeyError, TypeError) as exc:
            raise TagError(f"tag {name!r} is unreadable: {exc}") from exc
        return data

    def _body(self, version: int, created: str | None = None) -> bytes:
        versions, scheme = list_versions(self._store)
        if version not in versions:
            raise TagError(f"cannot tag version {version}: it does not exist")
        size = self._store.size(version_path(versions[version]))
        now = _now()
        return json.dumps(
            {
                "branch": None,
                "version": version,
                "createdAt": created or now,
                "updatedAt": now,
                "manifestSize": size,
                "metadata": {},
            },
            indent=2,
        ).encode()

    def create(self, name: str, version: int) -> None:
        path = self._path(name)
        try:
            self._store.put_if_not_exists(path, self._body(version))
        except AlreadyExistsError as exc:
            raise TagError(f"tag {name!r} already exists") from exc

    def update(self, name: str, version: int) -> None:
        old = self.get(name)
        self._store.put(self._path(name), self._body(version, old.get("createdAt")))

    def delete(self, name: str) -> None:
        self.get(name)
        self._store.delete(self._path(name))
