#!/usr/bin/env python3
"""judge.py -- write the mechanisms of the prefix-caching chapters yourself, and have them judged.

    python practice/judge.py list                 exercises, with your status
    python practice/judge.py start 21             copy the starter into practice/workspace/, show the problem
    python practice/judge.py test 21 --run        run the examples (test_example*) on your file
    python practice/judge.py test 21              run every test; accepted only when all pass
    python practice/judge.py solution 21          run the tests on the reference solution (--show prints it)
    python practice/judge.py check                every reference accepted; starters and known-wrong variants rejected
    python practice/judge.py doctor               Python, packages and optional tools

Options: --file PATH judges any file; --timeout S limits each test (default 10 s); --json prints
a machine-readable report (the notebooks' "Check my solution" button reads it); --workspace DIR
(or the NANO_ENGINE_WORKSPACE environment variable) moves the workspace.

Your code runs in a separate Python process with a time limit and a memory limit, so an endless
loop or a crash is reported as a verdict ("timeout", "runtime error") instead of hanging the judge.
Standard library only: the tests themselves run in runner.py, which a browser could run too.
Exit status: 0 when accepted (or the command succeeded), 1 otherwise, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import dataclasses
import doctest
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PRACTICE = Path(__file__).resolve().parent


def _load_runner():
    """Import runner.py from next to this file without putting practice/ on sys.path (the
    notebook kernel imports this module too, and should not see a top-level `runner`)."""
    spec = importlib.util.spec_from_file_location("practice_runner", PRACTICE / "runner.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


runner = sys.modules.get("practice_runner") or _load_runner()   # the test-running core

DEFAULT_TIMEOUT = 10.0       # seconds per test
DEFAULT_MEMORY_MB = 2048     # address-space limit of the child process (where the OS supports it)
STARTUP_GRACE = 3.0          # the child's own watchdog fires first; this catches a child that cannot
MAX_TIMEOUTS = 2             # after this many timed-out tests, the rest are not run
STATUS_FILE = ".judge_status.json"
NOT_RUN = "not run"
EXPLANATION = re.compile(r"<details>\s*<summary>\s*Explanation.*?</details>\s*", re.S | re.I)


# Exercises were first numbered 100-131; the number now tells the chapter (21 = chapter 2, first
# exercise). The old numbers keep working everywhere a number is accepted, and a workspace file
# started under the old name is still found.
ALIASES = {"100": "01", "107": "11", "101": "21", "102": "22", "103": "23", "131": "24",
           "104": "31", "105": "32", "108": "41", "106": "51", "130": "53"}
OLD_NUMBER = {new: old for old, new in ALIASES.items()}


class UsageError(Exception):
    """A mistake in the command line (unknown exercise, missing file): exit status 2."""


# --------------------------------------------------------------------------------------------
# Exercises


@dataclasses.dataclass
class Exercise:
    number: str
    folder: Path
    meta: dict

    @property
    def name(self) -> str:
        return self.folder.name

    @property
    def title(self) -> str:
        return self.meta.get("title", self.name)

    @property
    def difficulty(self) -> str:
        return self.meta.get("difficulty", "")

    @property
    def chapter(self) -> str:
        return self.meta.get("chapter", "")

    problem = property(lambda self: self.folder / "problem.md")
    starter = property(lambda self: self.folder / "starter.py")
    solution = property(lambda self: self.folder / "solution.py")
    tests = property(lambda self: self.folder / "test.py")

    @property
    def wrong_variants(self) -> list[Path]:
        return sorted((self.folder / "wrong").glob("*.py"))

    @property
    def old_name(self) -> str | None:
        """The folder name under the old three-digit number (e.g. 101_chained_block_hashes)."""
        old = OLD_NUMBER.get(self.number)
        return f"{old}_{self.name.split('_', 1)[1]}" if old else None

    def workspace_file(self, workspace: Path) -> Path:
        """The reader's file; one started under the old number is kept in use."""
        path = workspace / f"{self.name}.py"
        legacy = workspace / f"{self.old_name}.py" if self.old_name else None
        if not path.exists() and legacy is not None and legacy.exists():
            return legacy
        return path


