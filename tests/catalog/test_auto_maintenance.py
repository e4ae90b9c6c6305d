"""Maintenance a table's properties ask for after each commit: pylance's
``lance.auto_cleanup.*`` honoured on Tessera's writes as pylance honours them
(compared with pylance 14 doing the same on its own table), and Tessera's
opt-in ``tessera.auto_compact.*``; neither ever fails a write."""

from __future__ import annotations

import datetime as dt
import logging
import time

import pyarrow as pa
import pytest

from tessera.catalog import Table
from tessera.catalog.table import auto_maintenance
from tessera.catalog.table.auto_maintenance import parse_duration

EVERY = "lance.auto_cleanup.interval"
AGE = "lance.auto_cleanup.older_than"
RETAIN = "lance.auto_cleanup.retain_versions"


def _row(i: int) -> pa.Table:
    return pa.table({"i": pa.array([i], pa.int64())})


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0), ("0s", 0), ("3600s", 3600), ("14d", 14 * 86400), ("1 day", 86400), ("2weeks", 14 * 86400),
     ("1h 30m", 5400), ("5ms", 0.005), ("14days", 14 * 86400)],
)  # fmt: skip
def test_durations_read_as_pylance_reads_them(text, seconds):
    assert parse_duration(text) == dt.timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["3600", "abc", "", "1x", "-1d", "1.5h"])
def test_a_duration_without_a_unit_is_refused(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def _tessera_history(path: str, config: dict[str, str], appends: int) -> list[int]:
    t = Table.create(path, _row(0))
    t.set_properties(config)
    for i in range(appends):
        t.append(_row(i + 1))
    return [h["version"] for h in Table.open(path).versions()]


def _pylance_history(lance, path: str, config: dict[str, str], appends: int) -> list[int]:
    ds = lance.write_dataset(_row(0), path)
    ds.update_config(config)
    for i in range(appends):
        ds = lance.write_dataset(_row(i + 1), path, mode="append")
    return sorted(v["version"] for v in lance.dataset(path).versions())


@pytest.mark.parametrize(
    "config",
    [
        {EVERY: "3", AGE: "0s"},
        {EVERY: "4"},  # no age limit
        {EVERY: "0", AGE: "0"},  # every commit
        {EVERY: "2", AGE: "0s", RETAIN: "3"},
        {EVERY: "2", AGE: "14d"},  # nothing old enough
    ],
)  # fmt: skip
def test_tessera_cleans_up_as_pylance_does(lance, tmp_path, config):
    ours = _tessera_history(str(tmp_path / "ours"), config, 7)
    theirs = _pylance_history(lance, str(tmp_path / "theirs"), config, 7)
    assert ours == theirs
    t = Table.open(str(tmp_path / "ours"))
    assert t.count_rows() == 8 and lance.dataset(str(tmp_path / "ours")).count_rows() == 8


def test_an_age_limit_keeps_recent_versions(tmp_path):
    path = str(tmp_path / "t")
    t = Table.create(path, _row(0))
    t.append(_row(1))
    time.sleep(1.2)
    t.set_properties({"lance.auto_cleanup.interval": "1", "lance.auto_cleanup.older_than": "1s"})  # v3
    t.append(_row(2))  # v4: versions 1 and 2 are over a second old
    t.append(_row(3))  # v5: v3 and v4 are recent
    assert [h["version"] for h in t.versions()] == [3, 4, 5]


def test_a_tagged_version_stops_the_cleanup_and_the_write_stands(tmp_path, caplog):
    path = str(tmp_path / "t")
    t = Table.create(path, _row(0))
    t.tags.create("keep", 1)
    t.set_properties({"lance.auto_cleanup.interval": "1", "lance.auto_cleanup.older_than": "0s"})
    with caplog.at_level(logging.WARNING, logger=auto_maintenance.__name__):
        t.append(_row(1))
    assert t.version == 3 and t.count_rows() == 2
    assert [h["version"] for h in t.versions()] == [1, 2, 3]  # nothing removed, as pylance
    assert "tagged" in caplog.text and "keep" in caplog.text
    t.tags.delete("keep")
    t.append(_row(2))
    assert [h["version"] for h in t.versions()] == [3, 4]


@pytest.mark.parametrize(
    "config",
    [
        {"lance.auto_cleanup.interval": "abc"},
        {"lance.auto_cleanup.interval": "1", "lance.auto_cleanup.older_than": "3600"},
        {"lance.auto_cleanup.interval": "1", "lance.auto_cleanup.retain_versions": "0"},
        {"tessera.auto_compact.min_fragments": "many"},
    ],
)
def test_bad_properties_are_logged_and_never_fail_a_write(tmp_path, caplog, config):
    t = Table.create(str(tmp_path / "t"), _row(0))
    t.set_properties(config)
    with caplog.at_level(logging.WARNING, logger=auto_maintenance.__name__):
        t.append(_row(1))
    assert t.count_rows() == 2 and len(t.versions()) == 3
    assert "failed after a successful commit" in caplog.text


def test_pylance_and_tessera_writing_one_table_both_clean_up(lance, tmp_path):
    path = str(tmp_path / "t")
    t = Table.create(path, _row(0))
    t.set_properties({"lance.auto_cleanup.interval": "2", "lance.auto_cleanup.older_than": "0s"})
    for i in range(1, 9):
        if i % 2:
            lance.write_dataset(_row(i), path, mode="append")
        else:
            t = Table.open(path)
            t.append(_row(i))
    kept = [h["version"] for h in Table.open(path).versions()]
    assert kept == sorted(v["version"] for v in lance.dataset(path).versions())
    assert len(kept) <= 3 and kept[-1] == 10
    for v in kept:
        assert Table.open(path, version=v).count_rows() == lance.dataset(path, version=v).count_rows()
    assert Table.open(path).to_arrow().sort_by("i").column("i").to_pylist() == list(range(9))


def test_auto_compaction_merges_small_fragments_once_there_are_enough(lance, tmp_path):
    path = str(tmp_path / "t")
    t = Table.create(path, _row(0))
    t.set_properties(
        {"tessera.auto_compact.min_fragments": "4", "tessera.auto_compact.target_rows_per_fragment": "100"}
    )
    t.append(_row(1))
    t.append(_row(2))
    assert len(t.fragments) == 3
    t.append(_row(3))  # the fourth small fragment: compacted after the append's commit
    assert len(t.fragments) == 1
    ops = [h["operation"] for h in t.versions()]
    assert ops[-2:] == ["append", "rewrite"] or ops[-3:] == ["append", "reserve_fragments", "rewrite"]
    assert t.to_arrow().sort_by("i").column("i").to_pylist() == [0, 1, 2, 3]
    assert lance.dataset(path).to_table().sort_by("i").column("i").to_pylist() == [0, 1, 2, 3]


def test_a_failed_auto_compaction_never_fails_the_write(tmp_path, monkeypatch, caplog):
    t = Table.create(str(tmp_path / "t"), _row(0))
    t.set_properties({"tessera.auto_compact.min_fragments": "2"})

    def broken(self, *a, **k):
        raise OSError("disk full (injected)")

    monkeypatch.setattr(Table, "compact", broken)
    with caplog.at_level(logging.WARNING, logger=auto_maintenance.__name__):
        t.append(_row(1))
    assert t.count_rows() == 2 and len(t.fragments) == 2
    assert "disk full (injected)" in caplog.text
