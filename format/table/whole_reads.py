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
from .fragments import FragmentReader, as_field_type, one_array


def _whole_pages(r: FileReader, i: int) -> tuple[v21decoder.FieldDecoder, list] | None:
    """The decoder and pages of file field ``i`` when its rows can be joined
    with other files' (a 2.1+ leaf without lists, dictionary or blob), else None."""
    if r.version == "2.0":
        return None
    dec = r._decoder(i)
    if not isinstance(dec, v21decoder.FieldDecoder) or len(dec.leaves) != 1:
        return None
    leaf = dec.leaves[0]
    if leaf.st.has_lists or leaf.blob is not None or pa.types.is_dictionary(leaf.out_type):
        return None
    return dec, dec._leaf_pages(leaf)[0]


class _Part:
    """One fragment's share of one field: its pages (joinable reads), or an
    array already read (nulls, or a field read the ordinary way)."""

    __slots__ = ("dec", "pages", "bufs", "array", "path", "rows", "taken", "plans")

    def __init__(self, rows: int, path: str | None = None) -> None:
        self.rows, self.path = rows, path
        #: a take: the file rows taken (sorted, distinct); a read: None (every row)
        self.taken: np.ndarray | None = None
        #: a take: per page, the rows in it and its planned chunks' plan
        self.plans: list = []
        self.dec: v21decoder.FieldDecoder | None = None
        self.pages: list = []
        self.bufs: list = []
        self.array: pa.Array | None = None


def read_whole(readers: Sequence[FragmentReader]) -> list[pa.Array]:
    """Arrays of the readers' fields (every reader reads the same fields) for
    every physical row of every reader's fragment, fragment after fragment."""
    fields = readers[0].fields
    parts: list[list[_Part]] = [[] for _ in fields]
    for reader in readers:
        n = reader.physical_rows
        planned: dict[int, list[_Part]] = {}
        ordinary: dict[int, tuple[FileReader, list[tuple[_Part, int, lschema.LanceField]]]] = {}
        for k, f in enumerate(fields):
            loc = reader._locate(f)
            if loc is None:
                part = _Part(n)
                part.array = pa.nulls(n, f.arrow_type)
                parts[k].append(part)
                continue
            df, col = loc
            r = reader._reader(df)
            i = reader._file_field(r, col, f)
            part = _Part(n, r.path)
            parts[k].append(part)
            got = _whole_pages(r, i)
            if got is None:
                ordinary.setdefault(id(r), (r, []))[1].append((part, i, f))
            else:
                part.dec, part.pages = got
                planned.setdefault(id(r), []).append(part)
        for todo in planned.values():
            _fetch(todo)
        for r, items in ordinary.values():  # one read per file for its fields, as FragmentReader.read does
            table = r.read_range(0, n, columns=[i for _, i, _ in items])
            for j, (part, _, f) in enumerate(items):
                part.array = as_field_type(one_array(table.column(j)), f, r.path)
    return [_join(f, ps) for f, ps in zip(fields, parts)]


def _fetch(parts: list[_Part]) -> None:
    """Page metadata (when not yet known) and then the bytes of every page of
    ``parts`` (fields of one data file), one request each."""
    pages = [p for part in parts for p in part.pages]
    dec = parts[0].dec
    assert dec is not None  # planned parts have a decoder
    dec._ensure_meta(pages)
    plans = [p.data_ranges(0, p.num_rows) for p in pages]
    ranges = [x for plan in plans for x in plan]
    got = dec.reader.io.read_ranges(ranges) if ranges else []
    at, j = 0, 0
    for part in parts:
        for _ in part.pages:
            k = len(plans[j])
            part.bufs.append(got[at : at + k])
            at, j = at + k, j + 1


def _join(f: lschema.LanceField, parts: list[_Part]) -> pa.Array:
    """The field's rows over every part: runs of joinable pages decode together."""
    out: list[pa.Array] = []
    run: list[_Part] = []

    def flush() -> None:
        if run:
            out.append(_decode_run(f, run))
            run.clear()

    for part in parts:
        if part.array is not None:
            flush()
            out.append(part.array)
        else:
            if run and not _same_leaf(run[0], part):
                flush()  # files storing the field as another type: each checked against the table's
            run.append(part)
    flush()
    if len(out) == 1:
        return out[0]
    return pa.concat_arrays(out)


def _same_leaf(a: _Part, b: _Part) -> bool:
    """Whether two files store the field alike (their rows join before the
    table's type is checked)."""
    assert a.dec is not None and b.dec is not None
    x, y = a.dec.leaves[0], b.dec.leaves[0]
    return x.type.equals(y.type) and x.out_type.equals(y.out_type) and x.st.kinds == y.st.kinds


def _decode_run(f: lschema.LanceField, run: list[_Part]) -> pa.Array:
    """The rows of consecutive planned parts of one field, checked as a read
    of each file would be (UTF-8, the table's type)."""
    dec = run[0].dec
    assert dec is not None
    leaf = dec.leaves[0]
    pieces = []
    pending: list = []
    pending_bufs: list = []

    def flush() -> None:
        if pending:
            pieces.append(decode_whole_pages(list(pending), [b for bufs in pending_bufs for b in bufs]))
            pending.clear()
            pending_bufs.clear()

    if run[0].taken is not None:
        return _take_run(f, run)
    for part in run:
        for p, bufs in zip(part.pages, part.bufs):
            if pending and joinable(p, pending[0]):
                pending.append(p)
                pending_bufs.append(bufs)
            elif joinable(p, p):
                flush()
                pending.append(p)
                pending_bufs.append(bufs)
            else:
                flush()
                pieces.append(p.decode(0, p.num_rows, bufs))
    flush()
    arr, _ = dec._assemble_leaf(leaf, pieces, sum(part.rows for part in run))
    return _checked(f, run, arr)


