"""Make the chapters' source paths clickable in the book.

The chapters name the real engines' files as code, e.g. `vllm/v1/core/block_pool.py` or
`python/sglang/srt/mem_cache/radix_cache.py`, so that they read the same in JupyterLab. In the book,
each such path becomes a link to that file at the release the chapters describe (vLLM and SGLang
pins as in the chapters' citations; nano-vllm and mini-sglang have no releases: their main
branch). A short path after a full one in the same paragraph or list item (`single_type_kv_cache_manager.py`,
`scheduler/cache.py`, `policies/tree.rs`) is read relative to it. This package's own files
(`nano_engine/model.py`) link to a highlighted copy inside the book, so they open offline too.
A path this table does not know stays plain code.
"""

from __future__ import annotations

import html
import posixpath
import re
from pathlib import Path, PurePosixPath

from docutils import nodes
from sphinx.application import Sphinx

VLLM = "https://github.com/vllm-project/vllm/blob/v0.33.0/"
SGLANG = "https://github.com/sgl-project/sglang/blob/v0.5.23/"
# (path prefix, URL the path is appended to, root that a short relative *.py path is read against)
REPOSITORIES = [
    ("vllm/", VLLM, "vllm/"),
    ("python/sglang/", SGLANG, "python/sglang/"),
    ("sgl-model-gateway/", SGLANG, None),
    ("python/minisgl/", "https://github.com/sgl-project/mini-sglang/blob/main/", "python/minisgl/"),
    ("nanovllm/", "https://github.com/GeeeekExplorer/nano-vllm/blob/main/", "nanovllm/"),
    ("models/", "https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/", None),
]
OWN = ("nano_engine/", "practice/", "benchmarks/", "tests/")  # this repository: copies in the book
CODE_DIR = "_code"
PATH = re.compile(r"^[A-Za-z_][\w./-]*\.(py|rs|md)$")


def resolve(path: str, previous: str | None) -> str | None:
    """The full repository path that ``path`` names, read against the full ``previous`` one."""
    if any(path.startswith(prefix) for prefix, _, _ in REPOSITORIES) or path.startswith(OWN):
        return path
    if previous is None or path.startswith(("/", ".")):
        return None
    folders = PurePosixPath(previous).parent.parts
    first = PurePosixPath(path).parts[0]
    if len(PurePosixPath(path).parts) == 1:
        return posixpath.join(*folders, path) if folders else path  # a file beside the previous one
    if first in folders:  # `policies/tree.rs` after `.../src/policies/cache_aware.rs`
        return posixpath.join(*folders[:folders.index(first)], path)
    for prefix, _, root in REPOSITORIES:
        if root and previous.startswith(prefix) and path.endswith(".py"):
            return root + path  # `scheduler/cache.py` after `python/minisgl/...`
    return None


def url_of(full: str, docname: str) -> str | None:
    for prefix, base, _ in REPOSITORIES:
        if full.startswith(prefix):
            return base + full
    if full.startswith(OWN):
        return "../" * docname.count("/") + f"{CODE_DIR}/{full}.html"
    return None


def link_paths(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    own = app.env.nano_own_files  # type: ignore[attr-defined]
    root = Path(app.srcdir).parent
    for block in doctree.findall(lambda n: isinstance(n, (nodes.paragraph, nodes.list_item, nodes.entry))):
        previous = None
        for literal in list(block.findall(nodes.literal)):
            if isinstance(literal.parent, nodes.reference):
                continue
            text = literal.astext()
            if not PATH.match(text):
                continue
            full = resolve(text, previous)
            if full is None:
                continue
            if full.startswith(OWN):
                if not (root / full).is_file():
                    continue  # not a file of this repository: leave it as code
                own.add(full)
            url = url_of(full, docname)
            if url is None:
                continue
            previous = full
            ref = nodes.reference("", "", refuri=url, internal=full.startswith(OWN))
            literal.replace_self(ref)
            ref += literal


def write_own_files(app: Sphinx, exception: Exception | None) -> None:
    """A highlighted, self-contained HTML page for each of this repository's files the book links to."""
    if exception is not None or app.builder.format != "html":
        return
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import get_lexer_for_filename

    root = Path(app.srcdir).parent
    for rel in sorted(app.env.nano_own_files):  # type: ignore[attr-defined]
        source = (root / rel).read_text(encoding="utf-8")
        formatter = HtmlFormatter(full=True, linenos="table", title=rel, style="default")
        page = highlight(source, get_lexer_for_filename(rel), formatter)
        page = page.replace("<body>", f"<body><h2 style='font-family: sans-serif'>{html.escape(rel)}</h2>", 1)
        out = Path(app.outdir) / CODE_DIR / f"{rel}.html"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(page, encoding="utf-8")


def init_env(app: Sphinx, env, docnames) -> None:  # type: ignore[no-untyped-def]
    if not hasattr(env, "nano_own_files"):
        env.nano_own_files = set()


def merge(app: Sphinx, env, docnames, other) -> None:  # type: ignore[no-untyped-def]
    env.nano_own_files |= getattr(other, "nano_own_files", set())


def setup(app: Sphinx) -> dict:
    app.connect("env-before-read-docs", init_env)
    app.connect("env-merge-info", merge)
    app.connect("doctree-resolved", link_paths)
    app.connect("build-finished", write_own_files)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
