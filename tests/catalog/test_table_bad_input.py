"""Bad inputs to tables: typed errors and nothing changed on disk."""

from __future__ import annotations

import hashlib
import os
import struct

import numpy as np
import pyarrow as pa
import pytest

from tessera.catalog import Table
from tessera.catalog import errors as E
from tessera.format.table import manifest as mf


def _snapshot(root: str) -> dict[str, str]:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


@pytest.fixture
def table(tmp_path):
    path = str(tmp_path / "t")
    t = Table.create(path, pa.table({"i": np.arange(100), "s": [str(x) for x in range(100)]}))
    t.append(pa.table({"i": np.arange(100, 110), "s": ["x"] * 10}))
    return path


def _latest_manifest(path: str) -> str:
    d = os.path.join(path, "_versions")
    names = [n for n in os.listdir(d) if n.endswith(".manifest")]
    return os.path.join(d, sorted(names)[0])  # V2: newest sorts first


@pytest.mark.parametrize("cut", [0, 3, 15, 60, -1])
def test_truncated_manifest(table, cut):
    p = _latest_manifest(table)
    data = open(p, "rb").read()
    open(p, "wb").write(data[: cut if cut >= 0 else len(data) - 1])
    before = _snapshot(table)
    with pytest.raises(E.CorruptFileError):
        Table.open(table)
    assert Table.open(table, version=1).count_rows() == 100  # older versions unaffected
    assert _snapshot(table) == before


def test_corrupt_manifest_protobuf(table):
    p = _latest_manifest(table)
    data = bytearray(open(p, "rb").read())
    pos = struct.unpack("<q", data[-16:-8])[0]
    data[pos + 4 : pos + 12] = b"\xff" * 8
    open(p, "wb").write(bytes(data))
    with pytest.raises(E.CorruptFileError):
        Table.open(table)


def _set_flags(path: str, reader: int, writer: int) -> None:
    p = _latest_manifest(path)
    m = mf.read_manifest(open(p, "rb").read())
    m.manifest.reader_feature_flags = reader
    m.manifest.writer_feature_flags = writer
    open(p, "wb").write(mf.write_manifest(m.manifest, m.transaction, m.index_section))


def test_unknown_reader_flag(table):
    _set_flags(table, 64, 64)
    before = _snapshot(table)
    with pytest.raises(E.UnknownFeatureFlagError, match=r"\[6\]"):
        Table.open(table)
    assert _snapshot(table) == before


def test_unknown_writer_flag_refuses_writes_only(table):
    _set_flags(table, 0, 1 << 20)
    t = Table.open(table)
    assert t.count_rows() == 110
    before = _snapshot(table)
    with pytest.raises(E.UnknownFeatureFlagError, match="writer"):
        t.append(pa.table({"i": [1], "s": ["a"]}))
    with pytest.raises(E.UnknownFeatureFlagError):
        t.delete("i = 1")
    assert _snapshot(table) == before


def test_mixed_naming(table):
    open(os.path.join(table, "_versions", "7.manifest"), "wb").write(b"x")
    with pytest.raises(E.MixedNamingError):
        Table.open(table)


def test_missing_data_file(table):
    t = Table.open(table)
    path = t.fragments[0].files[0].path
    os.unlink(os.path.join(table, "data", path))
    with pytest.raises(E.StoreError, match=path):
        Table.open(table).to_arrow()


def test_bad_predicates_change_nothing(table):
    t = Table.open(table)
    before = _snapshot(table)
    with pytest.raises(E.PredicateSyntaxError):
        t.delete("i >")
    with pytest.raises(E.UnknownColumnError):
        t.delete("nope = 1")
    with pytest.raises(E.UnknownColumnError):
        t.update({"nope": 1})
    with pytest.raises(E.PredicateError):
        t.to_arrow(filter="i = 'x' AND")
    assert _snapshot(table) == before
    assert t.version == 2


def test_append_schema_mismatch_changes_nothing(table):
    t = Table.open(table)
    before = _snapshot(table)
    with pytest.raises(E.SchemaMismatchError):
        t.append(pa.table({"i": np.arange(3), "other": ["a", "b", "c"]}))
    with pytest.raises(E.SchemaMismatchError):
        t.append(pa.table({"i": ["not", "an", "int"], "s": ["a", "b", "c"]}))
    assert _snapshot(table) == before


def test_create_twice_and_missing_table(tmp_path, table):
    with pytest.raises(E.TableExistsError):
        Table.create(table, pa.table({"i": [1]}))
    with pytest.raises(E.TableNotFoundError):
        Table.open(str(tmp_path / "nothing"))
    with pytest.raises(E.VersionNotFoundError):
        Table.open(table, version=99)
    with pytest.raises(E.InvalidURIError):
        Table.open("gopher://x/y")
    with pytest.raises(E.TagError):
        Table.open(table, version="no-such-tag")


