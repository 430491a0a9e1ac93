#!/usr/bin/env python3
"""judge.py -- write the mechanisms of the prefix-caching chapters yourself, and have them judged.

    python practice/judge.py list                 exercises, with your status
    python practice/judge.py start 21             copy the starter into practice/workspace/, show the problem
    python practice/judge.py test 21 --run        run the examples (test_example*) on your file
    python practice/judge.py test 21              run every test; accepted only when all pass
    python practice/judge.py test 21 --isolated   the same, the tests here and your code behind a proxy (slower)
    python practice/judge.py solution 21          run the tests on the reference solution (--show prints it)
    python practice/judge.py mistakes 21          the classic mistakes of exercise 21, each as a diff
    python practice/judge.py check                every exercise sound: reference accepted, starter and mistakes
                                                  rejected, worked examples right, no surviving mutant
    python practice/judge.py mutate 21            mutation testing of one exercise (all without a number)
    python practice/judge.py seal                 record the hashes of runner.py, proxy.py, every test.py and
                                                  every problem.md's worked examples
    python practice/judge.py verify [21]          re-judge what the workspace records as accepted
    python practice/judge.py doctor               Python, packages and optional tools

Options: --file PATH judges any file; --timeout S limits each test (default 10 s); --json prints
a machine-readable report (the notebooks' "Check my solution" button reads it); --workspace DIR
(or the NANO_ENGINE_WORKSPACE environment variable) moves the workspace.

Your code runs in a separate Python process with a time limit and a memory limit, so an endless
loop or a crash is reported as a verdict ("timeout", "runtime error") instead of hanging the judge.
Two runners: `test` runs the tests with your code in that process and decides the verdict here,
from its signed results (fast); `verify` and `test --isolated` run the tests here and your code
behind proxy.py, plain data between, so your code cannot reach the tests (see practice/JUDGE.md).
Standard library only: the tests themselves run in runner.py, which a browser could run too.
Exit status: 0 when accepted (or the command succeeded), 1 otherwise, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import hashlib
import hmac
import importlib.util
import json
import os
import platform
import queue
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

PRACTICE = Path(__file__).resolve().parent


def _load_sibling(name: str, file: str):
    """Import a file from next to this one without putting practice/ on sys.path (the
    notebook kernel imports this module too, and should not see a top-level `runner`)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, PRACTICE / file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


runner = _load_sibling("practice_runner", "runner.py")       # the test-running core
mutation = _load_sibling("practice_mutation", "mutation.py")   # mutation testing of the exercises


_PROXY_LOCK = threading.Lock()   # check's threads may ask for it at once: one loads, the others wait


def _proxy():
    """proxy.py, the isolated runner's half (the reader's code behind a proxy): loaded the first
    time that runner is used, so `test`, which never needs it, does not pay for loading it."""
    with _PROXY_LOCK:
        return _load_sibling("practice_proxy", "proxy.py")


def __getattr__(name: str):   # `judge.proxy` (PEP 562), for code that imports this module
    if name == "proxy":
        return _proxy()
    raise AttributeError(name)

DEFAULT_TIMEOUT = 10.0       # seconds per test
MAX_TIMEOUT = 3600.0         # --timeout above an hour per test is refused (the limits derived from it overflow)
DEFAULT_MEMORY_MB = 2048     # address-space limit of the child process (where the OS supports it)
MIN_MEMORY_MB = 64           # below this the Python process of the reader's code cannot start
IMPORT_LIMIT = 180.0         # the libraries test.py imports (torch: seconds on a busy machine) load before the clock starts
WALL_FACTOR, WALL_GRACE = 10, 20.0   # the child's CPU-time watchdog decides timeouts; this wall-clock limit
                                    # (10x the CPU limit + 20 s) only catches code that sleeps or blocks,
                                    # and holds at load average 10 on two cores
ISOLATED_TIME_FACTOR = 3     # the isolated runner's round trips are CPU time too (encoding, the mirrors' walk):
                             # its tests get 3x --timeout, so an honest file passes `verify` wherever it passes `test`
STATUS_FILE = ".judge_status.json"
SEAL_FILE = "SHA256SUMS"     # shipped hashes of runner.py, proxy.py, every test.py and worked examples (`judge.py seal`)
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
    def optional(self) -> bool:
        """Marked `optional:` in the front matter (exercise 01: the model, not the caching path)."""
        return bool(self.meta.get("optional"))

    @property
    def chapter(self) -> str:
        return self.meta.get("chapter", "")

    problem = property(lambda self: self.folder / "problem.md")
    starter = property(lambda self: self.folder / "starter.py")
    solution = property(lambda self: self.folder / "solution.py")
    tests = property(lambda self: self.folder / "test.py")

    @property
    def wrong_variants(self) -> list[Path]:
        """Whole-file wrong variants (mistakes that really rewrite the code)."""
        return sorted((self.folder / "wrong").glob("*.py"))

    @property
    def mistakes(self) -> list[dict]:
        """The classic mistakes stored as edits of solution.py (mistakes.py's MISTAKES)."""
        path = self.folder / "mistakes.py"
        if not path.exists():
            return []
        namespace: dict = {}
        exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
        return list(namespace.get("MISTAKES", []))

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


def apply_mistake(ex: Exercise, mistake: dict) -> str:
    """solution.py with one mistake's edit applied; its ``old`` text must occur exactly once."""
    source = ex.solution.read_text(encoding="utf-8")
    count = source.count(mistake["old"])
    if count != 1:
        raise ValueError(f"mistake {mistake.get('name')!r}: its `old` text occurs {count} times in "
                         f"{ex.name}/solution.py (must be exactly once)")
    return source.replace(mistake["old"], mistake["new"])


def mistake_diff(ex: Exercise, mistake: dict) -> str:
    """The mistake as a unified diff against the reference (what a reader looks at)."""
    import difflib
    before = ex.solution.read_text(encoding="utf-8").splitlines(keepends=True)
    after = apply_mistake(ex, mistake).splitlines(keepends=True)
    return "".join(difflib.unified_diff(before, after, "solution.py", f"mistake: {mistake['name']}", n=1))


# --------------------------------------------------------------------------------------------
# The reader's workspace and remembered results


def workspace_dir(option: str | None = None) -> Path:
    return Path(option or os.environ.get("NANO_ENGINE_WORKSPACE") or PRACTICE / "workspace").resolve()


MAX_FILE = 16 * 2**20   # bytes: a solution (or the records) larger than this is not read


class NotRegularFile(OSError):
    """A path the judge reads is a directory, a named pipe or a device, or is too large."""


def file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be read as a file ("is missing", "is a directory, not a regular file",
    ...), or None. A named pipe is never opened for reading here: that would wait for a writer."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "is missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISDIR(info.st_mode):
        return "is a directory, not a regular file"
    if not stat.S_ISREG(info.st_mode):
        return "is a named pipe, a socket or a device, not a regular file"
    if info.st_size > MAX_FILE:
        return f"is larger than {MAX_FILE // 2**20} MiB"
    return None


