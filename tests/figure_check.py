"""figure_check.py: every figure a chapter's prose quotes about its own runs is checked by a cell.

A chapter's markdown says "4 engines of 6,000 blocks", "a hit rate of 65%" or "our `follow` does the
same". When the code behind it changes, the sentence goes stale silently, unless a code cell states
it again beside the value it describes. This module reads a chapter (`.ipynb`) and reports the
prose it finds unchecked; ``tests/test_figure_check.py`` fails on any report, and
``python tests/figure_check.py [chapter ...]`` prints them (exit status 1 when there are some).

What counts as checked (the convention of ``nano_engine/notebook/figures.py``):

* **A figure** (a number in the prose: a count, size, rate, ratio) is checked when a code cell of
  the chapter states the same figure in ``said("...", value)``, or holds it as a literal that an
  ``assert`` compares with (``assert gap < 0.03`` checks "3 points"; a percentage may be written as a
  fraction or in points; an index is no figure). The same number written with another precision is
  another figure: "37%" is not "37.4%". A figure is matched anywhere in the chapter's code, so one
  check covers every sentence that quotes it.
* **An input** the prose names ("48 blocks of 16 tokens") is also checked by the run it sets up: a
  number passed to a call, assigned to a name or given as a default argument in the code cells next
  to the markdown cell (not what they print). Change the input and the sentence is flagged.
* **A Try it** is checked by its own ``python`` fences (which the tests run after the chapter): its
  questions may name the fences' inputs, its answers must be stated there by ``said`` or ``assert``.
* **A claim without a number** is a sentence that says two things are the same ("does the same",
  "identical", "equals"), that one thing differs from another ("cost hits that events do not",
  "short queues", "more than", any "-er than"), or that something never happens in the chapter
  ("no model runs in this chapter"). It is checked when an ``assert``'s message or a ``said`` quote
  repeats at least four consecutive words of its sentence, so that the failing check names the
  sentence it guards. Beside its run (not in the Summary), "identical"/"equal" is also checked by an
  ``assert`` of ``==`` next to it, and a "than" comparison by an ``assert`` of ``<`` or ``>``;
  "does the same" and contrasts always need the quoting message (what is the same is not said).
  Claims are looked for where a reader takes them as results: whole-chapter claims anywhere,
  "does the same" and contrasts anywhere, the others in the Summary, the Try it answers, and every
  markdown cell next to a run that no ``assert`` covers (a code cell that prints, displays or plots
  with no ``assert``/``said``; a prediction and its reveal are not runs). Questions claim nothing.

Not figures:

* **code**: inline code spans, fences, HTML comments, link targets, quoted text ("..."): a model's
  answer or a document's words;
* **names and pointers**: numbers inside names (Qwen3-0.6B, r1, FP8), versions (0.33.0), commits,
  PR and issue numbers (#1234), dates and years, list and heading numbers, and numbers after a
  pointer word (chapter 05, sections 3 and 4, cell 12, exercises 21 (...) and 22, Figure 9, RFC 8949,
  step 4, turn 2 ...);
* **other systems' figures**: a clause that cites its source (a backticked path of vLLM/SGLang/...,
  a release such as "vLLM 0.33.0", a possessive such as "Mooncake's" or "Qwen3-0.6B's", a commit, a
  PR, a paper's Table/Figure, "et al.", a design doc) and the clauses after it in the same sentence,
  or in the next one if it opens with "Its", "Their", "They"..., up to the first clause that speaks
  of this chapter's own run again ("here", "the replay", "we", "our", "this package", "printed",
  "above."); ``<details>`` boxes whose summary starts with "History"; and the end matter that is
  about other systems ("vLLM / SGLang and this package", "Read the real code", "Exercises") or is a
  model answer ("How to explain it"). The team's rule is that a fact about vLLM or SGLang is cited
  and pinned (``make check-citations``), not asserted;
* **the self-test's questions and answers**: they pose their own small cases before any run.

What it cannot see: whether a checked figure describes the right quantity (M7's "Capacity counts
512-token blocks" is flagged because no cell states 512 for the capacity, not because the unit is
wrong), digits written as words, and a sameness or comparison phrased outside the patterns above.
The check is a tripwire for prose that drifted from its run, not a proof that the prose is right.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from nano_engine.notebook.figures import parse_figure  # noqa: E402

CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

# ------------------------------------------------------------------------------------ the prose

NUMBER = re.compile(
    r"(?<![\w.#/'’-])(?P<num>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)"
    r"(?P<unit>\s?%|(?:×|x\b|k\b|K\b|M\b)(?!\s*\d)|(?=[-\s]|$|[^\w.]|\.(?!\d)))")
POINTER_HEADS = re.compile(
    r"\b(chapters?|sections?|§|cells?|exercises?|Figures?|Fig\.|Tables?|Theorem|Lemma|[Ee]quation|Eq\.|"
    r"steps?|questions?|Q|answers?|items?|parts?|lines?|rules?|turns?|seqs?|batch(?:es)?|ticks?|"
    r"layers?|ranks?|version|issues?|PRs?|stages?|phase|round|seed|Python|CUDA|torch|PyTorch|"
    r"positions?|slots?|ids?|tiers?|nodes?|prompts?|workers?|engines?|instances?|questions?|examples?|"
    r"columns?|rows?|samples?|requests?|conversations?|groups?|blocks?|pages?|tokens?|models?|"
    r"NeurIPS|OSDI|SOSP|ICML|ICLR|MLSys|FAST|arXiv|RFC)\s*$", re.IGNORECASE)
YEAR_OR_DATE = re.compile(r"^(?:19|20)\d\d$")
SYSTEMS = r"(?:Qwen|vLLM|SGLang|Dynamo|llm-d|Mooncake|LMCache|Kimi|NVIDIA|nano-vllm|mini-sglang|Qwen3-\d[\w.]*)"
CITATION_MARK = re.compile(
    r"`(?:vllm/|python/sglang/|python/minisgl/|sgl-model-gateway/|sglang_router/|model_gateway/|"
    r"nanovllm/|docs/|lib/|pkg/|benchmarking/)[^`]*`"
    rf"|\b{SYSTEMS}\s+v?\d+\.\d+|\b{SYSTEMS}(?:'s|’s)(?!\s+mode)"
    r"|\bcommit\s+`?[0-9a-f]{7,}|\bat\s+`[0-9a-f]{7,40}`"
    r"|#\d{2,}|\bPRs?\b|\bpull request"
    r"|\b(?:Table|Figure|Fig\.|Theorem)\s+\d"
    r"|\bRFC\s+\d+|\bet al\.|\bpaper\b|\bFAST'?\d\d|\bNeurIPS|\bOSDI|\barXiv|\bblog\b|\bdesign doc"
    r"|\bdocs\b|\bREADME\b")
OWN_RUN = re.compile(
    r"\b(?:here|the replay|the replays|this replay|we|our|ours|us|this package|the package|this chapter|"
    r"the chapter's|this run|the run|the runs|prints?|printed|measured)\b|\b(?:above|below)(?=\s*[.,;:)]|\s*$)",
    re.IGNORECASE)

SAME = r"(?:\b(?:do|does|did)\s+the\s+same\b|\bthe\s+same\s+as\b|\bidentical(?:ly)?\b|(?<![-\w])equals?\b)"
VAGUE_SAME = re.compile(r"\b(?:do|does|did)\s+the\s+same\b|\bthe\s+same\s+as\b", re.I)
CONTRAST = r"(?:\bthat\s+\w+(?:\s+\w+)?\s+(?:do|does|did)\s+not\b|\bwhere\s+\w+\s+(?:do|does)\s+not\b)"
COMPARE = (r"(?:\b\w+er\s+than\b|\b(?:more|less|fewer)\s+(?:\w+\s+){0,3}than\b|"
           r"\b(?:short|long|low|high|fast|slow)(?:er)?\s+(?:queues?|waits?|latenc\w+|TTFTs?|tails?)\b)")
NEVER = r"(?:\b(?:no|nothing|none|never)\b[^.;:]*\bin\s+this\s+chapter\b|\bthis\s+chapter\b[^.;:]*\b(?:no|never|nothing|none)\b)"
CLAIMS = {"never": re.compile(NEVER, re.I), "same": re.compile(SAME, re.I), "contrast": re.compile(CONTRAST, re.I),
          "compare": re.compile(COMPARE, re.I)}


@dataclass
class Finding:
    """One unchecked piece of prose: a figure, or a claim without a number."""

    chapter: str
    cell: int
    kind: str            # "figure" or the claim's class ("same", "contrast", "compare", "never")
    text: str            # the figure as written, or the claim's words
    sentence: str        # where it stands
    section: str = ""    # the "## " heading it stands under
    subsection: str = ""  # and the "### " one, if any

    def __str__(self) -> str:
        what = f"figure {self.text!r}" if self.kind == "figure" else f"{self.kind} claim {self.text!r}"
        where = self.subsection or self.section
        return f"{self.chapter} cell {self.cell} [{where[:40]}]: {what} unchecked, in: {shorten(self.sentence)}"


def shorten(text: str, width: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def strip_markup(text: str) -> str:
    """The prose of a markdown cell without what is never a figure: fences, HTML comments, History
    boxes, link targets and images. Inline code spans are kept for now (citations are read in them)."""
    text = re.sub(r"^[ \t]*>[ \t]?", "", text, flags=re.M)                     # blockquotes: their text
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"<details>\s*<summary>\s*History.*?</details>", " ", text, flags=re.S | re.I)
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", " ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = re.sub(r"https?://\S+", " ", text)
    return text


def self_test_span(text: str) -> str:
    """The cell without its self-test (questions and folded answers): they pose their own cases."""
    return re.sub(r"\*\*Self-test\b.*?</details>", " ", text, flags=re.S)


def sentences(paragraph: str) -> list[str]:
    """Split on sentence ends (not on "e.g.", decimals or abbreviations with a period inside)."""
    parts = re.split(r"(?<=[.!?])\s+(?=[A-Z*(`\"“])|\n\s*\n|\n\s*[-*]\s+|\n\s*\d+\.\s+", paragraph)
    return [p.strip() for p in parts if p and p.strip()]


def clauses(sentence: str) -> list[str]:
    return [c for c in re.split(r"(?<=[;:])\s+|\s+—\s+|\s+--\s+", sentence) if c.strip()]


def _is_pointer(before: str) -> bool:
    """Whether the words right before a number make it a pointer or a name ("chapter 05", "cells 32–33")."""
    before = re.sub(r"\([^()]*\)\s*$", "", before.rstrip()).rstrip()     # "Exercises 21 (hashes) and 22"
    # walk back over a list of numbers: "chapters 02, 03 and" -> "chapters"
    while True:
        m = re.search(r"(?:,|\band\b|\bor\b|\bto\b|–|-|&)\s*$", before)
        if not m:
            break
        rest = re.sub(r"\([^()]*\)\s*$", "", before[: m.start()].rstrip()).rstrip()
        m2 = re.search(r"(?<![\w.])\d+[a-z]?\s*$", rest)
        if not m2:
            break
        before = rest[: m2.start()].rstrip()
    return bool(POINTER_HEADS.search(before[-30:])) and not re.search(r"\d\s*$", before)


def _exempt_number(text: str, m: re.Match) -> bool:
    start, end = m.start("num"), m.end("num")
    num = m["num"]
    after = text[end:end + 3]
    before = text[max(0, start - 200):start]
    if re.match(r"[A-Za-z_]", after) and not m["unit"].strip():       # 0.6B, 1st, 4o, 3D, FP8 ...
        return True
    if re.match(r"\.\d", after) or re.match(r"\d", text[start - 1:start] or " "):   # 0.33.0
        return True
    if re.match(r"[-/]\d", after) and re.match(r"^\d{4}$", num):      # dates 2026-12-01
        return True
    if YEAR_OR_DATE.match(num) and not re.match(r"\s*(?:tokens?|blocks?|requests?|pages?|bytes?)", text[end:end + 12]):
        return True
    if re.search(r"(?:^|\n)\s*(?:#+\s*)?$", before) and re.match(r"\.(?:\s|$)", after):   # list / heading numbers
        return True
    if re.search(r"(?:^|\n)#+\s*$", before):
        return True
    if re.search(r"[A-Za-z_]\w*[-_]$", before):                       # Qwen3-0.6B, r-1, sm_80
        return True
    return _is_pointer(before)


@dataclass
class Figure:
    text: str
    value: float
    half_step: float
    points: bool = False     # percentage points ("3 points"): an assert may hold it as 0.03


def parse_prose_figure(num: str, unit: str, after: str = "") -> Figure | None:
    unit = unit.strip()
    try:
        value, half = parse_figure(num + unit)
    except ValueError:
        return None
    points = bool(re.match(r"[-\s]*(?:percentage[-\s]+)?points?\b", after))
    return Figure(num + unit, value, half, points)


def paragraphs(text: str) -> list[str]:
    """Blank-line separated blocks; a list item or a table row starts a block of its own."""
    return [p for p in re.split(r"\n\s*\n|\n(?=\s*(?:[-*]|\d+\.)\s)|\n(?=\s*>?\s*\|)", text) if p.strip()]


def attributed(text: str, with_sentence: bool = False) -> list:
    """Each clause of ``text`` with whether it reports another system's figure: it cites a source, or
    follows such a clause in the same sentence (or in the next, if that one opens with "Its", "Their",
    "They", ...) without speaking of this chapter's own runs again."""
    out = []
    for paragraph in paragraphs(strip_markup(text)):
        exempt = False
        for sentence in sentences(paragraph):
            # another system's figures go on into the next sentence only if it goes on about them
            exempt = exempt and bool(re.match(r"[*_(\s]*(?:Its|It|Their|They|There|These|Those|The paper)\b", sentence))
            for clause in clauses(sentence):
                if CITATION_MARK.search(clause):
                    exempt = not OWN_RUN.search(re.sub(r"`[^`]*`", " ", clause))
                elif exempt and OWN_RUN.search(clause):
                    exempt = False
                out.append((clause, exempt, sentence) if with_sentence else (clause, exempt))
    return out


