"""Arrow dictionary (pandas Categorical) arrays, shared by the readers and writers.

A dictionary field (logical type ``dict:<value>:<index>:<ordered>``) keeps its
values dictionary-encoded on disk, as pylance 14 writes them, in every file
version: each page stores its dictionary (the Arrow dictionary written, unused
or repeated items included) and one index per row, as wide as the field's
index type.  What differs per version is where nulls go:

* 2.0: a ``Dictionary`` array encoding with 0-based indices and no index
  validity: a null row points at a null item of the dictionary (the first one,
  or one appended for the page);
* 2.1/2.2: a mini-block page with a ``dictionary`` block; nulls are in the
  definition levels and the dictionary holds no nulls (a row pointing at a
  null item is written as a null row, the null items dropped).

Readers give back a DictionaryArray of exactly the field's type with the
page's dictionary (so a Categorical keeps its categories and their order),
nulls always in the indices (pylance's 2.0 reader hands out the null items,
which pandas refuses as categories); pages that hold plain values (all-null
pages) are cast to it.

Writers keep what pylance's reader can join: the dictionaries of one file's
column together within the index type (:class:`DictionaryBudget`; a table
starts a new file instead), and columns with 8- or 16-bit indices in one page
a file (:func:`one_page`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..arrow_compat import numpy_dtype
from ..errors import CorruptFileError, UnsupportedTypeError
from .schema import LanceField


class DictionaryOverflowError(UnsupportedTypeError):
    """Dictionary arrays that cannot be joined into one array of their type:
    together they hold more distinct values than the index type addresses."""


def index_dtype(t: pa.DictionaryType) -> np.dtype:
    """The numpy dtype of a dictionary type's indices."""
    return numpy_dtype(t.index_type)


def index_max(t: pa.DictionaryType) -> int:
    """The largest index the type's index type holds."""
    return int(np.iinfo(index_dtype(t)).max)


def one_page(t: pa.DictionaryType) -> bool:
    """Whether a column of dictionary type ``t`` is written as one page a file.

    pylance joins the pages a read spans by concatenating their dictionaries
    (each page holds its own, whole) and fails ("Dictionary key bigger than
    the key type") when their summed length outgrows the index type; its own
    writer keeps such columns in one page.  With 8- and 16-bit indices, whose
    dictionaries may hold most of the index range, Tessera does the same;
    wider indices are paged by size."""
    return t.index_type.bit_width <= 16


