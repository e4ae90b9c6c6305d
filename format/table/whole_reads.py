"""Every row of many small fragments at once.

A fragment of a few thousand rows costs little to decode and much to set up:
each column of each data file is planned, fetched and decoded on its own,
which on a table of thousands of small fragments (streaming appends, small
jobs) costs far more than the values.  :func:`read_whole` reads the same
fields of many fragments in one pass:

* each data file is asked once for every byte the read needs (page metadata
  first when not yet known, then the chunks of every page of every field);
* per field, consecutive mini-block pages that share a layout message (the
  same encodings: pages written alike by one writer) decode as one run of
  chunks (:func:`...v21.read.miniblock.decode_whole_pages`), so a column of
  1,000 fragments is one decode, not 1,000;
* anything else (file format 2.0, lists, structs, dictionaries, blobs, other
  page kinds) is read as a fragment reader reads it, and joined.

The result is exactly what :meth:`FragmentReader.read` of each fragment
would give, concatenated (deleted rows included: the caller masks them).

Pages are decoded as the files are read (every ``RUN_PAGES`` pages of a
field), so the bytes and objects of one file live only briefly: objects that
outlive many allocations reach the garbage collector's oldest generation,
and on a table of thousands of files its full passes would cost more than
the read.  :func:`take_whole` does the same for scattered rows (a take).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from ..errors import CorruptFileError
from ..file import schema as lschema
from ..file import utf8
from ..file.datafile import FileReader
from ..file.v21.read import decoder as v21decoder
from ..file.v21.read.miniblock import decode_whole_pages, joinable, take_from_pages
from . import evolved
from .fragments import FragmentReader, as_field_type, one_array


def _whole_pages(r: FileReader, i: int) -> tuple[v21decoder.FieldDecoder, tuple] | None:
    """The decoder and pages of file field ``i`` when its rows can be joined
    with other files' (a 2.1+ leaf without lists, dictionary or blob), else None."""
    if r.version == "2.0" or r.fields[i].children:  # a struct of one child has one leaf, but is no leaf
        return None
    dec = r._decoder(i)
    if not isinstance(dec, v21decoder.FieldDecoder) or len(dec.leaves) != 1:
        return None
    leaf = dec.leaves[0]
    if leaf.st.has_lists or leaf.blob is not None or pa.types.is_dictionary(leaf.out_type):
        return None
    return dec, tuple(dec._leaf_pages(leaf)[0])


#: pages of one field decoded together at most (then their bytes are let go)
RUN_PAGES = 64
#: the same for a take, whose pages hold only the chunks of the rows taken
#: (views of the files' bytes where they are mapped)
TAKE_RUN_PAGES = 1024


class _Field:
    """The rows of one field over many files, decoded as they arrive: runs of
    joinable pages decode together, anything else alone, arrays read the
    ordinary way are appended as they are."""

    def __init__(self, f: lschema.LanceField) -> None:
        self.f = f
        self.out: list[pa.Array] = []
        #: the current run: one file decoder (assembles it), its leaf, its pieces
        #: and (path, rows, rows taken) of each file in it
        self.dec: v21decoder.FieldDecoder | None = None
        self.pieces: list = []
        self.files: list[tuple[str | None, int, np.ndarray | None]] = []
        #: joinable pages waiting to be decoded together: (page, bytes) or a take's items
        self.pending: list = []

    def add(self, dec: v21decoder.FieldDecoder, path: str | None, rows: int, items: list, taken=None) -> None:
        """Pages of one file: ``items`` are ``(page, bytes)`` of whole pages,
        or for a take ``(page, rows in it, plan, chunk bytes)``."""
        if self.dec is not None and not _same_leaf(self.dec.leaves[0], dec.leaves[0]):
            self.end_run()  # a file storing the field as another type: checked on its own
        if self.dec is None:
            self.dec = dec
        for item in items:
            p = item[0]
            if self.pending and not joinable(p, self.pending[0][0]):
                self._decode_pending()
            if joinable(p, p):
                self.pending.append(item)
            else:  # taken pages are all joinable (take_whole checks)
                self.pieces.append(p.decode(0, p.num_rows, item[1]))
        self.files.append((path, rows, taken))
        if len(self.pending) >= (TAKE_RUN_PAGES if taken is not None else RUN_PAGES):
            self._decode_pending()

    def add_array(self, arr: pa.Array) -> None:
        self.end_run()
        self.out.append(arr)

    def _decode_pending(self) -> None:
        if not self.pending:
            return
        if len(self.pending[0]) == 4:
            self.pieces.append(take_from_pages(self.pending))
        else:
            self.pieces.append(
                decode_whole_pages([p for p, _ in self.pending], [b for _, bufs in self.pending for b in bufs])
            )
        self.pending = []

    def end_run(self) -> None:
        self._decode_pending()
        if self.dec is None:
            return
        arr, _ = self.dec._assemble_leaf(self.dec.leaves[0], self.pieces, sum(n for _, n, _ in self.files))
        self.out.append(_checked(self.f, self.files, arr))
        self.dec, self.pieces, self.files = None, [], []

    def result(self) -> pa.Array:
        self.end_run()
        return self.out[0] if len(self.out) == 1 else pa.concat_arrays(self.out)


