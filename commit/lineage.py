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

A manifest's transaction uuid - the inline transaction's, or the one in its
``transaction_file`` name (``{read_version}-{uuid}.txn``) - tells whose a
manifest at a final name is.
"""

from __future__ import annotations

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
