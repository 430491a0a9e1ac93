"""The chapters build their structures in cells tagged "build"; those cells must not pass the
exercises.

Chapters 01-03 write the block pool, the hashed prefix cache and the radix tree from scratch in
code cells tagged ``build`` (cell metadata ``tags: ["build"]``). Each exercise on the same structure
asks for the chapter's idea plus one step the chapter does not take (issue 35, item 2). This test
judges the chapter's build cells as a learner's file, through the judge's command line
(``practice/judge.py test N --file F --json``), two ways:

- **pasted as they are**: the exercise's starter, then every build cell of the chapter;
- **adapted by renaming**: the build cells alone (their one ``nano_engine`` import, the
  ``add_to_class`` helper, written out, since a learner's file may not import the package), then
  the exercise's names bound to the chapter's: the chapter's class first, the starter's class
  behind it for whatever the chapter does not write (those methods stay placeholders), and the
  chapter's method and helper names renamed to the exercise's.

Both must be rejected, the adapted one by failing tests (not by a missing name): the chapter gets
a learner most of the way, and the exercise is the rest. The chapter's "Try it before reading on"
box names the exercise, and the build section ends by serving the chapter's class under
``LLMEngine`` (``nano_engine.cache_adapters``) beside the package's.

The test also checks the build itself: at least three build cells per chapter, each of them
executable on its own terms (together, in order, in a fresh interpreter, with nothing else of the
notebook), and the chapter asserting its agreement with the package's class.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
JUDGE = ROOT / "practice" / "judge.py"

ADD_TO_CLASS = '''

def add_to_class(cls):
    """The chapters' add_to_class helper, written out."""
    def attach(fn):
        setattr(cls, fn.__name__, fn)
        return fn
    return attach
