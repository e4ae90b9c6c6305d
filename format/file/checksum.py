"""Checksums of a data file's bytes, kept where Lance readers do not look.

Lance's data files carry no checksum: one flipped bit in a page changes a
value, and every reader returns it.  The files Tessera writes carry CRC32C
checksums in one more global buffer, which pylance and LanceDB skip (they
read global buffer 0, the FileDescriptor, and find everything else through
the column metadata)::

    page buffers                    covered by the block checksums
    global buffer 0                 FileDescriptor (covered by its own CRC)
    global buffer 1                 the checksum table below
    column metadata .. footer       covered by one CRC

The checksum table, little-endian::

    8s   magic "TSRCRC32"
    u32  layout version (1)
    u32  block size (64 KiB)
    u64  data end: blocks cover bytes [0, data end), the last may be short
    u32  CRC32C of global buffer 0
    u32  CRC32C of the bytes from the column metadata to the end of the file
    u32  number of blocks
    u32  CRC32C of each block
    u32  CRC32C of the table's bytes before this one

The writer computes the block checksums while the file streams out (no second
read).  A reader checks the metadata's checksums when it parses a file's tail,
and each block the first time this process reads any byte of it (a block whose
bytes were not fetched is fetched whole): a mismatch is a
:class:`~tessera.format.errors.ChecksumMismatchError` and the bytes are never
decoded.  Files without the table (pylance's, LanceDB's, Tessera's before the
table existed) read as they always did.

:func:`checksums` sets what this process does: ``"verify"`` (the default:
write the checksums and verify them), ``"write"`` (write them, verify nothing)
or ``"off"`` (neither); the ``TESSERA_CHECKSUMS`` environment variable sets
the starting mode.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import google_crc32c
import numpy as np
import pyarrow as pa

from ..errors import ChecksumMismatchError, CorruptFileError, InvalidSettingError

if TYPE_CHECKING:
    from .container import ContainerReader

MAGIC = b"TSRCRC32"
LAYOUT_VERSION = 1
BLOCK_SIZE = 64 * 1024
HEADER = struct.Struct("<8sIIQIII")
MODES = ("verify", "write", "off")
ENV = "TESSERA_CHECKSUMS"

_extend = google_crc32c.extend


def crc32c(data: object, crc: int = 0) -> int:
    """The CRC32C of ``data`` (any bytes-like object), continuing ``crc``."""
    if not isinstance(data, (bytes, pa.Buffer, np.ndarray)):
        data = np.frombuffer(data, dtype=np.uint8)  # type: ignore[call-overload]
    return _extend(crc, data)


# -- the mode ------------------------------------------------------------------------------


def check_mode(mode: object) -> str:
    """``mode`` if it is a checksum mode, else InvalidSettingError."""
    if mode not in MODES:
        raise InvalidSettingError(f"checksums must be one of {', '.join(map(repr, MODES))}, got {mode!r}")
    return str(mode)


def _mode_from_env() -> str:
    raw = os.environ.get(ENV, "").strip().lower()
    if not raw:
        return "verify"
    try:
        return check_mode(raw)
    except InvalidSettingError as exc:
        raise InvalidSettingError(f"{ENV}: {exc}") from None


_MODE: list[str] = []  # the process's mode, read from the environment on first use
_MODE_LOCK = threading.Lock()


def mode() -> str:
    """What this process does with data file checksums now."""
    if not _MODE:
        with _MODE_LOCK:
            if not _MODE:
                _MODE.append(_mode_from_env())
    return _MODE[0]


def set_mode(new: str) -> str:
    """Set the process's checksum mode; returns the one it replaces."""
    check_mode(new)
    old = mode()
    _MODE[0] = new
    return old


@contextlib.contextmanager
def checksums(new: str) -> Iterator[None]:
    """Within the ``with`` block, every thread of this process uses checksum
    mode ``new`` (``"verify"``, ``"write"`` or ``"off"``): for example, to
    read what is left of a damaged file with verification off."""
    old = set_mode(new)
    try:
        yield
    finally:
        _MODE[0] = old


# -- writing -------------------------------------------------------------------------------


class BlockHasher:
    """CRC32C per ``block_size`` bytes of a stream, fed as it is written."""

    def __init__(self, block_size: int = BLOCK_SIZE) -> None:
        self.block_size = block_size
        self.crcs: list[int] = []
        self._crc = 0
        self._fill = 0
        self.length = 0

    def update(self, data: memoryview) -> None:
        n = data.nbytes
        if not n:
            return
        arr = np.frombuffer(data, dtype=np.uint8)
        bs, off = self.block_size, 0
        while off < n:
            take = min(n - off, bs - self._fill)
            self._crc = _extend(self._crc, arr[off : off + take])
            self._fill += take
            off += take
            if self._fill == bs:
                self.crcs.append(self._crc)
                self._crc, self._fill = 0, 0
        self.length += n

    def finish(self) -> list[int]:
        """The checksum of every block, the last (short) one included."""
        if self._fill:
            self.crcs.append(self._crc)
            self._crc, self._fill = 0, 0
        return self.crcs


