"""Checking a table's files against their checksums (:meth:`Table.verify`,
``tessera verify``).

Every data and index file Tessera writes carries CRC32C checksums of all its
bytes (``tessera.format.file.checksum``); reads verify the parts they touch.
``verify`` reads every byte of every file a version needs, whatever this
process verified before, and reports each file as:

* ``ok``: every byte matches its checksum;
* ``unchecked``: the file has no checksums (pylance and LanceDB write none,
  nor did Tessera before 2026-11): it was opened and its metadata parsed, its
  pages were not verified;
* ``corrupt``: a byte does not match, the metadata cannot be parsed, or the
  file's size is not the size the manifest recorded;
* ``missing``: the manifest names a file the store does not have.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from tessera.commit import Progress, list_versions
from tessera.format.errors import FormatError, MissingFileError
from tessera.format.file.container import ContainerReader
from tessera.format.table import paths
from tessera.stores.errors import ObjectNotFoundError, StoreError

from .indexes import list_indices
from .snapshot import TableSnapshot

__all__ = ["FileCheck", "VerifyReport", "verify"]

#: files checked at once (remote stores answer in parallel; local reads overlap the CRC work)
THREADS = 8


@dataclasses.dataclass(frozen=True)
class FileCheck:
    """One file's verdict (see the module)."""

    path: str
    status: str
    #: bytes checked against checksums (0 unless ``ok``)
    bytes_checked: int = 0
    #: what is wrong (corrupt, missing) or why nothing was checked (unchecked)
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    """What :meth:`Table.verify` found, file by file."""

    versions: tuple[int, ...]
    files: tuple[FileCheck, ...]

    def _with(self, status: str) -> list[FileCheck]:
        return [f for f in self.files if f.status == status]

    @property
    def ok(self) -> bool:
        """No file is corrupt or missing (files without checksums aside)."""
        return not any(f.status in ("corrupt", "missing") for f in self.files)

    @property
    def corrupt(self) -> list[FileCheck]:
        return self._with("corrupt")

    @property
    def missing(self) -> list[FileCheck]:
        return self._with("missing")

    @property
    def unchecked(self) -> list[FileCheck]:
        return self._with("unchecked")

    @property
    def bytes_checked(self) -> int:
        return sum(f.bytes_checked for f in self.files)

    def summary(self) -> dict[str, object]:
        counts = {s: 0 for s in ("ok", "unchecked", "corrupt", "missing")}
        for f in self.files:
            counts[f.status] += 1
        return {
            "versions": list(self.versions),
            "files": len(self.files),
            **counts,
            "bytes_checked": self.bytes_checked,
        }


def _files(table: TableSnapshot, snaps: list[TableSnapshot]) -> Iterator[tuple[str, int | None]]:
    """Each file the versions need once: (path in the store, size the manifest records or None)."""
    seen: set[str] = set()
    for snap in snaps:
        for frag in snap.fragments:
            for f in frag.files:
                path = paths.data_path(f.path)
                if path not in seen:
                    seen.add(path)
                    yield path, int(f.file_size_bytes) or None
        for idx in list_indices(snap):
            prefix = paths.index_path(idx["uuid"], "")
            if prefix in seen:
                continue
            seen.add(prefix)
            for path, _size, _mtime in table.store.walk(prefix):
                if path.endswith(".lance") and path not in seen:
                    seen.add(path)
                    yield path, None


def _check(table: TableSnapshot, path: str, size: int | None) -> FileCheck:
    try:
        io = table.store.open_reader(path)
    except (MissingFileError, ObjectNotFoundError) as exc:
        return FileCheck(path, "missing", detail=str(exc))
    try:
        actual = io.size()
        if size is not None and actual != size:
            return FileCheck(path, "corrupt", detail=f"{actual} bytes, the manifest records {size}")
        checked = ContainerReader(io, verify=False).verify_file()
    except (MissingFileError, ObjectNotFoundError) as exc:
        return FileCheck(path, "missing", detail=str(exc))
    except (FormatError, StoreError) as exc:
        return FileCheck(path, "corrupt", detail=str(exc))
    finally:
        io.close()
    if checked is None:
        return FileCheck(path, "unchecked", detail="the file has no checksums (another writer's)")
    return FileCheck(path, "ok", bytes_checked=checked)


def verify(table: TableSnapshot, all_versions: bool = False, progress: Progress | None = None) -> VerifyReport:
    """Check the files of ``table``'s version (``all_versions``: of every
    version on storage) against their checksums."""
    if all_versions:
        snaps = [table.at(table.handler.load(table.store, v)) for v in sorted(list_versions(table.store)[0])]
    else:
        snaps = [table]
    todo = list(_files(table, snaps))
    done: list[FileCheck] = []
    with ThreadPoolExecutor(max_workers=min(THREADS, max(1, len(todo)))) as pool:
        for check in pool.map(lambda job: _check(table, *job), todo):
            done.append(check)
            if progress is not None:
                progress("verifying", len(done), len(todo))
    return VerifyReport(tuple(s.version for s in snaps), tuple(done))
