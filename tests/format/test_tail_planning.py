"""Planning buffers (chunk sizes, dictionaries, repetition indexes) are written
next to the footer, so the reader's first read of a file's tail holds them:
reading rows then costs one request for the data, not one for the planning
metadata and one for the data.  pylance reads these files as it reads its own."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tessera.format.file import container
from tessera.format.file.datafile import FileReader, write_file
from tessera.format.file.io import BytesReader


class CountingReader(BytesReader):
    """An in-memory reader that records every request that reaches it."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data, "<counted>")
        self.calls: list[list[tuple[int, int]]] = []

    def read_ranges(self, ranges):
        self.calls.append([(int(o), int(n)) for o, n in ranges])
        return super().read_ranges(ranges)


def _table(n: int = 50_000) -> pa.Table:
    i = np.arange(n, dtype=np.int64)
    return pa.table(
        {
            "key": i,
            "f": i * 0.5,
            "s": pa.array(np.char.add("v", (i % 300).astype(str))),  # dictionary encoded
            "l": pa.array([[int(k), int(k) + 1] if k % 7 else None for k in i], pa.list_(pa.int32())),
            "z": pa.array([None] * n, pa.int64()),  # an all-null page
        }
    )


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_a_row_range_costs_one_request_after_the_tail(tmp_path, version):
    data = _table()
    path = tmp_path / "f.lance"
    write_file(path, data, file_version=version)
    raw = path.read_bytes()
    for col in data.column_names:
        io = CountingReader(raw)
        reader = FileReader(io)
        assert len(io.calls) == 1 and io.calls[0][0][0] + io.calls[0][0][1] == len(raw)  # the tail
        got = reader.read_range(20_000, 20_500, columns=[col])
        assert got.column(0).equals(data.column(col).slice(20_000, 500)), col
        tail_start = io.calls[0][0][0]
        later = io.calls[1:]
        # the planning buffers came from the tail: every later request is data, in one round
        assert len(later) <= 1, (col, later)
        assert all(o + n <= tail_start for call in later for o, n in call), (col, later, tail_start)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_pylance_reads_a_file_with_its_planning_buffers_in_the_tail(lance, tmp_path, version):
    data = _table(20_000)
    path = tmp_path / "f.lance"
    write_file(path, data, file_version=version)
    from lance.file import LanceFileReader

    got = LanceFileReader(str(path)).read_all().to_table()
    assert got.equals(data)


def test_the_tail_holds_no_more_planning_bytes_than_its_budget(lance, tmp_path, monkeypatch):
    """A file with more planning bytes than the budget keeps the rest in
    place; Tessera and pylance read every column either way."""
    monkeypatch.setattr(container, "TAIL_BUFFERS_BUDGET", 2_000)
    n = 5_000
    data = pa.table({f"c{i}": pa.array(np.arange(n, dtype=np.int64) * (i + 1)) for i in range(60)})
    path = tmp_path / "f.lance"
    write_file(path, data, file_version="2.1")
    raw = path.read_bytes()
    reader = FileReader(CountingReader(raw))
    meta_start = reader._container.footer.column_meta_start
    # the first pages' chunk sizes went to the tail, the later ones stayed with their data
    placed = [reader._container.column(c).pages[0].buffer_offsets[0] for c in range(60)]
    near_footer = [p for p in placed if p >= meta_start - 2_000 - 64 * 60]
    assert 0 < len(near_footer) < 60, placed
    assert reader.read().equals(data)
    from lance.file import LanceFileReader

    assert LanceFileReader(str(path)).read_all().to_table().equals(data)


def test_ranges_inside_the_tail_are_served_without_a_request():
    io = CountingReader(bytes(range(256)) * 1024)  # 256 KiB
    tail = io.read_ranges([(200_000, 62_144)])[0]
    served = container._TailServedIO(io, tail, 200_000)
    io.calls.clear()
    got = served.read_ranges([(200_010, 4), (10, 3), (262_140, 4), (199_999, 2)])
    assert [g.to_pybytes() for g in got] == [
        bytes([(200_010 + k) % 256 for k in range(4)]),
        bytes([10, 11, 12]),
        bytes([(262_140 + k) % 256 for k in range(4)]),
        bytes([(199_999 + k) % 256 for k in range(2)]),
    ]
    assert io.calls == [[(10, 3), (199_999, 2)]]  # only the ranges outside the tail, in one request
    assert served.read_ranges([(200_000, 8)])[0].to_pybytes() == bytes(range(64, 72))
    assert io.calls == [[(10, 3), (199_999, 2)]]
    assert served.size() == io.size()  # everything else is the wrapped reader's
