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
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from services import moto_server, mysql_url, postgres_url, redis_url  # noqa: E402,F401
