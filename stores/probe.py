"""Probe an object store's put-if-not-exists before trusting it with commits.

Stores that silently ignore the condition (Tencent COS on buckets that ever had
versioning, Alibaba OSS without ``x-oss-forbid-overwrite``, some local
filesystems) are the most common real-world cause of lost commits: two writers
both "win" a version.  :func:`probe_conditional_put` creates a fresh key twice;
a store that lets the second create through is refused.  A probe costs three
requests (two conditional PUTs, one refused, and a DELETE).

Where a verdict is remembered
-----------------------------

*In the process*, per scope: (store type, endpoint, bucket) for S3, the URI
for other stores.  Refusals and approvals alike, each for :data:`VERDICT_TTL`
seconds from the probe that gave it.

*In the table*: a writer that holds an approval from a probe writes it into
the config of the manifests it commits, under :data:`CONFIG_CONDITIONAL_PUT`
(``tessera.commit.conditional_put``), as ``verified <scope digest> <unix time
of the probe>`` (:func:`verdict_record`).  The digest is the first 16 hex
digits of the SHA-256 of the scope; it names the endpoint and bucket without
writing the endpoint's host name into the table.  Every later manifest carries
the entry forward (Tessera's builder copies the config, and so do pylance and
other Lance writers), and a writer that opens the table reads it with the
manifest it needs anyway.  The commit handler passes it to
:func:`probe_conditional_put` as ``recorded``; the probe is skipped, at no
request at all, when the record

* names the scope of *this* store: the same endpoint and bucket as the store
  the writer talks to.  A table copied to another bucket, or reached through
  another endpoint (a proxy, another S3-compatible server), is probed again;
* is younger than :data:`VERDICT_TTL` (24 h; a record dated more than
  :data:`CLOCK_SKEW` in the future is not trusted either), so a bucket whose
  behaviour changes (versioning turned on under COS, a gateway put in front of
  it at the same address) is caught by the first writer that opens the table
  after a day at most, as a long-running process catches it with its own cache;
* and this process has not seen the store misbehave (:func:`distrust`).

A writer without a usable record probes as before (once per process per
scope), and its own approval then refreshes the record in the manifest it
commits.  A new table is always probed (:meth:`Table.create` checks the store
before anything is written, and there is no manifest yet).

Why this keeps the guarantee.  The record only stands in for a probe of the
same endpoint and bucket made less than a day ago: exactly what the process
cache already trusts a verdict for, only across processes.  A store that
ignores ``If-None-Match`` from the start never gets a record (its probe
refuses it, and a refused writer commits nothing); a table moved onto such a
store is probed again (other scope); the record cannot be forged through
Tessera (``tessera.commit.*`` keys cannot be set as table properties), and
anyone who can rewrite manifests can already destroy the table.  What no
cached verdict, in a process or in a table, can see is a store that starts
ignoring the condition *after* it was probed; the TTL bounds how long that
goes unnoticed, and two signals make the process forget every verdict for the
scope and probe again at the next commit (:func:`distrust`):

* the store answers a conditional PUT with "not implemented" (501, or a 400
  naming ``If-None-Match``): :meth:`stores.s3.S3ObjectStore.put_if_not_exists`
  refuses that commit with ConditionalWriteUnsupportedError and distrusts the
  scope;
* the probe itself sees the store refuse a fresh key, or accept a second create.

Recording the verdict in a separate object of the bucket was considered and
rejected: reading it is one more GET per new process (pylance reads nothing
like it), and it would need its own rules for being written and trusted; the
manifest is read anyway, is written only by a commit, and moves with the
table.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid

from .errors import AlreadyExistsError, ConditionalWriteUnsupportedError
from .object_store import ObjectStore

log = logging.getLogger(__name__)

PROBE_DIR = "_tessera"

#: the manifest config key holding a recorded approval (see the module docstring)
CONFIG_CONDITIONAL_PUT = "tessera.commit.conditional_put"
#: seconds a verdict is trusted after the probe that gave it (in the process and in a table)
VERDICT_TTL = 24 * 3600.0
#: seconds a recorded verdict may be dated in the future (clocks of other writers)
CLOCK_SKEW = 300.0

_lock = threading.Lock()
#: scope -> (None (trusted) or the refusal message, wall-clock time of the probe)
_verdicts: dict[tuple[str, ...], tuple[str | None, float]] = {}
#: scopes whose store misbehaved in this process: recorded verdicts are not trusted for them
_distrusted: set[tuple[str, ...]] = set()


def probe_scope(store: ObjectStore) -> tuple[str, ...]:
    """The scope a verdict holds for: (store type, endpoint, bucket) for S3,
    (store type, URI) otherwise."""
    scope = store.probe_scope
    parts = tuple(scope) if scope is not None else (store.uri,)
    return (type(store).__qualname__, *map(str, parts))


def _digest(scope: tuple[str, ...]) -> str:
    return hashlib.sha256("\x00".join(scope).encode()).hexdigest()[:16]


def _now() -> float:
    """Wall-clock seconds (records are compared across processes and machines)."""
    return time.time()


def _fresh(at: float, now: float) -> bool:
    return -CLOCK_SKEW <= now - at <= VERDICT_TTL


def reset_probe_cache() -> None:
    """Forget every cached verdict and distrust (tests; or after reconfiguring a bucket)."""
    with _lock:
        _verdicts.clear()
        _distrusted.clear()


def distrust(store: ObjectStore, why: str) -> None:
    """``store`` behaved as a store that ignores put-if-not-exists would: forget
    this process's verdict for its scope and ignore recorded ones, so the next
    :func:`probe_conditional_put` probes again."""
    scope = probe_scope(store)
    with _lock:
        _verdicts.pop(scope, None)
        _distrusted.add(scope)
    log.warning("no longer trusting the conditional put of %s: %s", store, why)


def trusts_record(store: ObjectStore, recorded: str | None) -> bool:
    """Whether the manifest entry ``recorded`` approves ``store`` now: it names
    this store's scope, is younger than VERDICT_TTL, and the store has not
    misbehaved in this process."""
    if not recorded:
        return False
    parts = recorded.split()
    if len(parts) != 3 or parts[0] != "verified":
        return False
    try:
        at = float(parts[2])
    except ValueError:
        return False
    scope = probe_scope(store)
    if parts[1] != _digest(scope) or not _fresh(at, _now()):
        return False
    with _lock:
        return scope not in _distrusted


def verdict_record(store: ObjectStore, recorded: str | None = None) -> str | None:
    """The manifest entry recording this process's approval of ``store``'s
    conditional put; None when the process holds no fresh approval, or when
    the table's entry ``recorded`` approves the store and is not older (the
    manifest carries it forward unchanged)."""
    scope = probe_scope(store)
    with _lock:
        cached = _verdicts.get(scope)
    if cached is None or cached[0] is not None or not _fresh(cached[1], _now()):
        return None
    at = int(cached[1])
    if recorded and trusts_record(store, recorded) and float(recorded.split()[2]) >= at:
        return None
    return f"verified {_digest(scope)} {at}"


def probe_conditional_put(store: ObjectStore, recorded: str | None = None) -> None:
    """Verify that ``store.put_if_not_exists`` really refuses a second create.

    ``recorded`` is the table's :data:`CONFIG_CONDITIONAL_PUT` entry, if any:
    when it approves this store (:func:`trusts_record`) and the process holds
    no refusal for it, nothing is sent.  Otherwise the process's verdict is
    used while fresh, or the store is probed: ``_tessera/probe-{uuid}``
    (relative to the store root) is written twice and deleted again.  Raises
    ConditionalWriteUnsupportedError if the second create succeeds, if the
    first create of a fresh key is refused, or if the store says it does not
    implement the condition.  Store errors (unreachable, access denied)
    propagate and are not cached."""
    scope = probe_scope(store)
    now = _now()
    with _lock:
        cached = _verdicts.get(scope)
        if cached is not None and _fresh(cached[1], now):
            if cached[0] is not None:
                raise ConditionalWriteUnsupportedError(cached[0])
            return
    if trusts_record(store, recorded):
        log.debug("conditional put of %s verified by the table's record %s", scope, recorded)
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
        except ConditionalWriteUnsupportedError as exc:
            refusal = str(exc)
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
        _verdicts[scope] = (refusal, now)
        if refusal is None:
            _distrusted.discard(scope)  # a passed probe settles the doubt; its record replaces the old one
        else:
            _distrusted.add(scope)  # no record is trusted for it in this process, even after the TTL
    if refusal is not None:
        log.error("%s", refusal)
        raise ConditionalWriteUnsupportedError(refusal)
    log.debug("conditional put verified for %s", scope)
