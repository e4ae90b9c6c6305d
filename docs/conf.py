"""Sphinx configuration of Tessera's documentation.

Build (warnings are errors, as in ``.ci/run``)::

    .venv/bin/python -m sphinx -W --keep-going -q -b html docs docs/_build/html

Pages are Markdown (myst-parser); the API reference is generated from the
docstrings of the installed ``tessera`` package (autodoc), the command-line
reference from the click commands (sphinx-click).
"""

from __future__ import annotations

import tessera

project = "Tessera"
author = "The Tessera authors"
copyright = "the Tessera authors"
release = version = tessera.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # "Args:"/"Raises:" sections of Google-style docstrings
    "sphinx_click",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
smartquotes = False  # keep "--warehouse" and quotes as typed (no en dashes in option names)
exclude_patterns = ["_build"]

# Markdown: ``` fences with {directive} run Sphinx directives; headings get
# anchors so pages can link to a section (page.md#section).
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# The API reference documents each object under the name users import
# (tessera.Table, tessera.errors.X); signatures keep the annotations as written.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "alabaster"
html_title = f"Tessera {release}"
html_theme_options = {"description": "A transactional table catalog whose tables are Lance datasets"}
