"""The data file container shared by file formats 2.0, 2.1 and 2.2.

Layout, front to back::

    page buffers            each starts on a 64-byte boundary
    planning buffers        small page buffers a reader needs before the data
                            (chunk sizes, dictionaries): held back by the
                            writer so the first read of the tail holds them
    global buffer 0         FileDescriptor protobuf (schema and row count)
    global buffer 1         Tessera's checksum table (``checksum``), which
                            Lance readers skip; absent from other writers' files
    column metadata         one ColumnMetadata protobuf per column, back to back
    CMO table               num_columns x (u64 position, u64 length)
    GBO table               num_global_buffers x (u64 position, u64 length)
    footer (40 bytes)       u64 column_meta_start | u64 cmo_table_pos |
                            u64 gbo_table_pos | u32 num_global_buffers |
                            u32 num_columns | u16 major | u16 minor | "LANC"

The version-specific codecs (``format.v20``, ``format.v21``) turn Arrow arrays
into :class:`EncodedPage` objects and back; this module places their buffers,
writes and parses the metadata, and checks every offset it is given.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any as _Any

import pyarrow as pa
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError, Message

from ..errors import CorruptFileError, TruncatedFileError, UnsupportedEncodingError
from ..protos import encodings_pb2, file2_pb2, file_pb2
from . import checksum as lchecksum

MAGIC = b"LANC"
FOOTER = struct.Struct("<QQQIIHH4s")
FOOTER_SIZE = FOOTER.size  # 40
ALIGNMENT = 64
#: planning buffers at most this large are written next to the footer ...
TAIL_BUFFER_MAX = 8 * 1024
#: ... as long as all of a file's together stay within this (the rest stay in
#: place): with the metadata they fit the reader's first tail read
TAIL_BUFFERS_BUDGET = 32 * 1024

#: footer (major, minor) written for each file version
FOOTER_VERSIONS = {"2.0": (0, 3), "2.1": (2, 1), "2.2": (2, 2)}
#: DataFile (major, minor) recorded in a manifest for each file version
DATAFILE_VERSIONS = {"2.0": (2, 0), "2.1": (2, 1), "2.2": (2, 2)}
SUPPORTED_VERSIONS = tuple(FOOTER_VERSIONS)

COLUMN_ENCODING_URL = "/lance.encodings.ColumnEncoding"
ARRAY_ENCODING_URL = "/lance.encodings.ArrayEncoding"
PAGE_LAYOUT_URL = "/lance.encodings21.PageLayout"


def normalize_version(version: str) -> str:
    """Accept "2.0"/"2.1"/"2.2" (and "stable" = 2.2 as in pylance 14)."""
    v = {"stable": "2.2", "legacy": "2.0"}.get(str(version), str(version))
    if v not in FOOTER_VERSIONS:
        raise UnsupportedEncodingError(
            f"file version {version!r} is not supported; choose one of {', '.join(SUPPORTED_VERSIONS)}"
        )
    return v


def version_from_footer(major: int, minor: int, path: str | None = None) -> str:
    if (major, minor) in ((0, 3), (2, 0)):
        return "2.0"
    if (major, minor) == (2, 1):
        return "2.1"
    if (major, minor) == (2, 2):
        return "2.2"
    raise UnsupportedEncodingError(
        f"{path or 'data file'}: file format version {major}.{minor} is not supported (Tessera reads 2.0, 2.1 and 2.2)"
    )


def pack_any(type_url: str, message: Message) -> bytes:
    """Serialise ``message`` wrapped in an Any with Lance's prefix-less type URL."""
    return any_pb2.Any(type_url=type_url, value=message.SerializeToString()).SerializeToString()