def prose_figures(text: str) -> list[tuple[Figure, str]]:
    """The figures ``text`` quotes about the chapter's runs, each with its clause."""
    out: list[tuple[Figure, str]] = []
    for clause, exempt in attributed(text):
        if exempt:
            continue
        plain = re.sub(r"`[^`]*`", " ", clause)                                 # code spans: code
        plain = re.sub(r"\"[^\"\n]*\"|“[^”]*”", " ", plain)                     # quoted words: a model's or a doc's
        for m in NUMBER.finditer(plain):
            if _exempt_number(plain, m):
                continue
            unit = m["unit"]
            if not unit.strip() and re.match(r"\s*(?:–|-|to)\s*\d[\d.,]*\s?%", plain[m.end():]):
                unit = "%"                                                   # "79–90%": both ends are percentages
            figure = parse_prose_figure(m["num"], unit, plain[m.end():m.end() + 24])
            if figure is not None:
                out.append((figure, clause))
    return out


def prose_claims(text: str) -> list[tuple[str, str, str]]:
    """(class, matched words, sentence) for every claim without a number in ``text``'s prose (a claim
    is looked for clause by clause: a clause that reports another system's claim is skipped)."""
    out = []
    text = re.sub(r"^#.*$", " ", text, flags=re.M)                                   # headings name, not claim
    for clause, exempt, sentence in attributed(text, with_sentence=True):
        if exempt or clause.rstrip(" *_)").endswith("?") or "Predict" in clause[:20]:
            continue                                                         # others' claims; questions
        plain = re.sub(r"`([^`]*)`", r"\1", clause)
        for kind, pattern in CLAIMS.items():
            m = pattern.search(plain)
            if m:
                out.append((kind, " ".join(m.group(0).split()), sentence))
                break
    return out


