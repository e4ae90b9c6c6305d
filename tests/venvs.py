"""Second virtual environments for tests that need other versions of packages
than the main venv holds (an older pylance, the lowest pyarrow Tessera
declares, ...).

``ensure_venv(name, requirements)`` returns the path of a Python interpreter
whose environment has exactly ``requirements`` installed (pip requirement
strings, e.g. ``["pylance==13.0.*", "lance-namespace<0.12"]``).  The
environment lives under the repository root as ``.venv-<name>/`` (git-ignored)
and is reused while its key — a hash of the requirements, this Python's
version and pip's constraints file — is unchanged; a changed key rebuilds it.
Building holds a file lock (``.venv-<name>.lock``), so two pytest-xdist
workers (or two sessions) asking at once build it once.  Packages come from
the machine's package index, installed by uv where it is found (:func:`uv`:
``$TESSERA_UV``, the main venv's ``.venv/bin/uv``, or ``uv`` on ``PATH``; a
build takes seconds) or else by pip as it is configured (``pip config
list``); the global constraints, ``/etc/xdg/pip/constraints.txt`` here, apply
either way.

A build that fails fails the calling test with ``CI=true`` and skips it
elsewhere (:func:`ensure_venv`); :func:`build_venv` raises :class:`VenvError`
instead, for callers outside a test.

The environments the suite uses are named in :data:`KNOWN` (their
requirements), so ``python3 tests/venvs.py floor lance13`` builds them ahead
of the tests: ``.ci/run`` does, beside the main install.  This module imports nothing outside the standard
library, so any Python 3.11 runs it; the key is the same as the tests'.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
#: pylance 13 for the interop suite (it needs lance-namespace before 0.12)
LANCE13_REQUIREMENTS = ["pylance==13.0.*", "lance-namespace>=0.11.1,<0.12"]
#: the dev tools the pyarrow-floor subset needs, with the versions pyproject's ``dev`` extra asks for
#: (no pandas: Tessera does not depend on it, and the floor run catches a pyarrow call that imports it)
FLOOR_TOOLS = ("pytest", "hypothesis", "pylance", "lancedb", "lance-namespace", "moto", "psycopg", "pymysql")
#: pip's global constraints on this machine (they change what an install resolves to)
CONSTRAINTS = ("/etc/xdg/pip/constraints.txt", "/etc/pip/constraints.txt")
_MARKER = ".tessera-venv.json"


class VenvError(RuntimeError):
    """A second virtual environment could not be built."""


def venv_dir(name: str, root: str | None = None) -> str:
    """Where the environment ``name`` lives: ``<repository>/.venv-<name>``
    (or under ``root``)."""
    if not name or not all(c.isalnum() or c in "-_." for c in name):
        raise ValueError(f"a venv name is letters, digits, '-', '_' or '.', got {name!r}")
    return os.path.join(root or ROOT, f".venv-{name}")


def venv_key(requirements: Sequence[str], python: str | None = None, paths: Sequence[str] = ()) -> str:
    """The hash that decides whether an existing environment can be reused."""
    parts = {
        "requirements": sorted(r.strip() for r in requirements),
        "paths": list(paths),
        "python": sys.version if python is None else os.path.realpath(python),
        "base_prefix": sys.base_prefix,
        "constraints": [_read(path) for path in CONSTRAINTS],
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0].lower()


def _pyproject() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def floor_version() -> str:
    """N of pyproject's ``pyarrow>=N`` (the lowest pyarrow Tessera declares)."""
    deps = _pyproject()["project"]["dependencies"]
    (spec,) = [d for d in deps if _name(d) == "pyarrow"]
    m = re.search(r">=\s*([0-9][0-9.]*)", spec)
    if m is None:
        raise VenvError(f"pyproject.toml declares pyarrow as {spec!r}: no floor (>=N) to test")
    return m.group(1)


def floor_requirements() -> list[str]:
    """The floor venv's pip requirements: pyarrow N.*, pyproject's other
    dependencies and the test tools.  Tessera itself is not installed: the
    venv's ``.pth`` puts the working tree on its path (:data:`KNOWN`)."""
    project = _pyproject()["project"]
    deps = [d for d in project["dependencies"] if _name(d) != "pyarrow"]
    tools = [d for d in project["optional-dependencies"]["dev"] if _name(d) in FLOOR_TOOLS]
    return [f"pyarrow=={floor_version()}.*", *deps, *tools]


