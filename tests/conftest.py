"""Shared pytest fixtures."""

from __future__ import annotations

import os

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


# real services (moto, Redis, PostgreSQL, MariaDB); see tests/services.py
# loaded by path under a unique name: putting tests/ on sys.path would let
# tests/catalog shadow the catalog package
import importlib.util  # noqa: E402
import sys  # noqa: E402

# the repository root, so deploy/ scripts import as `deploy.<script>` in tests
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.append(_ROOT)

_spec = importlib.util.spec_from_file_location(
    "tessera_test_services", os.path.join(os.path.dirname(__file__), "services.py")
)
services = importlib.util.module_from_spec(_spec)
sys.modules["tessera_test_services"] = services
_spec.loader.exec_module(services)
# second virtual environments (an older pylance, the lowest pyarrow); see tests/venvs.py
_venvs_spec = importlib.util.spec_from_file_location(
    "tessera_test_venvs", os.path.join(os.path.dirname(__file__), "venvs.py")
)
venvs = importlib.util.module_from_spec(_venvs_spec)
sys.modules["tessera_test_venvs"] = venvs
_venvs_spec.loader.exec_module(venvs)
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
