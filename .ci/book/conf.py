"""Sphinx configuration of the book: `make book` renders notebooks/ (the landing page index.md and
every chapter NN_*.ipynb, found by name) into .ci/book/_build/html, executed. The configuration lives
here, beside the other build tooling, so that notebooks/ holds the chapters and their index only.

Sphinx + MyST-NB, because the whole build is Python from PyPI (no Node, no theme fetched at build
time), MyST-NB executes through jupyter-cache (a chapter re-runs only when its code changed) and
renders every output kind the chapters make, and sphinx-book-theme ships its fonts and scripts.
"""

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

# The kernels that execute the chapters inherit these: steppers, predictions and exercise buttons
# render as self-contained HTML (nano_engine.notebook.static_html), no progress bars.
os.environ["NANO_ENGINE_STATIC_HTML"] = "1"
os.environ["TQDM_DISABLE"] = "1"


project = "nano_engine"
author = "nano_engine"
copyright = "nano_engine authors"
root_doc = "index"
extensions = ["myst_nb", "real_code_links"]
exclude_patterns = ["**/.ipynb_checkpoints"]
templates_path = []

# -- execution: every chapter, top to bottom, cached by its code cells' source -----------------
# jupyter-cache keys a chapter by its code cells only, so the cache lives in a folder named after
# the code the chapters import (nano_engine/, practice/): change either and every chapter runs again.
# `make book` and tests/test_book.py share it; caches of older code are removed.


def code_digest() -> str:
    import hashlib

    digest = hashlib.sha256()
    for folder in ("nano_engine", "practice"):
        for path in sorted((HERE.parents[1] / folder).rglob("*")):
            rel = path.relative_to(HERE.parents[1])
            if path.is_file() and not {"__pycache__", "workspace"} & set(rel.parts) and path.suffix != ".pyc":
                digest.update(str(rel).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


CACHES = HERE / "_build" / "jupyter_cache"
nb_execution_mode = "cache"
nb_execution_cache_path = str(CACHES / code_digest())
if CACHES.is_dir():
    import shutil

    for old in CACHES.iterdir():
        if str(old) != nb_execution_cache_path:
            shutil.rmtree(old, ignore_errors=True)
nb_execution_timeout = 300  # per cell; the chapters take under 2 minutes each
nb_execution_raise_on_error = True  # a failing chapter fails the build, naming the cell
nb_execution_show_tb = True
nb_merge_streams = True
nb_render_markdown_format = "myst"  # Markdown outputs may use roles (the landing page's chapter map: {doc})
# No CDN: nothing loads require.js or the ipywidgets HTML manager; the chapters' widgets render as
# static HTML (above), and a live-widget view that slips through falls back to its text.
nb_ipywidgets_js = {}
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None),
                              ("html", "application/vnd.jupyter.widget-state+json", None)]
myst_enable_extensions = ["colon_fence"]  # no dollarmath: MathJax would come from a CDN
myst_heading_anchors = 3
suppress_warnings = ["mystnb.unknown_mime_type", "myst.header"]

# -- HTML -------------------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = "nano_engine: KV-cache reuse in inference engines"
html_static_path = [str(HERE / "_static")]
html_css_files = ["book.css"]
html_favicon = str(HERE / "_static" / "favicon.svg")  # else browsers ask a web server for /favicon.ico (a 404)
html_copy_source = False  # no _sources/ copies of the notebooks
html_show_sourcelink = False
html_last_updated_fmt = None
# The diagrams and plots are drawn on white (and with no mode set the theme logs a console error).
html_context = {"default_mode": "light"}
html_theme_options = {
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "navigation_with_keys": False,
}
# On GitHub Actions, the theme's repository button points at the repository the site was built from.
if os.environ.get("GITHUB_REPOSITORY"):
    html_theme_options |= {"repository_url": f"https://github.com/{os.environ['GITHUB_REPOSITORY']}",
                           "use_repository_button": True}


def drop_source_maps(app, exception) -> None:  # noqa: ANN001
    """Files the themes copy that no page uses: source maps (3.4 MB, for their developers' debuggers)
    and the Jinja macros their templates were built from."""
    if exception is None:
        for pattern in ("*.map", "*macros.html"):
            for path in Path(app.outdir, "_static").rglob(pattern):
                path.unlink()


def setup(app) -> None:  # noqa: ANN001
    app.connect("build-finished", drop_source_maps)
