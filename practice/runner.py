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
    refused        the file borrows its answer: it imports the package (nano_engine), or a
                   name the exercise asks for is not defined in the file itself
"""

from __future__ import annotations

import ast
import builtins
import collections
import contextlib
import hashlib
import itertools
import json
import os
import re
import reprlib
import sys
import sysconfig
import threading
import time
import traceback
import types
from pathlib import Path
from typing import Any, Callable, Iterable

# Bound now, before any reader's code runs: a solution that replaces time.perf_counter or
# hashlib.sha256 later does not change what the judge uses. The time limit is CPU time
# (process_time), so a busy machine neither kills a correct solution nor spares an endless loop.
_perf_counter, _cpu_clock, _sha256 = time.perf_counter, time.process_time, hashlib.sha256
try:   # the C encoder: json.JSONEncoder's Python methods could be replaced by the reader's code
    from _json import encode_basestring_ascii as _c_escape, make_encoder as _c_make_encoder
except ImportError:   # pragma: no cover -- a Python without the _json accelerator
    _c_make_encoder = None  # type: ignore[misc, assignment]


def _json_line(event: dict) -> str:
    if _c_make_encoder is None:   # pragma: no cover
        return json.dumps(event)
    encode = _c_make_encoder({}, _json_default, _c_escape, None, ":", ",", False, False, True)
    return "".join(encode(event, 0))


def _json_default(value: object) -> str:
    return safe_repr(value)

SOLUTION_MODULE = "solution_under_test"   # test.py files import the reader's code under this name
TESTS_MODULE = "exercise_tests"
ACCEPTED, WRONG, RUNTIME, COMPILE, TIMEOUT, REFUSED = (
    "accepted", "wrong answer", "runtime error", "compile error", "timeout", "refused")
PACKAGE = "nano_engine"   # holds every mechanism the exercises ask for: a learner's file may not use it
REPR_LIMIT = 240
MAX_LOCALS = 20
STDOUT_LIMIT = 2000
_STATE: dict[str, Any] = {"child": False}   # "child": True in the judge's child process (see child_main)


def _isolated(source: str) -> dict:
    """Define small helpers in a namespace of their own. Objects the reader's code can reach
    (sys.stdout while a test runs, sys.breakpointhook) are built here, so that their methods'
    ``__globals__`` lead nowhere near this module's functions."""
    namespace: dict = {"__builtins__": builtins, "__name__": "judge_helpers"}
    exec(compile(source, "<judge helpers>", "exec"), namespace)
    return namespace


_HELPERS = _isolated('''
class CapturedOutput:
    """What a test printed: the first `limit` characters are kept, the rest only counted (its
    characters and its line breaks), so printing megabytes costs neither memory nor a flooded
    report, and the report can say how much was cut."""
    encoding, errors = "utf-8", "replace"

    def __init__(self, limit):
        self.limit, self.parts, self.kept, self.dropped, self.dropped_lines = limit, [], 0, 0, 0

    def write(self, text):
        text = str(text)
        room = max(self.limit - self.kept, 0)
        if room:
            self.parts.append(text[:room])
            self.kept += min(len(text), room)
        if len(text) > room:
            self.dropped += len(text) - room
            self.dropped_lines += text.count("\\n", room)
        return len(text)

    def cut(self):
        """What was printed but not kept: {"characters", "lines"} (line breaks), or None."""
        return {"characters": self.dropped, "lines": self.dropped_lines} if self.dropped else None

    def total(self):
        """(characters, line breaks) printed in all, kept or not."""
        return self.kept + self.dropped, "".join(self.parts).count("\\n") + self.dropped_lines

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        pass

    def isatty(self):
        return False

    def getvalue(self):
        return "".join(self.parts)


def ignore_breakpoint(*args, **kwargs):
    print("breakpoint() ignored: the judge runs your code without a terminal")
''')


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

    def repr_OrderedDict(self, x: collections.OrderedDict, level: int) -> str:
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
    except BaseException as exc:  # noqa: B036 -- exit() in a __repr__: the reader's, in the child or by proxy
        if not (_STATE["child"] or getattr(type(exc), "learner_exception", False)):
            raise   # the judge's own: Ctrl-C, or the watchdog ending a test
        text = f"<repr failed: {type(exc).__name__}>"
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
        # the lines as ast.get_source_segment splits them (on \r\n, \r, \n), split once: it splits
        # the whole text again for every assert, in a Python loop (0.1 s for a 12 kB test.py)
        self.lines = re.findall(r".*?(?:\r\n|\r|\n)|.+\Z", source, re.S)

    def _segment(self, node: ast.AST) -> str | None:
        """ast.get_source_segment(self.source, node), from the lines split once."""
        end_lineno, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
        if end_lineno is None or end_col is None or node.lineno > len(self.lines) or end_lineno > len(self.lines):
            return None
        first, last = node.lineno - 1, end_lineno - 1
        if first == last:
            return self.lines[first].encode()[node.col_offset:end_col].decode()
        return "".join([self.lines[first].encode()[node.col_offset:].decode(), *self.lines[first + 1:last],
                        self.lines[last].encode()[:end_col].decode()])

    def visit_Assert(self, node: ast.Assert) -> list[ast.stmt]:
        text = self._segment(node) or "assert"
        msg = node.msg if node.msg is not None else ast.Constant(None)
        test = node.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _OPS:
            sides = [("@got", test.left), ("@expected", test.comparators[0])]
            pair: list[ast.expr] = [ast.Name("@got", ast.Load()), ast.Name("@expected", ast.Load())]
            check: ast.expr
            if isinstance(test.ops[0], (ast.Eq, ast.NotEq)):   # == decided by plain values, see plain_equal
                check = ast.Call(ast.Name("@plain_equal", ast.Load()), pair, [])
                if isinstance(test.ops[0], ast.NotEq):
                    check = ast.UnaryOp(ast.Not(), check)
            else:
                check = ast.Compare(pair[0], test.ops, [pair[1]])
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


def _own_eq(value: object, depth: int = 3, budget: list[int] | None = None) -> bool:
    """Whether ``value`` (or something inside a list, tuple, set or dict it holds) is of a class
    whose ``==`` is written in the reader's file."""
    budget = budget if budget is not None else [2000]
    budget[0] -= 1
    if getattr(type(value).__eq__, "__module__", None) == SOLUTION_MODULE:
        return True
    if depth == 0 or budget[0] <= 0 or type(value) not in (list, tuple, set, frozenset, dict):
        return False
    items: Iterable = itertools.chain(value.keys(), value.values()) if isinstance(value, dict) else value  # type: ignore[assignment]
    return any(_own_eq(v, depth - 1, budget) for v in itertools.islice(items, 2000))


