"""Shared pytest fixtures."""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

import pytest


def pytest_configure(config):
    # hypothesis: deterministic and bounded in CI
    try:
        from hypothesis import settings

        settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True)
        settings.register_profile("dev", max_examples=40, deadline=None)
        settings.load_profile("ci" if os.environ.get("CI") else "dev")
    except ImportError:  # pragma: no cover
        pass


#: with ``--dist loadfile`` (README's test command), the work units that start first: they run
#: longest (a second venv and a run of the tests in it; every Spark test on one worker; a wheel
#: build), and started last they would leave the other workers idle at the end
LONG_UNITS = (
    "tests/test_pyarrow_floor.py",
    "tests/spark",
    "tests/test_wheel.py",
    "tests/commit/test_many_writers_s3.py",
    "tests/commit/test_starvation.py",
)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: a venv without xdist must not fail on it
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` (pytest-xdist) with two changes: the files under
    ``tests/spark/`` are one unit, so one worker runs them all in one
    SparkSession (one JVM, warmed up once), and :data:`LONG_UNITS` go first,
    then the rest by number of tests as xdist orders them."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LongestFirst(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return "tests/spark" if scope.startswith("tests/spark/") else scope

        def _assign_work_unit(self, node) -> None:
            # the next unit: the first of LONG_UNITS still queued, else xdist's next; only the
            # queue is reordered, never a worker's collection (work is sent as positions in it)
            def rank(scope: str) -> int:
                return LONG_UNITS.index(scope) if scope in LONG_UNITS else len(LONG_UNITS)

            self.workqueue.move_to_end(min(self.workqueue, key=rank), last=False)
            super()._assign_work_unit(node)

    return LongestFirst(config, log)


@pytest.fixture(scope="session")
def lance():
    """pylance, the independent reference implementation (a test dependency)."""
    import lance as _lance

    return _lance


# The test helper modules, imported by these names from any test module
# (``from tessera_test_services import TesseraServer``), loaded from their files
# on first import: putting tests/ (or one of its folders) on sys.path would let
# tests/catalog or tests/stores shadow the packages of the same name.
HELPERS = {
    "tessera_test_services": "services.py",  # real services: moto, Redis, PostgreSQL, MariaDB
    "tessera_test_venvs": "venvs.py",  # second virtual environments (an older pylance, the lowest pyarrow)
    "tessera_test_fault_proxy": "fault_proxy.py",  # a TCP proxy that loses replies
    "tessera_test_http_proxy": "http_proxy.py",  # an HTTP proxy in front of moto
    "tessera_test_store_fixtures": "stores/manifest_store_fixtures.py",  # one manifest store per backend
    "tessera_test_matrix": "format/matrix.py",  # the type matrix of the data-file tests
    "tessera_test_interop": "interop/clients.py",  # the interop suite's clients and comparisons
}


class _Helpers(importlib.abc.MetaPathFinder):
    """Finds the modules of :data:`HELPERS` by name, in their files under tests/."""

    def find_spec(self, name, path=None, target=None):
        if name not in HELPERS:
            return None
        return importlib.util.spec_from_file_location(name, os.path.join(os.path.dirname(__file__), HELPERS[name]))


if not any(isinstance(f, _Helpers) for f in sys.meta_path):
    sys.meta_path.append(_Helpers())

# the repository root, so deploy/ scripts import as `deploy.<script>` in tests
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.append(_ROOT)

import tessera_test_services as services  # noqa: E402

moto_server, mysql_url, postgres_url, redis_url = (
    services.moto_server,
    services.mysql_url,
    services.postgres_url,
    services.redis_url,
)


@pytest.fixture(scope="session", autouse=True)
def _shared_services_keep_nothing(tmp_path_factory):
    """Tests clean up after themselves; this sweeps what a failed or
    interrupted test left in the shared PostgreSQL, MariaDB and Redis."""
    basetemp = str(tmp_path_factory.getbasetemp())
    yield
    services.forget_session_leftovers(basetemp)