#: the environments the suite uses: name -> (requirements, directories put on its path by a .pth)
KNOWN = {
    "floor": lambda: (floor_requirements(), [ROOT]),
    "lance13": lambda: (LANCE13_REQUIREMENTS, []),
}


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def _clean_env() -> dict[str, str]:
    """This process's environment without the main venv's traces."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


def _python(path: str) -> str:
    return os.path.join(path, "bin", "python")


def uv() -> str | None:
    """The uv executable to install with: ``$TESSERA_UV``, else the main
    venv's (README's set-up installs it there), else one on ``PATH``; None: pip."""
    given = os.environ.get("TESSERA_UV")
    if given:
        return given
    local = os.path.join(ROOT, ".venv", "bin", "uv")
    return local if os.access(local, os.X_OK) else shutil.which("uv")


def _install_command(path: str, requirements: Sequence[str]) -> list[str]:
    """The command that installs ``requirements`` into the venv at ``path``."""
    tool = uv()
    if tool is not None:
        # uv reads no pip configuration: the machine's global constraints are passed on
        constraints = [a for c in CONSTRAINTS if os.path.exists(c) for a in ("--constraint", c)]
        return [tool, "pip", "install", "-q", "--python", _python(path), *constraints, *requirements]
    return [
        _python(path),
        "-m",
        "pip",
        "install",
        "-q",
        "--no-input",
        "--disable-pip-version-check",
        # what the tests import is compiled on first use (a build stays under a minute)
        "--no-compile",
        *requirements,
    ]


@contextmanager
def _locked(path: str, timeout: float) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created if missing), waited for at most ``timeout`` s."""
    with open(path, "a+") as f:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise VenvError(
                        f"another process has been building {path[: -len('.lock')]} for {timeout:.0f} s"
                    ) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _ready(path: str, key: str) -> bool:
    try:
        with open(os.path.join(path, _MARKER), encoding="utf-8") as f:
            return json.load(f).get("key") == key and os.path.exists(_python(path))
    except (OSError, ValueError):
        return False


def build_venv(
    name: str,
    requirements: Sequence[str],
    *,
    timeout: float = 1200,
    root: str | None = None,
    python: str | None = None,
    paths: Sequence[str] = (),
) -> str:
    """The environment ``name`` with ``requirements``, built if it is missing or
    stale; the path of its Python.  Raises :class:`VenvError` on failure.
    ``root``: where to keep it instead of the repository root; ``python``: the
    interpreter to build it from (default: this one's); ``paths``: directories
    its Python finds modules in after its own (a ``.pth`` file), as the working
    tree for a venv that runs Tessera's code without installing it."""
    path = venv_dir(name, root)
    key = venv_key(requirements, python, paths)
    if _ready(path, key):
        return _python(path)
    with _locked(path + ".lock", timeout):
        if _ready(path, key):  # built by whoever held the lock before us
            return _python(path)
        shutil.rmtree(path, ignore_errors=True)
        bare = not requirements or uv() is not None  # uv installs without the venv's own pip
        steps = [[python or sys.executable, "-m", "venv", path, *(["--without-pip"] if bare else [])]]
        if requirements:
            steps.append(_install_command(path, requirements))
        started = time.monotonic()
        for cmd in steps:
            left = timeout - (time.monotonic() - started)
            try:
                out = subprocess.run(
                    cmd, capture_output=True, text=True, timeout=max(left, 1), cwd=ROOT, env=_clean_env()
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                shutil.rmtree(path, ignore_errors=True)
                raise VenvError(f"building {path}: {' '.join(cmd[:4])} ...: {exc}") from exc
            if out.returncode != 0:
                shutil.rmtree(path, ignore_errors=True)
                output = out.stdout[-2000:] + out.stderr[-4000:]
                raise VenvError(f"building {path}: {' '.join(cmd)} exited {out.returncode}:\n{output}")
        if paths:
            site = subprocess.run(
                [_python(path), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                capture_output=True,
                text=True,
                env=_clean_env(),
            ).stdout.strip()
            with open(os.path.join(site, "tessera-tests.pth"), "w", encoding="utf-8") as f:
                f.write("".join(p + "\n" for p in paths))
        with open(os.path.join(path, _MARKER), "w", encoding="utf-8") as f:
            json.dump({"key": key, "requirements": list(requirements), "python": sys.version, "built": time.time()}, f)
        return _python(path)


def ensure_venv(name: str, requirements: Sequence[str], **kw) -> str:
    """:func:`build_venv` (same arguments) for a test: a failure fails the test
    with ``CI=true`` and skips it elsewhere."""
    import pytest

    try:
        return build_venv(name, requirements, **kw)
    except VenvError as exc:
        if IN_CI:
            pytest.fail(f"{exc}\n(CI=true: the second virtual environment must build)")
        pytest.skip(str(exc))


def run_python(python: str, *args: str, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    """``python args...`` with an environment free of the main venv's traces
    (``PYTHONPATH``, ``VIRTUAL_ENV``), so the second venv imports only its own packages."""
    env = _clean_env()
    env.update(kw.pop("env", None) or {})
    return subprocess.run([python, *args], capture_output=True, timeout=timeout, env=env, **kw)


def ensure_known(name: str, **kw) -> str:
    """:func:`ensure_venv` of an environment of :data:`KNOWN`, by name."""
    requirements, paths = KNOWN[name]()
    return ensure_venv(name, requirements, paths=paths, **kw)


def main(names: Sequence[str]) -> int:
    """Build the environments of :data:`KNOWN` named (``python3 tests/venvs.py floor lance13``)."""
    for name in names:
        requirements, paths = KNOWN[name]()
        started = time.monotonic()
        print(f"{build_venv(name, requirements, paths=paths)} ({time.monotonic() - started:.0f} s)", flush=True)
    return 0


__all__ = [
    "FLOOR_TOOLS",
    "KNOWN",
    "LANCE13_REQUIREMENTS",
    "VenvError",
    "build_venv",
    "ensure_known",
    "ensure_venv",
    "floor_requirements",
    "floor_version",
    "run_python",
    "venv_dir",
    "venv_key",
]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
