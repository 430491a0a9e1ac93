"""listing.py - the two helpers of a chapter's "build it, then read the package's version".

``add_to_class(Cls)`` lets a chapter write a class one method per cell: the decorated function
becomes a method of ``Cls`` (d2l.ai's ``add_to_class``), so each cell holds one idea and runs it
before the next one starts.

``show_source(obj)`` shows the current source of a function, method or class of the package,
with its file and line numbers, read from the installed code each time the cell runs: a chapter
shows the real thing and never a pasted copy that can go stale.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def add_to_class(cls: type) -> Callable[[F], F]:
    """Decorator: attach the function to ``cls`` under its own name (returns it unchanged).

    >>> class Pool:
    ...     pass
    >>> @add_to_class(Pool)
    ... def size(self):
    ...     return 3
    >>> Pool().size()
    3
    """
    def attach(fn: F) -> F:
        setattr(cls, fn.__name__, fn)
        return fn
    return attach


class Source:
    """A listing: ``text`` (the source), ``where`` (``path:first-last``); shown highlighted in a
    notebook, as plain text elsewhere."""

    def __init__(self, text: str, where: str) -> None:
        self.text, self.where = text, where

    def __repr__(self) -> str:
        return f"# {self.where}\n{self.text}"

    def _repr_html_(self) -> str:
        try:
            from pygments import highlight
            from pygments.formatters import HtmlFormatter
            from pygments.lexers import PythonLexer
        except ImportError:  # pragma: no cover - pygments ships with IPython
            import html
            return f"<pre># {html.escape(self.where)}\n{html.escape(self.text)}</pre>"
        formatter = HtmlFormatter(noclasses=True, style="default")
        return (f'<div style="font-size:85%;color:#666">{self.where}</div>'
                + highlight(self.text, PythonLexer(), formatter))


def show_source(obj: Any) -> Source:
    """The source of ``obj`` (a function, method, property or class) as it is in the package now.

    >>> from nano_engine.paged import BlockPool
    >>> listing = show_source(BlockPool.allocate)
    >>> listing.where.startswith("nano_engine/paged.py:")
    True
    >>> listing.text.lstrip().startswith("def allocate(self, n: int)")
    True
    """
    target: Any = obj.fget if isinstance(obj, property) else obj
    if target is None:
        raise ValueError("show_source: a property without a getter has no source to show")
    lines, first = inspect.getsourcelines(target)
    text = _dedent(lines)
    path = Path(inspect.getsourcefile(target) or "?")
    parts = path.parts
    where = "/".join(parts[parts.index("nano_engine"):]) if "nano_engine" in parts else path.name
    return Source(text, f"{where}:{first}-{first + len(lines) - 1}")


def _dedent(lines: list[str]) -> str:
    indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    return "".join(line[indent:] if line.strip() else "\n" for line in lines).rstrip("\n")
