"""The practice judge (practice/judge.py and its core, practice/runner.py).

Most tests drive the command line the way a reader does, in a temporary workspace (the
NANO_ENGINE_WORKSPACE environment variable), with short time limits. The runner core is also
tested in-process, since it is meant to run without a subprocess (notebook kernel, browser).
"""

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRACTICE = ROOT / "practice"
JUDGE = PRACTICE / "judge.py"
CLOSING_LINE = re.compile(r"^\d+ passed, \d+ failed$")


def load_judge() -> types.ModuleType:
    if "practice_judge" not in sys.modules:
        spec = importlib.util.spec_from_file_location("practice_judge", JUDGE)
        module = importlib.util.module_from_spec(spec)
        sys.modules["practice_judge"] = module
        spec.loader.exec_module(module)
    return sys.modules["practice_judge"]


judge = load_judge()
runner = judge.runner


@pytest.fixture
def workspace(tmp_path):
    return tmp_path / "workspace"


def run(*args: str, workspace: Path, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "NANO_ENGINE_WORKSPACE": str(workspace), "NO_COLOR": "1"}
    return subprocess.run([sys.executable, str(JUDGE), *args], capture_output=True, text=True,
                          cwd=str(cwd), env=env, timeout=timeout)


# The ergonomics and the in-process tricks below hold for both runners: the in-child one that
# `test` uses, and the isolated one (tests in the judge, the code behind proxy.py) that `verify` uses.
BOTH_RUNNERS = pytest.mark.parametrize("runner_args", [(), ("--isolated",)], ids=["in-child", "isolated"])