# --------------------------------------------------------------------------------- the checks


@dataclass
class Checks:
    """What the chapter's code states: said() figures, assert literals, and the checks' messages."""

    said: list[Figure] = field(default_factory=list)
    literals: list[float] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)

    def add_code(self, source: str) -> None:
        try:
            tree = ast.parse(_strip_magics(source))
        except SyntaxError:
            return
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _called(node) == "said" and node.args:
                quote = node.args[0]
                if isinstance(quote, ast.Constant) and isinstance(quote.value, str):
                    self.messages.append(quote.value)
                    try:
                        value, half = parse_figure(quote.value)
                        self.said.append(Figure(quote.value, value, half))
                    except ValueError:
                        pass
            elif isinstance(node, ast.Assert):
                if node.msg is not None:
                    self.messages += [s.value for s in ast.walk(node.msg)
                                      if isinstance(s, ast.Constant) and isinstance(s.value, str)]
                for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
                    for operand in [compare.left, *compare.comparators]:
                        self.literals += _operand_literals(operand)

    def covers_figure(self, figure: Figure) -> bool:
        for s in self.said:
            if _same(s.value, figure.value) and _same(s.half_step, figure.half_step):
                return True
        if figure.text.endswith("%"):
            candidates = {figure.value, figure.value * 100}
        elif figure.points:
            candidates = {figure.value, figure.value / 100}
        else:
            candidates = {figure.value}
        return any(_same(lit, c) for lit in self.literals for c in candidates)

    def covers_claim(self, sentence: str) -> bool:
        words = _words(sentence)
        text = " " + " ".join(words) + " "
        for message in self.messages:
            mw = _words(message)
            for i in range(len(mw) - 3):
                if " " + " ".join(mw[i:i + 4]) + " " in text:
                    return True
        return False


