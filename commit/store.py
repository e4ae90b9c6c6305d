"""Reading a table's versions from its object store.

The directory listing of ``_versions/`` decides which versions exist; the hint
file is written after each commit but never trusted.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from tessera.format.protos import transaction_pb2
from tessera.format.table import manifest as mf
from tessera.format.table import paths
from tessera.stores.errors import ObjectNotFoundError
from tessera.stores.object_store import ObjectStore

from .errors import TableNotFoundError, VersionNotFoundError
from .lineage import fingerprint

#: objects a catch-up reads at once from a remote store
CONCURRENT_READS = 16


def read_all(store: ObjectStore, names: list[str]) -> list[bytes]:
    """The objects at ``names``, in order: read concurrently from a remote
    store (a writer catching up over N versions waits for about N / 16
    requests' latency, not N), one after another from local disk.

    Raises:
        ObjectNotFoundError: one of them does not exist."""
    if len(names) <= 1 or not getattr(store, "remote", False):
        return [store.read(n) for n in names]
    with ThreadPoolExecutor(max_workers=min(CONCURRENT_READS, len(names)), thread_name_prefix="tessera-catch-up") as ex:
        return list(ex.map(store.read, names))


def read_manifests(
    store: ObjectStore, versions: list[int], naming: mf.NamingScheme, known: dict[str, bytes] | None = None
) -> list[mf.ManifestFile]:
    """The manifests of ``versions`` (named in ``naming``), read together
    (:func:`read_all`) and checked; ``known``: bytes already read, by path.

    Raises:
        VersionNotFoundError: one of them is gone (cleaned up meanwhile)."""
    names = [paths.manifest_path(v, naming) for v in versions]
    known = known or {}
    try:
        fetched = iter(read_all(store, [n for n in names if n not in known]))
        datas = [known[n] if n in known else next(fetched) for n in names]
    except ObjectNotFoundError as exc:
        raise VersionNotFoundError(f"{store.uri}: a version after {versions[0] - 1} is gone ({exc})") from exc
    return [checked_manifest(store, n, d, v) for n, d, v in zip(names, datas, versions, strict=True)]


def list_versions(store: ObjectStore) -> tuple[dict[int, str], mf.NamingScheme | None]:
    """All committed versions -> manifest file name, and the naming scheme."""
    return mf.scan_versions(store.list(paths.VERSIONS_DIR))


def latest_version(store: ObjectStore) -> int:
    versions, _ = list_versions(store)
    if not versions:
        raise TableNotFoundError(f"no Lance table at {store.uri} (no manifests under _versions/)")
    return max(versions)


def load_manifest(
    store: ObjectStore, version: int | None = None, naming: mf.NamingScheme | None = None
) -> mf.ManifestFile:
    """The manifest of ``version`` (default: the latest), parsed and checked.

    ``naming``: the table's naming scheme when the caller knows it (from a
    manifest it read); a given version is then read by its name, without
    listing ``_versions/`` (the listing is the fallback when it is not there)."""
    name: str | None
    if version is not None and naming is not None:
        path = paths.manifest_path(version, naming)
        try:
            data = store.read(path)
        except ObjectNotFoundError:
            pass  # not under that name: the listing decides (and names what exists)
        else:
            return checked_manifest(store, path, data, version)
    elif version is not None and version >= 1:
        found = _read_by_name(store, version)
        if found is not None:
            return found
    if version is None:  # the latest: found without parsing every name
        latest = mf.latest_manifest(store.list(paths.VERSIONS_DIR))
        if latest is None:
            raise TableNotFoundError(f"no Lance table at {store.uri} (no manifests under _versions/)")
        version, name, _ = latest
    else:
        versions, _ = list_versions(store)
        if not versions:
            raise TableNotFoundError(f"no Lance table at {store.uri} (no manifests under _versions/)")
        name = versions.get(version)
        if name is None:
            raise VersionNotFoundError(
                f"version {version} of {store.uri} does not exist (versions {min(versions)}..{max(versions)})"
            )
    path = paths.version_path(name)
    try:
        data = store.read(path)
    except ObjectNotFoundError as exc:
        raise VersionNotFoundError(f"version {version} of {store.uri} vanished while being read") from exc
    return checked_manifest(store, path, data, version)


def _read_by_name(store: ObjectStore, version: int) -> mf.ManifestFile | None:
    """Version ``version`` read by its name, without listing ``_versions/``
    (an old version of a table of thousands costs one read, not a listing):
    under the V2 name, or else the V1 name, when the version has that name
    only.  None when neither exists or both do (the listing then decides, and
    refuses a table named both ways)."""
    for scheme, other in ((mf.NamingScheme.V2, mf.NamingScheme.V1), (mf.NamingScheme.V1, mf.NamingScheme.V2)):
        path = paths.manifest_path(version, scheme)
        try:
            data = store.read(path)
        except ObjectNotFoundError:
            continue
        if store.exists(paths.manifest_path(version, other)):
            return None
        return checked_manifest(store, path, data, version)
    return None


def parsed_manifest(store: ObjectStore, path: str, data: bytes) -> mf.ManifestFile:
    """The manifest parsed from ``data`` (read at ``path``): its feature flags
    checked for reading, its fingerprint set."""
    mfile = mf.read_manifest(data, f"{store.uri}/{path}")
    mf.check_flags(mfile.manifest, writing=False)
    mfile.fingerprint = fingerprint(data)
    return mfile


def checked_manifest(store: ObjectStore, path: str, data: bytes, version: int) -> mf.ManifestFile:
    """The manifest of ``version`` parsed from ``data`` (read at ``path``), checked."""
    mfile = parsed_manifest(store, path, data)
    if mfile.manifest.version != version:
        from tessera.format.errors import CorruptFileError

        raise CorruptFileError(
            f"{store.uri}/{path}", f"manifest says version {mfile.manifest.version}, its name says {version}"
        )
    return mfile


def write_hint(store: ObjectStore, version: int) -> None:
    """Write ``latest_version_hint.json`` as pylance does on local disk (on
    object stores pylance writes none and nothing reads it: one request saved)."""
    from tessera.stores.local import LocalObjectStore

    if not isinstance(store, LocalObjectStore):
        return
    try:  # no fsync, no rename: a lost, stale or torn hint harms nothing (the listing decides)
        store.put_advisory(paths.HINT_FILE, json.dumps({"version": version}, separators=(",", ":")).encode())
    except OSError:
        pass  # advisory only


def load_transaction(store: ObjectStore, mfile: mf.ManifestFile) -> transaction_pb2.Transaction | None:
    """The transaction of a manifest: its inline copy, else the ``_transactions/``
    file it names (pylance may write only the file); None if neither exists."""
    if mfile.transaction is not None:
        return mfile.transaction
    name = mfile.manifest.transaction_file
    if not name:
        return None
    path = paths.transaction_path(name)
    try:
        data = store.read(path)
    except ObjectNotFoundError:
        return None
    mfile.transaction = mf.read_transaction(data, f"{store.uri}/{path}")
    return mfile.transaction
