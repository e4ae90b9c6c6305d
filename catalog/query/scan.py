"""Scans: projection, filter, deletion masks, limit/offset, row addresses."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterator, Sequence

import numpy as np
import pyarrow as pa

from tessera.format.errors import CorruptFileError
from tessera.format.file import schema as lschema
from tessera.format.file.io import counting_into as counting
from tessera.format.protos import table_pb2
from tessera.format.table import whole_reads
from tessera.format.table.file_cache import FileReaderCache
from tessera.format.table.fragments import FragmentReader, one_array
from tessera.stores.object_store import ObjectStore

from ..errors import InvalidArgumentError, UnknownColumnError

ROW_ADDRESS = "_rowaddr"
ROW_ID = "_rowid"
#: row lineage, as pylance reads it: the version that created each row and the
#: one that last updated it (1 where a fragment records none: a table without
#: stable row ids, or rows from before they were kept)
CREATED_AT = "_row_created_at_version"
UPDATED_AT = "_row_last_updated_at_version"
SPECIAL = (ROW_ADDRESS, ROW_ID, CREATED_AT, UPDATED_AT)
DEFAULT_BATCH_SIZE = 64 * 1024
#: the fewest rows read from a fragment at a time, whatever the batch size
#: (batches are slices of a read)
READ_UNIT_ROWS = 64 * 1024
#: a read's decoded size at most (estimated), above READ_UNIT_ROWS rows: a
#: fragment that fits is read in one piece (a piece boundary inside a page or
#: mini-block chunk costs a second decode of it, and every read has a fixed
#: cost); larger ones are cut into equal pieces.  Bounds memory too: a remote
#: scan holds at most ``readahead`` x 3 reads
READ_BUDGET_BYTES = 16 << 20
#: the same on a remote store, where a fragment cut into pieces costs requests
#: (each piece plans its own) and bytes (coalescing gaps are fetched twice):
#: twice the local budget reads typical fragments of a million rows in one
#: piece; a remote scan's reads are then at most ``readahead`` x 3 of these
REMOTE_READ_BUDGET_BYTES = 2 * READ_BUDGET_BYTES
#: fragments of at most this many rows are read whole, many at once, when a
#: scan reads all their rows (each column of a group decoded together)
SMALL_FRAGMENT_ROWS = 16 * 1024
#: fragments a scan of a remote store reads at once (each read is itself one
#: coalesced request per file, split into parallel GETs when large)
DEFAULT_READAHEAD = 8


def merge_ranges(ranges: Sequence[tuple[int, int]] | None, n: int) -> list[tuple[int, int]]:
    """Row ranges clipped to ``[0, n)``, sorted, overlapping and touching ones
    merged, empty ones dropped (None: all ``n`` rows)."""
    if ranges is None:
        return [(0, n)]
    out: list[tuple[int, int]] = []
    for a, b in sorted((max(0, int(a)), min(n, int(b))) for a, b in ranges):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def evaluate(expr, batch: pa.RecordBatch) -> pa.Array:
    """Evaluate a pyarrow compute expression over a batch: one Acero project
    node on this thread (a scan's batches are already decoded in parallel;
    handing each to Acero's thread pool cost more than evaluating it)."""
    import pyarrow.acero as acero  # imported on the first filter, not with the package

    plan = acero.Declaration.from_sequence(
        [
            acero.Declaration("table_source", acero.TableSourceNodeOptions(pa.Table.from_batches([batch]))),
            acero.Declaration("project", acero.ProjectNodeOptions([expr], ["v"])),
        ]
    )
    return one_array(plan.to_table(use_threads=False).column("v"))


def mask_of(expr, batch: pa.RecordBatch) -> np.ndarray:
    """Rows where ``expr`` is true (null counts as false)."""
    import pyarrow.compute as pc

    arr = evaluate(expr, batch)
    if not pa.types.is_boolean(arr.type):
        raise InvalidArgumentError(f"the filter evaluates to {arr.type}, not a boolean")
    if arr.null_count:
        arr = pc.fill_null(arr, False)
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)


#: late materialization takes the other columns' rows one by one when the
#: filter keeps at most one row in this many (else it reads their span)
TAKE_FRACTION = 16


def _kept(keep: np.ndarray) -> slice | np.ndarray | None:
    """Which rows a mask keeps: None for none, a slice when they are one run
    (a range filter on a sorted column: sliced, not copied), else the mask."""
    first = int(keep.argmax())
    if not keep[first]:
        return None
    last = keep.size - 1 - int(keep[::-1].argmax())
    return slice(first, last + 1) if keep[first : last + 1].all() else keep


