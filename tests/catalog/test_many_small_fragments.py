"""Tables of many small fragments: scans read them in groups (each column of
a group decoded in one run) and takes gather their rows together
(:mod:`tessera.format.table.whole_reads`).  What they return is checked
against pylance reading the same table; what they cost is pinned as counts."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tessera.catalog import Table
from tessera.format.errors import ChecksumMismatchError, CorruptFileError
from tessera.format.file import datafile
from tessera.format.file import schema as lschema
from tessera.format.file.checksum import checksums
from tessera.format.file.container import Footer
from tessera.format.file.v21.read.miniblock import MiniBlockPage
from tessera.format.table import whole_reads

PER_FILE = 40


def same(got: pa.Table, want: pa.Table) -> bool:
    """The same columns, types and values (pylance's dictionaries and
    nullability flags of special columns may be represented differently)."""
    return (
        got.schema.names == want.schema.names
        and [f.type for f in got.schema] == [f.type for f in want.schema]
        and got.to_pylist() == want.to_pylist()
    )


def _data(lo: int, n: int) -> pa.Table:
    i = np.arange(lo, lo + n, dtype=np.int64)
    return pa.table(
        {
            "k": i,
            "f": (i * 0.5).astype(np.float64),
            "s": pa.array(np.char.add("café-", i.astype(str))),
            "maybe": pa.array([None if x % 7 == 0 else int(x % 100) for x in i], pa.int32()),
            "flag": pa.array(i % 3 == 0),
            "cat": pa.array([f"c{x % 4}" for x in i]).dictionary_encode(),
            # low-cardinality strings: dictionary pages, each file with its own dictionary
            "tag": pa.array([f"t{x % 5}" for x in i]),
            "tagn": pa.array([None if x % 7 == 1 else f"n{x % 3}" for x in i]),
            "lst": pa.array([[int(x), int(x) + 1] if x % 5 else None for x in i], pa.list_(pa.int64())),
            "st": pa.array([{"a": int(x), "b": f"b{x}"} for x in i]),
        }
    )


@pytest.fixture
def small(tmp_path):
    """A table of 30 small fragments written in 3 commits, some rows deleted,
    and a column added after the first commits (older fragments read it as a
    data file of their own)."""
    t = Table.create(str(tmp_path / "t"), _data(0, 400), max_rows_per_file=PER_FILE)
    t.append(_data(400, 400))
    t.append(_data(800, 400))
    t.delete("k % 11 = 3 OR (k >= 100 AND k < 140)")
    t.add_columns({"twice": "k * 2"})
    assert len(t.fragments) >= 29
    return t


@pytest.fixture
def groups(monkeypatch):
    """The number of fragments of every group read or taken at once."""
    got: list[int] = []
    real_read, real_take = whole_reads.read_whole, whole_reads.take_whole

    def read(readers, **kw):
        got.append(len(readers))
        return real_read(readers, **kw)

    def take(readers, rows):
        got.append(len(readers))
        return real_take(readers, rows)

    monkeypatch.setattr(whole_reads, "read_whole", read)
    monkeypatch.setattr(whole_reads, "take_whole", take)
    return got


def test_scans_and_takes_agree_with_pylance(small, groups, lance):
    ds = lance.dataset(small.uri)
    want = ds.to_table()
    assert same(small.to_arrow(), want)
    assert max(groups) > 1  # fragments were read together
    cols = ["s", "k", "st"]
    assert same(small.to_arrow(columns=cols), ds.to_table(columns=cols))
    for flt in ("k > 500 AND k < 900", "maybe IS NULL", "s = 'café-777'", "f < 0", "twice % 3 = 0"):
        got = small.to_arrow(columns=["k", "s", "lst"], filter=flt)
        assert same(got, ds.to_table(columns=["k", "s", "lst"], filter=flt)), flt
        assert small.count_rows(flt) == ds.count_rows(flt), flt
    addr = small.to_arrow(columns=["k"], with_row_address=True)
    assert same(addr, ds.to_table(columns=["k"], with_row_address=True))
    rows = want.num_rows
    for picks in ([0], [rows - 1, 0, 5, 5], np.random.default_rng(3).choice(rows, 200, replace=False)):
        groups.clear()
        got = small.take(list(picks))
        assert same(got, ds.take(list(picks))), list(picks)[:5]
        assert len(groups) == 1  # one gathering, however many fragments


def test_a_held_tables_takes_plan_each_files_field_once(small, monkeypatch, lance):
    """A take over many small files plans (file, field) pairs: their pages and
    whether they join are kept with the cached file reader, so a held table's
    next take works out none of it again, and takes the same rows."""
    calls: list[int] = []
    real = whole_reads._whole_pages

    def counted(r, i):
        calls.append(i)
        return real(r, i)

    monkeypatch.setattr(whole_reads, "_whole_pages", counted)
    ds = lance.dataset(small.uri)
    rows = ds.count_rows()
    cols = ["k", "f", "s", "maybe", "tag", "twice"]
    for seed in (5, 6, 7):
        picks = [int(x) for x in np.random.default_rng(seed).choice(rows, 150, replace=False)]
        calls.clear()
        assert same(small.take(picks, columns=cols), ds.take(picks, columns=cols))
        if seed == 5:
            assert len(calls) >= 29 * len(cols)  # every file's field planned on the first take
        else:
            assert calls == []  # and never again


def test_takes_across_fragments_gather_every_fragment_at_once(small, groups, lance):
    ds = lance.dataset(small.uri)
    picks = [int(x) for x in np.random.default_rng(4).choice(ds.count_rows(), 300, replace=False)]
    got = small.take(picks)
    assert same(got, ds.take(picks))
    assert len(groups) == 1 and groups[0] > 20  # one gathering of every fragment concerned
    assert same(small.take(picks, columns=["lst", "cat"]), ds.take(picks, columns=["lst", "cat"]))
    assert same(small.take(picks, columns=["tag", "tagn"]), ds.take(picks, columns=["tag", "tagn"]))


def test_a_pylance_table_of_small_fragments_reads_the_same(tmp_path, lance):
    uri = str(tmp_path / "p")
    data = pa.concat_tables([_data(0, 400), _data(400, 400)])
    lance.write_dataset(data, uri, max_rows_per_file=PER_FILE, max_rows_per_group=PER_FILE)
    ds = lance.dataset(uri)
    ds.delete("k % 13 = 1")
    ds = lance.dataset(uri)
    t = Table.open(uri)
    assert same(t.to_arrow(), ds.to_table())
    assert same(t.to_arrow(filter="k >= 390 AND k < 410"), ds.to_table(filter="k >= 390 AND k < 410"))
    picks = [3, 700, 41, 40, 39]
    assert same(t.take(picks), ds.take(picks))


def test_a_limit_reads_one_fragment(small):
    scan = small.scanner(limit=5)
    assert scan.to_table().num_rows == 5
    assert scan.stats["fragments"] == 1


def test_each_column_of_a_group_decodes_in_one_run(tmp_path, monkeypatch):
    """200 fragments x 3 columns: a scan decodes each column of each group
    in runs of chunks of at most RUN_PAGES pages (groups of 1, 1, 2, 4, ...
    fragments), not once per file, and parses each file's tail once (none again)."""
    t = Table.create(
        str(tmp_path / "t"),
        pa.table({"a": np.arange(4000), "b": np.arange(4000) * 0.25, "c": pa.array(np.arange(4000).astype(str))}),
        max_rows_per_file=20,
    )
    assert len(t.fragments) == 200
    decodes, parses, schemas = [], [], []
    real_decode, real_parse, real_schema = MiniBlockPage._decode_at, Footer.unpack, lschema.fields_from_protos

    def decode(self, *a, **kw):
        decodes.append(1)
        return real_decode(self, *a, **kw)

    def parse(*a, **kw):
        parses.append(1)
        return real_parse(*a, **kw)

    def schema(*a, **kw):
        schemas.append(1)
        return real_schema(*a, **kw)

    monkeypatch.setattr(MiniBlockPage, "_decode_at", decode)
    monkeypatch.setattr(Footer, "unpack", parse)
    monkeypatch.setattr(lschema, "fields_from_protos", schema)
    datafile._PARSED.clear()
    datafile._PARSED_HELD[0] = 0
    datafile._SCHEMAS.clear()
    assert t.to_arrow().num_rows == 4000
    runs = 3 * sum(-(-g // whole_reads.RUN_PAGES) for g in (1, 1, 2, 4, 8, 16, 32, 64, 72))
    assert len(decodes) == runs
    assert len(parses) == 200  # every file's tail parsed once ...
    assert len(schemas) == 1  # (files written alike share their parsed schema)
    decodes.clear()
    parses.clear()
    assert t.to_arrow(filter="a % 2 = 0").num_rows == 2000
    assert len(parses) == 0  # ... and not again
    assert len(decodes) == runs


@pytest.mark.parametrize("mode", ["off", "verify"])
def test_a_damaged_string_in_one_file_of_a_group_names_that_file(tmp_path, mode):
    """Files without checksums (``off``: as pylance writes them) fail the UTF-8
    check; with them, the checksum fails first.  Either way the error names the file."""
    with checksums(mode):
        t = Table.create(str(tmp_path / "t"), _data(0, 400).select(["k", "s"]), max_rows_per_file=PER_FILE)
    victim = t.fragments[4].files[0].path
    path = tmp_path / "t" / "data" / victim
    raw = path.read_bytes()
    assert raw.count("é".encode()) == PER_FILE
    path.write_bytes(raw.replace("é".encode(), b"\xc3\x29"))
    t = Table.open(str(tmp_path / "t"))
    for read in (lambda: t.to_arrow(), lambda: t.take(list(range(0, 400, 7)))):
        with pytest.raises(CorruptFileError) as info:
            read()
        assert victim in str(info.value)
        if mode == "off":
            assert "UTF-8" in str(info.value) and "'s'" in str(info.value)
        else:
            assert isinstance(info.value, ChecksumMismatchError)
    if mode == "off":  # the file's other column still reads (with checksums, its block is damaged too)
        assert t.to_arrow(columns=["k"]).num_rows == 400


def test_compaction_reads_small_fragments_together_and_keeps_every_row(small, groups, lance):
    before = small.to_arrow()
    small.compact()
    assert max(groups) > 1  # its read gathered fragments
    assert len(small.fragments) == 1
    assert same(small.to_arrow(), before)
    assert same(lance.dataset(small.uri).to_table(), before)


def test_compaction_of_small_fragments_keeps_stable_row_ids(tmp_path, groups):
    t = Table.create(str(tmp_path / "t"), _data(0, 400).select(["k", "s"]), max_rows_per_file=PER_FILE,
                     stable_row_ids=True)  # fmt: skip
    t.delete("k % 9 = 4")
    t.update({"s": "'changed'"}, where="k >= 100 AND k < 110")
    before = t.to_arrow(with_row_id=True)
    t.compact()
    assert max(groups) > 1
    after = t.to_arrow(with_row_id=True)
    assert sorted(after.to_pylist(), key=lambda r: r["_rowid"]) == sorted(before.to_pylist(), key=lambda r: r["_rowid"])
    ids = before.column("_rowid").to_pylist()[:5]
    assert t.take_rows(ids).column("k").to_pylist() == before.column("k").to_pylist()[:5]


def test_fragments_of_different_sizes_decode_together(tmp_path, monkeypatch, lance):
    """Streaming appends leave fragments of every size: pages whose layouts
    differ only in their item counts still decode in one run."""
    cols = ["k", "f", "maybe", "tagn"]  # tagn: dictionary pages, a dictionary per file
    t = Table.create(str(tmp_path / "t"), _data(0, 10).select(cols))
    at = 10
    for n in range(11, 41):
        t.append(_data(at, n).select(cols))
        at += n
    decodes = []
    real = MiniBlockPage._decode_at

    def decode(self, *a, **kw):
        decodes.append("'tagn'" in self.where)
        return real(self, *a, **kw)

    monkeypatch.setattr(MiniBlockPage, "_decode_at", decode)
    got = t.to_arrow()
    assert len(t.fragments) == 31
    # groups of 1, 1, 2, 4, 8, 15 fragments: a run per column per group; tagn's
    # small files are dictionary pages or plain ones (the writer's choice per
    # file), a run per change of encoding - still far fewer than its 31 files
    assert decodes.count(False) <= 3 * 6
    assert 0 < decodes.count(True) <= 12
    assert same(got, lance.dataset(t.uri).to_table())
