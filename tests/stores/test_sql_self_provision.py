"""SQL manifest stores on a server provision themselves on first use, as
SQLite and Redis do (issue 29): the first ``Table.create(...,
commit_store="postgresql+psycopg://...")`` on an empty database works.
``?provision=false`` opts out (an application role that may not create
tables), and ``tessera store provision URL`` does it ahead of time."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from click.testing import CliRunner
from tessera_test_services import fresh_database

from tessera.catalog import Table
from tessera.catalog.cli import main
from tessera.stores import sql_migrate
from tessera.stores.errors import StoreSchemaError
from tessera.stores.registry import open_manifest_store


@pytest.fixture(params=["postgres", "mysql"])
def empty_db(request):
    url, drop = fresh_database(request.getfixturevalue(f"{request.param}_url"))
    yield url
    drop()


def test_the_first_table_on_an_empty_database_provisions_it(empty_db, tmp_path):
    assert sql_migrate.current_revision(empty_db) is None
    t = Table.create(str(tmp_path / "t"), pa.table({"i": [1, 2]}), commit_store=empty_db)
    t.append(pa.table({"i": [3]}))
    assert sql_migrate.current_revision(empty_db) == sql_migrate.head_revision()
    assert Table.open(str(tmp_path / "t"), commit_store=empty_db).count_rows() == 3
    t.close()


def test_provision_false_refuses_and_names_the_command(empty_db):
    with pytest.raises(StoreSchemaError, match="tessera store provision"):
        open_manifest_store(empty_db + "?provision=false")
    assert sql_migrate.current_revision(empty_db) is None  # nothing was created


def test_the_cli_provisions_ahead_of_time(empty_db):
    runner = CliRunner()
    res = runner.invoke(main, ["store", "provision", empty_db, "--check"])
    assert res.exit_code == 3 and "revision (none)" in res.output, res.output
    res = runner.invoke(main, ["store", "provision", empty_db])
    assert res.exit_code == 0 and "upgraded (empty) ->" in res.output and "store id:" in res.output, res.output
    res = runner.invoke(main, ["store", "provision", empty_db, "-o", "json"])
    summary = json.loads(res.stdout)
    assert summary["before"] == summary["revision"] == sql_migrate.head_revision() and summary["store_id"]
    res = runner.invoke(main, ["store", "provision", empty_db, "--check"])
    assert res.exit_code == 0, res.output
    # provisioned with provision=false from now on: the application role needs no DDL
    open_manifest_store(empty_db + "?provision=false").close()


def test_the_cli_hides_the_password(postgres_url):
    import sqlalchemy as sa

    url, drop = fresh_database(postgres_url)
    try:
        with_secret = sa.engine.make_url(url).set(password="s3cret-pw").render_as_string(hide_password=False)
        res = CliRunner().invoke(main, ["store", "provision", with_secret])  # trust auth: any password
        assert res.exit_code == 0, res.output
        assert "s3cret-pw" not in res.output and "***" in res.output
    finally:
        drop()
