"""Local-disk object store.

``put_if_not_exists`` writes a temporary file, fsyncs it and hard-links it to
the final name: ``link`` fails if the name exists, so two writers can never both
create it; the directory is then fsynced, so the name is durable when it returns.
Objects that always get a fresh unique name (``data/``, ``_transactions/``, ...)
are created in place and fsynced once (:class:`_NewFileOutput`); other objects
are written under a temporary name, fsynced and renamed into place.  Where hard
links are unavailable ``put_if_not_exists`` falls back to an exclusive create
(``O_EXCL``) followed by a write and fsync.  ``put_unsynced`` writes without
an fsync, for objects a manifest's own bytes can rebuild (transaction files).

Durability.  ``durability="sync"`` (the default) makes every acknowledged
write survive a power loss, at the price of those fsyncs; ``"none"`` skips
every fsync, as pylance does: a process that crashes loses nothing (the
operating system still has the bytes), but after a power loss the latest
acknowledged commits may be missing and a data file a surviving manifest
names may be empty or short (reading it is then an error, never wrong rows).
Set per store (``LocalObjectStore(root, durability=...)``, or the table's
``durability``) and per call with :func:`durability`.

One sync round.  Inside :func:`sync_round` (a table's write runs in one), the
fsyncs of new uniquely named files (data, deletion, index files) are not made
one by one as each is closed: they are made together, in parallel, with the
fsync of the first manifest written (a staged manifest, or the put-if-not-
exists of a final one) before that manifest can be seen, or at the end of the
round when it commits nothing (a staged multi-table write).  A commit then
waits for two rounds of syncs (every file and the manifest at once, then the
``_versions/`` directory) however many files it wrote, and every file is
durable before the manifest naming it is.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import stat
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar

from tessera.format.file.io import LocalFileReader, RangeReader
from tessera.format.table.store import OutputStream

from .errors import AlreadyExistsError, InvalidStorageOptionError, InvalidURIError, ObjectNotFoundError

#: what a write makes durable before it returns (see the module's docstring)
DURABILITY_MODES = ("sync", "none")
_DURABILITY: ContextVar[str | None] = ContextVar("tessera_durability", default=None)


def check_durability(mode: object) -> str:
    """``mode`` if it is a durability mode, else InvalidStorageOptionError."""
    if mode not in DURABILITY_MODES:
        raise InvalidStorageOptionError(f"durability must be one of {DURABILITY_MODES}, got {mode!r}")
    return mode


def requested_durability() -> str | None:
    """The durability a :func:`durability` block asks of this thread's
    writes, or None outside one."""
    return _DURABILITY.get()


@contextlib.contextmanager
def durability(mode: str) -> Iterator[None]:
    """Within the ``with`` block (this thread or task only), local writes use
    durability ``mode`` whatever their store's own setting."""
    token = _DURABILITY.set(check_durability(mode))
    try:
        yield
    finally:
        _DURABILITY.reset(token)


#: the files whose fsync waits for the round's manifest (None: not in a round)
_PENDING: ContextVar[list[str] | None] = ContextVar("tessera_pending_syncs", default=None)
#: threads that run a round's fsyncs together (each releases the GIL while the disk works)
SYNC_THREADS = 16
_sync_pool: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _sync_pool
    if _sync_pool is None:
        _sync_pool = ThreadPoolExecutor(max_workers=SYNC_THREADS, thread_name_prefix="tessera-fsync")
    return _sync_pool


