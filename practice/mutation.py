"""mutation.py -- are an exercise's tests strong enough to reject the mistakes a reader makes?

Mutation testing: take the reference ``solution.py``, make one small, systematic change (a
*mutant*) -- ``<`` for ``<=``, ``i + 1`` for ``i``, a deleted statement, a swapped argument -- and
run the exercise's tests on it. A mutant that some test rejects is *killed*. A mutant that every
test accepts *survives*: either the tests miss a real mistake (write a test that kills it), or the
change does not alter behaviour at all (an *equivalent* mutant: declare it, with a one-line reason,
in the exercise folder's ``equivalent_mutants.py``).

Only the code the reader writes is mutated: functions whose body in ``starter.py`` still raises
``NotImplementedError``, and helpers the starter does not have. Code the starter gives (exercise
32's match/insert, say) is not the reader's answer.

Every mutant has a stable id that names where and what, without line numbers: the function, the
statement (a compound one by its header line) and the change, e.g.
``RadixCache.evict: 'if node.lock_ref > 0:': 'node.lock_ref > 0' -> 'node.lock_ref >= 0'``, or
``PrefixCachingBlockPool.touch: 'for b in blocks:' -> 'for b in reversed(list(blocks)):'``; the same
change twice in one function gets ``#2``. ``equivalent_mutants.py`` maps ids to reasons::

    EQUIVALENT = {
        "PrefixCachingBlockPool.touch: 'for b in blocks:' -> 'for b in reversed(list(blocks)):'":
            "each block's update is independent of the others (a repeated block gets the same total)",
    }

Each mutant runs in a forked copy of this process (so torch is imported once, and an endless loop
costs one time limit), stopping at the first failing test. Without ``fork`` (Windows), each mutant
runs through the judge's usual child process, which is slower but gives the same answer.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import json
import math
import os
import select
import signal
import time
import types
from pathlib import Path
from typing import Any, Callable, Iterator

EQUIVALENT_FILE = "equivalent_mutants.py"

_SWAP_OPS: dict[type, list[type]] = {
    ast.Add: [ast.Sub], ast.Sub: [ast.Add], ast.Mult: [ast.FloorDiv, ast.Add], ast.Div: [ast.Mult],
    ast.FloorDiv: [ast.Div, ast.Mult], ast.Mod: [ast.FloorDiv], ast.Pow: [ast.Mult],
    ast.BitAnd: [ast.BitOr], ast.BitOr: [ast.BitAnd], ast.LShift: [ast.RShift], ast.RShift: [ast.LShift],
}
_CMP_OPS: dict[type, list[type]] = {
    ast.Lt: [ast.LtE, ast.Gt], ast.LtE: [ast.Lt, ast.GtE], ast.Gt: [ast.GtE, ast.Lt], ast.GtE: [ast.Gt, ast.LtE],
    ast.Eq: [ast.NotEq], ast.NotEq: [ast.Eq], ast.Is: [ast.IsNot], ast.IsNot: [ast.Is],
    ast.In: [ast.NotIn], ast.NotIn: [ast.In],
}
_NAME_SWAPS = {"min": "max", "max": "min", "any": "all", "all": "any"}


# --------------------------------------------------------------------------------------------
# Which code is the reader's


def _qualnames(tree: ast.AST) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield prefix + child.name, child
                yield from walk(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, prefix + child.name + ".")
    yield from walk(tree, "")


def readers_functions(solution_source: str, starter_source: str | None) -> set[str]:
    """Qualified names of the solution's functions the reader writes (see the module docstring)."""
    given = set()
    if starter_source is not None:
        for name, func in _qualnames(ast.parse(starter_source)):
            raises = any(isinstance(n, ast.Raise) and "NotImplementedError" in ast.unparse(n) for n in ast.walk(func))
            if not raises:
                given.add(name)
    return {name for name, _ in _qualnames(ast.parse(solution_source)) if name not in given}


# --------------------------------------------------------------------------------------------
# Generating mutants


class Mutant(types.SimpleNamespace):
    """id (stable, see the module docstring), kind, lineno, source (the mutated file)."""


def _plus(node: ast.expr, k: int) -> ast.expr:
    op = ast.Add() if k > 0 else ast.Sub()
    return ast.BinOp(copy.deepcopy(node), op, ast.Constant(abs(k)))


def _is_docstring(stmt: ast.stmt, body: list[ast.stmt]) -> bool:
    return (stmt is body[0] and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str))