def _take_run(f: lschema.LanceField, run: list[_Part]) -> pa.Array:
    """The taken rows of consecutive planned parts of one field."""
    dec = run[0].dec
    assert dec is not None
    pieces = []
    pending: list = []
    for part in run:
        for p, (prows, plan), chunks in zip(part.pages, part.plans, part.bufs):
            if pending and not joinable(p, pending[0][0]):
                pieces.append(take_from_pages(pending))
                pending = []
            pending.append((p, prows, plan, chunks))
    if pending:
        pieces.append(take_from_pages(pending))
    arr, _ = dec._assemble_leaf(dec.leaves[0], pieces, sum(part.rows for part in run))
    return _checked(f, run, arr)


def _checked(f: lschema.LanceField, run: list[_Part], arr: pa.Array) -> pa.Array:
    """``arr`` (the rows of ``run``, part after part) checked as a read of
    each file would be (UTF-8 strings, the stored type against the table's)."""
    try:
        utf8.check_array(arr, run[0].path, f.name, None if run[0].taken is not None else 0)
    except CorruptFileError:
        at = 0  # name the file and row, as reading it alone would
        for part in run:
            rows = part.taken
            utf8.check_array(arr.slice(at, part.rows), part.path, f.name, 0 if rows is None else None, rows=rows)
            at += part.rows
        raise
    if arr.type.equals(f.arrow_type):
        return arr
    at, out = 0, []
    for part in run:  # the table's type, checked against each file's stored type
        out.append(as_field_type(arr.slice(at, part.rows), f, part.path or "data file"))
        at += part.rows
    return pa.concat_arrays(out)


def fragment_offsets(readers: Sequence[FragmentReader]) -> np.ndarray:
    """Where each reader's rows start in :func:`read_whole`'s arrays, then the total."""
    rows = np.fromiter((r.physical_rows for r in readers), dtype=np.int64, count=len(readers))
    return np.concatenate(([0], np.cumsum(rows)))


def take_whole(readers: Sequence[FragmentReader], rows: Sequence[np.ndarray]) -> list[pa.Array]:
    """Arrays of the readers' fields (every reader reads the same fields) at
    physical rows ``rows[j]`` of reader ``j`` (sorted, distinct), fragment
    after fragment: each data file is asked once for the mini-block chunks
    holding its rows, and chunks of pages written alike decode together."""
    fields = readers[0].fields
    parts: list[list[_Part]] = [[] for _ in fields]
    for reader, want in zip(readers, rows):
        m = int(want.size)
        planned: dict[int, list[_Part]] = {}
        ordinary: dict[int, tuple[FileReader, list[tuple[_Part, int, lschema.LanceField]]]] = {}
        for k, f in enumerate(fields):
            loc = reader._locate(f)
            if loc is None:
                part = _Part(m)
                part.array = pa.nulls(m, f.arrow_type)
                parts[k].append(part)
                continue
            df, col = loc
            r = reader._reader(df)
            i = reader._file_field(r, col, f)
            part = _Part(m, r.path)
            part.taken = want
            parts[k].append(part)
            got = _whole_pages(r, i)
            groups = _page_rows(got[0], want) if got is not None else None
            if got is None or groups is None or not all(joinable(got[1][g], got[1][g]) for g, _ in groups):
                ordinary.setdefault(id(r), (r, []))[1].append((part, i, f))
                continue
            part.dec = got[0]
            part.pages = [got[1][g] for g, _ in groups]
            part.plans = [prows for _, prows in groups]
            planned.setdefault(id(r), []).append(part)
        for todo in planned.values():
            _fetch_chunks(todo)
        for r, items in ordinary.values():
            arrays = r.take_arrays(want, [i for _, i, _ in items])
            for (part, _, f), arr in zip(items, arrays):
                part.array = as_field_type(one_array(arr), f, r.path)
    return [_join(f, ps) for f, ps in zip(fields, parts)]


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


def _fetch_chunks(parts: list[_Part]) -> None:
    """Plan the chunks holding each part's rows and read them (page metadata
    first when not yet known), one request per data file."""
    dec = parts[0].dec
    assert dec is not None
    dec._ensure_meta([p for part in parts for p in part.pages])
    offs, sizes = [], []
    for part in parts:
        plans = []
        for p, prows in zip(part.pages, part.plans):
            plan, o, n = p.take_plan(prows)
            plans.append((prows, plan))
            offs.append(o)
            sizes.append(n)
        part.plans = plans
    off = np.concatenate(offs)
    size = np.concatenate(sizes)
    data, starts = dec._read_pieces_at(off, size)
    at = 0
    for part in parts:
        for _, (_, plan) in zip(part.pages, part.plans):
            k = plan[0].size
            part.bufs.append(
                [data[s : s + n] for s, n in zip(starts[at : at + k].tolist(), size[at : at + k].tolist())]
            )
            at += k
