"""CI runs what the README says: ``.ci/run`` ends with README's test command,
verbatim, and that command runs the tests in parallel (pytest-xdist), which a
single test file run by hand does not need (pyproject's ``addopts`` has no
``-n``)."""

from __future__ import annotations

import os
import re
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(*parts: str) -> str:
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def test_ci_ends_with_the_readme_test_command():
    last = _read(".ci", "run").strip().splitlines()[-1]
    commands = [line for line in _read("README.md").splitlines() if "-m pytest" in line]
    assert any(line.endswith(last) for line in commands), (last, commands)


def test_the_test_command_runs_in_parallel_and_single_files_need_not():
    last = _read(".ci", "run").strip().splitlines()[-1]
    assert re.search(r"(^| )-n [0-9a-z]+( |$)", last), last
    pyproject = tomllib.loads(_read("pyproject.toml"))
    addopts = pyproject["tool"]["pytest"]["ini_options"]["addopts"]
    assert "-n" not in addopts.split() and "--dist" not in addopts, addopts
    dev = pyproject["project"]["optional-dependencies"]["dev"]
    assert any(req.startswith("pytest-xdist") for req in dev), dev


def test_pre_commit_runs_the_linters_ci_runs():
    import yaml

    config = yaml.safe_load(_read(".pre-commit-config.yaml"))
    entries = [hook["entry"] for repo in config["repos"] for hook in repo["hooks"]]
    ci = _read(".ci", "run").splitlines()
    for tool in (".venv/bin/ruff check", ".venv/bin/ruff format", "scripts/typecheck.py"):
        assert any(tool in line for line in ci), (tool, ci)
        assert any(entry.startswith(tool) or tool in entry for entry in entries), (tool, entries)
