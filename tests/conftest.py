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