def table_size(num_blocks: int) -> int:
    """Bytes of a checksum table of ``num_blocks`` blocks."""
    return HEADER.size + 4 * num_blocks + 4


def build_table(block_crcs: Sequence[int], data_end: int, descriptor: bytes, meta: bytes) -> bytes:
    """The checksum table of a file whose blocks have ``block_crcs``, whose
    global buffer 0 is ``descriptor`` and whose bytes from the column metadata
    to the end are ``meta``."""
    head = HEADER.pack(MAGIC, LAYOUT_VERSION, BLOCK_SIZE, data_end, crc32c(descriptor), crc32c(meta), len(block_crcs))
    body = head + np.asarray(block_crcs, dtype="<u4").tobytes()
    return body + struct.pack("<I", crc32c(body))


# -- reading -------------------------------------------------------------------------------


class ChecksumTable:
    """A file's checksum table, and which of its blocks this process has verified
    (shared by every reader of the same unchanged file, with its parsed tail)."""

    def __init__(self, block_size: int, data_end: int, crcs: np.ndarray, gb0_crc: int, meta_crc: int) -> None:
        self.block_size, self.data_end, self.crcs = block_size, data_end, crcs
        self.gb0_crc, self.meta_crc = gb0_crc, meta_crc
        self.verified = np.zeros(crcs.size, dtype=np.bool_)
        #: blocks not verified yet; 0: every read passes straight through
        self.remaining = int(crcs.size)
        self.meta_verified = False
        self._lock = threading.Lock()

    def mark(self, block: int) -> None:
        with self._lock:
            if not self.verified[block]:
                self.verified[block] = True
                self.remaining -= 1

    def block_range(self, block: int) -> tuple[int, int]:
        """Where block ``block`` starts and ends (exclusive)."""
        start = block * self.block_size
        return start, min(start + self.block_size, self.data_end)

    def block_span(self, block: int) -> tuple[int, int]:
        """Block ``block`` as a range to read: (offset, length)."""
        start, end = self.block_range(block)
        return start, end - start