def plain_equal(got: object, expected: object) -> bool:
    """``got == expected`` for a rewritten assert. A class in the reader's file whose ``__eq__``
    says "equal" to anything would pass every test; such a value equals only a value of its own
    class (tests compare plain lists, ints and tuples)."""
    if (_own_eq(got) or _own_eq(expected)) and type(got) is not type(expected):
        return False
    return bool(got == expected)


# --------------------------------------------------------------------------------------------
# Loading the reader's file and the tests


class LoadError(Exception):
    """The reader's file could not be loaded; ``info`` is the JSON-ready description."""

    def __init__(self, info: dict):
        super().__init__(info["message"])
        self.info = info


def _read_source(path: str) -> str:
    """The text of a regular file (opened without blocking: a named pipe put there cannot make the
    reader wait); LoadError when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not __import__("stat").S_ISREG(os.fstat(fd).st_mode):
                raise OSError("not a regular file")
            return f.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LoadError({"verdict": RUNTIME, "message": f"cannot read {path}: {exc}"}) from None


def load_module(path: str | os.PathLike, name: str = SOLUTION_MODULE, source: str | None = None) -> types.ModuleType:
    """Compile and execute a Python file as a fresh module (no bytecode cache is written).

    Raises LoadError with verdict "compile error" for invalid Python and "runtime error" when
    the file raises while it is being executed (module-level code).
    """
    path = str(path)
    if source is None:
        source = _read_source(path)
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
        info: dict[str, Any] = {"verdict": RUNTIME, "message": _exception_text(exc) + " (while loading the file)"}
        if isinstance(exc, BorrowedAnswer):
            info.update(verdict=REFUSED, message=str(exc))
        if where is not None:
            info.update(lineno=where[1], line=_source_line(path, where[1]))
        raise LoadError(info) from None
    return module


def required_names(starter_path: str | os.PathLike) -> list[tuple[str, str | None, str]]:
    """The interface an exercise asks for: public top-level functions and classes of the
    starter, and the public methods of those classes, as (name, method or None, signature)."""
    tree = parse_source(Path(starter_path).read_text(encoding="utf-8"), str(starter_path))
    wanted: list[tuple[str, str | None, str]] = []
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


_IMPORTING_CALLS = frozenset({"import_module", "__import__", "exec", "eval", "compile", "find_spec", "run_module",
                               "run_path", "spec_from_file_location", "reload", "getattr"})


def _names_package(node: ast.AST) -> bool:
    """A string constant in ``node`` that names the package or one of its modules."""
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and PACKAGE in n.value for n in ast.walk(node))


def borrowed_imports(source: str, filename: str = "<your file>") -> list[tuple[int, str]]:
    """Where the file takes code from the package, found without running it: ``import
    nano_engine...``, ``from nano_engine... import``, ``importlib.import_module("nano_engine...")``,
    ``__import__(...)``, ``exec``/``eval`` of such text, ``sys.modules["nano_engine..."]``, at
    module level or inside a function. (line number, source line) pairs; the file must be valid
    Python (a syntax error is reported as a compile error instead)."""
    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError):
        return []
    lines = source.splitlines()
    found = []
    for node in ast.walk(tree):
        hit = False
        if isinstance(node, ast.Import):
            hit = any(a.name == PACKAGE or a.name.startswith(PACKAGE + ".") for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            hit = node.level == 0 and bool(node.module) and (
                node.module == PACKAGE or node.module.startswith(PACKAGE + "."))   # type: ignore[union-attr]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            hit = name in _IMPORTING_CALLS and any(_names_package(a) for a in [*node.args, *node.keywords])
        elif isinstance(node, ast.Subscript):   # sys.modules["nano_engine.radix"]
            value = node.value
            hit = isinstance(value, ast.Attribute) and value.attr == "modules" and _names_package(node.slice)
        if hit:
            lineno = getattr(node, "lineno", 0)
            found.append((lineno, lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""))
    return sorted(set(found))


def borrowed_message(where: str) -> str:
    """The one paragraph that says why a borrowed answer is refused."""
    return (f"your file {where}. The exercise asks you to write the mechanism yourself, and the package "
            f"{PACKAGE} already holds it, so an answer that uses the package proves nothing and the judge does not "
            f"run it. No exercise needs {PACKAGE}: define every function and class the exercise asks for in "
            "your file (helpers of your own, in your file or beside it, are fine). To compare your code with "
            "the package's, do that in a notebook or a scratch file, not in the file you hand in.")


def _library_paths() -> tuple[str, ...]:
    return tuple({os.path.normcase(sysconfig.get_paths()[k]) for k in ("stdlib", "platstdlib")})


def borrowed_names(module: types.ModuleType, starter_path: str | os.PathLike) -> list[str]:
    """The names the exercise asks for that the file does not define itself: a function or class
    of the package (or built on one of its classes), or one imported from another file of the
    reader's (``from helpers import RadixCache``). A class made by the standard library for the
    file (a ``namedtuple``) counts as the file's own."""
    problems = []
    own = module.__name__
    path = getattr(module, "__file__", None)
    stdlib = _library_paths()
    for name, method, _ in required_names(starter_path):
        if method is not None:
            continue
        obj = getattr(module, name, None)
        if obj is None:
            continue   # missing_names says so
        for _ in range(100):   # a decorated function: the one the decorator wraps
            inner = getattr(obj, "__wrapped__", None) if not isinstance(obj, type) else None
            if inner is None:
                break
            obj = inner
        origin = getattr(obj, "__module__", None)
        if not isinstance(origin, str):
            origin = type(obj).__module__
        bases = [k for k in getattr(obj, "__mro__", ()) if str(getattr(k, "__module__", "")).split(".")[0] == PACKAGE]
        if origin.split(".")[0] == PACKAGE or bases:
            what = f"{bases[0].__module__}.{bases[0].__qualname__}" if bases else f"{origin}.{name}"
            problems.append(f"`{name}` is {'built on ' if bases and origin == own else ''}{what}")
            continue
        code = getattr(obj, "__code__", None)
        if isinstance(code, types.CodeType) and path is not None and not _same_file(code.co_filename, path):
            problems.append(f"`{name}` is defined in {code.co_filename}, not in your file")
        elif origin != own and isinstance(obj, type):
            source = getattr(sys.modules.get(origin), "__file__", None)
            if isinstance(source, str) and not os.path.normcase(os.path.abspath(source)).startswith(stdlib):
                problems.append(f"`{name}` is defined in {source}, not in your file")
    return problems


