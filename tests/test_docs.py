"""The documentation builds without a warning (as ``.ci/run`` builds it, with
``-W``), and its pages hold what users look for: the API reference generated
from the docstrings, the configuration page, the CLI reference generated from
the click commands; and the Python guide's examples run as written."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("docs") / "html")
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", DOCS, out],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"the docs build failed or warned:\n{proc.stdout}\n{proc.stderr}"
    assert "WARNING" not in proc.stderr and "ERROR" not in proc.stderr, proc.stderr
    return out


def _page(built: str, *parts: str) -> str:
    with open(os.path.join(built, *parts), encoding="utf-8") as f:
        return f.read()


def _text(built: str, *parts: str) -> str:
    """A page's text: no tags (code blocks are split into highlighted spans), entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", _page(built, *parts)))


@pytest.mark.slow
def test_api_reference_is_generated_from_the_docstrings(built):
    table = _page(built, "api", "table.html")
    for name in ("Table.merge_insert", "Table.open", "Table.create", "Table.checkout"):
        assert f'id="tessera.{name}"' in table, name
    assert 'id="tessera.Catalog.create_table"' in _page(built, "api", "catalog.html")
    assert 'id="tessera.connect"' in _page(built, "api", "catalog.html")
    assert 'id="tessera.catalog.transaction.CatalogTransaction"' in _page(built, "api", "transactions.html")
    errors = _page(built, "api", "errors.html")
    assert 'id="tessera.errors.TesseraError"' in errors and 'id="tessera.errors.CommitConflictError"' in errors
    assert 'id="tessera.commit.retry.RetryPolicy"' in _page(built, "api", "retry.html")


@pytest.mark.slow
def test_configuration_page_documents_the_file_and_the_environment(built):
    page = _text(built, "configuration.html")
    for text in ("TESSERA_CONFIG", "~/.tessera.yaml", "TESSERA_CATALOG__", "TESSERA_CATALOG_URI", "TESSERA_WAREHOUSE"):
        assert text in page, text


@pytest.mark.slow
def test_cli_reference_is_generated_from_the_click_commands(built):
    page = _text(built, "cli.html")
    for text in ("tessera namespace create", "tessera store provision", "--warehouse", "tessera serve"):
        assert text in page, text


@pytest.mark.slow
def test_every_audience_has_a_page(built):
    for page in ("python.html", "configuration.html", "cli.html", "spark.html", "namespace.html", "stores.html"):
        assert os.path.exists(os.path.join(built, page)), page
    assert "commit_store" in _text(built, "spark.html")  # the options table of tessera.catalog.spark's docstring


def test_python_guide_runs_as_written(tmp_path):
    """docs/python.md's ```python blocks, run in order as one program in an empty directory."""
    with open(os.path.join(DOCS, "python.md"), encoding="utf-8") as f:
        blocks = re.findall(r"^```python\n(.*?)^```", f.read(), re.M | re.S)
    assert len(blocks) >= 5
    code = "\n".join(blocks)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"docs/python.md failed:\n{out.stdout}\n{out.stderr}"
