"""The manifest stores' key check: a key is parsed once per process (every
store call checks its key, a commit makes several), and a bad key is refused
every time."""

from __future__ import annotations

import pytest

from tessera.stores import manifest_checks
from tessera.stores.errors import InvalidURIError


def test_a_good_key_is_parsed_once_and_a_bad_one_refused_every_time(monkeypatch, tmp_path):
    parsed: list[str] = []
    real = manifest_checks.normalize_table_uri
    monkeypatch.setattr(manifest_checks, "normalize_table_uri", lambda key: parsed.append(key) or real(key))
    good = real(str(tmp_path / "t"))
    assert [manifest_checks.check_key(good) for _ in range(3)] == [good] * 3
    assert parsed == [good]
    bad = str(tmp_path / "a" / ".." / "t")  # not normalised
    for _ in range(2):
        with pytest.raises(InvalidURIError, match="not normalised"):
            manifest_checks.check_key(bad)
    assert parsed == [good, bad, bad]
    for wrong in ("", None, 7):
        with pytest.raises(InvalidURIError):
            manifest_checks.check_key(wrong)  # type: ignore[arg-type]
