"""runner.py -- the judge's test-running core. Standard library only, and no subprocess.

It imports the reader's file as the module ``solution_under_test``, loads an exercise's
``test.py`` with its ``assert`` statements rewritten so that a failure remembers both sides of
the comparison, runs the ``test_*`` functions in the order they are written, and describes every
outcome as a plain dict (JSON-ready): the verdict, the failing line, expected vs got, and the
local variables of the frame that failed.

Nothing here starts a process, so the same functions can run inside the notebook kernel or in a
browser (Pyodide). Isolation -- a separate process, a time limit, a memory limit -- belongs to the
caller: ``practice/judge.py`` runs this file as a child process (see ``child_main`` at the bottom).

Verdicts, per test and overall:
    accepted       the test passed
    wrong answer   an assertion in test.py failed: the code ran but gave the wrong result
    runtime error  the code raised an exception (or a required function is missing)
    compile error  the file is not valid Python
    timeout        the test did not finish within the time limit (set by the child process)
"""

from __future__ import annotations

import ast
import contextlib
import io
import itertools
import json
import os
import reprlib
import sys
import threading
import time
import traceback
import types
from collections import OrderedDict
from pathlib import Path
from typing import Callable

SOLUTION_MODULE = "solution_under_test"   # test.py files import the reader's code under this name
TESTS_MODULE = "exercise_tests"
ACCEPTED, WRONG, RUNTIME, COMPILE, TIMEOUT = (
    "accepted", "wrong answer", "runtime error", "compile error", "timeout")
REPR_LIMIT = 240
MAX_LOCALS = 20
STDOUT_LIMIT = 2000


# --------------------------------------------------------------------------------------------
# Describing values and frames