def _same_leaf(x, y) -> bool:
    """Whether two files store the field alike (their rows join before the
    table's type is checked)."""
    return x.type.equals(y.type) and x.out_type.equals(y.out_type) and x.st.kinds == y.st.kinds


def _checked(f: lschema.LanceField, files: list, arr: pa.Array) -> pa.Array:
    """``arr`` (the rows of ``files``, one after another) checked as a read
    of each file would be (UTF-8 strings, the stored type against the table's)."""
    path, _, taken = files[0]
    try:
        utf8.check_array(arr, path, f.name, None if taken is not None else 0)
    except CorruptFileError:
        at = 0  # name the file and row, as reading it alone would
        for path, n, taken in files:
            utf8.check_array(arr.slice(at, n), path, f.name, 0 if taken is None else None, rows=taken)
            at += n
        raise
    if arr.type.equals(f.arrow_type):
        return arr
    at, out = 0, []
    for path, n, _ in files:  # the table's type, checked against each file's stored type
        out.append(as_field_type(arr.slice(at, n), f, path or "data file"))
        at += n
    return pa.concat_arrays(out)


def _field_pages(reader: FragmentReader, r: FileReader, col: int, f: lschema.LanceField):
    """``(file field index, _whole_pages, which pages a take may join)`` of the
    table's field ``f`` stored at column ``col`` of data file ``r``: kept with
    the file reader (a held table's takes plan the same fields of the same
    files again and again)."""
    memo = r.planned
    key = (col, f.id)
    hit = memo.get(key)
    if hit is None:
        i = reader._file_field(r, col, f)
        got = _whole_pages(r, i)
        takes = tuple(joinable(p, p) for p in got[1]) if got is not None else ()
        hit = memo[key] = (i, got, takes)
    return hit


def _plan(reader: FragmentReader, fields: list[_Field], taken: np.ndarray | None):
    """For one fragment: per data file, the fields read as whole (or planned
    take) pages, and the fields read the ordinary way."""
    planned: dict[int, list] = {}
    ordinary: dict[int, tuple[FileReader, list]] = {}
    n = reader.physical_rows if taken is None else int(taken.size)
    for acc in fields:
        f = acc.f
        if f.children and len(reader._locate_all(f)) > 1:  # a struct spread over files (.evolved)
            sub = reader.subset([f])
            acc.add_array((sub.read(0, n) if taken is None else sub.take(taken))[0])
            continue
        loc = reader._locate(f)
        if loc is None:
            acc.add_array(pa.nulls(n, f.arrow_type))
            continue
        df, col = loc
        r = reader._reader(df)
        i, got, takes = _field_pages(reader, r, col, f)
        if got is not None and taken is not None:
            groups = _page_rows(got[0], taken)
            if groups is None:
                got = None
            elif len(groups) == 1:  # the usual: rows of one page
                g, prows = groups[0]
                got = (got[0], ((got[1][g], prows),)) if takes[g] else None
            elif not all(takes[g] for g, _ in groups):
                got = None
            else:
                got = (got[0], tuple((got[1][g], rows) for g, rows in groups))
        if got is None:
            ordinary.setdefault(id(r), (r, []))[1].append((acc, i))
        else:
            planned.setdefault(id(r), []).append((acc, got[0], got[1]))
    return n, planned, ordinary