def read_regular(path: Path) -> bytes:
    """The bytes of a regular file (NotRegularFile otherwise). Opened without blocking and checked
    before anything is read, so a named pipe swapped in meanwhile cannot make the judge wait."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE:
            raise NotRegularFile(f"{path} {file_problem(path) or 'is not a regular file'}")
        return f.read(MAX_FILE + 1)


def _digest(path: Path) -> str:
    return hashlib.sha256(read_regular(path)).hexdigest()


def load_status(workspace: Path, strict: bool = False) -> dict:
    """The workspace's records: a JSON object, exercise number -> record. A file that is not one
    (a list, null, a number, nesting deeper than the parser goes, not JSON, not a regular file) is
    refused in one line naming it when ``strict`` (verify); otherwise `list` and `test` say so on
    stderr once and go on without it."""
    path = workspace / STATUS_FILE
    if not os.path.lexists(path):
        return {}
    problem = file_problem(path)
    if problem is None:
        try:
            status = json.loads(read_regular(path).decode("utf-8"))
            problem = None if isinstance(status, dict) else f"holds a JSON {type(status).__name__}, not an object of records"
        except (OSError, ValueError) as exc:
            problem = f"is not JSON ({type(exc).__name__})"
        except RecursionError:
            problem = "is nested deeper than a record can be"
    if problem is None:
        return status
    message = f"{_display_path(path)} {problem}: it is not the judge's record of your accepted exercises"
    if strict:
        raise UsageError(message)
    if message not in _WARNED:
        _WARNED.add(message)
        print(f"judge.py: ignoring {message}", file=sys.stderr)
    return {}


_WARNED: set[str] = set()


def remember_accepted(workspace: Path, ex: Exercise, path: Path, judged: dict | None = None) -> str | None:
    """Record an acceptance with what was judged (the file's hash, test.py's and the runner's).
    The records are replaced atomically (a new file renamed over the old one), so a judge stopped
    half-way leaves the old records whole. Returns why nothing was recorded, or None."""
    status = load_status(workspace)
    status[ex.number] = {"status": "accepted", "sha256": _digest(path), "file": path.name,
                         "when": time.strftime("%Y-%m-%d %H:%M:%S"), **(judged or {})}
    try:
        workspace.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=workspace, prefix=".judge_status.", suffix=".tmp", delete=False,
                                         encoding="utf-8") as f:
            f.write(json.dumps(status, indent=1))
        os.replace(f.name, workspace / STATUS_FILE)
    except OSError as exc:
        if "f" in locals():
            Path(f.name).unlink(missing_ok=True)
        return f"{_display_path(workspace / STATUS_FILE)} could not be written ({exc.strerror or exc})"
    return None


def _record(status: dict, ex: Exercise) -> dict | None:
    """The exercise's acceptance record (under its number or its old one), or None."""
    record = status.get(ex.number) or status.get(OLD_NUMBER.get(ex.number, ex.number))
    return record if isinstance(record, dict) and record.get("status") == "accepted" else None


def reader_status(ex: Exercise, workspace: Path, status: dict | None = None) -> str:
    path = ex.workspace_file(workspace)
    record = _record(load_status(workspace) if status is None else status, ex)
    if record is not None:
        problem = file_problem(path)
        if problem is not None and problem != "is missing":
            return f"accepted (stale: your file {problem})"
        if problem is not None or _digest(path) != record.get("sha256"):
            return "accepted (stale: your file changed since)"
        if record.get("tests_sha256") != _sha(ex.tests.read_bytes()):
            return "accepted (stale: test.py changed since)"
        return "accepted"
    return "started" if os.path.lexists(path) else "not started"


def verify_records(workspace: Path, only: Exercise | None = None, timeout: float = DEFAULT_TIMEOUT) -> list[dict]:
    """Re-judge every exercise the workspace records as accepted, with this copy of practice/.

    Each record ends in one of three states (``state``):

    - ``holds``: the file is still the one recorded, the record names this test.py, runner and
      proxy, and the file is accepted again now by the isolated runner (the tests in this process,
      the file behind proxy.py);
    - ``stale``: the file (or test.py, the runner, the proxy) changed since the record was made,
      and the file is still accepted now: nothing is wrong, ``test N`` refreshes the record;
    - ``broken``: the verdict changed (the file is not accepted now), the file cannot be read, or
      this copy of practice/ is not sealed as shipped (and, in a git checkout, as committed).

    Run from a fresh copy of practice/ (what a course grader does), this catches an edited file, a
    forged entry, test.py rewritten with its seal, and a file that reached into the tests while
    ``test`` ran it in one process with them."""
    status = load_status(workspace, strict=True)
    recorded = [ex for ex in find_exercises() if _record(status, ex) is not None and (only is None or only.number == ex.number)]
    if recorded:
        _start_zygote(recorded)   # before the first judging: the tests' libraries, imported once
    tampered = _practice_changes()
    rows = []
    for ex in recorded:
        record = _record(status, ex)
        path = ex.workspace_file(workspace)
        changed = []
        unreadable = file_problem(path)
        if unreadable is not None:
            changed.append(f"{path.name} {unreadable}")
        elif (digest := _digest(path)) != record.get("sha256") or record.get("file_sha256", record.get("sha256")) != digest:
            changed.append("your file changed since it was recorded")
        if record.get("tests_sha256") != _sha(ex.tests.read_bytes()):
            changed.append("recorded against another test.py than the shipped one")
        if record.get("runner_sha256") != _sha((PRACTICE / "runner.py").read_bytes()):
            changed.append("recorded against another runner.py than the shipped one")
        if record.get("proxy_sha256", "") not in ("", _sha((PRACTICE / "proxy.py").read_bytes())):
            changed.append("recorded against another proxy.py than the shipped one")
        if record.get("examples_sha256", "") not in ("", examples_sha(ex)):
            changed.append("recorded against other worked examples than the shipped ones")
        verdict, now = None, []
        if unreadable is None:   # the isolated runner: whatever the file did in `test`, here it reaches no test
            report = judge_file(ex, path, timeout=timeout, isolated=True)
            verdict = report["verdict"]
            if verdict != runner.ACCEPTED or not report["judged"]["sealed"]:
                now.append(f"judged again now: {verdict} ({report['summary']})")
        if tampered or unreadable is not None or now:
            state, problems = "broken", tampered + changed + now
        elif changed:
            state, problems = "stale", changed + [f"still accepted now: run `python practice/judge.py test {ex.number}` "
                                                  "to refresh the record"]
        else:
            state, problems = "holds", []
        rows.append({"exercise": ex.number, "file": str(path), "state": state, "holds": state != "broken",
                     "stale": state == "stale", "verdict": verdict, "problems": problems})
    return rows


def _practice_changes() -> list[str]:
    """Problems with this copy of practice/ itself: files that differ from the seal, and (in a git
    checkout) sealed files that differ from the committed ones."""
    seal = load_seal()
    problems = [f"practice/{key} differs from practice/{SEAL_FILE}" for key, digest in seal_entries().items()
                if seal.get(key) != digest]
    git = shutil.which("git")
    if git and (PRACTICE.parent / ".git").exists():
        names = [str(p.relative_to(PRACTICE.parent)) for p in sealed_files()] + [f"practice/{SEAL_FILE}"]
        changed = subprocess.run([git, "-C", str(PRACTICE.parent), "status", "--porcelain", "--", *names],
                                 capture_output=True, text=True, timeout=60)
        if changed.returncode == 0:
            problems += [f"{line[3:]} differs from the committed version (git)" for line in changed.stdout.splitlines()
                         if line.strip()]
    return problems


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


LINE_LIMIT = 1 << 20   # characters: a longer line on the child's channel is not the runner's (dropped, counted)


def _pump(stream, lines: queue.Queue) -> None:
    """The child's lines, each at most LINE_LIMIT characters: code that writes an endless line to
    the judge's channel costs the judge no memory (the line is read in pieces and dropped)."""
    try:
        while True:
            line = stream.readline(LINE_LIMIT)
            if not line:
                break
            if len(line) == LINE_LIMIT and not line.endswith("\n"):
                while True:   # the rest of the overlong line
                    rest = stream.readline(LINE_LIMIT)
                    if not rest or rest.endswith("\n"):
                        break
                line = "\n"   # no signature: counted as a line the runner did not write
            lines.put(line)
    except (OSError, ValueError):   # the stream was closed under the read: the child has been ended
        pass
    lines.put(None)


class _InChild:
    """The in-child runner's process: the tests and the reader's code, its signed lines on
    ``stdout``, ``returncode`` once ``end()`` has ended it. Where fork exists it is forked from
    the zygote (``proxy.spawn``: no interpreter to start, runner.py compiled once, the tests'
    libraries imported once -- exercise 01's torch cost each process a second); elsewhere a new
    interpreter runs ``runner.BOOTSTRAP``. Either way runner.py runs afresh there, in no registry."""

    def __init__(self, spec: dict, err: Any, home: str, env: dict):
        self.returncode: int | None = None
        self.proc: subprocess.Popen | None = None
        if hasattr(os, "fork"):
            self.pid, send_fd, recv_fd = _proxy().spawn(err.fileno())
            data = json.dumps({**spec, "kind": "in-child"}).encode("utf-8")
            view = memoryview(len(data).to_bytes(4, "big") + data)
            try:
                while view:   # the child reads its spec first, whole
                    view = view[os.write(send_fd, view):]
            except OSError:
                pass   # it died at once: reported as a process that ended
            finally:
                os.close(send_fd)
            self.stdout = os.fdopen(recv_fd, "r", encoding="utf-8", errors="replace")
            return
        self.proc = subprocess.Popen([sys.executable, "-c", runner.BOOTSTRAP], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=err, cwd=home, env=env, text=True,
                                     encoding="utf-8", errors="replace")
        self.pid, self.stdout = self.proc.pid, self.proc.stdout
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(spec) + "\n")
            self.proc.stdin.close()
        except OSError:
            pass

    def end(self) -> None:
        """End the process (and whatever it started in its session) and learn how it ended."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.returncode = self.proc.wait()
            return
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        self.returncode = _proxy().child_status(self.pid)
        self.stdout.close()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_seal(root: Path = PRACTICE) -> dict[str, str]:
    """The shipped hashes (practice/SHA256SUMS: "<sha256>  <path under practice/>" per line)."""
    try:
        lines = (root / SEAL_FILE).read_text(encoding="utf-8").splitlines()
    except OSError:
        return {}
    return {path: digest for digest, _, path in (line.partition("  ") for line in lines) if path}


def sealed_files(root: Path = PRACTICE) -> list[Path]:
    """What the seal covers: the runner, the proxy, and every exercise's test.py."""
    return [root / "runner.py", root / "proxy.py"] + [ex.tests for ex in find_exercises(root) if ex.tests.exists()]