class _BoundedRepr(reprlib.Repr):
    """reprlib's size limits (a 10-million-element list is shown by its first items, without
    building the whole string), extended to the containers the exercises use."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = self.maxdeque = 40
        self.maxdict = 20
        self.maxstring = self.maxother = REPR_LIMIT
        self.maxlong = 60
        self.maxlevel = 4

    def repr_dict(self, x: dict, level: int) -> str:
        # reprlib sorts the keys; here insertion order is information (a free queue, an LRU)
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        items = [f"{self.repr1(k, level - 1)}: {self.repr1(v, level - 1)}"
                 for k, v in itertools.islice(x.items(), self.maxdict)]
        return "{" + ", ".join(items) + (", ...}" if len(x) > self.maxdict else "}")

    def repr_OrderedDict(self, x: OrderedDict, level: int) -> str:
        return f"OrderedDict({self.repr_dict(x, level)})"

    def repr_instance(self, x: object, level: int) -> str:
        cls = type(x)
        if (cls.__repr__ is object.__repr__ and cls.__module__ in (SOLUTION_MODULE, TESTS_MODULE)
                and isinstance(getattr(x, "__dict__", None), dict)):
            # The reader's own classes rarely define __repr__; their attributes say far more
            # than <PrefixCachingBlockPool object at 0x7f...>.
            if level <= 0:
                return f"{cls.__name__}(...)"
            fields = ", ".join(f"{k}={_truncate(self.repr1(v, level - 1), 80)}"
                               for k, v in vars(x).items() if not k.startswith("__"))
            return f"{cls.__name__}({fields})"
        return _truncate(repr(x), self.maxother)


_REPR = _BoundedRepr()


def safe_repr(value: object, limit: int = REPR_LIMIT) -> str:
    """repr() that never raises, never floods the screen, and stays fast on huge containers."""
    try:
        text = _REPR.repr(value)
    except Exception as exc:  # a broken __repr__ in the reader's code must not break the judge
        text = f"<repr failed: {type(exc).__name__}: {exc}>"
    return _truncate(text, limit)


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def frame_locals(frame: types.FrameType) -> dict[str, str]:
    """The interesting local variables of a frame, as short reprs."""
    shown = {}
    for name, value in list(frame.f_locals.items()):
        if name == "_" or name.startswith(("@", "__")) or isinstance(value, (types.ModuleType, type, types.FunctionType)):
            continue   # rewriter temporaries, modules, classes and functions say nothing about the failure
        shown[name] = safe_repr(value)
        if len(shown) == MAX_LOCALS:
            break
    return shown


def _same_file(a: str, b: str | None) -> bool:
    return b is not None and os.path.normcase(os.path.abspath(a)) == os.path.normcase(os.path.abspath(b))


def _source_line(path: str, lineno: int) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for i, line in enumerate(f, 1):
                if i == lineno:
                    return line.strip()
    except OSError:
        pass
    return ""


def describe_frame(frame: types.FrameType, lineno: int, label: str) -> dict:
    return {"file": label, "path": frame.f_code.co_filename, "lineno": lineno,
            "function": frame.f_code.co_name,
            "line": _source_line(frame.f_code.co_filename, lineno), "locals": frame_locals(frame)}


# --------------------------------------------------------------------------------------------
# Assertion rewriting: `assert got == expected` keeps both sides


class AssertionFailure(AssertionError):
    """Raised by a rewritten ``assert``; carries what was compared."""

    def __init__(self, expression: str, op: str | None, got: object, expected: object, message: object):
        super().__init__(message if message is not None else expression)
        self.expression, self.op, self.got, self.expected, self.message = expression, op, got, expected, message


_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
        ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}


class _RewriteAsserts(ast.NodeTransformer):
    """Turn ``assert left op right, msg`` into code that evaluates each side once and, on failure,
    raises AssertionFailure(expression, op, left, right, msg) -- the same idea as pytest's
    assertion rewriting, small enough to read. Convention in test.py: ``assert got == expected``."""

    def __init__(self, source: str):
        self.source = source

    def visit_Assert(self, node: ast.Assert) -> list[ast.stmt]:
        text = ast.get_source_segment(self.source, node) or "assert"
        msg = node.msg if node.msg is not None else ast.Constant(None)
        test = node.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _OPS:
            sides = [("@got", test.left), ("@expected", test.comparators[0])]
            check = ast.Compare(ast.Name("@got", ast.Load()), test.ops, [ast.Name("@expected", ast.Load())])
            op = ast.Constant(_OPS[type(test.ops[0])])
        else:
            sides = [("@got", test)]
            check = ast.Name("@got", ast.Load())
            op = ast.Constant(None)
        failure = ast.Call(ast.Name("@AssertionFailure", ast.Load()),
                           [ast.Constant(text), op, ast.Name("@got", ast.Load()),
                            ast.Name("@expected", ast.Load()) if len(sides) == 2 else ast.Constant(None), msg], [])
        stmts: list[ast.stmt] = [ast.Assign([ast.Name(name, ast.Store())], value) for name, value in sides]
        stmts.append(ast.If(ast.UnaryOp(ast.Not(), check), [ast.Raise(failure, None)], []))
        for stmt in stmts:   # new nodes take the assert's line, so a traceback points at it
            ast.fix_missing_locations(ast.copy_location(stmt, node))
        return stmts


# --------------------------------------------------------------------------------------------
# Loading the reader's file and the tests


class LoadError(Exception):
    """The reader's file could not be loaded; ``info`` is the JSON-ready description."""

    def __init__(self, info: dict):
        super().__init__(info["message"])
        self.info = info


def load_module(path: str | os.PathLike, name: str = SOLUTION_MODULE) -> types.ModuleType:
    """Compile and execute a Python file as a fresh module (no bytecode cache is written).

    Raises LoadError with verdict "compile error" for invalid Python and "runtime error" when
    the file raises while it is being executed (module-level code).
    """
    path = str(path)
    try:
        source = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LoadError({"verdict": RUNTIME, "message": f"cannot read {path}: {exc}"}) from None
    try:
        code = compile(source, path, "exec")
    except SyntaxError as exc:
        pointer = ""
        if exc.text and exc.offset:
            pointer = exc.text.rstrip("\n") + "\n" + " " * (max(exc.offset, 1) - 1) + "^"
        raise LoadError({"verdict": COMPILE, "message": f"{type(exc).__name__}: {exc.msg}",
                         "lineno": exc.lineno, "line": (exc.text or "").strip(), "pointer": pointer}) from None
    except ValueError as exc:   # e.g. a NUL byte in the file
        raise LoadError({"verdict": COMPILE, "message": f"{type(exc).__name__}: {exc}"}) from None
    module = types.ModuleType(name)
    module.__file__ = path
    try:
        with registered(module, name):   # dataclasses look the module up while it executes
            exec(code, module.__dict__)
    except (Exception, SystemExit) as exc:
        where = _innermost(exc.__traceback__, path)
        info = {"verdict": RUNTIME, "message": _exception_text(exc) + " (while loading the file)"}
        if where is not None:
            info.update(lineno=where[1], line=_source_line(path, where[1]))
        raise LoadError(info) from None
    return module


