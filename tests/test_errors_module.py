"""``tessera.errors`` is a module users import from, as the README and the
package docstring say: every error class Tessera raises is importable from
it, each under the one root ``TesseraError``."""

from __future__ import annotations

import importlib
import subprocess
import sys


def test_from_tessera_errors_import_works_in_a_new_process():
    code = (
        "from tessera.errors import TesseraError, CommitConflictError, NoSuchTableError, StoreError\n"
        "import tessera\n"
        "assert tessera.errors.TesseraError is TesseraError and tessera.TesseraError is TesseraError\n"
        "assert issubclass(CommitConflictError, TesseraError) and issubclass(NoSuchTableError, TesseraError)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_every_error_of_the_catalog_module_is_there():
    errors = importlib.import_module("tessera.errors")
    catalog_errors = importlib.import_module("tessera.catalog.errors")
    root = errors.TesseraError
    names = {n for n, v in vars(catalog_errors).items() if isinstance(v, type) and issubclass(v, BaseException)}
    assert names and names == set(errors.__all__)
    for name in names:
        assert getattr(errors, name) is getattr(catalog_errors, name)
        assert issubclass(getattr(errors, name), root), name
