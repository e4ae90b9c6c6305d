"""Mini-block pages of file formats 2.1/2.2: chunks of compressed values and levels,
with an optional dictionary and repetition index (``MiniBlockLayout``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ....errors import CorruptFileError
from ... import dictionary as ldict
from . import compressive as cz
from . import levels as lv
from .page import PageBase, Piece, joined_buffers, layer_info
from .repdef import Structure
from .values import Fixed, as_u8, to_arrow, uint_at


def _ceil8(x):
    return (x + 7) // 8 * 8


#: a layout's join key by the layout message's id (the message kept beside
#: it: an id is only trusted while its message lives)
_JOIN_KEYS: dict[int, tuple[object, bytes]] = {}
_JOIN_KEYS_MAX = 4096


def _join_key(msg) -> bytes:
    """The layout without its item counts: pages whose keys are equal decode
    their chunks in one run whatever their sizes (every encoding parameter,
    an FSST symbol table or a bit width, stays in the key)."""
    hit = _JOIN_KEYS.get(id(msg))
    if hit is not None and hit[0] is msg:
        return hit[1]
    bare = type(msg)()
    bare.CopyFrom(msg)
    bare.num_items = 0
    bare.num_dictionary_items = 0
    key = bare.SerializeToString(deterministic=True)
    if len(_JOIN_KEYS) >= _JOIN_KEYS_MAX:
        _JOIN_KEYS.clear()
    _JOIN_KEYS[id(msg)] = (msg, key)
    return key


#: what a layout message says of every mini-block page that has it, by
#: (id(message), id(structure)) (both held in the value): pages written alike
#: share their message (the process's parsed layouts), so the fields of a
#: file of small pages are read off the message and checked once, not per page
_STATIC: dict[tuple[int, int], tuple[object, object, dict]] = {}
_STATIC_MAX = 4096


def _static(msg, st: Structure, where: str) -> dict:
    """The attributes of a mini-block page that its layout message decides."""
    key = (id(msg), id(st))
    hit = _STATIC.get(key)
    if hit is not None and hit[0] is msg and hit[1] is st:
        return hit[2]
    _, _, layers, lut, max_visible, max_rep = layer_info(msg, st, where)
    has_rep = msg.HasField("rep_compression")
    if has_rep != (max_rep > 0):
        raise CorruptFileError(None, f"{where}: repetition levels do not match the page's list layers")
    if not msg.HasField("value_compression"):
        raise CorruptFileError(None, f"{where}: mini-block page without a value encoding")
    if int(msg.num_buffers) < 1:
        raise CorruptFileError(None, f"{where}: mini-block chunks without value buffers")
    has_dict, depth = msg.HasField("dictionary"), int(msg.repetition_index_depth)
    attrs = {
        "msg": msg,
        "layers": layers,
        "lut": lut,
        "max_visible": max_visible,
        "max_rep": max_rep,
        "has_rep": has_rep,
        "has_def": msg.HasField("def_compression"),
        "large": bool(msg.has_large_chunk),
        "num_buffers": int(msg.num_buffers),
        "num_items": int(msg.num_items),
        "depth": depth,
        "has_dict": has_dict,
        #: pages with equal keys decode together (:func:`joinable`)
        "join_key": _join_key(msg),
        "_want_buffers": 2 + int(has_dict) + int(depth > 0),
    }
    if len(_STATIC) >= _STATIC_MAX:
        _STATIC.clear()
    _STATIC[key] = (msg, st, attrs)
    return attrs


#: the first chunk's item and byte offset in a one-chunk page (shared: read-only)
_ZERO = np.zeros(1, dtype=np.int64)
_ZERO.flags.writeable = False


class MiniBlockPage(PageBase):
    # set from the layout message (:func:`_static`)
    has_rep: bool
    has_def: bool
    large: bool
    num_buffers: int
    num_items: int
    depth: int
    has_dict: bool
    join_key: bytes

    def __init__(
        self, page, msg, st: Structure, t: pa.DataType, where: str, out_type: pa.DataType | None = None
    ) -> None:
        super().__init__(page, st, t, where, out_type)
        attrs = _static(msg, st, where)
        self.__dict__.update(attrs)
        want = attrs["_want_buffers"]
        if len(self.buffers) != want:
            raise CorruptFileError(None, f"{where}: mini-block page has {len(self.buffers)} buffers, expected {want}")

    def meta_ranges(self):
        r = [self.buffers[0]]
        if self.has_dict:
            r.append(self.buffers[2])
        if self.depth > 0:
            r.append(self.buffers[-1])
        return r

    def set_meta(self, bufs) -> None:
        w = self.where
        meta = as_u8(bufs[0])
        wsize = 4 if self.large else 2
        if meta.size % wsize:
            raise CorruptFileError(None, f"{w}: chunk metadata of {meta.size} bytes")
        if meta.size == wsize:  # one chunk (a small page): the same, without array arithmetic
            word = int.from_bytes(meta.tobytes(), "little")
            nchunks, log = 1, word & 0xF
            if log and 1 << log != self.num_items:
                raise CorruptFileError(None, f"{w}: chunk value counts do not add up to {self.num_items} items")
            self.chunk_bytes = np.array([((word >> 4) + 1) * 8], dtype=np.int64)
            self.counts = counts = np.array([self.num_items], dtype=np.int64)
            self.item_start = self.chunk_off = _ZERO  # read-only, shared
        else:
            words = np.frombuffer(meta.tobytes(), dtype=f"<u{wsize}").astype(np.int64)
            nchunks = words.size
            self.chunk_bytes = ((words >> 4) + 1) * 8
            logs = words & 0xF
            counts = np.left_shift(np.int64(1), logs)
            if nchunks:
                rest = self.num_items - int(counts[:-1].sum())
                if rest < 0 or (logs[-1] and counts[-1] != rest):
                    raise CorruptFileError(None, f"{w}: chunk value counts do not add up to {self.num_items} items")
                counts[-1] = rest
            elif self.num_items:
                raise CorruptFileError(None, f"{w}: {self.num_items} items but no chunks")
            self.counts = counts
            self.item_start = np.cumsum(counts) - counts
            self.chunk_off = np.cumsum(self.chunk_bytes) - self.chunk_bytes
        if nchunks and int(self.chunk_off[-1] + self.chunk_bytes[-1]) > self.buffers[1][1]:
            raise CorruptFileError(None, f"{w}: chunks run past the end of the page's data buffer")
        i = 1
        self.dict_items = None
        if self.has_dict:
            n = int(self.msg.num_dictionary_items)
            items = cz.block_values(self.msg.dictionary, bufs[i], n, f"{w}.dictionary")
            self.dict_items = to_arrow(items, self.t)
            i += 1
        self.first_row = None
        if self.depth > 0:
            idx = as_u8(bufs[i])
            stride = self.depth + 1
            if idx.size != nchunks * stride * 8:
                raise CorruptFileError(None, f"{w}: repetition index of {idx.size} bytes for {nchunks} chunks")
            ri = np.frombuffer(idx.tobytes(), dtype="<u8").astype(np.int64).reshape(nchunks, stride)
            ends, partial = ri[:, 0], ri[:, 1]
            trailer = partial > 0
            preamble = np.zeros(nchunks, dtype=bool)
            preamble[1:] = trailer[:-1]
            sit = ends + trailer - preamble
            if np.any(sit < 0) or int(sit.sum()) != self.num_rows:
                raise CorruptFileError(None, f"{w}: repetition index does not add up to {self.num_rows} rows")
            self.sit = sit
            self.preamble = preamble
            self.first_row = np.cumsum(sit) - sit
        elif self.has_rep:
            pass  # no index: every read decodes the whole page
        elif self.num_items != self.num_rows:
            raise CorruptFileError(None, f"{w}: {self.num_items} items in a page of {self.num_rows} rows without lists")
        self.meta_loaded = True

    @staticmethod
    def _row_chunk(first_row: np.ndarray, r: int) -> int:
        return int(np.searchsorted(first_row, r, side="right")) - 1

    def _chunk_range(self, a: int, b: int) -> tuple[int, int]:
        n = self.counts.size
        if n == 1 and b > 0:  # one chunk (a small page): what the searches below find
            return 0, 0
        if not self.has_rep:
            c0 = int(np.searchsorted(self.item_start, a, side="right")) - 1
            c1 = int(np.searchsorted(self.item_start, b, side="left")) - 1
            return c0, c1
        first_row = self.first_row
        if first_row is None:
            return 0, n - 1
        c0 = self._row_chunk(first_row, a)
        if b >= self.num_rows:
            return c0, n - 1
        kb = self._row_chunk(first_row, b)
        if b > first_row[kb] or self.preamble[kb]:
            return c0, kb
        return c0, kb - 1

    def whole_ranges(self):
        """``data_ranges(0, num_rows)``, kept (whole pages of many small files are read often)."""
        got = self.__dict__.get("_whole_ranges")
        if got is None:
            got = self._whole_ranges = tuple(self.data_ranges(0, self.num_rows))
        return got

    def data_ranges(self, a: int, b: int):
        c0, c1 = self._chunk_range(a, b)
        off, _ = self.buffers[1]
        start = int(self.chunk_off[c0])
        end = int(self.chunk_off[c1] + self.chunk_bytes[c1])
        return [(off + start, end - start)]

    def _decode_chunks(self, data: np.ndarray, base: np.ndarray, chunks: np.ndarray, pick=None, at=None):
        """Decode the chunks ``chunks`` (indices, ascending) whose bytes start at
        ``base`` in ``data``; returns (rep, defs, values, value count, picked).

        ``pick``: positions of the values wanted (in the decoded chunks); an
        encoding that can skip the others (FSST, inline bit-packing, flat)
        returns just those, and ``picked`` says so; ``at``: optionally the
        same positions as (index into ``chunks``, position in the chunk)."""
        return self._decode_at(data, base, self.chunk_bytes[chunks], self.counts[chunks], pick, at)

    def _decode_at(
        self, data: np.ndarray, base: np.ndarray, cbytes: np.ndarray, counts: np.ndarray, pick=None, at=None
    ):
        """:meth:`_decode_chunks` of chunks given by their sizes and value
        counts: chunks of several pages decode together when the pages share
        this page's layout message (:func:`decode_whole_pages`)."""
        w = self.where
        if data.size < int(base[-1] + cbytes[-1]):
            raise CorruptFileError(None, f"{w}: chunk data truncated")
        bw = 4 if self.large else 2
        header = 2 * (1 + bool(self.has_rep) + bool(self.has_def)) + self.num_buffers * bw
        if np.any(cbytes < header) or np.any(base + cbytes > data.size):
            raise CorruptFileError(
                None, f"{w}: a chunk is smaller than its header ({header} bytes) or lies outside the data"
            )
        # the level count is only needed to decode levels
        nlev = lv.u16(data, base) if self.has_rep or self.has_def else None
        pos = base + 2
        rep_size = def_size = None
        if self.has_rep:
            rep_size = lv.u16(data, pos)
            pos = pos + 2
        if self.has_def:
            def_size = lv.u16(data, pos)
            pos = pos + 2
        sizes = [uint_at(data, pos + k * bw, bw) for k in range(self.num_buffers)]
        cur = _ceil8(pos + self.num_buffers * bw)
        rep = defs = None
        if self.has_rep:
            assert rep_size is not None and nlev is not None  # both read above for a page with rep levels
            rep = lv.chunk_levels(self.msg.rep_compression, data, cur, rep_size, nlev, f"{w}.rep_compression")
            cur = _ceil8(cur + rep_size)
        if self.has_def:
            assert def_size is not None and nlev is not None  # both read above for a page with def levels
            defs = lv.chunk_levels(self.msg.def_compression, data, cur, def_size, nlev, f"{w}.def_compression")
            cur = _ceil8(cur + def_size)
        starts = []
        for k in range(self.num_buffers):
            starts.append(cur)
            cur = _ceil8(cur + sizes[k])
        if np.any(cur > base + cbytes):
            raise CorruptFileError(None, f"{w}: chunk contents overrun the chunk size in the metadata")
        if not self.has_rep and self.has_def and (nlev is None or not np.array_equal(nlev, counts)):
            raise CorruptFileError(None, f"{w}: chunk level counts differ from value counts")
        ch = cz.Chunks([data] * self.num_buffers, starts, sizes, counts)
        total = int(counts.sum())
        picked = False
        if pick is not None and not self.has_dict:
            vals, picked = cz.miniblock_pick(self.msg.value_compression, ch, f"{w}.value_compression", pick, at)
        else:
            vals = cz.miniblock_values(self.msg.value_compression, ch, f"{w}.value_compression")
        want = pick.size if picked else total
        if vals.n != want:
            raise CorruptFileError(None, f"{w}: decoded {vals.n} values, chunks hold {want}")
        return rep, defs, vals, total, picked

    def _values_array(self, vals, defs, sel=None) -> pa.Array:
        """Arrow values of the decoded ``vals`` (``sel``: a slice or positions)."""
        if self.has_dict:
            items = self.dict_items
            assert items is not None  # set_meta decodes the dictionary of a page that has one
            idx = vals.typed() if isinstance(vals, Fixed) else None
            if idx is None:
                raise CorruptFileError(None, f"{self.where}: dictionary indices are not fixed-width integers")
            if sel is not None:
                idx = idx[sel]
            if idx.size and int(idx.max()) >= len(items):
                idx = self._check_null_indices(idx, defs, len(items))
            if self.out is not None:  # a dictionary leaf keeps the page's dictionary
                if len(items) == 0:  # every value null (checked above)
                    return pa.nulls(idx.size, self.out)
                return ldict.from_indices(idx, items, self.out, where=self.where)
            return items.take(pa.array(idx))
        arr = to_arrow(vals, self.t)
        if isinstance(sel, slice):
            if sel.start or sel.stop != len(arr):
                arr = arr.slice(sel.start, sel.stop - sel.start)
        elif sel is not None:
            arr = arr.take(pa.array(sel))
        return arr

    def _take_plan(self, rows: np.ndarray):
        """``(chunks, slot, within)`` for sorted distinct ``rows``: the chunks
        holding them (ascending), each row's index into ``chunks`` and its
        position inside its chunk."""
        if self.item_start is _ZERO:  # one chunk (a small page): every row is in it
            return _ZERO, np.zeros(rows.size, dtype=np.int64), rows
        # (the arrays' own methods: numpy's functions of the same names add a Python call each)
        if rows.size == 1:  # one row (a take over many fragments): no array work
            k = int(self.item_start.searchsorted(rows[0], side="right")) - 1
            return np.array([k]), np.zeros(1, dtype=np.int64), rows - self.item_start[k]
        which = self.item_start.searchsorted(rows, side="right") - 1
        n = which.size
        if n > 1:
            new = np.empty(n, dtype=bool)
            new[0] = True
            np.not_equal(which[1:], which[:-1], out=new[1:])
            chunks = which[new]
            slot = new.cumsum(dtype=np.int64) - 1
        else:
            chunks, slot = which, np.zeros(n, dtype=np.int64)
        return chunks, slot, rows - self.item_start[which]

    def take_ranges(self, rows: np.ndarray):
        if self.has_rep:
            return super().take_ranges(rows)
        off, _ = self.buffers[1]
        chunks = self._take_plan(rows)[0]
        return [
            (off + int(o), int(n)) for o, n in zip(self.chunk_off[chunks].tolist(), self.chunk_bytes[chunks].tolist())
        ]

    def take(self, rows: np.ndarray, bufs) -> Piece:
        """Only the chunks holding ``rows`` are fetched and decoded, all at once."""
        if self.has_rep:
            return super().take(rows, bufs)
        plan = self._take_plan(rows)
        data, base = joined_buffers(bufs)  # one buffer per chunk
        return self._take_from(rows, plan, data, base)

    @property
    def planned_take(self) -> bool:
        """Whether ``take_plan`` / ``take_planned`` apply (no lists)."""
        return not self.has_rep

    def take_plan(self, rows: np.ndarray):
        """``(plan, offsets, sizes)``: the chunks holding ``rows`` and their
        byte ranges in the file, as arrays."""
        plan = self._take_plan(rows)
        chunks = plan[0]
        if chunks is _ZERO:  # the one chunk of a small page: its range, kept
            got = self.__dict__.get("_one_chunk")
            if got is None:
                got = self._one_chunk = (np.array([self.buffers[1][0]], dtype=np.int64), self.chunk_bytes)
            return (plan, *got)
        return plan, self.buffers[1][0] + self.chunk_off[chunks], self.chunk_bytes[chunks]

    def take_planned(self, rows: np.ndarray, plan, data: np.ndarray, base: np.ndarray) -> Piece:
        """``take`` of the planned chunks, found at ``base`` in ``data``."""
        return self._take_from(rows, plan, data, base)

    def _take_from(self, rows: np.ndarray, plan, data: np.ndarray, base: np.ndarray) -> Piece:
        chunks, slot, within = plan
        counts = self.counts[chunks]
        first_value = np.cumsum(counts) - counts
        pos = first_value[slot] + within
        _, defs, vals, _, picked = self._decode_chunks(data, base, chunks, pick=pos, at=(slot, within))
        if defs is not None:
            defs = defs[pos]
        arr = self._values_array(vals, defs, None if picked else pos)
        return self._finish(None, defs, arr, int(rows.size), int(rows.size))

    def decode(self, a: int, b: int, bufs) -> Piece:
        w = self.where
        c0, c1 = self._chunk_range(a, b)
        data = as_u8(bufs[0])
        base = self.chunk_off[c0 : c1 + 1] - self.chunk_off[c0]
        rep, defs, vals, total, _ = self._decode_chunks(data, base, np.arange(c0, c1 + 1))
        # rows [a, b) within the decoded chunks
        if not self.has_rep:
            i0 = a - int(self.item_start[c0])
            i1 = b - int(self.item_start[c0])
            if defs is not None:
                defs = defs[i0:i1]
            nlevels = i1 - i0
        else:
            starts_r = np.flatnonzero(rep == self.max_rep)
            fr0 = int(self.first_row[c0]) if self.first_row is not None else 0
            ra, rb = a - fr0, b - fr0
            if ra < 0 or rb > starts_r.size:
                raise CorruptFileError(None, f"{w}: repetition levels do not match the repetition index")
            la = int(starts_r[ra])
            lb = int(starts_r[rb]) if rb < starts_r.size else rep.size
            if defs is not None:
                visible = defs <= self.max_visible
                if int(np.count_nonzero(visible)) != total:
                    raise CorruptFileError(None, f"{w}: {total} values but a different number of visible levels")
                i0 = int(np.count_nonzero(visible[:la]))
                i1 = i0 + int(np.count_nonzero(visible[la:lb]))
                defs = defs[la:lb]
            else:
                if rep.size != total:
                    raise CorruptFileError(None, f"{w}: {total} values for {rep.size} levels")
                i0, i1 = la, lb
            rep = rep[la:lb]
            nlevels = lb - la
        arr = self._values_array(vals, defs, slice(i0, i1))
        return self._finish(rep, defs, arr, b - a, nlevels)

    def _check_null_indices(self, idx: np.ndarray, defs, num_items: int) -> np.ndarray:
        """Out-of-range indices (``num_items`` dictionary items) are only allowed
        on null items; point them at item 0."""
        bad = idx >= num_items
        if defs is not None:
            vis = defs[defs <= self.max_visible] if self.has_rep else defs
            if not np.any(bad & (vis == 0)):
                idx = idx.copy()
                idx[bad] = 0
                return idx
        raise CorruptFileError(None, f"{self.where}: dictionary index {int(idx.max())} out of range")