def required_names(starter_path: str | os.PathLike) -> list[tuple[str, str | None, str]]:
    """The interface an exercise asks for: public top-level functions and classes of the
    starter, and the public methods of those classes, as (name, method or None, signature)."""
    tree = ast.parse(Path(starter_path).read_text(encoding="utf-8"))
    wanted = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            wanted.append((node.name, None, f"def {node.name}({ast.unparse(node.args)})"))
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            wanted.append((node.name, None, f"class {node.name}"))
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not item.name.startswith("_"):
                    wanted.append((node.name, item.name, f"def {item.name}({ast.unparse(item.args)})"))
    return wanted


def missing_names(module: types.ModuleType, starter_path: str | os.PathLike) -> list[str]:
    """Human-readable lines naming every function, class or method the file lacks."""
    missing = []
    for name, method, signature in required_names(starter_path):
        owner = getattr(module, name, None)
        if method is None and owner is None:
            missing.append(f"`{name}` is not defined (expected: {signature})")
        elif method is not None and owner is not None and not hasattr(owner, method):
            missing.append(f"class `{name}` has no method `{method}` (expected: {signature})")
    return missing


def load_tests(test_path: str | os.PathLike, module: types.ModuleType) -> list[tuple[str, Callable]]:
    """Load test.py with its asserts rewritten; return its ``test_*`` functions in file order.

    ``module`` is what ``import solution_under_test`` gives the tests while they load.
    """
    test_path = str(test_path)
    source = Path(test_path).read_text(encoding="utf-8")
    tree = _RewriteAsserts(source).visit(ast.parse(source, test_path))
    ast.fix_missing_locations(tree)
    tests = types.ModuleType(TESTS_MODULE)
    tests.__file__ = test_path
    tests.__dict__["@AssertionFailure"] = AssertionFailure
    with registered(module):
        exec(compile(tree, test_path, "exec"), tests.__dict__)
    return [(name, obj) for name, obj in tests.__dict__.items()
            if name.startswith("test_") and isinstance(obj, types.FunctionType) and obj.__module__ == TESTS_MODULE]


def is_example(name: str) -> bool:
    """Tests named ``test_example*`` are the quick samples (``judge.py test N --run``)."""
    return name.startswith("test_example")


# --------------------------------------------------------------------------------------------
# Running one test