@pytest.mark.parametrize("bad", [1.0, True, b"1", [1]])
def test_a_version_is_a_number_or_a_tag(table, bad):
    t = Table.open(table)
    before = _snapshot(table)
    for call in (lambda: Table.open(table, version=bad), lambda: t.checkout(bad), lambda: t.restore(bad)):
        with pytest.raises(E.InvalidArgumentError, match="a version is a number or a tag name"):
            call()
    assert _snapshot(table) == before
    assert Table.open(table, version=np.int64(1)).version == 1  # numpy integers are numbers


# -- corrupt manifests, deletion files and bad URIs (found by tests/format/test_mutation_fuzz.py)


def _rewrite(path: str, change) -> None:
    """Parse the latest manifest, apply ``change(manifest)``, write it back."""
    p = _latest_manifest(path)
    m = mf.read_manifest(open(p, "rb").read())
    change(m.manifest)
    open(p, "wb").write(mf.write_manifest(m.manifest, m.transaction, m.index_section))


def _reads(path: str) -> None:
    t = Table.open(path)
    t.to_arrow()
    t.take([0, 1])


@pytest.fixture
def deleted(tmp_path):
    path = str(tmp_path / "d")
    t = Table.create(path, pa.table({"i": np.arange(40), "s": [str(x) for x in range(40)]}))
    t.delete("i % 7 = 3")
    return path


@pytest.mark.parametrize(
    "bad",
    ["", ".", "..", "a\x00b.lance", "x" * 300 + ".lance", "/etc/passwd", "../../../../etc/passwd", "sub/../../x.lance"],
)
def test_bad_data_file_path_in_manifest(table, bad):
    # was ValueError (embedded null byte, escapes the store root),
    # IsADirectoryError ("" and "."), OSError (File name too long)
    def change(m):
        m.fragments[0].files[0].path = bad

    _rewrite(table, change)
    t = Table.open(table)
    with pytest.raises(E.CorruptFileError, match="DataFile.path"):
        t.to_arrow()
    with pytest.raises(E.CorruptFileError, match="DataFile.path"):
        t.take([0, 1])


@pytest.mark.parametrize(
    "logical",
    [
        "string",
        "double",
        "int8",
        "list",
        "struct",
        "decimal:128:10:2",
        "fixed_size_list:float:4",
        "date32:day",
        "large_binary",
    ],
)
def test_field_type_changed_in_manifest(table, logical):
    # was pyarrow.ArrowInvalid / ArrowNotImplementedError from a cast in catalog/fragments.py
    def change(m):
        m.fields[0].logical_type = logical  # "i" is int64 in the data files

    _rewrite(table, change)
    with pytest.raises(E.TesseraError):
        _reads(table)


def test_duplicate_column_name_in_manifest(table):
    # was KeyError from the filter evaluation
    def change(m):
        m.fields[1].name = "i"

    _rewrite(table, change)
    with pytest.raises(E.CorruptFileError, match="two fields named"):
        Table.open(table).to_arrow()


def test_flipped_deletion_file_byte(deleted):
    # was OSError: Read out of bounds (format/table/deletion.py)
    d = os.path.join(deleted, "_deletions")
    p = os.path.join(d, os.listdir(d)[0])
    data = bytearray(open(p, "rb").read())
    assert len(data) == 482  # byte 246 is a high byte of the batch message's buffer offset
    data[246] ^= 0x40
    open(p, "wb").write(bytes(data))
    t = Table.open(deleted)
    with pytest.raises(E.CorruptFileError):
        t.to_arrow()
    with pytest.raises(E.CorruptFileError):
        t.take([0])


def test_deletion_count_disagreeing_with_file(deleted):
    # was a wrong answer: to_arrow() returned 34 rows while count_rows() said 35
    def change(m):
        m.fragments[0].deletion_file.num_deleted_rows = 5  # the file holds 6

    _rewrite(deleted, change)
    t = Table.open(deleted)
    with pytest.raises(E.CorruptFileError, match="num_deleted_rows"):
        t.to_arrow()
    with pytest.raises(E.CorruptFileError, match="num_deleted_rows"):
        t.take([0, 33])