def load_solution(path: str | os.PathLike, starter_path: str | os.PathLike | None,
                  name: str = SOLUTION_MODULE) -> types.ModuleType:
    """Load the reader's file as the judge does before any test: refused (LoadError, verdict
    "refused") when it imports the package (seen in its source, before it runs) or when a name the
    exercise asks for is not its own; a runtime error when one is missing (``starter_path``)."""
    source = _read_source(str(path))
    imports = borrowed_imports(source, str(path))
    if imports:
        lineno, line = imports[0]
        raise LoadError({"verdict": REFUSED, "lineno": lineno, "line": line,
                         "message": borrowed_message(f"imports {PACKAGE} (line {lineno}: `{line}`)")})
    module = load_module(path, name, source=source)
    if starter_path:
        borrowed = borrowed_names(module, starter_path)     # first: a borrowed class refuses, whatever it lacks
        if borrowed:
            message = ("; ".join(borrowed) + ". Every function and class the exercise asks for must be defined in "
                       "the file you hand in (helpers it uses may live beside it).")
            if any(PACKAGE in b for b in borrowed):
                message = borrowed_message(f"takes its answer from {PACKAGE} ({'; '.join(borrowed)})")
            raise LoadError({"verdict": REFUSED, "message": message, "borrowed": borrowed})
        missing = missing_names(module, starter_path)
        if missing:
            raise LoadError({"verdict": RUNTIME, "message": "missing: " + "; ".join(missing), "missing": missing})
    return module


# ast.parse must not run in several threads at once in CPython 3.11 (python/cpython#106905: "AST
# constructor recursion depth mismatch"), and `judge.py check` judges files from a thread pool. So
# every parse of a test.py or starter.py goes through this lock, and each text is parsed (and its
# rewritten tests compiled) once per process.
_PARSE_LOCK = threading.Lock()
_PARSED: dict[tuple[str, str], Any] = {}


def _once(kind: str, source: str, make: Callable[[], Any]) -> Any:
    key = (kind, _sha256(source.encode("utf-8")).hexdigest())
    with _PARSE_LOCK:
        if key not in _PARSED:
            _PARSED[key] = make()
        return _PARSED[key]