def decode_whole_pages(pages: list[MiniBlockPage], bufs) -> Piece:
    """Every row of ``pages`` (mini-block pages of one leaf without lists or a
    dictionary, sharing one layout message: the same encodings, so their
    chunks decode as one run) as one piece; ``bufs``: each page's chunk bytes
    (``data_ranges(0, num_rows)``).  A scan of many small files decodes each
    column in one pass instead of one per file."""
    p0 = pages[0]
    if len(pages) == 1:
        return p0.decode(0, p0.num_rows, bufs)
    datas = [as_u8(b) for b in bufs]
    sizes = np.fromiter((d.size for d in datas), dtype=np.int64, count=len(datas))
    data = np.concatenate(datas)
    page_base = np.cumsum(sizes) - sizes
    base = np.concatenate([p.chunk_off + int(at) for p, at in zip(pages, page_base.tolist())])
    cbytes = np.concatenate([p.chunk_bytes for p in pages])
    counts = np.concatenate([p.counts for p in pages])
    _, defs, vals, total, _ = p0._decode_at(data, base, cbytes, counts)
    rows = sum(p.num_rows for p in pages)
    if total != rows:
        raise CorruptFileError(None, f"{p0.where}: chunks of {len(pages)} pages hold {total} values, {rows} rows")
    if p0.has_dict:
        page_of = np.repeat(np.arange(len(pages)), [p.num_rows for p in pages])
        arr = _dictionary_values(pages, vals, defs, None, page_of)
        if arr is None:  # an index past its page's dictionary: each page says whether it may be
            return _one_by_one(pages, bufs)
    else:
        arr = p0._values_array(vals, defs)
    return p0._finish(None, defs, arr, rows, rows)


