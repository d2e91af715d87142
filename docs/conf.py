"""Sphinx configuration of the contextembed documentation site.

Build it (offline: nothing is fetched, no intersphinx) from the repository root with::

    pip install ".[docs]"
    python -m sphinx -W --keep-going -b html docs docs/_build/html

The API reference (``docs/api/``) is generated from the numpydoc docstrings by autosummary; the
command line from :func:`contextembed.cli.build_parser` (sphinx-argparse); the spaCy registered
functions and their config blocks from spaCy's registry (``docs/_ext/contextembed_docs.py``). The
Markdown pages of ``docs/`` are included as they are (myst-parser).
"""

import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
if (DOCS.parent / "contextembed" / "__init__.py").is_file():
    sys.path.insert(0, str(DOCS.parent))  # this checkout's package, before an installed one

import contextembed  # noqa: E402

# autosummary writes a page per listed name here; start clean so that no page outlives its entry
shutil.rmtree(DOCS / "api" / "generated", ignore_errors=True)

project = "contextembed"
author = "the contextembed authors"
copyright = "the contextembed authors"
release = contextembed.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "myst_parser",
    "sphinxarg.ext",
    "contextembed_docs",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "api/generated/*.md"]
templates_path = ["_templates"]

# the reference: one page per public name, its parameters from the numpydoc docstring
autosummary_generate = True
autosummary_imported_members = False
# class pages document their own methods (the template's ``:members:``); scikit-learn's generated
# metadata-routing setters are left to scikit-learn's documentation
autodoc_default_options = {"exclude-members": "set_fit_request,set_transform_request,set_predict_request,"
                                              "set_score_request,set_partial_fit_request"}
autodoc_typehints = "none"  # numpydoc's "Parameters" state the types; signatures keep the defaults
autodoc_member_order = "bysource"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# Markdown pages: headings become anchors (docs/sklearn.md#document-context), as on GitHub
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
# the pages of docs/ start at "##" (they read as sections on GitHub); that is their title here
suppress_warnings = ["myst.header"]

html_theme = "pydata_sphinx_theme"
html_title = f"contextembed {release}"
# the top bar holds the five top-level pages of index.rst (getting started, the guides, the API
# reference, the command line, the spaCy registry), none hidden under "More"; each guide is listed
# by its full title in the side bar of the guides (docs/guides.rst)
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 6,
}
html_static_path = ["_static"]
# titles and names wrap instead of being cut at the edge of the page (tried in headless Chromium)
html_css_files = ["contextembed.css"]
html_last_updated_fmt = None
