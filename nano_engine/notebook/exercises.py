"""Exercises inside the notebooks: show a problem, and a "Check my solution" button.

Each chapter ends with exercises from ``practice/``. In a notebook cell::

    from nano_engine.notebook.exercises import show_problem, check_button
    show_problem(21)        # the statement, rendered (the explanation stays folded)
    check_button(21)        # "Run examples" and "Check my solution"

The buttons run ``practice/judge.py test N --json`` on your file in ``practice/workspace/`` (create
it with ``python practice/judge.py start N``). The judge runs your code in a separate Python process
with a time limit, so an endless loop shows up as a "timeout" verdict instead of freezing the
kernel; the verdicts, the failing line, expected vs got and the local variables appear under the
buttons.
"""

from __future__ import annotations

import html
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[2]  # nano_engine/notebook/exercises.py
VERDICT_COLORS = {"accepted": "#1a7f37", "wrong answer": "#cf222e", "runtime error": "#8250df",
                  "compile error": "#8250df", "timeout": "#9a6700", "not run": "#6e7781"}


def practice_dir() -> Path:
    """The ``practice/`` folder next to the package (the repository checkout)."""
    path = REPO_ROOT / "practice"
    if not (path / "judge.py").is_file():
        raise FileNotFoundError(f"practice/judge.py not found under {REPO_ROOT}: the exercises live in the "
                                "repository checkout (install the package with `pip install -e .`)")
    return path


def _judge() -> ModuleType:
    """practice/judge.py as a module (for the exercise list and the problem files)."""
    name = "practice_judge"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, practice_dir() / "judge.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def problem_markdown(number: int | str) -> str:
    """The statement of exercise ``number`` as Markdown, front matter turned into one line."""
    judge = _judge()
    ex = judge.get_exercise(str(number))
    _, body = judge.parse_front_matter(ex.problem.read_text(encoding="utf-8"))
    tags = ", ".join(ex.meta.get("tags", []))
    start = f"`python practice/judge.py start {ex.number}`"
    return f"*{ex.difficulty} · chapter {ex.chapter} · {tags}* — start with {start}\n\n{body}"


def show_problem(number: int | str):
    """Render exercise ``number``'s problem.md in the notebook (returns an IPython Markdown object)."""
    from IPython.display import Markdown
    return Markdown(problem_markdown(number))


def exercise_list(chapter: str | None = None):
    """A Markdown table of the exercises (of one chapter, e.g. ``"03_radix_tree"``)."""
    from IPython.display import Markdown
    judge = _judge()
    rows = [e for e in judge.find_exercises() if chapter is None or e.chapter == chapter]
    lines = ["| # | exercise | difficulty | start |", "|---|---|---|---|"]
    lines += [f"| {e.number} | {e.title} | {e.difficulty} | `python practice/judge.py start {e.number}` |"
              for e in rows]
    return Markdown("\n".join(lines))


def run_judge(number: int | str, *, examples_only: bool = False, file: str | Path | None = None,
              workspace: str | Path | None = None, timeout: float = 10.0) -> dict:
    """Run the judge on exercise ``number`` in a separate process; return its JSON report.

    ``file`` judges another file than the workspace one; ``workspace`` moves the workspace
    (default: practice/workspace, or $NANO_ENGINE_WORKSPACE). A report that could not be
    produced comes back as ``{"error": "..."}``.
    """
    cmd = [sys.executable, str(practice_dir() / "judge.py"), "test", str(number), "--json",
           "--timeout", str(timeout)]
    if examples_only:
        cmd.append("--run")
    if file is not None:
        cmd += ["--file", str(file)]
    if workspace is not None:
        cmd += ["--workspace", str(workspace)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=str(REPO_ROOT),
                              timeout=60 + 20 * timeout)
    except subprocess.TimeoutExpired:
        return {"error": "the judge itself did not finish in time"}
    try:
        return json.loads(proc.stdout)
    except ValueError:
        detail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return {"error": "the judge failed: " + " / ".join(detail)}


def _esc(text: object) -> str:
    return html.escape(str(text))


def _locals_html(local_vars: dict | None) -> str:
    if not local_vars:
        return ""
    rows = "".join(f"<tr><td><code>{_esc(k)}</code></td><td style='text-align:left'><code>{_esc(v)}</code></td></tr>"
                   for k, v in local_vars.items())
    return f"<table style='font-size:90%;margin-left:1em'><tr><th>local</th><th>value</th></tr>{rows}</table>"


def _frame_html(frame: dict, label: str) -> str:
    return (f"<div><b>{_esc(label)} line {frame['lineno']}</b>: <code>{_esc(frame['line'])}</code></div>"
            + _locals_html(frame.get("locals")))


