"""Open data file readers kept between the reads of a table object.

Lance data files are immutable, so a file opened once - its footer, schema,
page layouts and mini-block chunk tables parsed, its bytes mapped - can
serve every later read of the same table object: a held table's second scan
or take opens no file and copies no byte of a local one.  A reader dropped
from a cache is not closed here but released when nothing uses it any
more, so a read running in another thread is never cut short.

A take keeps the files it opens; a scan (and the matching scan of an update
or delete) keeps a file from its second read through the cache on: a table
object scanned once keeps nothing alive (every object a kept reader holds is
work for the garbage collector), one scanned again keeps what it reads.

Two budgets per cache and the same two for the whole process (every table
object's cache counts in them), oldest first out:

* readers kept: enough that reads cycling over a table's files find them all
  (a cache smaller than the files a read touches misses on every one of
  them, an LRU's worst case), and in all below the kernel's 65,530 mappings;
* readers holding a file descriptor: a local file read again is mapped, and
  a mapping needs none; past the budget the reader waiting longest with one
  gives it back (its next read maps the file), so a process with many busy
  tables stays well under the common descriptor limit of 1024.

Reads of cached files are counted in the statistics of the scan that makes
them (``io.counting_into``): the readers are shared, so the scan names itself
per thread around its reads.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections import OrderedDict

from ..errors import FormatError, InvalidPathError
from ..file.datafile import FileReader
from ..file.io import RangeReader, counted_into
from . import paths
from .store import TableStore

__all__ = ["CountingReader", "FileReaderCache", "open_data_file"]

#: readers kept by all caches of the process, and those of them that may hold a descriptor
PROCESS_MAX_FILES = 8192
PROCESS_MAX_DESCRIPTORS = 256

#: guards every cache's bookkeeping and the process's (dictionary operations only); reentrant:
#: a cache collected while the lock is held (the garbage collector runs anywhere) forgets itself
_lock = threading.RLock()
#: (cache token, path) of every cached reader, least recently used first
_kept: OrderedDict[tuple[int, str], None] = OrderedDict()
#: (cache token, path) of the cached readers that may hold a descriptor
_holding: OrderedDict[tuple[int, str], None] = OrderedDict()
#: the live caches by token
_caches: dict[int, weakref.ref[FileReaderCache]] = {}
_tokens = itertools.count()


class CountingReader:
    """A RangeReader that adds the bytes it serves to ``stats["bytes_read"]``
    (and one to ``stats["reads"]`` per request); without ``stats``, to the
    statistics ``io.counting_into`` names on the reading thread, if any."""

    def __init__(self, inner, stats: dict | None = None, lock: threading.Lock | None = None) -> None:
        self._inner, self._stats = inner, stats
        self._lock = lock or threading.Lock()
        self.path = inner.path
        self.remote = getattr(inner, "remote", False)  # a store where one request costs a round trip

    def size(self) -> int:
        return self._inner.size()

    def __getattr__(self, name: str) -> object:  # cache_key, etag, map, whole_buffer, ... of the reader counted
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def read_ranges(self, ranges):
        if self._stats is not None:
            stats, lock = self._stats, self._lock
        else:
            stats, lock = counted_into() or (None, None)
        if stats is not None:
            with lock:
                stats["bytes_read"] = stats.get("bytes_read", 0) + sum(n for _, n in ranges)
                stats["reads"] = stats.get("reads", 0) + 1
        return self._inner.read_ranges(ranges)

    def close(self) -> None:
        self._inner.close()


class FileReaderCache:
    """Open data file readers shared by the reads of one table object (see the module)."""

    def __init__(self, store: TableStore, max_files: int = PROCESS_MAX_FILES, max_descriptors: int = 64) -> None:
        self.store = store
        self.max_files = max_files
        self.max_descriptors = max_descriptors
        self._token = next(_tokens)
        self._readers: OrderedDict[str, FileReader] = OrderedDict()
        #: the cached readers that may still hold a descriptor
        self._unmapped: OrderedDict[str, FileReader] = OrderedDict()
        #: files read once through :meth:`get_on_second_use`, not kept yet
        self._seen: set[str] = set()
        with _lock:
            _caches[self._token] = weakref.ref(self)
        weakref.finalize(self, _forget, self._token, self._readers)

    def get_on_second_use(self, path: str, size: int = 0) -> FileReader | None:
        """:meth:`get` for a file read before through this cache, else None
        (the caller opens it for itself, once): a table scanned once, or a
        one-off scan of a table's many files, keeps nothing alive (a reader
        kept costs the garbage collector's walks), one scanned again does."""
        with _lock:
            if path not in self._readers:
                if path not in self._seen:
                    if len(self._seen) >= 2 * PROCESS_MAX_FILES:
                        self._seen.clear()
                    self._seen.add(path)
                    return None
                self._seen.discard(path)
        r = self.get(path, size)
        # read again already: mapped now (the next read slices it; no descriptor kept)
        _map(r)
        with _lock:
            if self._unmapped.pop(path, None) is not None:
                _holding.pop((self._token, path), None)
        return r

    def get(self, path: str, size: int = 0) -> FileReader:
        """The reader of data file ``path`` (relative to the data folder) of
        ``size`` bytes when known (a manifest's ``file_size_bytes``; 0: unknown)."""
        key = (self._token, path)
        with _lock:
            r = self._readers.get(path)
            if r is not None:
                self._readers.move_to_end(path)
                _kept.move_to_end(key)
                if self._unmapped.pop(path, None) is not None:
                    _holding.pop(key, None)
        if r is not None:
            # read again: worth mapping (a mapping's page faults and unmap
            # cost more than reading a few pieces once, less than re-reading)
            _map(r)
            return r
        r = FileReader(CountingReader(open_data_file(self.store, path, size)))
        give_back: list[FileReader] = []
        with _lock:
            have = self._readers.get(path)
            if have is not None:  # another thread opened it meanwhile
                r.close()
                return have
            self._readers[path] = r
            _kept[key] = None
            if getattr(r.io, "map", None) is not None:
                self._unmapped[path] = r
                _holding[key] = None
            while len(self._readers) > self.max_files:
                gone, old = self._readers.popitem(last=False)
                self._drop(gone)
                give_back.append(old)  # a user may still hold it: its descriptor goes now, the rest with it
            while len(self._unmapped) > self.max_descriptors:
                gone, old = self._unmapped.popitem(last=False)
                _holding.pop((self._token, gone), None)
                give_back.append(old)
            while len(_kept) > PROCESS_MAX_FILES:
                (token, gone), _ = _kept.popitem(last=False)
                owner = _owner(token)
                if owner is not None:
                    dropped = owner._readers.pop(gone, None)
                    owner._drop(gone)
                    if dropped is not None:
                        give_back.append(dropped)
            while len(_holding) > PROCESS_MAX_DESCRIPTORS:
                (token, gone), _ = _holding.popitem(last=False)
                owner = _owner(token)
                held = owner._unmapped.pop(gone, None) if owner is not None else None
                if held is not None:
                    give_back.append(held)
        for old in give_back:  # its descriptor given back (its bytes still a read away: mapped)
            _release_descriptor(old)
        return r

    def _drop(self, path: str) -> None:
        """Forget ``path``'s reader in the process's bookkeeping (``_lock`` held)."""
        self._unmapped.pop(path, None)
        _kept.pop((self._token, path), None)
        _holding.pop((self._token, path), None)

    def fits(self, files: int) -> bool:
        """Whether ``files`` readers fit in the cache (a read of more would only cycle through it)."""
        return files <= min(self.max_files, PROCESS_MAX_FILES)

    def __len__(self) -> int:
        return len(self._readers)

    def descriptors(self) -> int:
        """How many cached readers may hold a file descriptor."""
        return len(self._unmapped)

    def close(self) -> None:
        with _lock:
            self._seen.clear()
            readers = list(self._readers.items())
            for path, _ in readers:
                self._drop(path)
            self._readers.clear()
        for _, r in readers:
            r.close()


