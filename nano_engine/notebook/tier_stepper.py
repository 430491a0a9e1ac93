"""tier_stepper.py - chapter 06's stepper: requests through SGLang's HiCache, a ``HiRadixCache``
over a device pool and a host pool.

The script (``ack``, ``match``, ``load``, ``lock``, ``forward``, ``insert``, ``unlock`` per request)
is in ``TierStepper``'s docstring. The diagram colours each node by tier and counts evictions per
tier (``nano_engine.notebook.viz.draw_tiered_radix``).

Stepping, going back, the widget and its static HTML are the base's: :mod:`nano_engine.notebook.stepper`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import graphviz

from nano_engine.hiradix import LOAD_BACK_THRESHOLD, HiRadixCache, TierMatch
from nano_engine.host_tier import CopyEngine, HostKVPool, HostTier
from nano_engine.notebook.stepper import Request, Step, _count, _Stepper, encode_requests
from nano_engine.notebook.viz import Tokenizer, draw_tiered_radix, format_slots, format_tokens
from nano_engine.paged import BlockPool, ceil_div


class _TierRun:
    """One pass of the tiered script over a fresh ``HiRadixCache``, a device pool and a host pool."""

    def __init__(self, requests: list[list[int]], device_tokens: int, tier: HostTier, page_size: int,
                 tokenizer: Tokenizer | None) -> None:
        self.requests, self.page_size, self.tokenizer = requests, page_size, tokenizer
        self.events: list[tuple[str, dict]] = []
        self.device = BlockPool(device_tokens // page_size)     # the device pool, in pages
        self.host = HostKVPool(tier.num_pages(page_size), page_size)
        self.tree = HiRadixCache(page_size, host=self.host, copies=CopyEngine(None, self.host), tier=tier,
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
            self._evict(short * self.page_size)
        return self.device.allocate(num_pages)

    def _evict(self, num_tokens: int) -> None:
        """Evict ``num_tokens`` of device leaves into the device pool (a load-back's room, as SGLang
        makes it: the whole load size)."""
        freed = self.tree.evict(num_tokens)
        self.device.free(sorted({s // self.page_size for s in freed}))

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
                self.loaded = tree.load_back(m, self.device.allocate, self._evict)
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
    is loaded back all or nothing, if at least ``load_back_threshold`` tokens; when the device pool
    is short it evicts device leaves for the whole load size, as SGLang 0.5.9 does), ``lock``, ``forward`` (start the load, compute the rest into new device slots,
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
        for name, size in (("device_tokens", device_tokens), ("host_tokens", host_tokens)):
            if not isinstance(size, int) or size < page_size or size % page_size:
                raise ValueError(f"{name} must be a whole number of pages ({page_size} tokens) >= 1 page, got {size!r}")
        self.tier = HostTier(host_tokens, write_policy, load_back_threshold)     # checks the policy and threshold
        self.requests = encode_requests(requests, tokenizer)
        for i, tokens in enumerate(self.requests):
            if ceil_div(len(tokens), page_size) * page_size > device_tokens:
                raise ValueError(f"request {i} has {len(tokens)} tokens; the device pool holds {device_tokens}")
        self.device_tokens, self.page_size, self.tokenizer = device_tokens, page_size, tokenizer
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
        return _TierRun(self.requests, self.device_tokens, self.tier, self.page_size, self.tokenizer)

    def _draw(self, run: _TierRun, step: Step | None) -> graphviz.Digraph:
        kind = step.kind if step else None
        return draw_tiered_radix(run.tree, self.tokenizer, events=step.events if step else (),
                                 show_match=kind in ("match", "load", "insert"), counts=run.counts(),
                                 device_capacity=self.device_tokens)

    def _intro(self) -> str:
        return (f"empty tree; device pool {self.device_tokens} tokens, host pool {self.tier.tokens} tokens, "
                f"{self.tier.write_policy}; {len(self.requests)} requests to run, one at a time")

