"""stepper.py - the stepper base: step requests through a cache, one operation at a time.

A stepper drives a real cache through a small script of the operations an engine performs for each
request: ``BlockPoolStepper`` (chapter 02, :mod:`nano_engine.notebook.pool_stepper`) a
``PrefixCachingBlockPool``, ``RadixStepper`` (chapter 03, :mod:`nano_engine.notebook.radix_stepper`)
a ``RadixCache``, and ``TierStepper`` (chapter 06, :mod:`nano_engine.notebook.tier_stepper`) a
``HiRadixCache`` with a host tier. Each step performs one operation on the real cache, draws the
cache (``nano_engine.notebook.viz``) and narrates, in one line, what the cache reported doing: the
narration is built from the cache's own event record (its ``on_event`` callback or KV events, and
its ``last_*`` attributes), never re-derived.

Use them from code (``step()``, ``back()``, ``reset()``, ``go_to(i)``, ``state``) or display one
in a notebook for Step / Back / Reset buttons and a slider over the steps.

Going back replays steps ``0 .. i-1`` on a fresh cache. The caches are deterministic, so the
replay reaches exactly the earlier state, with no snapshot to keep in sync.

With ``concurrent=N`` up to N requests run at once: a request finishes only when a new one needs
its place (or at the end), so later requests meet the locks and blocks of earlier ones.

Every stepper keeps the running hit rate, ``state.hits / state.queries``: the tokens the lookups
so far found cached over the tokens they looked up (a block pool looks up all but each prompt's
last token, a radix tree matches the whole prompt), shown under the narration as requests go by.

This module holds what the three share: ``Step`` and ``StepperState``, ``encode_requests``, the
``_Stepper`` base (stepping, the ipywidgets box with its buttons and slider, and ``to_html``, the
same stepper as HTML that needs no kernel) and the schedule of concurrent requests.
"""

from __future__ import annotations

import html
import re
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import graphviz

from nano_engine.checks import require_int
from nano_engine.notebook import static_html
from nano_engine.notebook.viz import Tokenizer

Request = str | Sequence[int]


@dataclass(frozen=True)
class Step:
    """One performed operation: its kind, the request it served, and what the cache reported."""

    kind: str
    request: int
    narration: str
    events: tuple = ()


@dataclass(frozen=True)
class StepperState:
    """Where a stepper stands: after ``index`` of ``num_steps`` steps, and what the last one did."""

    index: int
    num_steps: int
    kind: str | None  # the last step's kind, None at the start
    narration: str
    dot: str  # DOT source of the diagram
    events: tuple = field(default=())  # the cache's own events during the last step
    hits: int = 0  # tokens the lookups so far found cached ...
    queries: int = 0  # ... of the tokens they looked up

    @property
    def hit_rate(self) -> float | None:
        """``hits / queries`` so far; None before the first lookup."""
        return self.hits / self.queries if self.queries else None

    def hit_rate_text(self) -> str:
        """The running hit rate in words, as the widget shows it."""
        if not self.queries:
            return "hit rate: no lookup yet"
        return f"hit rate so far: {self.hits} of {self.queries} looked-up tokens cached ({self.hits / self.queries:.0%})"


def encode_requests(requests: Sequence[Request], tokenizer: Tokenizer | None) -> list[list[int]]:
    """Turn requests (text or token ids) into lists of token ids."""
    if not requests:
        raise ValueError("requests is empty: give at least one request (text or token ids)")
    out = []
    for i, request in enumerate(requests):
        if isinstance(request, str):
            if tokenizer is None:
                raise ValueError(f"request {i} is text; pass tokenizer= to encode it, or give token ids")
            encoder: Any = tokenizer  # viz.Tokenizer only promises decode; encoding needs a real tokenizer
            ids = encoder.encode(request, add_special_tokens=False)
            ids = list(getattr(ids, "ids", ids))  # a `tokenizers.Encoding` keeps them in .ids
        else:
            ids = [int(t) for t in request]
        if not ids:
            raise ValueError(f"request {i} has no tokens")
        out.append(ids)
    return out