'''

# chapter -> {exercise: lines that bind the exercise's names to the chapter's ("adapted by renaming")}
OVERLAPS = {
    "01_paged_block_pool": {"11": "class BlockPool(MyBlockPool, BlockPool):\n    pass"},
    "02_prefix_cache_hashed_blocks": {
        "21": "",
        "22": "PrefixCache.block_hashes = lambda self, token_ids: block_hashes(token_ids, self.block_size)\n"
              "class PrefixCachingBlockPool(PrefixCache, PrefixCachingBlockPool):\n    pass",
    },
    "03_radix_tree": {
        "31": "RadixTree._split = RadixTree.split\n_common_len = common_len\n"
              "class RadixCache(RadixTree, RadixCache):\n    pass",
        "32": "RadixTree._split = RadixTree.split\n_common_len = common_len\n"
              "class RadixCache(RadixTree, RadixCache):\n    pass",
    },
    # The chapter's classify/follow work on a list of arrivals; exercise 71 wants a subscriber class
    # (pasted only: chapter 07's cells use the package beyond add_to_class).
    "07_many_engines": {"71": ""},
}
# What each chapter's check cell compares its own class with.
PACKAGE_CLASS = {"01_paged_block_pool": "BlockPool(", "02_prefix_cache_hashed_blocks": "PrefixCachingBlockPool(",
                 "03_radix_tree": "RadixCache(", "07_many_engines": "KVBlockIndex("}
# Chapters whose build section ends with their class under LLMEngine, and the adapter it uses.
ON_THE_MODEL = {"01_paged_block_pool": "PoolAdapter(mine", "02_prefix_cache_hashed_blocks":
                "PrefixCacheAdapter(mine)", "03_radix_tree": "RadixTreeAdapter(RadixTree,"}


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


def adapted_source(chapter: str, number: str) -> str:
    """The build cells without the package (add_to_class written out), then the exercise's names."""
    source = build_source(chapter)
    source = re.sub(r"^from nano_engine\.notebook\.listing import add_to_class\n", ADD_TO_CLASS, source, flags=re.M)
    assert not re.search(r"^\s*(from|import) nano_engine", source, re.M), (
        f"{chapter}'s build cells import more of nano_engine than add_to_class")
    starter = (exercise_folder(number) / "starter.py").read_text(encoding="utf-8")
    return f"{starter}\n\n# ---- the chapter's build cells\n{source}\n# ---- renamed\n{OVERLAPS[chapter][number]}\n"


def pasted_source(chapter: str, number: str) -> str:
    starter = (exercise_folder(number) / "starter.py").read_text(encoding="utf-8")
    return f"{starter}\n\n# ---- the chapter's build cells, pasted\n{build_source(chapter)}\n"


def exercise_folder(number: str) -> Path:
    (folder,) = (ROOT / "practice").glob(f"{number}_*")
    return folder


def judge(number: str, file: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, str(JUDGE), "test", number, "--file", str(file), "--json"],
                         capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert run.returncode in (0, 1), f"judge.py failed to run (exit {run.returncode}): {run.stderr[-2000:]}"
    return json.loads(run.stdout)


def rejected_by(report: dict) -> list[str]:
    return [t["name"] for t in report.get("tests", []) if t["verdict"] not in ("accepted", "not run")]


CASES = [(chapter, number) for chapter, exercises in OVERLAPS.items() for number in exercises]
STRUCTURES = [(c, n) for c, n in CASES if c in ON_THE_MODEL]


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


@pytest.mark.parametrize("chapter,number", CASES, ids=[f"{c[:2]}-ex{n}-pasted" for c, n in CASES])
def test_build_cells_pasted_as_they_are_are_rejected(chapter, number, tmp_path):
    pasted = tmp_path / f"pasted_{number}.py"
    pasted.write_text(pasted_source(chapter, number), encoding="utf-8")
    report = judge(number, pasted)
    assert report["exercise"] == number, "the judge judged another exercise"
    assert report["verdict"] != "accepted", f"the build cells of {chapter}, pasted, pass exercise {number}"
    assert report["failed"] > 0, f"exercise {number} rejected the paste without a failed test: {report}"


@pytest.mark.parametrize("chapter,number", STRUCTURES, ids=[f"{c[:2]}-ex{n}-renamed" for c, n in STRUCTURES])
def test_build_cells_adapted_by_renaming_fail_the_exercises_step(chapter, number, tmp_path):
    """Every name the exercise asks for is defined (no 'missing' verdict), the package is not
    imported, and still some tests fail: what the exercise adds to the chapter."""
    adapted = tmp_path / f"adapted_{number}.py"
    adapted.write_text(adapted_source(chapter, number), encoding="utf-8")
    report = judge(number, adapted)
    assert "load_error" not in report, f"the adapted build of {chapter} did not load: {report.get('load_error')}"
    assert report["verdict"] != "accepted", f"the build cells of {chapter}, renamed, pass exercise {number}"
    assert rejected_by(report), f"exercise {number} rejected the adapted build without a failed test"
    assert report["passed"] > 0, (
        f"the adapted build of {chapter} passes no test of exercise {number}: the binding is broken, "
        "so this shows nothing about the exercise")


@pytest.mark.parametrize("chapter,number", STRUCTURES, ids=[f"{c[:2]}-ex{n}" for c, n in STRUCTURES])
def test_the_try_it_box_names_the_exercise(chapter, number):
    first = _build_indices(chapter)[0]
    boxes = [_source(c) for c in _cells(chapter)[:first]
             if c["cell_type"] == "markdown" and "Try it before reading on" in _source(c)]
    assert boxes, f"{chapter}: no 'Try it before reading on' box before the build cells"
    assert f"judge.py start {number}" in boxes[-1], f"{chapter}'s box does not point at exercise {number}"


@pytest.mark.parametrize("chapter", sorted(ON_THE_MODEL))
def test_the_build_section_ends_with_the_class_under_the_engine(chapter):
    cells = _cells(chapter)
    end = next(i for i, c in enumerate(cells) if _source(c).startswith("From here on the chapter uses the package"))
    ending = [_source(c) for c in cells[_build_indices(chapter)[-1]:end] if c["cell_type"] == "code"]
    engine = [s for s in ending if ON_THE_MODEL[chapter] in s and "LLMEngine(" in s]
    assert engine, f"{chapter}: the build section does not end by serving its class under LLMEngine"
    assert "assert served[" in engine[-1], f"{chapter}: the engine cell does not assert the tokens are the package's"
    assert "hits" in engine[-1], f"{chapter}: the engine cell does not compare the hits"


def test_the_check_fails_on_a_wrong_paste(tmp_path):
    """The judge is not a rubber stamp here: a build missing a method is rejected."""
    source = adapted_source("02_prefix_cache_hashed_blocks", "22").replace("def touch(", "def _not_touch(")
    pasted = tmp_path / "broken_22.py"
    pasted.write_text(source, encoding="utf-8")
    report = judge("22", pasted)
    assert report["verdict"] != "accepted", "a pool without touch is accepted"