def unpack_any(data: bytes, expected_url: str, cls: type, path: str | None = None) -> _Any:
    """Parse an Any holding ``cls``; a different type URL is an unsupported encoding."""
    any_msg = parse_proto(any_pb2.Any, data, path, "encoding")
    url = any_msg.type_url
    if url.rsplit("/", 1)[-1] != expected_url.lstrip("/"):
        raise UnsupportedEncodingError(
            f"{path or 'data file'}: encoding type {url!r} is not supported here (expected {expected_url!r})"
        )
    return parse_proto(cls, any_msg.value, path, expected_url.lstrip("/"))


def parse_proto(cls: type, data: bytes | memoryview | pa.Buffer, path: str | None, what: str) -> _Any:
    msg = cls()
    try:
        # bytes-like objects are parsed in place (a manifest's inline row id sequences can be tens of MB)
        msg.ParseFromString(data if isinstance(data, (bytes, memoryview)) else memoryview(data))
    except (DecodeError, RuntimeWarning, ValueError) as exc:
        raise CorruptFileError(path, f"cannot parse {what}: {exc}") from exc
    return msg


def column_encoding_bytes(blob: bool = False) -> bytes:
    """The ColumnMetadata.encoding pylance writes for every column (``blob``:
    for a blob column of file format 2.0, ``blob { inner { values } }``)."""
    ce = encodings_pb2.ColumnEncoding()
    if blob:
        ce.blob.inner.values.SetInParent()
    else:
        ce.values.SetInParent()
    return pack_any(COLUMN_ENCODING_URL, ce)


@dataclass
class EncodedPage:
    """One page produced by a codec.

    ``column`` is relative to the first column of the field that made it.
    ``buffers`` are bytes-like objects (bytes, memoryview, numpy array, pa.Buffer);
    ``encoding`` is the serialised Any that goes in ``Page.encoding.direct``.
    ``planning`` names the buffers a reader needs before it can plan the
    page's reads (chunk sizes, dictionary, repetition index); the container
    places the small ones next to the footer, where a reader's first read of
    the file's tail fetches them (one round trip less per file on S3).
    """

    column: int
    buffers: list
    length: int
    encoding: bytes
    planning: tuple[int, ...] = ()


@dataclass
class Footer:
    column_meta_start: int
    cmo_table_pos: int
    gbo_table_pos: int
    num_global_buffers: int
    num_columns: int
    major: int
    minor: int

    def pack(self) -> bytes:
        return FOOTER.pack(
            self.column_meta_start,
            self.cmo_table_pos,
            self.gbo_table_pos,
            self.num_global_buffers,
            self.num_columns,
            self.major,
            self.minor,
            MAGIC,
        )

    @classmethod
    def unpack(cls, data: bytes, file_size: int, path: str | None) -> Footer:
        if len(data) < FOOTER_SIZE:
            raise TruncatedFileError(path, f"file is {file_size} bytes, shorter than the 40-byte footer")
        cm, cmo, gbo, ngb, ncols, major, minor, magic = FOOTER.unpack(data[-FOOTER_SIZE:])
        if magic != MAGIC:
            raise CorruptFileError(
                path, f"footer magic is {magic!r}, expected {MAGIC!r} (not a Lance data file, or truncated)"
            )
        end = file_size - FOOTER_SIZE
        if not (cm <= cmo <= gbo <= end):
            raise CorruptFileError(
                path,
                f"footer offsets out of order or out of range (column metadata {cm}, "
                f"CMO table {cmo}, GBO table {gbo}, footer at {end})",
            )
        if cmo + 16 * ncols > gbo or gbo + 16 * ngb > end:
            raise CorruptFileError(
                path, f"footer declares {ncols} columns and {ngb} global buffers, which do not fit their tables"
            )
        return cls(cm, cmo, gbo, ngb, ncols, major, minor)


def _nbytes(buf: object) -> int:
    if isinstance(buf, pa.Buffer):
        return buf.size
    return memoryview(buf).nbytes  # type: ignore[arg-type]


def _copy_bytes(buf: object) -> bytes:
    return buf.to_pybytes() if isinstance(buf, pa.Buffer) else memoryview(buf).tobytes()  # type: ignore[arg-type]


