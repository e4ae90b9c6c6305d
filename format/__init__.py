"""Tessera's format library, bytes in and bytes out: the file format (:mod:`.file`:
Lance data files) and the table format built on it (:mod:`.table`: manifests,
fragments, deletion files, row ids, indices).

Public entry points::

    format.write_file(path, data, file_version="2.2")
    format.read_file(path, columns=None) -> pyarrow.Table
    format.FileWriter / format.FileReader for streaming, ranges and take
"""

from .errors import (
    ColumnNotFoundError,
    CorruptFileError,
    FormatError,
    RowOutOfRangeError,
    SchemaMismatchError,
    TruncatedFileError,
    UnsupportedEncodingError,
    UnsupportedTypeError,
)
from .file.datafile import DEFAULT_PAGE_SIZE, FileReader, FileWriter, read_file, write_file

__all__ = [
    "ColumnNotFoundError",
    "CorruptFileError",
    "DEFAULT_PAGE_SIZE",
    "FileReader",
    "FileWriter",
    "FormatError",
    "RowOutOfRangeError",
    "SchemaMismatchError",
    "TruncatedFileError",
    "UnsupportedEncodingError",
    "UnsupportedTypeError",
    "read_file",
    "write_file",
]
