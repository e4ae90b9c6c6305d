"""Reading and writing whole Lance data files.

:class:`FileWriter` streams record batches into a file, cutting a page per
column whenever about ``page_size`` bytes are buffered, so memory is bounded by
the page size and not by the file.  :class:`FileReader` opens a file from its
tail and reads columns, row ranges or arbitrary rows, fetching only the pages
that hold them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from io import BufferedWriter
from types import ModuleType

import numpy as np
import pyarrow as pa

from ..errors import ColumnNotFoundError, RowOutOfRangeError, SchemaMismatchError
from ..protos import file_pb2
from . import blob, blob_write, utf8
from . import schema as lschema
from .container import ContainerReader, ContainerWriter, ParsedTail, column_encoding_bytes, normalize_version
from .dictionary import DictionaryBudget
from .io import LocalFileReader, RangeReader, carried, open_reader

DEFAULT_PAGE_SIZE = 8 * 1024 * 1024


def _codec(version: str) -> ModuleType:
    if version == "2.0":
        from . import v20

        return v20
    from . import v21

    return v21


def _as_batches(data) -> tuple[pa.Schema, Iterable[pa.RecordBatch]]:
    if isinstance(data, pa.Table):
        return data.schema, data.to_batches()
    if isinstance(data, pa.RecordBatch):
        return data.schema, [data]
    if isinstance(data, pa.RecordBatchReader):
        return data.schema, data
    if hasattr(data, "__arrow_c_stream__"):
        reader = pa.RecordBatchReader.from_stream(data)
        return reader.schema, reader
    raise TypeError(f"cannot write {type(data).__name__}: pass a pyarrow Table, RecordBatch or RecordBatchReader")


def _open_for_writing(path: str | os.PathLike[str]) -> BufferedWriter:
    """``open(path, "wb")``, with every refusal of the path a FileAccessError."""
    import errno

    from ..errors import FileAccessError, MissingFileError

    try:
        return open(path, "wb")
    except FileNotFoundError as exc:  # the folder does not exist
        raise MissingFileError(exc.errno, f"cannot create {os.fspath(path)!r}: {exc.strerror}") from exc
    except OSError as exc:
        raise FileAccessError(exc.errno, f"cannot create {os.fspath(path)!r}: {exc.strerror or exc}") from exc
    except ValueError as exc:  # an embedded NUL byte
        raise FileAccessError(errno.EINVAL, f"cannot create {os.fspath(path)!r}: {exc}") from exc


class FileWriter:
    """Streams Arrow record batches into one Lance data file."""

    def __init__(
        self,
        sink: str | os.PathLike[str] | object,
        schema: pa.Schema,
        file_version: str = "2.2",
        page_size: int = DEFAULT_PAGE_SIZE,
        fields: list[lschema.LanceField] | None = None,
        checksums: bool | None = None,
        extra_global_buffers: Sequence[bytes] = (),
    ) -> None:
        """``fields`` optionally gives the Lance fields (with their table-wide
        ids) matching ``schema``; by default ids are assigned from 0.
        ``checksums``: record CRC32C checksums in the file (``checksum``);
        None: unless the process's checksum mode is ``"off"``.
        ``extra_global_buffers``: bytes stored as global buffers 1, 2, ...
        (a zone map's NULL rows)."""
        self._extra_buffers = tuple(extra_global_buffers)
        self.version = normalize_version(file_version)
        self.schema = schema
        self.fields = fields if fields is not None else lschema.fields_from_arrow(schema)
        #: the file opened here when ``sink`` is a path (closed here too)
        self._file = _open_for_writing(sink) if isinstance(sink, (str, os.PathLike)) else None
        self._sink: object = sink if self._file is None else self._file
        self._container = ContainerWriter(self._sink, self.version, checksums)
        #: the distinct values the file's dictionary columns hold so far
        self._dictionaries = DictionaryBudget(self.fields)
        codec = _codec(self.version)
        self._encoders = []
        self._first_columns = []
        #: per field: "v1" / "v2" for a blob column (its bytes written out of line, its pages descriptions)
        self._blobs = [blob_write.writer_kind(f, self.version) for f in self.fields]
        #: the fields as the file's own schema holds them (a blob v2 column as its descriptors)
        self._file_fields = [blob_write.v2_file_field(f) if b == "v2" else f for f, b in zip(self.fields, self._blobs)]
        for f, kind in zip(self.fields, self._blobs):
            self._first_columns.append(self._container.add_columns(codec.num_columns(f)))
            if kind == "v2":
                self._encoders.append(blob_write.V2Encoder(f, self._container.write_raw))
                continue
            enc_field = blob_write.description_field(f) if kind == "v1" else f
            self._encoders.append(codec.FieldEncoder(enc_field, page_size=page_size, version=self.version))
            if kind == "v1" and self.version == "2.0":
                self._container.set_column_encoding(self._first_columns[-1], column_encoding_bytes(blob=True))
        self.num_rows = 0
        self.size: int | None = None

    def _emit(self, i: int, pages) -> None:
        for page in pages:
            if self._blobs[i] == "v1" and self.version != "2.0":
                page = dataclasses.replace(
                    page, encoding=blob_write.wrap_blob_layout(page.encoding, self.fields[i].nullable)
                )
            self._container.write_page(self._first_columns[i] + page.column, page)

    def write_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        if not batch.schema.equals(self.schema, check_metadata=False):
            raise SchemaMismatchError(
                f"batch schema does not match the file schema:\n{batch.schema}\nexpected:\n{self.schema}"
            )
        if batch.num_rows == 0:
            return
        self._dictionaries.add(batch, self.fields)
        for i, enc in enumerate(self._encoders):
            col = batch.column(i)
            chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
            for chunk in chunks:
                if self._blobs[i] == "v1":
                    chunk = blob_write.write_descriptions(chunk, self.version, self._container.write_raw)
                self._emit(i, enc.append(chunk))
        self.num_rows += batch.num_rows

    def dictionaries_fit(self, batch: pa.RecordBatch | pa.Table) -> bool:
        """Whether ``batch`` can join this file without its dictionary columns
        holding more distinct values together than their index types address
        (``write_batch`` refuses such a batch: start a new file for it)."""
        return self._dictionaries.fits(batch, self.fields)

    def write(self, data) -> None:
        """Write a Table, RecordBatch or RecordBatchReader."""
        _, batches = _as_batches(data)
        for b in batches:
            self.write_batch(b)

    def close(self) -> int:
        """Flush the last pages and the metadata; returns the file size in bytes."""
        if self.size is not None:
            return self.size
        for i, enc in enumerate(self._encoders):
            self._emit(i, enc.finish())
        descriptor = file_pb2.FileDescriptor(length=self.num_rows)
        descriptor.schema.fields.extend(lschema.fields_to_protos(self._file_fields))
        for k, v in (self.schema.metadata or {}).items():
            descriptor.schema.metadata[k.decode()] = v
        self.size = self._container.finish(descriptor, self._extra_buffers)
        if self._file is not None:
            self._file.close()
        else:
            flush = getattr(self._sink, "flush", None)
            if flush:
                flush()
        return self.size

    def __enter__(self) -> FileWriter:
        return self

    def __exit__(self, exc_type, *exc: object) -> None:
        if exc_type is None:
            self.close()
        elif self._file is not None:
            self._file.close()


class FileReader:
    """Reads a Lance data file of any supported version."""

    def __init__(self, source: str | os.PathLike[str] | RangeReader | bytes, remember: bool = True) -> None:
        """``remember``: keep what is parsed of the file's tail for later readers
        of the same file in this process (an earlier reader's parse is used either way)."""
        self.io = open_reader(source)
        key = _cache_key(self.io)
        parsed = _parsed_for(key, self.io) if key is not None else None
        self._container = ContainerReader(self.io, parsed=parsed)
        parsed = self._container.parsed
        if key is not None and parsed.etag is None:
            parsed.etag = getattr(self.io, "etag", None)  # known after the first GET of a remote object
        self.version = self._container.version
        if parsed.fields is None or parsed.schema is None:
            parsed.fields, parsed.schema = _schema_of(self._container.descriptor.schema)
        self.fields, self.schema = parsed.fields, parsed.schema
        self._codec = _codec(self.version)
        self._first_columns, first = _first_columns(self.fields, self.version, self._codec)
        if first != self._container.num_columns:
            from ..errors import CorruptFileError

            raise CorruptFileError(
                self.io.path,
                f"schema needs {first} columns but the file has {self._container.num_columns}",
            )
        self._decoders: dict[int, object] = {}
        #: opens a blob v2 sidecar file (``<data file stem>/<name>.blob``) by
        #: name: next to a local file by default; a table's reader sets one
        #: that goes through its store
        self.open_sidecar: blob.SidecarOpener | None = (
            blob.local_sidecar_opener(self.io.path) if isinstance(self.io, LocalFileReader) else None
        )
        #: whose opener ``open_sidecar`` is (a table's store, once one sets it)
        self.sidecar_owner: object = None
        #: what a table's reads worked out about its fields here, kept while the
        #: reader is (``format.table.whole_reads``: pages and their joinability)
        self.planned: dict = {}
        if key is not None and remember:
            _remember(key, parsed)

    @property
    def num_rows(self) -> int:
        return self._container.num_rows

    @property
    def path(self) -> str:
        return self.io.path

    def close(self) -> None:
        self.io.close()
        # each decoder holds this reader (its sidecar opener): drop the cycle so
        # a closed reader is freed at once, not by the garbage collector
        self._decoders.clear()
        self.planned.clear()

    def __enter__(self) -> FileReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def field_for_column(self, column: int) -> int:
        """Index of the top-level field that owns file column ``column``."""
        for i in range(len(self.fields) - 1, -1, -1):
            if self._first_columns[i] <= column:
                if column >= self._container.num_columns:
                    break
                return i
        raise ColumnNotFoundError(f"{self.path}: column {column} out of range ({self._container.num_columns} columns)")

    def _field_index(self, name: str | int) -> int:
        if isinstance(name, int):
            if not 0 <= name < len(self.fields):
                raise ColumnNotFoundError(f"{self.path}: column index {name} out of range ({len(self.fields)} columns)")
            return name
        for i, f in enumerate(self.fields):
            if f.name == name:
                return i
        raise ColumnNotFoundError(f"{self.path}: no column named {name!r} (columns: {[f.name for f in self.fields]})")

    def _decoder(self, i: int):
        dec = self._decoders.get(i)
        if dec is None:
            dec = self._codec.FieldDecoder(
                self.fields[i], self._container, self._first_columns[i], version=self.version
            )
            dec.open_sidecar = self._open_sidecar
            self._decoders[i] = dec
        return dec

    def _open_sidecar(self, name: str) -> object:
        if self.open_sidecar is None:
            from ..errors import UnsupportedEncodingError

            raise UnsupportedEncodingError(
                f"{self.path}: a blob column keeps values in sidecar file {name!r}, and this data file was opened "
                "without its table (open it through its table, or by its local path)"
            )
        return self.open_sidecar(name)

    def _select(self, columns: Sequence[str | int] | None) -> list[int]:
        if columns is None:
            return list(range(len(self.fields)))
        return [self._field_index(c) for c in columns]

    def read_range(
        self, start: int = 0, stop: int | None = None, columns: Sequence[str | int] | None = None
    ) -> pa.Table:
        """Rows ``[start, stop)`` of the chosen columns."""
        n = self.num_rows
        stop = n if stop is None else stop
        if not 0 <= start <= stop <= n:
            raise RowOutOfRangeError(f"{self.path}: row range [{start}, {stop}) outside [0, {n})")
        idx = self._select(columns)
        arrays = []
        prefetched = self._prefetch(idx, start, stop)

        def read(i: int) -> list[pa.Array]:
            # one chunk per page where the decoder can: no copy joins the pages
            chunks = self._decoder(i).read_chunks(start, stop)
            utf8.check_chunks(chunks, self.path, self.fields[i].name, start)
            return chunks

        with prefetched:
            if len(idx) > 1 and stop - start >= _PARALLEL_FIELD_ROWS and self.version != "2.0":
                for i in idx:  # page metadata first, one field at a time (decoders load it lazily)
                    self._decoder(i)
                per_field = list(_field_pool().map(carried(read), idx))  # numpy and Arrow release the GIL
            else:
                per_field = [read(i) for i in idx]
        for i, chunks in zip(idx, per_field):
            arrays.append(chunks[0] if len(chunks) == 1 else pa.chunked_array(chunks, type=self.schema.field(i).type))
        return pa.Table.from_arrays(
            arrays, schema=pa.schema([self.schema.field(i) for i in idx], metadata=self.schema.metadata)
        )

    def _prefetch(self, idx: list[int], start: int, stop: int) -> contextlib.AbstractContextManager[object]:
        """For several fields of a 2.1+ file read from a remote store: the page
        metadata, then the bytes of every page the read decodes, each fetched
        in one request (coalesced and run in parallel by the store), then served
        to the fields' decoders from memory.  Local files read in place."""
        if len(idx) < 2 or stop <= start or self.version == "2.0" or not getattr(self._container.io, "remote", False):
            return contextlib.nullcontext()
        decoders = [self._decoder(i) for i in idx]
        pages = [p for d in decoders for p in d.planned_pages(start, stop)]
        decoders[0]._ensure_meta([p for p, _, _ in pages])  # every field's page metadata: one request
        ranges = list(dict.fromkeys((int(r[0]), int(r[1])) for p, a, b in pages for r in p.data_ranges(a, b)))
        if not ranges:
            return contextlib.nullcontext()
        return _Served(self._container, dict(zip(ranges, self._container.io.read_ranges(ranges))))

    def read(self, columns: Sequence[str | int] | None = None) -> pa.Table:
        return self.read_range(0, None, columns)

    def iter_batches(
        self, batch_size: int = 65536, columns: Sequence[str | int] | None = None
    ) -> Iterator[pa.RecordBatch]:
        for start in range(0, self.num_rows, batch_size):
            yield from self.read_range(start, min(start + batch_size, self.num_rows), columns).to_batches()

    def take(self, indices, columns: Sequence[str | int] | None = None) -> pa.Table:
        """Rows at ``indices`` (any order, repeats allowed), reading only the pages that hold them."""
        sel = self._select(columns)
        out_schema = pa.schema([self.schema.field(i) for i in sel], metadata=self.schema.metadata)
        return pa.Table.from_arrays(self._take(indices, sel), schema=out_schema)

    def take_blobs(self, column: str | int, indices) -> list[blob.BlobFile | None]:
        """Blob column ``column``'s values at rows ``indices`` (any order) as
        file-like objects that read only the bytes asked for (None for a null
        value); only the rows' descriptions are decoded here.

        Raises:
            NotABlobColumnError: ``column`` is not a blob column.
            UnsupportedEncodingError: a value is an external blob (outside the table).
        """
        from ..errors import NotABlobColumnError

        i = self._field_index(column)
        f = self.fields[i]
        if f.blob is None:
            raise NotABlobColumnError(f"{self.path}: column {f.name!r} is not a blob column")
        idx = np.asarray(indices, dtype=np.int64).ravel()
        if idx.size == 0:
            return []
        if int(idx.min()) < 0 or int(idx.max()) >= self.num_rows:
            raise RowOutOfRangeError(f"{self.path}: row index out of range [0, {self.num_rows})")
        uniq, where = np.unique(idx, return_inverse=True)
        desc = self._decoder(i).take(uniq, blob_descriptions=True)
        if f.blob == "v1":
            refs = blob.refs_v1(desc, self.version, self.path, f.name)
        else:
            refs = blob.refs_v2(desc, self.path, f.name, uniq)
        return blob.open_files(refs, where, self._container.io, self._open_sidecar)

    def take_arrays(self, indices, columns: Sequence[str | int] | None = None) -> list[pa.Array]:
        """``take`` as one array per chosen column (no table built)."""
        return self._take(indices, self._select(columns))

    def _take(self, indices, sel: list[int]) -> list[pa.Array]:
        idx = np.asarray(indices, dtype=np.int64).ravel()
        n = self.num_rows
        if idx.size == 0:
            return [pa.array([], type=self.schema.field(i).type) for i in sel]
        sorted_unique = idx.size < 2 or bool(np.all(idx[1:] > idx[:-1]))
        lo, hi = (int(idx[0]), int(idx[-1])) if sorted_unique else (int(idx.min()), int(idx.max()))
        if lo < 0 or hi >= n:
            raise RowOutOfRangeError(f"{self.path}: row index out of range [0, {n})")
        uniq = idx if sorted_unique else np.unique(idx)
        where = None if sorted_unique else pa.array(np.searchsorted(uniq, idx))
        arrays = []
        for i in sel:
            # every page (or chunk) holding a row is fetched in one request and
            # only what holds the rows is decoded
            picked = self._decoder(i).take(uniq)
            utf8.check_array(picked, self.path, self.fields[i].name, rows=uniq)
            arrays.append(picked if where is None else picked.take(where))
        return arrays


def write_file(
    path: str | os.PathLike[str] | object,
    data,
    file_version: str = "2.2",
    page_size: int = DEFAULT_PAGE_SIZE,
) -> int:
    """Write ``data`` (a pyarrow Table, RecordBatch or RecordBatchReader) as one
    Lance data file; returns its size in bytes."""
    schema, batches = _as_batches(data)
    with FileWriter(path, schema, file_version=file_version, page_size=page_size) as w:
        for b in batches:
            w.write_batch(b)
    assert w.size is not None  # set by close(), which leaving the block without an error ran
    return w.size


def read_file(path: str | os.PathLike[str] | RangeReader | bytes, columns: Sequence[str] | None = None) -> pa.Table:
    """Read a whole Lance data file (optionally only some top-level columns)."""
    with FileReader(path) as r:
        return r.read(columns)


#: files whose parsed tails this process keeps (least recently used first out;
#: a table of thousands of small fragments keeps every tail between scans) ...
PARSED_CACHE_FILES = 16384
#: ... and the most tail bytes they may hold together
PARSED_CACHE_BYTES = 64 << 20
_PARSED: OrderedDict[tuple, ParsedTail] = OrderedDict()
_PARSED_LOCK = threading.Lock()
#: the tail bytes ``_PARSED`` holds (kept as entries come and go: O(1) per insert)
_PARSED_HELD = [0]


#: parsed schemas by their serialised bytes: the files of a table share a
#: handful, each parsed once per process (parsed fields are only read, never changed)
_SCHEMAS: OrderedDict[bytes, tuple[list, pa.Schema]] = OrderedDict()
_SCHEMAS_MAX = 256


def _schema_of(schema) -> tuple[list, pa.Schema]:
    """A file's ``(fields, arrow schema)`` from its schema message."""
    key = schema.SerializeToString(deterministic=True)
    with _PARSED_LOCK:
        hit = _SCHEMAS.get(key)
    if hit is None:
        fields = lschema.fields_from_protos(schema.fields)
        hit = (fields, lschema.to_arrow_schema(fields, dict(schema.metadata)))
        with _PARSED_LOCK:
            _SCHEMAS[key] = hit
            while len(_SCHEMAS) > _SCHEMAS_MAX:
                _SCHEMAS.popitem(last=False)
    return hit


#: each field's first column and the column count, by (id(fields), version):
#: the fields of files of one schema are one list (``_schema_of``), so files
#: written alike walk their fields once (the list is held in the value)
_FIRST_COLUMNS: dict[tuple[int, str], tuple[list, list[int], int]] = {}


def _first_columns(fields: list, version: str, codec: ModuleType) -> tuple[list[int], int]:
    key = (id(fields), version)
    hit = _FIRST_COLUMNS.get(key)
    if hit is None or hit[0] is not fields:
        firsts, first = [], 0
        for f in fields:
            firsts.append(first)
            first += codec.num_columns(f)
        hit = (fields, firsts, first)
        with _PARSED_LOCK:
            if len(_FIRST_COLUMNS) >= _SCHEMAS_MAX:
                _FIRST_COLUMNS.clear()
            _FIRST_COLUMNS[key] = hit
    return hit[1], hit[2]


def _cache_key(io: object) -> tuple | None:
    """Who the reader's file is, for readers that can say (``cache_key()``:
    local files by path, device, inode, mtime and size; S3 objects by
    endpoint, path and size); None: nothing is shared."""
    get = getattr(io, "cache_key", None)
    return get() if callable(get) else None


def _parsed_for(key: tuple, io: object) -> ParsedTail | None:
    """The parsed tail an earlier reader left for the same file, if it still
    holds: a local file's tail must read the same bytes (one ``pread``); a
    remote reader is pinned to the ETag it was parsed from, so a replaced
    object fails its next read (and is forgotten here) instead of being
    decoded with stale metadata."""
    with _PARSED_LOCK:
        parsed = _PARSED.get(key)
        if parsed is not None:
            _PARSED.move_to_end(key)
    if parsed is None:
        return None
    if getattr(io, "remote", False):
        pin = getattr(io, "expect_etag", None)
        if parsed.etag is None or pin is None:
            return None
        current = getattr(io, "etag", None)
        if current is not None:  # the reader knows the object's ETag already (a HEAD)
            return parsed if current == parsed.etag else None
        pin(parsed.etag, on_changed=lambda: _forget(key, parsed))
        return parsed
    got = io.read_ranges([(parsed.tail_start, parsed.tail.size)])[0]  # type: ignore[attr-defined]
    return parsed if got.equals(parsed.tail) else None


def _remember(key: tuple, parsed: ParsedTail) -> None:
    with _PARSED_LOCK:
        old = _PARSED.get(key)
        if old is not None:
            _PARSED_HELD[0] -= old.tail.size
        _PARSED[key] = parsed
        _PARSED.move_to_end(key)
        _PARSED_HELD[0] += parsed.tail.size
        while len(_PARSED) > PARSED_CACHE_FILES or (_PARSED_HELD[0] > PARSED_CACHE_BYTES and len(_PARSED) > 1):
            _k, dropped = _PARSED.popitem(last=False)
            _PARSED_HELD[0] -= dropped.tail.size


def _forget(key: tuple, parsed: ParsedTail) -> None:
    """Drop ``parsed`` (its file changed), unless a newer parse replaced it."""
    with _PARSED_LOCK:
        if _PARSED.get(key) is parsed:
            del _PARSED[key]
            _PARSED_HELD[0] -= parsed.tail.size


def clear_parsed_cache() -> None:
    """Forget every parsed data file tail (benchmarks of cold reads, tests)."""
    with _PARSED_LOCK:
        _PARSED.clear()
        _PARSED_HELD[0] = 0


def _after_fork_in_child() -> None:
    """A forked child starts with no parsed tails: their locks may be held by
    threads of the parent that the child does not have."""
    global _PARSED_LOCK
    _PARSED_LOCK = threading.Lock()
    _PARSED.clear()
    _PARSED_HELD[0] = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


#: reads of at least this many rows decode their fields in parallel
_PARALLEL_FIELD_ROWS = 1 << 15
_FIELD_POOL: ThreadPoolExecutor | None = None
_FIELD_POOL_LOCK = threading.Lock()


def _field_pool() -> ThreadPoolExecutor:
    """Threads decoding the fields of one read (apart from the decoders' own
    page pool: a field task waits on page tasks, which must not queue behind it)."""
    global _FIELD_POOL
    if _FIELD_POOL is None:
        with _FIELD_POOL_LOCK:
            if _FIELD_POOL is None:
                workers = max(1, min(8, os.cpu_count() or 1))
                _FIELD_POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tessera-fields")
    return _FIELD_POOL


class _Served:
    """While entered, the container's reads of byte ranges fetched beforehand
    are served from memory (others go to the store)."""

    def __init__(self, container: object, fetched: dict[tuple[int, int], object]) -> None:
        self._container, self._fetched = container, fetched

    def __enter__(self) -> _Served:
        io = self._container.io  # type: ignore[attr-defined]
        self._io = io
        self._container.io = _ServedIO(io, self._fetched)  # type: ignore[attr-defined]
        return self

    def __exit__(self, *exc: object) -> None:
        self._container.io = self._io  # type: ignore[attr-defined]


class _ServedIO:
    def __init__(self, inner: object, fetched: dict[tuple[int, int], object]) -> None:
        self._inner, self._fetched = inner, fetched

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[object]:
        keys = [(int(r[0]), int(r[1])) for r in ranges]
        todo = [k for k in keys if k not in self._fetched]
        got = dict(zip(todo, self._inner.read_ranges(todo))) if todo else {}  # type: ignore[attr-defined]
        return [self._fetched[k] if k in self._fetched else got[k] for k in keys]