def _expression_changes(node: ast.AST) -> Iterator[tuple[str, Callable[..., Any]]]:
    """(kind, build) pairs: each build() returns a replacement for ``node``."""
    if isinstance(node, ast.BinOp):
        for new in _SWAP_OPS.get(type(node.op), []):
            yield "operator", lambda new=new: ast.BinOp(node.left, new(), node.right)
    elif isinstance(node, ast.Compare) and len(node.ops) == 1:
        op, right = node.ops[0], node.comparators[0]
        for new in _CMP_OPS.get(type(op), []):
            yield "comparison", lambda new=new: ast.Compare(node.left, [new()], node.comparators)
        if isinstance(right, ast.Constant) and right.value is None and isinstance(op, (ast.Is, ast.IsNot)):
            # `x is None` -> `not x`: the classic that treats 0, "" and [] as missing
            yield "is None -> falsy", lambda: (ast.UnaryOp(ast.Not(), node.left) if isinstance(op, ast.Is)
                                               else node.left)
    elif isinstance(node, ast.BoolOp):
        yield "boolean", lambda: ast.BoolOp(ast.Or() if isinstance(node.op, ast.And) else ast.And(), node.values)
        for i in range(len(node.values)):   # drop one condition
            rest = node.values[:i] + node.values[i + 1:]
            yield "dropped condition", lambda rest=rest: rest[0] if len(rest) == 1 else ast.BoolOp(node.op, rest)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield "negation", lambda: node.operand
    elif isinstance(node, ast.Constant) and type(node.value) is bool:
        yield "constant", lambda: ast.Constant(not node.value)
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        for k in (1, -1):
            yield "constant", lambda k=k: ast.Constant(node.value + k)
    elif isinstance(node, ast.Slice):
        for field in ("lower", "upper"):
            bound = getattr(node, field)
            if bound is not None and not isinstance(bound, ast.Constant):
                for k in (1, -1):
                    yield "off by one", lambda field=field, bound=bound, k=k: ast.Slice(
                        **{**{f: getattr(node, f) for f in ("lower", "upper", "step")}, field: _plus(bound, k)})
    elif isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id == "range":
            for i, arg in enumerate(node.args[:2]):
                if not isinstance(arg, ast.Constant):
                    for k in (1, -1):
                        yield "off by one", lambda i=i, arg=arg, k=k: ast.Call(
                            func, node.args[:i] + [_plus(arg, k)] + node.args[i + 1:], node.keywords)
        if isinstance(func, ast.Name) and func.id in _NAME_SWAPS:
            yield "function", lambda: ast.Call(ast.Name(_NAME_SWAPS[func.id], ast.Load()), node.args, node.keywords)
        if isinstance(func, ast.Name) and func.id == "reversed" and len(node.args) == 1:
            yield "iteration order", lambda: node.args[0]
        positional = [a for a in node.args if not isinstance(a, ast.Starred)]
        if len(positional) == len(node.args):
            for i in range(len(node.args) - 1):
                a, b = node.args[i], node.args[i + 1]
                if ast.dump(a) != ast.dump(b):
                    yield "swapped arguments", lambda i=i, a=a, b=b: ast.Call(
                        func, node.args[:i] + [b, a] + node.args[i + 2:], node.keywords)
    elif isinstance(node, ast.Subscript) and not isinstance(node.slice, (ast.Slice, ast.Constant, ast.Tuple)):
        if isinstance(node.ctx, ast.Load):
            for k in (1, -1):
                yield "off by one", lambda k=k: ast.Subscript(node.value, _plus(node.slice, k), node.ctx)


def _statement_changes(stmt: ast.stmt, body: list[ast.stmt]) -> Iterator[tuple[str, Callable[..., Any]]]:
    if _is_docstring(stmt, body) or isinstance(stmt, (ast.Pass, ast.FunctionDef, ast.ClassDef, ast.Import,
                                                      ast.ImportFrom, ast.Global, ast.Nonlocal)):
        return
    yield "deleted statement", lambda: [ast.Pass()]
    if isinstance(stmt, ast.AugAssign):
        for new in _SWAP_OPS.get(type(stmt.op), [])[:1]:
            yield "operator", lambda new=new: [ast.AugAssign(stmt.target, new(), stmt.value)]
    if isinstance(stmt, ast.For) and _target_is_used(stmt):
        yield "iteration order", lambda: [ast.For(stmt.target, ast.Call(ast.Name("reversed", ast.Load()),
                                                                        [ast.Call(ast.Name("list", ast.Load()), [stmt.iter], [])], []),
                                                  stmt.body, stmt.orelse)]
    if isinstance(stmt, ast.Break):
        yield "break -> continue", lambda: [ast.Continue()]
    if isinstance(stmt, ast.Continue):
        yield "continue -> break", lambda: [ast.Break()]
    if isinstance(stmt, (ast.If, ast.While)) and not isinstance(stmt.test, ast.Constant):
        yield "negated condition", lambda: [type(stmt)(ast.UnaryOp(ast.Not(), stmt.test), stmt.body, stmt.orelse)]


