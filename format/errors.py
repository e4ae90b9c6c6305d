"""The exceptions of the format library.

Every problem with bytes on disk or with a request the format library cannot
honour raises a subclass of :class:`FormatError`.  Callers catch the class that
matches what they can act on; the message says what was wrong and where.
"""

from __future__ import annotations


class TesseraError(Exception):
    """The root of every error Tessera raises, in every layer (format, stores,
    commit, catalog).  It lives here because ``format`` is the bottom layer;
    ``catalog.errors`` re-exports it."""


class FormatError(TesseraError):
    """Base class of every error raised by ``format``."""


class CorruptFileError(FormatError):
    """A file's bytes contradict the format (bad magic, offsets out of range,
    unparsable protobuf, inconsistent lengths)."""

    def __init__(self, path: str | None, detail: str) -> None:
        self.path = path
        self.detail = detail
        where = f" {path!r}" if path else ""
        super().__init__(f"corrupt Lance file{where}: {detail}")


class TruncatedFileError(CorruptFileError):
    """A file is shorter than its own metadata says it must be."""


class ChecksumMismatchError(CorruptFileError):
    """A data file's bytes do not match the CRC32C checksums Tessera recorded
    in it when it wrote the file: they changed since (a flipped bit on the
    disk, a damaged copy).  Nothing read from those bytes is returned."""


class InvalidSettingError(FormatError, ValueError):
    """A setting of the format library (such as the checksum mode) is not
    one of the values it takes."""


class UnsupportedEncodingError(FormatError):
    """A page uses an encoding, layout or protobuf field this library does not
    decode.  Raised instead of guessing, so no wrong data is ever returned."""


class UnsupportedTypeError(FormatError):
    """An Arrow or Lance type this library cannot write or read (for the file
    version asked for)."""


class SchemaMismatchError(FormatError):
    """Data handed to a writer does not match the writer's schema."""


class InvalidColumnNameError(SchemaMismatchError, ValueError):
    """A top-level column name Lance refuses or cannot read back: one with a
    ``.`` (pylance 14 refuses to write it), a backtick or none at all (pylance
    writes those but cannot read the table's rows).  Nested field names may
    hold any of them."""


class NotABlobColumnError(FormatError, ValueError):
    """A blob operation (``take_blobs``) on a column that is not a blob
    column (``lance-encoding:blob`` metadata on large_binary, or pylance's
    ``lance.blob.v2``)."""


class ColumnNotFoundError(FormatError, KeyError):
    """A requested column name or index does not exist in the file."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class RowOutOfRangeError(FormatError, IndexError):
    """A requested row index or range lies outside the file."""


class FileAccessError(FormatError, OSError):
    """A local file that cannot be opened or read as a file: it is missing, a
    directory, not readable, or its name is one the operating system refuses
    (an embedded NUL byte, a name too long)."""


class MissingFileError(FileAccessError, FileNotFoundError):
    """A local file that does not exist."""


class ClosedFileError(FormatError, ValueError):
    """A read through a reader that was closed (a ValueError, as Python's own
    I/O on a closed file)."""


class InvalidPathError(FormatError, ValueError):
    """A path inside a table that its object store cannot name at all (a name
    too long for the file system, a NUL byte...).  The stores raise their own
    ``InvalidURIError`` for it; the table format raises this instead."""


class RewriteError(FormatError):
    """Fragments that cannot be rewritten as asked (compaction's data step):
    their rows do not fit in one file, or their row ids are missing."""
