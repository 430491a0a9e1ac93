"""Every chapter executes top to bottom, headless, on CPU with the default model, and then the
code of its Try it: every ```python fence of the Try it section runs after the chapter, in the
chapter's namespace, as a reader would paste it."""

import json
from pathlib import Path

import pytest
from figure_check import try_it_fences

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CELL_TIMEOUT_S = 120   # a whole chapter should run in under two minutes; no single cell may exceed it
# (wall times are reported by `pytest --durations`, never asserted: these machines are noisy)


def test_the_learners_folder_holds_the_chapters_and_their_index_only():
    """notebooks/ is what JupyterLab shows a reader: the chapters and index.md, no tooling (the book's
    config is in .ci/book, make lab's Jupyter settings in .ci/jupyter, the citation register in tests/)."""
    import subprocess

    root = Path(__file__).parent.parent
    listed = subprocess.run(["git", "ls-files", "--others", "--cached", "--exclude-standard", "notebooks"], cwd=root,
                            capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: " + listed.stderr.strip())
    names = [Path(line).relative_to("notebooks") for line in listed.stdout.splitlines()]
    strays = [str(n) for n in names if not (n == Path("index.md") or (len(n.parts) == 1 and n.match("[0-9][0-9]_*.ipynb")))]
    assert not strays, f"notebooks/ should hold the chapters and index.md only, not {strays}"


def test_chapters_exist():
    names = [p.stem for p in NOTEBOOKS]
    assert names[:6] == ["00_the_model", "01_paged_block_pool", "02_prefix_cache_hashed_blocks",
                         "03_radix_tree", "04_hit_rates", "05_scheduling_and_routing"], names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_without_outputs(path):
    nb = json.loads(path.read_text())
    dirty = [i for i, c in enumerate(nb["cells"])
             if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count"))]
    assert not dirty, f"{path.name}: cells {dirty} carry outputs; clear them before committing"


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_executes_headless(path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("NANO_ENGINE_HEADLESS", "1")     # notebooks may shorten optional demos
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    for fence in [f for cell in nb.cells if cell.cell_type == "markdown" for f in try_it_fences(cell.source)]:
        nb.cells.append(nbformat.v4.new_code_cell(fence, metadata={"tags": ["try-it"]}))   # after the chapter
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()        # raises on the first failing cell (a Try it fence too), naming it
    stale = [(i, out.get("text", "")) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
             for out in cell.get("outputs", []) if out.get("name") == "stderr" and "DeprecationWarning" in out.get("text", "")]
    assert not stale, f"{path.name}: cells use names the package has moved (a reader sees the warning): {stale}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_try_it_code_is_python(path):
    """Every ```python fence of a Try it compiles (the notebook test runs them; this one is offline)."""
    cells = json.loads(path.read_text())["cells"]
    for fence in [f for cell in cells if cell["cell_type"] == "markdown" for f in try_it_fences("".join(cell["source"]))]:
        compile(fence, f"{path.name} Try it", "exec")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_predictions_are_displayed_not_printed(path):
    """A printed reveal shows the answer at once under "Run All"; a displayed one keeps it folded."""
    import re

    nb = json.loads(path.read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    printed = [line for cell in code for line in cell.splitlines() if re.search(r"print\([^)]*\.reveal\(", line)]
    assert not printed, f"{path.name}: display(...) a reveal instead of printing it: {printed}"


END_MATTER = ["Summary", "How to explain it", "Try it", "vLLM / SGLang and this package", "Read the real code", "Exercises"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_end_matter_in_one_fixed_order(path):
    """Every chapter ends with the same six sections, in the same order, and nothing after them."""
    headings = [
        line[3:].strip()
        for cell in json.loads(path.read_text())["cells"]
        if cell["cell_type"] == "markdown"
        for line in "".join(cell["source"]).splitlines()
        if line.startswith("## ")
    ]
    tail = headings[-len(END_MATTER):]
    assert [h.split(":")[0] for h in tail] == END_MATTER, f"{path.name} ends with {tail}"