def open_data_file(store: TableStore, name: str, size: int = 0) -> RangeReader:
    """A reader of data file ``name`` (a ``DataFile.path``, relative to
    ``data/``) of ``size`` bytes when known (``DataFile.file_size_bytes``; 0:
    unknown); :class:`InvalidPathError` when the store cannot name it."""
    try:
        if size > 0:
            return store.open_reader(paths.data_path(name), size=size)
        return store.open_reader(paths.data_path(name))
    except FormatError:
        raise
    except ValueError as exc:  # the stores' InvalidURIError: e.g. a name too long for the file system
        raise InvalidPathError(str(exc)) from exc


def _owner(token: int) -> FileReaderCache | None:
    ref = _caches.get(token)
    return ref() if ref is not None else None


def _forget(token: int, readers: OrderedDict) -> None:
    """A cache is gone: its entries leave the process's bookkeeping."""
    with _lock:
        _caches.pop(token, None)
        for path in readers:
            _kept.pop((token, path), None)
            _holding.pop((token, path), None)


def _map(r: FileReader) -> None:
    remap = getattr(r.io, "map", None)
    if remap is not None:
        remap()


def _release_descriptor(r: FileReader) -> None:
    release = getattr(r.io, "release_descriptor", None)
    if release is not None:
        release()
