"""Blob columns: binary values stored out of line, and read without loading them.

A blob column is a ``large_binary`` column whose field metadata says
``lance-encoding:blob`` = ``true``.  Its pages hold one *description* per
row, and the bytes live elsewhere (docs/reference/blob-layout.md has the
whole story, learnt from pylance 14's bytes):

* **v1** (file formats 2.0, 2.1 and 2.2): a description is ``(position,
  size)``, two u64, and the bytes are ``size`` bytes at absolute ``position``
  of the same data file.  An empty value is ``(0, 0)``.  A null is
  ``(1, 0)`` in 2.0; in 2.1+ a null is ``size`` 0 with the row's repetition
  and definition levels in ``position`` (``def << 16 | rep``), so it is
  never ``(0, 0)``.
* **v2** (pylance 14's tables of format 2.2): the table's schema has the
  extension type ``lance.blob.v2``; a data file stores a packed struct
  ``(kind u8, position u64, size u64, blob_id u32, blob_uri string)`` per
  row: kind 0 inline (bytes in the data file, like v1), 1 packed and 2
  dedicated (bytes in a *sidecar* file ``data/<data file stem>/<name>.blob``,
  ``<name>`` the 32 bits of ``blob_id`` reversed, in binary), 3 external
  (``blob_uri``, outside the table).

Tessera reads every blob column as its bytes (pylance's ``all_binary``), and
:class:`BlobFile` opens one value as a file-like object that reads only the
bytes asked for (pylance's ``take_blobs``).  It writes new blob columns in the
v1 layout, which pylance 14 and LanceDB read in every file version, and an
existing v2 column (LanceDB's and pylance's 2.2 tables) in the v2 layout with
every value inline (:mod:`.blob_write`).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..errors import CorruptFileError, UnsupportedEncodingError

#: a v1 description: where the bytes are in the data file
V1_DESCRIPTION = pa.struct([pa.field("position", pa.uint64(), False), pa.field("size", pa.uint64(), False)])
#: blob v2 descriptor kinds
INLINE, PACKED, DEDICATED, EXTERNAL = 0, 1, 2, 3
#: the null description of file format 2.0
V20_NULL_POSITION = 1


def sidecar_name(blob_id: int) -> str:
    """The file name of blob v2 sidecar ``blob_id`` in its data file's folder:
    the id's 32 bits reversed, in binary (pylance 14's ``blob_path``)."""
    if not 0 <= blob_id < 1 << 32:
        raise ValueError(f"blob id {blob_id} is not a u32")
    return f"{int(f'{blob_id:032b}'[::-1], 2):032b}.blob"


def data_file_stem(name: str) -> str:
    """The folder of a data file's sidecars: its name without ``.lance``."""
    return name[: -len(".lance")] if name.endswith(".lance") else name


@dataclass(frozen=True)
class BlobRef:
    """Where one blob's bytes are: ``size`` bytes at ``position`` of the data
    file itself (``sidecar`` None) or of sidecar file ``sidecar``."""

    position: int
    size: int
    sidecar: str | None = None


@dataclass
class BlobRefs:
    """Where the blobs of consecutive descriptions are, as arrays: ``size``
    bytes at ``position`` of the data file (``blob_id`` -1) or of sidecar
    ``blob_id``; ``valid`` False for a null."""

    position: np.ndarray  # int64
    size: np.ndarray  # int64
    valid: np.ndarray  # bool
    blob_id: np.ndarray  # int64, -1: the data file

    def __len__(self) -> int:
        return int(self.valid.size)

    def __getitem__(self, i: int) -> BlobRef | None:
        if not self.valid[i]:
            return None
        bid = int(self.blob_id[i])
        return BlobRef(int(self.position[i]), int(self.size[i]), None if bid < 0 else sidecar_name(bid))


def _u64(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.uint64)


