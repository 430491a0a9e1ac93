"""widgets.py - step requests through a prefix cache, one operation at a time.

``RadixStepper`` drives a ``RadixCache``, ``BlockPoolStepper`` a ``PrefixCachingBlockPool`` and
``TierStepper`` a ``HiRadixCache`` with a host tier (chapter 06) through a small script of the
operations an engine performs for each request. Each step performs
one operation on the real cache, draws the cache (``nano_engine.notebook.viz``) and narrates, in one line,
what the cache reported doing: the narration is built from the cache's own event record (its
``on_event`` callback or KV events, and its ``last_*`` attributes), never re-derived.

Use them from code (``step()``, ``back()``, ``reset()``, ``go_to(i)``, ``state``) or display one
in a notebook for Step / Back / Reset buttons and a slider over the steps.

Going back replays steps ``0 .. i-1`` on a fresh cache. The caches are deterministic, so the
replay reaches exactly the earlier state, with no snapshot to keep in sync.

The scripts:

* radix tree, per request: ``match`` its tokens, ``lock`` the node the match ended on (the hit must
  survive while the request runs), and when the request finishes, ``insert`` its tokens with their
  KV slots, ``unlock`` the matched node and, if the tree holds more than ``capacity`` tokens,
  ``evict`` the excess (least recently used leaves first).
* block pool, per request: ``lookup`` all tokens but the last (it is always computed, for its
  logits), ``touch`` the hit blocks, ``allocate`` blocks for the rest (a cached block taken from
  the head of the free queue is evicted here), ``cache`` its full blocks after the forward pass;
  when the request finishes, ``free`` its blocks.

With ``concurrent=N`` up to N requests run at once: a request finishes only when a new one needs
its place (or at the end), so later requests meet the locks and blocks of earlier ones. That is
how a split can hit a locked node, whose front then inherits the lock.

Both steppers keep the running hit rate, ``state.hits / state.queries``: the tokens the lookups
so far found cached over the tokens they looked up (a block pool looks up all but each prompt's
last token, a radix tree matches the whole prompt), shown under the narration as requests go by.

:func:`predict` is the other half of "predict, then run": a question the reader answers in a
text box before an experiment, and whose ``reveal(answer)`` shows the measured answer beside the
guess afterwards. In a live notebook the answer stays folded until the reader types a guess or
clicks "Show answer", so "Run All" does not give it away; headless, it just states the answer.
"""

from __future__ import annotations

import heapq
import html
import os
import re
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import graphviz

from nano_engine.hiradix import LOAD_BACK_THRESHOLD, HiRadixCache, TierMatch
from nano_engine.host_tier import WRITE_POLICIES, CopyEngine, HostKVPool
from nano_engine.kv_events import BlockStored, KVEvent
from nano_engine.notebook.viz import (
    Tokenizer,
    draw_block_pool,
    draw_radix,
    draw_tiered_radix,
    format_slots,
    format_split,
    format_tokens,
    short_hash,
)
from nano_engine.paged import BlockPool, ceil_div
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.radix import RadixCache

Request = str | Sequence[int]


def static_html() -> bool:
    """Whether widgets render as static HTML: ``NANO_ENGINE_STATIC_HTML=1``, which ``make book`` sets
    for the kernels that execute its pages (no kernel behind them afterwards); else live ipywidgets."""
    return os.environ.get("NANO_ENGINE_STATIC_HTML") == "1"


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


# ------------------------------------------------------------------------------- the base


