"""Which table a manifest belongs to: incarnation, fingerprint, transaction uuid.

A table's *incarnation* is a random id fixed when it is created (config key
``tessera.commit.incarnation``) and changed by a drop and recreate at the same
URI.  Every manifest Tessera writes carries it; pylance carries the config map
forward.

A natively coordinated table has no store row to hold it, so a writer proves
its lineage with the manifest it read: before its put-if-not-exists of version
``N + 1`` it reads the last bytes of version ``N`` again and compares them with
what it read (the *fingerprint*: size plus the last 16 KiB, which hold the
manifest's timestamp, transaction file name and config).  A dropped and
recreated table has other bytes at version ``N`` (or none), so the writer is
refused instead of extending the new table with the old one's fragments.  The
same check is repeated after reading the versions a rebase goes over, which
closes the race of a recreate happening while they are read.

A table pylance created through a namespace has no incarnation: its
manifests carry pylance's config only.  A staged manifest built on such a
table's version ``N`` is compared with that version by its first fragments
(:func:`foreign_base`): those it keeps have version ``N``'s data files,
whose names are random ids, and its new ones are numbered above ``N``'s; a
recreated table has other files under the same fragment ids, so a writer
that read the old table is refused.

A manifest's transaction uuid - the inline transaction's, or the one in its
``transaction_file`` name (``{read_version}-{uuid}.txn``) - tells whose a
manifest at a final name is.
"""

from __future__ import annotations

import dataclasses
import itertools

from google.protobuf.message import Message

from tessera.format.errors import FormatError
from tessera.format.table import manifest as mf
from tessera.stores.errors import ObjectNotFoundError
from tessera.stores.object_store import ObjectStore

CONFIG_INCARNATION = "tessera.commit.incarnation"

#: bytes of a manifest's end kept as its fingerprint
FINGERPRINT_TAIL = 16 * 1024


def fingerprint(data: bytes) -> bytes:
    """The fingerprint of a manifest file's bytes: its size and last bytes."""
    return len(data).to_bytes(8, "little") + bytes(data[-FINGERPRINT_TAIL:])


def fingerprint_at(store: ObjectStore, path: str) -> bytes | None:
    """The fingerprint of the object at ``path`` (one ranged read), or None if absent."""
    try:
        tail, size = store.read_tail(path, FINGERPRINT_TAIL)
    except ObjectNotFoundError:
        return None
    return size.to_bytes(8, "little") + tail


def incarnation_of(manifest) -> str | None:
    """The incarnation a manifest records (None for tables created before it existed)."""
    return manifest.config.get(CONFIG_INCARNATION) or None


def transaction_uuid(mfile: mf.ManifestFile) -> str | None:
    """The uuid of the transaction that made this manifest, or None if it names none."""
    if mfile.transaction is not None and mfile.transaction.uuid:
        return mfile.transaction.uuid
    name = mfile.manifest.transaction_file
    if name.endswith(".txn") and "-" in name:
        return name[: -len(".txn")].split("-", 1)[1] or None
    return None


def transaction_uuid_of(data: bytes) -> str | None:
    """The transaction uuid of a manifest file's bytes; None if unreadable."""
    try:
        return transaction_uuid(mf.read_manifest(data))
    except FormatError:
        return None


#: operations whose manifest replaces the table's fragments instead of building on them
_REPLACING = frozenset({"overwrite", "restore"})

#: staged fragments :func:`foreign_base` compares (the first ones: bounded
#: work on a table of many fragments; a recreated table differs from the start)
SAMPLE = 16


@dataclasses.dataclass(frozen=True)
class FragmentSample:
    """The first fragments of a version, what :func:`foreign_base` compares with."""

    #: data file paths of the first ``2 * SAMPLE`` fragments, by fragment id
    files: dict[int, frozenset[str]]
    #: the highest fragment id the table had used (a writer numbers new fragments above it); None: unknown
    max_id: int | None
    #: whether ``files`` holds every fragment of the version
    complete: bool


def fragment_sample(manifest) -> FragmentSample:
    """What :func:`foreign_base` compares a staged manifest with (bounded work)."""
    frags = manifest.fragments
    files = {f.id: frozenset(d.path for d in f.files) for f in itertools.islice(frags, 2 * SAMPLE)}
    complete = len(frags) <= 2 * SAMPLE
    if manifest.HasField("max_fragment_id"):
        max_id: int | None = manifest.max_fragment_id
    else:
        max_id = max(files, default=-1) if complete else None
    return FragmentSample(files, max_id, complete)


def _fragment_ids(txn, op: str) -> tuple[set[int], set[int]]:
    """The ids of the existing fragments a transaction changes, and every
    fragment id it mentions (its new fragments' ids may be placeholders:
    pylance writes 0 in an append; a compaction's are ids reserved before),
    found by walking it."""
    changed: set[int] = set()
    mentioned: set[int] = set()

    def walk(message, existing: bool) -> None:
        for field, value in message.ListFields():
            if field.message_type is not None:
                items = [value] if isinstance(value, Message) else value
                if field.message_type.name == "DataFragment":
                    ids = {f.id for f in items}
                    mentioned.update(ids)
                    if existing or field.name in ("updated_fragments", "old_fragments"):
                        changed.update(ids)
                else:
                    for item in items:
                        walk(item, existing)
            elif field.name.endswith("fragment_ids"):
                changed.update(value)
                mentioned.update(value)
            elif field.name == "fragment_id":
                changed.add(value)
                mentioned.add(value)

    walk(getattr(txn, op), existing=op == "merge")  # a merge (added or cast columns) lists existing fragments
    return changed, mentioned


def foreign_base(staged: mf.ManifestFile, base: FragmentSample) -> str | None:
    """Why the staged manifest cannot have been built on the version sampled
    in ``base`` (:func:`fragment_sample`), or None when nothing in its first
    :data:`SAMPLE` fragments says so.  A writer that built on that version
    keeps its fragments (with their data files: a deletion vector or added
    columns add to them) unless its transaction changes them, and numbers
    new ones above the highest id that version had used.  So a fragment of
    the staged manifest that is in that version must share a data file with
    it unless the transaction names it as changed, and one that is not must
    be numbered above it.  Data files are named by random ids: a table
    dropped and recreated under the writer has other files under the same
    fragment ids.  What tells such a table when neither manifest records an
    incarnation (pylance's own tables).  Overwrites and restores replace the
    fragments: not checked; neither is a manifest without a transaction."""
    txn = staged.transaction
    op = txn.WhichOneof("operation") if txn is not None else None
    if op is None or op in _REPLACING:
        return None
    ids: tuple[set[int], set[int]] | None = None
    for frag in itertools.islice(staged.manifest.fragments, SAMPLE):
        there = base.files.get(frag.id)
        if there is None:
            if base.max_id is not None and frag.id > base.max_id:
                continue  # a new fragment
            if not base.complete:
                continue  # beyond the sample
            ids = ids or _fragment_ids(txn, op)
            if frag.id not in ids[1]:
                return f"its fragment {frag.id} is not in that version, which numbered up to {base.max_id}"
            continue  # the transaction's own (an id reserved before)
        if not there or not there.isdisjoint(d.path for d in frag.files):
            continue
        ids = ids or _fragment_ids(txn, op)
        if frag.id not in ids[0]:
            return f"its fragment {frag.id} has other data files than that version's"
    return None
