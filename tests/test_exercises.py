"""The exercises in practice/ and the notebook buttons of nano_engine.notebook.exercises.

- Every reference solution passes its tests, every starter and every known-wrong variant fails
  them, and every worked example in a problem.md agrees with the reference (the reference and the
  starter run in-process with the judge's runner core, which is what a browser would use; the
  wrong files in child processes, as a learner's file is judged, read from the one run of
  `judge.py check` that test_judge checks as a whole: the ``judge_check`` fixture of conftest.py).
- Where an exercise's interface is a nano_engine class, the package's class passes the same tests.
- The "Check my solution" / "Run examples" buttons, driven from code.
"""

import importlib.util
import re
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
JUDGE = ROOT / "practice" / "judge.py"


def load_judge() -> types.ModuleType:
    if "practice_judge" not in sys.modules:
        spec = importlib.util.spec_from_file_location("practice_judge", JUDGE)
        module = importlib.util.module_from_spec(spec)
        sys.modules["practice_judge"] = module
        spec.loader.exec_module(module)
    return sys.modules["practice_judge"]


judge = load_judge()
runner = judge.runner
EXERCISES = judge.find_exercises()
WRONG = [(ex, path) for ex in EXERCISES for path in ex.wrong_variants]
MISTAKES = [(ex, m) for ex in EXERCISES for m in ex.mistakes]


def _judge_here(ex, path, **kwargs) -> dict:
    return runner.judge_in_process(ex.tests, path, ex.starter, **kwargs)


def _failures(report: dict) -> str:
    return "\n".join(f"{t['name']}: {t['verdict']}: {t['message']} {t.get('failure')}"
                     for t in report.get("tests", []) if t["verdict"] != "accepted") + str(report.get("load_error", ""))


def test_the_exercises_the_issue_asks_for_exist():
    by_number = {ex.number: ex for ex in EXERCISES}
    assert {"21", "22", "23", "31", "32", "51", "53", "24", "61", "62"} <= set(by_number)
    assert by_number["53"].difficulty == "medium" and by_number["24"].difficulty == "hard"
    chapters = {ex.chapter for ex in EXERCISES}
    assert chapters == {"00_the_model", "01_paged_block_pool", "02_prefix_cache_hashed_blocks", "03_radix_tree",
                        "04_hit_rates", "05_scheduling_and_routing", "06_host_tier", "07_many_engines"}, "every chapter has an exercise"


def test_the_learners_table_lists_every_exercise_as_its_statement_does():
    """practice/README.md's table is the learner's index: title, difficulty and chapter as problem.md says."""
    rows = {m[1]: (m[2].strip().removesuffix(" (optional)").replace("`", ""), m[3].strip(), m[4].strip()) for m in re.finditer(
        r"^\| (\d\d) \| ([^|]+)\| ([^|]+)\| ([^|]+)\|$", (ROOT / "practice" / "README.md").read_text(), re.M)}
    assert sorted(rows) == sorted(ex.number for ex in EXERCISES), "one row per exercise"
    for ex in EXERCISES:
        meta, _ = judge.parse_front_matter(ex.problem.read_text(encoding="utf-8"))
        assert rows[ex.number] == (meta["title"], meta["difficulty"], meta["chapter"]), \
            f"practice/README.md's row for {ex.number} differs from its problem.md"


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_reference_is_accepted(ex):
    report = _judge_here(ex, ex.solution)
    assert report["verdict"] == "accepted", _failures(report)
    assert report["passed"] >= 5


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_starter_is_rejected_and_raises_not_implemented(ex):
    report = _judge_here(ex, ex.starter)
    assert report["verdict"] == "runtime error"
    assert any("NotImplementedError" in t["message"] for t in report["tests"])


def _checked(judge_check, ex, label: str) -> dict:
    """The verdict `judge.py check` gave one of ``ex``'s files (its row, with the failed count)."""
    rows = {r["exercise"]: r for r in judge_check[1]["exercises"]}
    row = next((f for f in rows[ex.number].get("files", []) if f["file"] == label), None)
    assert row is not None, f"judge.py check judged no {label!r} of {ex.name}: {rows[ex.number].get('problems')}"
    return {**row, "failed": int(re.fullmatch(r"\d+ passed, (\d+) failed", row["summary"])[1])}


