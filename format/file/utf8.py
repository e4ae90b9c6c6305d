"""UTF-8 validation of decoded string data.

Arrow's ``string`` and ``large_string`` promise UTF-8, and Python code that
reads such a value trusts it (``as_py`` raises ``UnicodeDecodeError`` on bad
bytes, long after the read that returned them).  A flipped bit in a string
page would otherwise reach the user as text, so every array a data file
decodes is checked once, as a whole, before it leaves the reader
(:func:`check_array`), and a failure is a :class:`CorruptFileError` naming the
file and the column.

Cost: with the C accelerator (``_fastlanes.c``'s ``utf8_valid``) the bytes
an array's values span are validated as one region, 16 bytes a step (64 at a
time while they are ASCII), and then each value is checked to start on a
character boundary (skipped for ASCII, where every cut is one): well under a
nanosecond a byte.  Without it, the bytes are checked for ASCII by numpy (a
``max``, memory speed) and any other array by Arrow's own per-value UTF-8
check (the cast of its bytes from binary to string).  Whenever the fast check
is not sure (bytes under a null slot, offsets it cannot vouch for), Arrow's
check, which looks at valid slots only, decides.  A dictionary is checked
through its dictionary, not its indices.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..errors import CorruptFileError

_ASCII_MAX = 0x7F


def _value_bytes(arr: pa.Array) -> np.ndarray | None:
    """The bytes the values of string array ``arr`` span (its slice only);
    None when it has no data buffer."""
    bufs = arr.buffers()
    if len(bufs) < 3 or bufs[1] is None or bufs[2] is None or len(arr) == 0:
        return None
    width = np.dtype(np.int64 if pa.types.is_large_string(arr.type) else np.int32)
    data = np.frombuffer(bufs[2], dtype=np.uint8)
    try:
        offsets = np.frombuffer(bufs[1], dtype=width, count=len(arr) + 1, offset=arr.offset * width.itemsize)
    except ValueError:  # malformed offsets: let Arrow's check say so
        return data
    lo, hi = int(offsets[0]), int(offsets[-1])
    if not 0 <= lo <= hi <= data.size:  # malformed offsets: let Arrow's check say so
        return data
    return data[lo:hi]


def _native_check():
    from .encodings import fastlanes

    return getattr(fastlanes.native, "utf8_valid", None)


#: the C check (``_fastlanes.c``'s ``utf8_valid``), when the accelerator was built
_NATIVE = _native_check()


def _utf8_ok(arr: pa.Array) -> bool:
    """Whether every valid value of string array ``arr`` is UTF-8."""
    bufs = arr.buffers()
    if len(arr) == 0 or len(bufs) < 3 or bufs[1] is None or bufs[2] is None:
        return True
    if _NATIVE is not None:
        width = 8 if pa.types.is_large_string(arr.type) else 4
        try:
            if _NATIVE(bufs[2], bufs[1], width, arr.offset, len(arr)):
                return True
        except ValueError:  # offsets shorter than the array: Arrow's check below says what is wrong
            pass
    else:
        values = _value_bytes(arr)
        if values is None or values.size == 0 or int(values.max()) <= _ASCII_MAX:
            return True
    binary = pa.large_binary() if pa.types.is_large_string(arr.type) else pa.binary()
    try:
        arr.view(binary).cast(arr.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return False
    return True


def _first_bad(arr: pa.Array) -> int:
    """The index of the first invalid value of ``arr`` (which has one),
    found by halving: one Arrow check per step."""
    lo, n = 0, len(arr)
    while n > 1:
        half = n // 2
        if not _utf8_ok(arr.slice(lo, half)):
            n = half
        else:
            lo, n = lo + half, n - half
    return lo


def check_array(
    arr: pa.Array, path: str | None, column: str, first_row: int | None = 0, rows: np.ndarray | None = None
) -> None:
    """Raise :class:`CorruptFileError` when a string value anywhere in ``arr``
    (top level, struct fields, list items, map keys and values, dictionary
    values) is not valid UTF-8.

    Args:
        arr: an array decoded from data file ``path``.
        path: the data file, for the message.
        column: the column's name (its path for nested values), for the message.
        first_row: the file row of ``arr[0]`` when ``arr`` holds consecutive
            rows of the file (the message names the bad row); None otherwise.
        rows: instead of ``first_row``, the file row of each value of ``arr``
            (a take).

    Raises:
        CorruptFileError: string data that is not UTF-8.
    """
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        if not _utf8_ok(arr):
            bad = _first_bad(arr)
            if rows is not None:
                where = f"row {int(rows[bad])}"
            elif first_row is not None:
                where = f"row {first_row + bad}"
            else:
                where = f"value {bad} of this read"
            raise CorruptFileError(
                path,
                f"column {column!r}: string data is not valid UTF-8 ({where}); the file is damaged - "
                "restore it from a copy or rewrite the rows",
            )
        return
    if not _may_hold_strings(t):
        return
    if pa.types.is_dictionary(t):
        check_array(arr.dictionary, path, column, None)
    elif pa.types.is_struct(t):
        for i in range(t.num_fields):
            check_array(arr.field(i), path, f"{column}.{t.field(i).name}", first_row, rows)
    elif pa.types.is_map(t):
        check_array(arr.keys, path, f"{column}.key", None)
        check_array(arr.items, path, f"{column}.value", None)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        check_array(arr.flatten(), path, f"{column}.{t.value_field.name}", None)
    elif isinstance(arr, pa.ExtensionArray):
        check_array(arr.storage, path, column, first_row, rows)


def _may_hold_strings(t: pa.DataType) -> bool:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return True
    if pa.types.is_dictionary(t):
        return _may_hold_strings(t.value_type)
    if isinstance(t, pa.ExtensionType):
        return _may_hold_strings(t.storage_type)
    return any(_may_hold_strings(t.field(i).type) for i in range(t.num_fields))


def check_chunks(chunks: list[pa.Array], path: str | None, column: str, first_row: int) -> None:
    """:func:`check_array` over consecutive arrays of one column starting at
    file row ``first_row``."""
    if not chunks or not _may_hold_strings(chunks[0].type):
        return
    row = first_row
    for c in chunks:
        check_array(c, path, column, row)
        row += len(c)
