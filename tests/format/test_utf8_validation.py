"""String data that is not UTF-8 is a CorruptFileError naming the file and the column.

Each case writes a file (with Tessera or with pylance, in 2.0, 2.1 and 2.2)
whose string columns hold non-ASCII text, then damages one column: in the
bytes of that column's pages and metadata every occurrence of the column's own two-byte
character (say ``é``, ``C3 A9``) has its second byte's top bit flipped, which
leaves ``C3`` followed by an ASCII byte - never valid UTF-8.  Plain pages hold
the text as it is, dictionary pages hold it once (pylance 14 and Tessera
LZ4-compress 2.2 dictionaries, whose literals stay readable), FSST pages hold
it in their symbol tables (in the page's description, a protobuf bytes
field); the test checks that each column is stored with the encoding it is
meant to exercise, and that there was something to flip.
"""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow as pa
import pytest
from google.protobuf import any_pb2

from tessera import format as tformat
from tessera.format.errors import CorruptFileError
from tessera.format.file.checksum import checksums
from tessera.format.file.container import ContainerReader
from tessera.format.file.io import open_reader
from tessera.format.protos import encodings21_pb2, encodings_pb2

N = 3000
RNG = np.random.default_rng(5)

#: column -> the characters whose bytes are damaged (FSST may cut a character
#: between two symbols: its column has several, in different contexts)
COLUMNS = {
    "plain": "é",
    "dict": "ï",
    "fsst": "äëöß",
    "lst": "ü",
    "st": "ø",
}


def _data() -> pa.Table:
    return pa.table(
        {
            "id": np.arange(N, dtype=np.int64),
            "plain": [f"café-{i}" for i in range(N)],
            "dict": [f"naïve-{i % 7}" for i in range(N)],
            "fsst": [f"https://exämple.org/tëst/{int(RNG.integers(1 << 40))}/ïndex-öß.html" for _ in range(N)],
            "lst": [[f"ü{i}", f"x{i}"] for i in range(N)],
            "st": [{"x": f"ø{i}", "n": i} for i in range(N)],
        }
    )


DATA = _data()


def _write(writer: str, version: str, path) -> None:
    if writer == "tessera":
        # without checksums, which would catch the damage first (tests/format/test_checksum.py):
        # the UTF-8 check is what stands between other writers' damaged files and a wrong value
        with checksums("off"):
            tformat.write_file(path, DATA, file_version=version)
    else:
        from lance.file import LanceFileWriter

        with LanceFileWriter(str(path), version=version) as w:
            w.write_batch(DATA)


def _columns_of(reader: tformat.FileReader, name: str) -> range:
    i = [f.name for f in reader.fields].index(name)
    first = reader._first_columns[i]
    return range(first, first + reader._codec.num_columns(reader.fields[i]))


def _encodings(path, name: str) -> str:
    """The text of every page encoding of top-level column ``name``."""
    with tformat.FileReader(path) as r:
        cols = _columns_of(r, name)
    c = ContainerReader(open_reader(str(path)))
    out = []
    for col in cols:
        for page in c.column(col).pages:
            a = any_pb2.Any()
            a.ParseFromString(page.encoding.direct.encoding)
            msg = encodings21_pb2.PageLayout() if "PageLayout" in a.type_url else encodings_pb2.ArrayEncoding()
            msg.ParseFromString(a.value)
            out.append(str(msg))
    return "\n".join(out)


def _damage(src, dst, name: str) -> int:
    """Copy ``src`` to ``dst`` with column ``name``'s characters broken in its
    page and column buffers and its column metadata; returns how many were broken."""
    chars = [c.encode() for c in COLUMNS[name]]
    with tformat.FileReader(src) as r:
        cols = _columns_of(r, name)
    c = ContainerReader(open_reader(str(src)))
    ranges = []
    for col in cols:
        cm = c.column(col)
        ranges.append(c.column_offsets[col])  # an FSST symbol table is part of the page's description
        ranges += list(zip(cm.buffer_offsets, cm.buffer_sizes))
        for page in cm.pages:
            ranges += list(zip(page.buffer_offsets, page.buffer_sizes))
    data = bytearray(open(src, "rb").read())
    hits = 0
    for pos, size in ranges:
        piece = bytes(data[pos : pos + size])
        for char in chars:
            hits += piece.count(char)
            piece = piece.replace(char, bytes([char[0], char[1] ^ 0x80]))
        data[pos : pos + size] = piece
    with open(dst, "wb") as f:
        f.write(data)
    return hits


