"""Fragments: writing data into new fragments and reading a fragment's rows.

A fragment is one or more data files that hold different columns of the same
rows, plus an optional deletion file.  Which file holds a field is decided by
``DataFile.fields`` / ``column_indices``; a field in no file reads as nulls.
Data files live under the table's ``data/`` folder (:mod:`.paths`); the store
is anything with the methods of :class:`.store.TableStore`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..errors import CorruptFileError, InvalidPathError, UnsupportedEncodingError
from ..file import dictionary as ldictionary
from ..file import schema as lschema
from ..file.container import DATAFILE_VERSIONS
from ..file.datafile import FileReader, FileWriter
from ..file.io import RangeReader
from ..protos import table_pb2
from . import deletion as ldeletion
from . import evolved, paths
from . import manifest as lmanifest
from .file_cache import CountingReader, FileReaderCache, open_data_file
from .rowids import CREATED_AT_FIELDS, LAST_UPDATED_AT_FIELDS, decode_row_ids, read_versions
from .store import OutputStream, TableStore
from .write_types import check_write_schema, conform_batch

__all__ = ["check_write_schema", "conform_batch"]  # the write rule, used by every write path

DEFAULT_MAX_ROWS_PER_FILE = 1024 * 1024


def data_file_entry(fields: list[lschema.LanceField], version: str) -> tuple[list[int], list[int]]:
    """(DataFile.fields, DataFile.column_indices) for a file holding ``fields``."""
    if version == "2.0":
        ids = [n.id for f in fields for n in f.column_nodes()]
    else:
        ids = [leaf.id for f in fields for leaf in f.leaves()]
    return ids, list(range(len(ids)))


class FragmentWriter:
    """Writes Arrow batches into new fragments: one data file each, cut at
    ``max_rows_per_file`` rows (fragment ids unassigned).

    Batches must already have the table's schema (:func:`.write_types.conform_batch`).
    Small batches are gathered until ``flush_rows`` rows or ``flush_bytes``
    bytes are waiting (0, the default: each batch is written as it comes).
    A file whose dictionaries would grow too large for their index type with
    the next batch is finished first (the batch starts a file of its own).
    ``on_open()`` is called before each data file is opened, ``on_finish(fragment)``
    once it is finished (a write's ``progress=``; what they raise fails the write).
    :meth:`finish` returns the fragments; a write that fails calls
    :meth:`discard`, which leaves no data file of this writer behind.
    Used by every write path: ``Table``'s writes and the Spark tasks.
    """

    def __init__(
        self,
        store: TableStore,
        schema: pa.Schema,
        fields: list[lschema.LanceField],
        file_version: str,
        max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
        flush_rows: int = 0,
        flush_bytes: int = 0,
        *,
        on_open: Callable[[], None] | None = None,
        on_finish: Callable[[table_pb2.DataFragment], None] | None = None,
    ) -> None:
        self.store, self.schema, self.fields = store, schema, fields
        self.on_open, self.on_finish = on_open, on_finish
        self.file_version, self.max_rows = file_version, max_rows_per_file
        self.flush_rows, self.flush_bytes = flush_rows, flush_bytes
        self.fragments: list[table_pb2.DataFragment] = []
        #: the finished data files, relative to the table's root
        self.written: list[str] = []
        #: rows and bytes of the finished data files
        self.rows = self.bytes = 0
        self._buf: list[pa.RecordBatch] = []
        self._buf_rows = self._buf_bytes = 0
        self._writer: FileWriter | None = None
        self._out: OutputStream | None = None
        self._name = ""

    def add(self, batch: pa.RecordBatch) -> None:
        """Write ``batch`` (or keep it until enough rows or bytes wait)."""
        if batch.num_rows == 0:
            return
        self._buf.append(batch)
        self._buf_rows += batch.num_rows
        self._buf_bytes += batch.nbytes
        if self._buf_rows >= self.flush_rows or self._buf_bytes >= self.flush_bytes:
            self._flush()

    def _flush(self) -> None:
        if not self._buf:
            return
        # the file writer buffers each column into pages itself: hand it the
        # batches as they came (no copy)
        batch = self._buf[0] if len(self._buf) == 1 else pa.Table.from_batches(self._buf)
        self._buf, self._buf_rows, self._buf_bytes = [], 0, 0
        if self._writer is not None and self._writer.num_rows and not self._writer.dictionaries_fit(batch):
            self._finish_file()  # dictionaries too many for the index type together: a file of their own
        pos = 0
        while pos < batch.num_rows:
            if self._writer is None:
                if self.on_open is not None:
                    self.on_open()
                self._name = paths.new_data_file_name()
                self._out = self.store.open_output(paths.data_path(self._name))
                self._writer = FileWriter(self._out, self.schema, file_version=self.file_version, fields=self.fields)
            take = min(batch.num_rows - pos, self.max_rows - self._writer.num_rows)
            self._writer.write_batch(batch.slice(pos, take))
            pos += take
            if self._writer.num_rows >= self.max_rows:
                self._finish_file()

    def _finish_file(self) -> None:
        w, out = self._writer, self._out
        assert w is not None and out is not None  # called only while a file is open
        size = w.close()
        out.close()
        self._writer = self._out = None
        self.written.append(paths.data_path(self._name))
        frag = table_pb2.DataFragment(physical_rows=w.num_rows)
        ids, cols = data_file_entry(self.fields, self.file_version)
        major, minor = DATAFILE_VERSIONS[self.file_version]
        frag.files.add(
            path=self._name,
            fields=ids,
            column_indices=cols,
            file_major_version=major,
            file_minor_version=minor,
            file_size_bytes=size,
        )
        self.fragments.append(frag)
        self.rows += w.num_rows
        self.bytes += size
        if self.on_finish is not None:
            self.on_finish(frag)

    def finish(self) -> list[table_pb2.DataFragment]:
        """Write what waits, finish the open file; the fragments written."""
        self._flush()
        if self._writer is not None:
            self._finish_file()
        return self.fragments

    def discard(self) -> None:
        """Abandon the file being written (a partial data file never appears)
        and delete the finished ones (best effort: what is left is an orphan
        for ``cleanup_orphans``)."""
        if self._out is not None:
            try:
                self._out.abort()
            except Exception:  # noqa: BLE001 - the write's own error is the one to raise
                pass
        self._writer = self._out = None
        self._buf, self._buf_rows, self._buf_bytes = [], 0, 0
        delete = getattr(self.store, "delete", None)
        if delete is not None:
            for path in self.written:
                try:
                    delete(path)
                except Exception:  # noqa: BLE001 - the write's own error is the one to raise
                    pass
        self.written.clear()


def write_fragments(
    store: TableStore,
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    fields: list[lschema.LanceField],
    file_version: str,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    data_schema: pa.Schema | None = None,
    *,
    on_open: Callable[[], None] | None = None,
    on_finish: Callable[[table_pb2.DataFragment], None] | None = None,
) -> list[table_pb2.DataFragment]:
    """Write ``batches`` into new fragments (ids unassigned), one file each,
    through a :class:`FragmentWriter` (``on_open``, ``on_finish``: its hooks).

    Every batch is conformed to ``schema`` by pylance's write rule
    (:func:`.write_types.conform_batch`); ``data_schema``, the schema of the
    batches when known, is checked before anything is written (so is an empty
    write).  A batch that is refused (a type, a null where the table has none)
    raises :class:`SchemaMismatchError` and leaves no data file behind."""
    if data_schema is not None:
        check_write_schema(data_schema, schema)
    writer = FragmentWriter(
        store, schema, fields, file_version, max_rows_per_file, on_open=on_open, on_finish=on_finish
    )
    try:
        for batch in batches:
            writer.add(conform_batch(batch, schema))
        return writer.finish()
    except BaseException:
        writer.discard()
        raise


def one_array(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One Arrow array: a ChunkedArray's only chunk as it is (``combine_chunks``
    copies even a single chunk), several chunks concatenated."""
    if not isinstance(arr, pa.ChunkedArray):
        return arr
    if arr.num_chunks == 1:
        return arr.chunk(0)
    if pa.types.is_dictionary(arr.type):
        # pages sharing a dictionary join their indices; a union of dictionaries
        # too large for the index type is a typed error (DictionaryOverflowError)
        return ldictionary.concat(arr.chunks)
    return arr.combine_chunks()


def _subtree_ids(f: lschema.LanceField) -> set[int] | tuple[int]:
    if not f.children:  # a leaf, the common case: no walk
        return (f.id,)
    return {n.id for n in f.walk()}


def _same_layout(a: pa.DataType, b: pa.DataType) -> bool:
    """Whether an array of type ``a`` can stand for type ``b``: the same type
    up to the names and nullability of nested fields (a renamed struct child,
    a list item's nullability), never another kind of value."""
    if a.equals(b):
        return True
    if pa.types.is_dictionary(a) and pa.types.is_dictionary(b):  # the ordered flag aside
        return a.index_type.equals(b.index_type) and a.value_type.equals(b.value_type)
    if a.id != b.id or a.num_fields != b.num_fields or a.num_fields == 0:
        return False
    if pa.types.is_fixed_size_list(a) and a.list_size != b.list_size:
        return False
    return all(_same_layout(a.field(i).type, b.field(i).type) for i in range(a.num_fields))


def as_field_type(arr: pa.Array, f: lschema.LanceField, path: str) -> pa.Array:
    """``arr``, read from data file ``path`` for field ``f``, as the table's
    type of ``f``; a stored type that is not the table's is a corrupt table
    (the manifest's schema and the data file disagree), never cast into it."""
    t = f.arrow_type
    if arr.type.equals(t):
        return arr
    if not _same_layout(arr.type, t):
        raise CorruptFileError(
            path, f"column {f.name!r} (field id {f.id}) is stored as {arr.type}, the table's schema says {t}"
        )
    try:
        return arr.cast(t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise CorruptFileError(path, f"column {f.name!r} (field id {f.id}) cannot be read as {t}: {exc}") from exc


def data_file_path(store: TableStore, frag: table_pb2.DataFragment, df: table_pb2.DataFile) -> str:
    """``df.path`` checked: a relative path in this table's own data folder."""
    lmanifest.check_relative_path(df.path, f"fragment {frag.id}: DataFile.path", store.uri)
    if df.HasField("base_id"):
        raise UnsupportedEncodingError(
            f"{store.uri}: fragment {frag.id}'s data file {df.path!r} is in base path {df.base_id} "
            "(DataFile.base_id); Tessera reads only tables whose files are under the table's own root"
        )
    return df.path


def sidecar_opener(store: TableStore, name: str):
    """Opens the blob v2 sidecar files of data file ``name`` (relative to
    ``data/``), through the table's store: ``data/<stem>/<sidecar>``."""
    from ..file.blob import data_file_stem

    stem = data_file_stem(name)

    def open_(sidecar: str) -> RangeReader:
        return open_data_file(store, f"{stem}/{sidecar}")

    return open_


def take_blobs(
    store: TableStore,
    fragments: Iterable[table_pb2.DataFragment],
    field: lschema.LanceField,
    addresses: np.ndarray,
    file_cache: FileReaderCache | None = None,
) -> list:
    """Blob column ``field``'s values at row ``addresses`` (fragment id << 32 |
    offset, any order) as file-like objects (None for a null value).

    Raises:
        RowOutOfRangeError: an address names no fragment or row of ``fragments``.
    """
    from ..errors import RowOutOfRangeError

    addr = np.asarray(addresses, dtype=np.uint64).ravel()
    by_id = {f.id: f for f in fragments}
    out: list = [None] * addr.size
    frag_ids = (addr >> np.uint64(32)).astype(np.int64)
    offsets = (addr & np.uint64(0xFFFFFFFF)).astype(np.int64)
    for fid in np.unique(frag_ids).tolist():
        frag = by_id.get(fid)
        sel = np.flatnonzero(frag_ids == fid)
        if frag is None or int(offsets[sel].max()) >= frag.physical_rows:
            raise RowOutOfRangeError(f"{store.uri}: row address {int(addr[sel[0]])} names no row of this version")
        reader = FragmentReader(store, frag, [field], file_cache=file_cache)
        try:
            for k, b in zip(sel.tolist(), reader.take_blobs(field, offsets[sel])):
                out[k] = b
        finally:
            reader.close()
    return out


@dataclass
class FragmentReader:
    """Reads the rows of one fragment for a set of top-level fields."""

    store: TableStore
    fragment: table_pb2.DataFragment
    fields: list[lschema.LanceField]
    _readers: dict[str, FileReader] = field(default_factory=dict)
    #: when given, ``stats["bytes_read"]`` counts the bytes read from data files
    stats: dict | None = None
    _deleted: np.ndarray | None = None
    _row_ids: np.ndarray | None = None
    #: decoded created-at / last-updated-at versions (see :meth:`row_versions`)
    _versions: dict[str, np.ndarray] = field(default_factory=dict)
    #: when given, data files are opened through it and stay open after ``close``
    file_cache: FileReaderCache | None = None
    #: guards ``stats`` when several readers of one scan count into it from worker threads
    stats_lock: threading.Lock | None = None
    #: keep what is parsed of the data files' tails in the process's cache (False for
    #: files read once: a compaction's sources, about to be replaced, would only hold
    #: memory and slow the garbage collector, which walks every object they keep)
    remember_tails: bool = True
    #: take a file from ``file_cache`` only when read through it before (a scan: a table
    #: scanned once keeps nothing alive), else open it here, closed by :meth:`close`
    cache_on_second_use: bool = False
    #: the paths of the readers opened here (not the cache's): closed by :meth:`close`
    _own: set = field(default_factory=set)

    #: readers of other fields of the same fragment (see :meth:`subset`), by field ids
    _subsets: dict = field(default_factory=dict)
    #: (data file, column) of each field id, None where a file drops it (see :meth:`_locate`)
    _where: dict | None = None

    def subset(self, fields: list[lschema.LanceField]) -> FragmentReader:
        """A reader of ``fields`` of the same fragment sharing this one's open
        data files and byte counters (close this one only; deletions are this
        one's to apply, through :meth:`live_mask`)."""
        key = tuple(f.id for f in fields)
        sub = self._subsets.get(key)
        if sub is None:
            sub = self._subsets[key] = FragmentReader(
                self.store,
                self.fragment,
                fields,
                _readers=self._readers,
                stats=self.stats,
                file_cache=self.file_cache,
                stats_lock=self.stats_lock,
                remember_tails=self.remember_tails,
                cache_on_second_use=self.cache_on_second_use,
                _own=self._own,
            )
        return sub

    @property
    def physical_rows(self) -> int:
        return self.fragment.physical_rows

    def deleted_rows(self) -> np.ndarray:
        """Sorted offsets of the deleted rows (checked against the manifest's
        count and the fragment's rows)."""
        if self._deleted is None:
            if self.fragment.HasField("deletion_file"):
                d = self.fragment.deletion_file
                if d.HasField("base_id"):
                    raise UnsupportedEncodingError(
                        f"{self.store.uri}: fragment {self.fragment.id}'s deletion file is in base path {d.base_id} "
                        "(DeletionFile.base_id); Tessera reads only tables whose files are under the table's own root"
                    )
                path = paths.deletion_file_path(self.fragment.id, d)
                rows = self.fragment.physical_rows
                # a remote object is known by its name (one request saved per
                # fragment and read); a local file's bytes are read again and
                # known by their digest (the read is cheap, the decode is not)
                data = None if getattr(self.store, "remote", False) else self.store.read(path)

                def load() -> np.ndarray:
                    # the row count the deletions apply to is checked first: callers size
                    # arrays by physical_rows (a corrupt count must not allocate 2**40 rows)
                    self.check_physical_rows()
                    raw = self.store.read(path) if data is None else data
                    return ldeletion.decode_for_fragment(raw, d, rows, f"{self.store.uri}/{path}")

                key = (self.store.uri, path, d.num_deleted_rows, d.file_type, rows, ldeletion.digest(data))
                self._deleted = ldeletion.cached(key, load)
            else:
                self._deleted = np.zeros(0, np.uint32)
        return self._deleted

    def check_physical_rows(self) -> None:
        """Open the fragment's first data file, which raises CorruptFileError
        when its row count is not the fragment's ``physical_rows``."""
        if len(self.fragment.files):
            self._reader(self.fragment.files[0])

    def live_mask(self, start: int, stop: int) -> np.ndarray | None:
        """Boolean mask of live rows in [start, stop); None when none are deleted."""
        deleted = self.deleted_rows()
        if not len(deleted):
            return None
        lo, hi = np.searchsorted(deleted, [start, stop])
        if lo == hi:
            return None
        mask = np.ones(stop - start, dtype=bool)
        mask[deleted[lo:hi].astype(np.int64) - start] = False
        return mask

    def _reader(self, df: table_pb2.DataFile) -> FileReader:
        r = self._readers.get(df.path)
        if r is None:
            path = data_file_path(self.store, self.fragment, df)
            try:
                r = None
                if self.file_cache is not None:
                    # counted (when a scan counts) by the scan naming its statistics: see io.counting_into
                    size = df.file_size_bytes
                    cache = self.file_cache
                    r = cache.get_on_second_use(path, size) if self.cache_on_second_use else cache.get(path, size)
                if r is None:
                    io = open_data_file(self.store, path, df.file_size_bytes)
                    if self.stats is not None:
                        io = CountingReader(io, self.stats, self.stats_lock)
                    r = FileReader(io, remember=self.remember_tails)
                    self._own.add(df.path)
            except InvalidPathError as exc:  # e.g. a name too long for the file system
                raise CorruptFileError(
                    self.store.uri, f"fragment {self.fragment.id}: DataFile.path {df.path!r} cannot name a file: {exc}"
                ) from exc
            if r.num_rows != self.fragment.physical_rows:
                raise CorruptFileError(
                    r.path,
                    f"data file has {r.num_rows} rows, its fragment says {self.fragment.physical_rows} (physical_rows)",
                )
            if r.sidecar_owner is not self.store:  # a cached reader: set once per store
                r.open_sidecar = sidecar_opener(self.store, path)
                r.sidecar_owner = self.store
            self._readers[df.path] = r
        return r

    def _file_field(self, r: FileReader, col: int, f: lschema.LanceField) -> int:
        """The index of the file's top-level field holding column ``col``,
        checked to be the table's field ``f`` (same field id)."""
        i = r.field_for_column(col)
        if r.fields[i].id != f.id:
            raise CorruptFileError(
                r.path,
                f"column {col} holds field id {r.fields[i].id} ({r.fields[i].name!r}), "
                f"the manifest maps field {f.id} ({f.name!r}) to it (DataFile.fields/column_indices)",
            )
        return i

    def _locate(self, f: lschema.LanceField) -> tuple[table_pb2.DataFile, int] | None:
        if not f.children:  # a leaf: where every field id is, found in one pass over the files
            where = self._where
            if where is None:
                where = self._where = {}
                for df in self.fragment.files:  # a later file's entry replaces an earlier one's
                    seen: dict[int, tuple[table_pb2.DataFile, int] | None] = {}
                    cols = df.column_indices
                    for pos, fid in enumerate(df.fields):
                        if fid not in seen:  # the first position of an id in a file counts
                            col = cols[pos] if len(cols) > pos else pos
                            seen[fid] = None if col < 0 else (df, col)
                    where.update(seen)
            return where.get(f.id)
        ids = _subtree_ids(f)
        for df in reversed(self.fragment.files):  # later files win (data replacement)
            for pos, fid in enumerate(df.fields):
                if fid in ids:
                    col = df.column_indices[pos] if len(df.column_indices) > pos else pos
                    if col < 0:
                        return None
                    return df, col
        return None

    def _locate_all(self, f: lschema.LanceField) -> list[tuple[table_pb2.DataFile, int]]:
        """Where a nested field's parts are: each data file holding an id of
        its subtree (latest first), with the column of the first such id; a
        struct evolved by pylance may be spread over several files
        (:mod:`.evolved`)."""
        if not f.children:
            loc = self._locate(f)
            return [] if loc is None else [loc]
        ids = _subtree_ids(f)
        out = []
        for df in reversed(self.fragment.files):
            for pos, fid in enumerate(df.fields):
                if fid in ids:
                    col = df.column_indices[pos] if len(df.column_indices) > pos else pos
                    if col >= 0:
                        out.append((df, col))
                    break
        return out

    def _gather(self, n: int, fetch) -> list[pa.Array]:
        """Arrays of ``self.fields`` for ``n`` rows; ``fetch(reader, file fields)``
        reads the chosen top-level fields of one data file, each file asked once."""
        out: list = [None] * len(self.fields)
        parts: dict[int, list[tuple[int, evolved.Part]]] = {}
        by_file: dict[str, tuple[table_pb2.DataFile, list[tuple[int, int, int]]]] = {}
        for k, f in enumerate(self.fields):
            locs = self._locate_all(f)
            if not locs:
                out[k] = pa.nulls(n, f.arrow_type)
            for rank, (df, col) in enumerate(locs):
                by_file.setdefault(df.path, (df, []))[1].append((k, col, rank))
        for df, items in by_file.values():
            r = self._reader(df)
            idx = [self._file_field(r, col, self.fields[k]) for k, col, _ in items]
            for (k, _, rank), i, arr in zip(items, idx, fetch(r, idx)):
                parts.setdefault(k, []).append((rank, (one_array(arr), r.fields[i], r.path)))
        for k, got in parts.items():
            got.sort(key=lambda p: p[0])
            out[k] = evolved.assemble(self.fields[k], [p for _, p in got], as_field_type)
        return out

    def read(self, start: int, stop: int) -> list[pa.Array]:
        """Arrays of ``self.fields`` for physical rows [start, stop) (deleted rows
        included); each data file is asked once for all its fields (a remote
        file then fetches their bytes in one request)."""
        return self._gather(stop - start, lambda r, idx: r.read_range(start, stop, columns=idx).columns)

    def take_blobs(self, field: lschema.LanceField, offsets: np.ndarray) -> list:
        """Blob column ``field``'s values at physical rows ``offsets`` as
        file-like objects (:class:`..blob.BlobFile`; None for a null, and for
        every row when no data file of the fragment holds the field)."""
        loc = self._locate(field)
        if loc is None:
            return [None] * len(offsets)
        df, col = loc
        r = self._reader(df)
        return r.take_blobs(self._file_field(r, col, field), offsets)

    def take(self, offsets: np.ndarray) -> list[pa.Array]:
        """Arrays of ``self.fields`` for physical rows ``offsets`` (any order,
        repeats allowed); each data file is asked once for all its fields."""
        offsets = np.asarray(offsets, dtype=np.int64)
        return self._gather(len(offsets), lambda r, idx: r.take_arrays(offsets, idx))

    def row_ids(self, start: int, stop: int) -> np.ndarray:
        """Stable row ids of physical rows [start, stop), or row addresses without them."""
        if not self.fragment.HasField("inline_row_ids") and not self.fragment.HasField("external_row_ids"):
            return (np.uint64(self.fragment.id) << np.uint64(32)) + np.arange(start, stop, dtype=np.uint64)
        if self._row_ids is None:  # decoded once per reader, sliced per batch
            ids = decode_row_ids(self.store, self.fragment)
            assert ids is not None  # the fragment has inline or external row ids (checked above)
            self._row_ids = ids
        return self._row_ids[start:stop]

    def row_versions(self, created: bool) -> np.ndarray:
        """Every physical row's created-at (``created``) or last-updated-at
        version; 1 where the fragment records none, as pylance reads it."""
        key = "created" if created else "updated"
        got = self._versions.get(key)
        if got is None:
            got = read_versions(self.store, self.fragment, CREATED_AT_FIELDS if created else LAST_UPDATED_AT_FIELDS)
            if got is None:
                got = np.ones(self.fragment.physical_rows, np.uint64)
            got = self._versions[key] = got.astype(np.uint64, copy=False)
        return got

    def close(self) -> None:
        for path in self._own:  # the cache's readers stay open
            r = self._readers.get(path)
            if r is not None:
                r.close()
        self._own.clear()
        self._readers.clear()


def iter_fragment_batches(reader: FragmentReader, batch_rows: int) -> Iterator[tuple[int, int, list[pa.Array]]]:
    for start in range(0, reader.physical_rows, batch_rows):
        stop = min(start + batch_rows, reader.physical_rows)
        yield start, stop, reader.read(start, stop)
