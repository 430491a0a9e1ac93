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