def _one_by_one(pages: list[MiniBlockPage], bufs) -> Piece:
    return _joined_pieces([p.decode(0, p.num_rows, [b]) for p, b in zip(pages, bufs)])


def _joined_pieces(pieces: list[Piece]) -> Piece:
    """Pieces of pages without lists, one after another, as one."""
    defs = None
    if any(x.defs is not None for x in pieces):
        defs = np.concatenate(
            [x.defs if x.defs is not None else np.zeros(x.num_levels, dtype=np.uint16) for x in pieces]
        )
    rows = sum(x.num_rows for x in pieces)
    return Piece(None, defs, pa.concat_arrays([x.values for x in pieces]), rows, rows)


def _dictionary_values(pages: list[MiniBlockPage], vals, defs, sel, page_of: np.ndarray) -> pa.Array | None:
    """The values of dictionary indices ``vals`` (``sel``: the positions kept)
    decoded from chunks of several pages, each index looked up in its own
    page's dictionary (``page_of``: the page of each kept value); None when an
    index lies past its page's dictionary (only a null may do that: the caller
    decodes page by page, which checks it)."""
    idx = vals.typed() if isinstance(vals, Fixed) else None
    if idx is None:
        raise CorruptFileError(None, f"{pages[0].where}: dictionary indices are not fixed-width integers")
    if sel is not None:
        idx = idx[sel]
    items = [p.dict_items for p in pages]
    sizes = np.fromiter((len(x) for x in items), dtype=np.int64, count=len(items))  # type: ignore[arg-type]
    idx = idx.astype(np.int64, copy=False)
    if idx.size and bool(np.any(idx >= sizes[page_of])):
        return None
    offsets = np.cumsum(sizes) - sizes
    return pa.concat_arrays(items).take(pa.array(idx + offsets[page_of]))