class _Stepper(ABC):
    """Step bookkeeping and the widget, shared by both steppers.

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


def _blocks(ids: Sequence[int]) -> str:
    return f"block {ids[0]}" if len(ids) == 1 else "blocks " + ", ".join(map(str, ids))


def _check_concurrent(concurrent: int) -> int:
    if not isinstance(concurrent, int) or concurrent < 1:
        raise ValueError(f"concurrent must be an int >= 1, got {concurrent!r}")
    return concurrent


# ------------------------------------------------------------------------------- radix tree


class _SlotAllocator:
    """KV slots in whole pages: freed pages are reused lowest first, then new ones are opened."""

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.free_pages: list[int] = []
        self.next_page = 0

    def take(self, num_tokens: int) -> list[int]:
        slots: list[int] = []
        for _ in range(num_tokens // self.page_size):
            if self.free_pages:
                page = heapq.heappop(self.free_pages)
            else:
                page, self.next_page = self.next_page, self.next_page + 1
            slots += range(page * self.page_size, (page + 1) * self.page_size)
        return slots

    def give_back(self, slots: Sequence[int]) -> None:
        for s in slots:
            if s % self.page_size == 0:
                heapq.heappush(self.free_pages, s // self.page_size)


class _RadixRun:
    """One pass of the radix script over a fresh tree."""

    def __init__(self, requests: list[list[int]], page_size: int, capacity: int | None,
                 concurrent: int, tokenizer: Tokenizer | None,
                 make_tree: Callable[[], Any] | None = None) -> None:
        self.requests, self.capacity, self.concurrent = requests, capacity, concurrent
        self.tokenizer = tokenizer
        self.events: list[tuple[str, dict]] = []
        # A reader's own tree (make_tree) reports no events: its steps are narrated from what
        # its methods return and from its two sizes instead.
        self.plain = make_tree is not None
        self.tree = make_tree() if make_tree is not None else RadixCache(page_size, on_event=self.events.append)
        self.page_size = page_size
        self._note = ""
        self.slots = _SlotAllocator(page_size)
        self.matched: dict[int, tuple[Sequence[int], Any]] = {}  # request -> (hit slots, node it locked)
        self.hits = self.queries = 0

    def hit_counts(self) -> tuple[int, int]:
        return self.hits, self.queries

    def steps(self) -> Iterator[Step]:
        return _schedule(len(self.requests), self.concurrent, self._start, self._finish)

    def _perform(self, kind: str, i: int, action: Callable[[], tuple[str, str] | None]) -> Step:
        """Run ``action`` and narrate the events it caused, between the two notes it returns."""
        first = len(self.events)
        sizes = (self.tree.evictable_size, self.tree.protected_size)
        before, after = action() or ("", "")
        events = self.events[first:]
        evictions = [data for k, data in events if k == "evict"]
        parts = [before, *(self._narrate(e) for e in events if e[0] != "evict")]
        if self.plain:
            parts.append(self._plain_narration(kind, sizes))
        if len(evictions) == 1:
            parts.append(f"evict leaf {self._leaf(evictions[0])}, the least recently used")
        elif evictions:
            parts.append("evict leaves, least recently used first: "
                         + ", ".join(self._leaf(data) for data in evictions))
        parts.append(after)
        return Step(kind, i, f"r{i}: " + "; ".join(p for p in parts if p), tuple(events))

    def _leaf(self, data: dict) -> str:
        return f"{format_tokens(data['key'], self.tokenizer)} (slots {format_slots(data['slots'])})"

    def _start(self, i: int) -> Iterator[Step]:
        tokens = self.requests[i]

        def match() -> None:
            self.matched[i] = self.tree.match_prefix(tokens)
            self.hits += len(self.matched[i][0])
            self.queries += len(tokens)
            self._note = f"match {len(self.matched[i][0])} of {_count(len(tokens), 'token')}"

        yield self._perform("match", i, match)
        node = self.matched[i][1]
        if node is not self.tree.root:
            yield self._perform("lock", i, lambda: self.tree.inc_lock_ref(node))

    def _finish(self, i: int) -> Iterator[Step]:
        tokens = self.requests[i]
        hit, node = self.matched.pop(i)
        stored = len(tokens) - len(tokens) % self.page_size

        def insert() -> tuple[str, str]:
            # The request computed KV for everything past its hit, in slots of its own.
            value = list(hit) + self.slots.take(stored - len(hit))
            cached = self.tree.insert(tokens[:stored], value)
            self._note = (f"insert: first {_count(cached, 'token')} already cached" if cached
                          else f"insert: {_count(stored, 'token')}, none cached before")
            duplicates = value[len(hit):cached]  # another request stored these tokens meanwhile
            self.slots.give_back(duplicates)
            note = f"frees its duplicate slots {format_slots(duplicates)}" if duplicates else ""
            return f"finishes after computing {_count(len(tokens) - len(hit), 'token')}", note

        yield self._perform("insert", i, insert)
        if node is not self.tree.root:
            yield self._perform("unlock", i, lambda: self.tree.dec_lock_ref(node))
        capacity = self.capacity
        over = self.tree.total_size() - capacity if capacity is not None else 0
        if capacity is not None and over > 0:
            def evict() -> tuple[str, str]:
                total = self.tree.total_size()
                freed = self.tree.evict(over)
                self.slots.give_back(freed)
                self._note = f"evict {_count(len(freed), 'token')}: slots {format_slots(freed)}"
                short = "" if self.tree.total_size() <= capacity else \
                    f"the rest is locked: the tree stays {self.tree.total_size() - capacity} over"
                return f"the tree holds {total} > {capacity} tokens", short

            yield self._perform("evict", i, evict)

    def _plain_narration(self, kind: str, sizes: tuple[int, int]) -> str:
        """What a tree without events did, read from its returns and its two sizes."""
        if kind in ("lock", "unlock"):
            moved = abs(self.tree.protected_size - sizes[1])
            if not moved:
                return f"{kind}: " + ("already protected" if kind == "lock" else "still protected by another request")
            arrow = "evictable → protected" if kind == "lock" else "protected → evictable"
            return f"{kind}: {_count(moved, 'token')} {arrow}"
        note, self._note = self._note, ""
        return note

    def _narrate(self, event: tuple[str, dict]) -> str:
        kind, data = event
        tok = self.tokenizer
        nodes = {n.id: n for n in self.tree.nodes()}
        if kind == "match":
            if data["matched"] == 0:
                return f"match: none of its {_count(data['key_len'], 'token')} is cached"
            run = format_tokens(nodes[data["path"][-1]].key, tok)
            return f"match {data['matched']} of {data['key_len']} tokens, ending at {run}"
        if kind == "split":
            lock = data["inherited_lock"]
            return (f"split {format_split(data['key_before'], data['at'], tok)} at {data['at']}; "
                    + (f"the front inherits lock {lock}" if lock else "both parts unlocked"))
        if kind == "insert":
            cached = data["already_cached"]
            if data["node"] is None:
                return f"insert: all {cached} tokens already cached, nothing new"
            leaf = f"new leaf {format_tokens(data['key'], tok)} at slots {format_slots(data['slots'])}"
            return f"insert: first {_count(cached, 'token')} already cached, {leaf}" if cached else f"insert {leaf}"
        if kind in ("lock", "unlock"):
            node = nodes[data["node"]]  # still in the tree: nothing is evicted between event and narration
            run = format_tokens(node.key, tok)
            ancestors = len(data["path"]) - 1
            where = f"{run}" + (f" and {ancestors} ancestor{'s' * (ancestors > 1)}" if ancestors else "")
            if kind == "lock":
                moved = f"{data['moved']} tokens evictable → protected" if data["moved"] else \
                    f"already protected, now lock {node.lock_ref}"
            else:
                moved = f"{data['moved']} tokens protected → evictable" if data["moved"] else \
                    "still protected by another request"
            return f"{kind} {where}: {moved}"
        return f"{kind} {data}"  # an event kind this narrator does not know yet: show it raw


class RadixStepper(_Stepper):
    """Step requests through a ``RadixCache``: match → lock → … → insert → unlock → evict.

    Args:
        requests: token-id lists, or text when ``tokenizer`` is given.
        page_size: the tree's page size (KV slots are handed out in aligned pages).
        capacity: most tokens the tree may keep; after a request finishes, the excess is evicted.
            ``None``: never evict.
        tokenizer: decodes token runs in the diagram and narration (and encodes text requests).
        concurrent: how many requests run at once (1: one after the other).
        make_tree: builds a fresh tree of your own (any class with the ``RadixCache`` methods and
            sizes, e.g. the one a chapter writes); narrated from its returns, as it has no events.

    Two requests at a time: r2 holds [1 .. 5] locked when r3 splits it.

    >>> s = RadixStepper([[1, 2, 3, 4, 5], [9], [1, 2, 3, 4, 5, 6], [1, 2, 3, 7]], concurrent=2)
    >>> for _ in range(5):
    ...     _ = s.step()
    >>> s.state.narration
    'r2: lock [1, 2, 3, 4, 5]: 5 tokens evictable → protected'
    >>> s.go_to(7).narration
    'r3: split [1, 2, 3 | 4, 5] at 3; the front inherits lock 1; match 3 of 4 tokens, ending at [1, 2, 3]'
    >>> s.back().kind, s.state.index
    ('insert', 6)
    """

    def __init__(self, requests: Sequence[Request], page_size: int = 1, capacity: int | None = None,
                 tokenizer: Tokenizer | None = None, *, concurrent: int = 1,
                 make_tree: Callable[[], Any] | None = None) -> None:
        if capacity is not None and (not isinstance(capacity, int) or capacity < 0):
            raise ValueError(f"capacity must be an int >= 0 or None, got {capacity!r}")
        if make_tree is not None and page_size != 1:
            raise ValueError("make_tree: a tree of your own is stepped with page_size=1 only")
        self.requests = encode_requests(requests, tokenizer)
        self.page_size, self.capacity, self.tokenizer = page_size, capacity, tokenizer
        self.concurrent = _check_concurrent(concurrent)
        self.make_tree = make_tree
        RadixCache(page_size)  # checks page_size before anything runs
        super().__init__()

    @property
    def tree(self) -> RadixCache:
        """The tree in its current state (read it; step to change it)."""
        return self._run.tree

    def _new_run(self) -> _RadixRun:
        return _RadixRun(self.requests, self.page_size, self.capacity, self.concurrent, self.tokenizer,
                         self.make_tree)

    def _draw(self, run: _RadixRun, step: Step | None) -> graphviz.Digraph:
        # Highlight what this step did: the walk of a match or insert, the leaves of an eviction.
        kind = step.kind if step else None
        walked = kind in ("match", "insert")
        return draw_radix(run.tree, self.tokenizer, show_match=walked, show_split=walked,
                          show_evicted=kind == "evict")

    def _intro(self) -> str:
        cap = "no capacity limit" if self.capacity is None else f"capacity {self.capacity} tokens"
        return f"empty tree; {len(self.requests)} requests to run, {cap}"


# ------------------------------------------------------------------------------- tiered radix tree


class _TierRun:
    """One pass of the tiered script over a fresh ``HiRadixCache``, a device pool and a host pool."""

    def __init__(self, requests: list[list[int]], device_tokens: int, host_tokens: int, page_size: int,
                 write_policy: str, load_back_threshold: int, tokenizer: Tokenizer | None) -> None:
        self.requests, self.page_size, self.tokenizer = requests, page_size, tokenizer
        self.events: list[tuple[str, dict]] = []
        self.device = BlockPool(device_tokens // page_size)     # the device pool, in pages
        self.host = HostKVPool(host_tokens // page_size, page_size)
        self.tree = HiRadixCache(page_size, host=self.host, copies=CopyEngine(None, self.host),
                                 write_policy=write_policy, load_back_threshold=load_back_threshold,
                                 on_event=self.events.append)
        self.hits = self.queries = 0
        self.device_hits = self.host_hits = 0
        self.match: TierMatch | None = None
        self.loaded = 0
        self.slots: list[int] = []          # the running request's new device slots
        self.locked: Any = None             # the node the running request locked

    def hit_counts(self) -> tuple[int, int]:
        return self.hits, self.queries

    def counts(self) -> dict[str, int]:
        """What the caption shows: evictions per tier and the copies' tokens, from the tree's events so far."""
        done = self.events
        return {"device evictions": sum(k in ("demote", "evict") for k, _ in done),
                "demoted": sum(k == "demote" for k, _ in done),
                "deleted": sum(k == "evict" for k, _ in done),
                "host evictions": sum(k == "evict_host" for k, _ in done),
                "tokens stored": self.tree.copies.bytes_written // self.host.bytes_per_token,
                "tokens loaded": self.tree.copies.bytes_loaded // self.host.bytes_per_token}

    def steps(self) -> Iterator[Step]:
        for i in range(len(self.requests)):
            yield from self._request(i)
        if self.tree.copies.in_flight():
            yield self._perform("ack", len(self.requests) - 1, self._acknowledge)

    def _perform(self, kind: str, i: int, action: Callable[[], str]) -> Step:
        first, skipped = len(self.events), self.tree.num_backup_skipped
        text = action()
        events = self.events[first:]
        parts = [text, *self._narrate_evictions(events)]
        if self.tree.num_backup_skipped > skipped:   # the tree counts these; it has no event for them
            parts.append(f"no host room for {_count(self.tree.num_backup_skipped - skipped, 'backup')}: not backed "
                         "up (every host copy also has a device copy, and host eviction takes host-only leaves)")
        return Step(kind, i, f"r{i}: " + "; ".join(p for p in parts if p), tuple(events))

    def _allocate(self, num_pages: int) -> list[int] | None:
        """Device pages, evicting device leaves (least recently used first) when the pool is short."""
        short = num_pages - self.device.num_free
        if short > 0:
            freed = self.tree.evict(short * self.page_size)
            self.device.free(sorted({s // self.page_size for s in freed}))
        return self.device.allocate(num_pages)

    def _acknowledge(self) -> str:
        copies = self.tree.copies
        queued = len(copies.submitted)
        copies.start_stores()
        acked = copies.poll()
        stores = sum(c.kind == "store" for c in acked)
        loads = len(acked) - stores
        text = f"begin step: start {_count(queued, 'queued copy')}" if queued else "begin step"
        parts = []
        if stores:
            stored = sum(len(c.src) for c in acked if c.kind == "store")
            parts.append(f"{_count(stores, 'store')} ({_count(stored, 'token')}): host copies readable")
        if loads:
            parts.append(f"{_count(loads, 'load')}: the loaded KV is readable on the device")
        return text + ("; acknowledge " + " and ".join(parts) + ", their nodes unlocked" if parts else "")

    def _request(self, i: int) -> Iterator[Step]:
        tokens, tok, tree = self.requests[i], self.tokenizer, self.tree
        if tree.copies.in_flight():
            yield self._perform("ack", i, self._acknowledge)

        def match() -> str:
            self.match = m = tree.match(tokens)
            self.hits += m.device_tokens
            self.queries += len(tokens)
            self.device_hits += m.device_tokens
            if not m.device_tokens and not m.host_tokens:
                return f"match: none of its {_count(len(tokens), 'token')} is cached"
            host = f", then {m.host_tokens} more on the host only" if m.host_tokens else ""
            return f"match {m.device_tokens} of {len(tokens)} tokens on the device{host}"

        yield self._perform("match", i, match)
        m = self.match
        assert m is not None
        self.loaded = 0
        if m.host_tokens:
            def load() -> str:
                self.loaded = tree.load_back(m, self._allocate)
                self.hits += self.loaded
                self.host_hits += self.loaded
                if self.loaded:
                    nodes = m.host_nodes()
                    return (f"load back {m.host_tokens} tokens (all or nothing) from host slots "
                            f"{format_slots([s for n in nodes for s in (n.host_value or [])])} into device slots "
                            f"{format_slots([s for n in nodes for s in n.value])}: copy queued, nodes locked")
                if m.host_tokens < tree.load_back_threshold:
                    return (f"host hit of {_count(m.host_tokens, 'token')} < load_back_threshold "
                            f"{tree.load_back_threshold}: not worth a copy, recompute it")
                return f"no device room to load {m.host_tokens} tokens: recompute them"

            yield self._perform("load", i, load)
        hit = m.device_tokens + self.loaded
        node = m.host_node if self.loaded else m.device_node
        self.locked = node if node is not tree.root else None
        if self.locked is not None:
            def lock() -> str:
                tree.inc_lock_ref(node)
                return f"lock the hit {format_tokens(node.key, tok)} and its ancestors"

            yield self._perform("lock", i, lock)

        def forward() -> str:
            loads = sum(c.kind == "load" for c in tree.copies.submitted)
            tree.copies.start_loads()
            need = ceil_div(len(tokens) - hit, self.page_size)
            pages = self._allocate(need)
            if pages is None:
                raise RuntimeError(f"r{i}: the device pool cannot hold {need} more pages")
            self.slots = [p * self.page_size + k for p in pages for k in range(self.page_size)]
            text = "forward: "
            if loads:
                text += "start the load first (on CPU it runs to the end now; on a GPU layer by layer), "
            return text + f"compute {_count(len(tokens) - hit, 'token')} into device slots {format_slots(self.slots)}"

        yield self._perform("forward", i, forward)

        def insert() -> str:
            stored = len(tokens) - len(tokens) % self.page_size
            hit_slots = m.device_slots + [s for n in m.host_nodes() for s in n.value] if self.loaded else m.device_slots
            value = hit_slots + self.slots[:stored - hit]
            before = len(self.events)
            cached = tree.insert(tokens[:stored], value)
            spare = value[hit:cached] + self.slots[stored - hit:]   # duplicates, and the partial last page
            self.device.free(sorted({s // self.page_size for s in spare}))
            new = [d for k, d in self.events[before:] if k == "insert" and d["node"] is not None]
            text = f"finishes; insert {_count(stored, 'token')}"
            if new:
                text += f": new leaf {format_tokens(new[0]['key'], tok)}"
            backups = [d for k, d in self.events[before:] if k == "backup"]
            if backups:
                text += (f"; {tree.write_policy}: back up " + ", ".join(format_tokens(d["key"], tok) for d in backups)
                         + " (stores queued, nodes locked until acknowledged)")
            return text

        yield self._perform("insert", i, insert)
        if self.locked is not None:
            locked = self.locked
            def unlock() -> str:
                tree.dec_lock_ref(locked)
                return f"unlock {format_tokens(locked.key, tok)}"

            yield self._perform("unlock", i, unlock)
            self.locked = None

    def _narrate_evictions(self, events: list[tuple[str, dict]]) -> list[str]:
        tok, out = self.tokenizer, []
        backed = {d["node"] for k, d in events if k == "backup"}
        for kind, data in events:
            run = format_tokens(data.get("key", []), tok)
            if kind == "demote":
                how = "written back first (write_back: the eviction waits), " if data["node"] in backed else ""
                out.append(f"device evicts {run}: {how}its host copy stays (now host only)")
            elif kind == "evict":
                out.append(f"device evicts {run}: no host copy, gone")
            elif kind == "evict_host":
                out.append(f"host evicts {run} (host only): gone")
        return out


class TierStepper(_Stepper):
    """Step requests through a ``HiRadixCache`` with a host tier, one request at a time.

    Per request: ``ack`` (start queued stores, acknowledge finished copies: the engine's
    ``begin_step``), ``match`` (one walk: the device hit, then the host hit), ``load`` (a host hit
    is loaded back all or nothing, if at least ``load_back_threshold`` tokens, evicting device
    leaves for room), ``lock``, ``forward`` (start the load, compute the rest into new device slots,
    evicting if the pool is short), ``insert`` (the write policy backs nodes up: stores queued),
    ``unlock``. The diagram colours each node by state (device only, device + host, host only),
    marks copies in flight, and counts evictions per tier in its caption.

    Args:
        requests: token-id lists, or text when ``tokenizer`` is given.
        device_tokens, host_tokens: the two pools' sizes in tokens (whole pages).
        page_size: tokens per page in both pools.
        write_policy: ``"write_through"``, ``"write_through_selective"`` or ``"write_back"``.
        load_back_threshold: the shortest host hit worth a copy (SGLang: 10 tokens).
        tokenizer: decodes token runs (and encodes text requests).

    >>> s = TierStepper([[1, 2, 3, 4], [5, 6, 7, 8], [1, 2, 3, 4, 9]], device_tokens=6, host_tokens=12,
    ...                 load_back_threshold=2)
    >>> [s.step().kind for _ in range(s.num_steps)][:9]
    ['match', 'forward', 'insert', 'ack', 'match', 'forward', 'insert', 'ack', 'match']
    >>> s.go_to(10).narration.split("; ")
    ['r2: load back 4 tokens (all or nothing) from host slots 0-3 into device slots 2-3, 0-1: copy queued, nodes locked', 'device evicts [5, 6, 7, 8]: its host copy stays (now host only)']
    >>> s.counts["device evictions"], s.counts["host hit tokens"]
    (2, 4)
    """

    def __init__(self, requests: Sequence[Request], device_tokens: int, host_tokens: int, page_size: int = 1,
                 write_policy: str = "write_through", load_back_threshold: int = LOAD_BACK_THRESHOLD,
                 tokenizer: Tokenizer | None = None) -> None:
        if write_policy not in WRITE_POLICIES:
            raise ValueError(f"write_policy must be one of {WRITE_POLICIES}, got {write_policy!r}")
        for name, size in (("device_tokens", device_tokens), ("host_tokens", host_tokens)):
            if not isinstance(size, int) or size < page_size or size % page_size:
                raise ValueError(f"{name} must be a whole number of pages ({page_size} tokens) >= 1 page, got {size!r}")
        if not isinstance(load_back_threshold, int) or load_back_threshold < 0:
            raise ValueError(f"load_back_threshold must be an int >= 0, got {load_back_threshold!r}")
        self.requests = encode_requests(requests, tokenizer)
        for i, tokens in enumerate(self.requests):
            if ceil_div(len(tokens), page_size) * page_size > device_tokens:
                raise ValueError(f"request {i} has {len(tokens)} tokens; the device pool holds {device_tokens}")
        self.device_tokens, self.host_tokens, self.page_size = device_tokens, host_tokens, page_size
        self.write_policy, self.load_back_threshold, self.tokenizer = write_policy, load_back_threshold, tokenizer
        super().__init__()

    @property
    def tree(self) -> HiRadixCache:
        """The tree in its current state (read it; step to change it)."""
        return self._run.tree

    @property
    def counts(self) -> dict[str, int]:
        """Evictions per tier and tokens copied so far (what the caption shows), plus the hits by tier."""
        run = self._run
        return {**run.counts(), "device hit tokens": run.device_hits, "host hit tokens": run.host_hits}

    def _new_run(self) -> _TierRun:
        return _TierRun(self.requests, self.device_tokens, self.host_tokens, self.page_size, self.write_policy,
                        self.load_back_threshold, self.tokenizer)

    def _draw(self, run: _TierRun, step: Step | None) -> graphviz.Digraph:
        kind = step.kind if step else None
        return draw_tiered_radix(run.tree, self.tokenizer, events=step.events if step else (),
                                 show_match=kind in ("match", "load", "insert"), counts=run.counts(),
                                 device_capacity=self.device_tokens)

    def _intro(self) -> str:
        return (f"empty tree; device pool {self.device_tokens} tokens, host pool {self.host_tokens} tokens, "
                f"{self.write_policy}; {len(self.requests)} requests to run, one at a time")


# ------------------------------------------------------------------------------- block pool


class _PoolRun:
    """One pass of the block-pool script over a fresh pool."""

    def __init__(self, requests: list[list[int]], num_blocks: int, block_size: int, concurrent: int,
                 tokenizer: Tokenizer | None, pool_kwargs: dict) -> None:
        self.requests, self.concurrent, self.tokenizer = requests, concurrent, tokenizer
        self.pool = PrefixCachingBlockPool(num_blocks, block_size, **pool_kwargs)
        self.events: list[KVEvent] = []
        self.pool.subscribe(self.events.append)
        self.tables: dict[int, list[int]] = {}  # running request -> its block table

    def hit_counts(self) -> tuple[int, int]:
        return self.pool.num_hits, self.pool.num_queries  # the pool counts its own lookups

    def steps(self) -> Iterator[Step]:
        # A request that would not find its blocks waits for running ones to free theirs.
        return _schedule(len(self.requests), self.concurrent, self._start, self._finish,
                         must_wait=lambda i: self.blocks_needed(i) > len(self.pool.free_queue))

    def _perform(self, kind: str, i: int, action: Callable[[], str]) -> Step:
        first = len(self.events)
        text = action()
        return Step(kind, i, f"r{i}: {text}", tuple(self.events[first:]))

    def blocks_needed(self, i: int) -> int:
        return ceil_div(len(self.requests[i]), self.pool.block_size)

    def _start(self, i: int) -> Iterator[Step]:
        pool, tokens = self.pool, self.requests[i]
        hit: list[int] = []

        def lookup() -> str:
            hit.extend(pool.lookup(tokens, max_tokens=len(tokens) - 1))
            head = f"lookup its first {len(tokens) - 1} tokens (the last is always computed): "
            if not hit:
                return head + "no full block cached"
            return head + f"{len(hit)} full block{'s' * (len(hit) > 1)} hit {hit} ({len(hit) * pool.block_size} tokens)"

        yield self._perform("lookup", i, lookup)
        if hit:
            def touch() -> str:
                was_free = [b for b in hit if pool.ref_cnt[b] == 0]
                pool.touch(hit)
                left = f"; {_blocks(was_free)} {'leaves' if len(was_free) == 1 else 'leave'} the free queue" \
                    if was_free else ""
                return f"touch {hit}: ref counts now {[pool.ref_cnt[b] for b in hit]}{left}"

            yield self._perform("touch", i, touch)
        need = self.blocks_needed(i) - len(hit)
        table = self.tables[i] = list(hit)  # the request's block table, drawn from now on
        if need:
            def allocate() -> str:
                blocks = pool.allocate(need)
                if blocks is None:  # the schedule waits until enough blocks are free
                    raise RuntimeError(f"r{i}: allocate({need}) failed with {len(pool.free_queue)} free blocks")
                table.extend(blocks)
                text = f"allocate {need} from the head of the free queue → {blocks}"
                if pool.last_evicted:
                    gone = ", ".join(f"block {b} ({short_hash(h)})" for b, h in pool.last_evicted)
                    text += f"; evict {gone}: cached but unused, now overwritten"
                return text

            yield self._perform("allocate", i, allocate)

        def cache() -> str:
            before = len(self.events)
            pool.cache_blocks(tokens, table, num_computed=len(tokens))
            stored = [h for e in self.events[before:] if isinstance(e, BlockStored) for h in e.block_hashes]
            computed = len(tokens) - len(hit) * pool.block_size
            text = f"the forward pass computes {_count(computed, 'token')}; "
            if not stored:
                return text + "no new full block to cache"
            names = [f"block {pool.hash_to_block[h]} as {short_hash(h)}" for h in stored]
            return text + "cache " + ", ".join(names)

        yield self._perform("cache", i, cache)

    def _finish(self, i: int) -> Iterator[Step]:
        pool = self.pool
        table = self.tables.pop(i)

        def free() -> str:
            pool.free(table)
            released = [b for b in reversed(table) if pool.ref_cnt[b] == 0]
            text = f"finishes; free {table}, last block first"
            if released:
                text += f": {_blocks(released)} {'joins' if len(released) == 1 else 'join'} the free queue's tail"
                kept = [b for b in released if pool.block_hash[b] is not None]
                if kept == released:
                    text += ", with their hashes" if len(kept) > 1 else ", with its hash"
                elif kept:
                    text += f", {_blocks(kept)} keeping {'their hashes' if len(kept) > 1 else 'its hash'}"
            return text

        yield self._perform("free", i, free)


class BlockPoolStepper(_Stepper):
    """Step requests through a ``PrefixCachingBlockPool``: lookup → touch → allocate → cache → free.

    Args:
        requests: token-id lists, or text when ``tokenizer`` is given.
        num_blocks, block_size: the pool's size.
        tokenizer: decodes cached blocks' tokens in the diagram (and encodes text requests).
        concurrent: how many requests run at once. A request that would not find enough free
            blocks waits for the oldest running ones to finish first.
        **pool_kwargs: passed to ``PrefixCachingBlockPool`` (``hash_algo``, ``uncached_first``).

    >>> s = BlockPoolStepper([[1, 2, 3, 4, 5], [1, 2, 3, 4, 9]], num_blocks=4, block_size=2)
    >>> [s.step().kind for _ in range(s.num_steps)]
    ['lookup', 'allocate', 'cache', 'free', 'lookup', 'touch', 'allocate', 'cache', 'free']
    """

    def __init__(self, requests: Sequence[Request], num_blocks: int, block_size: int,
                 tokenizer: Tokenizer | None = None, *, concurrent: int = 1, **pool_kwargs: Any) -> None:
        self.requests = encode_requests(requests, tokenizer)
        self.num_blocks, self.block_size, self.tokenizer = num_blocks, block_size, tokenizer
        self.concurrent = _check_concurrent(concurrent)
        self.pool_kwargs = pool_kwargs
        PrefixCachingBlockPool(num_blocks, block_size, **pool_kwargs)  # checks the sizes first
        for i, tokens in enumerate(self.requests):
            need = ceil_div(len(tokens), block_size)
            if need > num_blocks:
                raise ValueError(f"request {i} needs {need} blocks of {block_size} tokens; the pool has {num_blocks}")
        super().__init__()

    @property
    def pool(self) -> PrefixCachingBlockPool:
        """The pool in its current state (read it; step to change it)."""
        return self._run.pool

    def _new_run(self) -> _PoolRun:
        return _PoolRun(self.requests, self.num_blocks, self.block_size, self.concurrent,
                        self.tokenizer, self.pool_kwargs)

    def _draw(self, run: _PoolRun, step: Step | None) -> graphviz.Digraph:
        tables = {f"r{i}": t for i, t in run.tables.items()}
        return draw_block_pool(run.pool, self.tokenizer, block_tables=tables,
                               show_evicted=step is not None and step.kind == "allocate")

    def _intro(self) -> str:
        return (f"empty pool of {self.num_blocks} blocks × {self.block_size} tokens; "
                f"{len(self.requests)} requests to run")


# ------------------------------------------------------------------------------- predictions


class Prediction:
    """A question for the reader to answer before running an experiment.

    Display it (it is the last expression of a cell, or ``display(p)``): a text box under the
    question. After the experiment, ``p.reveal(answer)`` returns a :class:`Revealed`, the
    comparison of guess and answer as text; display it (last expression, or ``display(...)``;
    never ``print``, which would show the answer at once).

    How much shows depends on who is looking, so that "Run All" does not give the answer away:

    * a live notebook (widgets render): the answer stays folded under "Show answer" until the
      reader types a prediction (Enter) or clicks "Show answer"; a guess typed before the
      experiment ran is compared at once;
    * a headless run (nbclient, ``nbconvert --execute``) or a page rendered without widgets: the
      output's text is the whole comparison, answer included; a page rendered with the saved
      widget state shows the folded answer, which a click opens (no kernel needed).

    >>> p = Prediction("How many tokens will hit?")
    >>> p.reveal(480)
    'How many tokens will hit? Answer: 480 (no prediction typed).'
    >>> p = Prediction("How many tokens will hit?", guess="300")
    >>> p.reveal(480)
    'How many tokens will hit? You predicted 300; answer: 480 (off by 180).'
    """

    WAITING = "<i>run the experiment below to see the answer</i>"

    def __init__(self, question: str, answer: Any = None, guess: str = "") -> None:
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"question must be a non-empty string, got {question!r}")
        self.question, self.answer = question, answer
        self._guess = guess
        self._widget: Any = None
        self._revealed: Any = None  # the answer once reveal() ran (None before)
        self._result = ""

    @property
    def guess(self) -> str:
        """What the reader typed (stripped); "" when nothing was typed."""
        return (self._input.value if self._widget is not None else self._guess).strip()

    def reveal(self, answer: Any = None) -> Revealed:
        """Compare the guess with ``answer`` (default: the one given to the constructor)."""
        answer = self.answer if answer is None else answer
        if answer is None:
            raise ValueError("answer is missing: pass reveal(answer) or Prediction(..., answer=...)")
        self._revealed = answer
        self._sync()
        return Revealed(f"{self.question} {self._result}", self)

    def _compare(self) -> str:
        shown = _format_answer(self._revealed)
        if not self.guess:
            return f"Answer: {shown} (no prediction typed)."
        return f"You predicted {self.guess}; answer: {shown}{_miss(self.guess, self._revealed)}."

    def _sync(self, *_: Any) -> None:
        """Bring the result (and the widget, if shown) up to date with the guess and the answer."""
        if self._revealed is None:
            return
        self._result = self._compare()
        if self._widget is None:
            return
        if self.guess:  # the reader has committed to a prediction: compare openly
            self._output.value = f"<b>{html.escape(self._result)}</b>"
            self._input.disabled = True
        else:  # Run All, nobody typed: fold the answer away, a click (or a typed guess) opens it
            self._output.value = (f"<details class='nano-predict-fold'><summary>Show answer</summary>"
                                  f"<b>{html.escape(self._result)}</b> "
                                  f"<i>(or type your prediction and press Enter)</i></details>")

    @property
    def widget(self) -> Any:
        if self._widget is None:
            import ipywidgets as w

            self._input = w.Text(value=self._guess, placeholder="your prediction", continuous_update=False,
                                 layout=w.Layout(width="180px"))
            self._input.add_class("nano-predict-input")
            self._output = w.HTML(value=self.WAITING)
            self._output.add_class("nano-predict-answer")
            label = w.HTML(value=f"<b>Predict:</b> {html.escape(self.question)}")
            self._widget = w.VBox([label, w.HBox([self._input, self._output])])
            self._widget.add_class("nano-predict")
            self._input.observe(self._sync, names="value")  # a guess typed after the run opens the answer
            self._sync()
        return self._widget

    def to_html(self) -> str:
        """The question with a plain text box, for pages with no kernel (the answer is printed after the experiment)."""
        return ('<div class="nano-predict nano-predict-static" style="font-family: sans-serif; margin: 0.5em 0">'
                f'<b>Predict:</b> {html.escape(self.question)}<br>'
                '<input type="text" placeholder="your prediction" aria-label="your prediction" style="width: 180px"> '
                '<i class="nano-predict-answer">then read the answer under the experiment below</i></div>')

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None, **kwargs: Any) -> Any:
        if static_html():
            return {"text/html": self.to_html(), "text/plain": f"Predict: {self.question}"}
        bundle = self.widget._repr_mimebundle_(include=include, exclude=exclude, **kwargs)
        bundle["text/plain"] = f"Predict: {self.question} (type your answer in the box)"  # where widgets do not render
        return bundle


class Revealed(str):
    """The text ``Prediction.reveal`` returns: the whole comparison, answer included.

    Displayed in a notebook, a frontend that renders widgets shows the prediction's answer line
    (folded while no guess was typed); one that does not (a headless run's saved output, a static
    page) shows this text.
    """

    prediction: Prediction

    def __new__(cls, text: str, prediction: Prediction) -> Revealed:
        self = super().__new__(cls, text)
        self.prediction = prediction
        return self

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None, **kwargs: Any) -> Any:
        p = self.prediction
        p.widget  # noqa: B018 - builds the answer line if the question was never displayed
        bundle = p._output._repr_mimebundle_(include=include, exclude=exclude, **kwargs)
        bundle["text/plain"] = str(self)
        return bundle


def predict(question: str, answer: Any = None) -> Prediction:
    """Ask the reader ``question`` before an experiment; call ``.reveal(answer)`` after it."""
    return Prediction(question, answer)


def _format_answer(answer: Any) -> str:
    if isinstance(answer, float):
        return f"{answer:.3g}"
    return str(answer)


def _miss(guess: str, answer: Any) -> str:
    """How far a numeric guess was from a numeric answer ("" when either is not a number)."""
    try:
        guessed = float(guess.rstrip("%x ").replace(",", ""))
    except ValueError:
        return ""
    if not isinstance(answer, int | float) or isinstance(answer, bool):
        return ""
    if guessed == answer:
        return ": exactly right"
    off = abs(guessed - answer)
    return f" (off by {off:.3g})" if isinstance(answer, float) or off != int(off) else f" (off by {int(off)})"