class ContainerWriter:
    """Places page buffers, global buffers and metadata in a byte sink."""

    def __init__(self, sink, version: str, checksums: bool | None = None) -> None:
        """``checksums``: record CRC32C checksums of the file in it (``checksum``);
        None: unless the process's checksum mode is ``"off"``."""
        self._sink = sink
        self.version = normalize_version(version)
        self._pos = 0
        if checksums is None:
            checksums = lchecksum.mode() != "off"
        #: hashes the data region as it is written (None: no checksums)
        self._hasher: lchecksum.BlockHasher | None = lchecksum.BlockHasher() if checksums else None
        self._columns: list[file2_pb2.ColumnMetadata] = []
        self._column_encoding = column_encoding_bytes()
        #: planning buffers held back for the tail: (page, buffer index, bytes)
        self._deferred: list[tuple[file2_pb2.ColumnMetadata.Page, int, object]] = []
        self._deferred_bytes = 0

    @property
    def position(self) -> int:
        return self._pos

    def _write(self, data: object) -> None:
        mv = memoryview(data) if not isinstance(data, pa.Buffer) else memoryview(data)  # type: ignore[arg-type]
        if mv.ndim != 1 or mv.itemsize != 1:
            mv = mv.cast("B")
        self._sink.write(mv)
        self._pos += mv.nbytes
        if self._hasher is not None:
            self._hasher.update(mv)

    def _align(self) -> None:
        pad = (-self._pos) % ALIGNMENT
        if pad:
            self._write(b"\0" * pad)

    def add_columns(self, n: int) -> int:
        """Reserve ``n`` columns; returns the index of the first."""
        first = len(self._columns)
        for _ in range(n):
            cm = file2_pb2.ColumnMetadata()
            cm.encoding.direct.encoding = self._column_encoding
            self._columns.append(cm)
        return first

    def set_column_encoding(self, column: int, encoding: bytes) -> None:
        """Replace column ``column``'s ColumnMetadata.encoding (a serialised Any)."""
        self._columns[column].encoding.direct.encoding = encoding

    def write_raw(self, data: object) -> int:
        """Write ``data`` where the next page buffer would go (64-byte aligned),
        referenced by no page: the bytes of a blob column, which its pages
        locate by file position.  Returns that position."""
        self._align()
        at = self._pos
        if _nbytes(data):
            self._write(data)
        return at

    def write_page(self, column: int, page: EncodedPage) -> None:
        cm = self._columns[column]
        p = cm.pages.add()
        for j, buf in enumerate(page.buffers):
            n = _nbytes(buf)
            if j in page.planning and 0 < n <= TAIL_BUFFER_MAX and self._deferred_bytes + n <= TAIL_BUFFERS_BUDGET:
                p.buffer_offsets.append(0)  # placed by finish()
                p.buffer_sizes.append(n)
                self._deferred.append((p, j, _copy_bytes(buf)))  # a copy: the codec may reuse its memory
                self._deferred_bytes += n + ALIGNMENT
                continue
            self._align()
            p.buffer_offsets.append(self._pos)
            p.buffer_sizes.append(n)
            if n:
                self._write(buf)
        p.length = page.length
        p.encoding.direct.encoding = page.encoding

    def finish(self, descriptor: file_pb2.FileDescriptor, extra_buffers: Sequence[bytes] = ()) -> int:
        """Write the held-back planning buffers, global buffer 0, column
        metadata, tables and footer; returns the file size.  ``extra_buffers``
        become global buffers 1, 2, ... (after the column metadata, as pylance
        places a zone map's NULL rows); the checksum table follows them."""
        for p, j, buf in self._deferred:
            self._align()
            p.buffer_offsets[j] = self._pos
            self._write(buf)
        self._deferred.clear()
        self._align()
        hasher, self._hasher = self._hasher, None  # the data region ends here
        gb_pos = self._pos
        gb = descriptor.SerializeToString()
        buffers = [(gb_pos, len(gb))]
        cm_start = gb_pos + len(gb)
        if hasher is not None:
            crcs = hasher.finish()
            sums_pos = cm_start + (-cm_start) % ALIGNMENT
            buffers.append((sums_pos, lchecksum.table_size(len(crcs))))
            cm_start = sums_pos + buffers[1][1]
        cmo, meta, pos = [], [], cm_start
        for cm in self._columns:
            data = cm.SerializeToString()
            cmo.append((pos, len(data)))
            meta.append(data)
            pos += len(data)
        extras = []
        for data in extra_buffers:
            pad = (-pos) % ALIGNMENT  # pylance 14 refuses a global buffer off a 64-byte boundary
            meta.append(b"\0" * pad + bytes(data))
            extras.append((pos + pad, len(data)))
            pos += pad + len(data)
        buffers[1:1] = extras  # buffers 1, 2, ...; the checksum table last
        cmo_pos = pos
        meta.append(b"".join(struct.pack("<QQ", p, n) for p, n in cmo))
        gbo_pos = cmo_pos + 16 * len(cmo)
        meta.append(b"".join(struct.pack("<QQ", p, n) for p, n in buffers))
        major, minor = FOOTER_VERSIONS[self.version]
        meta.append(Footer(cm_start, cmo_pos, gbo_pos, len(buffers), len(self._columns), major, minor).pack())
        tail = b"".join(meta)
        self._write(gb)
        if hasher is not None:
            self._align()  # pylance 14 refuses a global buffer that does not start on a 64-byte boundary
            self._write(lchecksum.build_table(crcs, gb_pos, gb, tail))
        self._write(tail)
        return self._pos


