"""Commit intents: a writer that keeps losing gets its turn.

Versions go to whoever puts first.  A writer far from the store (every round
trip slow) or slower to build its manifest can lose every try while others
keep committing: each try it rebases on what they committed meanwhile, and
by the time its put arrives the version is taken again.  On one machine the
commit lock (``_versions/.tessera-commit.lock``) orders writers, so this
only happens between machines, where nothing else orders them.

A writer that lost :data:`LOSSES_BEFORE_INTENT` tries records an *intent*:
the object ``_versions/.tessera-commit-intent`` holding its id and an expiry
(:data:`INTENT_SECONDS` ahead).  Other Tessera writers look for it before
they commit (on their first commit of a table, every
:data:`CHECK_EVERY`-th after, after each try they lose, and on every commit
while they last saw one) and, while it is another writer's and live, wait
until it is gone, never longer than :data:`MAX_WAIT` seconds at a time (a
holder that crashed, a clock that is wrong: everyone's wait stays bounded);
after such a wait a writer makes one commit, then waits again if the intent
is still there: a holder that keeps losing slows the others down to one
commit each per :data:`MAX_WAIT`, and stops nobody.  The holder removes it
once it committed or gave up.

The intent is advisory: it changes who tries when, never who wins a
version (the put-if-not-exists decides, as always), so a lost, stale or
doubled intent costs time, not correctness.  A writer holding the commit
lock does not look (the lock orders the writers of its machine).  Writers
outside Tessera (pylance) do not know it.

Cost: one GET of the intent per :data:`CHECK_EVERY` commits of a table in a
process on an object store, none on local disk (the lock decides there).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid

from tessera.format.table import paths
from tessera.stores.errors import ObjectNotFoundError
from tessera.stores.object_store import ObjectStore

log = logging.getLogger(__name__)

__all__ = ["INTENT_FILE", "Turn"]

INTENT_FILE = f"{paths.VERSIONS_DIR}/.tessera-commit-intent"
#: tries lost before a writer records its intent
LOSSES_BEFORE_INTENT = 2
#: how long an intent lasts after it is written (the holder renews it on each try it loses)
INTENT_SECONDS = 5.0
#: the longest another writer waits for an intent at a time (then it makes one commit)
MAX_WAIT = 5.0
#: a writer looks for an intent on its first commit of a table and every this many after
CHECK_EVERY = 4
#: how often a waiting writer looks again
POLL = 0.05

_lock = threading.Lock()
#: tables whose commits are counted at once (beyond, the counts start again)
_TABLES_KEPT = 10_000
#: commits per table (store URI) in this process, for CHECK_EVERY
_commits: dict[str, int] = {}
#: tables on which this process last found a live intent (it looks on every commit until there is none)
_hot: set[str] = set()


def _read(store: ObjectStore) -> tuple[str, float] | None:
    """(holder, expiry as wall-clock time) of the table's intent; None: none, or unreadable."""
    try:
        doc = json.loads(store.read(INTENT_FILE))
        return str(doc["owner"]), float(doc["until"])
    except ObjectNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        return None  # torn or foreign: advisory, so ignored


class Turn:
    """One commit's part in the intents of a table (see the module)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.owner = uuid.uuid4().hex
        self.losses = 0
        self.claimed = False
        #: whether this machine's commit lock is held (then it orders the writers, not intents)
        self.ordered = False
        with _lock:
            if len(_commits) >= _TABLES_KEPT and store.uri not in _commits:
                _commits.clear()  # a process serving many tables: start counting again
            n = _commits.get(store.uri, 0)
            _commits[store.uri] = n + 1
            self._due = n % CHECK_EVERY == 0 or store.uri in _hot  # whether the next wait() looks

    def __enter__(self) -> Turn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()  # however the commit ends

    def wait(self, deadline: float) -> None:
        """Before a try: wait while another writer's intent is live (bounded,
        never past ``deadline``); nothing when this writer holds the commit
        lock or holds the intent itself, or when it is not time to look."""
        if self.ordered or self.claimed or not self._due:
            return
        self._due = False
        limit = min(time.monotonic() + MAX_WAIT, deadline)
        uri = self.store.uri
        while True:
            found = _read(self.store)
            live = found is not None and found[0] != self.owner and found[1] > time.time()
            with _lock:
                if live:
                    _hot.add(uri)
                else:
                    _hot.discard(uri)
            now = time.monotonic()
            if not live or now >= limit:
                return
            time.sleep(min(POLL, limit - now))

    def lost(self) -> None:
        """A try was lost: look for intents before the next one, and record
        this writer's own once it has lost :data:`LOSSES_BEFORE_INTENT`."""
        self.losses += 1
        self._due = True
        if self.ordered or self.losses < LOSSES_BEFORE_INTENT:
            return
        found = None if self.claimed else _read(self.store)
        if found is not None and found[0] != self.owner and found[1] > time.time():
            return  # another writer's turn first (waited for, bounded, before the next try)
        body = json.dumps({"owner": self.owner, "until": time.time() + INTENT_SECONDS}).encode()
        try:
            self.store.put(INTENT_FILE, body)
        except Exception as exc:  # noqa: BLE001 - advisory: a failure only costs this writer time
            log.debug("%s: could not record a commit intent: %s", self.store.uri, exc)
            return
        if not self.claimed:
            log.info("%s: lost %d tries; recorded a commit intent", self.store.uri, self.losses)
        self.claimed = True

    def release(self) -> None:
        """Remove this writer's intent (if it still is this writer's)."""
        if not self.claimed:
            return
        self.claimed = False
        try:
            found = _read(self.store)
            if found is not None and found[0] == self.owner:
                self.store.delete(INTENT_FILE)
        except Exception as exc:  # noqa: BLE001 - advisory: it expires by itself
            log.debug("%s: could not remove a commit intent: %s", self.store.uri, exc)