def _details_html(test: dict) -> str:
    failure = test.get("failure") or {}
    if test["verdict"] == "accepted":
        return ""
    parts = []
    if test["verdict"] == "wrong answer":
        if failure.get("test"):
            expression = failure.get("expression") or failure["test"]["line"]
            where = failure["test"].get("file", "test.py")   # problem.md for the worked example
            parts.append(f"<div><b>{_esc(where)} line {failure['test']['lineno']}</b>: <code>{_esc(expression)}</code></div>")
        if failure.get("message"):
            parts.append(f"<div>{_esc(failure['message'])}</div>")
        if "expected" in failure:
            parts.append(f"<div>expected: <code>{_esc(failure['expected'])}</code><br>"
                         f"got: <code>{_esc(failure['got'])}</code></div>")
        if failure.get("difference"):
            parts.append(f"<div><i>{_esc(failure['difference'])}</i></div>")
        parts.append(_locals_html((failure.get("test") or {}).get("locals")))
    else:
        parts.append(f"<div>{_esc(test.get('message', ''))}</div>")
        if failure.get("yours"):
            parts.append(_frame_html(failure["yours"], "your file"))
        if failure.get("test"):
            parts.append(f"<div>called from <b>{_esc(failure['test'].get('file', 'test.py'))} line "
                         f"{failure['test']['lineno']}</b>: <code>{_esc(failure['test']['line'])}</code></div>")
    if test.get("stdout"):
        cut = test.get("stdout_cut") or {}
        more = (f"<div><i>… and {cut['lines']:,} more lines, {cut['characters']:,} characters not kept</i></div>"
                if cut else "")
        parts.append(f"<div>printed:</div><pre>{_esc(test['stdout'])}</pre>{more}")
    return "".join(parts)


def _verdict_html(verdict: str) -> str:
    return f"<b style='color:{VERDICT_COLORS.get(verdict, '#000')}'>{_esc(verdict)}</b>"


def render_report(report: dict) -> str:
    """The judge's JSON report as HTML: a verdict line, then one row per test."""
    if "error" in report:
        return f"<div style='color:#cf222e'>{_esc(report['error'])}</div>"
    mode = " (examples only)" if report.get("mode") == "examples" else ""
    head = (f"<div>{_esc(report['exercise'])} · {_esc(report['title'])}{mode} — "
            f"{_verdict_html(report['verdict'])} — {_esc(report['summary'])}</div>"
            f"<div style='font-size:85%;color:#57606a'>{_esc(report['file'])}</div>")
    load_error = report.get("load_error")
    if load_error:
        where = ""
        if load_error.get("lineno"):
            where = f"<div>your file line {load_error['lineno']}: <code>{_esc(load_error.get('line', ''))}</code></div>"
        if load_error.get("pointer"):
            where += f"<pre>{_esc(load_error['pointer'])}</pre>"
        if load_error.get("where"):
            where += _frame_html(load_error["where"], "stuck at your file")
        return head + f"<div>{_verdict_html(load_error['verdict'])}: {_esc(load_error['message'])}</div>{where}"
    rows = "".join(
        f"<tr><td style='text-align:left'><code>{_esc(t['name'])}</code></td><td>{_verdict_html(t['verdict'])}</td>"
        f"<td style='text-align:left'>{_details_html(t)}</td></tr>" for t in report["tests"])
    return head + ("<table><tr><th>test</th><th>verdict</th><th>details</th></tr>" + rows + "</table>")


def check_button(number: int | str, *, file: str | Path | None = None, workspace: str | Path | None = None,
                 timeout: float = 10.0):
    """Buttons "Run examples" and "Check my solution" for exercise ``number``, with the verdicts
    shown under them. Returns an ipywidgets VBox; its ``run_button``, ``check_button`` and
    ``result`` (an HTML widget) attributes let code drive it (``box.check_button.click()``)."""
    import ipywidgets as widgets

    from nano_engine.notebook import static_html

    judge = _judge()
    ex = judge.get_exercise(str(number))
    if static_html():  # a page with no kernel (the book): say how to check it locally instead
        from IPython.display import HTML
        return HTML(f"<div class='nano-check' style='color:#57606a'>Check your solution in a clone: "
                    f"<code>python practice/judge.py start {_esc(ex.number)}</code>, edit the file it creates, "
                    f"then <code>python practice/judge.py test {_esc(ex.number)}</code> "
                    f"(or this button in JupyterLab).</div>")
    target = Path(file) if file is not None else ex.workspace_file(judge.workspace_dir(
        str(workspace) if workspace is not None else None))
    run_button = widgets.Button(description="Run examples", icon="play", tooltip="test_example* only")
    check = widgets.Button(description="Check my solution", icon="check", button_style="primary")
    result = widgets.HTML(value=f"<div style='color:#57606a'>{_esc(ex.number)} · {_esc(ex.title)}: your file is "
                                f"<code>{_esc(target)}</code> (create it with "
                                f"<code>python practice/judge.py start {_esc(ex.number)}</code>)</div>")

    def judge_now(examples_only: bool) -> None:
        result.value = "<i>judging…</i>"
        report = run_judge(ex.number, examples_only=examples_only, file=file, workspace=workspace,
                           timeout=timeout)
        result.value = render_report(report)

    run_button.on_click(lambda _: judge_now(True))
    check.on_click(lambda _: judge_now(False))
    box = widgets.VBox([widgets.HBox([run_button, check]), result])
    box.run_button, box.check_button, box.result = run_button, check, result
    return box