def test_deletion_rows_beyond_fragment(deleted):
    # a deletion file naming rows the fragment does not have
    from tessera.format.table import deletion as ldeletion

    t = Table.open(deleted)
    frag = t.fragments[0]
    meta, data = ldeletion.encode(np.array([3, 10, 17, 24, 31, 99]), 1)
    meta.id = frag.deletion_file.id
    open(os.path.join(deleted, ldeletion.deletion_file_path(frag.id, meta)), "wb").write(data)
    with pytest.raises(E.CorruptFileError, match="beyond"):
        Table.open(deleted).to_arrow()


@pytest.mark.parametrize("rows", [0, 2**40, 2**32])
def test_physical_rows_disagreeing_with_data(deleted, rows):
    # was a wrong answer (0: the fragment's rows silently skipped) and
    # numpy MemoryError (2**40: take allocated an index of every row first)
    def change(m):
        m.fragments[0].physical_rows = rows
        m.fragments[0].ClearField("deletion_file")

    _rewrite(deleted, change)
    t = Table.open(deleted)
    with pytest.raises(E.CorruptFileError, match="rows"):
        t.to_arrow()
    # take trusts the row counts of the manifest: with 0 rows, index 0 is out of range
    with pytest.raises(E.InvalidArgumentError if rows == 0 else E.CorruptFileError, match="rows|range"):
        t.take([0])


def test_physical_rows_huge_with_deletions(deleted):
    def change(m):
        m.fragments[0].physical_rows = 2**40

    _rewrite(deleted, change)
    with pytest.raises(E.CorruptFileError, match="rows"):
        Table.open(deleted).take([0])


def test_count_rows_never_negative(deleted):
    def change(m):
        m.fragments[0].deletion_file.num_deleted_rows = 1000

    _rewrite(deleted, change)
    try:
        n = Table.open(deleted).count_rows()
    except E.CorruptFileError:
        return
    assert n >= 0, f"count_rows() = {n}"


def test_take_with_physical_rows_beyond_int64(table):
    def change(m):
        m.fragments[0].physical_rows = 2**64 - 1

    _rewrite(table, change)
    with pytest.raises(E.TesseraError):
        Table.open(table).take([0])


@pytest.mark.parametrize("seconds", [2**40, 253402300800, -(2**62)])
def test_manifest_timestamp_out_of_range(table, seconds):
    # was ValueError: year 36812 is out of range / OSError [Errno 75] in versions()
    def change(m):
        m.timestamp.seconds = seconds

    _rewrite(table, change)
    with pytest.raises(E.CorruptFileError, match="timestamp"):
        Table.open(table, version=1).versions()


@pytest.mark.parametrize("name", ["_rowid", "_rowaddr"])
def test_column_named_like_a_row_id_column(tmp_path, name):
    # was a wrong answer: the scan returned row ids/addresses in place of the column's values
    path = str(tmp_path / "t")
    data = pa.table({"i": np.arange(10), name: np.arange(100, 110, dtype=np.uint64)})
    t = Table.create(path, data)
    assert t.to_arrow().equals(data)
    assert t.to_arrow(columns=[name])[name].to_pylist() == list(range(100, 110))
    assert t.to_arrow(filter=f"{name} > 105").num_rows == 4
    flag = {"with_row_id": True} if name == "_rowid" else {"with_row_address": True}
    with pytest.raises(E.InvalidArgumentError, match=name):
        t.to_arrow(**flag)


def test_data_file_in_another_base_path(table):
    # a multi-base data file would have been read from this table's data/ folder
    def change(m):
        m.fragments[0].files[0].base_id = 1

    _rewrite(table, change)
    with pytest.raises(E.FormatError, match="base"):
        Table.open(table).to_arrow()


@pytest.mark.parametrize("bad", ["", "..", "a\x00b", "x" * 300, "_versions", "../../../etc/passwd"])
def test_bad_external_row_ids_path(tmp_path, bad):
    # was IsADirectoryError / ValueError / OSError (File name too long) from the store
    path = str(tmp_path / "r")
    Table.create(path, pa.table({"i": np.arange(10)}), stable_row_ids=True)

    def change(m):
        m.fragments[0].external_row_ids.path = bad

    _rewrite(path, change)
    with pytest.raises(E.TesseraError):
        Table.open(path).to_arrow(with_row_id=True)
    with pytest.raises(E.TesseraError):
        Table.open(path).take_rows([0, 1])


@pytest.mark.parametrize("uri", ["/tmp/a\x00b", "file:///tmp/a\x00b", "s3://bucket/a\x00b", "/tmp/" + "x" * 300])
def test_bad_table_uri(uri):
    # was ValueError: embedded null byte / OSError: File name too long
    with pytest.raises(E.InvalidURIError):
        Table.open(uri)