def write(path: Path, source: str) -> Path:
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def last_line(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout.rstrip().splitlines()[-1]


def mistake_file(number: str, name: str, folder: Path) -> Path:
    """One of an exercise's classic mistakes (mistakes.py), generated into a file to be judged."""
    ex = judge.get_exercise(number)
    mistake = next(m for m in ex.mistakes if m["name"] == name)
    path = folder / f"{name}.py"
    path.write_text(judge.apply_mistake(ex, mistake), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# The exercises as a whole


def test_check_passes(judge_check):
    """`judge.py check`, mutation testing included: every exercise sound, no surviving mutant."""
    proc, result = judge_check
    problems = {r["exercise"]: r["problems"] for r in result["exercises"] if r["problems"]}
    assert problems == {}
    assert result["ok"] and proc.returncode == 0
    numbers = {r["exercise"] for r in result["exercises"]}
    assert {"21", "22", "23", "31", "32", "51", "53", "24"} <= numbers
    for r in result["exercises"]:
        wrong = [f for f in r["files"] if f["file"] not in ("reference", "starter")]
        assert len(wrong) >= 3 and all(f["ok"] and f["caught_by"] for f in wrong), r["exercise"]
        assert r["examples"] >= 1 and r["worked_examples"] >= 1
        mutants = r["mutation"]
        assert mutants["generated"] > 0 and mutants["survivors"] == [] and mutants["stale_declarations"] == []
        assert mutants["killed"] + len(mutants["equivalent"]) == mutants["generated"], r["exercise"]


def test_check_reports_a_broken_exercise(tmp_path):
    """`check` must fail when a reference is wrong or a "wrong" variant is accepted: copy an
    exercise, swap its reference and one of its wrong variants, and check the copy."""
    import shutil
    root = tmp_path / "practice"
    shutil.copytree(PRACTICE / "23_lookup_last_token", root / "23_lookup_last_token")
    ex = judge.get_exercise("23", root=root)
    (ex.folder / "wrong").mkdir(exist_ok=True)
    shutil.copyfile(ex.solution, ex.folder / "wrong" / "not_wrong.py")
    with (ex.folder / "mistakes.py").open("a") as f:
        f.write("MISTAKES.append({'name': 'twice', 'explain': '', 'old': '(', 'new': '['})\n")
    mistake_file("23", "no_last_token_rule", ex.folder)
    shutil.copyfile(ex.folder / "no_last_token_rule.py", ex.solution)
    result = judge.check_exercise(ex, timeout=5, mutate=False)
    assert not result["ok"]
    assert any(p.startswith("reference: expected accepted") for p in result["problems"])
    assert any("worked example" in p for p in result["problems"])
    assert any(p.startswith("wrong/not_wrong.py: expected rejected") for p in result["problems"])
    assert any("mistake 'twice'" in p and "must be exactly once" in p for p in result["problems"])


# ---------------------------------------------------------------------------------------------
# Verdicts


def test_solution_is_accepted_from_any_directory(tmp_path, workspace):
    proc = run("solution", "21", workspace=workspace, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verdict: accepted" in proc.stdout
    assert re.fullmatch(r"11 passed, 0 failed", last_line(proc)), "test.py's 10 tests and the worked example"


@BOTH_RUNNERS
def test_wrong_answer_shows_line_expected_got_and_locals(tmp_path, workspace, runner_args):
    wrong = mistake_file("21", "no_parent", tmp_path)
    proc = run("test", "21", *runner_args, "--file", str(wrong), workspace=workspace)
    assert proc.returncode == 1
    assert "wrong answer   test_parent_is_in_the_hash" in proc.stdout
    assert 'test.py line 63:  assert a[1] != c[1], "block [3, 4] after a different first block' in proc.stdout
    assert re.search(r"expected: != b'.+'\n\s+got:\s+b'", proc.stdout)
    assert re.search(r"^\s+c\s+= \[b'.+', b'.+'\]$", proc.stdout, re.M), "the test's locals are listed"
    assert last_line(proc) == "3 passed, 8 failed"

    report = json.loads(run("test", "21", *runner_args, "--file", str(wrong), "--json", workspace=workspace).stdout)
    assert report["verdict"] == "wrong answer" and report["summary"] == "3 passed, 8 failed"
    failed = next(t for t in report["tests"] if t["name"] == "test_repeated_blocks_hash_differently")
    assert failed["failure"]["expected"] == "3" and failed["failure"]["got"] == "1"
    assert failed["failure"]["test"]["lineno"] == 69
    assert set(failed["failure"]["test"]["locals"]) == {"hashes", "distinct"}


@BOTH_RUNNERS
def test_runtime_error_points_at_the_readers_line(tmp_path, workspace, runner_args):
    path = write(tmp_path / "crash.py", """\
        def block_hashes(token_ids, block_size):
            total = len(token_ids)
            return [total // (block_size - block_size)]
        """)
    proc = run("test", "21", *runner_args, "--run", "--file", str(path), workspace=workspace)
    assert proc.returncode == 1
    assert "runtime error  test_example_counts_full_blocks_only" in proc.stdout
    assert "ZeroDivisionError" in proc.stdout
    assert "your file line 3:  return [total // (block_size - block_size)]" in proc.stdout
    assert re.search(r"total\s+= 5", proc.stdout)
    assert "called from test.py line 28" in proc.stdout
    assert re.search(r"called from problem.md line \d+:  >>> ", proc.stdout), "the worked example names its line in problem.md"
    assert "Traceback" not in proc.stdout + proc.stderr
    assert last_line(proc) == "0 passed, 3 failed"


@BOTH_RUNNERS
def test_starter_is_a_runtime_error_that_says_so(workspace, runner_args):
    proc = run("test", "31", *runner_args, "--file", str(PRACTICE / "31_radix_split_lock" / "starter.py"), workspace=workspace)
    assert proc.returncode == 1
    assert "this is still the starter's placeholder" in proc.stdout
    assert "verdict: runtime error" in proc.stdout


@BOTH_RUNNERS
def test_syntax_error_is_a_compile_error(tmp_path, workspace, runner_args):
    path = write(tmp_path / "broken.py", """\
        def block_hashes(token_ids, block_size:
            return []
        """)
    proc = run("test", "21", *runner_args, "--file", str(path), workspace=workspace)
    assert proc.returncode == 1
    assert "compile error: SyntaxError" in proc.stdout
    assert "your file line 1:  def block_hashes(token_ids, block_size:" in proc.stdout
    assert "verdict: compile error" in proc.stdout
    assert last_line(proc) == "0 passed, 11 failed"
    assert "Traceback" not in proc.stdout + proc.stderr


@BOTH_RUNNERS
def test_missing_function_and_method_are_named(tmp_path, workspace, runner_args):
    path = write(tmp_path / "misnamed.py", """\
        def block_hash(token_ids, block_size):
            return []
        """)
    proc = run("test", "21", *runner_args, "--file", str(path), workspace=workspace)
    assert proc.returncode == 1
    assert ("`block_hashes` is not defined (expected: def block_hashes(token_ids: list[int], block_size: int, "
            "known: list[bytes]=()))") in proc.stdout
    assert "verdict: runtime error" in proc.stdout

    source = (PRACTICE / "22_free_queue_lru" / "solution.py").read_text()
    path = write(tmp_path / "no_touch.py", source.replace("def touch(", "def _touch("))
    report = json.loads(run("test", "22", *runner_args, "--file", str(path), "--json", workspace=workspace).stdout)
    assert report["verdict"] == "runtime error"
    assert "class `PrefixCachingBlockPool` has no method `touch`" in report["load_error"]["message"]


@BOTH_RUNNERS
def test_module_level_exception_is_a_runtime_error(tmp_path, workspace, runner_args):
    path = write(tmp_path / "mod.py", """\
        print("loading")
        x = undefined_name + 1
        """)
    report = json.loads(run("test", "21", *runner_args, "--file", str(path), "--json", workspace=workspace).stdout)
    assert report["verdict"] == "runtime error"
    assert report["load_error"]["message"].startswith("NameError")
    assert report["load_error"]["lineno"] == 2
    assert "loading" in report["stderr"]


@BOTH_RUNNERS
def test_endless_loop_is_a_timeout_with_the_line_it_was_stuck_on(tmp_path, workspace, runner_args):
    path = write(tmp_path / "loop.py", """\
        def block_hashes(token_ids, block_size):
            hashes, i = [], 0
            while i < len(token_ids):
                hashes.append(i)
            return hashes
        """)
    proc = run("test", "21", *runner_args, "--run", "--timeout", "0.5", "--file", str(path), workspace=workspace)
    assert proc.returncode == 1
    assert proc.stdout.count("timeout        test_example") == 1
    assert proc.stdout.count("not run        test_example") == 2, "one endless loop costs one time limit"
    assert "skipped after the timeout in test_example" in proc.stdout
    assert proc.stdout.count("skipped after the timeout") == 1, "a long note is shown once, then referred to"
    limit = 0.5 * (judge.ISOLATED_TIME_FACTOR if runner_args else 1)   # the isolated runner's round trips are CPU too
    assert f"did not finish within {limit:g} s" in proc.stdout
    assert re.search(r"at your file line [34]:", proc.stdout)
    assert re.search(r"^\s+i\s+= 0$", proc.stdout, re.M)
    assert "verdict: timeout" in proc.stdout
    assert last_line(proc) == "0 passed, 3 failed"


@BOTH_RUNNERS
def test_tests_after_the_first_timeout_are_skipped_with_a_note(tmp_path, workspace, runner_args):
    reference = (PRACTICE / "21_chained_block_hashes" / "solution.py").read_text()
    path = write(tmp_path / "loops_once.py", reference.replace(
        "    hashes, parent = [], None\n",
        "    hashes, parent = [], None\n    while len(token_ids) == 48:\n        pass\n"))
    report = json.loads(run("test", "21", *runner_args, "--timeout", "1", "--file", str(path), "--json", workspace=workspace).stdout)
    verdicts = [t["verdict"] for t in report["tests"]]
    stuck = verdicts.index("timeout")
    assert report["tests"][stuck]["name"] == "test_block_size_one_and_exact_multiple"
    assert set(verdicts[:stuck]) == {"accepted"} and set(verdicts[stuck + 1:]) == {"not run"}
    assert all("skipped after the timeout in test_block_size_one_and_exact_multiple" in t["message"]
               for t in report["tests"][stuck + 1:])
    assert report["verdict"] == "timeout"


@BOTH_RUNNERS
def test_endless_loop_at_module_level_is_a_timeout(tmp_path, workspace, runner_args):
    path = write(tmp_path / "spin.py", "while True:\n    pass\n")
    report = json.loads(run("test", "21", *runner_args, "--run", "--timeout", "0.5", "--file", str(path), "--json",
                            workspace=workspace).stdout)
    assert report["verdict"] == "timeout"
    assert report["load_error"]["where"]["lineno"] in (1, 2)
    assert report["summary"] == "0 passed, 3 failed"


@BOTH_RUNNERS
def test_a_process_that_dies_is_a_runtime_error(tmp_path, workspace, runner_args):
    path = write(tmp_path / "exits.py", """\
        import os
        def block_hashes(token_ids, block_size):
            os._exit(7)
        """)
    report = json.loads(run("test", "21", *runner_args, "--run", "--file", str(path), "--json", workspace=workspace).stdout)
    assert [t["verdict"] for t in report["tests"]] == ["runtime error", "not run", "not run"]
    assert report["tests"][0]["message"] == ("the Python process ended during this test: it exited with code 7 "
                                             "(os._exit(), or an error outside every test)")


@BOTH_RUNNERS
def test_sys_exit_inside_a_test_is_a_runtime_error(tmp_path, workspace, runner_args):
    path = write(tmp_path / "sysexit.py", """\
        import sys
        def block_hashes(token_ids, block_size):
            print("leaving")
            sys.exit(3)
        """)
    report = json.loads(run("test", "21", *runner_args, "--run", "--file", str(path), "--json", workspace=workspace).stdout)
    first = report["tests"][0]
    assert first["verdict"] == "runtime error" and first["message"] == "SystemExit: 3"
    assert first["stdout"] == "leaving\n"
    assert first["failure"]["yours"]["lineno"] == 4


def test_exit_codes(tmp_path, workspace):
    assert run("solution", "23", workspace=workspace).returncode == 0
    wrong = mistake_file("23", "skips_misses", tmp_path)
    assert run("test", "23", "--file", str(wrong), workspace=workspace).returncode == 1
    unknown = run("test", "999", workspace=workspace)
    assert unknown.returncode == 2 and "no exercise '999'" in unknown.stderr
    missing = run("test", "23", workspace=workspace)
    assert missing.returncode == 2 and "judge.py start 23" in missing.stderr
    as_json = run("test", "23", "--json", workspace=workspace)
    assert as_json.returncode == 2 and "error" in json.loads(as_json.stdout)


def test_examples_only_runs_the_example_tests(workspace):
    report = json.loads(run("solution", "32", "--run", "--json", workspace=workspace).stdout)
    names = [t["name"] for t in report["tests"]]
    assert names and all(n.startswith("test_example") for n in names)
    assert report["mode"] == "examples"


# ---------------------------------------------------------------------------------------------
# Workspace: start, list, remembered results


def test_start_copies_the_starter_and_never_overwrites_without_force(workspace):
    ex = judge.get_exercise("21")
    target = workspace / "21_chained_block_hashes.py"
    proc = run("start", "21", workspace=workspace)
    assert proc.returncode == 0
    assert target.read_text() == ex.starter.read_text()
    assert "# 21. Chained block hashes" in proc.stdout
    assert "## Worked example" in proc.stdout
    assert "Attention makes the KV of a token" not in proc.stdout, "the explanation stays hidden"

    target.write_text("# my work\n")
    proc = run("start", "21", workspace=workspace)
    assert proc.returncode == 0 and "kept your existing file" in proc.stdout
    assert target.read_text() == "# my work\n"

    proc = run("start", "21", "--force", workspace=workspace)
    assert proc.returncode == 0
    assert target.read_text() == ex.starter.read_text()
    assert (workspace / "21_chained_block_hashes.py.bak").read_text() == "# my work\n"


def test_list_shows_status_and_remembers_acceptance(workspace):
    rows = json.loads(run("list", "--json", workspace=workspace).stdout)
    assert [r["number"] for r in rows] == sorted((r["number"] for r in rows), key=int)
    assert {r["status"] for r in rows} == {"not started"}
    assert all(r["title"] and r["difficulty"] and r["chapter"] for r in rows)

    run("start", "23", workspace=workspace)
    mine = workspace / "23_lookup_last_token.py"
    mine.write_text((PRACTICE / "23_lookup_last_token" / "solution.py").read_text())
    status = {r["number"]: r["status"] for r in json.loads(run("list", "--json", workspace=workspace).stdout)}
    assert status["23"] == "started"
    assert run("test", "23", "--run", workspace=workspace).returncode == 0
    status = {r["number"]: r["status"] for r in json.loads(run("list", "--json", workspace=workspace).stdout)}
    assert status["23"] == "started", "passing the examples is not acceptance"
    assert run("test", "23", workspace=workspace).returncode == 0
    text = run("list", workspace=workspace).stdout
    assert re.search(r"^\s*23\s+Lookup with the last-token rule\s+easy\s+02_prefix_cache_hashed_blocks\s+accepted$",
                     text, re.M)
    mine.write_text(mine.read_text() + "\n# tidied up\n")
    status = {r["number"]: r["status"] for r in json.loads(run("list", "--json", workspace=workspace).stdout)}
    assert status["23"] == "accepted (stale: your file changed since)"


def test_old_numbers_are_aliases(workspace):
    """The exercises were renumbered (101 -> 21, ...): old numbers, old folder names and a workspace
    file started under the old name keep working."""
    assert judge.get_exercise("101").name == "21_chained_block_hashes"
    assert judge.get_exercise("101_chained_block_hashes").number == "21"
    assert judge.get_exercise(1).number == judge.get_exercise("100").number == "01"
    workspace.mkdir()
    legacy = workspace / "103_lookup_last_token.py"
    legacy.write_text((PRACTICE / "23_lookup_last_token" / "solution.py").read_text())
    proc = run("test", "103", workspace=workspace)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "103_lookup_last_token.py" in proc.stdout
    status = {r["number"]: r["status"] for r in json.loads(run("list", "--json", workspace=workspace).stdout)}
    assert status["23"] == "accepted"


def test_doctor(workspace):
    proc = run("doctor", "--json", workspace=workspace)
    result = json.loads(proc.stdout)
    names = {c["name"] for c in result["checks"]}
    assert {"python", "exercises", "workspace", "pytest", "torch", "numpy", "ipywidgets", "dot",
            "nano_engine"} <= names
    assert result["ok"] and proc.returncode == 0
    checks = {c["name"]: c for c in result["checks"]}
    assert checks["nano_engine"]["ok"], checks["nano_engine"]["detail"]
    text = run("doctor", workspace=workspace).stdout
    assert "python" in text and "ready to practise" in text


# ---------------------------------------------------------------------------------------------
# The runner core, in-process


def test_runner_core_needs_no_subprocess():
    tree = ast.parse((PRACTICE / "runner.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert "subprocess" not in imported
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}


def test_judge_in_process(tmp_path):
    ex = judge.get_exercise("32")
    report = runner.judge_in_process(ex.tests, ex.solution, ex.starter)
    assert report["verdict"] == "accepted" and report["failed"] == 0
    wrong = runner.judge_in_process(ex.tests, mistake_file("32", "no_parent_push", tmp_path), ex.starter,
                                    examples_only=True)
    assert wrong["verdict"] == "wrong answer"
    assert wrong["summary"] == "2 passed, 2 failed"
    assert wrong["tests"][0]["name"] == runner.WORKED_EXAMPLE, "the worked example (problem.md beside test.py) runs first"


def test_assertion_rewriting(tmp_path):
    tests = write(tmp_path / "test.py", """\
        from solution_under_test import double

        def test_example_equal():
            got = double(2)
            assert got == 5, "two doubled"

        def test_membership():
            values = [double(x) for x in range(3)]
            assert 3 in values

        def test_truthiness():
            assert double(0)

        def test_multi_line():
            assert (
                double(1) == 3
            )

        def test_side_effects_once():
            calls = []
            def once():
                calls.append(1)
                return len(calls)
            assert once() == 1
            assert calls == [1], "each side of an assert is evaluated once"

        def test_chained():
            assert 1 < double(1) < 2

        def test_passes():
            assert double(3) == 6
        """)
    module = types.ModuleType("solution_under_test")
    exec("def double(x):\n    return 2 * x\n", module.__dict__)
    report = runner.run_tests(tests, module)
    by_name = {t["name"]: t for t in report["tests"]}
    assert report["summary"] == "2 passed, 5 failed"
    equal = by_name["test_example_equal"]["failure"]
    assert (equal["expected"], equal["got"], equal["message"]) == ("5", "4", "two doubled")
    assert equal["test"]["lineno"] == 5 and equal["test"]["locals"] == {"got": "4"}
    member = by_name["test_membership"]["failure"]
    assert (member["expected"], member["got"]) == ("in [0, 2, 4]", "3")
    truth = by_name["test_truthiness"]["failure"]
    assert (truth["expected"], truth["got"]) == ("a true value", "0")
    multi = by_name["test_multi_line"]["failure"]
    assert multi["test"]["lineno"] == 15 and "double(1) == 3" in multi["expression"]
    assert by_name["test_side_effects_once"]["verdict"] == "accepted"
    assert by_name["test_chained"]["verdict"] == "wrong answer"
    assert {t["verdict"] for t in report["tests"]} == {"accepted", "wrong answer"}


def test_safe_repr_is_bounded():
    class Broken:
        def __repr__(self):
            raise RuntimeError("nope")

    assert runner.safe_repr(Broken()).startswith("<repr failed: RuntimeError")
    huge = runner.safe_repr(list(range(10**6)))
    assert len(huge) <= runner.REPR_LIMIT and huge.endswith("...]")
    from collections import OrderedDict
    assert runner.safe_repr(OrderedDict.fromkeys([3, 2, 1])) == "OrderedDict({3: None, 2: None, 1: None})"


# ---------------------------------------------------------------------------------------------
# Tamper-proof verdicts: each attempt is rejected, or its verdict is not recorded

REFERENCE_21 = (PRACTICE / "21_chained_block_hashes" / "solution.py").read_text()
WRONG_21 = ("def block_hashes(token_ids, block_size, known=()):\n"      # the right count, every hash wrong
            "    return [bytes(32) for _ in range(len(known), len(token_ids) // block_size)]\n")


def _judge_json(*args, workspace, **kwargs) -> dict:
    return json.loads(run(*args, "--json", workspace=workspace, **kwargs).stdout)


@BOTH_RUNNERS
def test_replacing_run_test_through_main_is_not_accepted(tmp_path, workspace, runner_args):
    path = write(tmp_path / "forge_main.py", WRONG_21 + textwrap.dedent("""\
        import __main__, sys

        def fake_run_test(name, *args, **kwargs):
            return {"name": name, "verdict": "accepted", "message": "", "failure": None, "seconds": 0.0}

        for module in [__main__] + list(sys.modules.values()):
            for attr in ("run_test", "describe_failure", "summarize"):
                if hasattr(module, attr):
                    setattr(module, attr, fake_run_test)
        """))
    report = _judge_json("test", "21", *runner_args, "--file", str(path), workspace=workspace)
    assert report["verdict"] == "wrong answer"
    assert report["failed"] >= 1


def test_forged_protocol_lines_are_ignored(tmp_path, workspace):
    """The code writes 'accepted' results in the protocol's format to every open descriptor,
    then leaves: the lines carry no valid signature, so the tests count as not passed."""
    names = runner.list_test_names(judge.get_exercise("21").tests)
    path = write(tmp_path / "forge_pipe.py", WRONG_21 + textwrap.dedent(f"""\
        import json, os
        events = [{{"event": "ready", "tests": {names!r}}}]
        for name in {names!r}:
            events += [{{"event": "start", "test": name}},
                       {{"event": "result", "name": name, "verdict": "accepted", "message": "", "failure": None,
                        "seconds": 0.0}}]
        events.append({{"event": "done"}})
        text = "".join("0" * 64 + " " + json.dumps(e) + "\\n" for e in events).encode()
        for fd in range(1, 20):
            try:
                os.write(fd, text)
            except OSError:
                pass
        os._exit(0)
        """))
    report = _judge_json("test", "21", "--file", str(path), workspace=workspace)
    assert report["verdict"] != "accepted"
    assert report.get("unsigned_lines", 0) >= 1
    assert report["passed"] == 0


@BOTH_RUNNERS
def test_walking_frames_to_the_tests_is_refused(tmp_path, workspace, runner_args):
    path = write(tmp_path / "forge_frames.py", textwrap.dedent("""\
        import sys

        def block_hashes(token_ids, block_size):
            frame = sys._getframe(1)          # the test function; from there, its globals
            frame.f_globals["block_hashes"] = lambda *a, **k: []
            return []
        """))
    report = _judge_json("test", "21", *runner_args, "--run", "--file", str(path), workspace=workspace)
    assert report["verdict"] == "runtime error"
    assert "sys._getframe is not available while the judge runs your code" in report["tests"][0]["message"]

    path = write(tmp_path / "forge_gc.py", textwrap.dedent("""\
        import gc

        def block_hashes(token_ids, block_size):
            for obj in gc.get_objects():
                if isinstance(obj, dict) and "test_example_counts_full_blocks_only" in obj:
                    obj.clear()
            return []
        """))
    report = _judge_json("test", "21", *runner_args, "--run", "--file", str(path), workspace=workspace)
    assert report["verdict"] == "runtime error"
    assert "gc.get_objects is not available" in report["tests"][0]["message"]

    path = write(tmp_path / "forge_traceback.py", textwrap.dedent("""\
        def block_hashes(token_ids, block_size):
            try:
                raise KeyError
            except KeyError as exc:
                caller = exc.__traceback__.tb_frame.f_back
            caller.f_globals.clear()
            return []
        """))
    report = _judge_json("test", "21", *runner_args, "--run", "--file", str(path), workspace=workspace)
    assert report["verdict"] == "runtime error"
    assert "object.__getattr__ is not available" in report["tests"][0]["message"]


@BOTH_RUNNERS
def test_a_value_that_equals_everything_is_not_accepted(tmp_path, workspace, runner_args):
    path = write(tmp_path / "forge_eq.py", textwrap.dedent("""\
        class Anything(list):
            def __eq__(self, other):
                return True
            def __ne__(self, other):
                return False
            def __len__(self):
                return 2
            __hash__ = None

        def block_hashes(token_ids, block_size):
            return Anything()
        """))
    report = _judge_json("test", "21", *runner_args, "--file", str(path), workspace=workspace)
    assert report["verdict"] in ("wrong answer", "runtime error"), report["verdict"]   # the worked example fails first
    assert [t["name"] for t in report["tests"] if t["verdict"] == "wrong answer"], "and test.py's comparisons fail"


def test_replacing_a_library_function_the_tests_use_is_refused(tmp_path, workspace):
    path = write(tmp_path / "forge_random.py", WRONG_21 + textwrap.dedent("""\
        import random
        random.Random.randint = lambda self, a, b: a      # every random test becomes trivial
        """))
    report = _judge_json("test", "21", "--file", str(path), workspace=workspace)
    assert report["verdict"] == "runtime error"
    assert "random.Random.randint" in report["tests"][0]["message"]


def _copy_practice(tmp_path: Path) -> Path:
    import shutil
    copy = tmp_path / "practice"
    shutil.copytree(PRACTICE, copy, ignore=shutil.ignore_patterns("workspace", "__pycache__"))
    return copy


def test_an_edited_test_py_is_not_recorded(tmp_path, workspace):
    copy = _copy_practice(tmp_path)
    (copy / "21_chained_block_hashes" / "test.py").write_text(
        "from solution_under_test import block_hashes\n\ndef test_example_nothing():\n    pass\n")
    workspace.mkdir()
    (workspace / "21_chained_block_hashes.py").write_text(WRONG_21)
    env = {**os.environ, "NANO_ENGINE_WORKSPACE": str(workspace), "NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, str(copy / "judge.py"), "test", "21"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 1
    assert "differ from the shipped version" in proc.stdout and "not recorded" in proc.stdout
    listed = subprocess.run([sys.executable, str(copy / "judge.py"), "list", "--json"], capture_output=True,
                            text=True, env=env, timeout=120)
    status = {r["number"]: r["status"] for r in json.loads(listed.stdout)}
    assert status["21"] == "started"


def test_an_edited_runner_is_not_recorded(tmp_path, workspace):
    copy = _copy_practice(tmp_path)
    runner_file = copy / "runner.py"
    runner_file.write_text(runner_file.read_text().replace(
        'result = {"verdict": ACCEPTED, "message": "", "failure": None}',
        'result = {"verdict": ACCEPTED, "message": "", "failure": None}  # edited'))
    spec = importlib.util.spec_from_file_location("copied_judge", copy / "judge.py")
    copied = importlib.util.module_from_spec(spec)
    sys.modules["copied_judge"] = copied   # dataclasses look the module up
    try:
        spec.loader.exec_module(copied)
    finally:
        del sys.modules["copied_judge"]
    ex = copied.get_exercise("21")
    report = copied.judge_file(ex, ex.solution)
    assert report["verdict"] == "accepted" and report["judged"]["sealed"] is False


def test_an_accepted_verdict_records_what_was_judged(workspace):
    run("start", "21", workspace=workspace)
    mine = workspace / "21_chained_block_hashes.py"
    mine.write_text(REFERENCE_21)
    report = _judge_json("test", "21", workspace=workspace)
    assert report["verdict"] == "accepted" and report["recorded"] is True
    record = json.loads((workspace / judge.STATUS_FILE).read_text())["21"]
    sha = lambda p: __import__("hashlib").sha256(p.read_bytes()).hexdigest()
    assert record["file_sha256"] == sha(mine)
    assert record["tests_sha256"] == sha(PRACTICE / "21_chained_block_hashes" / "test.py")
    assert record["runner_sha256"] == sha(PRACTICE / "runner.py")
    assert record["proxy_sha256"] == sha(PRACTICE / "proxy.py") and record["runner"] == "in-child"
    assert record["sealed"] is True


def test_the_seal_matches_the_shipped_files():
    seal = judge.load_seal()
    expected = {f"{p.parent.name}/{p.name}" if p.name == "test.py" else p.name for p in judge.sealed_files()}
    expected |= {f"{ex.name}/problem.md#worked-examples" for ex in judge.find_exercises()}
    assert set(seal) == expected, "run `python practice/judge.py seal` after editing a test.py, runner.py or proxy.py"
    for path in judge.sealed_files():
        key = f"{path.parent.name}/{path.name}" if path.name == "test.py" else path.name
        assert seal[key] == __import__("hashlib").sha256(path.read_bytes()).hexdigest(), key
    for ex in judge.find_exercises():
        assert seal[f"{ex.name}/problem.md#worked-examples"] == judge.examples_sha(ex), \
            f"{ex.name}: its worked examples changed; run `python practice/judge.py seal`"


def test_a_worked_example_that_changed_is_not_recorded(tmp_path, workspace):
    """The worked examples judge too, so they are sealed: a problem.md whose examples were edited
    (here: emptied, which would let more files through) gives a verdict that is not recorded."""
    copy = _copy_practice(tmp_path)
    problem = copy / "21_chained_block_hashes" / "problem.md"
    problem.write_text(problem.read_text().replace(">>> ", "    "))
    workspace.mkdir()
    (workspace / "21_chained_block_hashes.py").write_text(REFERENCE_21)
    proc = _run_copy(copy, "test", "21", workspace=workspace)
    assert "the worked examples" in proc.stdout and "this verdict is not recorded" in proc.stdout, proc.stdout[-800:]
    assert not (workspace / judge.STATUS_FILE).exists()


# ---------------------------------------------------------------------------------------------
# The forgery routes of issue 24: each fails, or `verify` reports it


def _run_copy(copy: Path, *args: str, workspace: Path) -> subprocess.CompletedProcess:
    """A judge.py of a copied practice/ (no git checkout around it)."""
    env = {**os.environ, "NANO_ENGINE_WORKSPACE": str(workspace), "NO_COLOR": "1"}
    return subprocess.run([sys.executable, str(copy / "judge.py"), *args], capture_output=True, text=True,
                          env=env, timeout=300)


FORGER_21 = WRONG_21 + textwrap.dedent("""\
    import json, os, time

    def _forge():
        status = os.environ["NANO_ENGINE_WORKSPACE"] + "/.judge_status.json"
        attempts = {
            "status file": lambda: open(status, "w").write(json.dumps({"21": {"status": "accepted"}})),
            "own memory": lambda: open("/proc/self/mem", "rb").read(1),
            "grandchild": lambda: os.fork(),
            "ctypes": lambda: __import__("ctypes").string_at(id(status), 8),
        }
        for name, attempt in attempts.items():
            try:
                attempt()
                print("ALLOWED", name)
            except PermissionError as exc:
                print("refused", name, exc)

    _forge()
    _block_hashes = block_hashes

    def block_hashes(token_ids, block_size):
        _forge()
        return _block_hashes(token_ids, block_size)
    """)


def test_the_judged_code_cannot_write_records_fork_or_read_its_own_memory(tmp_path, workspace):
    """Routes 1 and 3: an "accepted" entry written while the code runs (or by a detached grandchild
    after the judge exits), and the signing secret read from /proc/self/mem: all refused."""
    workspace.mkdir()
    mine = workspace / "21_chained_block_hashes.py"
    mine.write_text(FORGER_21)
    report = _judge_json("test", "21", workspace=workspace)
    assert report["verdict"] == "wrong answer" and "recorded" not in report
    printed = "".join(t.get("stdout", "") for t in report["tests"])
    assert "ALLOWED" not in printed
    for name in ("status file", "own memory", "grandchild", "ctypes"):
        assert f"refused {name}" in printed
    assert not (workspace / judge.STATUS_FILE).exists(), "nothing but the judge writes the records"


def test_verify_holds_for_honest_records_and_reports_forged_or_edited_ones(tmp_path, workspace):
    """Route 1 when the code does get to write the file (as the same user, outside the judge):
    `verify` re-judges every accepted record and reports the forged one; `list` marks edits stale."""
    copy = _copy_practice(tmp_path)
    assert _run_copy(copy, "start", "23", workspace=workspace).returncode == 0
    mine = workspace / "23_lookup_last_token.py"
    mine.write_text((PRACTICE / "23_lookup_last_token" / "solution.py").read_text())
    assert _run_copy(copy, "test", "23", workspace=workspace).returncode == 0
    verified = _run_copy(copy, "verify", workspace=workspace)
    assert verified.returncode == 0 and "holds" in verified.stdout and "BROKEN" not in verified.stdout

    status_file = workspace / judge.STATUS_FILE
    status = json.loads(status_file.read_text())
    _run_copy(copy, "start", "21", workspace=workspace)       # the starter, which is rejected
    status["21"] = {**status["23"]}                           # a forged "accepted" entry
    status_file.write_text(json.dumps(status))
    verified = _run_copy(copy, "verify", "--json", workspace=workspace)
    rows = {r["exercise"]: r for r in json.loads(verified.stdout)["records"]}
    assert verified.returncode == 1 and rows["23"]["holds"] and not rows["21"]["holds"]
    assert any("judged again now: runtime error" in p for p in rows["21"]["problems"])

    mine.write_text(mine.read_text() + "\n# edited after the verdict\n")
    listed = {r["number"]: r["status"] for r in json.loads(_run_copy(copy, "list", "--json", workspace=workspace).stdout)}
    assert listed["23"] == "accepted (stale: your file changed since)"
    verified = _run_copy(copy, "verify", "23", workspace=workspace)   # a comment added: stale, still accepted
    assert verified.returncode == 0 and "BROKEN" not in verified.stdout, verified.stdout
    assert re.search(r"^stale\s+23 ", verified.stdout, re.M) and "your file changed since it was recorded" in verified.stdout
    assert "still accepted now: run `python practice/judge.py test 23` to refresh the record" in verified.stdout
    mine.write_text(mine.read_text() + "\nlongest_cache_hit = None\n")
    verified = _run_copy(copy, "verify", "23", "--json", workspace=workspace)   # now the verdict changed: BROKEN
    [row] = json.loads(verified.stdout)["records"]
    assert verified.returncode == 1 and row["state"] == "broken" and not row["holds"], row
    assert "your file changed since it was recorded" in row["problems"]
    assert any(p.startswith("judged again now: runtime error") for p in row["problems"]), row["problems"]


def test_tests_rewritten_with_their_seal_are_caught_by_verify_from_a_fresh_copy(tmp_path, workspace):
    """Route 4: test.py and SHA256SUMS rewritten together make a sealed, recorded verdict; a fresh
    copy of practice/ (what a grader runs) reports the record."""
    forged = _copy_practice(tmp_path / "forged")
    (forged / "23_lookup_last_token" / "test.py").write_text(
        "from solution_under_test import longest_cache_hit\n\ndef test_example_nothing():\n    pass\n")
    problem = forged / "23_lookup_last_token" / "problem.md"
    problem.write_text(problem.read_text().replace(">>> ", "    "))   # the worked examples judge too
    assert _run_copy(forged, "seal", workspace=workspace).returncode == 0
    _run_copy(forged, "start", "23", workspace=workspace)     # the starter: NotImplementedError everywhere
    judged = _run_copy(forged, "test", "23", workspace=workspace)
    assert judged.returncode == 0, "the forged copy accepts and records it"
    fresh = _copy_practice(tmp_path / "fresh")
    verified = _run_copy(fresh, "verify", "--json", workspace=workspace)
    [row] = json.loads(verified.stdout)["records"]
    assert verified.returncode == 1 and not row["holds"]
    assert "recorded against another test.py than the shipped one" in row["problems"]
    assert "recorded against other worked examples than the shipped ones" in row["problems"]
    assert any(p.startswith("judged again now: runtime error") for p in row["problems"])


ROUTE_2_FORGER = (PRACTICE / "52_in_batch_prefix_dedup" / "solution.py").read_text().replace(
    "def lpm_order(", "def _honest_lpm_order(") + textwrap.dedent("""\
    def lpm_order(waiting, match_len, *, check_threshold=32, deprioritize_threshold=32, fcfs_threshold=128):
        g = match_len.__globals__
        if g.get("__name__") == "worked_example":   # problem.md's example: answered honestly (its match_len is
            return _honest_lpm_order(waiting, match_len, check_threshold=check_threshold,   # the example's own)
                                     deprioritize_threshold=deprioritize_threshold, fcfs_threshold=fcfs_threshold)
        g["@plain_equal"] = lambda got, expected: True
        g["raises_value_error"] = lambda call: True
        for name in list(g):
            if name.startswith("test_") and callable(g[name]):
                g[name] = lambda: None
        return [rid for rid, _ in waiting]
    """)


def test_a_test_function_handed_to_the_code_cannot_reach_the_tests_when_isolated(tmp_path, workspace):
    """Route 2 under the isolated runner: the tests run in the judge, the code in a child process
    behind proxy.py. A function of test.py handed to the code (exercise 52's match_len) is a stub
    there that asks the judge to call it: its globals are the child's, so emptying them forges nothing."""
    path = write(tmp_path / "lpm.py", ROUTE_2_FORGER)
    report = _judge_json("test", "52", "--isolated", "--file", str(path), workspace=workspace)
    assert report["verdict"] == "wrong answer" and report["failed"] >= 10
    assert report["judged"]["runner"] == "isolated"


def test_route_2_fools_the_in_child_runner_and_verify_reports_it(tmp_path, workspace):
    """Route 2 under the in-child runner `test` uses: the tests run in the code's process, so the
    forged file is accepted and recorded (this is the route; practice/JUDGE.md says so). `verify`
    re-judges with the isolated runner and reports the record."""
    copy = _copy_practice(tmp_path)
    assert _run_copy(copy, "start", "52", workspace=workspace).returncode == 0
    mine = workspace / "52_in_batch_prefix_dedup.py"
    write(mine, ROUTE_2_FORGER)
    judged = _run_copy(copy, "test", "52", "--json", workspace=workspace)
    report = json.loads(judged.stdout)
    assert report["verdict"] == "accepted" and report.get("recorded"), "the route this test is about"
    verified = _run_copy(copy, "verify", "--json", workspace=workspace)
    [row] = json.loads(verified.stdout)["records"]
    assert verified.returncode == 1 and not row["holds"] and row["verdict"] == "wrong answer"
    assert any(p.startswith("judged again now: wrong answer") for p in row["problems"])


def test_the_isolated_runner_keeps_the_tests_libraries_out_of_the_codes_reach(tmp_path, workspace):
    """Replacing random.Random.randint and builtins.sorted changes only the code's process: the
    tests' random inputs are made in the judge, and the wrong file fails exactly as without it."""
    path = write(tmp_path / "forge_random.py", WRONG_21 + textwrap.dedent("""\
        import builtins, random
        random.Random.randint = lambda self, a, b: a      # every random test would become trivial
        builtins.sorted = lambda *a, **k: []
        """))
    plain = write(tmp_path / "plain_wrong_21.py", WRONG_21)
    report = _judge_json("test", "21", "--isolated", "--file", str(path), workspace=workspace)
    baseline = _judge_json("test", "21", "--isolated", "--file", str(plain), workspace=workspace)
    assert report["verdict"] == "wrong answer"
    assert [t["verdict"] for t in report["tests"]] == [t["verdict"] for t in baseline["tests"]]


def test_bytes_written_to_the_judges_pipe_are_not_a_verdict_when_isolated(tmp_path, workspace):
    """The code writes answers in the proxy's framing to every open descriptor, then leaves: the
    judge reads only answers to its own requests, so nothing passes."""
    path = write(tmp_path / "forge_pipe.py", WRONG_21 + textwrap.dedent("""\
        import json, os
        answer = json.dumps(["R", True, [], None, []]).encode()
        text = (len(answer).to_bytes(4, "big") + answer) * 50
        for fd in range(1, 20):
            try:
                os.write(fd, text)
            except OSError:
                pass
        os._exit(0)
        """))
    report = _judge_json("test", "21", "--isolated", "--file", str(path), workspace=workspace)
    assert report["verdict"] != "accepted" and report["passed"] == 0


def test_what_crosses_the_pipe_is_plain_data():
    """The judge decodes an answer into plain values and mirrors only: a malformed or hostile
    answer stops the test (a runtime error), it never runs code in the judge."""
    link = judge.proxy.Link(-1, -1, 0, 1.0)
    for bad in (["r", 12345], ["Z", 1], {"__class__": "x"}, ["K"], ["T", "torch.float32", [-1], ""]):
        with pytest.raises((judge.proxy.ProtocolError, LookupError, TypeError, ValueError)):
            link._decode(bad)
    assert link._decode(["t", [1, ["l", ["a", None]], ["F", "nan"]]])[:2] == (1, ["a", None])
    # a class description with hostile names: only identifiers, never a dunder the judge would call
    link._apply([[1, "K", "Evil", ["__init_subclass__", "__del__", "ok"], ["__class__"], ["__reduce__", "__eq__"]]])
    cls = link.objects[1]
    assert "ok" in vars(cls) and "__del__" not in vars(cls) and "__reduce__" not in vars(cls)
    assert "__class__" not in vars(cls) and "__init_subclass__" not in vars(cls)
    # an object of the test handed to the code (exercise 72's rng): the code may call its public
    # methods through the judge, never reach a private one or a dunder such as __globals__
    import random
    rng = random.Random(0)
    assert link.encode(rng) == ["g", 0] and link.encode(slice(1, None)) == ["S", 1, None, None]
    for name in ("_randbelow", "__class__", "__reduce__", "seed()", 7):
        with pytest.raises(judge.proxy.ProtocolError):
            link._serve_callback(0, [], name)
    with pytest.raises(judge.proxy.JudgeStop):   # allowed: called, then the reply has no pipe to go to
        link._serve_callback(0, [], "random")
    # an edit of a container at positions it does not have, or of another kind of container
    link._apply([[2, "l", [1, 2]], [3, "d", ["a"], [1]]])
    for bad_edit in ([2, "L", 1, 5, []], [2, "L", 2, 1, []], [2, "D", [0], [], [], [], []], [3, "D", [7], [], [], [], []],
                     [3, "D", [], [0], [], [], []], [3, "L", 0, 1, []]):
        with pytest.raises((judge.proxy.ProtocolError, LookupError, TypeError, ValueError)):
            link._apply([bad_edit])
    assert list(link.objects[2]) == [1, 2] and dict(link.objects[3]) == {"a": 1}


_CHANGING_BOX = """\
    import random
    from collections import OrderedDict, deque


    class Box:
        def __init__(self, seed):
            self.rng = random.Random(seed)
            self.items, self.table, self.lru, self.q = [], {}, OrderedDict(), deque(maxlen=5)

        def step(self):
            r, k = self.rng.random(), self.rng.randint(0, 12)
            key = (k, (k % 3, "x"), None)
            if r < 0.15:
                self.items.append(k)
            elif r < 0.25 and self.items:
                del self.items[self.rng.randrange(len(self.items))]
            elif r < 0.3 and self.items:
                self.items.insert(self.rng.randrange(len(self.items)), (k, k))
            elif r < 0.35:
                self.items.reverse()
            elif r < 0.5:
                self.table[key] = k
            elif r < 0.6:
                self.table.pop(key, None)
            elif r < 0.7:
                self.lru[k] = self.rng.random()
            elif r < 0.75 and self.lru:
                self.lru.move_to_end(next(iter(self.lru)))
            elif r < 0.8 and self.lru:
                self.lru.move_to_end(next(reversed(self.lru)), last=False)
            elif r < 0.85 and self.lru:
                self.lru.popitem(last=self.rng.random() < 0.5)
            elif r < 0.95:
                self.q.append(k)
            else:
                self.table[k] = [k]          # a value that is a container: a full entry again
            return r
    """


def test_mirrors_stay_exact_when_changes_travel_as_edits(tmp_path):
    """A list or dict of plain data that changed in a few places travels as an edit of what was
    sent last (proxy.py, ``_Server.edit``): after every call the judge's mirrors hold what the
    child's objects hold -- appends, deletions, inserts, moves to either end, a value that
    becomes a container -- checked against the same class run here."""
    path = write(tmp_path / "box.py", _CHANGING_BOX)
    spec_ = importlib.util.spec_from_file_location("box_reference", path)
    reference = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(reference)
    (tmp_path / "home").mkdir()
    spec = {"solution": str(path), "starter": None, "preload": [], "timeout": 30.0, "memory_mb": None,
            "cpu_total": 120, "home": str(tmp_path / "home")}
    link, error = judge.proxy.start(spec, runner_module=judge.runner.__name__, wall_limit=60.0)
    edits = {"_edit_list": 0, "_edit_dict": 0}

    def counted(name):
        apply = getattr(link, name)

        def count(obj, entry):
            edits[name] += 1
            return apply(obj, entry)
        return count

    try:
        assert error is None
        for name in edits:
            setattr(link, name, counted(name))
        remote = judge.proxy.RemoteModule(link, judge.runner.SOLUTION_MODULE)
        link.begin_test(30.0, None)
        for seed in range(4):
            box, model = remote.Box(seed), reference.Box(seed)
            for _ in range(150):
                assert box.step() == model.step()
                assert list(box.items) == model.items and list(box.table.items()) == list(model.table.items())
                assert list(box.lru.items()) == list(model.lru.items()) and list(box.q) == list(model.q)
            box.items.append("from the test")   # a change made through a mirror: applied in the child first
            model.items.append("from the test")
            assert list(box.items) == model.items
    finally:
        judge.proxy.close(link)
    assert edits["_edit_list"] > 50 and edits["_edit_dict"] > 50


# ---------------------------------------------------------------------------------------------
# Verdicts under load (issue 21): time limits are CPU time


@pytest.fixture
def two_busy_loops():
    """Two processes spinning on the CPU for the length of a test (both cores of the CI machine)."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield loops
    finally:
        for proc in loops:
            proc.kill()
            proc.wait(timeout=30)


def test_verdicts_hold_while_two_busy_loops_occupy_the_cores(two_busy_loops, workspace):
    """A correct solution is still accepted and every mutant of a small exercise still killed (or
    declared equivalent) when the machine is busy: the limits are CPU time, not wall-clock time."""
    report = _judge_json("solution", "23", workspace=workspace)
    assert report["verdict"] == "accepted", report["summary"]
    result = judge.mutation.mutate_exercise(judge.get_exercise("23"), runner, judge.judge_file)
    assert result["generated"] >= 20 and result["survivors"] == [] and result["stale_declarations"] == []
    assert all(m["killed"] for m in result["mutants"]), [m["id"] for m in result["mutants"] if not m["killed"]]


def test_test_files_are_parsed_once_and_never_concurrently():
    """python/cpython#106905: ast.parse from several threads can fail; the runner parses each text
    once, under a lock, and check_exercise's thread pool goes through it."""
    import concurrent.futures
    sources = [f"def test_{i}():\n    assert {i} == {i}\n" * 1 for i in range(40)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        trees = list(pool.map(runner.parse_source, sources * 3))
    assert [t.body[0].name for t in trees] == [f"test_{i}" for i in range(40)] * 3
    assert runner.parse_source(sources[0]) is runner.parse_source(sources[0]), "parsed once"


# ---------------------------------------------------------------------------------------------
# Ergonomics


@BOTH_RUNNERS
def test_a_solution_over_two_files(tmp_path, workspace, runner_args):
    write(tmp_path / "chain_helpers.py", """\
        import hashlib, pickle

        def sha256(obj):
            return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()

        def chain(parent, block):
            return sha256((parent or sha256("vllm-none-hash"), tuple(block), None))
        """)
    path = write(tmp_path / "mine.py", """\
        from chain_helpers import chain

        def block_hashes(token_ids, block_size, known=()):
            hashes, parent = [], known[-1] if known else None
            for start in range(len(known) * block_size, len(token_ids) - block_size + 1, block_size):
                parent = chain(parent, token_ids[start:start + block_size])
                hashes.append(parent)
            return hashes
        """)
    report = _judge_json("test", "21", *runner_args, "--file", str(path), workspace=workspace, cwd=ROOT)
    assert report["verdict"] == "accepted", report


@BOTH_RUNNERS
def test_printing_megabytes_is_bounded(tmp_path, workspace, runner_args):
    path = write(tmp_path / "chatty.py", REFERENCE_21.replace(
        "    hashes, parent = [], None\n", "    hashes, parent = [], None\n    print('x' * 20_000_000)\n"))
    report = _judge_json("test", "21", *runner_args, "--run", "--file", str(path), workspace=workspace)
    assert report["verdict"] == "accepted"
    printed = report["tests"][0]
    assert len(printed["stdout"]) == runner.STDOUT_LIMIT, "the first characters are kept"
    total = printed["stdout_cut"]["characters"] + runner.STDOUT_LIMIT   # each call printed 20,000,001 characters
    assert total % 20_000_001 == 0 and total // 20_000_001 >= 4, printed["stdout_cut"]
    assert printed["stdout_cut"]["lines"] == total // 20_000_001, "the line breaks not kept are counted"


@BOTH_RUNNERS
def test_a_leftover_breakpoint_neither_hangs_nor_fails(tmp_path, workspace, runner_args):
    path = write(tmp_path / "debugging.py", "breakpoint()\n" + REFERENCE_21.replace(
        "    hashes, parent = [], None\n", "    hashes, parent = [], None\n    breakpoint()\n"))
    report = _judge_json("test", "21", *runner_args, "--timeout", "5", "--file", str(path), workspace=workspace)
    assert report["verdict"] == "accepted"
    assert "breakpoint() ignored" in report["tests"][0]["stdout"]


def test_an_exercise_number_without_a_command_suggests_test(workspace):
    proc = run("101", workspace=workspace)
    assert proc.returncode == 2
    assert "python practice/judge.py test 101" in proc.stderr


@pytest.mark.parametrize("value", ["0", "-1", "nan", "soon"])
def test_a_timeout_that_is_not_positive_is_an_error(value, workspace):
    proc = run("solution", "21", "--timeout", value, workspace=workspace)
    assert proc.returncode == 2
    assert "--timeout" in proc.stderr


def test_the_tests_libraries_are_imported_once_before_the_clock():
    """Exercise 01's tests import torch: the child imports it before the first test's time
    limit starts, and a forked mutant inherits it."""
    assert "torch" in runner._test_imports(judge.get_exercise("01").tests.read_text())


# ---------------------------------------------------------------------------------------------
# Mutation testing


def test_mutants_cover_the_classic_mistakes():
    source = textwrap.dedent("""\
        def f(xs, limit, key=None):
            total = 0
            for i in range(len(xs) - 1):
                if key is None and xs[i] < limit:
                    total += xs[i:i + 2][0]
            return max(total, 0)
        """)
    ids = [m.id for m in judge.mutation.generate_mutants(source)]
    kinds = {m.kind for m in judge.mutation.generate_mutants(source)}
    assert {"operator", "comparison", "is None -> falsy", "constant", "off by one", "swapped arguments",
            "deleted statement", "iteration order", "dropped condition", "function"} <= kinds
    assert "f: 'if key is None and xs[i] < limit:': 'xs[i] < limit' -> 'xs[i] <= limit'" in ids
    assert "f: 'if key is None and xs[i] < limit:': 'key is None' -> 'not key'" in ids
    assert "f: 'total += xs[i:i + 2][0]' -> 'pass'" in ids
    assert len(ids) == len(set(ids)), "ids are unique"


def test_only_the_readers_functions_are_mutated():
    solution = "def given(x):\n    return x + 1\n\ndef yours(x):\n    return x - 1\n"
    starter = "def given(x):\n    return x + 1\n\ndef yours(x):\n    raise NotImplementedError\n"
    mutants = judge.mutation.generate_mutants(solution, starter)
    assert mutants and all(m.id.startswith("yours:") for m in mutants)


def test_weak_tests_leave_survivors_and_stale_declarations_are_reported(tmp_path):
    import shutil
    folder = tmp_path / "21_chained_block_hashes"
    shutil.copytree(PRACTICE / "21_chained_block_hashes", folder)
    (folder / "test.py").write_text(textwrap.dedent("""\
        from solution_under_test import block_hashes

        def test_example_length():
            assert len(block_hashes([1, 2, 3, 4], 2)) == 2
        """))
    (folder / "equivalent_mutants.py").write_text('EQUIVALENT = {"block_hashes: no such mutant": "stale"}\n')
    ex = judge.get_exercise("21", root=tmp_path)
    result = judge.mutation.mutate_exercise(ex, runner, judge.judge_file)
    assert result["survivors"], "a test that only counts blocks misses most mutants"
    assert "block_hashes: 'hashes.append(parent)' -> 'pass'" not in result["survivors"], "an empty list is caught"
    assert result["stale_declarations"] == ["block_hashes: no such mutant"]
    assert result["killed"] + len(result["survivors"]) == result["generated"]


# ---------------------------------------------------------------------------------------------
# Hostile answers, files and flags (issue 38): the judge ends with a verdict or a one-line error,
# never a traceback or a hang, and its memory stays within what the learner's code may use.

FORGE = """\
import json as _json, os as _os


def _forge(*messages, raw=b""):
    \"\"\"Write answers in the proxy's framing to every descriptor: one of them is the judge's pipe.\"\"\"
    data = b"".join(len(m).to_bytes(4, "big") + m for m in (_json.dumps(x).encode() for x in messages)) + raw
    for fd in range(3, 30):
        try:
            _os.write(fd, data)
        except OSError:
            pass
"""


def _no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]


HOSTILE_BEGIN_ANSWERS = {
    "error answer": ["E", "ValueError", ["ValueError", "Exception", "BaseException"], "no", None, [], None],
    "interrupt-derived": ["E", "Stop", ["KeyboardInterrupt", "BaseException"], "bye", None, [], None],
    "load-error answer": ["L"],
}


@pytest.mark.parametrize("answer", list(HOSTILE_BEGIN_ANSWERS), ids=lambda a: a.replace(" ", "-"))
def test_a_hostile_answer_to_the_start_of_a_test_is_a_verdict(tmp_path, workspace, answer):
    """The code patches its own process's server so that the request starting the first test is
    answered with an error, a KeyboardInterrupt-derived exception or a load error: the test ends
    as a runtime error, the judge does not crash."""
    path = write(tmp_path / "hostile_begin.py", REFERENCE_21 + textwrap.dedent(f"""\
        import sys
        _proxy = sys.modules["practice_proxy"]
        _real_answer, _begins = _proxy._Server.answer, [0]

        def _answer(self, op, message):
            if op == "begin":
                _begins[0] += 1
                if _begins[0] == 2:          # the first test's (the first is test.py's loading)
                    return self.send({HOSTILE_BEGIN_ANSWERS[answer]!r})
            return _real_answer(self, op, message)

        _proxy._Server.answer = _answer
        """))
    proc = run("test", "21", "--isolated", "--json", "--file", str(path), workspace=workspace)
    _no_traceback(proc)
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and report["verdict"] == "runtime error", report["verdict"]
    bad = [t for t in report["tests"] if t["verdict"] == "runtime error"]
    assert bad and ("start of a test" in bad[0]["message"] or "malformed" in bad[0]["message"]), bad[:1]


def test_a_malformed_first_answer_is_a_verdict(tmp_path, workspace):
    """['L'] (a load error without its description) written before the child's own first answer."""
    path = write(tmp_path / "hostile_first.py", FORGE + "\n_forge(['L'])\n" + REFERENCE_21)
    proc = run("test", "21", "--isolated", "--json", "--file", str(path), workspace=workspace)
    _no_traceback(proc)
    assert proc.returncode == 1 and json.loads(proc.stdout)["verdict"] == "runtime error"


@BOTH_RUNNERS
def test_exit_inside_the_learners_repr_is_a_verdict(tmp_path, workspace, runner_args):
    """A wrong tree whose __repr__ calls exit(): describing the failure (the test's locals hold the
    tree) must not end the judge, nor turn a wrong answer into a crash."""
    wrong = mistake_file("32", "no_parent_push", tmp_path)
    wrong.write_text(wrong.read_text() + "\n\ndef _bye(self):\n    exit()\n\n\nRadixCache.__repr__ = _bye\n")
    proc = run("test", "32", *runner_args, "--json", "--file", str(wrong), workspace=workspace)
    _no_traceback(proc)
    report = json.loads(proc.stdout)
    assert report["verdict"] == "wrong answer", report["summary"]
    shown = [v for t in report["tests"] for v in ((t.get("failure") or {}).get("test") or {}).get("locals", {}).values()]
    assert any("repr failed: SystemExit" in v for v in shown), shown


def _judge_short_wall(path: Path, number: str, tmp_path: Path, timeout: float = 0.2) -> tuple[dict, float]:
    """judge_file(..., isolated=True) in a fresh process with the wall-clock backstop shortened
    (factor 1, grace 2 s): (the report, seconds to it). A hang fails the test instead of blocking it."""
    import time
    script = textwrap.dedent(f"""\
        import importlib.util, json, sys
        spec = importlib.util.spec_from_file_location("practice_judge", {str(JUDGE)!r})
        judge = importlib.util.module_from_spec(spec)
        sys.modules["practice_judge"] = judge
        spec.loader.exec_module(judge)
        judge.WALL_FACTOR, judge.WALL_GRACE = 1, 2.0
        report = judge.judge_file(judge.get_exercise({number!r}), {str(path)!r}, timeout={timeout}, isolated=True)
        print(json.dumps(report))
        """)
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=str(tmp_path), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        pytest.fail("the judge hung (no verdict within 90 s)")
    assert "Traceback" not in out + err, err[-3000:]
    return json.loads(out), time.monotonic() - start


def test_a_child_that_stops_reading_a_callbacks_reply_is_a_timeout(tmp_path):
    """The code asks for a test object's method whose reply is 4 MB (random.Random.randbytes), then
    sleeps instead of reading it: the judge's write would block forever; the wall-clock backstop
    covers writes as well as reads."""
    reference = (PRACTICE / "72_dynamo_cost_temperature" / "solution.py").read_text()
    path = write(tmp_path / "stops_reading.py", reference + FORGE + textwrap.dedent("""\
        import time

        def select_worker(workers, isl_tokens, block_size, *, overlap_weight=1.0, temperature=0.0, rng=None):
            try:
                rng.getrandbits(1)           # a real random.Random of the test's (not a scripted Draw)
            except Exception:
                return 0
            _forge(["C", object.__getattribute__(rng, "_index"), [3_000_000], [], None, "randbytes"])
            time.sleep(3600)
        """))
    report, seconds = _judge_short_wall(path, "72", tmp_path)
    stuck = [t for t in report["tests"] if t["verdict"] == "timeout"]
    assert stuck and "wall-clock" in stuck[0]["message"], [(t["name"], t["verdict"], t["message"]) for t in report["tests"]]
    assert seconds < 60


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_verify_and_list_on_a_named_pipe_or_a_directory(tmp_path, workspace, kind):
    """The recorded file replaced by a named pipe (reading it would wait for a writer forever) or a
    directory: `verify` reports the record, `list` shows the exercise, neither hangs nor crashes."""
    run("start", "23", workspace=workspace)
    mine = workspace / "23_lookup_last_token.py"
    mine.write_text((PRACTICE / "23_lookup_last_token" / "solution.py").read_text())
    assert run("test", "23", workspace=workspace).returncode == 0
    mine.unlink()
    os.mkfifo(mine) if kind == "fifo" else mine.mkdir()
    verified = run("verify", "--json", workspace=workspace, timeout=60)
    _no_traceback(verified)
    [row] = json.loads(verified.stdout)["records"]
    assert verified.returncode == 1 and not row["holds"] and any("not a regular file" in p for p in row["problems"])
    listed = run("list", "--json", workspace=workspace, timeout=60)
    _no_traceback(listed)
    assert {r["number"]: r["status"] for r in json.loads(listed.stdout)}["23"].startswith("accepted (stale")
    judged = run("test", "23", workspace=workspace, timeout=60)
    _no_traceback(judged)
    assert judged.returncode == 2 and "not a regular file" in judged.stderr


def _peak_rss_mb(*args: str, workspace: Path) -> tuple[subprocess.CompletedProcess, float]:
    """Run judge.py in a helper process; return it and the largest resident size of that judge and
    every process it waited for (the learner's child, limited by --memory, included), in MB."""
    script = textwrap.dedent(f"""\
        import json, os, resource, subprocess, sys
        proc = subprocess.run([sys.executable, {str(JUDGE)!r}, *{list(args)!r}], capture_output=True, text=True,
                              env={{**os.environ, "NANO_ENGINE_WORKSPACE": {str(workspace)!r}}}, timeout=600)
        print(json.dumps([proc.returncode, proc.stdout, proc.stderr,
                          resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024]))
        """)
    code, out, err, peak = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                                     timeout=700).stdout)
    return subprocess.CompletedProcess(args, code, out, err), peak


def test_a_huge_frame_of_empty_lists_is_refused_within_the_learners_memory(tmp_path, workspace):
    """A 24 MiB answer of `[[], [], ...]` costs the JSON decoder ~700 MB (64 bytes per empty list):
    the judge refuses a frame whose decoding would need more than the code's own memory limit
    (here --memory 256), so its peak stays near an honest run's."""
    path = write(tmp_path / "frame.py", FORGE + textwrap.dedent("""\
        def block_hashes(token_ids, block_size):
            body = b'["R",["l",[' + b"[]," * (8 * 2**20) + b'[]]],[],null,[]]'
            _forge(raw=len(body).to_bytes(4, "big") + body)
            return []
        """))
    proc, peak = _peak_rss_mb("test", "21", "--isolated", "--memory", "256", "--run", "--json", "--file", str(path),
                              workspace=workspace)
    _no_traceback(proc)
    report = json.loads(proc.stdout)
    assert report["verdict"] == "runtime error", report["summary"]
    assert "your code sent the judge" in report["tests"][0]["message"], report["tests"][0]
    assert peak < 256, f"the judge peaked at {peak:.0f} MB"


BAD_STATUS = {"list": "[]", "null": "null", "string": '"accepted"', "number": "21", "deep": "[" * 100_000 + "]" * 100_000,
              "deep record": '{"21": ' + "[" * 100_000 + "]" * 100_000 + "}", "not json": "{'21': 1"}


@pytest.mark.parametrize("content", list(BAD_STATUS), ids=lambda c: c.replace(" ", "-"))
def test_a_status_file_that_is_not_a_record_is_a_one_line_error(workspace, content):
    workspace.mkdir()
    (workspace / judge.STATUS_FILE).write_text(BAD_STATUS[content])
    listed = run("list", workspace=workspace)
    _no_traceback(listed)
    assert listed.returncode == 0 and "not started" in listed.stdout
    verified = run("verify", workspace=workspace)
    _no_traceback(verified)
    assert verified.returncode == 2 and judge.STATUS_FILE in verified.stderr
    assert len(verified.stderr.strip().splitlines()) == 1, verified.stderr


@pytest.mark.parametrize("args", [("--timeout", "1e9"), ("--isolated", "--timeout", "1e20"), ("--memory", "0"),
                                  ("--memory", "-5"), ("--memory", str(2**40))], ids=" ".join)
def test_absurd_limits_are_refused_in_one_line(tmp_path, workspace, args):
    """A time or memory limit no run can use is refused (exit 2, one line naming the option), and
    nothing is left in the temporary folder."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "NANO_ENGINE_WORKSPACE": str(workspace), "NO_COLOR": "1", "TMPDIR": str(scratch)}
    proc = subprocess.run([sys.executable, str(JUDGE), "solution", "21", *args], capture_output=True, text=True,
                          env=env, timeout=120)
    _no_traceback(proc)
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert args[-2] in proc.stderr.strip().splitlines()[-1], proc.stderr   # argparse: its usage, then one line
    assert list(scratch.iterdir()) == [], "the judge left its temporary folders behind"


def test_what_the_judge_mirrors_is_bounded_too(tmp_path, workspace):
    """Forty 1 MiB messages, each a new mirrored list of 120,000 empty lists (~8 MB each in the
    judge): what a run sends in all is bounded by the code's memory limit (here --memory 256), so
    the judge stops the run before it keeps hundreds of MB."""
    reference = (PRACTICE / "72_dynamo_cost_temperature" / "solution.py").read_text()
    path = write(tmp_path / "many_mirrors.py", reference + FORGE + textwrap.dedent("""\
        _reference = select_worker

        def select_worker(workers, isl_tokens, block_size, *, overlap_weight=1.0, temperature=0.0, rng=None):
            if rng is not None:
                index = object.__getattribute__(rng, "_index")
                for i in range(40):
                    _forge(["C", index, [], [[10_000_000 + i, "l", [["l", []]] * 120_000]], None, "random"])
            return _reference(workers, isl_tokens, block_size, overlap_weight=overlap_weight,
                              temperature=temperature, rng=rng)
        """))
    proc, peak = _peak_rss_mb("test", "72", "--isolated", "--memory", "256", "--run", "--json", "--file", str(path),
                              workspace=workspace)
    _no_traceback(proc)
    report = json.loads(proc.stdout)
    assert report["verdict"] == "runtime error", report["summary"]
    assert any("too much to mirror" in t["message"] for t in report["tests"]), [t["message"] for t in report["tests"]]
    assert peak < 256, f"the judge peaked at {peak:.0f} MB"


# ---------------------------------------------------------------------------------------------
# An answer cannot be borrowed (issue 35.1): a file that imports nano_engine, or whose asked-for
# names are not its own, is refused by `test` (both runners) and by `verify`

BORROWED = {
    "from-import": ("31", "from nano_engine.radix import RadixCache, Node\n"),
    "subclass": ("32", "import nano_engine.radix\n\n\nclass Node(nano_engine.radix.Node):\n    pass\n\n\n"
                       "class RadixCache(nano_engine.radix.RadixCache):\n    pass\n"),
    "lazy-import": ("21", "def block_hashes(token_ids, block_size):\n"
                          "    from nano_engine.hashing import block_hashes as theirs\n"
                          "    return theirs(token_ids, block_size)\n"),
    "import_module": ("21", "import importlib\n\n\ndef block_hashes(token_ids, block_size):\n"
                            "    return importlib.import_module('nano_engine.hashing').block_hashes(token_ids, block_size)\n"),
    "__import__": ("21", "def block_hashes(token_ids, block_size):\n"
                         "    return __import__('nano_engine.hashing', fromlist=['x']).block_hashes(token_ids, block_size)\n"),
    "computed-name": ("21", "import importlib\n\n\ndef block_hashes(token_ids, block_size):\n"
                            "    name = 'nano_' + 'engine.hashing'\n"
                            "    return importlib.import_module(name).block_hashes(token_ids, block_size)\n"),
}


@BOTH_RUNNERS
@pytest.mark.parametrize("form", list(BORROWED))
def test_an_answer_that_uses_the_package_is_refused(tmp_path, workspace, runner_args, form):
    number, source = BORROWED[form]
    path = write(tmp_path / f"borrowed_{number}.py", source)
    proc = run("test", number, *runner_args, "--file", str(path), workspace=workspace)
    _no_traceback(proc)
    text = " ".join(proc.stdout.split())   # the paragraph is wrapped for the terminal
    assert proc.returncode == 1 and "verdict: refused" in text, proc.stdout[-2000:]
    assert "proves nothing and the judge does not run it" in text
    why = "reads nano_engine's files while it runs" if form == "computed-name" else "your file imports nano_engine"
    assert why in text, proc.stdout[-2000:]


@BOTH_RUNNERS
def test_a_name_the_exercise_asks_for_must_be_defined_in_the_file(tmp_path, workspace, runner_args):
    """`from helper import block_hashes` (a file of the learner's own, beside it): the asked-for
    name comes from another module. A helper the file uses is fine (test_a_solution_over_two_files)."""
    write(tmp_path / "helper_21.py", REFERENCE_21)
    path = write(tmp_path / "reexport.py", "from helper_21 import block_hashes\n")
    report = _judge_json("test", "21", *runner_args, "--file", str(path), workspace=workspace)
    assert report["verdict"] == "refused", report["summary"]
    assert "`block_hashes` is defined in" in report["load_error"]["message"]
    assert "helper_21.py, not in your file" in report["load_error"]["message"]


@BOTH_RUNNERS
def test_a_namedtuple_of_the_files_own_is_its_own(tmp_path, workspace, runner_args):
    """collections.namedtuple makes a class whose module the standard library sets: still the file's."""
    reference = (PRACTICE / "62_load_back_decision" / "solution.py").read_text()
    assert "class LoadPlan(NamedTuple):" in reference
    path = write(tmp_path / "namedtuple_62.py", reference.replace(
        "class LoadPlan(NamedTuple):", "import collections\nLoadPlan = collections.namedtuple("
        "'LoadPlan', 'prefix_tokens load_tokens evict')\n\n\nclass _Unused(NamedTuple):"))
    report = _judge_json("test", "62", *runner_args, "--file", str(path), workspace=workspace)
    assert report["verdict"] == "accepted", (report["summary"], report.get("load_error"))


def test_verify_refuses_a_recorded_answer_that_uses_the_package(tmp_path, workspace):
    """A record of an acceptance (made before this check existed, or forged) whose file borrows
    the answer: `verify` re-judges it and reports it BROKEN, refused."""
    run("start", "23", workspace=workspace)
    mine = workspace / "23_lookup_last_token.py"
    mine.write_text((PRACTICE / "23_lookup_last_token" / "solution.py").read_text())
    assert run("test", "23", workspace=workspace).returncode == 0
    mine.write_text(mine.read_text() + "\nimport nano_engine.prefix_cache\n")
    verified = run("verify", "--json", workspace=workspace)
    [row] = json.loads(verified.stdout)["records"]
    assert verified.returncode == 1 and row["state"] == "broken" and row["verdict"] == "refused", row


# ---------------------------------------------------------------------------------------------
# The statement's worked examples are a test (issue 39.2), and judge messages say what a learner
# needs (issue 35.4)

REFERENCE_51 = (PRACTICE / "51_lpm_scheduling" / "solution.py").read_text()
PER_OVERTAKER_51 = REFERENCE_51.replace('''        latest = max((r["arrival"] for r in chosen), default=-1)
        chosen_ids = {r["rid"] for r in chosen}
        self._queue = [r for r in self._queue if r["rid"] not in chosen_ids]
        for r in self._queue:
            if r["arrival"] < latest:            # someone who came later went first
                r["passed_over"] += 1''', '''        chosen_ids = {r["rid"] for r in chosen}
        self._queue = [r for r in self._queue if r["rid"] not in chosen_ids]
        for r in self._queue:                    # once per request that overtook it, not once per round
            r["passed_over"] += sum(1 for c in chosen if c["arrival"] > r["arrival"])''')


@BOTH_RUNNERS
def test_a_file_that_fails_the_statements_own_example_is_never_accepted(tmp_path, workspace, runner_args):
    """The learner review's exercise-51 file counts "passed over" once per overtaking request, not
    once per round: test.py's tests accepted it; the worked example of problem.md does not."""
    assert PER_OVERTAKER_51 != REFERENCE_51
    path = write(tmp_path / "per_overtaker.py", PER_OVERTAKER_51)
    for mode in (("--run",), ()):
        proc = run("test", "51", *runner_args, *mode, "--file", str(path), workspace=workspace)
        assert proc.returncode == 1 and "verdict: wrong answer" in proc.stdout, proc.stdout[-1500:]
        assert re.search(r"wrong answer\s+test_example_worked_example", proc.stdout)
        assert re.search(r"problem\.md line \d+:  >>> sched\.schedule\(1\)", proc.stdout), proc.stdout[-1500:]
        assert re.search(r"expected: \['d'\]\n\s+got:\s+\['a'\]", proc.stdout), proc.stdout[-1500:]


@BOTH_RUNNERS
def test_the_learners_printing_is_not_part_of_a_worked_example(tmp_path, workspace, runner_args):
    """A correct solution with debug prints still passes the worked example: what the learner's code
    prints is the test's output, compared with nothing (only the example's own values and prints)."""
    path = write(tmp_path / "chatty_71.py", (PRACTICE / "71_gap_detecting_subscriber" / "solution.py").read_text()
                 .replace("    def receive(self, seq", "    def receive(self, seq", 1) + textwrap.dedent("""\

        _receive = GapAwareSubscriber.receive


        def _chatty(self, *args, **kwargs):
            print("DEBUG receive", args)
            return _receive(self, *args, **kwargs)


        GapAwareSubscriber.receive = _chatty
        """))
    report = _judge_json("test", "71", *runner_args, "--run", "--file", str(path), workspace=workspace)
    first = report["tests"][0]
    assert first["name"] == "test_example_worked_example" and first["verdict"] == "accepted", first
    assert "DEBUG receive" in first["stdout"], "the printing is kept as the test's output"


@BOTH_RUNNERS
def test_an_expected_exception_matches_by_its_class(tmp_path, workspace, runner_args):
    """Exercise 11's example expects the reference's ValueError message; the statement says yours
    only has to be a ValueError: another message, or a subclass, passes; another class does not."""
    reference = (PRACTICE / "11_block_pool_refcounts" / "solution.py").read_text()
    old = 'raise ValueError(f"cannot {action} block {b} {times} time(s): it holds {self.ref_cnt[b]} reference(s)")'
    assert old in reference
    for new, verdict in [('raise ValueError("freed too often")', "accepted"),
                         ('raise PoolError("freed too often")', "accepted"),
                         ('raise KeyError(b)', "wrong answer")]:
        path = write(tmp_path / "pool.py", reference.replace(old, new) + "\n\nclass PoolError(ValueError):\n    pass\n")
        report = _judge_json("test", "11", *runner_args, "--run", "--file", str(path), workspace=workspace)
        first = report["tests"][0]
        assert (first["name"], first["verdict"]) == ("test_example_worked_example", verdict), (new, first)
    assert "KeyError" in first["failure"]["got"] and first["failure"]["expected"].startswith("ValueError")


@BOTH_RUNNERS
def test_printed_output_is_shown_from_its_first_line_with_what_was_cut(tmp_path, workspace, runner_args):
    """The first print usually holds the inputs: it is shown, and the rest is counted."""
    path = write(tmp_path / "debug.py", textwrap.dedent("""\
        def block_hashes(token_ids, block_size):
            print("START-OF-CALL", token_ids)
            for i in range(60):
                print("line", i)
            return []
        """))
    proc = run("test", "21", *runner_args, "--file", str(path), workspace=workspace)
    block = proc.stdout.split("test_parent_is_in_the_hash", 1)[1]
    assert re.search(r"printed:\n\s+START-OF-CALL \[1, 2, 3, 4\]\n\s+line 0\n", block), block[:800]
    hidden = 2 * 61 - 10   # two calls, 61 lines each, 10 shown
    assert re.search(rf"… {hidden} more lines, [\d,]+ characters", block), block[:1200]


@BOTH_RUNNERS
def test_a_timeout_after_heavy_output_says_how_much_was_printed(tmp_path, workspace, runner_args):
    path = write(tmp_path / "printer.py", textwrap.dedent("""\
        def block_hashes(token_ids, block_size):
            while True:
                print("hashing", token_ids, "in blocks of", block_size)
        """))
    report = _judge_json("test", "21", *runner_args, "--run", "--timeout", "0.5", "--file", str(path), workspace=workspace)
    stuck = report["tests"][0]
    assert stuck["verdict"] == "timeout", stuck
    match = re.search(r"it printed ([\d,]+) characters \(([\d,]+) lines\) first, and printing that much is slow",
                      stuck["message"])
    assert match and int(match[1].replace(",", "")) >= 100_000, stuck["message"]
    assert stuck["stdout"].startswith("hashing [1, 2, 3, 4, 5] in blocks of 2\n"), stuck.get("stdout", "")[:200]


@BOTH_RUNNERS
def test_a_list_where_a_tuple_was_expected_is_named(tmp_path, workspace, runner_args):
    reference = (PRACTICE / "23_lookup_last_token" / "solution.py").read_text()
    path = write(tmp_path / "as_list.py", reference.replace("return hit, len(hit) * block_size",
                                                            "return [hit, len(hit) * block_size]"))
    report = _judge_json("test", "23", *runner_args, "--file", str(path), workspace=workspace)
    notes = [(t.get("failure") or {}).get("difference") or "" for t in report["tests"] if t["verdict"] == "wrong answer"]
    assert "types differ: expected a tuple, got a list (the same items)" in notes, notes


def test_an_accepted_run_says_whether_it_was_recorded(tmp_path, workspace):
    run("start", "23", workspace=workspace)
    mine = workspace / "23_lookup_last_token.py"
    mine.write_text((PRACTICE / "23_lookup_last_token" / "solution.py").read_text())
    other = write(tmp_path / "elsewhere.py", mine.read_text())
    proc = run("test", "23", "--file", str(other), workspace=workspace)
    assert proc.returncode == 0 and "not recorded: only your workspace file" in proc.stdout, proc.stdout[-600:]
    assert "--file judges any file without recording it" in proc.stdout
    proc = run("test", "23", "--run", workspace=workspace)
    assert "not recorded: the examples alone are not an acceptance" in proc.stdout
    assert not (workspace / judge.STATUS_FILE).exists()
    proc = run("test", "23", workspace=workspace)
    assert re.search(r"recorded as accepted in \S*\.judge_status\.json", proc.stdout), proc.stdout[-600:]


CRASHES = {"segfault": ("import faulthandler\n\n\ndef block_hashes(token_ids, block_size):\n    faulthandler._sigsegv()\n",
                        "it crashed (SIGSEGV) in native code"),
           "memory": ("def block_hashes(token_ids, block_size):\n    return [0] * 10**9\n",
                      "MemoryError: over the memory limit of your code (256 MiB)")}


@BOTH_RUNNERS
@pytest.mark.parametrize("cause", list(CRASHES))
def test_the_runner_says_which_limit_ended_a_run(tmp_path, workspace, runner_args, cause):
    source, said = CRASHES[cause]
    path = write(tmp_path / f"{cause}.py", source)
    report = _judge_json("test", "21", *runner_args, "--run", "--memory", "256", "--file", str(path), workspace=workspace)
    assert said in report["tests"][0]["message"], report["tests"][0]["message"]


def test_the_ways_a_process_ends_are_named():
    import signal
    assert "CPU time of the whole run (600 s)" in runner.describe_exit(-signal.SIGXCPU, 2048, 600)
    assert "crashed (SIGBUS)" in runner.describe_exit(-signal.SIGBUS)
    assert "memory limit of your code (2048 MiB)" in runner.describe_exit(runner.EXIT_OUT_OF_MEMORY, 2048)
    assert "out-of-memory killer" in runner.describe_exit(-signal.SIGKILL)
    assert "exited with code 7" in runner.describe_exit(7)


def test_the_worked_examples_are_parsed_as_doctest_parses_them():
    """runner.worked_example_cases parses the fences without importing doctest (20 ms of every
    `judge.py test`): on every problem.md, and on the shapes doctest knows, it gives doctest's examples."""
    import doctest
    sample = textwrap.dedent("""\
        ## Worked example

        ```python
        >>> x = [1,
        ...      2]
        >>> x
        [1, 2]
        >>> # a comment is not an example
        >>> def f():
        ...     raise ValueError("no")
        >>> f()
        Traceback (most recent call last):
          File "<stdin>", line 1, in <module>
        ValueError: no
        >>> print("a")
        a
        <BLANKLINE>

        ```
        """)
    for text in [sample] + [ex.problem.read_text() for ex in judge.find_exercises()]:
        ours = runner.worked_example_cases(text)
        fences = re.findall(r"```python\n(.*?)```", text.split("## Worked example", 1)[-1], re.S)
        theirs = [e for fence in fences for e in doctest.DocTestParser().get_examples(fence)]
        assert [(c["source"], c["want"], c["exc_msg"]) for c in ours] == [(e.source, e.want, e.exc_msg) for e in theirs]
    assert [c["lineno"] for c in runner.worked_example_cases(sample)] == [4, 6, 9, 11, 15]


def test_the_learners_page_is_short_and_the_judges_page_exists():
    """practice/README.md is the learner's page (issue 35.5): under 100 lines, the commands a learner
    runs and the verdicts; how the judge protects itself is on its own page, linked from it."""
    readme = (PRACTICE / "README.md").read_text()
    assert len(readme.splitlines()) < 100
    for needed in ("judge.py start 21", "judge.py test 21 --run", "judge.py test 21", "judge.py list",
                   "judge.py verify", "| refused |", "| timeout |", "[JUDGE.md](JUDGE.md)"):
        assert needed in readme, needed
    judge_page = (PRACTICE / "JUDGE.md").read_text()
    for needed in ("## Two runners", "### Mutation testing", "## The worked examples are a test", "## Cost"):
        assert needed in judge_page, needed
    assert "COST_TABLE" not in judge_page, "the cost table is filled in from benchmarks/judge_runners.py"


def test_a_class_the_package_made_is_refused_however_it_was_reached(tmp_path, workspace):
    """Exercise 22's tests mention nano_engine, so `test` does not seal its process off from the
    package: a module name computed at run time passes the source scan, but the class the file
    hands over is the package's, and that is refused (`verify` refuses the import itself)."""
    path = write(tmp_path / "computed_22.py", textwrap.dedent("""\
        import importlib

        _name = "nano_" + "engine.prefix_cache"
        PrefixCachingBlockPool = importlib.import_module(_name).PrefixCachingBlockPool
        """))
    report = _judge_json("test", "22", "--file", str(path), workspace=workspace)
    assert report["verdict"] == "refused", report["summary"]
    assert report["load_error"]["message"].startswith("your file takes its answer from nano_engine "
                                                      "(`PrefixCachingBlockPool` is nano_engine.prefix_cache.")