@pytest.mark.parametrize("ex,path", WRONG, ids=[f"{ex.number}-{p.stem}" for ex, p in WRONG])
def test_wrong_variant_is_rejected(ex, path, judge_check):
    """Judged as a learner's file is, in a child process with a time and memory limit (a wrong
    variant may loop forever or grow a list without end): by `judge.py check`'s one run."""
    report = _checked(judge_check, ex, f"wrong/{path.name}")
    assert report["verdict"] in ("wrong answer", "runtime error", "timeout"), report["verdict"]
    assert report["failed"] >= 1 and report["caught_by"]


@pytest.mark.parametrize("ex,mistake", MISTAKES, ids=[f"{ex.number}-{m['name']}" for ex, m in MISTAKES])
def test_mistake_applies_once_and_is_rejected(ex, mistake, judge_check):
    assert set(mistake) == {"name", "explain", "old", "new"} and mistake["explain"]
    assert ex.solution.read_text(encoding="utf-8").count(mistake["old"]) == 1
    report = _checked(judge_check, ex, f"mistake {mistake['name']}")   # judge.apply_mistake's file, in a child
    assert report["verdict"] in ("wrong answer", "runtime error", "timeout"), report["verdict"]
    assert report["failed"] >= 1 and report["caught_by"]
    changed = [line for line in judge.mistake_diff(ex, mistake).splitlines()[2:] if line[:1] in "+-"]
    assert changed, "the diff a reader sees shows the edit"


def test_a_mistake_whose_text_is_not_unique_is_refused():
    ex = judge.get_exercise("21")
    for old in ("def block_hashes(", "no such text", "parent"):
        count = ex.solution.read_text().count(old)
        if count != 1:
            with pytest.raises(ValueError, match=f"occurs {count} times"):
                judge.apply_mistake(ex, {"name": "x", "explain": "", "old": old, "new": ""})


def test_float32_angles_are_accepted_by_01():
    """The statement promises it (and the hint's arange gives float32): tolerance and statement agree."""
    ex = judge.get_exercise("01")
    source = ex.solution.read_text().replace("dtype=torch.float64) / head_dim", ") / head_dim").replace(
        "positions.to(torch.float64)", "positions.to(torch.float32)")
    assert "float64" not in source.split("def apply_rope")[1].split("cos =")[0]
    module = types.ModuleType(runner.SOLUTION_MODULE)
    exec(compile(source, "<float32 angles>", "exec"), module.__dict__)
    report = runner.run_tests(ex.tests, module)
    assert report["verdict"] == "accepted", _failures(report)


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_problem_statement(ex):
    meta, body = judge.parse_front_matter(ex.problem.read_text(encoding="utf-8"))
    assert {"title", "chapter", "difficulty", "tags"} <= set(meta)
    assert meta["difficulty"] in ("easy", "medium", "hard")
    assert isinstance(meta["tags"], list) and meta["tags"]
    for section in ("## Interface", "## Hints"):
        assert section in body
    assert judge.EXPLANATION.search(body), "an explanation folded in <details>"
    shown = judge.reader_view(body)
    assert "<summary>Explanation" not in shown and "## Hints" in shown
    assert len(ex.wrong_variants) + len(ex.mistakes) >= 3
    assert runner.list_test_names(ex.tests, examples_only=True), "at least one test_example*"


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_worked_examples_agree_with_the_reference(ex):
    result = judge.worked_examples(ex)
    assert result.attempted >= 4 and result.failed == 0


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_starter_and_reference_have_the_same_interface(ex):
    reference = runner.load_module(ex.solution, name="reference_under_check")
    assert runner.missing_names(reference, ex.starter) == []
    assert runner.required_names(ex.starter)


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_mutation_report_vouches_for_the_exercise(ex):
    """Mutation testing is not re-run here: practice/MUTATION_REPORT.json must hold a result for these
    very files (and this mutation tool and runner) with no surviving mutant. When it is stale, the
    message names the command to run."""
    problem = judge.mutation.report_problem(ex, ex.folder.parent)
    assert problem is None, problem
    entry = judge.mutation.load_report(ex.folder.parent)[ex.name]
    declared = judge.mutation.load_equivalent(ex.folder)
    assert set(entry["equivalent"]) == set(declared), "the declared equivalents are the unkilled mutants"
    unkilled = {m["id"] for m in entry["mutants"] if m["killed_by"] is None}
    assert unkilled == set(declared) and entry["generated"] == len(entry["mutants"])


