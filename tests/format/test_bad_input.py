"""Broken files give typed errors from format.errors: never a crash, hang or wrong data."""

from __future__ import annotations

import os
import struct

import numpy as np
import pyarrow as pa
import pytest

from tessera import format as tformat
from tessera.format.errors import (
    ColumnNotFoundError,
    CorruptFileError,
    FormatError,
    TruncatedFileError,
    UnsupportedEncodingError,
)
from tessera.format.file.checksum import checksums
from tessera.format.file.container import ARRAY_ENCODING_URL, FOOTER_SIZE, PAGE_LAYOUT_URL, pack_any
from tessera.format.protos import encodings21_pb2, encodings_pb2, file2_pb2

VERSIONS = ("2.0", "2.1", "2.2")
TABLE = pa.table({"i": np.arange(1000, dtype=np.int64), "s": [f"v{i}" for i in range(1000)]})


@pytest.fixture(params=VERSIONS)
def good(request, tmp_path):
    """A file without checksums, as pylance writes them: these tests reach the
    reader's own checks (with checksums, the damage is caught before them:
    tests/format/test_checksum.py)."""
    path = tmp_path / f"good-{request.param}.lance"
    with checksums("off"):
        tformat.write_file(path, TABLE, file_version=request.param)
    return path, path.read_bytes(), request.param


def _read(data: bytes, tmp_path) -> pa.Table:
    p = tmp_path / "bad.lance"
    p.write_bytes(data)
    return tformat.read_file(p)