def index_bytes(arr: pa.Array) -> int:
    """The bytes of a dictionary array's indices (what its rows cost in a page:
    the dictionary, shared by the slices of one array, is stored once a page)."""
    return len(arr) * (arr.type.index_type.bit_width // 8)


def same_dictionary(a: pa.Array, b: pa.Array) -> bool:
    """Whether two dictionary arrays share one dictionary (the same memory),
    as the slices of one array do; a cheap test, no values compared."""
    da, db = a.dictionary, b.dictionary
    if len(da) != len(db) or da.offset != db.offset:
        return False
    return [x.address if x is not None else None for x in da.buffers()] == [
        x.address if x is not None else None for x in db.buffers()
    ]


def concat(arrays: list[pa.Array]) -> pa.Array:
    """Dictionary arrays of one type back to back: the indices joined when they
    share a dictionary, the dictionaries unified otherwise (Arrow's concat);
    :class:`DictionaryOverflowError` when the union outgrows the index type."""
    if len(arrays) == 1:
        return arrays[0]
    first = arrays[0]
    if all(same_dictionary(first, a) for a in arrays[1:]):
        indices = pa.concat_arrays([a.indices for a in arrays])
        return pa.DictionaryArray.from_arrays(indices, first.dictionary, ordered=first.type.ordered, safe=False)
    try:
        return pa.concat_arrays(arrays)
    except pa.ArrowInvalid as exc:
        if "index type" not in str(exc):
            raise
        raise DictionaryOverflowError(
            f"the dictionaries of {first.type} arrays hold more distinct values together than "
            f"{first.type.index_type} indices address: {exc}"
        ) from exc


class DictionaryBudget:
    """The distinct values the dictionary leaves of one file hold so far.

    A file's pages may carry different dictionaries; a reader joining them
    into one array (pylance, or Tessera reading a fragment) needs their union
    to fit the field's index type.  Only small index types (8 and 16 bits)
    can overflow in practice, so only those are followed; arrays sharing the
    dictionary last seen cost nothing."""

    def __init__(self, fields: list[LanceField]) -> None:
        self._leaves = {
            leaf.id: leaf
            for f in fields
            for leaf in f.walk()
            if leaf.is_dictionary and leaf.arrow_type.index_type.bit_width < 32
        }
        self._last: dict[int, pa.Array] = {}
        self._union: dict[int, pa.Array] = {}

    def _dictionary_arrays(self, fields: list[LanceField], columns):
        """(leaf, array) of every followed dictionary leaf in ``columns``."""
        for f, col in zip(fields, columns):
            chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
            for arr in chunks:
                yield from self._walk(f, arr)

    def _walk(self, f: LanceField, arr: pa.Array):
        if f.id in self._leaves:
            yield f, arr
        elif f.children and len(arr):
            if pa.types.is_struct(arr.type):
                for i, c in enumerate(f.children):
                    yield from self._walk(c, arr.field(i))
            elif pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
                yield from self._walk(f.children[0], arr.values)

    def _grown(self, batch, fields: list[LanceField]) -> dict[int, tuple[pa.Array, pa.Array]]:
        """The new (union, last array) of each leaf whose dictionary changes in ``batch``."""
        out: dict[int, tuple[pa.Array, pa.Array]] = {}
        for leaf, arr in self._dictionary_arrays(fields, batch.columns):
            last = out[leaf.id][1] if leaf.id in out else self._last.get(leaf.id)
            if not len(arr) or (last is not None and same_dictionary(last, arr)):
                continue
            union = out[leaf.id][0] if leaf.id in out else self._union.get(leaf.id)
            d = arr.dictionary
            out[leaf.id] = (d.unique() if union is None else pa.concat_arrays([union, d]).unique(), arr)
        return out

    def _too_many(self, grown: dict[int, tuple[pa.Array, pa.Array]]) -> tuple[LanceField, int] | None:
        for leaf_id, (union, _) in grown.items():
            leaf = self._leaves[leaf_id]
            count = len(union) - union.null_count
            if count > index_max(leaf.arrow_type) + 1:
                return leaf, count
        return None

    def fits(self, batch, fields: list[LanceField]) -> bool:
        """Whether ``batch`` (columns of the top-level ``fields``) can join this file."""
        return not self._leaves or self._too_many(self._grown(batch, fields)) is None

    def add(self, batch, fields: list[LanceField]) -> None:
        """Count ``batch`` in; :class:`UnsupportedTypeError` (nothing counted)
        when a dictionary leaf would hold more distinct values than its index
        type addresses."""
        if not self._leaves:
            return
        grown = self._grown(batch, fields)
        over = self._too_many(grown)
        if over is not None:
            leaf, count = over
            t = leaf.arrow_type
            raise UnsupportedTypeError(
                f"field {leaf.name!r}: its dictionaries hold {count} distinct values together, more than "
                f"the {t.index_type} indices of {t} address; use a wider index type"
            )
        for leaf_id, (union, arr) in grown.items():
            self._union[leaf_id] = union
            self._last[leaf_id] = arr


def as_dictionary(arr: pa.Array, t: pa.DictionaryType, where: str | None = None) -> pa.Array:
    """``arr`` as a DictionaryArray of exactly type ``t``: a dictionary array
    keeps its dictionary (its indices cast to ``t``'s index type), values of
    ``t``'s value type are dictionary-encoded (items in order of first
    appearance), null-typed values become nulls.  Anything else, or indices
    that do not fit, is a :class:`CorruptFileError` (the file contradicts its
    schema)."""
    if arr.type.equals(t):
        return arr
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), t)
    try:
        if pa.types.is_dictionary(arr.type):
            if not arr.type.value_type.equals(t.value_type):
                raise CorruptFileError(where, f"{arr.type} values found for a {t} column")
            indices = arr.indices if arr.type.index_type.equals(t.index_type) else arr.indices.cast(t.index_type)
            return pa.DictionaryArray.from_arrays(indices, arr.dictionary, ordered=t.ordered, safe=False)
        if not arr.type.equals(t.value_type):
            raise CorruptFileError(where, f"{arr.type} values found for a {t} column")
        if arr.null_count == len(arr):
            return pa.nulls(len(arr), t)
        encoded = pc.dictionary_encode(arr)
        indices = encoded.indices.cast(t.index_type)
        return pa.DictionaryArray.from_arrays(indices, encoded.dictionary, ordered=t.ordered, safe=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise CorruptFileError(where, f"values cannot be read as {t}: {exc}") from exc


def from_indices(
    idx: np.ndarray, items: pa.Array, t: pa.DictionaryType, valid: np.ndarray | None = None, where: str | None = None
) -> pa.Array:
    """A DictionaryArray of type ``t`` from stored indices (any integer dtype)
    into ``items`` (of ``t``'s value type); ``valid`` (bool per row, None: all
    valid) marks null rows, whose stored index is not looked at.  Indices out
    of range of the items or of the index type are a :class:`CorruptFileError`."""
    n = int(idx.size)
    if valid is not None and valid.all():
        valid = None
    live = idx if valid is None else idx[valid]
    if live.size:
        hi, lo = int(live.max()), int(live.min())
        if lo < 0 or hi >= len(items):
            bad = hi if hi >= len(items) else lo
            raise CorruptFileError(where, f"dictionary index {bad} out of range of its {len(items)} items")
        if hi > index_max(t):
            raise CorruptFileError(where, f"dictionary index {hi} does not fit the {t.index_type} indices of {t}")
    dt = index_dtype(t)
    if valid is not None:
        idx = np.where(valid, idx, 0)
    codes = np.ascontiguousarray(idx.astype(dt, copy=False))
    bitmap = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    indices = pa.Array.from_buffers(t.index_type, n, [bitmap, pa.py_buffer(codes)])
    return pa.DictionaryArray.from_arrays(indices, items, ordered=t.ordered, safe=False)


def normalize_nulls(arr: pa.Array) -> pa.Array:
    """``arr`` with every null in its indices: rows pointing at a null item
    become null rows and the null items leave the dictionary (as pylance does
    before writing 2.1/2.2 pages, whose dictionaries hold no nulls)."""
    d = arr.dictionary
    if d.null_count == 0:
        return arr
    item_valid = np.asarray(d.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    remap = np.cumsum(item_valid) - 1
    idx = arr.indices
    codes = np.asarray(idx.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    valid = item_valid[codes] if codes.size else np.zeros(0, dtype=bool)
    if idx.null_count:
        valid &= np.asarray(idx.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    new_codes = np.where(valid, remap[codes] if codes.size else codes, 0)
    return from_indices(new_codes, d.filter(pa.array(item_valid)), arr.type, valid)
