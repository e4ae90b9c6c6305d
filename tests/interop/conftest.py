"""The interoperability suite: the clients users run, against tables Tessera
writes and commits, set up by the tests themselves.

- LanceDB 0.40 (its own Lance 13 core; it does not use the installed pylance)
  through Tessera's namespace plugin (``lancedb.connect_namespace("tessera",
  ...)``) and through ``tessera serve`` with LanceDB's REST client;
- pylance 14 (the main venv), in process;
- pylance 13 in a second virtual environment (``.venv-lance13/``, built by
  ``tests/venvs.py`` on first use: it needs ``lance-namespace<0.12``), driven
  through ``lance_client.py`` run by that venv's Python.

Every comparison is of sorted Arrow tables against what Tessera reads at the
same version (dictionary columns compared by value, their types separately).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from tessera_test_interop import PylanceProcess, Warehouse  # loaded by tests/conftest.py
from tessera_test_services import TesseraServer, unavailable  # loaded by tests/conftest.py
from tessera_test_venvs import ensure_known  # loaded by tests/conftest.py


def _import_or_unavailable(name: str):
    try:
        return __import__(name)
    except ImportError as exc:
        unavailable(name, str(exc))


@pytest.fixture(scope="session")
def lancedb():
    """LanceDB (a dev dependency): its own Lance core, not the installed pylance."""
    return _import_or_unavailable("lancedb")


@pytest.fixture(scope="session")
def lance_namespace():
    return _import_or_unavailable("lance_namespace")


@pytest.fixture(scope="session")
def lance13(tmp_path_factory) -> PylanceProcess:
    """pylance 13.0 in ``.venv-lance13/`` (built on first use; see tests/venvs.py)."""
    python = ensure_known("lance13")
    client = PylanceProcess(python, tmp_path_factory.mktemp("lance13"))
    return client


@pytest.fixture(scope="session")
def lance14_process(tmp_path_factory) -> PylanceProcess:
    """pylance 14 (the main venv's) through the same client script."""
    return PylanceProcess(sys.executable, tmp_path_factory.mktemp("lance14"))


@pytest.fixture()
def warehouse(tmp_path, lancedb, lance_namespace) -> Iterator[Warehouse]:
    """A fresh catalog for one test (no server)."""
    wh = Warehouse(tmp_path / "wh", lancedb, lance_namespace)
    yield wh
    wh.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory, lancedb, lance_namespace) -> Iterator[Warehouse]:
    """A catalog shared by a module, with ``tessera serve`` over it (no token)."""
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    tmp = tmp_path_factory.mktemp("served")
    server = TesseraServer(tmp, token=None, warehouse=str(tmp / "wh"))
    wh = Warehouse(tmp / "wh", lancedb, lance_namespace, server)
    yield wh
    wh.close()
    server.stop()