def test_a_stale_mutation_report_names_the_exercise_to_rerun(tmp_path):
    import shutil
    copy = tmp_path / "practice"
    shutil.copytree(ROOT / "practice", copy, ignore=shutil.ignore_patterns("workspace", "__pycache__"))
    ex = judge.find_exercises(copy)[0]
    assert judge.mutation.report_problem(ex, copy) is None
    ex.tests.write_text(ex.tests.read_text() + "\n# edited\n")
    problem = judge.mutation.report_problem(ex, copy)
    assert problem and "stale (its files changed since)" in problem
    assert f"python practice/judge.py mutate {ex.number}" in problem


# ---------------------------------------------------------------------------------------------
# The package's classes pass the exercises' tests


def _module(**names) -> types.ModuleType:
    module = types.ModuleType(runner.SOLUTION_MODULE)
    module.__dict__.update(names)
    return module


def _package_passes(number: str, module: types.ModuleType) -> None:
    report = runner.run_tests(judge.get_exercise(number).tests, module)
    assert report["verdict"] == "accepted", _failures(report)


def test_vllm_mode_chain_passes_21_block_hashes():
    """Exercise 21 is vLLM's chain: the package's vLLM-mode pool (SHA-256, NONE_HASH) computes it,
    resumed after ``known`` as vLLM's request block hasher does."""
    prefix_cache = pytest.importorskip("nano_engine.prefix_cache", reason="nano_engine.prefix_cache not written yet")

    def block_hashes(token_ids, block_size, known=()):
        pool = prefix_cache.PrefixCachingBlockPool(num_blocks=1, block_size=block_size, hash_algo="sha256", vllm=True)
        chain = pool._chain(token_ids, len(token_ids), prefix_cache.extra_keys(None, None, None),
                            first_block=len(known), parent=known[-1] if known else None)
        return [h for _, h, _, _ in chain]

    _package_passes("21", _module(block_hashes=block_hashes))


def _with_the_engines_admission(pool_class):
    """The package's pool, admitting a request through the package's own cache manager: match
    (the last token left out), can_admit, lock (touch), allocate -- the scheduler's order."""
    from nano_engine.cache_manager import HashedBlockCacheManager
    from nano_engine.sampling import SamplingParams
    from nano_engine.sequence import Sequence

    class Admitting(pool_class):
        def admit(self, token_ids):
            if not token_ids:
                raise ValueError("a prompt needs at least one token")
            manager = HashedBlockCacheManager(self)
            seq = Sequence(-1, list(token_ids), SamplingParams())
            match = manager.match(seq)
            if not manager.can_admit(match, len(token_ids)):
                return None
            manager.lock(seq, match)
            assert manager.allocate(seq, len(token_ids)), "can_admit said it fits"
            return seq.block_table

    return Admitting


def test_prefix_caching_block_pool_passes_22_free_queue_and_admission():
    prefix_cache = pytest.importorskip("nano_engine.prefix_cache", reason="nano_engine.prefix_cache not written yet")
    _package_passes("22", _module(PrefixCachingBlockPool=_with_the_engines_admission(prefix_cache.PrefixCachingBlockPool)))


def test_prefix_caching_block_pool_passes_24_lora_and_salt():
    prefix_cache = pytest.importorskip("nano_engine.prefix_cache", reason="nano_engine.prefix_cache not written yet")
    _package_passes("24", _module(PrefixCachingBlockPool=prefix_cache.PrefixCachingBlockPool))


def test_radix_cache_passes_31_with_the_engines_checkpoint():
    """Exercise 31's match / insert / split / one clock value per walk are the package's
    RadixCache's; its checkpoint is RadixCacheManager.cache's three moves (insert, match, move the
    lock), composed here from the tree's public operations in that order. (Exercise 32's LFU and
    SLRU have no counterpart in the package, whose tree evicts LRU only.)"""
    radix = pytest.importorskip("nano_engine.radix", reason="nano_engine.radix not written yet")

    class Checkpointing(radix.RadixCache):
        def checkpoint(self, node, key, value):
            if len(key) != len(value):
                raise ValueError("key and value differ in length")
            matched, walk = 0, node
            while walk is not self.root:
                matched, walk = matched + len(walk.key), walk.parent
            already = self.insert(key, value)
            slots, new = self.match_prefix(key)
            self.inc_lock_ref(new)
            self.dec_lock_ref(node)
            return slots, new, list(value[matched:already])

    _package_passes("31", _module(RadixCache=Checkpointing))