class _TailServedIO:
    """A range reader that serves ranges inside the file's tail, read already,
    from memory and sends the others to the reader it wraps."""

    def __init__(self, inner, tail: pa.Buffer, tail_start: int) -> None:
        self._inner, self._tail, self._lo = inner, tail, tail_start
        self._hi = tail_start + tail.size

    def __getattr__(self, name: str) -> object:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list:
        lo, hi = self._lo, self._hi
        inside = [lo <= off and 0 <= n and off + n <= hi for off, n in ranges]
        if not any(inside):
            return self._inner.read_ranges(ranges)
        todo = [r for r, ok in zip(ranges, inside) if not ok]
        got = iter(self._inner.read_ranges(todo) if todo else ())
        return [self._tail.slice(int(off) - lo, int(n)) if ok else next(got) for (off, n), ok in zip(ranges, inside)]


_UNREAD = object()


class ParsedTail:
    """What a data file's tail says, parsed once: the bytes read, footer,
    tables, FileDescriptor, column metadata parsed so far, and (filled by the
    readers) the field list, Arrow schema, decoded page lists by column and
    the object's ETag on a remote store.  Shared by every reader of the same
    unchanged file in this process (``format.file``'s cache); ``lock`` is
    held while a page's planning metadata is loaded."""

    def __init__(self, reader: ContainerReader) -> None:
        self.file_size = reader.file_size
        self.tail, self.tail_start = reader._tail, reader._tail_start
        self.footer, self.version = reader.footer, reader.version
        self.global_buffers, self.descriptor = reader.global_buffers, reader.descriptor
        self.column_offsets = reader.column_offsets
        self.columns = reader._columns
        self.pages: dict[int, tuple] = {}
        #: the leaves of each decoded field, by (first column, field object)
        self.leaves: dict[tuple[int, int], tuple] = {}
        self.fields: list | None = None
        self.schema: pa.Schema | None = None
        self.etag: str | None = None
        self.lock = threading.Lock()
        #: the file's checksum table (None: it has none; _UNREAD: not looked for yet)
        self.sums: object = _UNREAD


