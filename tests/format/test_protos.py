"""The committed *_pb2 modules match the .proto files, and carry the fields
pylance 14 writes that older Lance sources lack."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_generated_modules_are_fresh(tmp_path):
    pytest.importorskip("grpc_tools")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_protos.py"), "--out", str(tmp_path)], check=True)
    gen = tmp_path / "format" / "protos"
    committed = os.path.join(ROOT, "format", "protos")
    names = sorted(p.name for p in gen.iterdir() if p.suffix in (".py", ".pyi"))
    assert names, "generator produced nothing"
    stale = [n for n in names if not filecmp.cmp(gen / n, os.path.join(committed, n), shallow=False)]
    assert not stale, f"stale generated modules (run scripts/gen_protos.py): {stale}"


def test_pylance14_fields_present():
    from tessera.format.protos import encodings21_pb2

    assert encodings21_pb2.MiniBlockLayout.DESCRIPTOR.fields_by_name["has_large_chunk"].number == 10
    assert encodings21_pb2.AllNullLayout.DESCRIPTOR.fields_by_name["constant_value"].number == 6


def test_all_null_layout_level_fields_declared():
    """pylance 14 writes AllNullLayout 7-10 on 2.2 pages with compressed levels."""
    from google.protobuf.descriptor import FieldDescriptor as FD

    from tessera.format.protos import encodings21_pb2

    fields = encodings21_pb2.AllNullLayout.DESCRIPTOR.fields_by_name
    for name, number in (("rep_compression", 7), ("def_compression", 8)):
        assert fields[name].number == number
        assert fields[name].message_type is encodings21_pb2.CompressiveEncoding.DESCRIPTOR
    for name, number in (("num_rep_values", 9), ("num_def_values", 10)):
        assert fields[name].number == number
        assert fields[name].type == FD.TYPE_UINT64


def test_pylance_all_null_levels_parse_as_declared_fields(tmp_path):
    """A pylance-written 2.2 all-null list page: the level fields are known
    fields (no unknown-field digging), and the page reads."""
    lance_file = pytest.importorskip("lance.file")
    import pyarrow as pa

    from tessera import format as tformat
    from tessera.format.file.container import PAGE_LAYOUT_URL, ContainerReader, unpack_any
    from tessera.format.file.io import open_reader
    from tessera.format.file.v21.read.layout import parse_all_null
    from tessera.format.protos import encodings21_pb2 as pb

    table = pa.table({"c": pa.array([None] * 1000, pa.list_(pa.int32()))})
    path = str(tmp_path / "p.lance")
    with lance_file.LanceFileWriter(path, table.schema, version="2.2") as w:
        w.write_batch(table)
    page = ContainerReader(open_reader(path)).column(0).pages[0]
    pl = unpack_any(page.encoding.direct.encoding, PAGE_LAYOUT_URL, pb.PageLayout)
    an = pl.all_null_layout
    if not an.HasField("rep_compression"):
        pytest.skip("pylance no longer compresses these levels")
    try:
        from google.protobuf.unknown_fields import UnknownFieldSet
    except ImportError:  # pragma: no cover
        UnknownFieldSet = None
    if UnknownFieldSet is not None:
        assert len(UnknownFieldSet(an)) == 0
    assert an.num_rep_values == 1000 and an.num_def_values == 1000
    info = parse_all_null(an, "test")
    assert info.rep_compression.WhichOneof("compression") and info.num_rep_values == 1000
    assert tformat.read_file(path).equals(table)


def test_unknown_field_on_all_null_layout_still_raises():
    from tessera import format as tformat
    from tessera.format.file.v21.read.layout import parse_page_layout
    from tessera.format.protos import encodings21_pb2 as pb

    pl = pb.PageLayout()
    pl.all_null_layout.layers.append(pb.REPDEF_NULLABLE_ITEM)
    raw = pl.all_null_layout.SerializeToString() + bytes([11 << 3, 1])  # field 11, varint 1
    bad = pb.PageLayout.FromString(bytes([(2 << 3) | 2, len(raw)]) + raw)
    with pytest.raises(tformat.UnsupportedEncodingError, match="field number 11"):
        parse_page_layout(bad, "test")
    # and inside a declared level encoding
    inner = bytes([(1 << 3) | 0, 16, (9 << 3) | 0, 3])  # Flat{bits=16, field 9 = 3}
    enc = bytes([(1 << 3) | 2, len(inner)]) + inner
    an = bytes([(5 << 3) | 0, pb.REPDEF_NULLABLE_ITEM, (7 << 3) | 2, len(enc)]) + enc
    bad2 = pb.PageLayout.FromString(bytes([(2 << 3) | 2, len(an)]) + an)
    with pytest.raises(tformat.UnsupportedEncodingError, match="Flat has field number 9"):
        parse_page_layout(bad2, "test")
