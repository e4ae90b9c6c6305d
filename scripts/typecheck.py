"""Run mypy on the ``tessera`` package as it installs (``python scripts/typecheck.py [mypy args]``).

The repository's top-level folders are the sub-packages of ``tessera``
(``catalog/`` is ``tessera.catalog``, ...), mapped by setuptools' package-dir.
An editable install resolves them through an import hook that mypy cannot
follow, so this script lays the package out as a wheel would, with symbolic
links under ``build/typecheck/``, and checks it with the settings in
pyproject.toml. Errors are reported with repository paths.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUBPACKAGES = ("catalog", "commit", "stores", "format", "migrations")


def layout() -> str:
    """``build/typecheck/tessera/`` with links to tessera/'s files and the sub-package folders."""
    top = os.path.join(ROOT, "build", "typecheck")
    pkg = os.path.join(top, "tessera")
    os.makedirs(pkg, exist_ok=True)
    wanted = {name: os.path.join(ROOT, "tessera", name) for name in os.listdir(os.path.join(ROOT, "tessera"))}
    wanted.pop("__pycache__", None)
    wanted.update({name: os.path.join(ROOT, name) for name in SUBPACKAGES})
    for name in os.listdir(pkg):
        if name not in wanted:
            os.unlink(os.path.join(pkg, name))
    for name, target in wanted.items():
        link = os.path.join(pkg, name)
        if os.path.islink(link) and os.readlink(link) == target:
            continue
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(target, link)
    return top


def main(argv: list[str]) -> int:
    top = layout()
    cmd = [sys.executable, "-m", "mypy", "--config-file", os.path.join(ROOT, "pyproject.toml"), "-p", "tessera"]
    proc = subprocess.run(cmd + argv, cwd=top, capture_output=True, text=True)
    # build/typecheck/tessera/catalog/x.py -> catalog/x.py; tessera/__init__.py stays
    prefix = re.compile(r"^tessera/(?=(" + "|".join(SUBPACKAGES) + r")/)", re.M)
    sys.stdout.write(prefix.sub("", proc.stdout))
    sys.stderr.write(proc.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