class ContainerReader:
    """Parses a data file's tail: footer, tables, FileDescriptor, column metadata.

    The common case costs one read of the last ``tail_size`` bytes; a second
    read fetches the rest of the metadata when it is larger.  Later reads of
    ranges inside the bytes already read (the planning buffers a writer put
    next to the footer) are served from them: ``io`` is wrapped.
    """

    DEFAULT_TAIL = 64 * 1024

    def __init__(
        self, io, tail_size: int = DEFAULT_TAIL, parsed: ParsedTail | None = None, verify: bool | None = None
    ) -> None:
        """``verify``: check the file's checksums (``checksum``) as it is read;
        None: when the process's checksum mode is ``"verify"``."""
        self.io = io
        self.path = getattr(io, "path", None)
        size = io.size()
        self.file_size = size
        if verify is None:
            verify = lchecksum.mode() == "verify"
        if parsed is not None and parsed.file_size == size:
            self._adopt(io, parsed)
            if verify:
                self._verify_checksums()
            return
        if size < FOOTER_SIZE:
            raise TruncatedFileError(self.path, f"file is {size} bytes, shorter than the 40-byte footer")
        tail_start = max(0, size - tail_size)
        tail = io.read_ranges([(tail_start, size - tail_start)])[0]
        self.footer = Footer.unpack(tail.to_pybytes()[-FOOTER_SIZE:], size, self.path)
        f = self.footer
        self.version = version_from_footer(f.major, f.minor, self.path)
        # global buffer offsets first: buffer 0 may start before the column metadata
        gbo = self._slice(tail, tail_start, f.gbo_table_pos, 16 * f.num_global_buffers)
        # tuples, not lists: kept per file in the parsed-tail cache, and tuples of
        # numbers are no work for the garbage collector
        self.global_buffers = tuple(struct.unpack_from("<QQ", gbo, 16 * i) for i in range(f.num_global_buffers))
        if not self.global_buffers:
            raise CorruptFileError(self.path, "file has no global buffers, so no FileDescriptor (schema) to read")
        for pos, length in self.global_buffers:
            if pos + length > f.cmo_table_pos:
                raise CorruptFileError(
                    self.path, f"global buffer [{pos}, {pos + length}) runs into the metadata tables"
                )
        meta_start = min([f.column_meta_start] + [p for p, _ in self.global_buffers[:1]])
        if meta_start < tail_start:
            extra = io.read_ranges([(meta_start, tail_start - meta_start)])[0]
            tail = pa.py_buffer(extra.to_pybytes() + tail.to_pybytes())
            tail_start = meta_start
        self._tail, self._tail_start = tail, tail_start
        self.io = _TailServedIO(io, tail, tail_start)
        gb0_pos, gb0_len = self.global_buffers[0]
        self.descriptor = parse_proto(
            file_pb2.FileDescriptor, self._slice(tail, tail_start, gb0_pos, gb0_len), self.path, "FileDescriptor"
        )
        cmo = self._slice(tail, tail_start, f.cmo_table_pos, 16 * f.num_columns)
        self.column_offsets = tuple(struct.unpack_from("<QQ", cmo, 16 * i) for i in range(f.num_columns))
        for i, (pos, length) in enumerate(self.column_offsets):
            if pos < f.column_meta_start or pos + length > f.cmo_table_pos:
                raise CorruptFileError(
                    self.path, f"column {i} metadata [{pos}, {pos + length}) lies outside the column metadata region"
                )
        self._columns: dict[int, file2_pb2.ColumnMetadata] = {}
        self.parsed = ParsedTail(self)
        self.meta_lock = self.parsed.lock
        if verify:
            self._verify_checksums()

    def _verify_checksums(self) -> None:
        """Check the metadata against the file's checksum table, if it has one,
        and verify the data region's blocks as they are read."""
        parsed = self.parsed
        sums = parsed.sums
        if sums is _UNREAD:
            parsed.sums = sums = lchecksum.find_table(self, self._tail, self._tail_start)
        if isinstance(sums, lchecksum.ChecksumTable):
            lchecksum.verify_metadata(self, sums, self._tail, self._tail_start)
            self.io = lchecksum.VerifiedIO(self.io, sums, self.path)

    def verify_file(self) -> int | None:
        """Check every byte the file's checksums cover, whatever this process
        verified before: the number of bytes checked, or None when the file has
        no checksum table.  ChecksumMismatchError names the first damaged part."""
        table = lchecksum.find_table(self, self._tail, self._tail_start)
        if table is None:
            return None
        lchecksum.verify_metadata(self, table, self._tail, self._tail_start)
        return lchecksum.VerifiedIO(self.io, table, self.path).verify_all() + self.file_size - table.data_end

    def checksum_table(self) -> lchecksum.ChecksumTable | None:
        """The file's checksum table (None: the file has none)."""
        if self.parsed.sums is _UNREAD:
            self.parsed.sums = lchecksum.find_table(self, self._tail, self._tail_start)
        sums = self.parsed.sums
        return sums if isinstance(sums, lchecksum.ChecksumTable) else None

    def _adopt(self, io, parsed: ParsedTail) -> None:
        """Take what an earlier reader parsed from the same file's tail."""
        self.parsed, self.meta_lock = parsed, parsed.lock
        self._tail, self._tail_start = parsed.tail, parsed.tail_start
        self.io = _TailServedIO(io, parsed.tail, parsed.tail_start)
        self.footer, self.version = parsed.footer, parsed.version
        self.global_buffers, self.descriptor = parsed.global_buffers, parsed.descriptor
        self.column_offsets = parsed.column_offsets
        self._columns = parsed.columns

    def _slice(self, tail: pa.Buffer, tail_start: int, pos: int, length: int) -> bytes:
        start = pos - tail_start
        if start < 0 or pos + length > tail_start + tail.size:
            raise CorruptFileError(self.path, f"metadata range [{pos}, {pos + length}) is out of range")
        return tail.slice(start, length).to_pybytes()

    @property
    def num_columns(self) -> int:
        return self.footer.num_columns

    @property
    def num_rows(self) -> int:
        return self.descriptor.length

    def column(self, index: int) -> file2_pb2.ColumnMetadata:
        """The ColumnMetadata of column ``index`` (parsed once, then cached)."""
        if not 0 <= index < self.num_columns:
            from ..errors import ColumnNotFoundError

            raise ColumnNotFoundError(f"{self.path}: column index {index} out of range (file has {self.num_columns})")
        cm = self._columns.get(index)
        if cm is None:
            pos, length = self.column_offsets[index]
            cm = parse_proto(
                file2_pb2.ColumnMetadata,
                self._slice(self._tail, self._tail_start, pos, length),
                self.path,
                f"column {index} metadata",
            )
            if not cm.HasField("encoding"):
                raise CorruptFileError(self.path, f"column {index} is missing its encoding")
            for p, page in enumerate(cm.pages):
                if len(page.buffer_offsets) != len(page.buffer_sizes):
                    raise CorruptFileError(
                        self.path, f"column {index} page {p}: buffer offsets and sizes differ in count"
                    )
                for off, n in zip(page.buffer_offsets, page.buffer_sizes):
                    if off + n > self.footer.column_meta_start:
                        raise CorruptFileError(
                            self.path, f"column {index} page {p}: buffer [{off}, {off + n}) runs into the metadata"
                        )
            self._columns[index] = cm
        return cm

    def page_buffers(self, pages: Sequence[file2_pb2.ColumnMetadata.Page]) -> list[list[pa.Buffer]]:
        """Read the buffers of several pages in one request."""
        ranges = [(o, n) for p in pages for o, n in zip(p.buffer_offsets, p.buffer_sizes)]
        flat = self.io.read_ranges(ranges) if ranges else []
        out, i = [], 0
        for p in pages:
            k = len(p.buffer_offsets)
            out.append(flat[i : i + k])
            i += k
        return out
