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