def test_workloads_hit_rate_passes_108():
    workloads = pytest.importorskip("nano_engine.workloads", reason="nano_engine.workloads not written yet")
    _package_passes("41", _module(hit_rate=workloads.hit_rate))


def test_a_package_class_with_a_bug_would_fail():
    """The coincidence tests can fail: a pool whose free() forgets the reverse order is caught."""
    prefix_cache = pytest.importorskip("nano_engine.prefix_cache", reason="nano_engine.prefix_cache not written yet")

    class ForwardFree(prefix_cache.PrefixCachingBlockPool):
        def free(self, blocks):
            for b in blocks:
                super().free([b])

    report = runner.run_tests(judge.get_exercise("22").tests, _module(PrefixCachingBlockPool=ForwardFree))
    assert report["verdict"] == "wrong answer"


# ---------------------------------------------------------------------------------------------
# Notebook side: show_problem, the buttons


def test_show_problem_renders_markdown():
    pytest.importorskip("IPython")
    from nano_engine.notebook.exercises import exercise_list, show_problem

    text = show_problem(31).data
    assert not text.startswith("---") and "title:" not in text.split("\n")[0]
    assert "*medium · chapter 03_radix_tree" in text
    assert "# 31. Radix tree splits that inherit the lock" in text
    assert "<summary>Explanation</summary>" in text, "folded, one click away, in a notebook"
    table = exercise_list("03_radix_tree").data
    assert "| 31 |" in table and "| 32 |" in table and "| 21 |" not in table


def test_old_numbers_work_in_the_notebook():
    pytest.importorskip("IPython")
    from nano_engine.notebook.exercises import problem_markdown

    assert "# 21. Chained block hashes" in problem_markdown(101)
    assert "# 01. RMSNorm" in problem_markdown(1) and "# 01. RMSNorm" in problem_markdown("100")
    assert judge.get_exercise("01").optional and not judge.get_exercise("21").optional


def test_check_button_shows_verdicts(tmp_path):
    pytest.importorskip("ipywidgets")
    from nano_engine.notebook.exercises import check_button

    ex = judge.get_exercise("23")
    wrong = tmp_path / "no_last_token_rule.py"
    wrong.write_text(judge.apply_mistake(ex, next(m for m in ex.mistakes if m["name"] == "no_last_token_rule")))
    box = check_button(23, file=wrong, timeout=5)
    assert str(wrong) in box.result.value
    box.run_button.click()
    html = box.result.value
    assert "(examples only)" in html and "1 passed, 2 failed" in html   # problem.md's worked example too
    assert "test_example_full_hit_gives_up_the_last_block" in html and "wrong answer" in html
    assert "expected: <code>([7], 4)</code>" in html and "got: <code>([7, 3], 8)</code>" in html
    box.check_button.click()
    assert "wrong answer" in box.result.value and "(examples only)" not in box.result.value
    assert "test_random_against_brute_force" in box.result.value

    good = check_button(23, file=judge.get_exercise("23").solution)
    good.check_button.click()
    assert "accepted" in good.result.value and "12 passed, 0 failed" in good.result.value


def test_check_button_without_a_file_says_how_to_start(tmp_path):
    pytest.importorskip("ipywidgets")
    from nano_engine.notebook.exercises import check_button

    box = check_button(21, workspace=tmp_path)
    assert "judge.py start 21" in box.result.value
    box.check_button.click()
    assert "no such file" in box.result.value and "judge.py start 21" in box.result.value


def test_check_button_reports_a_timeout(tmp_path):
    pytest.importorskip("ipywidgets")
    from nano_engine.notebook.exercises import check_button

    path = tmp_path / "spin.py"
    path.write_text("def block_hashes(token_ids, block_size):\n    while True:\n        pass\n")
    box = check_button(21, file=path, timeout=0.5)
    box.run_button.click()
    assert box.result.value.count("timeout") >= 2
    assert "your file line 2" in box.result.value or "your file line 3" in box.result.value
