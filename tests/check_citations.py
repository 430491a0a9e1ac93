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
  definition pattern such as ``fn name``), prints a table and exits 1 on any miss. Then it
  downloads the newest release of each pinned package and looks every citation up again: what
  **moved** (the symbol or file is now at another path, which it names), what **disappeared** and
  what **changed** (same place, different definition: the list to read when deciding whether a
  chapter's History box needs a line). The chapters keep their pins, so the newest releases never
  fail the check; ``--pins-only`` skips them.

Projects without a release on the package index (mini-sglang, nano-vllm, smg, vLLM's docs) are in
the register too, marked ``unpinned``; the table lists them as not checked, never as verified.
"""

from __future__ import annotations

import argparse
import ast
import functools
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
    """One downloaded release: read a cited file out of its wheel or sdist, list its files."""

    def __init__(self, spec: dict, folder: Path) -> None:
        from packaging.requirements import Requirement

        self.spec = spec
        self.strip = spec.get("strip", "")
        self.add = spec.get("add", "")
        folder.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(folder), spec["package"]]
        if spec["kind"] == "sdist":
            cmd[4:4] = ["--no-binary", ":all:", "--no-build-isolation"]
        else:
            cmd[4:4] = ["--only-binary", ":all:"]
        subprocess.run(cmd, check=True, timeout=1800)
        self._pick(Requirement(spec["package"]), folder)

    @classmethod
    def from_archive(cls, spec: dict, archive: Path) -> Release:
        """A release already on disk: ``archive``, a wheel or sdist of ``spec``'s package (nothing downloaded)."""
        parsed = _archive_name(archive)
        if parsed is None:
            raise ValueError(f"{archive}: not a wheel or sdist file name")
        release = cls.__new__(cls)
        release.spec, release.strip, release.add = spec, spec.get("strip", ""), spec.get("add", "")
        release.version, release.archive, release._names = parsed[1], archive, None
        return release

    def _pick(self, wanted, folder: Path) -> None:
        found = [(version, p) for p in folder.iterdir() if (parsed := _archive_name(p)) and parsed[0] == _canonical(wanted.name)
                 for version in [parsed[1]] if version in wanted.specifier]
        if not found:
            raise FileNotFoundError(f"pip downloaded no archive of {wanted} into {folder}")
        self.version, self.archive = max(found)            # a folder kept between runs may hold older ones
        self._names: list[str] | None = None

    def _inner(self, path: str) -> str:
        return self.add + path.removeprefix(self.strip)

    def read(self, path: str) -> str | None:
        """The text of ``path`` (a repository path) in the release, or None; each file is read once."""
        return _read_archive(self.archive, self._inner(path))

    def paths(self) -> list[str]:
        """Every file of the release, as a repository path (the form the chapters cite)."""
        if self._names is None:
            if self.archive.suffix == ".whl":
                with zipfile.ZipFile(self.archive) as z:
                    inner = z.namelist()
            else:
                with tarfile.open(self.archive) as t:
                    inner = [m.name.split("/", 1)[-1] for m in t.getmembers() if m.isfile()]
            self._names = [self.strip + name.removeprefix(self.add) for name in inner if name.startswith(self.add)]
        return self._names


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _archive_name(path: Path):
    """(canonical project name, version) of a wheel or sdist file name, or None."""
    from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename

    try:
        if path.suffix == ".whl":
            name, version, *_ = parse_wheel_filename(path.name)
        elif path.name.endswith(".tar.gz"):
            name, version = parse_sdist_filename(path.name)
        else:
            return None
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return _canonical(name), version


def definition(source: str, path: str, symbol: str | None) -> str | None:
    """The text that defines ``symbol`` in the file (the whole file for a file citation, or for a
    non-Python file), or None if it is not defined there."""
    if symbol is None or not path.endswith(".py"):
        return source if symbol is None or defines(source, path, symbol) else None
    tree = ast.parse(source)
    body: list[ast.stmt] = tree.body
    node: ast.stmt | None = None
    for part in symbol.split("."):
        node = next((n for n in body if _names(n) and part in _names(n)), None)
        if node is None:
            return None
        body = getattr(node, "body", [])
    return ast.get_source_segment(source, node) if node is not None else None


def open_releases(releases: dict, folder: Path) -> dict[str, Release | None]:
    opened: dict[str, Release | None] = {}
    for project, spec in releases.items():
        if spec["kind"] == "unpinned":
            opened[project] = None
            continue
        print(f"downloading {spec['package']} ...", file=sys.stderr, flush=True)
        opened[project] = Release(spec, folder / project)
    return opened


@functools.cache
def _read_archive(archive: Path, inner: str) -> str | None:
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as z:
            return z.read(inner).decode() if inner in z.namelist() else None
    with tarfile.open(archive) as t:
        for member in t.getmembers():
            if member.name.split("/", 1)[-1] == inner:
                f = t.extractfile(member)
                return f.read().decode() if f else None
    return None


def check_pins(releases: dict, cites: dict[Citation, str], opened: dict[str, Release | None]) -> int:
    """The table of every citation at its pinned release; the number missing there."""
    rows, misses = [], 0
    for c in sorted(cites, key=lambda c: (c.project, c.path, c.symbol or "")):
        release, spec = opened[cites[c]], releases[cites[c]]
        label = spec.get("package", spec.get("note", "unpinned"))
        if release is None:
            rows.append((c, label, "not checked (unpinned)"))
            continue
        text = release.read(c.path)
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
    return misses


def compare(citations: list[Citation], pinned: Release, newest: Release) -> dict[str, list[str]]:
    """Each citation of ``pinned`` looked up in ``newest``: "moved" (the symbol or the file is now
    elsewhere), "disappeared" (nowhere in the release), "changed" (same place, different text: read
    what the chapter says about it) or "same"."""
    out: dict[str, list[str]] = {"moved": [], "disappeared": [], "changed": [], "same": []}
    for c in citations:
        name = c.path + (f"::{c.symbol}" if c.symbol else "")
        old_text, new_text = pinned.read(c.path), newest.read(c.path)
        old = definition(old_text, c.path, c.symbol) if old_text is not None else None
        new = definition(new_text, c.path, c.symbol) if new_text is not None else None
        if new is not None:
            if old == new:
                out["same"].append(name)
            else:
                old_lines, new_lines = (old or "").splitlines(), new.splitlines()
                added = len(set(new_lines) - set(old_lines))
                removed = len(set(old_lines) - set(new_lines))
                out["changed"].append(f"{name}  (+{added} -{removed} lines)")
            continue
        elsewhere = _find_elsewhere(c, newest)
        if elsewhere:
            out["moved"].append(f"{name}  ->  {', '.join(elsewhere)}")
        else:
            out["disappeared"].append(name)
    return out


def _find_elsewhere(c: Citation, release: Release) -> list[str]:
    """Where a citation that is no longer at its path is now: the same file name, or (for a symbol)
    any file of the same kind that defines it, within the project's package."""
    root = c.path.split("/")[0] + "/" if not c.path.startswith("python/") else "/".join(c.path.split("/")[:2]) + "/"
    candidates = [p for p in release.paths() if p.startswith(root) and p.endswith(Path(c.path).suffix)]
    if c.symbol is None:
        name = Path(c.path).name                   # the same name, or its prefix become a folder:
        return sorted(p for p in candidates        # gpu_model_runner.py -> gpu/model_runner.py
                      if Path(p).name == name or "_".join(Path(p).parts[-2:]) == name)
    found = []
    for p in candidates:
        text = release.read(p)
        try:
            if text is not None and c.symbol.split(".")[-1] in text and defines(text, p, c.symbol):
                found.append(f"{p}::{c.symbol}")
        except (SyntaxError, ValueError):
            continue
    return sorted(found)


def check_newest(releases: dict, cites: dict[Citation, str], opened: dict[str, Release | None], folder: Path) -> None:
    """Every citation of a pinned release checked again against the newest release of its package on
    the package index: what moved, what disappeared, what changed. Informational: the chapters keep
    their pins, and a History box says so where a newer release changes what a chapter teaches."""
    from packaging.requirements import Requirement

    newest: dict[str, Release] = {}
    for key, release in opened.items():
        if release is None:
            continue
        package = Requirement(releases[key]["package"]).name
        if package not in newest:
            print(f"downloading the newest {package} ...", file=sys.stderr, flush=True)
            newest[package] = Release(dict(releases[key], package=package), folder / f"newest-{package}")
        latest = newest[package]
        mine = sorted((c for c in cites if cites[c] == key), key=lambda c: (c.path, c.symbol or ""))
        print(f"\n== {releases[key]['package']} (pinned) against {package}=={latest.version} "
              f"(the newest on the package index): {len(mine)} citations")
        if latest.version == release.version:
            print("   the pin is the newest release: nothing to compare")
            continue
        result = compare(mine, release, latest)
        for kind in ("moved", "disappeared", "changed"):
            print(f"{kind} ({len(result[kind])}):")
            for line in result[kind]:
                print(f"   {line}")
        print(f"the same ({len(result['same'])})")


def check(register: Path = REGISTER, *, newest: bool = True, download_dir: Path | None = None) -> int:
    releases, cites = load_register(register)
    with tempfile.TemporaryDirectory() as tmp:
        folder = download_dir or Path(tmp)
        opened = open_releases(releases, folder)
        misses = check_pins(releases, cites, opened)
        if newest:
            check_newest(releases, cites, opened, folder)
    return 1 if misses else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--missing", action="store_true",
                        help="offline: print the citations not in the register, as TOML entries")
    parser.add_argument("--pins-only", action="store_true",
                        help="check the pinned releases only, not the newest ones on the package index")
    parser.add_argument("--download-dir", type=Path,
                        help="keep the downloaded releases here (reused by the next run) instead of a temporary folder")
    args = parser.parse_args()
    if args.missing:
        missing = missing_from_register()
        print(as_toml(list(missing)))
        return 1 if missing else 0
    return check(newest=not args.pins_only, download_dir=args.download_dir)


if __name__ == "__main__":
    sys.exit(main())