def _strip_magics(source: str) -> str:
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def _called(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _operand_literals(node: ast.expr) -> list[float]:
    """Numbers an assert compares against: the operand itself, or inside abs(x - LIT), round(...),
    x == pytest.approx(LIT), a tuple/list of them, or LIT * something."""
    out = []
    for n in ast.walk(node):
        if isinstance(n, ast.Subscript):
            continue
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool):
            out.append(float(n.value))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub) and isinstance(n.operand, ast.Constant) \
                and isinstance(n.operand.value, (int, float)):
            out.append(-float(n.operand.value))
    # a subscript's index is no figure: drop the constants that sit in slices/indices
    for n in ast.walk(node):
        if isinstance(n, ast.Subscript):
            for c in ast.walk(n.slice):
                if isinstance(c, ast.Constant) and isinstance(c.value, (int, float)) and float(c.value) in out:
                    out.remove(float(c.value))
    return out


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9%]+(?:\.[0-9]+)?", re.sub(r"[`*_]", "", text.lower()).replace("’", "'"))


# ---------------------------------------------------------------------------------- a chapter


def try_it_fences(text: str) -> list[str]:
    """The ``python`` fences of a chapter's Try it section (from "## Try it" to the next "## "
    heading), in order, dedented (a fence inside a list item is indented with it)."""
    m = re.search(r"^## Try it\b.*?(?=^## |\Z)", text, flags=re.S | re.M)
    if not m:
        return []
    return [textwrap.dedent(f.group(2)) for f in
            re.finditer(r"^([ \t]*)```python[ \t]*\n(.*?)^\1```", m.group(0), flags=re.S | re.M)]


def sections(text: str, current: str) -> list[tuple[str, str]]:
    """A markdown cell cut at its "## " headings, as (heading, text) pairs; text before the cell's first
    heading belongs to ``current``, the section the cell continues."""
    parts: list[tuple[str, str]] = [(current, "")]
    for line in text.splitlines(keepends=True):
        if line.startswith("## "):
            parts.append((line[3:].strip(), ""))
        parts[-1] = (parts[-1][0], parts[-1][1] + line)
    return [(h, t) for h, t in parts if t.strip()]


ANSWERS = re.compile(r"<details>\s*<summary>\s*Answers?\b.*?</details>", re.S | re.I)
CITING_SECTIONS = ("vLLM / SGLang", "Read the real code", "Exercises", "How to explain it")
RUN = re.compile(r"\b(?:print|display|plt\.show|\.plot|\.show)\s*\(|\A(?:.*\n)*[A-Za-z_][\w.]*\s*\Z")


def _has_check(source: str) -> bool:
    return bool(re.search(r"^\s*assert\b|\bsaid\(", source, re.M))


def check_chapter(path: Path) -> list[Finding]:
    """The chapter's unchecked figures and claims (see the module docstring for the rules)."""
    cells = json.loads(Path(path).read_text())["cells"]
    name = Path(path).stem
    code = ["".join(c["source"]) if c["cell_type"] == "code" else None for c in cells]
    chapter, tried = Checks(), Checks()
    for source in code:
        if source is not None:
            chapter.add_code(source)
    fences = [f for c in cells if c["cell_type"] == "markdown" for f in try_it_fences("".join(c["source"]))]
    inputs: list[float] = []
    for fence in fences:
        tried.add_code(fence)
        inputs += _all_literals(fence)

    def runs_beside(i: int) -> list[str]:
        """The code cells between markdown cell i and its neighbouring markdown cells."""
        out = []
        for step in (-1, 1):
            j = i + step
            while 0 <= j < len(cells) and code[j] is not None:
                out.append(j)
                j += step
        return out

    inputs_of = {j: _run_inputs(src) for j, src in enumerate(code) if src is not None}
    findings: list[Finding] = []
    current, sub = "", ""
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        near = runs_beside(i)
        beside = [code[j] for j in near]
        unchecked_run = any(RUN.search(src) and "predict(" not in src and ".reveal(" not in src and not _has_check(src)
                            for src in beside)
        set_up_with = [x for j in near for x in inputs_of[j]]
        for heading, text in sections(self_test_span("".join(cell["source"])), current):
            if heading != current:
                current, sub = heading, ""
            subs = re.findall(r"^### (.*)$", text, flags=re.M)
            if subs and text.lstrip().startswith("###"):
                sub = subs[0].strip()
            if heading.startswith(CITING_SECTIONS):
                continue
            if heading == "Try it":
                answers = "".join(ANSWERS.findall(text))
                question = ANSWERS.sub(" ", text)
                for figure, where in prose_figures(question) + prose_figures(answers):
                    if not (tried.covers_figure(figure) or any(_same(figure.value, x) for x in inputs)):
                        findings.append(Finding(name, i, "figure", figure.text, where, heading, sub))
                for kind, words, sentence in prose_claims(answers):
                    if not tried.covers_claim(sentence):
                        findings.append(Finding(name, i, kind, words, sentence, heading, sub))
                continue
            for figure, where in prose_figures(text):
                is_input = heading != "Summary" and any(_same(figure.value, x) for x in set_up_with)
                if not (is_input or chapter.covers_figure(figure)):
                    findings.append(Finding(name, i, "figure", figure.text, where, heading, sub))
            for kind, words, sentence in prose_claims(text):
                if kind in ("same", "compare") and not VAGUE_SAME.search(sentence) and heading != "Summary" \
                        and not unchecked_run:
                    continue
                if chapter.covers_claim(sentence):
                    continue
                if heading != "Summary" and _covered_beside(kind, sentence, beside):
                    continue
                findings.append(Finding(name, i, kind, words, sentence, heading, sub))
    return findings


def _covered_beside(kind: str, sentence: str, beside: list[str]) -> bool:
    """A precise claim next to its run, checked there: "identical"/"equal" by an assert of ``==``, a
    "than" comparison by an assert of ``<``/``>``. Vague sameness ("does the same"), contrasts and
    comparisons without "than" must be quoted by the check instead."""
    asserts = [line for src in beside for line in src.splitlines() if re.match(r"\s*assert\b", line)]
    if kind == "same" and not VAGUE_SAME.search(sentence):
        return any("==" in a for a in asserts)
    if kind == "compare" and re.search(r"\bthan\b", sentence):
        return any(re.search(r"[<>]", a) for a in asserts)
    return False


OUTPUTS = {"print", "display", "said", "reveal", "format", "write", "set_title", "set_xlabel", "set_ylabel", "text"}


def _run_inputs(source: str) -> list[float]:
    """The inputs a code cell sets its run up with: the numbers in the arguments of its calls (by
    keyword or by position), in the values it assigns to names (``CAP = 6000``,
    ``budget = 256 * 2**20``) and in its functions' default arguments. What a cell prints or
    displays is its output, not an input; subscripts are not inputs either."""
    try:
        tree = ast.parse(_strip_magics(source))
    except SyntaxError:
        return []
    values: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called(node) not in OUTPUTS:
            values += node.args + [k.value for k in node.keywords]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            values.append(node.value)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            values += [d for d in node.args.defaults + node.args.kw_defaults if d is not None]
    return [x for v in values if not isinstance(v, ast.JoinedStr) for x in _operand_literals(v)]


def _all_literals(source: str) -> list[float]:
    try:
        tree = ast.parse(_strip_magics(source))
    except SyntaxError:
        return []
    return [float(n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool)]


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or CHAPTERS
    total = 0
    for path in paths:
        found = check_chapter(path)
        total += len(found)
        figures = sum(f.kind == "figure" for f in found)
        print(f"{path.stem}: {figures} unchecked figures, {len(found) - figures} unchecked claims")
        for f in found:
            print("  " + str(f))
    print(f"\n{total} unchecked in {len(paths)} chapters")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