CASES = [  # the test checks each column is stored as its name says
    (writer, version, col)
    for writer in ("tessera", "pylance")
    for version in ("2.0", "2.1", "2.2")
    for col in COLUMNS
    # FSST: pylance's 2.1/2.2 string pages (2.0 and Tessera's writer keep strings plain)
    if col != "fsst" or (writer == "pylance" and version != "2.0")
]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("utf8")
    files = {}
    for writer in ("tessera", "pylance"):
        for version in ("2.0", "2.1", "2.2"):
            p = root / f"{writer}-{version}.lance"
            _write(writer, version, p)
            files[writer, version] = p
    return files


@pytest.mark.parametrize("writer,version,col", CASES)
def test_damaged_strings_are_corrupt(written, tmp_path, writer, version, col):
    src = written[writer, version]
    # the undamaged file reads as written, and the column is stored as the case says
    with tformat.FileReader(src) as r:
        assert r.read().equals(DATA) and r.take([5, 2999, 5]).equals(DATA.take([5, 2999, 5]))
    stored = _encodings(src, col)
    assert "fsst" in stored or col != "fsst", stored  # (pylance 2.1+ compresses its other string pages so too)
    assert "dictionary" in stored or col != "dict", stored
    assert "fsst" not in stored or writer == "pylance", stored
    bad = tmp_path / f"bad-{writer}-{version}-{col}.lance"
    assert _damage(src, bad, col) > 0, "nothing to damage: the test data is not where it was expected"
    reads = {
        "read": lambda r: r.read(),
        "column": lambda r: r.read([col]),
        "range": lambda r: r.read_range(1000, 2000, [col]),
        "take": lambda r: r.take([2500, 10, 1500], [col]),
    }
    for what, read in reads.items():
        with tformat.FileReader(bad) as r:
            with pytest.raises(CorruptFileError) as info:
                read(r)
        msg = str(info.value)
        assert "UTF-8" in msg, (what, msg)
        assert str(bad) in msg and f"'{col}" in msg, (what, msg)
    # the other columns are intact and still read
    others = [c for c in DATA.column_names if c != col]
    with tformat.FileReader(bad) as r:
        assert r.read(others).equals(DATA.select(others))


def test_table_scan_names_file_and_column(tmp_path, lance):
    """Through a table (pylance's dataset and Tessera's): the scan, a filtered
    scan and a take raise the error, naming the data file and the column."""
    import tessera

    for writer in ("tessera", "pylance"):
        uri = str(tmp_path / writer)
        if writer == "tessera":
            with tessera.checksums("off"):  # as above: the UTF-8 check itself
                tessera.Table.create(uri, DATA.select(["id", "plain"]))
        else:
            lance.write_dataset(DATA.select(["id", "plain"]), uri)
        (data_file,) = (tmp_path / writer / "data").glob("*.lance")
        copy = tmp_path / "copy.lance"
        shutil.copy(data_file, copy)
        assert _damage(copy, data_file, "plain") > 0
        t = tessera.Table.open(uri)
        for read in (
            lambda: t.to_arrow(),
            lambda: t.to_arrow(columns=["plain"], filter="id > 100"),
            lambda: t.take([7]) if hasattr(t, "take") else t.to_arrow(filter="id = 7"),
        ):
            with pytest.raises(CorruptFileError) as info:
                read()
            msg = str(info.value)
            assert "UTF-8" in msg and data_file.name in msg and "'plain'" in msg, msg
        assert t.to_arrow(columns=["id"]).num_rows == N


def test_check_array_looks_at_valid_values_of_its_slice_only():
    from tessera.format.file import utf8

    raw = pa.array([b"ok", b"\xc3(", b"fine\xc3\xa9", b"\xff"], pa.binary())
    validity = pa.array([True, False, True, True]).buffers()[1]
    arr = pa.Array.from_buffers(pa.string(), 4, [validity, *raw.buffers()[1:]])
    utf8.check_array(arr.slice(0, 3), "f", "c")  # the bad value under a null, the other out of the slice
    with pytest.raises(CorruptFileError, match=r"column 'c': .*row 13"):
        utf8.check_array(arr, "f", "c", first_row=10)
    nested = pa.array([[{"k": "a"}], None, [{"k": "b"}]], pa.list_(pa.struct([("k", pa.large_string())])))
    utf8.check_array(nested, "f", "n")
    broken = pa.Array.from_buffers(
        pa.large_string(), 1, [None, *pa.array([b"\xe2\x82"], pa.large_binary()).buffers()[1:]]
    )
    holder = pa.StructArray.from_arrays([broken], names=["k"])
    with pytest.raises(CorruptFileError, match=r"column 'n.k'"):
        utf8.check_array(holder, "f", "n")
    dictionary = pa.DictionaryArray.from_arrays(pa.array([0, 0]), broken)
    with pytest.raises(CorruptFileError, match="not valid UTF-8"):
        utf8.check_array(dictionary, "f", "d")