class _Stepper(ABC):
    """Step bookkeeping and the widget, shared by the steppers.

    A subclass provides ``_new_run()`` (a fresh cache plus a generator performing the script one
    ``Step`` at a time) and ``_draw(run, step)``.
    """

    def __init__(self) -> None:
        self.num_steps = sum(1 for _ in self._new_run().steps())  # a dry run: counts and validates
        self._widget: Any = None
        self.reset()

    # -- stepping ---------------------------------------------------------------------------

    def reset(self) -> StepperState:
        """Back to the start: an empty cache, no step performed."""
        self._run = self._new_run()
        self._pending: Iterator[Step] = self._run.steps()
        self._last: Step | None = None
        self.index = 0
        self._refresh()
        return self.state

    def step(self) -> StepperState:
        """Perform the next operation (does nothing after the last one)."""
        if self.index < self.num_steps:
            self._last = next(self._pending)
            self.index += 1
            self._refresh()
        return self.state

    def back(self) -> StepperState:
        """Undo the last operation (replays the ones before it on a fresh cache)."""
        return self.go_to(self.index - 1)

    def go_to(self, index: int) -> StepperState:
        """Stand after ``index`` steps (0 .. ``num_steps``; clipped to that range)."""
        index = max(0, min(int(index), self.num_steps))
        if index < self.index:
            self._run = self._new_run()
            self._pending = self._run.steps()
            self._last, self.index = None, 0
        while self.index < index:
            self._last = next(self._pending)
            self.index += 1
        self._refresh()
        return self.state

    @property
    def state(self) -> StepperState:
        return self._state

    def diagram(self) -> graphviz.Digraph:
        """The current picture of the cache."""
        return self._draw(self._run, self._last)

    def _refresh(self) -> None:
        self._state = self._state_of(self._run, self.index, self._last)
        if self._widget is not None:
            self._update_widget()

    def _state_of(self, run: Any, index: int, last: Step | None) -> StepperState:
        narration = last.narration if last else self._intro()
        return StepperState(index, self.num_steps, last.kind if last else None, narration,
                            self._draw(run, last).source, last.events if last else (), *run.hit_counts())

    # -- without a kernel ---------------------------------------------------------------------

    def frames(self) -> Iterator[tuple[StepperState, graphviz.Digraph]]:
        """Every state from the start to the last step, with its diagram, on a fresh cache of its own."""
        run, index = self._new_run(), 0
        yield self._state_of(run, 0, None), self._draw(run, None)
        for step in run.steps():
            index += 1
            yield self._state_of(run, index, step), self._draw(run, step)

    def to_html(self) -> str:
        """The stepper as one self-contained HTML component that needs no kernel and no network.

        Every frame (narration, running hit rate, diagram as inline SVG) is in the page; Back, Step,
        Reset and a slider show one at a time, with a few lines of plain JavaScript. Static renderings
        of a notebook (the book) show this where JupyterLab shows the live widget.
        """
        frames = [f'<div class="nano-stepper-frame" data-index="{state.index}"{"" if state.index == 0 else " hidden"}>'
                  f'<div class="nano-stepper-narration">{_narration_html(state)}</div>'
                  f'<div class="nano-stepper-hit-rate">{_hit_rate_html(state)}</div>'
                  f'<div class="nano-stepper-diagram">{_svg_or_source(diagram)}</div></div>'
                  for state, diagram in self.frames()]
        button = ('<button type="button" class="nano-stepper-{0}" title="{1}" style="min-width: 80px; padding: 3px 10px; '
                  'white-space: nowrap; border: 1px solid #9e9e9e; border-radius: 3px; background: #f5f5f5; '
                  'cursor: pointer">{2}</button>')
        controls = (button.format("back", "undo the last step", "◀ Back")
                    + button.format("step", "perform the next operation", "Step ▶")
                    + button.format("reset", "back to an empty cache", "↺ Reset")
                    + f'<input type="range" class="nano-stepper-slider" min="0" max="{self.num_steps}" value="0" '
                      f'aria-label="step" style="width: 300px">')
        return ('<div class="nano-stepper nano-stepper-static" style="margin: 0.5em 0">'
                f'<div style="display: flex; gap: 6px; align-items: center">{controls}</div>'
                f'{"".join(frames)}<script>{_STEPPER_JS}</script></div>')

    # -- the widget ---------------------------------------------------------------------------

    @property
    def widget(self) -> Any:
        """The ipywidgets box (buttons, slider, narration, diagram), built on first use."""
        if self._widget is None:
            self._widget = self._build_widget()
            self._update_widget()
        return self._widget

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None, **kwargs: Any) -> Any:
        if static_html():
            return {"text/html": self.to_html(), "text/plain": f"{type(self).__name__}: {self.state.narration}"}
        return self.widget._repr_mimebundle_(include=include, exclude=exclude, **kwargs)

    def _build_widget(self) -> Any:
        import ipywidgets as w

        self._back = w.Button(description="Back", icon="step-backward", tooltip="undo the last step",
                              layout=w.Layout(width="90px"))
        self._next = w.Button(description="Step", icon="step-forward", button_style="primary",
                              tooltip="perform the next operation", layout=w.Layout(width="90px"))
        self._reset = w.Button(description="Reset", icon="undo", tooltip="back to an empty cache",
                               layout=w.Layout(width="90px"))
        self._slider = w.IntSlider(value=self.index, min=0, max=self.num_steps, description="step",
                                   continuous_update=False, layout=w.Layout(width="360px"))
        self._narration = w.HTML(layout=w.Layout(min_height="2.6em"))
        self._narration.add_class("nano-stepper-narration")
        self._hit_rate = w.HTML()
        self._hit_rate.add_class("nano-stepper-hit-rate")
        self._picture = w.HTML()
        self._picture.add_class("nano-stepper-diagram")
        for button, name in ((self._back, "back"), (self._next, "step"), (self._reset, "reset")):
            button.add_class(f"nano-stepper-{name}")  # stable handles for browser tests
        self._back.on_click(lambda _: self.back())
        self._next.on_click(lambda _: self.step())
        self._reset.on_click(lambda _: self.reset())
        self._slider.observe(lambda change: self.go_to(change["new"]), names="value")
        controls = w.HBox([self._back, self._next, self._reset, self._slider])
        return w.VBox([controls, self._narration, self._hit_rate, self._picture])

    def _update_widget(self) -> None:
        state = self.state
        self._slider.value = state.index  # re-enters go_to with the same index: a no-op
        self._back.disabled = state.index == 0
        self._next.disabled = state.index == state.num_steps
        self._narration.value = _narration_html(state)
        self._hit_rate.value = _hit_rate_html(state)
        self._picture.value = _svg_or_source(self.diagram())

    # -- for subclasses ----------------------------------------------------------------------

    @abstractmethod
    def _new_run(self) -> Any:
        """A fresh cache with the script ready to run: an object whose ``steps()`` yields ``Step``s."""

    @abstractmethod
    def _draw(self, run: Any, step: Step | None) -> graphviz.Digraph:
        """The picture of ``run``'s cache after ``step`` (None: before any step)."""

    @abstractmethod
    def _intro(self) -> str:
        """The narration before the first step."""