def fields_by_name(fields: list[lschema.LanceField], names: Sequence[str]) -> list[lschema.LanceField]:
    by = {f.name: f for f in fields}
    out = []
    for n in names:
        if n not in by:
            raise UnknownColumnError(f"no column named {n!r}; the table has {list(by)}")
        out.append(by[n])
    return out


def check_fragment_id(frag: table_pb2.DataFragment, store: ObjectStore, seen: set[int]) -> None:
    """A fragment whose row addresses are read: its id must fit the address's
    high 32 bits and not be in ``seen`` (the ids met so far, to which it is
    added); a corrupt manifest would otherwise give wrapped or repeated addresses."""
    if frag.id > 0xFFFFFFFF or frag.id in seen:
        raise CorruptFileError(
            store.uri,
            f"fragment id {frag.id} is {'repeated' if frag.id in seen else 'over 2**32'}: "
            "row addresses would be ambiguous",
        )
    seen.add(frag.id)


def _check_row_id_fragments(fragments, store: ObjectStore, row_ids: bool) -> None:
    """Fragments whose row addresses (or row ids) a scan returns: each id fits
    the address's high 32 bits and is unique (:func:`check_fragment_id`), and
    (for ``_rowid``) either all fragments carry a row id sequence or none does;
    a corrupt manifest would otherwise give wrapped, repeated or mixed ids."""
    seen: set[int] = set()
    with_seq = 0
    for frag in fragments:
        check_fragment_id(frag, store, seen)
        with_seq += frag.WhichOneof("row_id_sequence") is not None
    if row_ids and 0 < with_seq < len(seen):
        raise CorruptFileError(
            store.uri,
            f"{with_seq} of {len(seen)} fragments carry a row id sequence: stable row ids need one in every fragment",
        )