WORKED_KEY = "problem.md#worked-examples"   # the seal's key of an exercise's worked examples (under its folder)


def examples_sha(ex: Exercise) -> str:
    """The hash of the worked examples (they judge too): not of problem.md, whose prose may change."""
    return _examples_digest(worked_example_spec(ex))


def _examples_digest(spec: dict | None) -> str:
    """``examples_sha`` of a ``worked_example_spec`` already read."""
    return _sha(json.dumps(spec["examples"] if spec else [], sort_keys=True).encode("utf-8"))


def _examples_key(ex: Exercise) -> str:
    """The seal's key for an exercise's worked examples."""
    return f"{ex.name}/{WORKED_KEY}"


def seal_entries(root: Path = PRACTICE) -> dict[str, str]:
    """What the seal covers, hashed now: runner.py, proxy.py, every test.py and every exercise's
    worked examples (``NN_name/problem.md#worked-examples``)."""
    entries = {p.relative_to(root).as_posix(): _sha(p.read_bytes()) for p in sealed_files(root)}
    for ex in find_exercises(root):
        entries[_examples_key(ex)] = examples_sha(ex)
    return entries


def write_seal(root: Path = PRACTICE) -> Path:
    """Record the hashes of the files the verdicts depend on (`judge.py seal`, run by authors)."""
    lines = [f"{digest}  {key}" for key, digest in seal_entries(root).items()]
    (root / SEAL_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root / SEAL_FILE


def _seal_key(path: Path) -> str:
    """The seal's key for a test.py: its exercise folder and name (a copied folder keeps its key)."""
    return f"{path.parent.name}/{path.name}"


def _read_event(line: str, secret: str) -> dict | None:
    """A protocol line's event, or None when its signature is not the runner's."""
    mac, _, text = line.rstrip("\n").partition(" ")
    if not hmac.compare_digest(mac, runner.sign(secret, text)):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def judge_file(ex: Exercise, path: str | os.PathLike, *, examples_only: bool = False,
               timeout: float = DEFAULT_TIMEOUT, memory_mb: int | None = DEFAULT_MEMORY_MB,
               check_interface: bool = True, isolated: bool = False, first_failure: bool = False,
               only: list[str] | None = None) -> dict:
    """Run exercise ``ex``'s tests on the file at ``path``; return the report.

    Two runners, one report (``judged["runner"]`` says which):

    - ``in-child`` (the default, what ``test`` uses): the file and the tests run together in a
      child process that streams signed results; the verdict is decided here, from those results
      and the list of tests this process read from test.py itself (a test without a result is
      not a pass). Fast: a call into the file is a call.
    - ``isolated`` (what ``verify`` uses, and ``test --isolated``): the tests run here, in the
      judge's process; the file is imported in a child process that answers the tests' calls
      through proxy.py (plain data only), so nothing the file does can reach the tests, their
      expected values or the verdict. Slower: every call into the file is a round trip.

    Each test gets ``timeout`` seconds of CPU time (the isolated runner ``ISOLATED_TIME_FACTOR``
    times that, its round trips included); after the first timeout (or a crash) the
    tests not yet run are skipped with a note -- an endless loop costs one time limit, not one
    per test. The report records what was judged: hashes of the file, test.py, the runner and
    the proxy, and whether the last three are the shipped ones (``sealed``). ``first_failure``
    (``check`` judging a wrong file): stop at the first test that fails. ``only``: these tests
    alone. The worked examples of problem.md run first, as the test ``runner.WORKED_EXAMPLE``.
    """
    if not 0 < timeout <= MAX_TIMEOUT:
        raise UsageError(f"--timeout must be a positive number of seconds up to {MAX_TIMEOUT:g}, got {timeout:g}")
    if memory_mb is not None and not MIN_MEMORY_MB <= memory_mb <= _machine_memory_mb():
        raise UsageError(f"--memory must be between {MIN_MEMORY_MB} and {_machine_memory_mb()} MiB, got {memory_mb}")
    path = Path(path).resolve()
    problem = file_problem(path)
    if problem == "is missing":
        raise UsageError(f"no such file: {path} (run `python practice/judge.py start {ex.number}` "
                         "first, or pass --file)")
    if problem is not None:
        raise UsageError(f"{_display_path(path)} {problem}")
    tests_bytes = ex.tests.read_bytes()
    runner_bytes, proxy_bytes = (PRACTICE / "runner.py").read_bytes(), (PRACTICE / "proxy.py").read_bytes()
    tests_source = tests_bytes.decode("utf-8")
    seal = load_seal()
    try:
        file_sha = _sha(read_regular(path))
    except OSError as exc:   # replaced by a pipe or a directory since the check above
        raise UsageError(f"{_display_path(path)}: {exc}") from None
    judged: dict[str, str | bool] = {"file_sha256": file_sha, "tests_sha256": _sha(tests_bytes),
                                     "runner_sha256": _sha(runner_bytes), "proxy_sha256": _sha(proxy_bytes),
                                     "runner": "isolated" if isolated else "in-child"}
    worked = worked_example_spec(ex)
    judged["examples_sha256"] = _examples_digest(worked)
    judged["sealed"] = (seal.get(_seal_key(ex.tests)) == judged["tests_sha256"]
                        and seal.get("runner.py") == judged["runner_sha256"]
                        and seal.get("proxy.py") == judged["proxy_sha256"]
                        and seal.get(_examples_key(ex)) == judged["examples_sha256"])
    base = {"exercise": ex.number, "title": ex.title, "file": str(path),
            "mode": "examples" if examples_only else "all", "timeout": timeout, "judged": judged}
    names = runner.list_test_names(ex.tests, examples_only=examples_only, worked=worked is not None)
    if only is not None:
        names = [n for n in names if n in only]
    if isolated:
        results, load_error, not_run_reason, stderr_text = _judge_isolated(
            ex, path, tests_source, names, timeout=timeout * ISOLATED_TIME_FACTOR, memory_mb=memory_mb,
            check_interface=check_interface, first_failure=first_failure, worked=worked)
        unsigned = 0
    else:
        results, load_error, not_run_reason, stderr_text, unsigned = _judge_in_child(
            ex, path, tests_source, runner_bytes, names, examples_only=examples_only, timeout=timeout,
            memory_mb=memory_mb, check_interface=check_interface, first_failure=first_failure, worked=worked)
    if load_error is not None:
        report = {**base, **runner.not_run_report(names, load_error)}
    else:
        tests = [results.get(n) or {"name": n, "verdict": NOT_RUN, "failure": None, "seconds": 0.0,
                                    "message": f"not run: {not_run_reason}"}
                 for n in names]
        report = {**base, **runner.summarize(tests), "tests": tests}
    if unsigned:
        report["unsigned_lines"] = unsigned
    if stderr_text.strip():
        report["stderr"] = stderr_text.strip()[-1500:]
    return report


def _judge_in_child(ex: Exercise, path: Path, tests_source: str, runner_bytes: bytes, names: list[str], *,
                    examples_only: bool, timeout: float, memory_mb: int | None, check_interface: bool,
                    first_failure: bool = False,
                    worked: dict | None = None) -> tuple[dict[str, dict], dict | None, str, str, int]:
    """The in-child runner: the tests and the file in one child process, signed results streamed
    back; a child that ends mid-run is started again for the tests not yet run."""
    results: dict[str, dict] = {}
    remaining = list(names)
    load_error, not_run_reason, unsigned = None, "not found in test.py", 0
    stderr_text = ""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8", "PYTHONBREAKPOINT": "0"}
    home = tempfile.mkdtemp(prefix="judge_home_")   # the child's working directory: the only place it may write
    try:
        while remaining and load_error is None:
            secret = secrets.token_hex(32)
            spec = {"tests": str(ex.tests), "tests_source": tests_source, "solution": str(path), "only": remaining,
                    "seal_package": runner.PACKAGE not in tests_source, "package_dir": package_dir(), "worked": worked,
                    "starter": str(ex.starter) if check_interface else None, "examples_only": examples_only,
                    "timeout": timeout, "memory_mb": memory_mb, "secret": secret, "home": home,
                    "runner_path": str(PRACTICE / "runner.py"), "runner_source": runner_bytes.decode("utf-8")}
            with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as err:
                proc = _InChild(spec, err, home, env)
                lines: queue.Queue = queue.Queue()
                threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
                current: str | None = None
                ready = False
                ending: dict[str, Any] | None = None   # the event that ended this child
                deadline = time.monotonic() + IMPORT_LIMIT
                while ending is None:
                    try:
                        line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                    except queue.Empty:
                        ending = {"event": "timeout", "test": current, "where": None}
                        break
                    if line is None:
                        ending = {"event": "died"}
                        break
                    event = _read_event(line, secret)
                    if event is None:
                        unsigned += 1   # written by the reader's code, not by the runner
                        continue
                    kind = event.pop("event")
                    if kind == "imported":
                        deadline = time.monotonic() + timeout * WALL_FACTOR + WALL_GRACE
                    elif kind == "load_error":
                        load_error = event
                        ending = {"event": "done"}
                    elif kind == "ready":
                        ready = event.get("tests") == remaining
                        if not ready:
                            ending = {"event": "died"}
                        deadline = time.monotonic() + timeout * WALL_FACTOR + WALL_GRACE
                    elif kind == "start" and ready and current is None and event.get("test") in remaining:
                        current = event["test"]
                        deadline = time.monotonic() + timeout * WALL_FACTOR + WALL_GRACE
                    elif kind == "result" and current is not None and event.get("name") == current:
                        results[current] = event
                        remaining.remove(current)
                        if first_failure and event.get("verdict") != runner.ACCEPTED:
                            not_run_reason = f"skipped after the first failure, in {current}"
                            ending = {"event": "done"}
                        current = None
                    elif kind == "timeout" and event.get("test") == current:
                        ending = {"event": kind, **event}
                    elif kind == "done" and ready:
                        ending = {"event": kind}
                proc.end()
                err.seek(0)
                stderr_text = (stderr_text + err.read(200_000))[-4000:]
            if ending["event"] == "done":
                break
            if not ready:   # the file itself hung or killed the process while loading
                if ending["event"] == "timeout":
                    load_error = {"verdict": runner.TIMEOUT,
                                  "message": f"your file did not finish loading within {timeout:g} s "
                                             "(an endless loop at module level?)", "where": ending.get("where")}
                else:
                    load_error = {"verdict": runner.RUNTIME, "message": "the Python process ended while "
                                  f"loading your file: {runner.describe_exit(proc.returncode, memory_mb)}"}
                break
            if current is None:   # between two tests: keep the results so far, stop there
                not_run_reason = f"the Python process ended unexpectedly: {runner.describe_exit(proc.returncode, memory_mb)}"
                break
            remaining.remove(current)
            if ending["event"] == "timeout":
                where = ending.get("where")
                failure = {"yours" if where and where["file"] == "your file" else "test": where} if where else None
                results[current] = {"name": current, "verdict": runner.TIMEOUT, "failure": failure,
                                    "message": str(ending.get("message") or runner.timeout_message(timeout)),
                                    "seconds": timeout}
                for key in ("stdout", "stdout_cut"):
                    if ending.get(key):
                        results[current][key] = ending[key]
                not_run_reason = (f"skipped after the timeout in {current} (fix that one first; "
                                  "each further endless loop would cost another time limit)")
            else:
                results[current] = {"name": current, "verdict": runner.RUNTIME, "failure": None,
                                    "message": "the Python process ended during this test: "
                                               + runner.describe_exit(proc.returncode, memory_mb),
                                    "seconds": 0.0}
                not_run_reason = f"skipped after the Python process ended in {current}"
            break
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return results, load_error, not_run_reason, stderr_text, unsigned


@functools.lru_cache(maxsize=1)
def package_dir() -> str | None:
    """The folder of the package the exercises are about (nano_engine), found without importing
    it: the reader's process is sealed off from it (runner.seal_off_package)."""
    try:
        spec = importlib.util.find_spec(runner.PACKAGE)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return str(locations[0]) if locations else None


_LOAD_LOCK = threading.Lock()   # `import solution_under_test` while test.py loads: one file at a time


def _judge_isolated(ex: Exercise, path: Path, tests_source: str, names: list[str], *, timeout: float,
                    memory_mb: int | None, check_interface: bool, first_failure: bool = False,
                    worked: dict | None = None) -> tuple[dict[str, dict], dict | None, str, str]:
    """The isolated runner: the file in a child process behind proxy.py, the tests here."""
    proxy = _proxy()
    wall = timeout * WALL_FACTOR + WALL_GRACE
    spec = {"solution": str(path), "starter": str(ex.starter) if check_interface else None,
            "preload": runner._test_imports(tests_source), "timeout": timeout, "memory_mb": memory_mb,
            "package_dir": package_dir(),
            "cpu_total": IMPORT_LIMIT + timeout * (len(names) + 2)}
    results: dict[str, dict] = {}
    load_error: dict | None = None
    not_run_reason = "not found in test.py"
    with tempfile.TemporaryDirectory(prefix="judge_home_") as home, \
            tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as err:
        spec["home"] = home   # the child's working directory: the only place it may write
        link, load_error = proxy.start(spec, runner_module=runner.__name__, stderr=err, wall_limit=wall,
                                       load_wall_limit=IMPORT_LIMIT + wall)
        try:
            if load_error is None:
                results, load_error, not_run_reason = _run_tests_isolated(ex, link, path, tests_source, names, timeout,
                                                                          first_failure, worked)
        finally:
            proxy.close(link)
            err.seek(0)
            stderr_text = err.read(200_000)[-4000:]
    return results, load_error, not_run_reason, stderr_text


def _run_tests_isolated(ex: Exercise, link: Any, path: Path, tests_source: str, names: list[str],
                        timeout: float, first_failure: bool = False,
                        worked: dict | None = None) -> tuple[dict[str, dict], dict | None, str]:
    """Load test.py here (its ``solution_under_test`` is the child's module) and run the tests."""
    proxy = _proxy()
    module = proxy.RemoteModule(link, runner.SOLUTION_MODULE)
    output = runner._HELPERS["CapturedOutput"](runner.STDOUT_LIMIT)
    try:
        with _LOAD_LOCK:
            proxy.watch_test(link, timeout)
            try:
                link.begin_test(timeout, output)
                loaded = runner.load_tests(ex.tests, module, source=tests_source, worked=worked)
            finally:
                proxy.unwatch_test()
    except BaseException as exc:  # noqa: B036 -- a module-level call into the file may time out or raise
        stop = link.stopped
        if isinstance(stop, proxy.JudgeStop):
            return {}, {"verdict": stop.verdict, "message": "while test.py loaded: " + (stop.message or "timeout")}, ""
        return {}, {"verdict": runner.RUNTIME, "message": "test.py did not load: " + runner._exception_text(exc)}, ""
    wanted = set(names)
    results: dict[str, dict] = {}
    for name, func in loaded:
        if name not in wanted:
            continue
        output = runner._HELPERS["CapturedOutput"](runner.STDOUT_LIMIT)
        proxy.watch_test(link, timeout)
        try:
            link.begin_test(timeout, output)
            result = runner.run_test(name, func, str(ex.tests), str(path), capture=False)
        except proxy.JudgeStop:   # raised between the test's own lines (the watchdog's timeout)
            result = {"name": name, "verdict": runner.TIMEOUT, "message": "", "failure": None, "seconds": timeout}
        finally:
            proxy.unwatch_test()
            link.end_test()
        printed = output.getvalue()
        if printed:
            result["stdout"] = printed
            if output.cut():
                result["stdout_cut"] = output.cut()
        stop = link.stopped
        if stop is not None:
            failure = dict(result.get("failure") or {})
            failure.pop("exception", None)
            if stop.where and stop.where.get("yours"):
                failure["yours"] = stop.where["yours"]
            if stop.verdict == runner.TIMEOUT:
                message = stop.message or runner.timeout_message(timeout, output.total())
                if isinstance(stop, proxy.JudgeTimeout):
                    message = "the test " + runner.timeout_message(timeout, output.total())
                result.update(verdict=runner.TIMEOUT, message=message, seconds=timeout)
                reason = (f"skipped after the timeout in {name} (fix that one first; "
                          "each further endless loop would cost another time limit)")
            else:
                result.update(verdict=runner.RUNTIME, message=stop.message)
                reason = f"skipped after the Python process ended in {name}"
            result["failure"] = failure or None
            results[name] = result
            return results, None, reason
        results[name] = result
        if first_failure and result["verdict"] != runner.ACCEPTED:
            return results, None, f"skipped after the first failure, in {name}"
    return results, None, "not found in test.py"


# --------------------------------------------------------------------------------------------
# Text output


def _color(text: str, code: str) -> str:
    if sys.stdout.isatty() and not os.environ.get("NO_COLOR"):
        return f"\033[{code}m{text}\033[0m"
    return text


VERDICT_COLOR = {runner.ACCEPTED: "32", runner.WRONG: "31", runner.RUNTIME: "35",
                 runner.COMPILE: "35", runner.TIMEOUT: "33", runner.REFUSED: "31", NOT_RUN: "2"}


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


PRINTED_LINES = 10   # lines of a test's printing shown in a report (from the first; the rest is counted)
WRAP = 100           # columns a long message is wrapped to


def _wrapped(text: str, first: str, rest: str) -> list[str]:
    """A paragraph-long message as lines of at most WRAP columns (readable in a terminal); a
    shorter one stays on its line, whole (so it can be searched for)."""
    import textwrap
    if len(text) <= 2 * WRAP:
        return [first + text]
    return textwrap.wrap(text, WRAP, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False,
                         break_long_words=False) or [first.rstrip()]


def format_report(report: dict) -> str:
    mode = " (examples only)" if report.get("mode") == "examples" else ""
    lines = [f"{report['exercise']} · {report['title']}{mode}", f"file: {_display_path(report['file'])}", ""]
    load_error = report.get("load_error")
    if load_error:
        color = VERDICT_COLOR.get(load_error["verdict"], "0")
        lines += [_color(line, color) for line in _wrapped(f"{load_error['verdict']}: {load_error['message']}",
                                                            "  ", "      ")]
        if load_error.get("lineno"):
            lines.append(f"      your file line {load_error['lineno']}:  {load_error.get('line', '')}")
        if load_error.get("pointer"):
            lines += ["      " + p for p in load_error["pointer"].splitlines()]
        if load_error.get("where"):
            lines += _frame_lines(load_error["where"], "      ", "stuck at ")
        lines.append(f"  ({len(report['tests'])} tests not run)")
    else:
        width = max([len(t["name"]) for t in report["tests"]] + [10])
        said: dict[str, str] = {}   # a message already shown in full -> the test it was shown under
        for t in report["tests"]:
            verdict = _color(f"{t['verdict']:<14}", VERDICT_COLOR.get(t["verdict"], "0"))
            lines.append(f"  {verdict} {t['name']:<{width}}  {t.get('seconds', 0):.2f} s")
            if t["verdict"] == runner.ACCEPTED:
                continue
            lines += _failure_lines(t, said)
    if report.get("stderr") and (load_error or any(t["verdict"] == runner.RUNTIME for t in report["tests"])):
        lines += ["", "  output on stderr (last lines):"]
        lines += ["    " + s for s in report["stderr"].splitlines()[-10:]]
    judged = report.get("judged") or {}
    if report.get("unsigned_lines"):
        lines += ["", f"  note: {report['unsigned_lines']} line(s) on the judge's channel were not written by the "
                      "runner and were ignored"]
    if judged and not judged.get("sealed"):
        lines += ["", "  note: test.py, the worked examples, runner.py or proxy.py differ from the shipped version "
                      "(practice/SHA256SUMS): this verdict is not recorded"]
    elif report.get("recorded"):
        lines += ["", f"  recorded as accepted in {_display_path(report['record'])} (`list` shows it, `verify` "
                      "re-judges it)"]
    elif report.get("not_recorded"):
        lines += [""] + _wrapped(f"not recorded: {report['not_recorded']}", "  ", "  ")
    lines += ["", f"verdict: {_color(report['verdict'], VERDICT_COLOR.get(report['verdict'], '0'))}",
              report["summary"]]
    return "\n".join(lines)


def _value_lines(label: str, text: str, ind: str) -> list[str]:
    """``expected:`` / ``got:`` and a value that may span lines (a worked example's output)."""
    first, *more = str(text).split("\n")
    return [f"{ind}{label:<10}{first}"] + [f"{ind}{'':<10}{line}" for line in more]


def _failure_lines(t: dict, said: dict[str, str] | None = None) -> list[str]:
    ind = "      "
    failure = t.get("failure") or {}
    out = []
    if t["verdict"] == runner.WRONG:
        if failure.get("test"):
            frame = failure["test"]
            out += [f"{ind}{frame.get('file', 'test.py')} line {frame['lineno']}:  "
                    f"{failure.get('expression') or frame['line']}"]
        if failure.get("message"):
            out.append(f"{ind}message:  {failure['message']}")
        if "expected" in failure:
            out += _value_lines("expected:", failure["expected"], ind) + _value_lines("got:", failure["got"], ind)
        if failure.get("difference"):
            out.append(f"{ind}({failure['difference']})")
        if failure.get("test", {}).get("locals"):
            out += _frame_lines(failure["test"], ind)[1:]
    else:
        message = t["message"]
        if said is not None and len(message) > 80 and message in said:
            out.append(f"{ind}(the same as under {said[message]})")
        else:
            if said is not None:
                said.setdefault(message, t["name"])
            out += _wrapped(message, ind, ind)
        if failure.get("yours"):
            out += _frame_lines(failure["yours"], ind, "at " if t["verdict"] == runner.TIMEOUT else "")
        if failure.get("test"):
            frame = failure["test"]
            out.append(f"{ind}called from {frame.get('file', 'test.py')} line {frame['lineno']}:  {frame['line']}")
            if not failure.get("yours") and frame.get("locals"):
                out += _frame_lines(frame, ind)[1:]
    if t.get("stdout"):
        out += _printed_lines(t["stdout"], t.get("stdout_cut"), ind)
    return out


def _printed_lines(printed: str, cut: dict | None, ind: str) -> list[str]:
    """What a test printed, from its first line (where the inputs usually are), and how much more
    there was: the lines kept but not shown, and what the judge did not keep (``cut``)."""
    lines = printed.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    shown, hidden = lines[:PRINTED_LINES], lines[PRINTED_LINES:]
    more_lines = len(hidden) + (cut or {}).get("lines", 0)
    more_chars = sum(len(line) + 1 for line in hidden) + (cut or {}).get("characters", 0)
    out = [f"{ind}printed:"] + [f"{ind}  {line}" for line in shown]
    if more_chars:
        out.append(f"{ind}  … {more_lines:,} more line{'s' * (more_lines != 1)}, {more_chars:,} characters")
    return out


# --------------------------------------------------------------------------------------------
# check: the exercises themselves are sound


def worked_example_spec(ex: Exercise) -> dict | None:
    """problem.md's worked examples as the runner takes them ({"path", "examples"}), or None."""
    cases = _worked_cases(ex.problem.read_text(encoding="utf-8")) if ex.problem.exists() else []
    return {"path": str(ex.problem), "examples": cases} if cases else None


@functools.lru_cache(maxsize=64)
def _worked_cases(text: str) -> list[dict]:
    return runner.worked_example_cases(text)


def worked_examples(ex: Exercise) -> Any:
    """Run the worked examples of problem.md against the reference solution, in this process and
    strictly (an expected exception's message too: the statement prints the reference's). Raises
    AssertionError naming the first example that disagrees."""
    import doctest  # its TestResults: what the project's tests read
    worked = worked_example_spec(ex)
    if worked is None:
        return doctest.TestResults(0, 0)
    module = runner.load_module(ex.solution, name=f"reference_{ex.number}")
    result = runner.run_test(runner.WORKED_EXAMPLE, runner.worked_example_test(worked, module, strict=True),
                             str(ex.problem), str(ex.solution))
    if result["verdict"] != runner.ACCEPTED:
        failure = result.get("failure") or {}
        where = failure.get("test") or {}
        raise AssertionError(f"problem.md line {where.get('lineno', '?')}: {failure.get('expression') or where.get('line', '')}\n"
                             f"  expected: {failure.get('expected', '')}\n  got:      "
                             f"{failure.get('got', result['message'])}")
    return doctest.TestResults(0, len(worked["examples"]))


def check_exercise(ex: Exercise, timeout: float = DEFAULT_TIMEOUT, mutate: bool = True) -> dict:
    """Everything `check` verifies about one exercise; problems are listed in "problems".

    The reference is accepted; the starter, every whole-file wrong variant and every mistake of
    mistakes.py are rejected, by both runners (the in-child one ``test`` uses and the isolated
    one ``verify`` uses, so a test means the same under both); the worked examples agree; and
    (``mutate``) every mutant of the reference is killed by some test or declared equivalent."""
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
    with tempfile.TemporaryDirectory(prefix="judge_mistakes_") as scratch:
        files = [("reference", ex.solution, ""), ("starter", ex.starter, "")] + [
            (f"wrong/{p.name}", p, _first_docstring_line(p)) for p in ex.wrong_variants]
        for mistake in ex.mistakes:   # generated into a file only now, to be judged
            try:
                generated = Path(scratch) / f"{mistake['name']}.py"
                generated.write_text(apply_mistake(ex, mistake), encoding="utf-8")
                files.append((f"mistake {mistake['name']}", generated, mistake.get("explain", "")))
            except (ValueError, KeyError) as exc:
                problems.append(f"mistakes.py: {exc}")
        import concurrent.futures  # here only: importing it (logging with it) costs every `test` 20 ms
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            reports = list(pool.map(lambda item: judge_file(ex, item[1], timeout=timeout,
                                                            first_failure=item[0] != "reference"), files))
            isolated = list(pool.map(lambda pair: _judge_isolated_like(ex, pair[0], pair[1], timeout),
                                     zip(files, reports, strict=True)))
    rows = []
    for (label, _, explain), report, alone in zip(files, reports, isolated, strict=True):
        expected_accepted = label == "reference"
        ok = (report["verdict"] == runner.ACCEPTED) == expected_accepted
        ok_isolated = (alone["verdict"] == runner.ACCEPTED) == expected_accepted
        if label not in ("reference", "starter") and report["verdict"] == runner.COMPILE:
            ok = False   # a wrong variant must be wrong in behaviour, not broken Python
        caught_by = [t["name"] for t in report["tests"] if t["verdict"] not in (runner.ACCEPTED, NOT_RUN)]
        rows.append({"file": label, "verdict": report["verdict"], "isolated_verdict": alone["verdict"],
                     "summary": report["summary"],
                     "ok": ok, "caught_by": [] if expected_accepted else caught_by, "mistake": explain})
        want = "accepted" if expected_accepted else "rejected"
        if not ok:
            problems.append(f"{label}: expected {want}, got {report['verdict']} ({report['summary']})")
        if not ok_isolated:
            problems.append(f"{label}: expected {want} by the isolated runner too, got {alone['verdict']} "
                            f"({alone['summary']})")
        rows[-1]["ok"] = ok and ok_isolated
    if len(ex.wrong_variants) + len(ex.mistakes) < 3:
        problems.append(f"only {len(ex.wrong_variants) + len(ex.mistakes)} known mistakes (want at least 3)")
    seal = load_seal(ex.folder.parent)
    if ex.folder.parent == PRACTICE and seal.get(_seal_key(ex.tests)) != _sha(ex.tests.read_bytes()):
        problems.append("test.py is not sealed as it is: run `python practice/judge.py seal` after editing it")
    if ex.folder.parent == PRACTICE and seal.get(_examples_key(ex)) != examples_sha(ex):
        problems.append("the worked examples of problem.md are not sealed as they are: run "
                        "`python practice/judge.py seal` after editing them")
    result = {"exercise": ex.number, "title": ex.title, "ok": not problems, "problems": problems,
              "examples": len(examples), "worked_examples": examples_run, "files": rows}
    if mutate:
        stale = mutation.report_problem(ex, ex.folder.parent)
        if stale is None:   # the committed report vouches for these very files: nothing to re-run
            entry = mutation.load_report(ex.folder.parent)[ex.name]
            result["mutation"] = {"exercise": ex.number, "from_report": True, "generated": entry["generated"],
                                  "killed": entry["killed"], "equivalent": entry["equivalent"], "survivors": [],
                                  "stale_declarations": [], "seconds": 0.0, "time_limit": 0.0}
            return result
        mutants = mutation.mutate_exercise(ex, runner, judge_file)   # its files changed: re-run it
        result["mutation"] = {k: v for k, v in mutants.items() if k != "mutants"}
        result["mutation"]["report"] = stale
        for mid in mutants["survivors"]:
            problems.append(f"mutant survives every test: {mid}")
        for mid in mutants["stale_declarations"]:
            problems.append(f"{mutation.EQUIVALENT_FILE}: {mid!r} is not a surviving mutant (any more)")
        result["ok"] = not problems
    return result


def _judge_isolated_like(ex: Exercise, item: tuple, report: dict, timeout: float) -> dict:
    """check's isolated judging of one file, after the in-child one (``report``). The reference:
    every test. A file the in-child runner rejected in a test: that test first, alone -- it must
    reject the file under the isolated runner too, which is what check asks of a wrong file; only
    where it does not are the tests run in order up to the first failure. Each mistake's random
    tests then cost one isolated run of the test that catches it, not of every test before it."""
    label, path, _ = item
    caught = [t["name"] for t in report.get("tests", []) if t["verdict"] not in (runner.ACCEPTED, NOT_RUN)]
    if label != "reference" and caught and not report.get("load_error"):
        alone = judge_file(ex, path, timeout=timeout, isolated=True, only=caught[:1])
        if alone["verdict"] != runner.ACCEPTED:
            return alone
    return judge_file(ex, path, timeout=timeout, isolated=True, first_failure=label != "reference")


def _first_docstring_line(path: Path) -> str:
    try:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    except SyntaxError:
        return ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _mutation_line(r: dict) -> str:
    where = ("from the committed report, files unchanged" if r.get("from_report")
             else f"{r['seconds']:.1f} s, {r['time_limit']:g} s of CPU time each")
    return (f"{r['exercise']}: {r['generated']} mutants, {r['killed']} killed, {len(r['equivalent'])} declared "
            f"equivalent, {len(r['survivors'])} surviving ({where})")


# --------------------------------------------------------------------------------------------
# doctor


def _package_version(name: str) -> str | None:
    import importlib.metadata  # doctor only: 25 ms of every other command
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
    imported = subprocess.run([sys.executable, "-c", "import nano_engine, sys; print(nano_engine.__file__)"],
                              capture_output=True, text=True, timeout=120)
    detail = (imported.stdout.strip() if imported.returncode == 0
              else (imported.stderr.strip().splitlines() or ["?"])[-1])
    row("nano_engine", imported.returncode == 0, f"imports from {detail}" if imported.returncode == 0
        else f"does not import: {detail} (use the project's .venv/bin/python; set it up with `make lab`)", False)
    return {"ok": all(r["ok"] for r in rows if r["required"]), "checks": rows}


# --------------------------------------------------------------------------------------------
# Command line


def _print_json(data: object) -> None:
    print(json.dumps(data, indent=1))


def positive_seconds(text: str) -> float:
    """argparse type of --timeout: a number of seconds above zero, up to MAX_TIMEOUT."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= MAX_TIMEOUT:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds up to {MAX_TIMEOUT:g} "
                                         f"(an hour per test), got {text}")
    return value


def _machine_memory_mb() -> int:
    """This machine's memory in MiB (1 TiB where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    except (AttributeError, ValueError, OSError):
        return 2**20


def memory_mib(text: str) -> int:
    """argparse type of --memory: MiB between MIN_MEMORY_MB and this machine's memory (the judge
    reads the code's answers within the same amount, so an absurd limit is refused)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of MiB: {text!r}") from None
    if not MIN_MEMORY_MB <= value <= _machine_memory_mb():
        raise argparse.ArgumentTypeError(f"must be between {MIN_MEMORY_MB} and {_machine_memory_mb()} MiB "
                                         f"(this machine's memory), got {text}")
    return value


COMMANDS = ("list", "start", "test", "solution", "mistakes", "check", "mutate", "seal", "verify", "doctor")


def main(argv: list[str] | None = None) -> int:
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="replace")
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    if first is not None and first not in COMMANDS and argv.index(first) == 0:
        try:   # `judge.py 21`: the reader meant to test exercise 21
            ex = get_exercise(first)
            print(f"judge.py: {first!r} is an exercise, not a command; did you mean\n"
                  f"    python practice/judge.py test {first}      (judge your file)\n"
                  f"    python practice/judge.py start {first}     (begin it; exercise {ex.number})", file=sys.stderr)
            return 2
        except UsageError:
            pass
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
        p.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT,
                       help="seconds per test (default 10)")
        p.add_argument("--memory", type=memory_mib, default=DEFAULT_MEMORY_MB,
                       help="memory limit in MiB (default 2048)")
        p.add_argument("--isolated", action="store_true",
                       help="the tests in the judge's process, your code behind a proxy (what verify uses; slower)")
        if name == "test":
            p.add_argument("--file", help="judge this file instead of the workspace file")
        else:
            p.add_argument("--show", action="store_true", help="also print the reference code")
    add("mistakes", "the classic mistakes of an exercise, each as a diff of the reference", exercise=True)
    p = add("check", "verify every exercise: reference accepted, starter and mistakes rejected, no surviving mutant")
    p.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT, help=argparse.SUPPRESS)
    p.add_argument("--no-mutate", action="store_true", help="skip mutation testing (faster)")
    p = add("mutate", "mutation testing: every mutant of the reference must fail some test")
    p.add_argument("exercise", nargs="?", help="one exercise (default: all)")
    p.add_argument("--all-mutants", action="store_true", help="list every mutant, not only survivors")
    add("seal", "record the hashes of runner.py, proxy.py, every test.py and worked examples (after editing one)",
        json_flag=False)
    p = add("verify", "re-judge every exercise recorded as accepted; report records that do not hold")
    p.add_argument("exercise", nargs="?", help="one exercise (default: every recorded one)")
    add("doctor", "Python, packages and tools the practice needs")
    args = parser.parse_args(argv)
    workspace = workspace_dir(args.workspace)
    if args.command in ("check", "test", "solution"):
        try:
            _start_zygote([get_exercise(args.exercise)] if getattr(args, "exercise", None) else find_exercises())
        except UsageError:
            pass   # reported by _dispatch
    try:
        return _dispatch(args, workspace)
    except UsageError as exc:
        if getattr(args, "json", False):
            _print_json({"error": str(exc)})
        else:
            print(f"judge.py: {exc}", file=sys.stderr)
        return 2


def _start_zygote(chosen: list[Exercise]) -> None:
    """Fork the copy of this process that the reader's processes are forked from, after importing
    the libraries the tests of ``chosen`` import (exercise 01's torch): the children inherit them.
    Called before any thread starts (check's pool, the watchdog)."""
    proxy = _proxy()
    for ex in chosen:
        for name in runner._test_imports(ex.tests.read_text(encoding="utf-8")) if ex.tests.exists() else []:
            try:
                __import__(name)
            except Exception:   # reported when test.py loads
                pass
    proxy.start_zygote(str(PRACTICE / "runner.py"))


def _dispatch(args: argparse.Namespace, workspace: Path) -> int:
    if args.command == "list":
        status = load_status(workspace)
        rows = [{"number": e.number, "title": e.title + (" (optional)" if e.optional else ""),
                 "difficulty": e.difficulty, "chapter": e.chapter, "optional": e.optional,
                 "status": reader_status(e, workspace, status), "folder": e.name} for e in find_exercises()]
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
        report = judge_file(ex, path, examples_only=args.run, timeout=args.timeout, memory_mb=args.memory,
                            isolated=args.isolated)
        accepted = report["verdict"] == runner.ACCEPTED and report["judged"]["sealed"]
        if args.command == "test" and accepted:
            mine = ex.workspace_file(workspace)
            if args.run:
                why_not = (f"the examples alone are not an acceptance: `python practice/judge.py test {ex.number}` "
                           "runs every test")
            elif Path(path).resolve() != mine.resolve():
                why_not = (f"only your workspace file ({_display_path(mine)}) is recorded; --file judges any file "
                           "without recording it")
            else:
                why_not = remember_accepted(workspace, ex, Path(path), report["judged"])
            report["recorded"] = why_not is None
            if why_not is not None:
                report["not_recorded"] = why_not
            else:
                report["record"] = str(workspace / STATUS_FILE)
        if args.json:
            _print_json(report)
        else:
            if args.command == "solution" and args.show:
                print(ex.solution.read_text(encoding="utf-8"))
            print(format_report(report))
        return 0 if accepted else 1

    if args.command == "mistakes":
        ex = get_exercise(args.exercise)
        rows = [{"name": m["name"], "explain": m.get("explain", ""), "diff": mistake_diff(ex, m)} for m in ex.mistakes]
        rows += [{"name": p.stem, "explain": _first_docstring_line(p), "file": str(p)} for p in ex.wrong_variants]
        if args.json:
            _print_json(rows)
        else:
            for r in rows:
                print(f"## {r['name']}: {r['explain']}")
                print(r.get("diff") or f"(a whole rewrite: {_display_path(r['file'])})")
        return 0

    if args.command == "seal":
        print(f"wrote {_display_path(write_seal())}")
        return 0

    if args.command == "verify":
        rows = verify_records(workspace, get_exercise(args.exercise) if args.exercise else None)
        ok = all(r["holds"] for r in rows)
        if args.json:
            _print_json({"ok": ok, "records": rows})
        else:
            for r in rows:
                print(f"{ {'holds': 'holds  ', 'stale': 'stale  ', 'broken': 'BROKEN '}[r['state']]} {r['exercise']}  "
                      f"{_display_path(r['file'])}")
                for problem in r["problems"]:
                    print(f"        {'!' if r['state'] == 'broken' else '-'} {problem}")
            stale = sum(r["stale"] for r in rows)
            summary = ("some do not hold" if not ok else "all hold" if not stale
                       else f"all hold ({stale} stale but still accepted)")
            print(f"\n{len(rows)} accepted record(s) checked: {summary}" if rows else "no accepted records")
        return 0 if ok else 1

    if args.command == "mutate":
        chosen = [get_exercise(args.exercise)] if args.exercise else find_exercises()
        results = [mutation.mutate_exercise(ex, runner, judge_file) for ex in chosen]
        ok = all(not r["survivors"] and not r["stale_declarations"] for r in results)
        mutation.write_report(PRACTICE, {ex.name: mutation.report_entry(ex, r) for ex, r in zip(chosen, results, strict=True)})
        if args.json:
            _print_json({"ok": ok, "exercises": results})
        else:
            for r in results:
                print(_mutation_line(r))
                for m in r["mutants"]:
                    if args.all_mutants or not (m["killed"] or "equivalent" in m):
                        state = ("killed by " + str(m["by"])) if m["killed"] else (
                            "equivalent: " + m["equivalent"] if "equivalent" in m else "SURVIVES")
                        print(f"       line {m['line']:>3}  {m['id']}  -- {state}")
                for mid in r["stale_declarations"]:
                    print(f"     ! {mutation.EQUIVALENT_FILE} declares {mid!r}, which is not a surviving mutant")
            print(f"\n{'no surviving mutants' if ok else 'surviving mutants (write a test, or declare them equivalent)'}")
        return 0 if ok else 1

    if args.command == "check":
        results = [check_exercise(ex, timeout=args.timeout, mutate=not args.no_mutate) for ex in find_exercises()]
        ok = bool(results) and all(r["ok"] for r in results)
        if args.json:
            _print_json({"ok": ok, "exercises": results})
        else:
            for r in results:
                mark = "ok  " if r["ok"] else "FAIL"
                files = r.get("files", [])
                wrong = [f for f in files if f["file"] not in ("reference", "starter")]
                print(f"{mark} {r['exercise']} {r.get('title', '')}: "
                      f"reference {files[0]['verdict'] if files else '?'}, "
                      f"starter {'rejected' if len(files) > 1 and files[1]['ok'] else 'NOT rejected'}, "
                      f"{sum(f['ok'] for f in wrong)}/{len(wrong)} mistakes rejected, "
                      f"{r.get('examples', 0)} example tests, {r.get('worked_examples', 0)} worked examples checked")
                for f in wrong:
                    print(f"       {'rejected' if f['ok'] else 'ACCEPTED'}  {f['file']}: {f['mistake']}"
                          f"  (caught by {', '.join(f['caught_by'][:3]) or 'nothing'})")
                if r.get("mutation"):
                    print("     " + _mutation_line(r["mutation"]))
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


def _leave(code: int) -> None:
    """End the judge without the interpreter's teardown, which frees every module one by one (a
    judge that imported torch for exercise 01's tests spent 0.4 s of CPU on it): the output is
    flushed, the zygote ended, and every file the judge wrote was closed where it was written."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a reader that stopped reading: nothing is wrong
            pass
    if "practice_proxy" in sys.modules:
        sys.modules["practice_proxy"].stop_zygote()
    os._exit(code)


if __name__ == "__main__":
    try:
        code = main()
    except BrokenPipeError:   # `judge.py ... | head`: the reader stopped reading, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    except KeyboardInterrupt:
        print("judge.py: interrupted", file=sys.stderr)
        code = 130
    except Exception as exc:  # the judge ends with a verdict or one line, never a traceback
        if os.environ.get("JUDGE_TRACEBACK"):
            raise
        print(f"judge.py: internal error: {type(exc).__name__}: {str(exc)[:300]} "
              "(run with JUDGE_TRACEBACK=1 to see where, and please report it)", file=sys.stderr)
        code = 3
    _leave(code)
