"""check_citations.py: are the cited files and symbols of vLLM and SGLang really there?

Every claim the chapters make about vLLM or SGLang names a file, and usually a symbol in it. They
are written in one recognisable form, in backticks:

* ``path::Symbol`` (or ``path::Class.method``): the symbol is defined in that file;
* ``path`` alone: the file exists.

``path`` starts with a project's own root (``vllm/``, ``python/sglang/``, ``sgl-model-gateway/``,
...: ``PROJECTS`` below), so the project is read off the path. ``tests/citations.toml`` is the
register of every such citation, with the release each project is checked against.

Two uses:

* offline (``tests/test_citations.py``, part of ``make test``): :func:`scan` finds every
  citation in the chapters, the package's modules and the exercise statements, and the test
  checks that each is in the register (:func:`missing_from_register`);
* online (``make check-citations``, needs the network): this script downloads the pinned
  releases from the package index (``pip download --no-deps``), reads only the cited files, checks
  that each path exists and each symbol is defined there (Python with ``ast``, other files by a
  definition pattern such as ``fn name``), prints a table and exits 1 on any miss.

Projects without a release on the package index (mini-sglang, nano-vllm, smg, vLLM's docs) are in
the register too, marked ``unpinned``; the table lists them as not checked, never as verified.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, as a package
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
REGISTER = Path(__file__).resolve().parent / "citations.toml"

# Path prefix -> project name in the register. Longer prefixes first.
PROJECTS = {
    "python/sglang/": "sglang",
    "python/minisgl/": "mini-sglang",
    "sgl-model-gateway/": "sglang-gateway",
    "sglang_router/": "sglang-router",
    "model_gateway/": "smg",
    "nanovllm/": "nano-vllm",
    "docs/design/": "vllm-docs",
    "vllm/": "vllm",
}
_EXT = r"(?:py|rs|md|cpp|cu|toml|json)"
_PREFIX = "|".join(re.escape(p) for p in PROJECTS)
CITATION = re.compile(rf"`((?:{_PREFIX})[\w./-]*\.{_EXT})(?:::([\w.]+))?`")


@dataclass(frozen=True)
class Citation:
    project: str
    path: str
    symbol: str | None  # None: the file is cited, no symbol


def project_of(path: str) -> str:
    for prefix, project in PROJECTS.items():
        if path.startswith(prefix):
            return project
    raise ValueError(f"{path}: no known project root")


def parse(text: str) -> list[Citation]:
    """The citations in ``text`` (backticked ``path`` or ``path::symbol``)."""
    return [Citation(project_of(m[1]), m[1], m[2]) for m in CITATION.finditer(text)]


def sources(root: Path = ROOT) -> dict[str, str]:
    """The texts that may cite: chapter cells, package modules, exercise statements."""
    out = {}
    for nb in sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        for i, cell in enumerate(cells):
            out[f"{nb.name} cell {i}"] = "".join(cell["source"])
    for module in sorted((root / "nano_engine").rglob("*.py")):
        out[str(module.relative_to(root))] = module.read_text()
    for statement in sorted((root / "practice").glob("*/problem.md")):
        out[str(statement.relative_to(root))] = statement.read_text()
    return out


def scan(root: Path = ROOT) -> dict[Citation, list[str]]:
    """Every citation, with where it appears."""
    found: dict[Citation, list[str]] = {}
    for where, text in sources(root).items():
        for c in parse(text):
            found.setdefault(c, []).append(where)
    return found


def load_register(path: Path = REGISTER) -> tuple[dict, dict[Citation, str]]:
    """The releases, and every registered citation with the release it is checked against.

    An entry is checked against its project's release unless it names another one with
    ``release = "..."`` (a file cited at an older release that the current one no longer has).
    """
    data = tomllib.loads(path.read_text())
    cites: dict[Citation, str] = {}
    for entry in data["cite"]:
        release = entry.get("release", entry["project"])
        if release not in data["releases"]:
            raise ValueError(f"{path.name}: {entry['path']}: release {release!r} has no [releases] entry")
        if project_of(entry["path"]) != entry["project"]:
            raise ValueError(f"{path.name}: {entry['path']} is not under project {entry['project']!r}")
        for symbol in [None, *entry.get("symbols", [])]:
            cites[Citation(entry["project"], entry["path"], symbol)] = release
    return data["releases"], cites


def missing_from_register(root: Path = ROOT, register: Path = REGISTER) -> dict[Citation, list[str]]:
    _, registered = load_register(register)
    return {c: where for c, where in scan(root).items() if c not in registered}


def as_toml(citations: list[Citation]) -> str:
    """Register entries for ``citations`` (to paste into citations.toml)."""
    by_path: dict[tuple[str, str], list[str]] = {}
    for c in sorted(citations, key=lambda c: (c.project, c.path, c.symbol or "")):
        symbols = by_path.setdefault((c.project, c.path), [])
        if c.symbol:
            symbols.append(c.symbol)
    return "\n".join(f'[[cite]]\nproject = "{p}"\npath = "{path}"\nsymbols = {json.dumps(s)}\n'
                     for (p, path), s in by_path.items())


# ------------------------------------------------------------------------------- online check


def defines(source: str, path: str, symbol: str) -> bool:
    """Whether ``symbol`` (``A`` or ``A.b``) is defined in the file ``path`` whose text is ``source``."""
    if path.endswith(".py"):
        body: list[ast.stmt] = ast.parse(source).body
        for part in symbol.split("."):
            node = next((n for n in body if _names(n) and part in _names(n)), None)
            if node is None:
                return False
            body = getattr(node, "body", [])
        return True
    name = symbol.split(".")[-1]
    pattern = rf"\b(?:fn|struct|enum|trait|impl|const|static|type|mod|class|def)\s+{re.escape(name)}\b"
    return re.search(pattern, source) is not None


def _names(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    return set()


class Release:
    """One downloaded release: read a cited file out of its wheel or sdist."""

    def __init__(self, spec: dict, folder: Path) -> None:
        self.spec = spec
        self.strip = spec.get("strip", "")
        self.add = spec.get("add", "")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(folder), spec["package"]]
        if spec["kind"] == "sdist":
            cmd[4:4] = ["--no-binary", ":all:", "--no-build-isolation"]
        else:
            cmd[4:4] = ["--only-binary", ":all:"]
        subprocess.run(cmd, check=True, timeout=1800)
        (self.archive,) = [p for p in folder.iterdir() if p.suffix in (".whl", ".gz")]

    def read(self, path: str) -> str | None:
        inner = self.add + path.removeprefix(self.strip)
        if self.archive.suffix == ".whl":
            with zipfile.ZipFile(self.archive) as z:
                return z.read(inner).decode() if inner in z.namelist() else None
        with tarfile.open(self.archive) as t:
            for member in t.getmembers():
                if member.name.split("/", 1)[-1] == inner:
                    f = t.extractfile(member)
                    return f.read().decode() if f else None
        return None


def check(register: Path = REGISTER) -> int:
    releases, cites = load_register(register)
    rows, misses = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        opened: dict[str, Release | None] = {}
        for project, spec in releases.items():
            if spec["kind"] == "unpinned":
                opened[project] = None
                continue
            print(f"downloading {spec['package']} ...", file=sys.stderr, flush=True)
            folder = Path(tmp) / project
            folder.mkdir()
            opened[project] = Release(spec, folder)
        texts: dict[tuple[str, str], str | None] = {}
        for c in sorted(cites, key=lambda c: (c.project, c.path, c.symbol or "")):
            release, spec = opened[cites[c]], releases[cites[c]]
            label = spec.get("package", spec.get("note", "unpinned"))
            if release is None:
                rows.append((c, label, "not checked (unpinned)"))
                continue
            if (cites[c], c.path) not in texts:
                texts[(cites[c], c.path)] = release.read(c.path)
            text = texts[(cites[c], c.path)]
            if text is None:
                status = "MISSING FILE"
            elif c.symbol is None:
                status = "ok"
            else:
                status = "ok" if defines(text, c.path, c.symbol) else "MISSING SYMBOL"
            misses += status.startswith("MISSING")
            rows.append((c, label, status))
    width = max(len(c.path) + len(c.symbol or "") + 2 for c, _, _ in rows)
    print(f"{'citation':{width}s}  {'release':22s}  status")
    for c, label, status in rows:
        name = c.path + (f"::{c.symbol}" if c.symbol else "")
        print(f"{name:{width}s}  {label:22s}  {status}")
    checked = sum(1 for _, _, s in rows if not s.startswith("not checked"))
    print(f"\n{len(rows)} citations: {checked} checked against their release, {misses} missing, "
          f"{len(rows) - checked} unpinned (not checked)")
    return 1 if misses else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--missing", action="store_true",
                        help="offline: print the citations not in the register, as TOML entries")
    args = parser.parse_args()
    if args.missing:
        missing = missing_from_register()
        print(as_toml(list(missing)))
        return 1 if missing else 0
    return check()


if __name__ == "__main__":
    sys.exit(main())