def _target_is_used(loop: ast.For) -> bool:
    """Reversing `for _ in range(n)` changes nothing: only loops whose variable is read are reversed."""
    names = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    return any(isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load)
               for stmt in loop.body for n in ast.walk(stmt))


def _skip_subtree(node: ast.AST) -> bool:
    return isinstance(node, (ast.arguments, ast.JoinedStr)) or (
        isinstance(node, ast.Constant) and isinstance(node.value, str))


def generate_mutants(solution_source: str, starter_source: str | None = None) -> list[Mutant]:
    """Every single-change mutant of the reader's functions in ``solution_source``."""
    tree = ast.parse(solution_source)
    mine = readers_functions(solution_source, starter_source)
    mutants: list[Mutant] = []
    seen: dict[str, int] = {}

    def add(where: str, kind: str, before: ast.AST, after: Any, apply: Callable[..., Any],
            undo: Callable[..., Any], context: str = "") -> None:
        apply()
        try:
            source = ast.unparse(ast.fix_missing_locations(tree))
            compile(source, "<mutant>", "exec")
        except (SyntaxError, ValueError, TypeError):
            return
        finally:
            undo()
        change = f"{_brief(before)!r} -> {_brief(after)!r}"
        base = f"{where}: {context!r}: {change}" if context and context != _brief(before) else f"{where}: {change}"
        seen[base] = seen.get(base, 0) + 1
        mid = base if seen[base] == 1 else f"{base} #{seen[base]}"
        mutants.append(Mutant(id=mid, kind=kind, lineno=getattr(before, "lineno", 0), source=source))

    for qualname, func in _qualnames(tree):
        if qualname not in mine:
            continue
        for parent, statement in _own_nodes(func):
            context = _brief(statement) if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) else ""
            for field, value in ast.iter_fields(parent):
                if parent is func and field in ("args", "returns", "decorator_list"):
                    continue
                if isinstance(value, list):
                    for i, item in enumerate(value):
                        if isinstance(item, ast.stmt) and _owned_by(item, func):
                            for kind, build in _statement_changes(item, value):
                                new = build()
                                add(qualname, kind, item, new,
                                    lambda value=value, i=i, new=new: value.__setitem__(slice(i, i + 1), new),
                                    lambda value=value, i=i, new=new, item=item: value.__setitem__(
                                        slice(i, i + len(new)), [item]))
                        elif isinstance(item, ast.expr) and not _skip_subtree(item):
                            for kind, build in _expression_changes(item):
                                new = ast.copy_location(build(), item)
                                add(qualname, kind, item, new,
                                    lambda value=value, i=i, new=new: value.__setitem__(i, new),
                                    lambda value=value, i=i, item=item: value.__setitem__(i, item), context)
                elif isinstance(value, ast.expr) and not _skip_subtree(value):
                    if isinstance(parent, ast.AnnAssign) and field == "annotation":
                        continue
                    for kind, build in _expression_changes(value):
                        new = ast.copy_location(build(), value)
                        add(qualname, kind, value, new,
                            lambda parent=parent, field=field, new=new: setattr(parent, field, new),
                            lambda parent=parent, field=field, value=value: setattr(parent, field, value), context)
    return mutants


def _brief(node: ast.AST | list[ast.stmt]) -> str:
    """A node as one short line: a compound statement by its header (`for b in blocks:`)."""
    if isinstance(node, list):
        return "; ".join(_brief(n) for n in node)
    lines = ast.unparse(node).splitlines()
    text = lines[0] if len(lines) > 1 else " ".join(ast.unparse(node).split())
    return text if len(text) <= 80 else text[:77] + "..."


def _owned_by(stmt: ast.stmt, func: ast.AST) -> bool:
    return not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))