def parse_front_matter(text: str) -> tuple[dict, str]:
    """Split ``---``-delimited front matter (``key: value``; ``[a, b]`` lists) from the body."""
    if not text.startswith("---"):
        return {}, text
    head, _, body = text[3:].partition("\n---")
    meta: dict = {}
    for line in head.strip().splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            meta[key.strip()] = [v.strip().strip("'\"") for v in value[1:-1].split(",") if v.strip()]
        else:
            meta[key.strip()] = value.strip("'\"")
    return meta, body.lstrip("-").lstrip("\n")


def reader_view(body: str) -> str:
    """The problem as the reader first sees it: the explanation stays hidden."""
    return EXPLANATION.sub("", body).rstrip() + "\n"


def find_exercises(root: Path = PRACTICE) -> list[Exercise]:
    exercises = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and re.match(r"\d+_", p.name)):
        if (folder / "problem.md").exists():
            meta, _ = parse_front_matter((folder / "problem.md").read_text(encoding="utf-8"))
            exercises.append(Exercise(folder.name.split("_", 1)[0], folder, meta))
    return sorted(exercises, key=lambda e: int(e.number))


def canonical_key(key: str | int) -> str:
    """``1`` and ``"1"`` mean ``"01"``; an old number (``101``) or old folder name means the new one."""
    key = str(key).strip()
    number, sep, rest = key.partition("_")
    if number.isdigit():
        number = ALIASES.get(number, number.zfill(2))
    return number + sep + rest


def get_exercise(key: str | int, root: Path = PRACTICE) -> Exercise:
    """By number (``21``; the old ``101`` too), folder name (``21_chained_block_hashes``) or slug."""
    key = canonical_key(key)
    for ex in find_exercises(root):
        if key in (ex.number, ex.name, ex.name.split("_", 1)[1]):
            return ex
    known = ", ".join(e.number for e in find_exercises(root))
    raise UsageError(f"no exercise {key!r}; known: {known} (see `judge.py list`)")


# --------------------------------------------------------------------------------------------
# The reader's workspace and remembered results


