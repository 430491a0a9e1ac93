"""The package's shape: no import cycle between its modules, and a module map that names them all.

Imports are read with ``ast``, not executed, and every one counts: one inside a function or under
``TYPE_CHECKING`` is still a dependency a reader has to hold in mind.
"""

import ast
from pathlib import Path

import nano_engine

PACKAGE = Path(nano_engine.__file__).resolve().parent

def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}

def imported_modules(name: str, path: Path) -> set[str]:
    """The package's modules that ``name`` imports (``from pkg import mod`` counts as ``pkg.mod``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import mod` names the module; `from mod import name` the module itself.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:   # `a.b.func` -> `a.b`
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found

def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as ``[a, b, ..., a]``, or None: depth-first search, a back edge closes a cycle."""
    state: dict[str, str] = {}                  # "active" while on the stack, then "done"
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "active"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "active":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None

def test_find_cycle_reports_the_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"b", "c"}, "c": set()}) == ["b", "b"]

def test_the_import_graph_is_read():
    graph = {name: imported_modules(name, path) for name, path in MODULES.items()}
    assert "nano_engine.paged" in graph["nano_engine.prefix_cache"]
    assert "nano_engine.fast.triton_attention" in graph["nano_engine.fast.fast_attention"]

def test_no_import_cycle():
    graph = {name: imported_modules(name, path) for name, path in MODULES.items()}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])

def test_module_map_names_every_module():
    """``nano_engine/__init__.py``'s docstring is the map a reader starts from: it must stay whole."""
    doc = nano_engine.__doc__ or ""
    missing = [name for name, path in MODULES.items()
               if path.name != "__init__.py" and f"{path.name}" not in doc]
    assert not missing, f"modules missing from the module map in nano_engine/__init__.py: {missing}"


def test_moved_names_warn_and_are_the_new_objects():
    """The old import paths of moved names (one release) give the very object, with a DeprecationWarning."""
    import importlib
    import warnings

    for old, name, new in [("nano_engine.hiradix", "TieredRadixCacheManager", "nano_engine.tiered_cache_manager"),
                           ("nano_engine.offload", "TieredHashedCacheManager", "nano_engine.tiered_cache_manager"),
                           ("nano_engine.cluster", "TraceInstance", "nano_engine.instances")]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            obj = getattr(importlib.import_module(old), name)
        assert obj is getattr(importlib.import_module(new), name), f"{old}.{name} is not {new}.{name}"
        assert [w.category for w in caught] == [DeprecationWarning], f"{old}.{name} must warn once"
        assert new in str(caught[0].message), "the warning names the new module"


def test_deprecation_doctest():
    import doctest

    import nano_engine.deprecation

    result = doctest.testmod(nano_engine.deprecation)
    assert result.failed == 0 and result.attempted > 0


def test_integer_options_are_checked_in_one_place():
    """'``name`` must be an integer >= N' is said by ``checks.require_int`` only: a module that
    writes the check by hand (``isinstance(x, int) ... raise ValueError("... must be an int >= 1")``)
    drifts in wording and in what it accepts (a bool, a NumPy integer)."""
    import re

    by_hand = re.compile(r"must be an? (int|integer|positive int\w*)\b[^\"']*>=")
    offenders = [f"{module}:{number}" for module, path in MODULES.items()
                 if module not in ("nano_engine.checks", "nano_engine.tier_replay")   # tier_replay: a deprecated shim
                 for number, line in enumerate(path.read_text().splitlines(), 1)
                 if "Error(" in line and by_hand.search(line)]
    assert not offenders, f"hand-written integer checks (use checks.require_int): {offenders}"
