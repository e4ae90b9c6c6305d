"""Tessera on the lowest pyarrow it declares (``pyarrow>=N`` in pyproject.toml).

A second virtual environment, ``.venv-floor/`` (git-ignored, built by
``tests/venvs.py`` on first use, or ahead of the tests by ``.ci/run``, and
reused while its key is unchanged: the floor, pyproject's dependencies and
the test tools, Python, pip's constraints), holds pyarrow N.* and the other
dependencies; a ``.pth`` puts the working tree on its path, so it runs the
working tree's code (``tessera/__init__.py`` finds the sub-packages there).
In it:

- :func:`test_no_module_uses_pyarrow_newer_than_the_floor`: every
  ``pa.x`` / ``pc.x`` / ``pyarrow.dataset.x`` ... that Tessera's modules name
  exists in the floor's pyarrow (format/arrow_compat.py, the one place
  allowed to name newer features, is skipped);
- :func:`test_tessera_tests_pass_on_the_floor_pyarrow`: a subset of Tessera's
  own tests (``FLOOR_TESTS``: the file format, the catalog's core operations
  with filters, delete, update and merge_insert, the commit protocol; not
  Spark) runs in one pytest subprocess and must pass.

With ``CI=true`` a venv that cannot be built fails the test; elsewhere it
skips.  Nothing is built in the working tree: the floor venv uses the C
accelerator the main install built there.
"""

from __future__ import annotations

import re
import sys

import pytest
from tessera_test_venvs import ROOT, ensure_known, floor_version, run_python  # loaded by tests/conftest.py

pytestmark = pytest.mark.slow

#: Tessera's tests run on the floor (paths under tests/); not Spark, not the interop suite
#: (none of them needs pandas; about 2 minutes on two busy cores)
FLOOR_TESTS = [
    "tests/format",
    "tests/catalog/test_catalog.py",
    "tests/catalog/test_predicate.py",
    "tests/catalog/test_table_bad_input.py",
    "tests/catalog/test_merge_insert.py",
    "tests/catalog/test_rowids.py",
    "tests/catalog/test_zonemap_maintenance.py",
    "tests/catalog/test_version_cleanup.py",
    "tests/commit/test_conflicts.py",
    "tests/commit/test_cleanup.py",
]
#: tests of the subset left out: they fail for reasons of their own, on every pyarrow
FLOOR_DESELECT = [
    # Tessera and pylance 14 choose differently for some tiny pages (lengths=[2], float64, 2.1)
    "tests/format/test_rle_write.py::test_rle_property",
]
#: the longest tests of the subset, left out for time (they run on the main pyarrow; the
#: static scan above checks every pyarrow name against the floor): a fuzz run and sweeps of
#: sizes whose pyarrow calls the rest of the subset makes too (about 35 s of the floor run),
#: and tests whose slow part does not depend on pyarrow (about 30 s): FSST's byte work
#: (numpy), the catalog's databases and S3, a row-id model, LanceDB's blob interop
FLOOR_SKIP_FOR_TIME = [
    "tests/format/test_mutation_fuzz.py::test_mutation_fuzz",
    "tests/format/test_v21_writer.py::test_nested_sliced_batches",
    "tests/format/test_dictionary_type.py::test_pylance_multi_page_file",
    "tests/format/test_dictionary_type.py::test_small_indices_take_one_page_a_file",
    "tests/format/test_codecs.py::test_fsst_decodes_pylance_pages",
    "tests/format/test_codecs.py::test_fsst_decompress_matches_reference",
    "tests/format/test_codecs.py::test_pylance_reads_our_fsst",
    "tests/format/test_blob.py::test_tessera_writes_into_blob_v2_tables_of_lancedb",
    "tests/catalog/test_catalog.py::test_tables_on_s3",
    "tests/catalog/test_catalog.py::test_namespaces",
    "tests/catalog/test_rowids.py::test_model_row_id_to_row",
]
#: the packages whose modules Tessera's library code imports pyarrow in
PACKAGES = ("tessera", "catalog", "commit", "format", "stores", "migrations")
#: the module allowed to name pyarrow features newer than the floor (behind feature detection)
COMPAT = "format/arrow_compat.py"