def read_whole(readers: Sequence[FragmentReader], release: bool = False) -> list[pa.Array]:
    """Arrays of the readers' fields (every reader reads the same fields) for
    every physical row of every reader's fragment, fragment after fragment.

    ``release``: close each reader once its bytes are read (a scan's readers
    of many files: their objects are then freed young, by reference counts)."""
    fields = [_Field(f) for f in readers[0].fields]
    for reader in readers:
        n, planned, ordinary = _plan(reader, fields, None)
        for todo in planned.values():
            dec = todo[0][1]
            pages = [p for _, _, ps in todo for p in ps]
            dec._ensure_meta(pages)  # page metadata not yet known, in one request
            plans = [p.whole_ranges() for p in pages]
            ranges = [x for plan in plans for x in plan]
            got = dec.reader.io.read_ranges(ranges) if ranges else []  # every page's bytes, one request
            at = j = 0
            for acc, d, ps in todo:
                items = []
                for p in ps:
                    k = len(plans[j])
                    items.append((p, got[at : at + k]))
                    at, j = at + k, j + 1
                acc.add(d, d.path, n, items)
        for r, items in ordinary.values():  # one read per file for its fields, as FragmentReader.read does
            table = r.read_range(0, n, columns=[i for _, i in items])
            for j, (acc, i) in enumerate(items):
                acc.add_array(
                    evolved.assemble(acc.f, [(one_array(table.column(j)), r.fields[i], r.path)], as_field_type)
                )
        if release:
            reader.close()
    return [acc.result() for acc in fields]


def live_mask(readers: Sequence[FragmentReader]) -> np.ndarray | None:
    """Which rows of :func:`read_whole`'s arrays are not deleted (None: all are)."""
    masks = [r.live_mask(0, r.physical_rows) for r in readers]
    if all(m is None for m in masks):
        return None
    return np.concatenate([np.ones(r.physical_rows, bool) if m is None else m for r, m in zip(readers, masks)])


def fragment_offsets(readers: Sequence[FragmentReader]) -> np.ndarray:
    """Where each reader's rows start in :func:`read_whole`'s arrays, then the total."""
    rows = np.fromiter((r.physical_rows for r in readers), dtype=np.int64, count=len(readers))
    return np.concatenate(([0], np.cumsum(rows)))


def take_whole(readers: Sequence[FragmentReader], rows: Sequence[np.ndarray]) -> list[pa.Array]:
    """Arrays of the readers' fields (every reader reads the same fields) at
    physical rows ``rows[j]`` of reader ``j`` (sorted, distinct), fragment
    after fragment: each data file is asked once for the mini-block chunks
    holding its rows, and chunks of pages written alike decode together."""
    fields = [_Field(f) for f in readers[0].fields]
    for reader, want in zip(readers, rows):
        m, planned, ordinary = _plan(reader, fields, want)
        for todo in planned.values():
            dec = todo[0][1]
            dec._ensure_meta([p for _, _, ps in todo for p, _ in ps])
            plans, offs, sizes = [], [], []
            for _, _, ps in todo:
                for p, prows in ps:
                    plan, o, n = p.take_plan(prows)
                    plans.append(plan)
                    offs.append(o)
                    sizes.append(n)
            size = np.concatenate(sizes)
            data, starts = dec._read_pieces_at(np.concatenate(offs), size)  # every chunk, one request
            starts_at, sizes_at = starts.tolist(), size.tolist()
            at = j = 0
            for acc, d, ps in todo:
                items = []
                for p, prows in ps:
                    plan = plans[j]
                    k = plan[0].size
                    chunks = [data[s : s + n] for s, n in zip(starts_at[at : at + k], sizes_at[at : at + k])]
                    items.append((p, prows, plan, chunks))
                    at, j = at + k, j + 1
                acc.add(d, d.path, m, items, taken=want)
        for r, items in ordinary.values():
            arrays = r.take_arrays(want, [i for _, i in items])
            for (acc, i), arr in zip(items, arrays):
                acc.add_array(evolved.assemble(acc.f, [(one_array(arr), r.fields[i], r.path)], as_field_type))
    return [acc.result() for acc in fields]


def _page_rows(dec: v21decoder.FieldDecoder, want: np.ndarray) -> list[tuple[int, np.ndarray]] | None:
    """(page index, rows relative to the page) of the pages holding ``want``."""
    _, rs = dec._leaf_pages(dec.leaves[0])
    if want.size == 0 or int(want[-1]) >= int(rs[-1]):
        return None  # out of range: the ordinary take says so
    if rs.size == 2:  # one page: a small file's usual shape
        return [(0, want)]
    page_of = np.searchsorted(rs, want, side="right") - 1
    cuts = np.flatnonzero(np.diff(page_of)) + 1
    return [(int(g[0]), w - int(rs[g[0]])) for g, w in zip(np.split(page_of, cuts), np.split(want, cuts))]
