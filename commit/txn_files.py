"""Transaction files: ``_transactions/{read_version}-{uuid}.txn``, as pylance 14 writes them.

Every commit writes its transaction twice: inline in the manifest (field 23,
the copy Tessera and pylance 14 read) and as a file of its own, named by the
manifest's ``transaction_file`` field.  The file holds exactly the inline
bytes (a raw ``Transaction`` protobuf, no framing) and is written before the
manifest can be seen, as pylance writes it.  Lance 13 cores (LanceDB 0.40)
read only the file: without it a LanceDB handle opened before a Tessera
commit cannot rebase over it (``Dataset version N does not have a
transaction file``).

Durability: the inline copy is the authoritative one; it is made durable
with the manifest.  The file is written without an fsync (on S3 a PUT is
durable when acknowledged): after a power loss within the operating system's
writeback delay it may be missing or empty, which only a Lance 13 writer
rebasing over that version notices (its commit is refused, nothing is lost).
:func:`repair_transaction_files` (``Table.repair()``, ``tessera repair``)
rewrites every missing or damaged file from the inline copy.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable

from tessera.format.protos import table_pb2, transaction_pb2
from tessera.format.table import manifest as mf
from tessera.format.table import paths
from tessera.stores.errors import ObjectNotFoundError
from tessera.stores.object_store import ObjectStore

log = logging.getLogger(__name__)

__all__ = ["inline_transaction_bytes", "repair_transaction_files", "write_transaction_file"]


def inline_transaction_bytes(data: bytes, manifest: table_pb2.Manifest | None = None) -> bytes | None:
    """The inline transaction's bytes in the manifest file ``data`` (None when
    it has none).  ``manifest``: the Manifest that :func:`mf.write_manifest`
    serialised into ``data`` (its section offset is then not parsed again)."""
    if manifest is None:
        manifest = mf.read_manifest(data).manifest
    if manifest.HasField("transaction_section"):
        pos = manifest.transaction_section
    elif manifest.HasField("transaction_section_deprecated"):
        pos = manifest.transaction_section_deprecated
    else:
        return None
    (length,) = struct.unpack_from("<I", data, pos)
    return bytes(data[pos + 4 : pos + 4 + length])


def write_transaction_file(store: ObjectStore, name: str, body: bytes) -> None:
    """Write the transaction file ``_transactions/{name}`` holding ``body``
    (the manifest's inline transaction bytes), before the manifest is put.

    Not fsynced (see the module docstring): a local store writes it with
    ``put_unsynced``.  A retry of the same transaction after a rebase writes
    the same name again (with the rebased content), replacing the old bytes
    atomically: only the manifest that wins names it."""
    path = paths.transaction_path(name)
    put = getattr(store, "put_unsynced", None)
    if put is not None:
        put(path, body)
    else:
        store.put(path, body)


def _expected(mfile: mf.ManifestFile) -> tuple[str, bytes] | None:
    name = mfile.manifest.transaction_file
    if not name or mfile.transaction is None:
        return None
    return paths.transaction_path(name), mfile.transaction.SerializeToString()


def repair_transaction_files(store: ObjectStore, manifests: Iterable[mf.ManifestFile]) -> list[str]:
    """Rewrite, from the inline copy, every transaction file the given
    versions name that is missing or does not parse to their inline
    transaction (a file lost or emptied by a power loss).  Durable this time
    (``put`` fsyncs on local disk): a repair is rare.  Returns the paths rewritten."""
    fixed = []
    for mfile in manifests:
        want = _expected(mfile)
        if want is None:
            continue
        path, body = want
        try:
            have = store.read(path)
        except ObjectNotFoundError:
            have = None
        if have is not None and _same(have, mfile.transaction):
            continue
        store.put(path, body)
        fixed.append(path)
        log.warning(
            "%s: the transaction file of version %d was %s; rewrote it from the manifest's inline copy",
            store.uri,
            mfile.version,
            "missing" if have is None else "damaged",
        )
    return fixed


def _same(data: bytes, txn: transaction_pb2.Transaction | None) -> bool:
    if txn is None:
        return True
    try:
        return mf.read_transaction(data) == txn
    except Exception:  # noqa: BLE001 - anything unparsable is damaged
        return False