@pytest.fixture(scope="module")
def floor_python() -> str:
    """The floor venv's Python (built on first use)."""
    python = ensure_known("floor", timeout=1200)
    got = run_python(python, "-c", "import pyarrow; print(pyarrow.__version__)", text=True)
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip().split(".")[0] == floor_version().split(".")[0], got.stdout
    return python


# Run by the floor's Python: which attributes that Tessera's modules name does its pyarrow lack?
_SCAN = r"""
import ast, importlib, json, os, sys

root, packages, skip = sys.argv[1], sys.argv[2].split(","), sys.argv[3]


def chain(node):
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return node.id, names[::-1]
    return None, []


def resolve(module, names):
    try:
        obj = importlib.import_module(module)
    except ImportError:
        return False
    for n in names:
        if hasattr(obj, n):
            obj = getattr(obj, n)
        else:
            try:
                obj = importlib.import_module(module + "." + n)  # a submodule not imported yet
            except ImportError:
                return False
        module = module + "." + n
    return True


missing = []
files = [os.path.join(root, "pyspark_tessera.py")]
for package in packages:
    for dirpath, _, names in os.walk(os.path.join(root, package)):
        files += [os.path.join(dirpath, n) for n in names if n.endswith(".py") and "protos" not in dirpath]
for path in sorted(files):
    rel = os.path.relpath(path, root)
    if rel == skip or not os.path.exists(path):
        continue
    tree = ast.parse(open(path, encoding="utf-8").read(), rel)
    alias = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "pyarrow" or a.name.startswith("pyarrow."):
                    alias[a.asname or a.name.split(".")[0]] = a.name if a.asname else "pyarrow"
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pyarrow":
            for a in node.names:
                if not resolve(node.module, [a.name]):
                    missing.append(f"{rel}:{node.lineno}: from {node.module} import {a.name}")
                alias[a.asname or a.name] = node.module + "." + a.name
    seen = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        base, names = chain(node)
        if base not in alias or not names:
            continue
        key = (base, tuple(names))
        if key in seen:
            continue
        seen.add(key)
        target = alias[base]
        module, rest = target, []
        while module and module not in sys.modules:
            try:
                importlib.import_module(module)
                break
            except ImportError:
                module, _, last = module.rpartition(".")
                rest.insert(0, last)
        if not resolve(module, rest + names):
            missing.append(f"{rel}:{node.lineno}: {base}.{'.'.join(names)}")
print(json.dumps(sorted(set(missing))))
"""


def test_no_module_uses_pyarrow_newer_than_the_floor(floor_python):
    import json

    got = run_python(floor_python, "-c", _SCAN, ROOT, ",".join(PACKAGES), COMPAT, text=True, timeout=120)
    assert got.returncode == 0, got.stderr[-4000:]
    missing = json.loads(got.stdout.strip().splitlines()[-1])
    assert not missing, (
        f"pyarrow {floor_version()} (the declared floor) lacks what these lines use; "
        f"go through {COMPAT} (feature detection) or raise the floor:\n" + "\n".join(missing)
    )


def test_tessera_tests_pass_on_the_floor_pyarrow(floor_python):
    args = [
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        # the main suite's addopts may name plugins the floor venv lacks (pytest-xdist's -n):
        # this run is one process with the options it needs
        "-o",
        "addopts=",
        "--import-mode=importlib",
        "-ra",
        *FLOOR_TESTS,
        *(f"--deselect={t}" for t in FLOOR_DESELECT + FLOOR_SKIP_FOR_TIME),
    ]
    got = run_python(floor_python, *args, text=True, cwd=ROOT, timeout=1500)
    tail = (got.stdout[-6000:] + got.stderr[-2000:]).strip()
    assert got.returncode == 0, f"Tessera's tests fail on pyarrow {floor_version()} ({floor_python}):\n{tail}"
    assert re.search(r"\b\d+ passed\b", got.stdout), tail
    sys.stdout.write(tail.splitlines()[-1] + "\n")