_PIECES = ["a", "é", "€", "𝄞", "ß", "\u07ff", "\u0800", "\uffff", "\U00010000", "\U0010ffff", "\ud7ff", "\ue000"]
_BAD = [
    b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
    b"\xf0\x80\x80\x80", b"\xf0\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff", b"\xfe",
    b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xc3\x28", b"\xe2\x28\xa1", b"\xf8\x88\x80\x80\x80",
]  # fmt: skip


def _python_says(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _native():
    from tessera.format.file import utf8

    if utf8._NATIVE is None:
        pytest.skip("the C accelerator was not built")
    return utf8._NATIVE


def test_c_check_agrees_with_python_on_every_kind_of_sequence():
    """The C check (SSSE3 blocks, or byte by byte) says what Python's decoder
    says: valid text of every length, and every kind of invalid sequence
    (overlong, surrogate, above U+10FFFF, stray or missing continuation bytes,
    a truncated last character) at every position around the 16- and 64-byte
    steps, inside a larger buffer, with 4- and 8-byte offsets."""
    check = _native()
    rng = np.random.default_rng(11)
    for length in range(0, 140, 3):
        for piece in _PIECES:
            good = ("a" * length + piece + "b" * (length % 17)).encode()
            for bad in _BAD[:: 1 + length % 3]:
                for text in (good, ("a" * length).encode() + bad + piece.encode() + b"z" * (length % 5)):
                    pad = int(rng.integers(0, 20))
                    data = b"x" * pad + text + b"y" * int(rng.integers(0, 3))
                    for dt, width in ((np.int32, 4), (np.int64, 8)):
                        offsets = np.array([pad, pad + len(text)], dtype=dt).tobytes()
                        assert check(data, offsets, width, 0, 1) == _python_says(text), text
    for _ in range(3000):
        raw = bytes(rng.integers(0, 256, int(rng.integers(0, 60)), dtype=np.uint8))
        assert check(raw, np.array([0, len(raw)], np.int64).tobytes(), 8, 0, 1) == _python_says(raw), raw


def test_c_check_of_value_boundaries_and_offsets():
    check = _native()
    data = "aé€".encode()  # values cut at character boundaries are valid, cut inside one are not

    def ok(offsets, first=0, n=3):
        return check(data, np.array(offsets, np.int32).tobytes(), 4, first, n)

    assert ok([0, 1, 3, 6])
    assert not ok([0, 2, 3, 6]) and not ok([0, 1, 4, 6])
    assert ok([9, 0, 1, 3, 6], first=1)
    assert not ok([0, 1, 3, 7])  # past the data
    assert not ok([0, 5, 3, 6])  # an offset outside the region
    with pytest.raises(ValueError):
        ok([0, 1])  # fewer offsets than values


@pytest.mark.parametrize("native", [True, False], ids=["c", "numpy-arrow"])
def test_both_paths_find_the_same_damage(monkeypatch, native):
    from tessera.format.file import utf8

    if native:
        _native()
    else:
        monkeypatch.setattr(utf8, "_NATIVE", None)
    text = ["plain", "naïve", "日本語", "", None, "𝄞 clef"] * 50
    arr = pa.array(text)
    utf8.check_array(arr, "f", "c")
    utf8.check_array(pa.array(text, pa.large_string()).slice(7, 200), "f", "c")
    raw = bytearray(arr.buffers()[2].to_pybytes())
    at = raw.index("日".encode()) + 1
    raw[at] ^= 0x80  # the continuation byte of a character becomes ASCII
    broken = pa.Array.from_buffers(pa.string(), len(arr), [arr.buffers()[0], arr.buffers()[1], pa.py_buffer(raw)])
    with pytest.raises(CorruptFileError, match=r"column 'c': .*row 102"):
        utf8.check_array(broken, "f", "c", first_row=100)
    utf8.check_array(broken.slice(3), "f", "c")  # the damaged value is not in the slice
