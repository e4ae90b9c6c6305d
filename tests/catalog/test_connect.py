"""tessera.connect("name"): named catalogs from a config file and environment
variables, as pyiceberg's load_catalog; a name found nowhere is an error."""

from __future__ import annotations

import pytest

import tessera
from tessera import errors as E


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("TESSERA_CONFIG", raising=False)
    monkeypatch.delenv("TESSERA_WAREHOUSE", raising=False)
    monkeypatch.delenv("TESSERA_CATALOG_URI", raising=False)
    return tmp_path


def test_named_catalog_from_yaml(home):
    (home / ".tessera.yaml").write_text(
        "catalog:\n"
        f"  prod:\n    warehouse: {home / 'prod-wh'}\n    properties:\n      commit.retry.max-seconds: '9'\n"
        f"  default:\n    warehouse: {home / 'default-wh'}\n"
    )
    cat = tessera.connect("prod")
    assert cat.warehouse == str(home / "prod-wh") and cat.retry.max_seconds == 9
    cat.close()
    default = tessera.connect()
    assert default.warehouse == str(home / "default-wh")
    default.close()
    with pytest.raises(E.CatalogConfigError, match="no catalog named 'staging'"):
        tessera.connect("staging")


def test_environment_variables_define_and_override(home, monkeypatch):
    monkeypatch.setenv("TESSERA_CATALOG__LAB__WAREHOUSE", str(home / "lab"))
    monkeypatch.setenv("TESSERA_CATALOG__LAB__COMMIT__RETRY__READ_BACK_SECONDS", "0.5")
    monkeypatch.setenv("TESSERA_CATALOG__LAB__STORAGE_OPTIONS__REGION", "eu-west-1")
    cat = tessera.connect("lab")
    assert cat.warehouse == str(home / "lab")
    assert cat.retry.read_back_seconds == 0.5
    assert cat.storage_options == {"region": "eu-west-1"}
    cat.close()


def test_named_config_file_must_exist_and_parse(home, monkeypatch):
    monkeypatch.setenv("TESSERA_CONFIG", str(home / "missing.toml"))
    with pytest.raises(E.CatalogConfigError, match="does not exist"):
        tessera.connect(warehouse=str(home / "wh"))
    bad = home / "bad.toml"
    bad.write_text("catalog = [1, 2")
    monkeypatch.setenv("TESSERA_CONFIG", str(bad))
    with pytest.raises(E.CatalogConfigError, match="cannot read"):
        tessera.connect("x")
    good = home / "good.toml"
    good.write_text(f'[catalog.x]\nwarehouse = "{home / "x-wh"}"\n')
    monkeypatch.setenv("TESSERA_CONFIG", str(good))
    cat = tessera.connect("x")
    assert cat.warehouse == str(home / "x-wh")
    cat.close()


def test_a_url_first_argument_is_the_catalog_database(home):
    url = f"sqlite:///{home}/cat.db"
    cat = tessera.connect(url, warehouse=str(home / "wh"))
    assert cat.uri == url
    cat.close()


def test_a_misspelt_keyword_is_refused_by_name(home, tmp_path):
    with pytest.raises(E.InvalidArgumentError, match=r"'warehose' \(did you mean 'warehouse'\?\)"):
        tessera.connect(warehose=str(tmp_path / "wh"))
    with pytest.raises(E.InvalidArgumentError, match=r"'storage_option' \(did you mean 'storage_options'\?\)"):
        tessera.connect(warehouse=str(tmp_path / "wh"), storage_option={})
    with pytest.raises(E.InvalidArgumentError, match="'zzz' .known: create, default_file_version"):
        tessera.connect(warehouse=str(tmp_path / "wh"), zzz=1)
    assert not (tmp_path / "wh").exists()  # refused before anything was made


def test_a_new_catalog_says_so(home, tmp_path, caplog):
    wh = str(tmp_path / "wh")
    with caplog.at_level("INFO", logger="tessera.catalog.catalog"):
        first = tessera.connect(warehouse=wh)
    assert first.created and "created=True" in repr(first)
    assert any("created a new, empty catalog" in r.getMessage() for r in caplog.records)
    first.create_namespace("s")
    first.close()
    caplog.clear()
    with caplog.at_level("INFO", logger="tessera.catalog.catalog"):
        again = tessera.connect(warehouse=wh)
    assert not again.created and "created" not in repr(again)
    assert not any("created a new" in r.getMessage() for r in caplog.records)
    again.close()
    with pytest.raises(E.NoCatalogError):
        tessera.connect(warehouse=str(tmp_path / "warehous"), create=False)  # a typo, and nothing is made
    assert not (tmp_path / "warehous").exists()
