"""Probe an object store's put-if-not-exists before trusting it with commits.

Stores that silently ignore the condition (Tencent COS on buckets that ever had
versioning, Alibaba OSS without ``x-oss-forbid-overwrite``, some local
filesystems) are the most common real-world cause of lost commits: two writers
both "win" a version.  :func:`probe_conditional_put` creates a fresh key twice;
a store that lets the second create through is refused.

Verdicts are cached per process for each (store type, endpoint, bucket) -- or
for stores without an endpoint, their URI -- so a process probes once.
"""

from __future__ import annotations

import logging
import threading
import uuid

from .errors import AlreadyExistsError, ConditionalWriteUnsupportedError
from .object_store import ObjectStore

log = logging.getLogger(__name__)

PROBE_DIR = "_tessera"

_lock = threading.Lock()
_verdicts: dict[tuple[str, ...], str | None] = {}  # scope -> None (trusted) or the refusal message


def probe_scope(store: ObjectStore) -> tuple[str, ...]:
    """The scope a verdict holds for: (store type, endpoint, bucket) for S3,
    (store type, URI) otherwise."""
    scope = getattr(store, "probe_scope", None)
    parts = tuple(scope) if scope is not None else (store.uri,)
    return (type(store).__qualname__, *map(str, parts))


def reset_probe_cache() -> None:
    """Forget every cached verdict (tests; or after reconfiguring a bucket)."""
    with _lock:
        _verdicts.clear()


def probe_conditional_put(store: ObjectStore) -> None:
    """Verify that ``store.put_if_not_exists`` really refuses a second create.

    Writes ``_tessera/probe-{uuid}`` (relative to the store root) twice and
    deletes it again.  Raises ConditionalWriteUnsupportedError if the second
    create succeeds, or if the first create of a fresh key is refused.  Store
    errors (unreachable, access denied) propagate and are not cached."""
    scope = probe_scope(store)
    with _lock:
        if scope in _verdicts:
            cached = _verdicts[scope]
            if cached is not None:
                raise ConditionalWriteUnsupportedError(cached)
            return
    path = f"{PROBE_DIR}/probe-{uuid.uuid4().hex}"
    where = f"{store.uri}/{path}"
    refusal: str | None = None
    try:
        try:
            store.put_if_not_exists(path, b"tessera conditional-put probe: first")
        except AlreadyExistsError:
            refusal = (
                f"{store!r} refused to create a fresh key ({where}) with put-if-not-exists: "
                f"its conditional create is broken, so it cannot decide commits"
            )
        else:
            try:
                store.put_if_not_exists(path, b"tessera conditional-put probe: second")
            except AlreadyExistsError:
                pass
            else:
                refusal = (
                    f"{store!r} accepted a second put-if-not-exists of {where}: it ignores the "
                    f"If-None-Match condition, so two writers could both win a version. Use a store that "
                    f"honours conditional writes, or coordinate commits through an external manifest store"
                )
    finally:
        try:
            store.delete(path)
        except Exception as exc:  # noqa: BLE001 - a leftover probe object is harmless
            log.warning("could not delete the probe object %s: %s", where, exc)
    with _lock:
        _verdicts[scope] = refusal
    if refusal is not None:
        log.error("%s", refusal)
        raise ConditionalWriteUnsupportedError(refusal)
    log.debug("conditional put verified for %s", scope)