def _own_nodes(func: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]:
    """(node, the statement it belongs to) for the nodes of a function, without those of
    functions and classes defined inside it (they are visited under their own qualified name)
    and without annotations and f-strings."""
    stack: list[tuple[ast.AST, ast.AST]] = [(func, func)]
    while stack:
        node, statement = stack.pop()
        yield node, statement
        skip = [getattr(node, "returns", None), node.annotation if isinstance(node, ast.AnnAssign) else None]
        for child in ast.iter_child_nodes(node):
            if any(child is s for s in skip):
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.arguments, ast.JoinedStr)):
                continue
            stack.append((child, child if isinstance(child, ast.stmt) else statement))


# --------------------------------------------------------------------------------------------
# Declared equivalent mutants


def load_equivalent(folder: Path) -> dict[str, str]:
    """``EQUIVALENT`` from the folder's equivalent_mutants.py (id -> one-line reason), or {}."""
    path = folder / EQUIVALENT_FILE
    if not path.exists():
        return {}
    namespace: dict = {}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
    return dict(namespace.get("EQUIVALENT", {}))


# --------------------------------------------------------------------------------------------
# Running the tests on a mutant


WALL_FACTOR, WALL_GRACE = 10, 20.0   # wall-clock backstop for a mutant that sleeps; the limit is CPU time


def _run_in_fork(runner: types.ModuleType, tests_path: Path, source: str, cpu_limit: float) -> dict:
    """Load ``source`` as the solution and run the tests in a forked child; stop at the first
    failure. Returns {"killed": bool, "by": test name or reason, "verdict": ..., "cpu": seconds}.

    The time limit is the child's CPU time (RLIMIT_CPU: the kernel stops it with SIGXCPU), so a
    busy machine changes no verdict; a generous wall-clock limit catches a mutant that sleeps."""
    import resource

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:   # child
        os.close(read_fd)
        outcome = {"killed": True, "by": "load", "verdict": "runtime error"}
        try:
            seconds = max(1, math.ceil(cpu_limit))
            hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
            if hard != resource.RLIM_INFINITY:
                seconds = min(seconds, hard)
            resource.setrlimit(resource.RLIMIT_CPU, (seconds, hard))
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            module = types.ModuleType(runner.SOLUTION_MODULE)
            module.__file__ = "<mutant>"
            with runner.registered(module):
                exec(compile(source, "<mutant>", "exec"), module.__dict__)
                outcome = {"killed": False, "by": None, "verdict": "accepted"}
                for name, func in runner.load_tests(tests_path, module):
                    result = runner.run_test(name, func, str(tests_path), "<mutant>")
                    if result["verdict"] != runner.ACCEPTED:
                        outcome = {"killed": True, "by": name, "verdict": result["verdict"]}
                        break
        except BaseException as exc:  # noqa: B036 -- whatever happens, the parent gets an answer
            outcome = {"killed": True, "by": f"load: {type(exc).__name__}", "verdict": "runtime error"}
        os.write(write_fd, json.dumps(outcome).encode())
        os._exit(0)
    os.close(write_fd)
    data, deadline = b"", time.monotonic() + cpu_limit * WALL_FACTOR + WALL_GRACE
    timed_out = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read_fd], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                timed_out = True
                break
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(read_fd)
        _, status, usage = os.wait4(pid, 0)
    cpu = round(usage.ru_utime + usage.ru_stime, 3)
    if timed_out or (os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL)):
        return {"killed": True, "by": "timeout", "verdict": "timeout", "cpu": cpu}
    try:
        return {**json.loads(data), "cpu": cpu}
    except ValueError:
        return {"killed": True, "by": "crash", "verdict": "runtime error", "cpu": cpu}