class Scan:
    """One pass over a version's fragments."""

    def __init__(
        self,
        store: ObjectStore,
        fragments: Sequence[table_pb2.DataFragment],
        fields: list[lschema.LanceField],
        schema: pa.Schema,
        columns: Sequence[str] | None = None,
        filter=None,
        limit: int | None = None,
        offset: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        with_row_address: bool = False,
        with_row_id: bool = False,
        readahead: int | None = None,
        file_cache: FileReaderCache | None = None,
    ) -> None:
        """``file_cache``: the table object's open readers, used when the scan's
        files fit in it (a scan of more files would only cycle through it)."""
        if limit is not None and limit < 0 or offset is not None and offset < 0:
            raise InvalidArgumentError("limit and offset must be non-negative")
        if batch_size <= 0:
            raise InvalidArgumentError("batch_size must be positive")
        if columns is not None and isinstance(columns, str):
            raise InvalidArgumentError("columns must be a list of names, not a string")
        self.store, self.fragments, self.batch_size = store, list(fragments), batch_size
        self.limit, self.offset = limit, offset or 0
        out = list(columns) if columns is not None else list(schema.names)
        # a table column named like a special column is that column (its values,
        # not row ids); asking for the special column as well is ambiguous
        table_names = set(schema.names)
        self.special = tuple(c for c in SPECIAL if c not in table_names)
        for flag, name in ((with_row_address, ROW_ADDRESS), (with_row_id, ROW_ID)):
            if flag and name in table_names:
                raise InvalidArgumentError(
                    f"the table has a column named {name!r}: it cannot also return the {name} special column"
                )
        if with_row_address and ROW_ADDRESS not in out:
            out.append(ROW_ADDRESS)
        if with_row_id and ROW_ID not in out:
            out.append(ROW_ID)
        self.columns = out
        self._special_out = any(c in self.special for c in out)  # row addresses or ids asked for
        self.expr = None
        needed = [c for c in out if c not in self.special]
        used: set[str] = set()  # the columns the filter reads
        if filter is not None:
            from . import predicate as lpred  # sqlglot and Acero: imported with the first filter

            # the special columns may be filtered on, as pylance allows (``_rowid > 5``)
            both = pa.schema([*schema, *(pa.field(c, pa.uint64()) for c in self.special)], metadata=schema.metadata)
            self.expr = lpred.to_expression(filter, both)
            used = lpred.referenced_columns(filter, both)
            for c in sorted(used):
                if c not in needed and c not in self.special:
                    needed.append(c)
        #: special columns the filter reads (computed per read, never part of the read columns)
        self.special_in_filter = tuple(c for c in self.special if c in used)
        self.read_fields = fields_by_name(fields, needed)
        self.read_names = needed
        #: late materialization on a local store: the filter's columns are read
        #: first, the others only for the rows it keeps ((filter, other) names)
        self._late: tuple[list[str], list[str]] | None = None
        if self.expr is not None and not store.remote and not self.special_in_filter:
            in_filter = [c for c in needed if c in used]
            if 0 < len(in_filter) < len(needed):
                self._late = (in_filter, [c for c in needed if c not in in_filter])
        out_fields = []
        for c in out:
            if c in self.special:  # nullable uint64, as pylance 14 types all four
                out_fields.append(pa.field(c, pa.uint64()))
            else:
                out_fields.append(schema.field(c))
        self.schema = pa.schema(out_fields, metadata=schema.metadata)  # pandas metadata, as pylance keeps it
        #: what the scan touched: fragments opened and bytes read from data files
        self.stats = {"fragments": 0, "bytes_read": 0, "reads": 0}
        self._stats_lock = threading.Lock()
        if file_cache is not None and not file_cache.fits(sum(len(f.files) for f in self.fragments)):
            file_cache = None
        self.file_cache = file_cache
        #: fragments read at once on a remote store (worker threads; 1: none)
        self.readahead = readahead if readahead is not None else DEFAULT_READAHEAD
        #: statistics-based pruning: fragment -> the physical row ranges that can
        #: hold matching rows ([]: none, None: unknown, read all); the filter is
        #: still applied to every row read
        self.row_ranges: Callable[[table_pb2.DataFragment], list[tuple[int, int]] | None] | None = None
        if any(c in self.special for c in out) or self.special_in_filter:
            wants_ids = ROW_ID in self.special and (ROW_ID in out or ROW_ID in self.special_in_filter)
            _check_row_id_fragments(self.fragments, store, wants_ids)

    def batches(self) -> Generator[pa.RecordBatch, None, None]:
        skip, remaining = self.offset, self.limit
        if remaining == 0:
            return
        for read in self._reads():
            for at in range(0, read.num_rows, self.batch_size):
                batch = read.slice(at, self.batch_size)
                if skip:
                    if skip >= batch.num_rows:
                        skip -= batch.num_rows
                        continue
                    batch = batch.slice(skip)
                    skip = 0
                if remaining is not None:
                    batch = batch.slice(0, remaining)
                    remaining -= batch.num_rows
                yield batch
                if remaining == 0:
                    return

    def _reads(self) -> Iterator[pa.RecordBatch]:
        """The scan's rows, fragment by fragment, in reads of at least
        READ_UNIT_ROWS rows (so small batches never fetch a page twice), whole
        fragments where they fit in READ_BUDGET_BYTES.  On a
        remote store up to ``readahead`` fragments are read ahead at once by
        worker threads, each fragment by one thread, in order."""
        if self.readahead > 1 and len(self.fragments) > 1 and self.store.remote:
            yield from self._reads_ahead()
            return
        for group in self._groups():
            if len(group) == 1:
                yield from self._fragment_reads(group[0], None)
            else:
                read = self._group_read(group)
                if read is not None and read.num_rows:
                    yield read

    def _groups(self) -> Iterator[list]:
        """The fragments in order, small ones read whole gathered into groups
        of at most READ_UNIT_ROWS rows (:meth:`_group_read`), others alone.
        Groups start with one fragment (twice: Polars reads a batch ahead)
        and double, so a consumer that stops early (a LIMIT, a ``head``)
        reads little more than it takes."""
        group: list = []
        rows, most, made = 0, 1, 0
        for frag in self.fragments:
            n = frag.physical_rows
            small = (
                self.read_fields
                and 0 < n <= SMALL_FRAGMENT_ROWS
                and (self.row_ranges is None or self._ranges(frag) == [(0, n)])
            )
            if not small or rows + n > READ_UNIT_ROWS or len(group) >= most:
                if group:
                    yield group
                    made += 1
                    most = 1 if made < 2 else most * 2
                group, rows = [], 0
            if not small:
                yield [frag]
                continue
            group.append(frag)
            rows += n
        if group:
            yield group

    def _group_read(self, frags: list) -> pa.RecordBatch | None:
        """Every row of several small fragments read as one (see
        :mod:`tessera.format.table.whole_reads`): each column of all of them
        decoded together, the filter evaluated once."""
        with self._stats_lock:
            self.stats["fragments"] += len(frags)
        readers = [self._reader(f) for f in frags]
        try:
            with counting(self.stats, self._stats_lock):
                starts = whole_reads.fragment_offsets(readers)
                live = whole_reads.live_mask(readers)
                if self._late is not None:
                    got = self._group_late(readers, starts, live)
                else:
                    got = self._group_then_filter(readers, live, lambda: self._group_specials(frags, readers, True))
                if got is None:
                    return None
                batch, kept = got
                return self._output(batch, kept, int(starts[-1]), lambda: self._group_specials(frags, readers))
        finally:
            for r in readers:
                r.close()

    def _group_then_filter(self, readers: list, live: np.ndarray | None, specials):
        """:meth:`_read_then_filter` of a group: ``(batch, kept)`` or None."""
        arrays = whole_reads.read_whole(readers, release=True) if self.read_fields else []
        batch = pa.RecordBatch.from_arrays(arrays, names=self.read_names) if arrays else None
        rows = sum(r.physical_rows for r in readers)
        return self._filtered(batch, live, rows, specials)

    def _group_late(self, readers: list, starts: np.ndarray, live: np.ndarray | None):
        """:meth:`_read_late` of a group: the filter's columns of every
        fragment, then the other columns of the fragments with a row kept."""
        assert self._late is not None
        in_filter, others = self._late
        fields = {f.name: f for f in self.read_fields}
        first = [r.subset([fields[c] for c in in_filter]) for r in readers]
        fbatch = pa.RecordBatch.from_arrays(whole_reads.read_whole(first, release=True), names=in_filter)
        keep = mask_of(self.expr, fbatch)
        if live is not None:
            keep = keep & live
        if not keep.any():
            return None
        hit = np.logical_or.reduceat(keep, starts[:-1])
        chosen = [(j, r.subset([fields[c] for c in others])) for j, (r, h) in enumerate(zip(readers, hit)) if h]
        rows = np.repeat(hit, np.diff(starts))  # the rows of the fragments with a row kept
        kept_rows = np.flatnonzero(keep)
        if kept_rows.size * TAKE_FRACTION <= int(rows.sum()):  # few rows: taken from each fragment
            at = np.searchsorted(kept_rows, starts)
            per = [r.take(kept_rows[at[j] : at[j + 1]] - starts[j]) for j, r in chosen]
            rest = [pa.concat_arrays([p[c] for p in per]) if len(per) > 1 else per[0][c] for c in range(len(others))]
            return self._joined(others, rest, fbatch.filter(pa.array(keep))), keep
        rest = whole_reads.read_whole([r for _, r in chosen], release=True)
        if not rows.all():
            fbatch = fbatch.filter(pa.array(rows))
        batch = self._joined(others, rest, fbatch).filter(pa.array(keep[rows]))
        return batch, keep

    def _special_values(
        self, frag, reader: FragmentReader, start: int, stop: int, for_filter: bool = False
    ) -> dict[str, np.ndarray]:
        """The special columns this scan returns (``for_filter``: those its
        filter reads), for physical rows [start, stop) of ``frag``."""
        out: dict[str, np.ndarray] = {}
        for c in self.special_in_filter if for_filter else self.columns:
            if c not in self.special:
                continue
            if c == ROW_ADDRESS:
                out[c] = (np.uint64(frag.id) << np.uint64(32)) + np.arange(start, stop, dtype=np.uint64)
            elif c == ROW_ID:
                out[c] = reader.row_ids(0, frag.physical_rows)[start:stop].astype(np.uint64, copy=False)
            else:
                out[c] = reader.row_versions(created=c == CREATED_AT)[start:stop]
        return out

    def _group_specials(self, frags: list, readers: list, for_filter: bool = False) -> dict[str, np.ndarray]:
        """The special columns of every row of a group."""
        parts = [self._special_values(f, r, 0, f.physical_rows, for_filter) for f, r in zip(frags, readers)]
        return {c: np.concatenate([p[c] for p in parts]) for c in parts[0]} if parts else {}

    def _ranges(self, frag) -> list[tuple[int, int]]:
        """The physical row ranges of ``frag`` to read: all of them, or those
        :attr:`row_ranges` (statistics) says can hold matching rows."""
        return merge_ranges(self.row_ranges(frag) if self.row_ranges is not None else None, frag.physical_rows)

    def _fragment_reads(self, frag, stop_flag: threading.Event | None) -> Iterator[pa.RecordBatch]:
        ranges = self._ranges(frag)
        with self._stats_lock:
            if not ranges and frag.physical_rows:
                self.stats["pruned_fragments"] = self.stats.get("pruned_fragments", 0) + 1
                return
            self.stats["fragments"] += 1
        reader = self._reader(frag)
        try:
            if not frag.physical_rows or not self.read_fields:
                # no file would be opened (no rows, or no columns to read):
                # check the files agree, or a wrong physical_rows silently
                # hides rows or makes up 2**40 of them
                with counting(self.stats, self._stats_lock):
                    reader.check_physical_rows()
            budget = REMOTE_READ_BUDGET_BYTES if self.store.remote else READ_BUDGET_BYTES
            unit = max(self.batch_size, READ_UNIT_ROWS, budget // self._row_bytes(frag))
            for a, b in ranges:
                step = -(-(b - a) // -(-(b - a) // unit)) if b > a else 1  # equal pieces, none over unit
                for start in range(a, b, step):
                    if stop_flag is not None and stop_flag.is_set():
                        return
                    with counting(self.stats, self._stats_lock):
                        read = self._batch(reader, frag, start, min(start + step, b))
                    if read is not None and read.num_rows:
                        yield read
        finally:
            reader.close()

    def _reader(self, frag) -> FragmentReader:
        return FragmentReader(
            self.store,
            frag,
            self.read_fields,
            stats=self.stats,
            stats_lock=self._stats_lock,
            file_cache=self.file_cache,
            cache_on_second_use=True,
        )

    def _row_bytes(self, frag) -> int:
        """An estimate of one row's decoded bytes in the fields this scan reads
        (never below 1): fixed-width fields by their width, the others by the
        fragment's data files' size per row (what a row takes on disk)."""
        fixed, variable = 0, False
        for f in self.read_fields:
            t = f.arrow_type
            try:
                fixed += max(1, t.bit_width // 8)
            except ValueError:  # strings, lists, structs: no fixed width
                variable = True
        if variable and frag.physical_rows:
            disk = sum(df.file_size_bytes for df in frag.files)
            fixed += disk // frag.physical_rows if disk else 64
        return max(1, fixed)

    def _reads_ahead(self) -> Iterator[pa.RecordBatch]:
        stop = threading.Event()
        queues: list[queue.Queue] = [queue.Queue(maxsize=2) for _ in self.fragments]
        done = object()

        def put(q: queue.Queue, item: object) -> bool:
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def work(k: int) -> None:
            try:
                for read in self._fragment_reads(self.fragments[k], stop):
                    if not put(queues[k], read):
                        return
                put(queues[k], done)
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
                put(queues[k], exc)

        started = 0
        threads: list[threading.Thread] = []

        def start_more(upto: int) -> None:
            nonlocal started
            while started < min(upto, len(self.fragments)):
                th = threading.Thread(target=work, args=(started,), daemon=True, name=f"tessera-scan-{started}")
                th.start()
                threads.append(th)
                started += 1

        try:
            for k in range(len(self.fragments)):
                start_more(k + self.readahead)
                while True:
                    item = queues[k].get()
                    if item is done:
                        break
                    if isinstance(item, BaseException):
                        raise item
                    yield item
        finally:
            stop.set()  # workers stop at their next read or put: wait for the current reads to end
            for th in threads:
                th.join(60)

    def _batch(self, reader: FragmentReader, frag, start: int, stop: int) -> pa.RecordBatch | None:
        live = reader.live_mask(start, stop)
        if self._late is not None:
            got = self._read_late(reader, start, stop, live)
        else:
            got = self._read_then_filter(
                reader, start, stop, live, lambda: self._special_values(frag, reader, start, stop, True)
            )
        if got is None:
            return None
        batch, kept = got

        return self._output(batch, kept, stop - start, lambda: self._special_values(frag, reader, start, stop))

    def _output(self, batch, kept, rows: int, specials) -> pa.RecordBatch:
        """The output batch of a read of ``rows`` rows: ``batch`` (the read
        columns of the rows kept; None when none is read), ``kept`` (None: every
        row, a slice or a mask); ``specials()`` gives every row's special
        columns (:meth:`_special_values`), computed only when an output needs them."""
        values: dict[str, np.ndarray] = {}
        count = None
        if self._special_out or batch is None:
            if self._special_out:
                values = specials()
                if kept is not None:
                    values = {c: v[kept] for c, v in values.items()}
                count = len(next(iter(values.values())))
            else:
                count = (
                    rows if kept is None else (kept.stop - kept.start if isinstance(kept, slice) else int(kept.sum()))
                )
        cols = []
        for c in self.columns:
            if c in values:
                cols.append(pa.array(values[c], pa.uint64()))
            else:
                assert batch is not None  # c is one of read_names, so the batch was read
                cols.append(batch.column(self.read_names.index(c)))
        if not cols:  # no column out (a count): the rows kept
            if count is None:
                count = batch.num_rows if batch is not None else 0
            return (
                pa.RecordBatch.from_pydict({}, schema=self.schema)
                if count == 0
                else pa.record_batch([pa.nulls(count)], names=["_"]).select([])
            )
        return pa.RecordBatch.from_arrays(cols, schema=self.schema)

    def _read_then_filter(self, reader: FragmentReader, start: int, stop: int, live: np.ndarray | None, specials):
        """Every column of rows [start, stop), then the filter: ``(batch, kept)``
        (kept: None for every row, a slice for one run, else a mask), or None
        when no row is kept."""
        arrays = reader.read(start, stop) if self.read_fields else []
        batch = pa.RecordBatch.from_arrays(arrays, names=self.read_names) if arrays else None
        return self._filtered(batch, live, stop - start, specials)

    def _filtered(self, batch: pa.RecordBatch | None, live: np.ndarray | None, rows: int, specials=None):
        """The filter and the live mask applied to ``batch`` (``rows`` rows;
        None when no column was read): ``(batch, kept)`` (kept: None for every
        row, a slice for one run, else a mask), or None when no row is kept.
        ``specials()`` gives the special columns the filter reads."""
        keep = live
        if self.expr is not None:
            seen = batch if batch is not None else pa.record_batch({"_": pa.nulls(rows)})
            if self.special_in_filter and specials is not None:
                for c, v in specials().items():
                    seen = seen.append_column(c, pa.array(v, pa.uint64()))
            m = mask_of(self.expr, seen)
            keep = m if keep is None else (keep & m)
        if keep is None:
            return batch, None
        kept = _kept(keep)
        if kept is None:
            return None
        if batch is not None:
            batch = (
                batch.slice(kept.start, kept.stop - kept.start)
                if isinstance(kept, slice)
                else batch.filter(pa.array(keep))
            )
        return batch, kept

    def _read_late(self, reader: FragmentReader, start: int, stop: int, live: np.ndarray | None):
        """The filter's columns of rows [start, stop), the filter, then the
        other columns of the rows it keeps only: one run is read as a range,
        few scattered rows are taken, more are read as the range they span."""
        assert self._late is not None
        in_filter, others = self._late
        fields = {f.name: f for f in self.read_fields}
        first = reader.subset([fields[c] for c in in_filter])
        fbatch = pa.RecordBatch.from_arrays(first.read(start, stop), names=in_filter)
        keep = mask_of(self.expr, fbatch)
        if live is not None:
            keep = keep & live
        kept = _kept(keep)
        if kept is None:
            return None
        rest = reader.subset([fields[c] for c in others])
        if isinstance(kept, slice):
            a, b, mask = kept.start, kept.stop, None
        else:
            rows = np.flatnonzero(keep)
            if rows.size * TAKE_FRACTION <= keep.size:  # few rows: taken
                return self._joined(others, rest.take(start + rows), fbatch.filter(pa.array(keep))), kept
            a, b = int(rows[0]), int(rows[-1]) + 1
            mask = keep[a:b]
        # the span of the kept rows, then one filter of the whole batch
        batch = self._joined(others, rest.read(start + a, start + b), fbatch.slice(a, b - a))
        return (batch if mask is None else batch.filter(pa.array(mask))), kept

    def _joined(self, others: list[str], arrays: list, fbatch: pa.RecordBatch) -> pa.RecordBatch:
        """The other columns' ``arrays`` and the filter's columns, in read order."""
        by_name = dict(zip(others, arrays))
        by_name.update(zip(fbatch.schema.names, fbatch.columns))
        return pa.RecordBatch.from_arrays([by_name[c] for c in self.read_names], names=self.read_names)

    def reader(self) -> pa.RecordBatchReader:
        """The batches as a RecordBatchReader; it reads a batch only when asked,
        and is closed at interpreter exit if still open (see :mod:`.stream`)."""
        from .stream import BatchStream

        return BatchStream(self).to_reader()

    def to_table(self) -> pa.Table:
        return pa.Table.from_batches(list(self.batches()), schema=self.schema)