def _exception_text(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _innermost(tb: types.TracebackType | None, path: str | None) -> tuple[types.FrameType, int] | None:
    """The innermost traceback entry whose code lives in ``path``."""
    found = None
    while tb is not None:
        if _same_file(tb.tb_frame.f_code.co_filename, path):
            found = (tb.tb_frame, tb.tb_lineno)
        tb = tb.tb_next
    return found


def _first_difference(got: object, expected: object) -> str | None:
    """For two sequences or mappings that differ, say where -- long lists are hard to eyeball."""
    if isinstance(got, (list, tuple, str)) and isinstance(expected, (list, tuple, str)):
        for i, (a, b) in enumerate(zip(got, expected)):
            if a != b:
                return f"first difference at index {i}: got {safe_repr(a, 80)}, expected {safe_repr(b, 80)}"
        if len(got) != len(expected):
            return f"lengths differ: got {len(got)} items, expected {len(expected)}"
    if isinstance(got, dict) and isinstance(expected, dict):
        extra, lacking = set(got) - set(expected), set(expected) - set(got)
        if extra or lacking:
            return f"keys only in got: {safe_repr(sorted(extra, key=repr), 80)}; only in expected: {safe_repr(sorted(lacking, key=repr), 80)}"
    return None


def describe_failure(exc: BaseException, test_path: str, solution_path: str | None) -> dict:
    """Classify an exception raised by a test and describe it for the reader."""
    test_where = _innermost(exc.__traceback__, test_path)
    your_where = _innermost(exc.__traceback__, solution_path)
    in_test = test_where is not None and (your_where is None or _raised_in(exc.__traceback__, test_path))
    failure: dict = {}
    if isinstance(exc, AssertionError) and in_test:
        verdict = WRONG
        if isinstance(exc, AssertionFailure):
            failure["expression"] = exc.expression
            if exc.message is not None:
                failure["message"] = str(exc.message)
            if exc.op is None:
                failure["expected"], failure["got"] = "a true value", safe_repr(exc.got)
            else:
                failure["got"] = safe_repr(exc.got)
                failure["expected"] = safe_repr(exc.expected) if exc.op == "==" else f"{exc.op} {safe_repr(exc.expected)}"
                hint = _first_difference(exc.got, exc.expected) if exc.op == "==" else None
                if hint:
                    failure["difference"] = hint
        elif str(exc):
            failure["message"] = str(exc)
        message = failure.get("message") or "assertion failed"
    else:
        verdict = RUNTIME
        message = _exception_text(exc)
        if isinstance(exc, NotImplementedError) and your_where is not None:
            message += " -- this is still the starter's placeholder; write the body"
        failure["exception"] = type(exc).__name__
    if test_where is not None:
        failure["test"] = describe_frame(*test_where, "test.py")
    if your_where is not None:
        failure["yours"] = describe_frame(*your_where, "your file")
    failure["traceback"] = [
        {"file": "test.py" if _same_file(fs.filename, test_path) else "your file", "lineno": fs.lineno,
         "function": fs.name, "line": (fs.line or "").strip()}
        for fs in traceback.extract_tb(exc.__traceback__)
        if _same_file(fs.filename, test_path) or _same_file(fs.filename, solution_path)][-8:]
    return {"verdict": verdict, "message": message, "failure": failure}


def _raised_in(tb: types.TracebackType | None, path: str) -> bool:
    """True when the last traceback entry (where the exception was raised) is in ``path``."""
    last = None
    while tb is not None:
        last, tb = tb, tb.tb_next
    return last is not None and _same_file(last.tb_frame.f_code.co_filename, path)


def run_test(name: str, func: Callable, test_path: str, solution_path: str | None) -> dict:
    """Run one test function; return {"name", "verdict", "message", "failure", "stdout", "seconds"}."""
    out = io.StringIO()
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            func()
        result = {"verdict": ACCEPTED, "message": "", "failure": None}
    except (Exception, SystemExit) as exc:   # SystemExit: the reader's code called exit()
        result = describe_failure(exc, test_path, solution_path)
    result = {"name": name, **result, "seconds": round(time.perf_counter() - start, 4)}
    printed = out.getvalue()
    if printed:
        result["stdout"] = _truncate(printed, STDOUT_LIMIT)
    return result


def summarize(results: list[dict]) -> dict:
    """Overall verdict and counts. Accepted only when every test passed (and there was one)."""
    passed = sum(r["verdict"] == ACCEPTED for r in results)
    failed = len(results) - passed
    first_bad = next((r["verdict"] for r in results if r["verdict"] != ACCEPTED), None)
    verdict = first_bad or (ACCEPTED if results else RUNTIME)
    return {"verdict": verdict, "passed": passed, "failed": failed, "summary": f"{passed} passed, {failed} failed"}


def run_tests(test_path: str | os.PathLike, module: types.ModuleType, *, examples_only: bool = False,
              only: list[str] | None = None, solution_path: str | None = None,
              on_event: Callable[[dict], None] | None = None) -> dict:
    """Run an exercise's tests against an already loaded module, in this process.

    ``solution_path`` is the file the module came from (to point at the reader's lines); pass
    None for a module assembled in memory, e.g. one exposing a nano_engine class.
    ``on_event`` receives {"event": "start", "test": name} before each test and
    {"event": "result", **result} after it (the child process streams these to the judge).
    """
    test_path = str(test_path)
    solution_path = solution_path or getattr(module, "__file__", None)
    with registered(module):
        tests = select_tests(load_tests(test_path, module), examples_only=examples_only, only=only)
        results = []
        for name, func in tests:
            if on_event:
                on_event({"event": "start", "test": name})
            result = run_test(name, func, test_path, solution_path)
            results.append(result)
            if on_event:
                on_event({"event": "result", **result})
    return {**summarize(results), "tests": results}


@contextlib.contextmanager
def registered(module: types.ModuleType, name: str = SOLUTION_MODULE):
    """Make ``import solution_under_test`` give ``module`` for a while (then restore)."""
    previous = sys.modules.get(name)
    sys.modules[name] = module
    try:
        yield module
    finally:
        if previous is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = previous


def select_tests(tests: list[tuple[str, Callable]], *, examples_only: bool = False,
                 only: list[str] | None = None) -> list[tuple[str, Callable]]:
    if examples_only:
        tests = [(n, f) for n, f in tests if is_example(n)]
    if only is not None:
        wanted = set(only)
        tests = [(n, f) for n, f in tests if n in wanted]
    return tests


def judge_in_process(test_path: str | os.PathLike, solution_path: str | os.PathLike,
                     starter_path: str | os.PathLike | None = None, *, examples_only: bool = False) -> dict:
    """Load a file and run the tests on it in this process (no time limit): the whole judge minus
    isolation, e.g. for a browser. Returns the same report shape as the child process produces."""
    try:
        module = load_module(solution_path)
        missing = missing_names(module, starter_path) if starter_path else []
        if missing:
            raise LoadError({"verdict": RUNTIME, "message": "missing: " + "; ".join(missing)})
    except LoadError as exc:
        return not_run_report(list_test_names(test_path, examples_only=examples_only), exc.info)
    return run_tests(test_path, module, examples_only=examples_only, solution_path=str(solution_path))


def not_run_report(names: list[str], load_error: dict) -> dict:
    """The report for a file that did not load: every test fails with the load error's verdict."""
    results = [{"name": n, "verdict": load_error["verdict"], "message": "not run: the file did not load",
                "failure": None, "seconds": 0.0} for n in names]
    return {**summarize(results), "verdict": load_error["verdict"], "load_error": load_error, "tests": results}


def list_test_names(test_path: str | os.PathLike, *, examples_only: bool = False) -> list[str]:
    """The names of an exercise's tests, found without importing anything (for reports about a
    file that did not load)."""
    tree = ast.parse(Path(test_path).read_text(encoding="utf-8"))
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    return [n for n in names if is_example(n)] if examples_only else names


# --------------------------------------------------------------------------------------------
# Child process entry point (used by judge.py; the only part that deals with time limits)


def _where_stuck(frame: types.FrameType | None, solution_path: str, test_path: str) -> dict | None:
    """Where a running thread is: the innermost frame in the reader's file, else in test.py."""
    stack = []
    while frame is not None:
        stack.append(frame)
        frame = frame.f_back
    for path, label in ((solution_path, "your file"), (test_path, "test.py")):
        for f in stack:   # innermost first
            if _same_file(f.f_code.co_filename, path):
                return describe_frame(f, f.f_lineno, label)
    return None


def child_main(argv: list[str]) -> int:
    """``python runner.py '<json spec>'``: load, then stream JSON lines on stdout.

    spec: {"tests", "solution", "starter" (optional), "only", "examples_only", "timeout",
    "memory_mb"}. Events: ready | load_error | start | result | timeout | done. A watchdog thread
    enforces the per-test time limit and reports the line the code was stuck on.
    """
    spec = json.loads(argv[0])
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)   # anything the reader's code prints outside a test lands on stderr, not in the protocol
    write_lock = threading.Lock()

    def emit(event: dict) -> None:
        with write_lock:
            protocol.write(json.dumps(event) + "\n")
            protocol.flush()

    if spec.get("memory_mb"):
        try:
            import resource
            limit = int(spec["memory_mb"]) * 2**20
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ImportError, ValueError, OSError):
            pass   # not available on this platform: the time limit still holds

    solution, tests_path = spec["solution"], spec["tests"]
    timeout = float(spec.get("timeout") or 10)
    state = {"test": None, "deadline": time.monotonic() + timeout}
    main_thread = threading.get_ident()

    def watchdog() -> None:
        while True:
            time.sleep(0.02)
            if time.monotonic() > state["deadline"]:
                frame = sys._current_frames().get(main_thread)
                emit({"event": "timeout", "test": state["test"], "seconds": timeout,
                      "where": _where_stuck(frame, solution, tests_path)})
                os._exit(3)

    threading.Thread(target=watchdog, daemon=True).start()
    try:
        module = load_module(solution)
        missing = missing_names(module, spec["starter"]) if spec.get("starter") else []
        if missing:
            raise LoadError({"verdict": RUNTIME, "message": "missing: " + "; ".join(missing),
                             "missing": missing})
    except LoadError as exc:
        emit({"event": "load_error", **exc.info})
        return 0
    sys.modules[SOLUTION_MODULE] = module   # this process exists only to run these tests
    tests = select_tests(load_tests(tests_path, module), examples_only=spec.get("examples_only", False),
                         only=spec.get("only"))
    emit({"event": "ready", "tests": [name for name, _ in tests]})
    for name, func in tests:
        state.update(test=name, deadline=time.monotonic() + timeout)
        emit({"event": "start", "test": name})
        result = run_test(name, func, tests_path, solution)
        state["deadline"] = float("inf")
        emit({"event": "result", **result})
    emit({"event": "done"})
    protocol.close()
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