def workspace_dir(option: str | None = None) -> Path:
    return Path(option or os.environ.get("NANO_ENGINE_WORKSPACE") or PRACTICE / "workspace").resolve()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_status(workspace: Path) -> dict:
    try:
        return json.loads((workspace / STATUS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def remember_accepted(workspace: Path, ex: Exercise, path: Path) -> None:
    status = load_status(workspace)
    status[ex.number] = {"status": "accepted", "sha256": _digest(path),
                         "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / STATUS_FILE).write_text(json.dumps(status, indent=1), encoding="utf-8")


def reader_status(ex: Exercise, workspace: Path) -> str:
    path = ex.workspace_file(workspace)
    status = load_status(workspace)
    record = status.get(ex.number) or status.get(OLD_NUMBER.get(ex.number, ex.number))
    if record:
        edited = path.exists() and _digest(path) != record.get("sha256")
        return "accepted (edited since)" if edited else "accepted"
    return "started" if path.exists() else "not started"


def start(ex: Exercise, workspace: Path, force: bool = False) -> tuple[Path, str]:
    """Copy the starter into the workspace; an existing file is kept unless ``force`` (then it is
    backed up to ``<name>.py.bak`` first). Returns the file and what happened."""
    workspace.mkdir(parents=True, exist_ok=True)
    target = ex.workspace_file(workspace)
    if target.exists() and not force:
        return target, "kept"
    if target.exists():
        shutil.copyfile(target, target.with_name(target.name + ".bak"))
        shutil.copyfile(ex.starter, target)
        return target, "replaced"
    shutil.copyfile(ex.starter, target)
    return target, "created"


# --------------------------------------------------------------------------------------------
# Judging a file in a child process


def _pump(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            if os.name == "posix":
                os.killpg(proc.pid, signal.SIGKILL)   # also whatever the reader's code started
            else:
                proc.kill()
        except (ProcessLookupError, PermissionError):
            proc.kill()
    proc.wait()


def judge_file(ex: Exercise, path: str | os.PathLike, *, examples_only: bool = False,
               timeout: float = DEFAULT_TIMEOUT, memory_mb: int | None = DEFAULT_MEMORY_MB,
               check_interface: bool = True) -> dict:
    """Run exercise ``ex``'s tests on the file at ``path`` in a child process; return the report.

    Each test gets ``timeout`` seconds. A test that times out or kills its process is recorded and
    the remaining tests continue in a fresh process (up to MAX_TIMEOUTS timeouts).
    """
    path = Path(path).resolve()
    base = {"exercise": ex.number, "title": ex.title, "file": str(path),
            "mode": "examples" if examples_only else "all", "timeout": timeout}
    if not path.is_file():
        raise UsageError(f"no such file: {path} (run `python practice/judge.py start {ex.number}` "
                         "first, or pass --file)")
    names = runner.list_test_names(ex.tests, examples_only=examples_only)
    results: dict[str, dict] = {}
    remaining = list(names)
    timeouts, load_error, not_run_reason = 0, None, "not found in test.py"
    stderr_text = ""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"}
    while remaining and load_error is None:
        spec = {"tests": str(ex.tests), "solution": str(path), "only": remaining,
                "starter": str(ex.starter) if check_interface else None,
                "examples_only": examples_only, "timeout": timeout, "memory_mb": memory_mb}
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as err:
            proc = subprocess.Popen([sys.executable, str(PRACTICE / "runner.py"), json.dumps(spec)],
                                    stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                    cwd=str(path.parent), env=env, text=True, encoding="utf-8",
                                    errors="replace", start_new_session=(os.name == "posix"))
            lines: queue.Queue = queue.Queue()
            threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
            current, ready, ending = None, False, None
            deadline = time.monotonic() + timeout + STARTUP_GRACE
            while ending is None:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    ending = {"event": "timeout", "test": current, "where": None}
                    break
                if line is None:
                    ending = {"event": "died"}
                    break
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                kind = event.pop("event")
                if kind == "load_error":
                    load_error = event
                    ending = {"event": "done"}
                elif kind == "ready":
                    ready = True
                    deadline = time.monotonic() + timeout + STARTUP_GRACE
                elif kind == "start":
                    current = event["test"]
                    deadline = time.monotonic() + timeout + STARTUP_GRACE
                elif kind == "result":
                    results[event["name"]] = event
                    remaining.remove(event["name"])
                    current = None
                elif kind in ("timeout", "done"):
                    ending = {"event": kind, **event}
            _kill(proc)
            err.seek(0)
            stderr_text = (stderr_text + err.read())[-4000:]
        if ending["event"] == "done":
            break
        if not ready:   # the file itself hung or killed the process while loading
            if ending["event"] == "timeout":
                load_error = {"verdict": runner.TIMEOUT,
                              "message": f"your file did not finish loading within {timeout:g} s "
                                         "(an endless loop at module level?)", "where": ending.get("where")}
            else:
                load_error = {"verdict": runner.RUNTIME, "message": "the Python process ended while "
                              f"loading your file (exit code {proc.returncode})"}
            break
        if current is None:   # between two tests: keep the results so far, stop there
            not_run_reason = f"the Python process ended unexpectedly (exit code {proc.returncode})"
            break
        remaining.remove(current)
        if ending["event"] == "timeout":
            timeouts += 1
            where = ending.get("where")
            failure = {"yours" if where and where["file"] == "your file" else "test": where} if where else None
            results[current] = {"name": current, "verdict": runner.TIMEOUT, "failure": failure,
                                "message": f"did not finish within {timeout:g} s (an endless loop?)",
                                "seconds": timeout}
            if timeouts >= MAX_TIMEOUTS:
                not_run_reason = f"stopped after {MAX_TIMEOUTS} timeouts"
                break
        else:
            results[current] = {"name": current, "verdict": runner.RUNTIME, "failure": None,
                                "message": f"the Python process ended during this test (exit code "
                                           f"{proc.returncode}): os._exit(), a crash, or out of memory",
                                "seconds": 0.0}
    if load_error is not None:
        report = {**base, **runner.not_run_report(names, load_error)}
    else:
        tests = [results.get(n) or {"name": n, "verdict": NOT_RUN, "failure": None, "seconds": 0.0,
                                    "message": f"not run: {not_run_reason}"}
                 for n in names]
        report = {**base, **runner.summarize(tests), "tests": tests}
    if stderr_text.strip():
        report["stderr"] = stderr_text.strip()[-1500:]
    return report


# --------------------------------------------------------------------------------------------
# Text output


def _color(text: str, code: str) -> str:
    if sys.stdout.isatty() and not os.environ.get("NO_COLOR"):
        return f"\033[{code}m{text}\033[0m"
    return text


VERDICT_COLOR = {runner.ACCEPTED: "32", runner.WRONG: "31", runner.RUNTIME: "35",
                 runner.COMPILE: "35", runner.TIMEOUT: "33", NOT_RUN: "2"}


def _display_path(path: str | Path) -> str:
    try:
        rel = os.path.relpath(path)
        return str(path) if rel.startswith("..") else rel
    except ValueError:   # another drive on Windows
        return str(path)


def _frame_lines(frame: dict, indent: str, prefix: str = "") -> list[str]:
    out = [f"{indent}{prefix}{frame['file']} line {frame['lineno']}:  {frame['line']}"]
    if frame.get("locals"):
        width = max(len(k) for k in frame["locals"])
        out.append(f"{indent}locals:")
        out += [f"{indent}  {k:<{width}} = {v}" for k, v in frame["locals"].items()]
    return out


def format_report(report: dict) -> str:
    mode = " (examples only)" if report.get("mode") == "examples" else ""
    lines = [f"{report['exercise']} · {report['title']}{mode}", f"file: {_display_path(report['file'])}", ""]
    load_error = report.get("load_error")
    if load_error:
        lines.append(_color(f"  {load_error['verdict']}: {load_error['message']}",
                            VERDICT_COLOR.get(load_error["verdict"], "0")))
        if load_error.get("lineno"):
            lines.append(f"      your file line {load_error['lineno']}:  {load_error.get('line', '')}")
        if load_error.get("pointer"):
            lines += ["      " + p for p in load_error["pointer"].splitlines()]
        if load_error.get("where"):
            lines += _frame_lines(load_error["where"], "      ", "stuck at ")
        lines.append(f"  ({len(report['tests'])} tests not run)")
    else:
        width = max([len(t["name"]) for t in report["tests"]] + [10])
        for t in report["tests"]:
            verdict = _color(f"{t['verdict']:<14}", VERDICT_COLOR.get(t["verdict"], "0"))
            lines.append(f"  {verdict} {t['name']:<{width}}  {t.get('seconds', 0):.2f} s")
            if t["verdict"] == runner.ACCEPTED:
                continue
            lines += _failure_lines(t)
    if report.get("stderr") and (load_error or any(t["verdict"] == runner.RUNTIME for t in report["tests"])):
        lines += ["", "  output on stderr (last lines):"]
        lines += ["    " + s for s in report["stderr"].splitlines()[-10:]]
    lines += ["", f"verdict: {_color(report['verdict'], VERDICT_COLOR.get(report['verdict'], '0'))}",
              report["summary"]]
    return "\n".join(lines)


def _failure_lines(t: dict) -> list[str]:
    ind = "      "
    failure = t.get("failure") or {}
    out = []
    if t["verdict"] == runner.WRONG:
        if failure.get("test"):
            out += [f"{ind}test.py line {failure['test']['lineno']}:  {failure.get('expression') or failure['test']['line']}"]
        if failure.get("message"):
            out.append(f"{ind}message:  {failure['message']}")
        if "expected" in failure:
            out += [f"{ind}expected: {failure['expected']}", f"{ind}got:      {failure['got']}"]
        if failure.get("difference"):
            out.append(f"{ind}({failure['difference']})")
        if failure.get("test", {}).get("locals"):
            out += _frame_lines(failure["test"], ind)[1:]
    else:
        out.append(f"{ind}{t['message']}")
        if failure.get("yours"):
            out += _frame_lines(failure["yours"], ind, "at " if t["verdict"] == runner.TIMEOUT else "")
        if failure.get("test"):
            frame = failure["test"]
            out.append(f"{ind}called from test.py line {frame['lineno']}:  {frame['line']}")
            if not failure.get("yours") and frame.get("locals"):
                out += _frame_lines(frame, ind)[1:]
    if t.get("stdout"):
        out.append(f"{ind}printed:")
        out += [f"{ind}  {s}" for s in t["stdout"].rstrip().splitlines()[-10:]]
    return out


# --------------------------------------------------------------------------------------------
# check: the exercises themselves are sound


def worked_examples(ex: Exercise) -> doctest.TestResults:
    """Run the ``>>>`` examples of problem.md against the reference solution (in this process)."""
    module = runner.load_module(ex.solution, name=f"reference_{ex.number}")
    text = ex.problem.read_text(encoding="utf-8")
    test = doctest.DocTestParser().get_doctest(text, dict(vars(module)), ex.name, str(ex.problem), 0)
    doc_runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out: list[str] = []
    result = doc_runner.run(test, out=out.append)
    if result.failed:
        raise AssertionError("".join(out))
    return result


def check_exercise(ex: Exercise, timeout: float = DEFAULT_TIMEOUT) -> dict:
    """Everything `check` verifies about one exercise; problems are listed in "problems"."""
    problems = []
    meta, body = parse_front_matter(ex.problem.read_text(encoding="utf-8"))
    for key in ("title", "chapter", "difficulty", "tags"):
        if not meta.get(key):
            problems.append(f"problem.md front matter lacks `{key}`")
    if not EXPLANATION.search(body):
        problems.append("problem.md has no <details><summary>Explanation</summary> block")
    for path in (ex.starter, ex.solution, ex.tests):
        if not path.exists():
            problems.append(f"missing {path.name}")
    if problems:
        return {"exercise": ex.number, "ok": False, "problems": problems}
    examples = runner.list_test_names(ex.tests, examples_only=True)
    if not examples:
        problems.append("test.py has no test_example* test")
    try:
        examples_run = worked_examples(ex).attempted
    except Exception as exc:
        examples_run = 0
        problems.append(f"a worked example in problem.md disagrees with the reference:\n{exc}")
    files = [("reference", ex.solution), ("starter", ex.starter)] + [
        (f"wrong/{p.name}", p) for p in ex.wrong_variants]
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        reports = list(pool.map(lambda item: judge_file(ex, item[1], timeout=timeout), files))
    rows = []
    for (label, path), report in zip(files, reports):
        expected_accepted = label == "reference"
        ok = (report["verdict"] == runner.ACCEPTED) == expected_accepted
        if label.startswith("wrong/") and report["verdict"] == runner.COMPILE:
            ok = False   # a wrong variant must be wrong in behaviour, not broken Python
        caught_by = [t["name"] for t in report["tests"] if t["verdict"] != runner.ACCEPTED]
        rows.append({"file": label, "verdict": report["verdict"], "summary": report["summary"],
                     "ok": ok, "caught_by": [] if expected_accepted else caught_by,
                     "mistake": _first_docstring_line(path) if label.startswith("wrong/") else ""})
        if not ok:
            want = "accepted" if expected_accepted else "rejected"
            problems.append(f"{label}: expected {want}, got {report['verdict']} ({report['summary']})")
    if len(ex.wrong_variants) < 3:
        problems.append(f"only {len(ex.wrong_variants)} known-wrong variants (want at least 3)")
    return {"exercise": ex.number, "title": ex.title, "ok": not problems, "problems": problems,
            "examples": len(examples), "worked_examples": examples_run, "files": rows}


def _first_docstring_line(path: Path) -> str:
    try:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    except SyntaxError:
        return ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


# --------------------------------------------------------------------------------------------
# doctor


def _package_version(name: str) -> str | None:
    if importlib.util.find_spec(name) is None:
        return None
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "installed"


def doctor(workspace: Path) -> dict:
    rows = []

    def row(name: str, ok: bool, detail: str, required: bool) -> None:
        rows.append({"name": name, "ok": ok, "detail": detail, "required": required})

    row("python", sys.version_info >= (3, 10), f"{platform.python_version()} at {sys.executable} (need 3.10+)", True)
    exercises = find_exercises()
    row("exercises", bool(exercises), f"{len(exercises)} found in {_display_path(PRACTICE)}", True)
    try:
        workspace.mkdir(parents=True, exist_ok=True)
        probe = workspace / ".write_probe"
        probe.write_text("ok")
        probe.unlink()
        row("workspace", True, f"{_display_path(workspace)} is writable", True)
    except OSError as exc:
        row("workspace", False, f"{workspace}: {exc}", True)
    for name, why in [("pytest", "runs the project's own tests (make test)"),
                      ("torch", "the engine and the chapters"), ("numpy", "the chapters"),
                      ("ipywidgets", "the notebooks' buttons and steppers"),
                      ("graphviz", "drawing radix trees and block pools (Python side)")]:
        version = _package_version(name)
        row(name, version is not None, f"{version} -- {why}" if version else f"not installed -- {why}", False)
    dot = shutil.which("dot")
    row("dot", dot is not None, f"{dot} -- the graphviz program that renders the diagrams" if dot
        else "not found (install graphviz: apt-get install graphviz / brew install graphviz)", False)
    probe = subprocess.run([sys.executable, "-c", "import nano_engine, sys; print(nano_engine.__file__)"],
                           capture_output=True, text=True, timeout=120)
    detail = probe.stdout.strip() if probe.returncode == 0 else (probe.stderr.strip().splitlines() or ["?"])[-1]
    row("nano_engine", probe.returncode == 0, f"imports from {detail}" if probe.returncode == 0
        else f"does not import: {detail} (use the project's .venv/bin/python; set it up with `make lab`)", False)
    return {"ok": all(r["ok"] for r in rows if r["required"]), "checks": rows}


# --------------------------------------------------------------------------------------------
# Command line


def _print_json(data: object) -> None:
    print(json.dumps(data, indent=1))


def main(argv: list[str] | None = None) -> int:
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="replace")
    parser = argparse.ArgumentParser(prog="judge.py", description=__doc__.split("\n\n")[0],
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:3]),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workspace", help="folder with your files (default practice/workspace, "
                        "or $NANO_ENGINE_WORKSPACE)")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, help_text: str, exercise: bool = False, json_flag: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        if exercise:
            p.add_argument("exercise", help="number (e.g. 21; old numbers such as 101 work too) or folder name")
        if json_flag:
            p.add_argument("--json", action="store_true", help="machine-readable output")
        p.add_argument("--workspace", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        return p

    add("list", "exercises and your status")
    p = add("start", "copy the starter into the workspace and show the problem", exercise=True)
    p.add_argument("--force", action="store_true", help="replace your file (a .bak copy is kept)")
    for name, help_text in [("test", "judge your file"), ("solution", "judge the reference solution")]:
        p = add(name, help_text, exercise=True)
        p.add_argument("--run", action="store_true", help="only the examples (test_example*)")
        p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per test (default 10)")
        p.add_argument("--memory", type=int, default=DEFAULT_MEMORY_MB, help="memory limit in MiB (default 2048)")
        if name == "test":
            p.add_argument("--file", help="judge this file instead of the workspace file")
        else:
            p.add_argument("--show", action="store_true", help="also print the reference code")
    p = add("check", "verify every exercise: reference accepted, starter and wrong variants rejected")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help=argparse.SUPPRESS)
    add("doctor", "Python, packages and tools the practice needs")
    args = parser.parse_args(argv)
    workspace = workspace_dir(args.workspace)
    try:
        return _dispatch(args, workspace)
    except UsageError as exc:
        if getattr(args, "json", False):
            _print_json({"error": str(exc)})
        else:
            print(f"judge.py: {exc}", file=sys.stderr)
        return 2


def _dispatch(args: argparse.Namespace, workspace: Path) -> int:
    if args.command == "list":
        rows = [{"number": e.number, "title": e.title, "difficulty": e.difficulty, "chapter": e.chapter,
                 "status": reader_status(e, workspace), "folder": e.name} for e in find_exercises()]
        if args.json:
            _print_json(rows)
        else:
            widths = [max([len(r[k]) for r in rows] + [len(k)]) for k in ("title", "difficulty", "chapter")]
            print(f"{'#':>4}  {'title':<{widths[0]}}  {'difficulty':<{widths[1]}}  {'chapter':<{widths[2]}}  status")
            for r in rows:
                print(f"{r['number']:>4}  {r['title']:<{widths[0]}}  {r['difficulty']:<{widths[1]}}  "
                      f"{r['chapter']:<{widths[2]}}  {r['status']}")
            print(f"\nworkspace: {_display_path(workspace)}   start one with: python practice/judge.py start N")
        return 0

    if args.command == "start":
        ex = get_exercise(args.exercise)
        path, what = start(ex, workspace, force=args.force)
        _, body = parse_front_matter(ex.problem.read_text(encoding="utf-8"))
        note = {"created": "copied the starter to", "replaced": "replaced (old copy in .bak)",
                "kept": "kept your existing file (use --force to start over)"}[what]
        if args.json:
            _print_json({"exercise": ex.number, "file": str(path), "action": what, "problem": reader_view(body)})
            return 0
        tags = ", ".join(ex.meta.get("tags", []))
        print(f"[{ex.difficulty} · chapter {ex.chapter} · {tags}]\n")
        print(reader_view(body))
        print(f"{note}: {_display_path(path)}")
        print(f"then: python practice/judge.py test {ex.number} --run   (examples)\n"
              f"      python practice/judge.py test {ex.number}         (all tests)")
        return 0

    if args.command in ("test", "solution"):
        ex = get_exercise(args.exercise)
        if args.command == "solution":
            path = ex.solution
        else:
            path = Path(args.file) if args.file else ex.workspace_file(workspace)
        report = judge_file(ex, path, examples_only=args.run, timeout=args.timeout, memory_mb=args.memory)
        accepted = report["verdict"] == runner.ACCEPTED
        if (args.command == "test" and accepted and not args.run
                and Path(path).resolve() == ex.workspace_file(workspace).resolve()):
            remember_accepted(workspace, ex, Path(path))
        if args.json:
            _print_json(report)
        else:
            if args.command == "solution" and args.show:
                print(ex.solution.read_text(encoding="utf-8"))
            print(format_report(report))
        return 0 if accepted else 1

    if args.command == "check":
        results = [check_exercise(ex, timeout=args.timeout) for ex in find_exercises()]
        ok = bool(results) and all(r["ok"] for r in results)
        if args.json:
            _print_json({"ok": ok, "exercises": results})
        else:
            for r in results:
                mark = "ok  " if r["ok"] else "FAIL"
                files = r.get("files", [])
                wrong = [f for f in files if f["file"].startswith("wrong/")]
                print(f"{mark} {r['exercise']} {r.get('title', '')}: "
                      f"reference {files[0]['verdict'] if files else '?'}, "
                      f"starter {'rejected' if len(files) > 1 and files[1]['ok'] else 'NOT rejected'}, "
                      f"{sum(f['ok'] for f in wrong)}/{len(wrong)} wrong variants rejected, "
                      f"{r.get('examples', 0)} example tests, {r.get('worked_examples', 0)} worked examples checked")
                for f in wrong:
                    print(f"       {'rejected' if f['ok'] else 'ACCEPTED'}  {f['file']}: {f['mistake']}"
                          f"  (caught by {', '.join(f['caught_by'][:3]) or 'nothing'})")
                for problem in r["problems"]:
                    print(f"     ! {problem}")
            print(f"\n{'all exercises sound' if ok else 'problems found'}")
        return 0 if ok else 1

    if args.command == "doctor":
        result = doctor(workspace)
        if args.json:
            _print_json(result)
        else:
            for r in result["checks"]:
                mark = "ok  " if r["ok"] else ("FAIL" if r["required"] else "--  ")
                print(f"{mark} {r['name']:<12} {r['detail']}")
            print("\nready to practise" if result["ok"] else "\nsomething required is missing (FAIL above)")
        return 0 if result["ok"] else 1
    raise UsageError(f"unknown command {args.command}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:   # `judge.py ... | head`: the reader stopped reading, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
