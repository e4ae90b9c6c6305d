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


def test_every_error_class_of_every_module_is_importable_from_tessera_errors():
    """Walk every module of the package: each TesseraError subclass defined
    anywhere (a store's, the file format's, Spark's) is ``tessera.errors.X``,
    so ``except tessera.errors.X`` works for whatever reaches the user."""
    import pkgutil

    import tessera

    errors = importlib.import_module("tessera.errors")
    for sub in ("catalog", "commit", "format", "stores"):
        pkg = importlib.import_module(f"tessera.{sub}")
        for info in pkgutil.walk_packages(pkg.__path__, f"{pkg.__name__}."):
            if not info.name.endswith("__main__"):  # running the CLI is not importing it
                importlib.import_module(info.name)

    def subclasses(cls):
        for s in cls.__subclasses__():
            yield s
            yield from subclasses(s)

    import sys

    # classes a module defines (not ones built at run time, as Spark's error translation builds them)
    found = {
        s
        for s in subclasses(errors.TesseraError)
        if s.__module__.startswith("tessera.") and getattr(sys.modules.get(s.__module__), s.__qualname__, None) is s
    }
    missing = sorted(f"{s.__module__}.{s.__name__}" for s in found if getattr(errors, s.__name__, None) is not s)
    assert len(found) > 60 and not missing, missing
    assert tessera.errors is errors
