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
table's version ``N`` is compared with that version by its fragments
(:func:`foreign_base`): the fragments its transaction does not name or
carry are copies of version ``N``'s, with the same data files, whose names
are random ids; a recreated table has other files under the same fragment
ids, so a writer that read the old table is refused.

A manifest's transaction uuid - the inline transaction's, or the one in its
``transaction_file`` name (``{read_version}-{uuid}.txn``) - tells whose a
manifest at a final name is.
"""

from __future__ import annotations

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


def fragment_files(manifest) -> dict[int, frozenset[str]]:
    """Each fragment's data file paths, by fragment id."""
    return {f.id: frozenset(d.path for d in f.files) for f in manifest.fragments}


#: the transaction fields whose fragments are existing ones (their ids are real)
_EXISTING = frozenset({"updated_fragments", "old_fragments"})


def _named(message, ids: set[int], files: set[str]) -> None:
    """The fragments a transaction's operation names, found by walking its
    message: the ids of the existing fragments it changes or removes, and
    the data files of every fragment it carries (new or changed)."""
    for field, value in message.ListFields():
        if field.message_type is not None:
            items = [value] if isinstance(value, Message) else value
            if field.message_type.name == "DataFragment":
                for frag in items:
                    if field.name in _EXISTING:
                        ids.add(frag.id)  # a new fragment's id may be a placeholder (pylance writes 0)
                    files.update(d.path for d in frag.files)
            else:
                for item in items:
                    _named(item, ids, files)
        elif field.name.endswith("fragment_ids"):
            ids.update(value)
        elif field.name == "fragment_id":
            ids.add(value)


def foreign_base(staged: mf.ManifestFile, base: dict[int, frozenset[str]]) -> str | None:
    """Why the staged manifest cannot have been built on the version whose
    fragments are ``base`` (:func:`fragment_files`), or None when nothing in
    it says so.  A writer that built on that version copies every fragment
    its transaction does not name or carry: each must be there with a data
    file in common (data files are named by random ids: another table has
    others), and each fragment there must be in the staged manifest unless
    the transaction names it.  What tells a table dropped and recreated
    under a writer when neither manifest records an incarnation (pylance's
    own tables).  Overwrites and restores replace the fragments: not
    checked; neither is a manifest without a transaction."""
    txn = staged.transaction
    op = txn.WhichOneof("operation") if txn is not None else None
    if op is None or op in _REPLACING:
        return None
    ids: set[int] = set()
    files: set[str] = set()
    _named(getattr(txn, op), ids, files)
    present = set()
    for frag in staged.manifest.fragments:
        present.add(frag.id)
        paths = {d.path for d in frag.files}
        if frag.id in ids or paths & files:
            continue  # the transaction's own (new or changed)
        there = base.get(frag.id)
        if there is None:
            return f"its fragment {frag.id} is not in that version"
        if there and not there & paths:
            return f"its fragment {frag.id} has other data files than that version's"
    for fid in base:
        if fid not in present and fid not in ids:
            return f"it lacks that version's fragment {fid}, which its transaction ({op}) does not remove"
    return None