def _forget_pool_in_child() -> None:
    """A forked child has none of its parent's threads: it starts a pool of its own."""
    global _sync_pool
    _sync_pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def _fsync_path(path: str) -> None:
    """fsync the file ``path`` (through a descriptor of its own: fsync makes
    the file's data durable whoever wrote it)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_together(own_fd: int | None) -> None:
    """fsync the round's pending files and ``own_fd`` (a manifest about to be
    named) at once; returns when all are durable."""
    pending = _PENDING.get()
    paths = list(pending) if pending else []
    if pending:
        pending.clear()
    if not paths:
        if own_fd is not None:
            os.fsync(own_fd)
        return
    futures = [_pool().submit(_fsync_path, p) for p in paths]
    try:
        if own_fd is not None:
            os.fsync(own_fd)
    finally:
        for f in futures:
            f.result()  # every error raised; a failed fsync fails the write before anything names the file


@contextlib.contextmanager
def sync_round() -> Iterator[None]:
    """Defer the fsyncs of new uniquely named files written in the block to
    the first manifest written (synced with it, in parallel) or to the end of
    the block, whichever comes first (see the module's docstring)."""
    if _PENDING.get() is not None:  # already in a round: the outer one decides
        yield
        return
    pending: list[str] = []
    token = _PENDING.set(pending)
    ok = False
    try:
        yield
        ok = True
    finally:
        try:
            if ok and pending:
                _sync_together(None)  # nothing named them yet: durable before the call returns
        finally:
            _PENDING.reset(token)


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


#: the polling of a busy advisory lock: first and longest pause (seconds)
_LOCK_POLL_FIRST = 0.00005
_LOCK_POLL_MAX = 0.0005


@contextlib.contextmanager
def advisory_lock(path: str, wait: float) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on the file ``path`` (created, with its folder, if absent)
    for the ``with`` block; yields True when held, False when it stayed busy
    for ``wait`` seconds or cannot be taken here (no such file system support,
    a read-only directory): the caller then goes on without it.

    Advisory only, and for speed only: it orders the writers of one machine
    that take it, so that they do not race (and lose) for the same version;
    correctness never depends on it.  The kernel drops it when its holder
    dies.  Polled (without blocking, pauses of 50 to 500 us) rather than
    waited on, so that a holder that stalls delays the others by ``wait`` at
    most."""
    try:
        import fcntl
    except ImportError:  # no flock on this platform: go on without
        yield False
        return
    try:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:  # its folder first (a new table's first commit)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield False
        return
    try:
        held = False
        end = time.monotonic() + wait
        pause = _LOCK_POLL_FIRST
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
                break
            except BlockingIOError:
                if time.monotonic() >= end:
                    break
                time.sleep(pause)
                pause = min(pause * 2, _LOCK_POLL_MAX)
            except OSError:
                break  # no flock here (some network file systems): go on without
        yield held
    finally:
        os.close(fd)  # closing the descriptor releases the lock


class _AtomicOutput:
    """A file written under a temporary name and renamed into place on close."""

    def __init__(self, final: str, sync: bool = True) -> None:
        os.makedirs(os.path.dirname(final), exist_ok=True)
        self._sync = sync
        #: "defer": the fsync waits for the round's manifest; "together": this
        #: file is a manifest and syncs with the round's pending files
        self.round: str | None = None
        self._final = final
        self._tmp = f"{final}.{uuid.uuid4().hex}.tmp"
        self._f = open(self._tmp, "wb")

    def write(self, data) -> int:
        return self._f.write(data)

    def flush(self) -> None:
        self._f.flush()

    def tell(self) -> int:
        return self._f.tell()

    def close(self) -> None:
        if self._f.closed:
            return
        self._f.flush()
        pending = _PENDING.get() if self.round is not None else None
        if not self._sync:
            pass
        elif pending is not None and self.round == "defer":
            pending.append(self._final)  # synced with the manifest that will name it
        elif pending is not None and self.round == "together":
            _sync_together(self._f.fileno())
        else:
            os.fsync(self._f.fileno())
        self._f.close()
        if self._tmp != self._final:
            os.replace(self._tmp, self._final)

    def abort(self) -> None:
        if not self._f.closed:
            self._f.close()
        try:
            os.unlink(self._tmp)
        except FileNotFoundError:
            pass

    def __enter__(self) -> _AtomicOutput:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class _NewFileOutput(_AtomicOutput):
    """A file created in place under its final name (``O_EXCL``), fsynced on close.

    For objects that always get a fresh unique name (data files, transaction
    files, deletion files, index files): nothing names them until a manifest
    that references them is committed, so a reader never meets one half
    written, and a writer that dies leaves an orphan that clean-up removes.
    One fsync makes both the bytes and the new name durable (a new file's
    directory entry is logged with it on ext4, XFS and btrfs), where a
    temporary name would need a rename made durable later.  An object that
    already exists (never the case for a fresh name) is replaced atomically
    as by :class:`_AtomicOutput`."""

    def __init__(self, final: str, sync: bool = True) -> None:
        self._sync = sync
        self.round = None
        try:
            fd = os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(final), exist_ok=True)
            fd = os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        self._final = final
        self._tmp = final  # written in place: close does not rename, abort removes the partial file
        self._f = os.fdopen(fd, "wb")


#: top-level folders whose objects always get fresh unique names (Lance never rewrites them);
#: staged manifests (``_versions/{name}-{uuid}``) are unique too
_UNIQUE_NAME_DIRS = ("data/", "_transactions/", "_deletions/", "_indices/")


class LocalObjectStore:
    """Objects are files under a root directory."""

    remote = False
    #: a local conditional put (``link``/``O_EXCL``) needs no probe
    probe_scope: tuple[str, ...] | None = None

    def __init__(self, root: str | os.PathLike[str], durability: str = "sync") -> None:
        root = os.fspath(root)
        if "\x00" in root:
            raise InvalidURIError(f"table path {root!r} contains a NUL byte")
        self.root = os.path.abspath(root)
        self.uri = self.root
        #: "sync" or "none" (see the module's docstring); :func:`durability` overrides it per call
        self.durability = check_durability(durability)

    @property
    def syncs(self) -> bool:
        """Whether writes made now fsync (the store's durability, or the call's)."""
        return (_DURABILITY.get() or self.durability) == "sync"

    def _full(self, path: str) -> str:
        if "\x00" in path:
            raise InvalidURIError(f"object path {path!r} under {self.root} contains a NUL byte")
        full = os.path.normpath(os.path.join(self.root, path))
        if not (full == self.root or full.startswith(self.root + os.sep)):
            raise InvalidURIError(f"object path {path!r} escapes the store root {self.root}")
        return full

    def _typed(self, exc: OSError, path: str, writing: bool = False) -> Exception | None:
        """The store error for an OSError of an operation on ``path``; None
        for errors this store does not translate (they propagate as they are)."""
        where = f"{self.root}/{path}"
        code = exc.errno
        if code == errno.ENAMETOOLONG:
            return InvalidURIError(f"{where}: a name in the path is too long for the local file system")
        if writing and code in (errno.ENOTDIR, errno.EEXIST):
            return InvalidURIError(f"cannot create {where}: a part of the path is a file, not a directory")
        if code == errno.ENOENT:
            return ObjectNotFoundError(f"{where} does not exist")
        if code in (errno.EISDIR, errno.ENOTDIR):
            return ObjectNotFoundError(f"{where} is not an object ({exc.strerror or exc})")
        return None

    def read(self, path: str) -> bytes:
        try:
            with open(self._full(path), "rb") as f:
                return f.read()
        except OSError as exc:
            typed = self._typed(exc, path)
            if typed is None:
                raise
            raise typed from exc

    def open_reader(self, path: str, size: int | None = None) -> RangeReader:
        """A reader of the file (its size is the file's own: ``size`` is not needed)."""
        try:
            return LocalFileReader(self._full(path))
        except OSError as exc:  # format.errors.FileAccessError is an OSError
            typed = self._typed(exc, path)
            if typed is None:
                raise
            raise typed from exc

    def read_tail(self, path: str, length: int) -> tuple[bytes, int]:
        """The last ``length`` bytes and the file's size (one open, fstat, pread)."""
        try:
            fd = os.open(self._full(path), os.O_RDONLY)
        except OSError as exc:
            typed = self._typed(exc, path)
            if typed is None:
                raise
            raise typed from exc
        try:
            size = os.fstat(fd).st_size
            n = min(length, size)
            return os.pread(fd, n, size - n), size
        finally:
            os.close(fd)

    def size(self, path: str) -> int:
        try:
            st = os.stat(self._full(path))
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, "Is a directory")
            return st.st_size
        except OSError as exc:
            typed = self._typed(exc, path)
            if typed is None:
                raise
            raise typed from exc

    def exists(self, path: str) -> bool:
        return os.path.exists(self._full(path))

    def list(self, prefix: str) -> list[str]:
        try:
            return [e.name for e in os.scandir(self._full(prefix)) if e.is_file()]
        except (FileNotFoundError, NotADirectoryError):  # nothing (or a file) there: no objects under it
            return []
        except OSError as exc:
            typed = self._typed(exc, prefix)
            if typed is None:
                raise
            raise typed from exc

    def walk(self, prefix: str) -> builtins.list[tuple[str, int, float]]:  # `list` is the method here
        base = self._full(prefix)
        out = []
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                full = os.path.join(dirpath, name)
                try:
                    st = os.stat(full)
                except FileNotFoundError:
                    continue
                out.append((os.path.relpath(full, self.root).replace(os.sep, "/"), st.st_size, st.st_mtime))
        return out

    def _output(self, path: str) -> _AtomicOutput:
        try:
            full = self._full(path)
            out: _AtomicOutput | None = None
            if path.startswith(_UNIQUE_NAME_DIRS) or (path.startswith("_versions/") and ".manifest-" in path):
                try:
                    out = _NewFileOutput(full, self.syncs)
                except FileExistsError:
                    pass  # an existing object is replaced atomically below
            if out is None:
                out = _AtomicOutput(full, self.syncs)
            if path.startswith("_versions/"):
                out.round = "together"  # a manifest: the round's files are durable before it is
            elif path.startswith(_UNIQUE_NAME_DIRS) and isinstance(out, _NewFileOutput):
                out.round = "defer"  # a new name nothing refers to yet
            return out
        except OSError as exc:
            typed = self._typed(exc, path, writing=True)
            if typed is None:
                raise
            raise typed from exc

    def put(self, path: str, data: bytes) -> None:
        with self._output(path) as f:
            f.write(data)

    def put_advisory(self, path: str, data: bytes) -> None:
        """Overwrite ``path`` in place, no fsync: for a file whose loss, staleness
        or tearing harms nothing (``latest_version_hint.json``: pylance and
        Tessera both decide the latest version by listing ``_versions/``)."""
        try:
            # written over the old bytes in place: truncating an existing file to
            # rewrite it makes ext4 flush it on close (auto_da_alloc), 15x slower
            full, flags = self._full(path), os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
            try:
                fd = os.open(full, flags, 0o644)
            except FileNotFoundError:
                os.makedirs(os.path.dirname(full), exist_ok=True)
                fd = os.open(full, flags, 0o644)
            try:
                os.pwrite(fd, data, 0)
                if os.fstat(fd).st_size > len(data):  # rare (a hint for a smaller version): drop the rest
                    os.ftruncate(fd, len(data))
            finally:
                os.close(fd)
        except OSError as exc:
            typed = self._typed(exc, path, writing=True)
            if typed is None:
                raise
            raise typed from exc

    def put_unsynced(self, path: str, data: bytes) -> None:
        """Write ``path`` without an fsync: for an object whose bytes are kept
        durably elsewhere (a transaction file: the manifest carries the
        authoritative inline copy, from which a repair rewrites it).  A new
        name is created in place (``O_EXCL``: nothing names the object until a
        manifest that references it is committed); an existing one is
        replaced atomically (temporary name, rename), so a reader sees the old
        bytes or the new.  After a power loss the object may be missing,
        empty or old."""
        try:
            full = self._full(path)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
            try:
                try:
                    fd = os.open(full, flags, 0o644)
                except FileNotFoundError:
                    os.makedirs(os.path.dirname(full), exist_ok=True)
                    fd = os.open(full, flags, 0o644)
                tmp = None
            except FileExistsError:
                tmp = f"{full}.{uuid.uuid4().hex}.tmp"
                fd = os.open(tmp, flags, 0o644)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                if tmp is not None:
                    os.replace(tmp, full)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp if tmp is not None else full)
                raise
        except OSError as exc:
            typed = self._typed(exc, path, writing=True)
            if typed is None:
                raise
            raise typed from exc

    def advisory_lock(self, path: str, wait: float) -> contextlib.AbstractContextManager[bool]:
        """:func:`advisory_lock` on the object ``path``."""
        return advisory_lock(self._full(path), wait)

    def put_if_not_exists(self, path: str, data: bytes) -> None:
        final = self._full(path)
        directory = os.path.dirname(final)
        tmp = f"{final}.{uuid.uuid4().hex}.staging"
        try:
            os.makedirs(directory, exist_ok=True)
            f = open(tmp, "wb")
        except OSError as exc:
            typed = self._typed(exc, path, writing=True)
            if typed is None:
                raise
            raise typed from exc
        try:
            with f:
                f.write(data)
                f.flush()
                # a writer that lost the race while it wrote need not pay the
                # fsync (the link below still decides; this only saves work)
                if os.path.lexists(final):
                    raise AlreadyExistsError(f"{self.root}/{path} already exists")
                if self.syncs:
                    _sync_together(f.fileno())  # with the round's files: durable before the link names them
        except AlreadyExistsError:
            os.unlink(tmp)
            raise
        try:
            os.link(tmp, final)
        except FileExistsError as exc:
            raise AlreadyExistsError(f"{self.root}/{path} already exists") from exc
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
                raise
            self._exclusive_create(final, data, self.syncs)
        finally:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        if self.syncs:
            _fsync_dir(directory)

    def link_if_not_exists(self, src: str, dst: str, *, sync_src: bool = False) -> None:
        """Give the (complete, fsynced) object ``src`` the name ``dst`` too, only
        if ``dst`` is absent (AlreadyExistsError otherwise); the directory is
        fsynced, so the name is durable when it returns.  The create-only copy
        of a staged manifest to its final name, without writing its bytes
        again.  ``sync_src``: ``src`` was not fsynced by its writer (pylance's
        staged manifest): it is, before the link, when this store syncs.
        ObjectNotFoundError when ``src`` is gone; a file system without hard
        links raises OSError(ENOTSUP/EPERM/EXDEV): copy instead."""
        final = self._full(dst)
        if self.syncs and sync_src:
            try:
                fd = os.open(self._full(src), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError as exc:
                raise ObjectNotFoundError(f"{self.root}/{src} does not exist") from exc
            try:
                _sync_together(fd)
            finally:
                os.close(fd)
        elif self.syncs:
            _sync_together(None)  # (the staged manifest's put synced the round's files already)
        try:
            os.link(self._full(src), final)
        except FileExistsError as exc:
            raise AlreadyExistsError(f"{self.root}/{dst} already exists") from exc
        except FileNotFoundError as exc:
            raise ObjectNotFoundError(f"{self.root}/{src} does not exist") from exc
        if self.syncs:
            _fsync_dir(os.path.dirname(final))

    @staticmethod
    def _exclusive_create(final: str, data: bytes, sync: bool = True) -> None:
        try:
            fd = os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError as exc:
            raise AlreadyExistsError(f"{final} already exists") from exc
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if sync:
                os.fsync(f.fileno())

    def open_output(self, path: str) -> OutputStream:
        return self._output(path)

    def copy(self, src: str, dst: str) -> None:
        """Copy ``src`` to ``dst``, replacing ``dst`` atomically."""
        self.put(dst, self.read(src))

    def copy_if_not_exists(self, src: str, dst: str) -> None:
        """Copy ``src`` to ``dst`` only if ``dst`` is absent; AlreadyExistsError otherwise."""
        self.put_if_not_exists(dst, self.read(src))

    def delete(self, path: str) -> None:
        full = self._full(path)
        try:
            os.unlink(full)
        except FileNotFoundError:
            pass
        pending = _PENDING.get()
        if pending and full in pending:  # a file deleted in a sync round has nothing left to sync
            pending.remove(full)
