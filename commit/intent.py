"""Commit intents: a writer that keeps losing gets its turn.

Versions go to whoever puts first.  A writer far from the store (every round
trip slow) or slower to build its manifest can lose every try while others
keep committing: each try it rebases on what they committed meanwhile, and
by the time its put arrives the version is taken again.  On one machine the
commit lock (``_versions/.tessera-commit.lock``) orders writers, so this
only happens between machines, where nothing else orders them.

A writer that lost :data:`LOSSES_BEFORE_INTENT` tries records an *intent*:
the object ``_versions/.tessera-commit-intent`` holding its id, when its
commit began (its age), when it claimed the intent and an expiry
(:data:`INTENT_SECONDS` ahead).  While its commit goes on a heartbeat thread
renews the expiry every :data:`RENEW_EVERY` seconds, however long a try
takes.  The oldest commit has the right of way: a writer that keeps losing
takes the intent from a younger holder, never from an older one, and a
holder that finds an older writer's intent in its place gives way (its next
try waits for it).

Other Tessera writers look for an intent before they commit (on their first
commit of a table, every :data:`CHECK_EVERY`-th after, after each try they
lose, and on every commit while they last saw one) and, while another
writer's intent is live, wait until it is gone.  Everyone's wait is
bounded: an intent stops being renewed (and so expires) :data:`HOLD_MAX`
seconds after it was claimed, a holder that crashed stops renewing it, and a
waiter ignores a holder it has seen for longer than ``HOLD_MAX +
INTENT_SECONDS`` by its own clock (a clock far off cannot make an intent
look live for longer), and never waits past its commit's deadline.  The
holder removes the intent once it committed or gave up.

The intent is advisory: it changes who tries when, never who wins a
version (the put-if-not-exists decides, as always), so a lost, stale or
doubled intent costs time, not correctness.  A writer holding the commit
lock does not look (the lock orders the writers of its machine).  Writers
outside Tessera (pylance) do not know it.

Cost: one GET of the intent per :data:`CHECK_EVERY` commits of a table in a
process on an object store, none on local disk (the lock decides there);
a holder sends a GET and a PUT per :data:`RENEW_EVERY` seconds it holds.
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
#: how long an intent lasts after it is written (its holder renews it while it commits)
INTENT_SECONDS = 5.0
#: how often the holder renews its intent
RENEW_EVERY = 1.0
#: the longest one holder makes the others wait: it stops renewing its intent this long after claiming it
HOLD_MAX = 30.0
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
#: holders this process has seen, and when it first saw each (monotonic): none is waited for longer
#: than HOLD_MAX + INTENT_SECONDS, whatever its clock says
_seen: dict[str, float] = {}


class Intent:
    """A table's intent as read: who holds it, since when its commit runs,
    when it was claimed, and until when it is live (wall-clock times)."""

    __slots__ = ("owner", "since", "held", "until")

    def __init__(self, owner: str, since: float, held: float, until: float) -> None:
        self.owner, self.since, self.held, self.until = owner, since, held, until

    def live(self) -> bool:
        """Whether it still holds others back (by the wall clock, bounded by this process's own)."""
        now = time.time()
        if self.until <= now or self.held + HOLD_MAX + INTENT_SECONDS <= now:
            return False
        mono = time.monotonic()
        with _lock:
            first = _seen.get(self.owner)
            if first is None:
                if len(_seen) >= _TABLES_KEPT:
                    _seen.clear()
                first = _seen[self.owner] = mono
        return mono - first < HOLD_MAX + INTENT_SECONDS


def _read(store: ObjectStore) -> Intent | None:
    """The table's intent; None: none, or unreadable."""
    try:
        doc = json.loads(store.read(INTENT_FILE))
        until = float(doc["until"])
        # an intent of an older writer (owner and until only) claimed now, of its own age
        return Intent(str(doc["owner"]), float(doc.get("since", until)), float(doc.get("held", until)), until)
    except ObjectNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, AttributeError):
        return None  # torn or foreign: advisory, so ignored