def test_bad_table_uri_on_create(tmp_path):
    for uri in (str(tmp_path / "a\x00b"), str(tmp_path / ("x" * 300))):
        with pytest.raises(E.InvalidURIError):
            Table.create(uri, pa.table({"i": [1]}))


def test_bad_store_urls():
    from tessera.stores.registry import open_manifest_store
    from tessera.stores.sql_migrate import parse_sql_url
    from tessera.stores.uri import normalize_table_uri

    with pytest.raises(E.InvalidURIError):
        normalize_table_uri("/tmp/a\x00b")
    with pytest.raises(E.InvalidURIError):
        normalize_table_uri("s3://bucket/a\x00b")
    with pytest.raises(E.InvalidURIError):
        parse_sql_url("sqlite:///tmp/a\x00b.db")
    with pytest.raises(E.InvalidURIError):
        open_manifest_store("sqlite:///tmp/a\x00b.db")
    with pytest.raises(E.InvalidURIError):
        Table.open("/tmp/somewhere", commit_store="sqlite:///tmp/a\x00b.db")


def test_scan_of_no_columns_checks_physical_rows(table):
    # was a near-hang: 2**40 rows of no columns, 16 million empty batches,
    # made up from the manifest without opening a data file
    def change(m):
        m.fragments[0].physical_rows = 2**40

    _rewrite(table, change)
    import signal

    def hang(*_):
        raise AssertionError("to_arrow(columns=[]) still running after 20 s")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(20)
    try:
        with pytest.raises(E.CorruptFileError, match="rows"):
            Table.open(table).to_arrow(columns=[])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_local_store_bad_object_paths(tmp_path):
    # the object store below the table: was ValueError (NUL byte, a path
    # escaping the root), IsADirectoryError, OSError (File name too long)
    from tessera.stores.errors import InvalidURIError, ObjectNotFoundError
    from tessera.stores.local import LocalObjectStore

    (tmp_path / "f").write_bytes(b"x")
    store = LocalObjectStore(str(tmp_path))
    for path in ("a\x00b", "../outside", "x" * 300):
        for op in (store.read, store.open_reader, store.size):
            with pytest.raises(InvalidURIError):
                op(path)
    for path in ("", ".", "sub", "f/below-a-file"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        for op in (store.read, store.open_reader, store.size):
            with pytest.raises(ObjectNotFoundError):
                op(path)
    assert store.list("f") == []  # a file has no objects under it
    with pytest.raises(InvalidURIError):
        store.put("x" * 300, b"data")
    with pytest.raises(InvalidURIError):
        store.put("f/below-a-file", b"data")
    with pytest.raises(InvalidURIError):
        store.put_if_not_exists("f/below-a-file", b"data")


def test_table_at_a_file_path(tmp_path):
    p = tmp_path / "file"
    p.write_bytes(b"not a table")
    with pytest.raises(E.TableNotFoundError):
        Table.open(str(p))
    with pytest.raises(E.TesseraError):
        Table.create(str(p), pa.table({"i": [1]}))


def test_fragment_id_beyond_32_bits(table):
    # was a wrong answer: row addresses (fragment_id << 32 | offset) wrapped around
    def change(m):
        m.fragments[1].id = 2**32 + 1

    _rewrite(table, change)
    t = Table.open(table)
    assert t.count_rows() == 110
    with pytest.raises(E.CorruptFileError, match="over 2\\*\\*32"):
        t.to_arrow(with_row_address=True)
    with pytest.raises(E.CorruptFileError, match="over 2\\*\\*32"):
        t.take_rows([0])


def test_repeated_fragment_id(table):
    # was a wrong answer: take_rows read the row from the other fragment of that id
    def change(m):
        m.fragments[1].id = m.fragments[0].id

    _rewrite(table, change)
    t = Table.open(table)
    with pytest.raises(E.CorruptFileError, match="repeated"):
        t.to_arrow(with_row_id=True)
    with pytest.raises(E.CorruptFileError, match="repeated"):
        t.take_rows([0, 1])


def test_row_id_sequences_without_the_stable_row_id_flag(tmp_path):
    # was a wrong answer: scans returned the stable row ids, take_rows took them for addresses
    path = str(tmp_path / "r")
    t = Table.create(path, pa.table({"i": np.arange(10)}), stable_row_ids=True)
    t.append(pa.table({"i": np.arange(10, 20)}))

    def change(m):
        m.reader_feature_flags &= ~mf.FLAG_STABLE_ROW_IDS

    _rewrite(path, change)
    t = Table.open(path)
    ids = t.to_arrow(with_row_id=True)["_rowid"]
    with pytest.raises(E.CorruptFileError, match="row id sequence"):
        t.take_rows(ids)