def mutate_exercise(ex, runner: types.ModuleType, judge_file: Callable | None = None,
                    timeout: float | None = None) -> dict:
    """Generate and run every mutant of ``ex``'s reference; classify each as killed, equivalent
    (declared) or survived. Also lists declarations that no longer match a surviving mutant."""
    start = time.perf_counter()
    source = ex.solution.read_text(encoding="utf-8")
    starter = ex.starter.read_text(encoding="utf-8") if ex.starter.exists() else None
    mutants = generate_mutants(source, starter)
    equivalent = load_equivalent(ex.folder)
    use_fork = hasattr(os, "fork")
    if use_fork:   # import the tests' libraries once, here; every forked mutant inherits them (torch)
        for name in runner._test_imports(ex.tests.read_text(encoding="utf-8")):
            try:
                __import__(name)
            except Exception:
                pass
        try:   # and compile test.py once (its asserts rewritten): each mutant's fork finds it compiled
            runner.compile_tests(ex.tests.read_text(encoding="utf-8"), str(ex.tests))
        except SyntaxError:
            pass   # reported when the tests load
    # One run of the reference sets the time limit, in CPU time: a mutant may be slower, not
    # endlessly so.
    baseline = (_run_in_fork(runner, ex.tests, source, 120.0) if use_fork
                else {"killed": False, "verdict": "accepted", "cpu": 1.0})
    limit = timeout or max(2.0, 1.0 + 3 * baseline["cpu"])
    rows, survivors, declared = [], [], []
    for m in mutants:
        if use_fork:
            outcome = _run_in_fork(runner, ex.tests, m.source, limit)
        else:   # pragma: no cover -- Windows: the judge's own child process
            import tempfile
            assert judge_file is not None, "without fork, mutants run through judge.judge_file"
            with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False, encoding="utf-8") as f:
                f.write(m.source)
            report = judge_file(ex, f.name, timeout=limit, check_interface=False)
            os.unlink(f.name)
            bad = next((t for t in report["tests"] if t["verdict"] != "accepted"), None)
            outcome = {"killed": bad is not None, "by": bad and bad["name"], "verdict": report["verdict"]}
        row = {"id": m.id, "kind": m.kind, "line": m.lineno, **outcome}
        if not outcome["killed"]:
            if m.id in equivalent:
                row["equivalent"] = equivalent[m.id]
                declared.append(m.id)
            else:
                survivors.append(m.id)
        rows.append(row)
    generated = {m.id for m in mutants}
    stale = [mid for mid in equivalent if mid not in generated or mid not in declared]
    return {"exercise": ex.number, "baseline": baseline, "generated": len(mutants),
            "killed": sum(r["killed"] for r in rows), "equivalent": {mid: equivalent[mid] for mid in declared},
            "survivors": survivors, "stale_declarations": stale, "time_limit": round(limit, 2),
            "seconds": round(time.perf_counter() - start, 2), "mutants": rows}


# --------------------------------------------------------------------------------------------
# The committed mutation report: mutation testing is re-run only where something changed

REPORT_FILE = "MUTATION_REPORT.json"
EXERCISE_FILES = ("solution.py", "starter.py", "test.py", EQUIVALENT_FILE)
TOOL_FILES = ("mutation.py", "runner.py")


def _hash_files(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode("utf-8") + b"\0")
        digest.update(path.read_bytes() if path.exists() else b"<absent>")
        digest.update(b"\0")
    return digest.hexdigest()


def fingerprint(ex) -> dict[str, str]:
    """What a mutation result depends on: the exercise's files, and the mutation tool with the
    runner that runs the tests."""
    tool_dir = Path(__file__).resolve().parent
    return {"files_sha256": _hash_files([ex.folder / name for name in EXERCISE_FILES]),
            "tool_sha256": _hash_files([tool_dir / name for name in TOOL_FILES])}


def report_entry(ex, result: dict) -> dict:
    """One exercise's part of the report: its fingerprint, every mutant with the test that killed
    it, and the declared equivalents."""
    return {**fingerprint(ex), "generated": result["generated"], "killed": result["killed"],
            "survivors": result["survivors"], "stale_declarations": result["stale_declarations"],
            "equivalent": result["equivalent"],
            "mutants": [{"id": m["id"], "kind": m["kind"],
                         "killed_by": m["by"] if m["killed"] else None} for m in result["mutants"]]}


def load_report(root: Path) -> dict:
    try:
        return json.loads((root / REPORT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def write_report(root: Path, entries: dict[str, dict]) -> Path:
    """Merge ``entries`` (exercise folder name -> entry) into the committed report."""
    report = load_report(root)
    report.update(entries)
    path = root / REPORT_FILE
    path.write_text(json.dumps(dict(sorted(report.items())), indent=1) + "\n", encoding="utf-8")
    return path


def report_problem(ex, root: Path) -> str | None:
    """Why the committed report does not vouch for ``ex`` (stale, missing, or a survivor), or None."""
    entry = load_report(root).get(ex.name)
    rerun = f"run `python practice/judge.py mutate {ex.number}` and commit {REPORT_FILE}"
    if entry is None:
        return f"{ex.name}: not in practice/{REPORT_FILE}: {rerun}"
    now = fingerprint(ex)
    changed = [what for key, what in (("files_sha256", "its files"), ("tool_sha256", "mutation.py or runner.py"))
               if entry.get(key) != now[key]]
    if changed:
        return f"{ex.name}: the mutation report is stale ({' and '.join(changed)} changed since): {rerun}"
    if entry.get("survivors") or entry.get("stale_declarations"):
        return f"{ex.name}: the report lists surviving mutants or stale declarations: {rerun}"
    return None
