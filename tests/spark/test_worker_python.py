"""register(spark) refuses a session whose Python workers would run an
interpreter that cannot import Tessera (PYSPARK_PYTHON unset: `python3` from
PATH rather than the venv's), saying how to fix it, instead of every job
failing with ModuleNotFoundError inside a Py4J traceback (issue 29).

The session is a stand-in holding the two values register() reads (the
``spark.pyspark.python`` setting and the context's ``pythonExec``); the
interpreters asked are real."""

from __future__ import annotations

import shutil
import sys
import types

import pytest

pytest.importorskip("pyspark")

from tessera.catalog import spark as tspark  # noqa: E402
from tessera.errors import SparkWorkerPythonError  # noqa: E402


def _session(python_exec: str, conf_python: str | None = None):
    conf = {"spark.pyspark.python": conf_python} if conf_python else {}
    return types.SimpleNamespace(
        conf=types.SimpleNamespace(get=lambda key, default=None: conf.get(key, default)),
        sparkContext=types.SimpleNamespace(pythonExec=python_exec),
    )


def _python_without_tessera() -> str:
    for candidate in ("/usr/bin/python3", shutil.which("python3")):
        probe = [candidate, "-c", "import tessera"] if candidate else None
        if probe and tspark.subprocess.run(probe, capture_output=True, cwd="/").returncode:
            return candidate
    pytest.skip("every python3 here imports tessera")


def test_workers_without_tessera_are_refused_with_the_fix(monkeypatch):
    monkeypatch.setattr(tspark, "_WORKER_PYTHONS_OK", set())
    bare = _python_without_tessera()
    with pytest.raises(SparkWorkerPythonError) as exc:
        tspark.check_worker_python(_session(bare))
    text = str(exc.value)
    assert f"PYSPARK_PYTHON={sys.executable}" in text and "cannot import tessera" in text and bare in text
    with pytest.raises(SparkWorkerPythonError):  # the setting wins over the environment's default
        tspark.check_worker_python(_session(sys.executable, conf_python=bare))


def test_workers_running_an_interpreter_with_tessera_pass(monkeypatch):
    monkeypatch.setattr(tspark, "_WORKER_PYTHONS_OK", set())
    tspark.check_worker_python(_session(sys.executable))  # this interpreter: nothing run
    assert tspark._WORKER_PYTHONS_OK == set()
    venv_python3 = shutil.which("python3", path=str(__import__("pathlib").Path(sys.executable).parent))
    if venv_python3 and venv_python3 != sys.executable:
        tspark.check_worker_python(_session(venv_python3))  # asked once, then remembered
    missing = "/nonexistent/python3"
    with pytest.raises(SparkWorkerPythonError, match="nonexistent"):
        tspark.check_worker_python(_session(missing))