def _valid(desc: pa.Array) -> np.ndarray:
    if not desc.null_count:
        return np.ones(len(desc), dtype=bool)
    return np.asarray(desc.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _checked(pos: np.ndarray, size: np.ndarray, path: str | None, column: str) -> tuple[np.ndarray, np.ndarray]:
    """The u64 positions and sizes as int64, refusing what cannot be a byte range."""
    limit = np.uint64(1 << 62)
    if np.any(pos >= limit) or np.any(size >= limit):
        raise CorruptFileError(path, f"blob column {column!r}: a description lies beyond any file")
    return pos.astype(np.int64), size.astype(np.int64)


def refs_v1(desc: pa.StructArray, version: str, path: str | None, column: str) -> BlobRefs:
    """Where the blobs of v1 descriptions are (a null: not valid)."""
    pos, size = _u64(desc.field("position")), _u64(desc.field("size"))
    valid = _valid(desc)
    if version == "2.0":
        valid &= ~((pos == V20_NULL_POSITION) & (size == 0))
    else:
        valid &= ~((pos != 0) & (size == 0))
    size = np.where(valid, size, 0).astype(np.uint64)
    pos = np.where(valid & (size > 0), pos, 0).astype(np.uint64)
    p, n = _checked(pos, size, path, column)
    return BlobRefs(p, n, valid, np.full(valid.size, -1, dtype=np.int64))


def refs_v2(desc: pa.StructArray, path: str | None, column: str, rows: np.ndarray | None = None) -> BlobRefs:
    """Where the blobs of v2 descriptors are (a null: not valid); an external
    blob (outside the table) is refused (``rows``: the file rows of
    ``desc``, for the message)."""
    valid = _valid(desc)
    kind = np.asarray(desc.field("kind").to_numpy(zero_copy_only=False), dtype=np.int64)
    pos, size = _u64(desc.field("position")), _u64(desc.field("size"))
    blob_id = np.asarray(desc.field("blob_id").to_numpy(zero_copy_only=False), dtype=np.int64)
    external = valid & (kind == EXTERNAL)
    if external.any():
        i = int(np.flatnonzero(external)[0])
        uri = desc.field("blob_uri")[i].as_py()
        where = f"row {int(rows[i])}" if rows is not None else "a value"
        raise UnsupportedEncodingError(
            f"{path}: blob column {column!r}: {where} is an external blob {uri!r} (outside the table); "
            "Tessera reads only blobs stored in the table - read this one with pylance (take_blobs)"
        )
    unknown = valid & ~np.isin(kind, (INLINE, PACKED, DEDICATED))
    if unknown.any():
        k = int(kind[np.flatnonzero(unknown)[0]])
        raise UnsupportedEncodingError(f"{path}: blob column {column!r}: blob kind {k} is not supported")
    size = np.where(valid, size, 0).astype(np.uint64)
    p, n = _checked(np.where(valid, pos, 0).astype(np.uint64), size, path, column)
    return BlobRefs(p, n, valid, np.where(valid & (kind != INLINE), blob_id, -1))


SidecarOpener = Callable[[str], object]


def read_values(
    refs: BlobRefs, io_: object, open_sidecar: SidecarOpener | None, path: str | None, column: str
) -> pa.Array:
    """The bytes of ``refs`` as a large_binary array: each file (the data
    file, a sidecar) is read once, in place when it is mapped, else with one
    request for all its ranges."""
    n = len(refs)
    lengths = np.where(refs.valid, refs.size, 0)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = np.empty(int(offsets[-1]), dtype=np.uint8)
    wanted = lengths > 0
    for bid in np.unique(refs.blob_id[wanted]).tolist():
        rows = np.flatnonzero(wanted & (refs.blob_id == bid))
        sidecar = None if bid < 0 else sidecar_name(int(bid))
        reader = io_ if sidecar is None else _sidecar(open_sidecar, sidecar, path, column)
        pos, size = refs.position[rows], refs.size[rows]
        limit = reader.size()  # type: ignore[attr-defined]
        if int((pos + size).max()) > limit:
            where = f"sidecar {sidecar!r}" if sidecar else "the data file"
            raise CorruptFileError(
                path, f"blob column {column!r}: a value lies past the end of {where} ({limit} bytes)"
            )
        got = _gather(reader, pos, size)
        if rows.size == int(np.count_nonzero(wanted)):  # one file holds every value
            data[:] = got
        else:
            at = np.repeat(offsets[rows] - (np.cumsum(size) - size), size) + np.arange(got.size)
            data[at] = got
        if sidecar is not None:
            close = getattr(reader, "close", None)
            if close is not None:
                close()
    nulls = int(n - np.count_nonzero(refs.valid))
    validity = pa.py_buffer(np.packbits(refs.valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(
        pa.large_binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls
    )


def _gather(reader: object, pos: np.ndarray, size: np.ndarray) -> np.ndarray:
    """The bytes at ``pos``/``size`` of ``reader``, back to back."""
    whole = getattr(reader, "whole_buffer", None)
    buf = whole() if whole is not None else None
    if buf is not None:
        src = np.frombuffer(buf, dtype=np.uint8)
        if pos.size > 64 and int(size.sum()) <= 256 * pos.size:  # many small values: one gather
            first = np.cumsum(size) - size
            return src[np.arange(int(size.sum()), dtype=np.int64) + np.repeat(pos - first, size)]
        return np.concatenate([src[p : p + k] for p, k in zip(pos.tolist(), size.tolist())])
    got = reader.read_ranges(list(zip(pos.tolist(), size.tolist())))  # type: ignore[attr-defined]
    return np.concatenate([np.frombuffer(b, dtype=np.uint8) for b in got])


def open_files(refs: BlobRefs, order: np.ndarray, io_: object, open_sidecar: SidecarOpener) -> list[BlobFile | None]:
    """A :class:`BlobFile` of ``refs[k]`` for each ``k`` of ``order`` (None
    for a null): over ``io_`` for a value in the data file, over a sidecar
    opened for it (and closed with it) otherwise."""
    out: list[BlobFile | None] = []
    for k in order.tolist():
        ref = refs[k]
        if ref is None:
            out.append(None)
        elif ref.sidecar is None:
            out.append(BlobFile(io_, ref.position, ref.size))
        else:
            out.append(BlobFile(open_sidecar(ref.sidecar), ref.position, ref.size, owns_reader=True))
    return out


def _sidecar(open_sidecar: SidecarOpener | None, name: str, path: str | None, column: str) -> object:
    if open_sidecar is None:
        raise UnsupportedEncodingError(
            f"{path}: blob column {column!r} keeps values in sidecar file {name!r}, and this reader was opened "
            "without the table (open the data file through its table, or by its local path)"
        )
    try:
        return open_sidecar(name)
    except FileNotFoundError as exc:
        raise CorruptFileError(path, f"blob column {column!r}: its sidecar file {name!r} is missing") from exc


def local_sidecar_opener(data_file_path: str) -> SidecarOpener:
    """Sidecars of a local data file: ``<path without .lance>/<name>``."""
    from .io import LocalFileReader

    folder = data_file_stem(data_file_path)

    def open_(name: str) -> object:
        full = os.path.join(folder, name)
        if not os.path.isfile(full):
            raise FileNotFoundError(full)
        return LocalFileReader(full)

    return open_


class BlobFile(io.RawIOBase):
    """One blob value as a read-only, seekable binary file: reads fetch only
    the bytes asked for, from the data file (or sidecar) holding the value.

    ``size()`` is the value's length; ``read_range(offset, length)`` reads
    without moving the cursor (as pylance's ``BlobFile``).  Close it (or use
    it as a context manager) when done; the file it reads stays open while
    any ``BlobFile`` over it is open."""

    def __init__(self, reader: object, position: int, size: int, owns_reader: bool = False) -> None:
        super().__init__()
        self._reader = reader
        self._position = position
        self._size = size
        self._cursor = 0
        self._owns = owns_reader

    def size(self) -> int:
        """The blob's length in bytes."""
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        self._check_open()
        return self._cursor

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check_open()
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._cursor, io.SEEK_END: self._size}.get(whence)
        if base is None:
            raise ValueError(f"invalid whence {whence}")
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._cursor = base + offset
        return self._cursor

    def read_range(self, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` of the blob (fewer at its end);
        the cursor does not move."""
        self._check_open()
        if offset < 0 or length < 0:
            raise ValueError("offset and length must not be negative")
        start = min(offset, self._size)
        n = min(length, self._size - start)
        if n == 0:
            return b""
        (buf,) = self._reader.read_ranges([(self._position + start, n)])  # type: ignore[attr-defined]
        return bytes(memoryview(buf))

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """:meth:`read_range` of each ``(offset, length)``, in one request."""
        self._check_open()
        spans = []
        for offset, length in ranges:
            if offset < 0 or length < 0:
                raise ValueError("offset and length must not be negative")
            start = min(offset, self._size)
            spans.append((self._position + start, min(length, self._size - start)))
        want = [s for s in spans if s[1]]
        got = iter(self._reader.read_ranges(want) if want else [])  # type: ignore[attr-defined]
        return [bytes(memoryview(next(got))) if n else b"" for _, n in spans]

    def readinto(self, b) -> int:
        view = memoryview(b).cast("B")
        data = self.read_range(self._cursor, len(view))
        view[: len(data)] = data
        self._cursor += len(data)
        return len(data)

    def readall(self) -> bytes:
        data = self.read_range(self._cursor, max(self._size - self._cursor, 0))
        self._cursor += len(data)
        return data

    def close(self) -> None:
        if not self.closed and self._owns:
            close = getattr(self._reader, "close", None)
            if close is not None:
                close()
        super().close()

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed blob file")

    def __repr__(self) -> str:
        return f"<BlobFile size={self._size}>"