def find_table(reader: ContainerReader, tail: pa.Buffer, tail_start: int) -> ChecksumTable | None:
    """The checksum table among the file's global buffers (1 on), or None when
    the file has none.  A table that is there but damaged is CorruptFileError."""
    path = reader.path
    end = tail_start + tail.size
    arr: np.ndarray | None = None
    for pos, length in reader.global_buffers[1:]:
        if length < HEADER.size + 4 or pos < tail_start or pos + length > end:
            continue
        if arr is None:
            arr = np.frombuffer(tail, dtype=np.uint8)
        at = pos - tail_start
        if arr[at : at + 8].tobytes() != MAGIC:
            continue
        (stored,) = struct.unpack_from("<I", tail, at + length - 4)
        if _extend(0, arr[at : at + length - 4]) != stored:
            raise ChecksumMismatchError(path, "the checksum table itself fails its CRC32C: the file's tail is damaged")
        _, version, block_size, data_end, gb0_crc, meta_crc, n = HEADER.unpack_from(tail, at)
        if version != LAYOUT_VERSION:
            # a later layout: read the file unchecked rather than refuse it
            return None
        if block_size <= 0 or length != table_size(n) or n != -(-data_end // block_size):
            raise CorruptFileError(path, f"checksum table of {n} blocks of {block_size} bytes does not fit its size")
        if data_end > reader.footer.column_meta_start:
            raise CorruptFileError(path, f"checksum table covers {data_end} bytes, past the column metadata")
        crcs = np.frombuffer(tail, dtype="<u4", count=n, offset=at + HEADER.size)
        return ChecksumTable(block_size, data_end, crcs, gb0_crc, meta_crc)
    return None


def verify_metadata(reader: ContainerReader, table: ChecksumTable, tail: pa.Buffer, tail_start: int) -> None:
    """Check the FileDescriptor and the bytes from the column metadata to the
    end of the file (all inside the tail already read) against ``table``."""
    if table.meta_verified:
        return
    path = reader.path
    arr = np.frombuffer(tail, dtype=np.uint8)
    gb0_pos, gb0_len = reader.global_buffers[0]
    at = gb0_pos - tail_start
    if _extend(0, arr[at : at + gb0_len]) != table.gb0_crc:
        raise ChecksumMismatchError(path, "the FileDescriptor (schema and row count) fails its CRC32C checksum")
    if _extend(0, arr[reader.footer.column_meta_start - tail_start :]) != table.meta_crc:
        raise ChecksumMismatchError(path, "the column metadata, offset tables or footer fail their CRC32C checksum")
    table.meta_verified = True


class VerifiedIO:
    """A range reader over a data file's reader that verifies every block of
    the data region the first time this process reads a byte of it."""

    def whole_buffer(self) -> pa.Buffer | None:
        """The whole file in place (mapped or in memory) once every block is
        verified; None before, so callers that would slice it take
        ``read_joined`` instead, which verifies the blocks of their ranges."""
        if self._table.remaining:
            return None
        whole = getattr(self._inner, "whole_buffer", None)
        return whole() if whole is not None else None

    def __init__(self, inner: object, table: ChecksumTable, path: str | None) -> None:
        self._inner, self._table, self.path = inner, table, path

    def __getattr__(self, name: str) -> object:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list:
        t = self._table
        if not t.remaining:
            return self._inner.read_ranges(ranges)  # type: ignore[attr-defined]
        bs, end, verified = t.block_size, t.data_end, t.verified
        asked = list(ranges)
        wide: dict[int, tuple[int, int, int]] = {}  # range index -> (first block, last block, start)
        for i, (off, n) in enumerate(asked):
            if n <= 0 or off >= end:
                continue
            b0, b1 = off // bs, (min(off + n, end) - 1) // bs
            if verified[b0] and (b0 == b1 or verified[b0 : b1 + 1].all()):
                continue
            start = b0 * bs
            asked[i] = (start, max(off + n, min((b1 + 1) * bs, end)) - start)
            wide[i] = (b0, b1, start)
        got = self._inner.read_ranges(asked)  # type: ignore[attr-defined]
        if not wide:
            return got
        out = list(got)
        for i, (b0, b1, start) in wide.items():
            buf = got[i]
            for b in range(b0, b1 + 1):
                if not verified[b]:
                    self._check_block(b, buf, start)
            off, n = ranges[i]
            out[i] = buf.slice(off - start, n)
        return out

    def _check_block(self, block: int, buf: pa.Buffer, buf_start: int) -> None:
        t = self._table
        lo, hi = t.block_range(block)
        got = crc32c(buf.slice(lo - buf_start, hi - lo))
        if got != int(t.crcs[block]):
            raise ChecksumMismatchError(
                self.path,
                f"bytes [{lo}, {hi}) (checksum block {block} of {t.crcs.size}) fail their CRC32C checksum "
                f"(recorded {int(t.crcs[block]):08x}, read {got:08x}): the file is damaged, and nothing "
                "was decoded from it",
            )
        t.mark(block)

    def verify_blocks(self, offsets: np.ndarray, sizes: np.ndarray) -> None:
        """Verify every block the ranges ``offsets``/``sizes`` touch."""
        t = self._table
        if not t.remaining or not offsets.size:
            return
        bs, end = t.block_size, t.data_end
        keep = (sizes > 0) & (offsets < end)
        if not keep.any():
            return
        first = offsets[keep] // bs
        last = (np.minimum(offsets[keep] + sizes[keep], end) - 1) // bs
        touched = np.zeros(t.crcs.size + 1, dtype=np.int64)
        np.add.at(touched, first, 1)
        np.add.at(touched, last + 1, -1)
        need = np.flatnonzero((np.cumsum(touched[:-1]) > 0) & ~t.verified)
        if need.size:
            blocks = need.tolist()
            got = self._inner.read_ranges([t.block_span(b) for b in blocks])  # type: ignore[attr-defined]
            for b, buf in zip(blocks, got):
                self._check_block(b, buf, t.block_range(b)[0])

    def read_joined(self, offsets, sizes) -> tuple[np.ndarray, np.ndarray]:
        offsets = np.asarray(offsets, dtype=np.int64)
        sizes = np.asarray(sizes, dtype=np.int64)
        self.verify_blocks(offsets, sizes)
        joined = getattr(self._inner, "read_joined", None)
        if joined is not None:
            return joined(offsets, sizes)
        whole = getattr(self._inner, "whole_buffer", None)
        buf = whole() if whole is not None else None
        if buf is not None:
            return np.frombuffer(buf, dtype=np.uint8), offsets
        got = self._inner.read_ranges(list(zip(offsets.tolist(), sizes.tolist())))  # type: ignore[attr-defined]
        parts = [np.frombuffer(b, dtype=np.uint8) for b in got]
        data = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8)
        return data, np.cumsum(sizes) - sizes

    def verify_all(self) -> int:
        """Verify every block not verified yet; returns the bytes checked."""
        t = self._table
        todo = np.flatnonzero(~t.verified).tolist()
        done = 0
        for k in range(0, len(todo), 256):  # 16 MiB a request
            blocks = todo[k : k + 256]
            got = self._inner.read_ranges([t.block_span(b) for b in blocks])  # type: ignore[attr-defined]
            for b, buf in zip(blocks, got):
                self._check_block(b, buf, t.block_range(b)[0])
                done += buf.size
        return done