def parse_source(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse`` under the lock, once per text (the tree is shared: never modify it)."""
    return _once("tree", source, lambda: ast.parse(source, filename))


def compile_tests(source: str, test_path: str) -> types.CodeType:
    """test.py with its asserts rewritten and compiled, once per text and path."""
    def make() -> types.CodeType:
        tree = _RewriteAsserts(source).visit(ast.parse(source, test_path))
        return compile(ast.fix_missing_locations(tree), test_path, "exec")
    return _once("code " + test_path, source, make)


def load_tests(test_path: str | os.PathLike, module: types.ModuleType,
               source: str | None = None, worked: dict | None = None) -> list[tuple[str, Callable]]:
    """Load test.py with its asserts rewritten; return its ``test_*`` functions in file order.

    ``module`` is what ``import solution_under_test`` gives the tests while they load;
    ``source``, when given, is the text to run (the judge passes the text it hashed).
    ``worked``: the worked examples of problem.md (``worked_example_cases``), which run first,
    as the test WORKED_EXAMPLE.
    """
    test_path = str(test_path)
    source = source if source is not None else Path(test_path).read_text(encoding="utf-8")
    code = compile_tests(source, test_path)
    tests = types.ModuleType(TESTS_MODULE)
    tests.__file__ = test_path
    tests.__dict__["@AssertionFailure"] = AssertionFailure
    tests.__dict__["@plain_equal"] = plain_equal
    with registered(module):
        exec(code, tests.__dict__)
    found = [(name, obj) for name, obj in tests.__dict__.items()
             if name.startswith("test_") and isinstance(obj, types.FunctionType) and obj.__module__ == TESTS_MODULE]
    if worked and worked.get("examples"):
        found.insert(0, (WORKED_EXAMPLE, worked_example_test(worked, module)))
    return found


# --------------------------------------------------------------------------------------------
# The worked examples of problem.md, run as a test (the statement's own example is never failed
# by an accepted file). Each ``>>>`` example runs as in an interactive session: the value of an
# expression statement is shown with repr(), and what the example's own code prints is shown too;
# what the reader's code prints is not part of the comparison (it lands in the test's output, as
# in any test). Output is compared with doctest's ELLIPSIS and NORMALIZE_WHITESPACE; an expected
# exception matches by its class (a subclass too): its message is the reference's wording.

WORKED_EXAMPLE = "test_example_worked_example"
_WORKED_HEADING = re.compile(r"^##\s+worked example", re.I)


# doctest's own grammar of an example (DocTestParser._EXAMPLE_RE and _EXCEPTION_RE): a ">>>" line,
# its "..." lines, then the expected output up to a blank line or the next ">>>"; an expected
# exception is a want that starts with the traceback header. Parsed here, without importing
# doctest (and pdb, unittest, inspect with it: 20 ms of every `judge.py test`).
_EXAMPLE = re.compile(r"""
    (?P<source>(?:^(?P<indent>[ ]*)>>>.*)(?:\n[ ]*\.\.\..*)*)\n?
    (?P<want>(?:(?![ ]*$)(?![ ]*>>>).+$\n?)*)""", re.MULTILINE | re.VERBOSE)
_EXCEPTION = re.compile(r"""
    ^Traceback\ \((?:most\ recent\ call\ last|innermost\ last)\):\s*$
    .*?
    ^(?P<msg>\w+.*)""", re.VERBOSE | re.MULTILINE | re.DOTALL)
_BLANK_OR_COMMENT = re.compile(r"^[ ]*(#.*)?$")


def _examples(text: str) -> list[dict]:
    """The examples of one fence, as doctest.DocTestParser().get_examples gives them."""
    found = []
    for m in _EXAMPLE.finditer(text):
        indent = len(m.group("indent"))
        source = "\n".join(line[indent + 4:] for line in m.group("source").split("\n"))
        if not source.endswith("\n"):
            source += "\n"
        want_lines = m.group("want").split("\n")
        if len(want_lines) > 1 and re.match(r" *$", want_lines[-1]):
            del want_lines[-1]
        want = "\n".join(line[indent:] for line in want_lines)
        if want and not want.endswith("\n"):
            want += "\n"
        if _BLANK_OR_COMMENT.match(source):   # a comment between examples: not an example
            continue
        exc = _EXCEPTION.match(want)
        found.append({"source": source, "want": want, "exc_msg": exc.group("msg") if exc else None,
                      "lineno": text.count("\n", 0, m.start())})
    return found


def worked_example_cases(problem_text: str) -> list[dict]:
    """The ``>>>`` examples of the ```python fences under the "## Worked example(s)" headings, as
    plain data: {"source", "want", "exc_msg", "lineno" (of the ``>>>`` line in problem.md)}."""
    lines = problem_text.splitlines()
    cases: list[dict] = []
    section = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = bool(_WORKED_HEADING.match(line))
        elif section and line.strip().startswith("```python"):
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith("```"):
                j += 1
            for example in _examples("\n".join(lines[i + 1:j]) + "\n"):
                cases.append({**example, "lineno": i + 2 + example["lineno"]})
            i = j
        i += 1
    return cases


class ExampleMismatch(AssertionError):
    """A worked example whose output differs: ``failure`` is the report's description."""

    def __init__(self, failure: dict):
        super().__init__(failure.get("message", ""))
        self.failure = failure


class _Displayed(ast.NodeTransformer):
    """An interactive session's rule: an expression statement's value is shown (not inside the
    functions and classes an example defines)."""

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        call = ast.Call(ast.Name("@display", ast.Load()), [node.value], [])
        return ast.copy_location(ast.Expr(ast.copy_location(call, node)), node)

    def visit_FunctionDef(self, node: ast.AST) -> ast.AST:
        return node

    visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = visit_FunctionDef


def _output_matches(want: str, got: str) -> bool:
    """doctest's comparison under NORMALIZE_WHITESPACE and ELLIPSIS."""
    want, got = " ".join(want.split()), " ".join(got.split())
    if want == got:
        return True
    pieces = want.split("...")
    if len(pieces) == 1:
        return False
    head, tail = pieces[0], pieces[-1]
    if len(head) + len(tail) > len(got) or not got.startswith(head) or not got.endswith(tail):
        return False
    at, end = len(head), len(got) - len(tail)
    for piece in pieces[1:-1]:
        at = got.find(piece, at, end)
        if at < 0:
            return False
        at += len(piece)
    return True


def _exception_matches(exc: BaseException, exc_msg: str, strict: bool) -> bool:
    if strict:   # the reference: its message too, as the statement prints it
        return _output_matches(exc_msg, traceback.format_exception_only(type(exc), exc)[-1])
    expected = exc_msg.split(":", 1)[0].strip().rsplit(".", 1)[-1]
    return any(k.__name__ == expected for k in type(exc).__mro__)


def worked_example_test(worked: dict, module: Any, strict: bool = False) -> Callable[[], None]:
    """The worked examples as one test function over ``module`` (the reader's, or its proxy).
    ``strict``: an expected exception's message must match too (the reference, in check)."""
    path, cases = worked["path"], worked["examples"]

    def test_example_worked_example() -> None:
        names: set[str] = set()
        for case in cases:
            names |= {n.id for n in ast.walk(ast.parse(case["source"])) if isinstance(n, ast.Name)}
        namespace: dict[str, Any] = {"__name__": "worked_example", "__builtins__": builtins}
        for name in sorted(names - set(vars(builtins))):
            try:
                namespace[name] = getattr(module, name)
            except Exception:   # a name the examples define themselves
                pass
        given = set(namespace)
        for case in cases:
            _run_example(case, namespace, path, strict, given)

    test_example_worked_example.judge_test_path = path   # type: ignore[attr-defined]
    return test_example_worked_example


def _run_example(case: dict, namespace: dict, path: str, strict: bool, given: set[str]) -> None:
    shown: list[str] = []

    def display(value: object) -> None:
        if value is not None:
            shown.append(repr(value) + "\n")

    def example_print(*args: object, sep: str | None = " ", end: str | None = "\n", file: Any = None,
                      flush: bool = False) -> None:
        if file is not None:
            print(*args, sep=sep, end=end, file=file, flush=flush)
        else:
            shown.append((" " if sep is None else sep).join(map(str, args)) + ("\n" if end is None else end))

    namespace["@display"], namespace["print"] = display, example_print
    tree = _Displayed().visit(ast.parse(case["source"], path, "exec"))
    ast.increment_lineno(tree, case["lineno"] - 1)   # a traceback names problem.md's own line
    code = compile(ast.fix_missing_locations(tree), path, "exec")
    raised: BaseException | None = None
    try:
        exec(code, namespace)
    except Exception as exc:   # exit(), a timeout: not an example's expected outcome
        if case["exc_msg"] is None:
            raise   # the reader's code raised: a runtime error at its line, called from this example
        raised = exc
    want = case["want"] if case["exc_msg"] is None else case["exc_msg"]
    got = "".join(shown)
    if case["exc_msg"] is not None:
        ok = raised is not None and _exception_matches(raised, case["exc_msg"], strict)
        if raised is not None:
            got += "".join(traceback.format_exception_only(type(raised), raised)[-1:])
        elif not got:
            got = "(no exception)"
    else:
        ok = _output_matches(want, got)
    if ok:
        return
    source = case["source"].rstrip("\n").split("\n")
    expression = "\n".join([">>> " + source[0]] + ["... " + line for line in source[1:]])
    local = {k: safe_repr(v) for k, v in list(namespace.items())[:200]
             if k not in given and not k.startswith(("@", "__")) and k != "print"
             and not isinstance(v, (types.ModuleType, type, types.FunctionType))}
    raise ExampleMismatch({
        "expression": expression, "message": "the worked example in problem.md gives another result",
        "expected": want.rstrip("\n") or "(nothing)", "got": got.rstrip("\n") or "(nothing)",
        "test": {"file": "problem.md", "path": path, "lineno": case["lineno"], "function": "worked example",
                 "line": ">>> " + source[0], "locals": dict(list(local.items())[:MAX_LOCALS])}})


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


_KINDS = (bool, int, float, str, bytes, list, tuple, collections.deque, dict, set, frozenset)   # bool before int
_SEQUENCES = (list, tuple, collections.deque)


def _kind(value: object) -> type:
    """The builtin kind of a value (a mirror of a list is a list, a named tuple a tuple)."""
    return next((k for k in _KINDS if isinstance(value, k)), type(value))


def _type_note(got: object, expected: object) -> str | None:
    """"types differ: expected a tuple, got a list (the same items)" -- brackets are easy to miss."""
    kind_got, kind_expected = _kind(got), _kind(expected)
    if kind_got is kind_expected or {kind_got, kind_expected} <= {bool, int, float}:
        return None
    article = lambda k: ("an " if k.__name__[0] in "aeiou" else "a ") + k.__name__   # noqa: E731
    note = f"types differ: expected {article(kind_expected)}, got {article(kind_got)}"
    if kind_got in _SEQUENCES and kind_expected in _SEQUENCES:
        try:
            if list(got) == list(expected):   # type: ignore[call-overload]
                note += " (the same items)"
        except Exception:
            pass
    return note


def _first_difference(got: object, expected: object) -> str | None:
    """For two values that differ, say how: their types, or where in a sequence or mapping --
    long lists are hard to eyeball."""
    parts = [_type_note(got, expected)]
    if isinstance(got, (list, tuple, str)) and isinstance(expected, (list, tuple, str)):
        for i, (a, b) in enumerate(zip(got, expected, strict=False)):
            if a != b:
                inner = _type_note(a, b)
                parts.append(f"first difference at index {i}: got {safe_repr(a, 80)}, expected {safe_repr(b, 80)}"
                             + (f" ({inner})" if inner else ""))
                break
        else:
            if len(got) != len(expected):
                parts.append(f"lengths differ: got {len(got)} items, expected {len(expected)}")
    if isinstance(got, dict) and isinstance(expected, dict):
        extra, lacking = set(got) - set(expected), set(expected) - set(got)
        if extra or lacking:
            parts.append(f"keys only in got: {safe_repr(sorted(extra, key=repr), 80)}; only in expected: "
                         f"{safe_repr(sorted(lacking, key=repr), 80)}")
    return "; ".join(p for p in parts if p) or None


def describe_failure(exc: BaseException, test_path: str, solution_path: str | None) -> dict:
    """Classify an exception raised by a test and describe it for the reader."""
    if isinstance(exc, ExampleMismatch):
        return {"verdict": WRONG, "message": exc.failure["message"], "failure": {**exc.failure, "traceback": []}}
    label = "problem.md" if os.path.basename(test_path) == "problem.md" else "test.py"
    test_where = _innermost(exc.__traceback__, test_path)
    your_where = _innermost(exc.__traceback__, solution_path)
    remote = getattr(exc, "remote_failure", None)   # raised by the reader's code in the judge's child process
    in_test = remote is None and test_where is not None and (
        your_where is None or _raised_in(exc.__traceback__, test_path))
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
    elif type(exc).__name__ == BorrowedAnswer.__name__ and isinstance(exc, PermissionError):
        verdict, message = REFUSED, str(exc)
        failure["exception"] = type(exc).__name__
    else:
        verdict = RUNTIME
        message = _exception_text(exc)
        if isinstance(exc, MemoryError) and not str(exc) and _STATE.get("memory_mb"):
            message += f": over the memory limit of your code ({_STATE['memory_mb']} MiB)"
        if isinstance(exc, NotImplementedError) and (your_where is not None or (remote or {}).get("yours")):
            message += " -- this is still the starter's placeholder; write the body"
        failure["exception"] = type(exc).__name__
    if test_where is not None:
        failure["test"] = describe_frame(*test_where, label)
    if your_where is not None:
        failure["yours"] = describe_frame(*your_where, "your file")
    elif remote and remote.get("yours"):
        failure["yours"] = remote["yours"]
    failure["traceback"] = [
        {"file": label if _same_file(fs.filename, test_path) else "your file", "lineno": fs.lineno,
         "function": fs.name, "line": (fs.line or "").strip()}
        for fs in traceback.extract_tb(exc.__traceback__)
        if _same_file(fs.filename, test_path) or _same_file(fs.filename, solution_path)][-8:]
    if remote:
        failure["traceback"] = (failure["traceback"] + list(remote.get("traceback") or []))[-8:]
    return {"verdict": verdict, "message": message, "failure": failure}


def _raised_in(tb: types.TracebackType | None, path: str) -> bool:
    """True when the last traceback entry (where the exception was raised) is in ``path``."""
    last = None
    while tb is not None:
        last, tb = tb, tb.tb_next
    return last is not None and _same_file(last.tb_frame.f_code.co_filename, path)


def run_test(name: str, func: Callable, test_path: str, solution_path: str | None, *, capture: bool = True) -> dict:
    """Run one test function; return {"name", "verdict", "message", "failure", "stdout", "seconds"}.

    Output is captured (bounded) and ``breakpoint()`` is a no-op that says so (``capture=False``:
    the caller collects the output, as the isolated judge does from the reader's process). Plain
    try/finally rather than contextlib: nothing the reader's code can patch stands between an
    assertion failing and the verdict.
    """
    test_path = getattr(func, "judge_test_path", test_path)   # problem.md for the worked example
    out = _HELPERS["CapturedOutput"](STDOUT_LIMIT)
    saved = sys.stdout, sys.stderr, sys.breakpointhook
    if capture:
        sys.stdout = sys.stderr = out
        sys.breakpointhook = _HELPERS["ignore_breakpoint"]
    start = _perf_counter()
    try:
        func()
        result = {"verdict": ACCEPTED, "message": "", "failure": None}
    except KeyboardInterrupt:
        if not _STATE["child"]:
            raise   # in a notebook kernel, Ctrl-C is the person, not the code
        result = describe_failure(KeyboardInterrupt("KeyboardInterrupt raised by the code"), test_path, solution_path)
    except BaseException as exc:  # noqa: B036 -- SystemExit (exit()) too: every way out is a verdict
        result = describe_failure(exc, test_path, solution_path)
    finally:
        if capture:
            sys.stdout, sys.stderr, sys.breakpointhook = saved
    result = {"name": name, **result, "seconds": round(_perf_counter() - start, 4)}  # type: ignore[dict-item]
    printed = out.getvalue()
    if printed:
        result["stdout"] = printed
        if out.cut():
            result["stdout_cut"] = out.cut()
    return result


EXIT_OUT_OF_MEMORY = 105   # a judge's child that ran out of memory outside every guard exits so


def describe_exit(status: int | None, memory_mb: int | None = None, cpu_seconds: float | None = None) -> str:
    """How a process of the reader's code ended, from its exit status as subprocess gives it (a
    negative number: the signal that killed it): which limit, or a crash, or an exit of its own."""
    import signal
    if status is None:
        return "it closed its end of the judge's pipe (or ended in a way the judge could not see)"
    if status < 0:
        sig = -status
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"
        if sig == getattr(signal, "SIGXCPU", None):
            limit = f" ({cpu_seconds:g} s)" if cpu_seconds else ""
            return f"it used up the CPU time of the whole run{limit}: the kernel's limit (RLIMIT_CPU) stopped it"
        if sig == signal.SIGKILL:
            return "it was killed (SIGKILL): the system's out-of-memory killer, or the judge's wall-clock limit"
        if sig in (signal.SIGSEGV, getattr(signal, "SIGBUS", -1), signal.SIGILL, signal.SIGFPE):
            return f"it crashed ({name}) in native code"
        if sig == signal.SIGABRT:
            limit = f" under the memory limit of {memory_mb} MiB" if memory_mb else ""
            return f"it aborted (SIGABRT): a library gave up, often for lack of memory{limit}"
        return f"it was ended by {name}"
    if status == EXIT_OUT_OF_MEMORY:
        return f"it ran over the memory limit of your code ({memory_mb} MiB)" if memory_mb else "it ran out of memory"
    return f"it exited with code {status} (os._exit(), or an error outside every test)"


def timeout_message(seconds: float, printed: tuple[int, int] = (0, 0)) -> str:
    """The message of a test that ran out of CPU time; ``printed``: (characters, line breaks) the
    test printed first. A lot of printing is named as the likely cause: a correct solution that
    prints megabytes is slow, not an endless loop."""
    chars, lines = printed
    text = f"did not finish within {seconds:g} s of CPU time"
    if chars >= 100_000:
        return (text + f": it printed {chars:,} characters ({lines:,} lines) first, and printing that much is slow; "
                "print less (or nothing) and run it again")
    if chars:
        return text + f" (an endless loop?); it printed {chars:,} characters ({lines:,} lines) first"
    return text + " (an endless loop?)"


def summarize(results: list[dict]) -> dict:
    """Overall verdict and counts. Accepted only when every test passed (and there was one)."""
    passed = sum(r["verdict"] == ACCEPTED for r in results)
    failed = len(results) - passed
    first_bad = next((r["verdict"] for r in results if r["verdict"] != ACCEPTED), None)
    verdict = first_bad or (ACCEPTED if results else RUNTIME)
    return {"verdict": verdict, "passed": passed, "failed": failed, "summary": f"{passed} passed, {failed} failed"}


def run_tests(test_path: str | os.PathLike, module: types.ModuleType, *, examples_only: bool = False,
              only: list[str] | None = None, solution_path: str | None = None,
              on_event: Callable[[dict], None] | None = None, worked: dict | None = None) -> dict:
    """Run an exercise's tests against an already loaded module, in this process.

    ``solution_path`` is the file the module came from (to point at the reader's lines); pass
    None for a module assembled in memory, e.g. one exposing a nano_engine class.
    ``on_event`` receives {"event": "start", "test": name} before each test and
    {"event": "result", **result} after it (the child process streams these to the judge).
    ``worked``: problem.md's worked examples, run first (``worked_example_cases``).
    """
    test_path = str(test_path)
    solution_path = solution_path or getattr(module, "__file__", None)
    with registered(module):
        tests = select_tests(load_tests(test_path, module, worked=worked), examples_only=examples_only, only=only)
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
                     starter_path: str | os.PathLike | None = None, *, examples_only: bool = False,
                     problem_path: str | os.PathLike | None = None) -> dict:
    """Load a file and run the tests on it in this process (no time limit): the whole judge minus
    isolation, e.g. for a browser. Returns the same report shape as the child process produces.
    The worked examples of ``problem_path`` (by default the problem.md beside test.py) run first."""
    problem = Path(problem_path) if problem_path else Path(test_path).with_name("problem.md")
    cases = worked_example_cases(problem.read_text(encoding="utf-8")) if problem.is_file() else []
    worked = {"path": str(problem), "examples": cases} if cases else None
    try:
        module = load_solution(solution_path, starter_path)
    except LoadError as exc:
        return not_run_report(list_test_names(test_path, examples_only=examples_only, worked=bool(worked)), exc.info)
    return run_tests(test_path, module, examples_only=examples_only, solution_path=str(solution_path), worked=worked)