def _narration_html(state: StepperState) -> str:
    where = f"step {state.index} / {state.num_steps}" + (f" · {state.kind}" if state.kind else "")
    return (f'<div style="font-family: sans-serif; line-height: 1.4; min-height: 2.6em">'
            f'<span style="color: #6b6b6b">{where}</span><br>'
            f'<b>{html.escape(state.narration)}</b></div>')


def _hit_rate_html(state: StepperState) -> str:
    rate = state.hit_rate or 0.0
    return (f'<div style="font-family: sans-serif; display: flex; align-items: center; gap: 8px">'
            f'<div style="width: 160px; height: 10px; background: #e8e8e8">'
            f'<div class="nano-hit-rate-fill" style="width: {rate:.1%}; height: 100%; background: #4c9a2a">'
            f'</div></div>'
            f'<span>{html.escape(state.hit_rate_text())}</span></div>')


# The static stepper's behaviour: show frame i of the component this script ends.
_STEPPER_JS = """(function (root) {
  var frames = root.querySelectorAll('.nano-stepper-frame'), slider = root.querySelector('.nano-stepper-slider');
  var last = frames.length - 1, at = 0;
  function show(i) {
    at = Math.max(0, Math.min(last, i));
    frames.forEach(function (f, j) { f.hidden = j !== at; });
    slider.value = at;
    root.querySelector('.nano-stepper-back').disabled = at === 0;
    root.querySelector('.nano-stepper-step').disabled = at === last;
  }
  root.querySelector('.nano-stepper-back').onclick = function () { show(at - 1); };
  root.querySelector('.nano-stepper-step').onclick = function () { show(at + 1); };
  root.querySelector('.nano-stepper-reset').onclick = function () { show(0); };
  slider.oninput = function () { show(+slider.value); };
  show(0);
})(document.currentScript.parentElement);"""


def _svg_or_source(g: graphviz.Digraph) -> str:
    """The diagram as inline SVG; its DOT source if Graphviz's ``dot`` is not installed."""
    try:
        svg = g.pipe(format="svg", encoding="utf-8")
    except graphviz.ExecutableNotFound:
        return ("<p>Graphviz's <code>dot</code> program is not installed, so here is the diagram's "
                f"DOT source:</p><pre>{html.escape(g.source)}</pre>")
    return re.sub(r"^.*?(?=<svg)", "", svg, flags=re.S)  # drop the XML prolog and doctype


def _schedule(num_requests: int, concurrent: int,
              start: Callable[[int], Iterator[Step]], finish: Callable[[int], Iterator[Step]],
              must_wait: Callable[[int], bool] = lambda i: False) -> Iterator[Step]:
    """Start requests in order with at most ``concurrent`` running; the oldest finishes first.

    ``must_wait(i)`` says request ``i`` cannot start yet (no room): running ones finish until it can.
    """
    running: deque[int] = deque()
    for i in range(num_requests):
        while running and (len(running) == concurrent or must_wait(i)):
            yield from finish(running.popleft())
        yield from start(i)
        running.append(i)
    while running:
        yield from finish(running.popleft())


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _check_concurrent(concurrent: int) -> int:
    return require_int("concurrent", concurrent)