def take_from_pages(items: list) -> Piece:
    """The rows of ``items`` - ``(page, rows in the page, take plan, the
    planned chunks' bytes)`` of mini-block pages that decode in one run
    (:func:`joinable`) - as one piece: every chunk decoded together, values
    picked before expanding where the encoding allows."""
    try:
        return _take_joined(items)
    except _PageByPage:
        pieces = [p.take_planned(rows, plan, *joined_buffers(chunks)) for p, rows, plan, chunks in items]
        return _joined_pieces(pieces)


def _take_joined(items: list) -> Piece:
    p0 = items[0][0]
    datas = [c for _, _, _, chunks in items for c in chunks]
    sizes = np.fromiter((d.size for d in datas), dtype=np.int64, count=len(datas))
    data = datas[0] if len(datas) == 1 else np.concatenate(datas)
    base = sizes.cumsum() - sizes
    k = len(items)
    taken = np.fromiter((rows.size for _, rows, _, _ in items), dtype=np.int64, count=k)
    within = np.concatenate([plan[2] for _, _, plan, _ in items])
    if all(plan[0] is _ZERO for _, _, plan, _ in items):
        # one chunk per page (small files): a chunk per item, its rows all in it
        cbytes = np.fromiter((p.chunk_bytes[0] for p, _, _, _ in items), dtype=np.int64, count=k)
        counts = np.fromiter((p.num_items for p, _, _, _ in items), dtype=np.int64, count=k)
        slot = np.repeat(np.arange(k, dtype=np.int64), taken)
    else:
        cbytes = np.concatenate([p.chunk_bytes[plan[0]] for p, _, plan, _ in items])
        counts = np.concatenate([p.counts[plan[0]] for p, _, plan, _ in items])
        nchunks = np.fromiter((plan[0].size for _, _, plan, _ in items), dtype=np.int64, count=k)
        # each item's slots count from its first chunk among all the items' chunks
        slot = np.concatenate([plan[1] for _, _, plan, _ in items]) + (nchunks.cumsum() - nchunks).repeat(taken)
    first_value = counts.cumsum() - counts
    pos = first_value[slot] + within
    _, defs, vals, _, picked = p0._decode_at(data, base, cbytes, counts, pick=pos, at=(slot, within))
    if defs is not None:
        defs = defs[pos]
    if p0.has_dict:  # (indices are decoded whole: nothing picked)
        chunk_page = np.repeat(np.arange(len(items)), [plan[0].size for _, _, plan, _ in items])
        arr = _dictionary_values([p for p, _, _, _ in items], vals, defs, pos, chunk_page[slot])
        if arr is None:
            raise _PageByPage()
    else:
        arr = p0._values_array(vals, defs, None if picked else pos)
    return p0._finish(None, defs, arr, int(pos.size), int(pos.size))


class _PageByPage(Exception):
    """A joined take met an index past its page's dictionary: take page by page."""


def joinable(page: object, first: MiniBlockPage) -> bool:
    """Whether ``page`` decodes in one run with ``first`` (:func:`decode_whole_pages`)."""
    return (
        isinstance(page, MiniBlockPage)
        and (page.msg is first.msg or page.join_key == first.join_key)  # the same encodings, any item counts
        and page.st.kinds == first.st.kinds  # with the layers: the same canonical levels
        and (page.t is first.t or page.t.equals(first.t))
        and page.num_rows > 0
        and not page.has_rep
        and page.has_dict == first.has_dict  # dictionaries: each index looked up in its own page's
        and page.out is None
    )