def not_run_report(names: list[str], load_error: dict) -> dict:
    """The report for a file that did not load: every test fails with the load error's verdict."""
    results = [{"name": n, "verdict": load_error["verdict"], "message": "not run: the file did not load",
                "failure": None, "seconds": 0.0} for n in names]
    return {**summarize(results), "verdict": load_error["verdict"], "load_error": load_error, "tests": results}


def list_test_names(test_path: str | os.PathLike, *, examples_only: bool = False, worked: bool = False) -> list[str]:
    """The names of an exercise's tests, found without importing anything (for reports about a
    file that did not load). ``worked``: problem.md has worked examples (WORKED_EXAMPLE, first)."""
    tree = parse_source(Path(test_path).read_text(encoding="utf-8"), str(test_path))
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    names = [WORKED_EXAMPLE] * worked + [n for n in names if n != WORKED_EXAMPLE]
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


# The judge starts the child with `python -c BOOTSTRAP` and sends, on stdin, one JSON line: the
# spec, the source of this file and a secret. This file is then executed as a module that is in
# no registry (not __main__, not sys.modules), so the reader's code finds no handle on it.
BOOTSTRAP = """
import json, os, sys, types
def _boot():
    spec = json.loads(sys.stdin.readline())
    runner = types.ModuleType("judge_runner")
    runner.__file__ = spec["runner_path"]
    exec(compile(spec.pop("runner_source"), spec["runner_path"], "exec"), runner.__dict__)
    return runner.child_main(spec)
try:
    sys.exit(_boot())
except MemoryError:
    os._exit(105)   # EXIT_OUT_OF_MEMORY: the judge names the memory limit
"""
GUARDED_EVENTS = frozenset({"sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile",
                            "gc.get_objects", "gc.get_referrers", "gc.get_referents"})
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
# Refused to the reader's code and test.py alike: new processes (a detached grandchild could write
# the judge's records after it exits), native code (ctypes reads any memory), signals to others.
REFUSED_EVENTS = frozenset({"os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.spawn", "os.system",
                            "subprocess.Popen", "pty.spawn", "os.kill", "os.killpg", "signal.pthread_kill",
                            "sys.addaudithook"})