def test_truncated_everywhere(good, tmp_path):
    _, data, _ = good
    for cut in (0, 1, 10, FOOTER_SIZE - 1, len(data) // 2, len(data) - 1):
        with pytest.raises(FormatError):
            _read(data[:cut], tmp_path)


def test_truncated_tail_is_typed(good, tmp_path):
    _, data, _ = good
    with pytest.raises(TruncatedFileError):
        _read(data[:20], tmp_path)


def test_wrong_magic(good, tmp_path):
    _, data, _ = good
    with pytest.raises(CorruptFileError, match="magic"):
        _read(data[:-4] + b"LANX", tmp_path)


def test_footer_offsets_out_of_range(good, tmp_path):
    _, data, _ = good
    footer = bytearray(data[-FOOTER_SIZE:])
    struct.pack_into("<Q", footer, 0, len(data) * 10)  # column metadata start past the end
    with pytest.raises(CorruptFileError):
        _read(data[:-FOOTER_SIZE] + bytes(footer), tmp_path)
    footer = bytearray(data[-FOOTER_SIZE:])
    struct.pack_into("<I", footer, 28, 10_000)  # more columns than the table holds
    with pytest.raises(CorruptFileError):
        _read(data[:-FOOTER_SIZE] + bytes(footer), tmp_path)


def test_unknown_file_version(good, tmp_path):
    _, data, _ = good
    footer = bytearray(data[-FOOTER_SIZE:])
    struct.pack_into("<HH", footer, 32, 3, 7)
    with pytest.raises(UnsupportedEncodingError, match="3.7"):
        _read(data[:-FOOTER_SIZE] + bytes(footer), tmp_path)


def _column_meta_span(data: bytes, col: int) -> tuple[int, int]:
    cm_start, cmo, gbo, ngb, ncols, *_ = struct.unpack("<QQQIIHH4s", data[-FOOTER_SIZE:])
    return struct.unpack_from("<QQ", data, cmo + 16 * col)


def test_corrupt_column_protobuf(good, tmp_path):
    _, data, _ = good
    pos, length = _column_meta_span(data, 0)
    broken = data[:pos] + b"\xff" * length + data[pos + length :]
    with pytest.raises(CorruptFileError):
        _read(broken, tmp_path)


def test_corrupt_file_descriptor(good, tmp_path):
    _, data, _ = good
    cm_start, cmo, gbo, *_ = struct.unpack("<QQQIIHH4s", data[-FOOTER_SIZE:])
    gpos, glen = struct.unpack_from("<QQ", data, gbo)
    broken = data[:gpos] + b"\x0a\xff\xff\xff" + data[gpos + 4 :]
    with pytest.raises(CorruptFileError):
        _read(broken, tmp_path)


def _replace_column_meta(data: bytes, col: int, meta: file2_pb2.ColumnMetadata) -> bytes:
    """Rebuild the file's tail with column ``col``'s metadata replaced."""
    cm_start, cmo, gbo, ngb, ncols, major, minor, magic = struct.unpack("<QQQIIHH4s", data[-FOOTER_SIZE:])
    metas = []
    for i in range(ncols):
        pos, length = struct.unpack_from("<QQ", data, cmo + 16 * i)
        metas.append(meta.SerializeToString() if i == col else data[pos : pos + length])
    out = bytearray(data[:cm_start])
    table = b""
    for m in metas:
        table += struct.pack("<QQ", len(out), len(m))
        out += m
    new_cmo = len(out)
    out += table
    new_gbo = len(out)
    out += data[gbo : gbo + 16 * ngb]
    out += struct.pack("<QQQIIHH4s", cm_start, new_cmo, new_gbo, ngb, ncols, major, minor, magic)
    return bytes(out)


def _first_page_meta(data: bytes) -> file2_pb2.ColumnMetadata:
    pos, length = _column_meta_span(data, 0)
    cm = file2_pb2.ColumnMetadata()
    cm.ParseFromString(data[pos : pos + length])
    return cm


def test_unknown_encoding(good, tmp_path):
    _, data, version = good
    cm = _first_page_meta(data)
    if version == "2.0":
        enc = encodings_pb2.ArrayEncoding()
        enc.byte_stream_split.bits_per_value = 64  # never written by 2.0 writers
        url = ARRAY_ENCODING_URL
    else:
        enc = encodings21_pb2.PageLayout()
        enc.ParseFromString(b"\x4a\x00")  # a layout kind of a newer Lance (PageLayout field 9)
        url = PAGE_LAYOUT_URL
    cm.pages[0].encoding.direct.encoding = pack_any(url, enc)
    with pytest.raises(UnsupportedEncodingError):
        _read(_replace_column_meta(data, 0, cm), tmp_path)


def test_wrong_encoding_type_url(good, tmp_path):
    _, data, version = good
    cm = _first_page_meta(data)
    cm.pages[0].encoding.direct.encoding = pack_any("/lance.encodings.Mystery", encodings_pb2.ArrayEncoding())
    with pytest.raises(UnsupportedEncodingError, match="Mystery"):
        _read(_replace_column_meta(data, 0, cm), tmp_path)


def test_page_buffer_out_of_range(good, tmp_path):
    _, data, _ = good
    cm = _first_page_meta(data)
    cm.pages[0].buffer_offsets[0] = len(data) * 4
    with pytest.raises(CorruptFileError):
        _read(_replace_column_meta(data, 0, cm), tmp_path)


def test_column_missing_encoding(good, tmp_path):
    _, data, _ = good
    cm = _first_page_meta(data)
    cm.ClearField("encoding")
    with pytest.raises(CorruptFileError, match="missing its encoding"):
        _read(_replace_column_meta(data, 0, cm), tmp_path)


def test_column_index_and_name_out_of_range(good):
    path, _, _ = good
    reader = tformat.FileReader(path)
    with pytest.raises(ColumnNotFoundError):
        reader.read(columns=["nope"])
    with pytest.raises(ColumnNotFoundError):
        reader.read(columns=[7])
    with pytest.raises(ColumnNotFoundError):
        reader._container.column(99)
    with pytest.raises(tformat.RowOutOfRangeError):
        reader.take([1000])
    with pytest.raises(tformat.RowOutOfRangeError):
        reader.read_range(5, 2000)


def test_not_a_lance_file(tmp_path):
    p = tmp_path / "x.lance"
    p.write_bytes(b"PAR1" + b"\0" * 100 + b"PAR1")
    with pytest.raises(CorruptFileError, match="magic"):
        tformat.read_file(p)


def test_schema_mismatch_on_write(tmp_path):
    w = tformat.FileWriter(tmp_path / "w.lance", TABLE.schema, file_version="2.2")
    with pytest.raises(tformat.SchemaMismatchError):
        w.write_batch(pa.record_batch({"i": [1]}))


def test_unknown_version_on_write(tmp_path):
    with pytest.raises(UnsupportedEncodingError, match="3.0"):
        tformat.write_file(tmp_path / "w.lance", TABLE, file_version="3.0")


def test_null_struct_refused_in_2_0(tmp_path):
    s = pa.StructArray.from_arrays([pa.array([1, 2])], names=["a"], mask=pa.array([False, True]))
    with pytest.raises(tformat.UnsupportedTypeError, match="2.1 or later"):
        tformat.write_file(tmp_path / "w.lance", pa.table({"s": s}), file_version="2.0")


# -- bad paths and deletion files (found by tests/format/test_mutation_fuzz.py) ------------

from tessera.format.errors import FileAccessError, TesseraError  # noqa: E402
from tessera.format.file import schema as lschema  # noqa: E402
from tessera.format.protos import file_pb2, table_pb2  # noqa: E402
from tessera.format.table import deletion as ldeletion  # noqa: E402
from tessera.format.table import manifest as mf  # noqa: E402


@pytest.mark.parametrize("name", ["a\x00b.lance", "x" * 300 + ".lance", "", ".", "missing.lance"])
def test_read_file_bad_path_is_typed(tmp_path, name):
    # was ValueError (embedded null byte), OSError (File name too long),
    # IsADirectoryError ("" and "." name the directory), FileNotFoundError
    with pytest.raises(FileAccessError):
        tformat.read_file(os.path.join(str(tmp_path), name))


def test_read_file_missing_is_still_a_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        tformat.read_file(tmp_path / "missing.lance")


def _deletion_bytes(rows) -> tuple[table_pb2.DeletionFile, bytes]:
    return ldeletion.encode(np.asarray(rows), read_version=1)


@pytest.mark.parametrize("rows", [[3, 10, 17, 24, 31, 38], list(range(10, 6000))], ids=["arrow", "bitmap"])
def test_deletion_file_every_bit_flip_is_typed_or_exact(rows):
    """Every single-bit flip (the first 600 bytes) of a deletion file either
    decodes to exactly the rows its metadata promises or raises
    CorruptFileError: was OSError (Read out of bounds, Invalid flatbuffers
    message, ZSTD decompression failed), ArrowInvalid, ArrowMemoryError,
    IndexError, or rows silently added or lost."""
    meta, data = _deletion_bytes(rows)
    want = np.asarray(rows, np.uint32)
    physical = 6000
    assert np.array_equal(ldeletion.decode_for_fragment(data, meta, physical, "d"), want)
    for pos in range(min(len(data), 600)):
        for bit in (0, 3, 7):
            bad = bytearray(data)
            bad[pos] ^= 1 << bit
            try:
                got = ldeletion.decode_for_fragment(bytes(bad), meta, physical, "d")
            except CorruptFileError:
                continue
            assert len(got) == meta.num_deleted_rows, (pos, bit)
            assert got.size == 0 or int(got.max()) < physical


def test_deletion_file_read_out_of_bounds_is_typed():
    meta, data = _deletion_bytes([3, 10, 17, 24, 31, 38])
    assert len(data) == 482  # the byte below is a high byte of the batch message's buffer offset
    bad = bytearray(data)
    bad[246] ^= 0x40  # was OSError: Read out of bounds (offset = ..., size = 41)
    with pytest.raises(CorruptFileError):
        ldeletion.decode(bytes(bad), meta.file_type, "d")


def test_deletion_count_must_match_metadata():
    meta, data = _deletion_bytes([1, 2, 3])
    meta.num_deleted_rows = 2
    with pytest.raises(CorruptFileError, match="3 rows"):
        ldeletion.decode_for_fragment(data, meta, 10, "d")
    meta.num_deleted_rows = 3
    with pytest.raises(CorruptFileError, match="beyond"):
        ldeletion.decode_for_fragment(data, meta, 3, "d")


@pytest.mark.parametrize(
    "logical",
    ["decimal:128:99:2", "fixed_size_binary:-1", "time64", "fixed_size_list::", "bogus", "", "dictionary:int32:string"],
)
def test_bad_logical_type_is_typed(logical):
    with pytest.raises(FormatError):
        lschema.arrow_type_of(logical)


def test_duplicate_field_names_are_corrupt():
    protos = [
        file_pb2.Field(id=0, parent_id=-1, name="i", logical_type="int64"),
        file_pb2.Field(id=1, parent_id=-1, name="i", logical_type="string"),
    ]
    with pytest.raises(CorruptFileError, match="two fields named 'i'"):
        lschema.fields_from_protos(protos)


@pytest.mark.parametrize(
    "path", ["", ".", "..", "../x.lance", "a/../../x.lance", "a\x00b.lance", "/etc/passwd", "a//b.lance", "a/./b.lance"]
)
def test_bad_relative_paths(path):
    with pytest.raises(CorruptFileError, match="DataFile.path"):
        mf.check_relative_path(path, "DataFile.path", "m")


def test_good_relative_paths():
    for path in ("abc.lance", "sub/abc.lance", "x" * 300):
        mf.check_relative_path(path, "DataFile.path", "m")


@pytest.mark.parametrize("seconds,nanos", [(2**40, 0), (-(2**62), 0), (253402300800, 0), (0, -1), (0, 10**9)])
def test_manifest_timestamp_out_of_range(seconds, nanos):
    m = table_pb2.Manifest(version=1)
    m.timestamp.seconds, m.timestamp.nanos = seconds, nanos
    with pytest.raises(CorruptFileError, match="timestamp"):
        mf.read_manifest(mf.write_manifest(m), "m")


def test_every_error_is_a_tessera_error():
    assert issubclass(FileAccessError, TesseraError)


@pytest.mark.parametrize("name", ["a\x00b.lance", "x" * 300 + ".lance", "missing-dir/w.lance", ""])
def test_write_file_bad_path_is_typed(tmp_path, name):
    # was ValueError (embedded null byte), OSError (File name too long),
    # FileNotFoundError, IsADirectoryError
    with pytest.raises(FileAccessError):
        tformat.write_file(os.path.join(str(tmp_path), name), TABLE)