class Turn:
    """One commit's part in the intents of a table (see the module)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.owner = uuid.uuid4().hex
        #: when this commit began: its age, which decides between two writers that keep losing
        self.since = time.time()
        self.losses = 0
        self.claimed = False
        #: when this writer first claimed the intent (wall clock; 0: never): its commit
        #: holds it for at most HOLD_MAX from then, over all its claims
        self.held = 0.0
        #: whether this machine's commit lock is held (then it orders the writers, not intents)
        self.ordered = False
        self._beat: threading.Thread | None = None
        #: claims made (a heartbeat renews for its own claim only)
        self._claims = 0
        #: set when the commit ends: the heartbeat stops
        self._done = threading.Event()
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

    def _other(self, found: Intent | None) -> bool:
        return found is not None and found.owner != self.owner and found.live()

    def _older(self, found: Intent | None) -> bool:
        """Whether ``found`` is a live intent of a writer whose commit began first: its turn."""
        return found is not None and self._other(found) and found.since <= self.since

    def wait(self, deadline: float) -> None:
        """Before a try: wait while another writer's intent is live (bounded,
        never past ``deadline``); nothing when this writer holds the commit
        lock or holds the intent itself, or when it is not time to look."""
        if self.ordered or self.claimed or not self._due:
            return
        self._due = False
        uri = self.store.uri
        while True:
            live = self._other(_read(self.store))
            with _lock:
                if live:
                    _hot.add(uri)
                else:
                    _hot.discard(uri)
            now = time.monotonic()
            if not live or now >= deadline or self.claimed:
                return
            time.sleep(min(POLL, deadline - now))

    def lost(self) -> None:
        """A try was lost: look for intents before the next one, and record
        this writer's own once it has lost :data:`LOSSES_BEFORE_INTENT`
        (unless an older writer holds it; a younger one gives way)."""
        self.losses += 1
        self._due = True
        if self.ordered or self.losses < LOSSES_BEFORE_INTENT:
            return
        if not self.claimed and self.held and time.time() - self.held >= HOLD_MAX:
            return  # this commit had its turn
        found = _read(self.store)
        if self._older(found):
            self._give_way()
            return  # an older writer's turn first (waited for before the next try)
        if self.claimed:
            return  # still this writer's: its heartbeat renews it
        first = not self.held
        if first:
            self.held = time.time()
        if not self._put():
            if first:
                self.held = 0.0
            return
        if first:
            log.info("%s: lost %d tries; recorded a commit intent", self.store.uri, self.losses)
        self.claimed = True
        self._claims += 1  # a heartbeat of an earlier claim (this writer gave way since) stops
        self._beat = threading.Thread(
            target=self._renew, args=(self._claims,), name="tessera-commit-intent", daemon=True
        )
        self._beat.start()

    def _put(self) -> bool:
        doc = {"owner": self.owner, "since": self.since, "held": self.held, "until": time.time() + INTENT_SECONDS}
        try:
            self.store.put(INTENT_FILE, json.dumps(doc).encode())
            return True
        except Exception as exc:  # noqa: BLE001 - advisory: a failure only costs this writer time
            log.debug("%s: could not record a commit intent: %s", self.store.uri, exc)
            return False

    def _renew(self, claim: int) -> None:
        """The heartbeat of claim number ``claim``: renew the intent until the
        commit ends, an older writer's intent takes its place or
        :data:`HOLD_MAX` has passed."""

        def mine() -> bool:
            return self.claimed and self._claims == claim and not self._done.is_set()

        while not self._done.wait(RENEW_EVERY) and mine():
            if time.time() - self.held >= HOLD_MAX:
                log.info("%s: held a commit intent for %.0f s; no longer renewed", self.store.uri, HOLD_MAX)
                return  # it expires INTENT_SECONDS later; the commit goes on without it
            try:
                found = _read(self.store)
            except Exception as exc:  # noqa: BLE001 - advisory
                log.debug("%s: could not read the commit intent: %s", self.store.uri, exc)
                continue
            if self._older(found):
                self._give_way()
                return
            if mine():
                self._put()

    def _give_way(self) -> None:
        """An older writer's intent took this one's place: its turn first (the next try waits for it)."""
        if self.claimed:
            log.info("%s: gave way to an older writer's commit intent", self.store.uri)
        self.claimed = False  # the heartbeat stops at its next beat
        self._due = True

    def release(self) -> None:
        """Stop renewing and remove this writer's intent (if it still is this writer's)."""
        self._done.set()
        if self._beat is not None:
            self._beat.join()  # no renewal after the removal below
            self._beat = None
        if not self.claimed:
            return
        self.claimed = False
        try:
            found = _read(self.store)
            if found is not None and found.owner == self.owner:
                self.store.delete(INTENT_FILE)
        except Exception as exc:  # noqa: BLE001 - advisory: it expires by itself
            log.debug("%s: could not remove a commit intent: %s", self.store.uri, exc)
