"""``progress=`` on the writes that add rows (``Table.create``, ``append``,
``overwrite``, ``Catalog.create_table``): pylance's ``FragmentWriteProgress``
shape (``begin``/``complete`` per fragment) or a ``progress(phase, done,
total)`` callable told the rows as the writer takes them; anything else is
refused before a byte is written, and a progress that raises aborts the write
with nothing committed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pytest

from tessera.catalog import errors as E
from tessera.catalog.catalog import connect
from tessera.catalog.table import Table

N = 200_000
PER_FILE = 50_000  # four fragments of N rows


def _data(n: int = N, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "v": ids.astype(np.float64)})


def _data_files(path) -> list[str]:
    folder = os.path.join(str(path), "data")
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


class Fragments:
    """A pylance-shaped progress: ``begin(fragment)`` / ``complete(fragment)``."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, int | None, list[str]]] = []

    def begin(self, fragment, **kwargs) -> None:
        self.events.append(("begin", fragment.id, fragment.physical_rows, [f.path for f in fragment.files]))

    def complete(self, fragment, **kwargs) -> None:
        self.events.append(("complete", fragment.id, fragment.physical_rows, [f.path for f in fragment.files]))


def _check_fragments(events, table: Table, rows: int, per_file: int) -> None:
    """begin then complete for each fragment, in order, as pylance describes them."""
    files = -(-rows // per_file)
    assert [e[0] for e in events] == ["begin", "complete"] * files, events
    for b, c in zip(events[::2], events[1::2]):
        assert b[1:] == (0, None, [])  # id unassigned, no file yet (pylance passes the same)
        assert c[1] == 0 and len(c[3]) == 1 and c[2] and c[2] <= per_file
    assert sum(c[2] for c in events[1::2]) == rows
    # the completed files are the table's new fragments, in order
    assert [c[3][0] for c in events[1::2]] == [f.files[0].path for f in table.fragments[-files:]]


def test_create_tells_a_fragment_progress_each_fragment_in_order(tmp_path):
    p = Fragments()
    t = Table.create(str(tmp_path / "t"), _data(), max_rows_per_file=PER_FILE, progress=p)
    _check_fragments(p.events, t, N, PER_FILE)
    assert t.count_rows() == N


def test_append_and_overwrite_tell_a_fragment_progress(tmp_path):
    t = Table.create(str(tmp_path / "t"), _data(10), max_rows_per_file=PER_FILE)
    p = Fragments()
    t.append(_data(N, 10), progress=p)
    _check_fragments(p.events, t, N, PER_FILE)
    p = Fragments()
    t.overwrite(_data(120_000), progress=p)
    _check_fragments(p.events, t, 120_000, PER_FILE)
    assert t.count_rows() == 120_000


def test_rows_are_told_as_the_writer_takes_them(tmp_path):
    """The callable hears the rows written so far, in steps, while the
    write goes on (the files of the earlier rows are already on disk), and
    the last count is every row."""
    path = tmp_path / "t"
    t = Table.create(str(path), _data(10), max_rows_per_file=PER_FILE)
    before = len(_data_files(path))
    calls: list[tuple[str, int, int | None, int]] = []

    def progress(phase: str, done: int, total: int | None) -> None:
        calls.append((phase, done, total, len(_data_files(path))))

    t.append(_data(N, 10), progress=progress)
    assert calls[0][:3] == ("writing rows", 0, N)
    done = [c[1] for c in calls]
    assert done == sorted(done) and len(set(done)) == len(done) and done[-1] == N
    assert len(calls) >= 4  # 65,536-row steps at most
    assert all(c[0] == "writing rows" and c[2] == N for c in calls)
    # the bar moves while the files are written, not once at the end
    files_seen = [c[3] - before for c in calls]
    assert files_seen[0] == 0 and 0 < files_seen[len(files_seen) // 2] < 4, calls
    assert t.count_rows() == N + 10


def test_a_stream_has_no_known_total(tmp_path):
    t = Table.create(str(tmp_path / "t"), _data(10))
    data = _data(N, 10)
    calls: list[tuple[str, int, int | None]] = []
    t.append(pa.RecordBatchReader.from_batches(data.schema, data.to_batches()), progress=lambda *a: calls.append(a))
    assert calls[0] == ("writing rows", 0, None) and calls[-1] == ("writing rows", N, None)
    assert t.count_rows() == N + 10


def test_other_data_has_its_total(tmp_path):
    pd = pytest.importorskip("pandas")
    calls: list[tuple[str, int, int | None]] = []
    t = Table.create(str(tmp_path / "t"), pd.DataFrame({"a": range(7)}), progress=lambda *a: calls.append(a))
    t.append([{"a": 1}, {"a": 2}], progress=lambda *a: calls.append(a))
    t.append({"a": [3, 4, 5]}, progress=lambda *a: calls.append(a))
    assert calls == [
        ("writing rows", 0, 7),
        ("writing rows", 7, 7),
        ("writing rows", 0, 2),
        ("writing rows", 2, 2),
        ("writing rows", 0, 3),
        ("writing rows", 3, 3),
    ]


def test_catalog_create_table_takes_progress(tmp_path):
    cat = connect(warehouse=str(tmp_path / "wh"))
    cat.create_namespace("ns")
    calls: list[tuple[str, int, int | None]] = []
    t = cat.create_table("ns.t", _data(), progress=lambda *a: calls.append(a))
    assert calls[0] == ("writing rows", 0, N) and calls[-1] == ("writing rows", N, N)
    assert t.count_rows() == N
    cat.close()


def test_pylance_progress_classes_work_unchanged(tmp_path):
    progress = pytest.importorskip("lance.progress")

    class Recorder(progress.FragmentWriteProgress):
        def __init__(self) -> None:
            self.events: list[tuple[str, int | None, int | None]] = []

        def begin(self, fragment, **kwargs):
            self.events.append(("begin", fragment.physical_rows, None))

        def complete(self, fragment, **kwargs):
            self.events.append(("complete", fragment.physical_rows, fragment.num_rows))

    r = Recorder()
    Table.create(str(tmp_path / "t"), _data(), max_rows_per_file=PER_FILE, progress=r)
    assert r.events == [("begin", None, None), ("complete", PER_FILE, PER_FILE)] * 4


def test_progress_does_not_import_lance(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys
        import pyarrow as pa
        from tessera.catalog.table import Table

        class P:
            def begin(self, fragment): pass
            def complete(self, fragment): fragment.to_json()

        t = Table.create({str(tmp_path / "t")!r}, pa.table({{"a": [1, 2, 3]}}), progress=P())
        t.append(pa.table({{"a": [4]}}), progress=lambda *a: None)
        assert "lance" not in sys.modules, "lance imported"
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


class _Half:
    def begin(self, fragment):
        pass


class _Arity:
    def begin(self):
        pass

    def complete(self, fragment):
        pass


BAD = [
    pytest.param(3, id="int"),
    pytest.param("bar", id="str"),
    pytest.param(lambda rows: None, id="one-argument-callable"),
    pytest.param(Fragments, id="the-class-not-an-instance"),
    pytest.param(_Half(), id="begin-without-complete"),
    pytest.param(_Arity(), id="begin-without-fragment"),
]


@pytest.mark.parametrize("bad", BAD)
def test_a_bad_progress_is_refused_and_writes_nothing(tmp_path, bad):
    path = tmp_path / "t"
    t = Table.create(str(path), _data(10))
    files = _data_files(path)
    for write in (t.append, t.overwrite):
        with pytest.raises(E.InvalidArgumentError, match="progress") as info:
            write(_data(), progress=bad)
        assert isinstance(info.value, E.TesseraError)
    assert _data_files(path) == files
    fresh = Table.open(str(path))
    assert (fresh.version, fresh.count_rows()) == (1, 10)
    with pytest.raises(E.InvalidArgumentError, match="progress"):
        Table.create(str(tmp_path / "new"), _data(), progress=bad)
    assert _data_files(tmp_path / "new") == []
    with pytest.raises(E.TableNotFoundError):
        Table.open(str(tmp_path / "new"))
    cat = connect(warehouse=str(tmp_path / "wh"))
    cat.create_namespace("ns")
    with pytest.raises(E.InvalidArgumentError, match="progress"):
        cat.create_table("ns.t", _data(), progress=bad)
    assert not cat.table_exists("ns.t")
    cat.close()


class Cancelled(Exception):
    pass


def _cancel_at(rows: int):
    def progress(phase: str, done: int, total: int | None) -> None:
        if done >= rows:
            raise Cancelled(done)

    return progress


class _CancelAtComplete(Fragments):
    """Cancels at the ``complete`` of the fragment that brings the rows to 100,000."""

    def complete(self, fragment, **kwargs) -> None:
        super().complete(fragment)
        if sum(e[2] for e in self.events if e[0] == "complete") >= 100_000:
            raise Cancelled(fragment.physical_rows)


CANCELLING = [
    pytest.param(lambda: _cancel_at(100_000), id="callable-midway"),
    pytest.param(lambda: _cancel_at(0), id="callable-at-start"),
    pytest.param(lambda: _CancelAtComplete(), id="in-complete"),
]


@pytest.mark.parametrize("make", CANCELLING)
def test_a_progress_that_raises_aborts_the_write(tmp_path, make):
    """The exception propagates as raised; nothing is committed and the
    write's data files are gone."""
    path = tmp_path / "t"
    t = Table.create(str(path), _data(10), max_rows_per_file=PER_FILE)
    files = _data_files(path)
    with pytest.raises(Cancelled):
        t.append(_data(N, 10), progress=make())
    with pytest.raises(Cancelled):
        t.overwrite(_data(N, 10), progress=make())
    assert (t.version, t.count_rows()) == (1, 10)
    fresh = Table.open(str(path))
    assert (fresh.version, fresh.count_rows()) == (1, 10)
    assert fresh.to_arrow().column("id").to_pylist() == list(range(10))
    assert _data_files(path) == files
    with pytest.raises(Cancelled):
        Table.create(str(tmp_path / "new"), _data(), max_rows_per_file=PER_FILE, progress=make())
    with pytest.raises(E.TableNotFoundError):
        Table.open(str(tmp_path / "new"))
    assert _data_files(tmp_path / "new") == []
    cat = connect(warehouse=str(tmp_path / "wh"))
    cat.create_namespace("ns")
    with pytest.raises(Cancelled):
        cat.create_table("ns.t", _data(), progress=make())
    assert not cat.table_exists("ns.t")
    cat.close()
