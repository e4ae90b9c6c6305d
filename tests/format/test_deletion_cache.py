"""Decoded deletion vectors are kept by the process: a fragment's deletion
file is decoded once, however many scans, takes and deletes read it; on local
disk a file damaged or replaced since is read, checked and refused again."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from tessera.catalog import Table
from tessera.format.errors import CorruptFileError
from tessera.format.table import deletion


def _table(path: str) -> Table:
    i = np.arange(4_000, dtype=np.int64)
    t = Table.create(path, pa.table({"i": i, "s": pa.array((i % 13).astype(str))}), max_rows_per_file=1_000)
    t.delete("i % 5 = 0")
    return t


def test_each_deletion_file_is_decoded_once(tmp_path, monkeypatch):
    t = _table(str(tmp_path / "t"))
    deletion.clear_cache()
    decoded: list[int] = []
    real = deletion.decode_for_fragment
    monkeypatch.setattr(deletion, "decode_for_fragment", lambda *a, **k: decoded.append(1) or real(*a, **k))
    want = [x for x in range(4_000) if x % 5]
    for _ in range(3):
        again = Table.open(t.uri)
        assert again.to_arrow().column("i").to_pylist() == want
        assert again.take([0, 1, 2_999]).column("i").to_pylist() == [want[0], want[1], want[2_999]]
    assert len(decoded) == 4  # one per fragment
    t.delete("i = 1")  # reads the vector of the fragment it changes: no decode; its new file is new
    assert len(decoded) == 4
    assert Table.open(t.uri).to_arrow().num_rows == len(want) - 1  # the new file: decoded once
    assert len(decoded) == 5


def test_a_local_deletion_file_damaged_after_it_was_read_is_refused(tmp_path):
    t = _table(str(tmp_path / "t"))
    assert t.count_rows("i >= 0") == 3_200
    d = t.fragments[0].deletion_file
    path = tmp_path / "t" / "_deletions" / f"{t.fragments[0].id}-{d.read_version}-{d.id}.arrow"
    assert path.exists(), sorted(p.name for p in path.parent.iterdir())
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptFileError):
        Table.open(t.uri).to_arrow()


def test_shared_vectors_are_read_only(tmp_path):
    from tessera.format.table.fragments import FragmentReader

    t = _table(str(tmp_path / "t"))
    r = FragmentReader(t.store, t.fragments[0], [])
    rows = r.deleted_rows()
    assert rows.size == 200
    with pytest.raises(ValueError):
        rows[0] = 1


def test_deletion_files_are_written_uncompressed_and_compressed_ones_still_read():
    """Arrow deletion files are written as pylance writes them, without IPC
    compression (a zstd stream costs more to set up than a few offsets
    save); those Tessera wrote compressed before still read."""
    from tessera.format.protos import table_pb2

    rows = np.array([31, 3, 17], dtype=np.uint32)
    meta, data = deletion.encode(rows, 1)
    assert meta.file_type == table_pb2.ARROW_ARRAY
    plain = pa.BufferOutputStream()
    with ipc.new_file(plain, deletion.SCHEMA) as w:
        w.write_batch(pa.record_batch([pa.array(np.sort(rows))], schema=deletion.SCHEMA))
    assert data == plain.getvalue().to_pybytes()
    packed = pa.BufferOutputStream()
    with ipc.new_file(packed, deletion.SCHEMA, options=ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_batch(pa.record_batch([pa.array(rows)], schema=deletion.SCHEMA))
    assert deletion.decode(packed.getvalue().to_pybytes(), table_pb2.ARROW_ARRAY).tolist() == [3, 17, 31]
