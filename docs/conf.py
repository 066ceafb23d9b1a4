"""Sphinx configuration: ``python -m sphinx -W -b html docs docs/_build/html`` (no network).

Sphinx + MyST-NB, as optax and flax do: autodoc/autosummary/napoleon turn the Google-style
docstrings (with their ``.. math::``) into the API reference, MyST-NB renders the notebooks with
the outputs stored in them (``nb_execution_mode = "off"``: the build never runs a cell). The
guide and the API listing are generated from README.md and ``__all__`` (``_ext/jaxcompress_docs``).
Nothing is fetched while building or viewing: no intersphinx, the theme's assets ship with the
package, and MathJax ships with ``sphinx-mathjax-offline`` (copied into ``_static/mathjax``).
"""

from __future__ import annotations

import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))  # this checkout's jaxcompress, installed or not

import jaxcompress_docs  # noqa: E402

import jaxcompress  # noqa: E402

jaxcompress_docs.generate()  # guide/ and api/ must exist before Sphinx looks for sources

project = "jaxcompress"
author = "the jaxcompress authors"
copyright = "2026, the jaxcompress authors"
release = version = jaxcompress.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # MathJax 3 copied into _static/: formulas render offline
    "sphinx.ext.viewcode",
    "sphinx_copybutton",
    "myst_nb",
    "jaxcompress_docs",
]

root_doc = "index"
exclude_patterns = ["_build", "README.md", "**/_*.md", "**/.ipynb_checkpoints"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}

# -- autodoc / napoleon: Google-style docstrings -------------------------------------------
autosummary_generate = False  # the pages are written by jaxcompress_docs (one per public name)
autodoc_typehints = "signature"
autodoc_member_order = "bysource"
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # "Attributes:" as a field list: no duplicate attribute entries
napoleon_use_rtype = False
add_module_names = False

# -- MyST / MyST-NB -------------------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3
nb_execution_mode = "off"  # render the outputs stored in the notebooks; never execute
nb_merge_streams = True

# -- Math: MathJax from the site itself, never a CDN (the pages are read offline too) ----------
mathjax_path = "mathjax/tex-chtml.js"  # what sphinx-mathjax-offline copies into _static/

# -- HTML ------------------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = f"jaxcompress {version}"
html_theme_options = {
    "show_toc_level": 2,
    "navigation_with_keys": False,
}
html_static_path = ["_static"]
html_css_files = ["wide.css"]  # wide formulas scroll, long code lines wrap (never clipped)
