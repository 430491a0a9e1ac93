"""The chapters build their structures in cells tagged "build"; those cells must not give away
the exercises.

Chapters 01-03 write the block pool, the hashed prefix cache and the radix tree from scratch in
code cells tagged ``build`` (cell metadata ``tags: ["build"]``). For every exercise whose subject
overlaps a chapter's build, this test pastes all of that chapter's build cells under the exercise's
starter (and binds the starter's names to the chapter's classes where they differ), then judges the
file through the judge's command line, ``practice/judge.py test N --file F --json``, as a learner
would. Either the judge rejects it, or the chapter puts the exercise *before* its build cells, in a
"Try it before reading on" box naming ``judge.py start N``: then the learner meets the exercise
before the answer, and the end-of-chapter exercise is a second chance, not a copy task.

The test also checks the build itself: at least three build cells per chapter, each of them
executable on its own terms (together, in order, in a fresh interpreter, with nothing else of the
notebook), and the chapter asserting its agreement with the package's class.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
JUDGE = ROOT / "practice" / "judge.py"

# chapter -> {exercise: lines that bind the starter's names to the chapter's}
OVERLAPS = {
    "01_paged_block_pool": {"11": "BlockPool = MyBlockPool"},
    "02_prefix_cache_hashed_blocks": {
        "21": "",
        "22": "PrefixCachingBlockPool = PrefixCache\n"
              "PrefixCache.block_hashes = lambda self, token_ids: block_hashes(token_ids, self.block_size)",
    },
    "03_radix_tree": {
        "31": "RadixCache = RadixTree\nRadixTree._split = RadixTree.split\n_common_len = common_len",
        "32": "RadixCache = RadixTree\nRadixTree._split = RadixTree.split\n_common_len = common_len",
    },
    # The chapter's classify/follow work on a list of arrivals; exercise 71 wants a subscriber class.
    "07_many_engines": {"71": ""},
}
# What each chapter's check cell compares its own class with.
PACKAGE_CLASS = {"01_paged_block_pool": "BlockPool(", "02_prefix_cache_hashed_blocks": "PrefixCachingBlockPool(",
                 "03_radix_tree": "RadixCache()", "07_many_engines": "KVBlockIndex("}


def _cells(chapter: str) -> list[dict]:
    return json.loads((NOTEBOOKS / f"{chapter}.ipynb").read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _build_indices(chapter: str) -> list[int]:
    return [i for i, c in enumerate(_cells(chapter)) if "build" in c.get("metadata", {}).get("tags", [])]


def build_source(chapter: str) -> str:
    """The chapter's build cells, in order, as one Python file."""
    cells = _cells(chapter)
    return "\n\n\n".join(_source(cells[i]) for i in _build_indices(chapter)) + "\n"


def exercise_folder(number: str) -> Path:
    (folder,) = (ROOT / "practice").glob(f"{number}_*")
    return folder


def placed_before_build(chapter: str, number: str) -> bool:
    """A markdown cell before the first build cell invites the learner to do exercise N first."""
    first = _build_indices(chapter)[0]
    return any(c["cell_type"] == "markdown" and "before reading on" in _source(c).lower()
               and f"judge.py start {number}" in _source(c)
               for c in _cells(chapter)[:first + 1])


def judge(number: str, file: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, str(JUDGE), "test", number, "--file", str(file), "--json"],
                         capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert run.returncode in (0, 1), f"judge.py failed to run (exit {run.returncode}): {run.stderr[-2000:]}"
    return json.loads(run.stdout)


CASES = [(chapter, number) for chapter, exercises in OVERLAPS.items() for number in exercises]


@pytest.mark.parametrize("chapter", sorted(OVERLAPS))
def test_chapter_builds_its_structure_in_cells(chapter, tmp_path):
    indices = _build_indices(chapter)
    assert len(indices) >= 3, f"{chapter}: {len(indices)} build cells; the structure is built over at least 3"
    # The build cells alone run in a fresh interpreter: they are the whole structure, not a view of
    # notebook state.
    script = tmp_path / "build.py"
    script.write_text(build_source(chapter), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    # The chapter compares its class with the package's after the build, in a cell that asserts.
    cells = _cells(chapter)
    after = [_source(c) for c in cells[indices[-1]:] if c["cell_type"] == "code"]
    assert any("def run_side_by_side" in s and "assert" in s and PACKAGE_CLASS[chapter] in s for s in after), \
        f"{chapter}: no side-by-side check against the package's class after the build cells"


@pytest.mark.parametrize("chapter,number", CASES, ids=[f"{c[:2]}-ex{n}" for c, n in CASES])
def test_build_cells_do_not_pass_the_exercise(chapter, number, tmp_path):
    starter = (exercise_folder(number) / "starter.py").read_text(encoding="utf-8")
    pasted = tmp_path / f"pasted_{number}.py"
    pasted.write_text(f"{starter}\n\n# ---- the chapter's build cells, pasted\n{build_source(chapter)}\n"
                      f"{OVERLAPS[chapter][number]}\n", encoding="utf-8")
    report = judge(number, pasted)
    assert report["exercise"] == number and report["verdict"] in {
        "accepted", "wrong answer", "runtime error", "compile error", "timeout"}, report.get("verdict")
    if report["verdict"] == "accepted":
        assert placed_before_build(chapter, number), (
            f"the build cells of {chapter} pass exercise {number}: put the exercise before the build "
            f"('Try it before reading on') or make it a variant the chapter does not show")
    else:
        assert report["failed"] > 0


def test_the_check_fails_on_a_wrong_paste(tmp_path):
    """The judge is not a rubber stamp here: a build missing a method is rejected."""
    starter = (exercise_folder("22") / "starter.py").read_text(encoding="utf-8")
    source = build_source("02_prefix_cache_hashed_blocks").replace("def touch(", "def _not_touch(")
    pasted = tmp_path / "broken_22.py"
    binding = OVERLAPS["02_prefix_cache_hashed_blocks"]["22"]
    pasted.write_text(f"{starter}\n{source}\n{binding}\n", encoding="utf-8")
    assert judge("22", pasted)["verdict"] != "accepted"
