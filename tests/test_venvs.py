"""tests/venvs.py: second virtual environments, built once, reused while
their key holds, safe when two processes (pytest-xdist workers) ask at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import tessera_test_venvs as venvs  # loaded by tests/conftest.py

NO_PYTHON = "/nonexistent/bin/python3"


def _marker(python: str) -> dict:
    with open(os.path.join(os.path.dirname(os.path.dirname(python)), ".tessera-venv.json")) as f:
        return json.load(f)


def test_two_processes_asking_at_once_build_it_once(tmp_path):
    code = (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('v', {venvs.__file__!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        f"print(m.build_venv('twice', [], root={str(tmp_path)!r}))\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert len(set(outs)) == 1 and os.path.exists(outs[0])
    built = _marker(outs[0])["built"]
    # reused while the key holds: no rebuild
    assert venvs.build_venv("twice", [], root=str(tmp_path)) == outs[0]
    assert _marker(outs[0])["built"] == built
    assert subprocess.run([outs[0], "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True).stdout
    assert sorted(os.listdir(tmp_path)) == [".venv-twice", ".venv-twice.lock"]


def test_a_changed_key_rebuilds_and_a_failure_leaves_nothing(tmp_path, monkeypatch):
    python = venvs.build_venv("k", [], root=str(tmp_path))
    first = _marker(python)
    monkeypatch.setattr(venvs, "venv_key", lambda reqs, python=None, paths=(): "another-key")
    assert venvs.build_venv("k", [], root=str(tmp_path)) == python
    assert _marker(python)["key"] == "another-key" and _marker(python)["built"] != first["built"]
    monkeypatch.undo()
    with pytest.raises(venvs.VenvError, match=NO_PYTHON):
        venvs.build_venv("k", [], root=str(tmp_path), python=NO_PYTHON)
    assert not os.path.exists(os.path.join(tmp_path, ".venv-k"))
    assert venvs.venv_key(["a", "b"]) == venvs.venv_key(["b", "a"]) != venvs.venv_key(["a"])
    assert venvs.venv_key([]) != venvs.venv_key([], NO_PYTHON)


@pytest.mark.parametrize("ci", [True, False])
def test_a_failed_build_fails_in_ci_and_skips_elsewhere(tmp_path, monkeypatch, ci):
    monkeypatch.setattr(venvs, "IN_CI", ci)
    outcome = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(outcome, match=NO_PYTHON):
        venvs.ensure_venv("bad", ["pylance"], root=str(tmp_path), python=NO_PYTHON)


def test_paths_are_on_the_venvs_path_after_its_own(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "tessera_venv_probe.py").write_text("WHERE = 'src'\n")
    python = venvs.build_venv("p", [], root=str(tmp_path), paths=[str(src)])
    got = venvs.run_python(python, "-c", "import tessera_venv_probe as m; print(m.WHERE)", text=True)
    assert got.returncode == 0 and got.stdout.strip() == "src", got.stderr
    assert venvs.venv_key([], paths=[str(src)]) != venvs.venv_key([])


def test_the_known_venvs_can_be_built_by_name_without_pytest():
    """``python3 tests/venvs.py NAME``: the module imports nothing outside the standard library."""
    code = (
        "import builtins, sys\n"
        "real = builtins.__import__\n"
        "def guard(name, *a, **k):\n"
        "    assert name.split('.')[0] not in ('pytest', 'tessera'), name\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = guard\n"
        "import runpy\n"
        f"sys.argv = [{venvs.__file__!r}]\n"
        f"runpy.run_path({venvs.__file__!r}, run_name='__main__')\n"
    )
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    assert sorted(venvs.KNOWN) == ["floor", "lance13"]
    requirements, paths = venvs.KNOWN["floor"]()
    assert requirements[0] == f"pyarrow=={venvs.floor_version()}.*" and paths == [venvs.ROOT]
    assert not any(r.startswith("-e") or r == venvs.ROOT for r in requirements)


def test_names_are_checked():
    with pytest.raises(ValueError):
        venvs.venv_dir("../escape")


def test_uv_installs_where_it_is_found_and_pip_otherwise(tmp_path, monkeypatch):
    """README's set-up puts uv in the main venv; a build then takes seconds and
    passes the machine's pip constraints on (uv reads no pip configuration)."""
    tool = venvs.uv()
    assert tool is not None, "README's set-up installs uv into .venv"
    python = venvs.build_venv("u", ["six"], root=str(tmp_path))
    probe = "import six, importlib.util as u; print(u.find_spec('pip') is None)"
    got = venvs.run_python(python, "-c", probe, text=True)
    assert got.returncode == 0 and got.stdout.strip() == "True", got.stderr
    cmd = venvs._install_command(str(tmp_path / "x"), ["six"])
    assert cmd[:3] == [tool, "pip", "install"] and cmd[-1] == "six"
    for path in venvs.CONSTRAINTS:
        assert (path in cmd) == os.path.exists(path), (path, cmd)
    monkeypatch.setattr(venvs, "uv", lambda: None)
    cmd = venvs._install_command(str(tmp_path / "x"), ["six"])
    assert cmd[:4] == [os.path.join(str(tmp_path / "x"), "bin", "python"), "-m", "pip", "install"]
    assert "--constraint" not in cmd  # pip applies its own configuration
