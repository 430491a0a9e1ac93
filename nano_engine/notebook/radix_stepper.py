"""radix_stepper.py - chapter 03's stepper: requests through SGLang's radix tree, a ``RadixCache``.

The script, per request: ``match`` its tokens, ``lock`` the node the match ended on (the hit must
survive while the request runs), and when the request finishes, ``insert`` its tokens with their KV
slots, ``unlock`` the matched node and, if the tree holds more than ``capacity`` tokens, ``evict``
the excess (least recently used leaves first).

With ``concurrent=N`` a later request can split a node an earlier one still holds locked: the
front of the split then inherits the lock.

Stepping, going back, the widget and its static HTML are the base's: :mod:`nano_engine.notebook.stepper`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import graphviz

from nano_engine.checks import require_int
from nano_engine.notebook.stepper import Request, Step, _check_concurrent, _count, _schedule, _Stepper, encode_requests
from nano_engine.notebook.viz import Tokenizer, draw_radix, format_slots, format_split, format_tokens
from nano_engine.radix import RadixCache


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
        require_int("capacity", capacity, minimum=0, optional=True)
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