PATH_EVENTS = frozenset({"os.rename", "os.replace", "os.remove", "os.rmdir", "os.symlink", "os.link",
                         "os.truncate", "os.chmod", "os.utime", "shutil.rmtree", "shutil.move"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def sign(secret: str, line: str) -> str:
    """The protocol's line signature: only the runner, which holds the secret, can make one."""
    return _sha256((secret + "\n" + line).encode("utf-8")).hexdigest()


def _code_objects(namespace: dict) -> set[types.CodeType]:
    """Every code object defined in a module: its functions, methods, and what they nest."""
    found: set[types.CodeType] = set()
    stack: list[Any] = [v for v in namespace.values() if isinstance(v, (types.FunctionType, type))]
    while stack:
        item = stack.pop()
        if isinstance(item, type):
            if item.__module__ == namespace.get("__name__"):
                stack += [v for v in vars(item).values() if isinstance(v, (types.FunctionType, type, staticmethod,
                                                                           classmethod, property))]
        elif isinstance(item, (staticmethod, classmethod)):
            stack.append(item.__func__)
        elif isinstance(item, property):
            stack += [f for f in (item.fget, item.fset, item.fdel) if f is not None]
        elif isinstance(item, types.FunctionType) and item.__code__ not in found:
            codes = [item.__code__]
            while codes:
                code = codes.pop()
                found.add(code)
                codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return found


class BorrowedAnswer(PermissionError):
    """The reader's code reached for the package (an import, or a read of its files) in a process
    sealed off from it: the verdict is "refused"."""


def seal_off_package(package_dir: str | None) -> Callable[[str, tuple], None]:
    """Take the package out of this process (a child that runs the reader's code and whose tests do
    not need it): drop its modules, and return the audit check that refuses importing it again or
    reading its files, however the code asks (``importlib.import_module`` and ``exec(open(...))``
    included: both open the package's files)."""
    for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
        del sys.modules[name]
    real_dir = os.path.realpath(package_dir) if package_dir else None

    def check(event: str, args: tuple) -> None:
        if event == "import" and args and isinstance(args[0], str) and (
                args[0] == PACKAGE or args[0].startswith(PACKAGE + ".")):
            raise BorrowedAnswer(borrowed_message(f"imports {args[0]} while it runs"))
        if event == "open" and real_dir and args and isinstance(args[0], (str, bytes)):
            real = os.path.realpath(os.fsdecode(args[0]))
            if real == real_dir or real.startswith(real_dir + os.sep):
                raise BorrowedAnswer(borrowed_message(f"reads {PACKAGE}'s files while it runs"))
    return check


def _install_guard(home: str | None = None, trusted: Iterable[dict] = (),
                   sealed: Callable[[str, tuple], None] | None = None) -> None:
    """An audit hook (PEP 578) that keeps frames, tracing and the garbage collector's object
    lists away from everything but this file. With a frame, code can walk up to the test
    functions and to the runner's locals and change a verdict; so ``sys._getframe``,
    ``tb_frame`` & co. raise for the reader's code (and for test.py) while the runner itself,
    which needs tracebacks to describe a failure, still gets them.

    Refused to everyone (``home``: the fresh folder the child runs in): starting processes,
    ctypes, signals, opening anything under /proc (the process's own memory holds the secret
    that signs results), and writing or renaming files outside ``home``. ``trusted``: more
    namespaces whose code may use frames (proxy.py's server in the reader's process describes
    tracebacks). ``sealed``: the package's check (``seal_off_package``), in a process sealed off
    from it."""
    import _thread

    runner_code = _code_objects(globals())   # identity, not file name: code can claim any file name
    for namespace in trusted:
        runner_code |= _code_objects(namespace)
    # collections.namedtuple asks for its caller's frame only to read the caller's module name
    # (the class's __module__): without it, a named tuple the reader's file makes would claim to be
    # the standard library's, and the isolated runner would not mirror it as the file's own.
    frame_readers = {collections.namedtuple.__code__}
    libraries = tuple({os.path.normcase(sysconfig.get_paths()[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib")})
    inside: set[int] = set()   # threads currently inside the hook (its own frame access is allowed)
    get_ident, getframe = _thread.get_ident, sys._getframe

    def called_by_runner() -> bool:
        frame: types.FrameType | None = getframe(2)   # 0: here, 1: the hook, 2: whatever raised the event
        while frame is not None:
            if frame.f_code in runner_code:
                return True
            if not os.path.normcase(frame.f_code.co_filename).startswith(libraries):
                return False   # the first caller outside the libraries is the reader's file or test.py
            frame = frame.f_back
        return False

    real_home = os.path.realpath(home) if home else None

    def inside_home(path: object) -> bool:
        if isinstance(path, int):
            return True
        try:
            real = os.path.realpath(os.fsdecode(path))   # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
        return real_home is not None and (real == real_home or real.startswith(real_home + os.sep))

    def refused(event: str, args: tuple) -> str | None:
        if event in REFUSED_EVENTS or event.startswith("ctypes."):
            return event
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            if isinstance(path, (str, bytes)):
                real = os.path.realpath(os.fsdecode(path))
                if real == "/proc" or real.startswith("/proc/"):
                    return f"opening {real}"
                writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                    isinstance(flags, int) and bool(flags & _WRITE_FLAGS))
                if writing and home is not None and not inside_home(path):
                    return f"writing {os.fsdecode(path)} (outside the judge's scratch folder)"
        elif event in PATH_EVENTS and home is not None:
            if any(isinstance(a, (str, bytes)) and not inside_home(a) for a in args[:2]):
                return f"{event} outside the judge's scratch folder"
        return None

    def hook(event: str, args: tuple) -> None:
        if sealed is not None:
            sealed(event, args)
        why = refused(event, args)
        if why is not None:
            raise PermissionError(f"{why} is not allowed while the judge runs your code")
        if event not in GUARDED_EVENTS and not (event == "object.__getattr__" and args[1] in FRAME_ATTRIBUTES):
            return
        me = get_ident()
        if me in inside:
            return
        inside.add(me)
        try:
            allowed = called_by_runner() or (event == "sys._getframe" and getframe(1).f_code in frame_readers)
        finally:
            inside.discard(me)
        if not allowed:   # a ValueError: namedtuple and typing fall back quietly when frames are missing
            raise ValueError(f"{event} is not available while the judge runs your code: frames, tracing and "
                               "the garbage collector's object lists would let code change the verdict")

    sys.addaudithook(hook)


def _snapshot(modules: list[types.ModuleType]) -> dict[tuple[str, str, str], int]:
    """Identity of every attribute of these modules and of their classes: the reader's code
    must not replace a library function the tests rely on (random.Random.randint, builtins.sorted)."""
    seen = {}
    for module in modules:
        for name, value in list(vars(module).items()):
            seen[(module.__name__, name, "")] = id(value)
            if isinstance(value, type) and getattr(value, "__module__", None) == module.__name__:
                for attr, member in list(vars(value).items()):
                    seen[(module.__name__, name, attr)] = id(member)
    return seen


def _replaced(before: dict, modules: list[types.ModuleType]) -> list[str]:
    now = _snapshot(modules)
    return [".".join(p for p in key if p) for key, ident in before.items() if now.get(key) != ident][:5]


def _test_imports(source: str) -> list[str]:
    """The modules test.py imports (besides the reader's): imported before the reader's code."""
    names = []
    for node in parse_source(source).body:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return [n for n in names if n.split(".")[0] not in (SOLUTION_MODULE, "__future__")]


def child_main(spec: dict) -> int:
    """The child process: load the reader's file, run the tests, stream signed JSON lines.

    spec: {"tests", "tests_source", "solution", "starter" (optional), "only", "examples_only",
    "timeout", "memory_mb", "secret", "runner_path"}. Events: imported | ready | load_error | start
    | result | timeout | done, each line "<signature> <json>". A watchdog thread enforces the per-test CPU-time
    limit and reports the line the code was stuck on. The judge (the parent) decides the verdict
    from these events: it knows which tests test.py has, and ignores lines without a valid
    signature (the reader's code can write to the same pipe, but cannot sign).
    """
    import _thread

    _STATE["child"] = True
    secret = spec.pop("secret")
    sys.stdin = open(os.devnull, encoding="utf-8")   # the spec line has been read; nothing else comes
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)   # anything the reader's code prints outside a test lands on stderr, not in the protocol
    write_lock = _thread.allocate_lock()
    write, flush = protocol.write, protocol.flush

    def emit(event: dict) -> None:
        line = _json_line(event)
        with write_lock:
            write(sign(secret, line) + " " + line + "\n")
            flush()

    _STATE["memory_mb"] = spec.get("memory_mb")
    if spec.get("memory_mb"):
        try:
            import resource
            limit = int(spec["memory_mb"]) * 2**20
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ImportError, ValueError, OSError):
            pass   # not available on this platform: the time limit still holds

    solution, tests_path, tests_source = spec["solution"], spec["tests"], spec["tests_source"]
    timeout = float(spec.get("timeout") or 10)
    state: dict[str, Any] = {"test": None, "deadline": _cpu_clock() + timeout}
    main_thread = _thread.get_ident()

    def watchdog() -> None:
        while True:
            time.sleep(0.02)
            if _cpu_clock() > state["deadline"]:
                frame = sys._current_frames().get(main_thread)
                out = sys.stdout   # the test's capture while a test runs
                captured = type(out) is _HELPERS["CapturedOutput"]
                printed = out.total() if captured else (0, 0)
                event = {"event": "timeout", "test": state["test"], "seconds": timeout,
                         "message": timeout_message(timeout, printed), "where": _where_stuck(frame, solution, tests_path)}
                if captured and out.kept:
                    event["stdout"] = out.getvalue()
                    if out.cut():
                        event["stdout_cut"] = out.cut()
                emit(event)
                os._exit(3)

    # The libraries the tests use are imported first (exercise 01 imports torch once, before the
    # clock of any test starts) and remembered, so replacing one of their functions is noticed.
    watched = [builtins]
    for name in _test_imports(tests_source) + ["ctypes"]:   # ctypes: numpy imports it (then it is refused)
        try:
            __import__(name)
            watched.append(sys.modules[name])
        except Exception:   # an import error is reported when test.py loads
            pass
    before = _snapshot(watched)
    emit({"event": "imported"})   # from here on the time limit runs
    state["deadline"] = _cpu_clock() + timeout
    sys.path.insert(0, os.path.dirname(os.path.abspath(solution)))   # a solution may span two files
    sealed = seal_off_package(spec["package_dir"]) if spec.get("seal_package") else None
    _install_guard(spec.get("home"), sealed=sealed)
    _thread.start_new_thread(watchdog, ())   # not a threading.Thread: nothing lists it for the reader
    try:
        module = load_solution(solution, spec.get("starter"))
    except LoadError as exc:
        emit({"event": "load_error", **exc.info})
        return 0
    sys.modules[SOLUTION_MODULE] = module   # this process exists only to run these tests
    try:
        loaded = load_tests(tests_path, module, source=tests_source, worked=spec.get("worked"))
    except BaseException as exc:  # noqa: B036
        emit({"event": "load_error", "verdict": RUNTIME, "message": "test.py did not load: " + _exception_text(exc)})
        return 0
    tests = select_tests(loaded, examples_only=spec.get("examples_only", False), only=spec.get("only"))
    emit({"event": "ready", "tests": [name for name, _ in tests]})
    for name, func in tests:
        state.update(test=name, deadline=_cpu_clock() + timeout)
        emit({"event": "start", "test": name})
        result = run_test(name, func, tests_path, solution)
        state["deadline"] = float("inf")
        replaced = _replaced(before, watched)
        if replaced:
            result.update(verdict=RUNTIME, failure=None, message="the code replaced library functions the tests "
                          f"rely on ({', '.join(replaced)}); the judge cannot trust this run")
        emit({"event": "result", **result})
        if replaced:
            break
    emit({"event": "done"})
    protocol.close()
    return 0
