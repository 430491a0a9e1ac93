"""hiradix.py: a radix tree whose nodes live on the device, on the host, or on both (SGLang's HiCache).

SGLang's ``HiRadixCache`` (``python/sglang/srt/mem_cache/hiradix_cache.py``, release 0.5.9; in 0.5.23
the same logic sits in ``unified_radix_cache.py``) keeps one tree for two tiers. Every node knows
where its span of KV lives:

===============  =================  ==================  =========================================
state            ``node.value``     ``node.host_value``  how it gets there
===============  =================  ==================  =========================================
device-only      device slots       None                inserted, not (yet) backed up
device+host      device slots       host slots           backed up (write policy), or loaded back
host-only        ``None`` (``[]``)  host slots           a backed-up node lost its device copy
===============  =================  ==================  =========================================

(SGLang marks a host-only node with ``value = None``, ``TreeNode.evicted``; this package uses ``[]``.)

Two eviction rules keep the tree usable (SGLang ``evict`` / ``evict_host``):

* **device eviction** takes only *device leaves* (device-resident, unlocked, no device-resident
  child). A backed-up one just drops its device copy and stays in the tree as host-only; one
  without a host copy is deleted (under ``write_back`` it is first copied to the host, and the
  eviction waits for that copy);
* **host eviction** takes only *host-only leaves* (no device copy, no children, not pinned by a
  load: ``host_ref`` 0) and deletes them. SGLang 0.5.23 pins the same way (``inc_host_lock_ref`` in
  ``UnifiedRadixCache.load_back``); 0.5.9's ``host_ref_counter`` protected copies on their way to or
  from a storage tier instead.

So the device-resident nodes form a prefix-closed set (a node on the device has its parent on the
device), and so do the nodes with a host copy (backing a node up backs up its ancestors first);
every node in the tree has at least one copy. ``check_invariants`` asserts all of it.

**One lookup, two tiers.** ``match(key)`` walks the tree once and returns a :class:`TierMatch`:
the device hit, then the host hit right after it, one contiguous prefix (SGLang's
``match_prefix`` returning ``device_indices`` and ``host_hit_length``). ``load_back`` copies the
host part to the device *all or nothing*, only if it is at least ``load_back_threshold`` tokens
(SGLang: 10). Device room is found as SGLang 0.5.9's ``HiRadixCache.load_back`` finds it: one try
with the free pages; if they are short, evict as many tokens as the load needs (the whole load
size, not only the shortfall) and try once more. If that second try fails too, nothing is loaded
and **the evictions stay**: the evicted nodes are gone from the device (demoted to the host if
they had a copy there). The eviction never takes the nodes being loaded or their ancestors (they
are locked and pinned meanwhile). ``match`` changes the tree (it splits and refreshes, as SGLang's
does), so the engine's manager looks first with ``peek``, which changes nothing, and checks that
the load and the request fit before it walks, loads and locks
(``tiered_cache_manager.TieredRadixCacheManager``): there, the second try cannot fail, so an
admitted request never pays for evictions it does not use.

**Copies in flight.** A node whose copy (store or load) has been submitted but not acknowledged is
locked (``inc_lock_ref``), so no eviction can take its device pages, and its host copy is not
readable yet (``node.copy.done`` is False). ``tiered_cache_manager.TieredRadixCacheManager`` runs
the copies at fixed points of an engine step (``host_tier.CopyEngine``); on CPU they are synchronous.

This module is the data structure only: it imports no engine module. The write policy and the
load-back threshold come in one :class:`~nano_engine.host_tier.HostTier` (``tier=``), checked there.

Fair simplifications: one device, so no tensor-parallel agreement on acknowledgements (SGLang
0.5.9 all-reduces the count of finished write-throughs with MIN so every rank changes its tree
identically, and does not sync load acknowledgements; 0.5.23 MIN-reduces both counts,
``UnifiedRadixCache._sync_hicache_ready_counts``); no third (storage) tier; LRU only.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from nano_engine.checks import require_int
from nano_engine.deprecation import moved
from nano_engine.host_tier import LOAD_BACK_THRESHOLD, Copy, CopyEngine, HostKVPool, HostTier, as_host_tier
from nano_engine.radix import Node, RadixCache, Tokens, _as_tokens

__all__ = ["LOAD_BACK_THRESHOLD", "HiNode", "HiRadixCache", "TierMatch", "TierPeek"]

# The engine's manager moved to tiered_cache_manager.py; the old import works for one release.
__getattr__ = moved(__name__, {"TieredRadixCacheManager": "nano_engine.tiered_cache_manager",
                               "TierHandle": "nano_engine.tiered_cache_manager"})


class HiNode(Node):
    """A radix node with a host copy: ``host_value`` (host slots, or None), ``hit_count`` (for
    ``write_through_selective``), ``copy`` (the store or load of this node still unacknowledged,
    or the last one), ``host_ref`` (pins the host copy while a load-back is being prepared)."""

    __slots__ = ("host_value", "hit_count", "copy", "host_ref")

    def __init__(self, key: list[int], value: list[int], parent: Node | None, id: int) -> None:
        super().__init__(key, value, parent, id)
        self.host_value: list[int] | None = None
        self.hit_count = 0
        self.copy: Copy | None = None
        self.host_ref = 0

    @property
    def on_device(self) -> bool:
        return bool(self.value)

    @property
    def backed_up(self) -> bool:
        """Has a host copy that can be read (its store was acknowledged)."""
        return self.host_value is not None and (self.copy is None or self.copy.done or self.copy.kind == "load")

    @property
    def in_flight(self) -> bool:
        return self.copy is not None and not self.copy.done

    @property
    def state(self) -> str:
        if self.on_device:
            return "device+host" if self.host_value is not None else "device"
        return "host"

    def __repr__(self) -> str:
        key = self.key if len(self.key) <= 8 else f"[{len(self.key)} tokens]"
        return f"HiNode(id={self.id}, key={key}, {self.state}, lock_ref={self.lock_ref})"


@dataclass
class TierMatch:
    """The result of one walk: ``device_slots`` (the device hit, ending on ``device_node``), then
    ``host_tokens`` more tokens on the host only, ending on ``host_node`` (``device_node`` when
    there is no host hit)."""

    device_slots: list[int]
    device_node: HiNode
    host_node: HiNode
    host_tokens: int

    @property
    def device_tokens(self) -> int:
        return len(self.device_slots)

    def host_nodes(self) -> list[HiNode]:
        """The host-only nodes of the hit, root side first."""
        nodes = []
        node = self.host_node
        while node is not self.device_node:
            nodes.append(node)
            node = node.parent_in_tree()   # type: ignore[assignment]
        return nodes[::-1]


@dataclass
class TierPeek:
    """``HiRadixCache.peek``: the device hit's slots, the host tokens right after it, and how many
    of the device hit's tokens are unlocked (evictable until a request locks them)."""

    device_slots: list[int]
    host_tokens: int
    unlocked_tokens: int


class HiRadixCache(RadixCache):
    """A :class:`~nano_engine.radix.RadixCache` over two tiers (see the module docstring).

    ``host``: the :class:`~nano_engine.host_tier.HostKVPool` for host copies; ``copies``: the
    :class:`~nano_engine.host_tier.CopyEngine` that moves them; ``tier``: the
    :class:`~nano_engine.host_tier.HostTier` whose write policy and load-back threshold apply
    (``write_policy=`` / ``load_back_threshold=`` are shorthand for one, sized like ``host``);
    ``make_host_room``: how to find host room when the pool is short (default: this tree's own
    ``evict_host``; a manager with several trees passes its own).

    Counters: ``num_backups`` (nodes backed up), ``num_backup_skipped`` (no host room),
    ``num_backup_failed`` (a write-back copy raised: the node was dropped instead),
    ``num_demoted`` (device copies dropped, host copy kept), ``num_loaded_tokens``.
    """

    def __init__(self, page_size: int = 1, *, host: HostKVPool, copies: CopyEngine, tier: HostTier | None = None,
                 write_policy: str | None = None, load_back_threshold: int | None = None,
                 make_host_room: Callable[[int], None] | None = None, **kwargs) -> None:
        tier = as_host_tier(host.num_slots if tier is None else tier, write_policy=write_policy,
                            load_back_threshold=load_back_threshold)
        if host.page_size != page_size:
            raise ValueError(f"the host pool's pages ({host.page_size} tokens) must be the tree's ({page_size})")
        super().__init__(page_size, **kwargs)
        self.host, self.copies, self.tier = host, copies, tier
        self.write_policy = tier.write_policy
        self.write_through_threshold = tier.store_threshold           # None: write-back
        self.load_back_threshold = tier.load_back_threshold
        self.make_host_room = make_host_room or self.evict_host
        self.num_backups = self.num_backup_skipped = self.num_backup_failed = 0
        self.num_demoted = self.num_loaded_tokens = 0

    def _new_node(self, key: list[int], value: list[int], parent: Node | None) -> HiNode:
        return HiNode(key, value, parent, next(self._ids))

    def _split(self, child: Node, n: int) -> Node:
        """Split as the plain tree does; the host copy, hit count and copy in flight split along
        (the front inherits the lock, so a copy in flight keeps both halves locked)."""
        assert isinstance(child, HiNode) and child.host_ref == 0, "a pinned host copy is never split"
        front = super()._split(child, n)
        assert isinstance(front, HiNode)
        if child.host_value is not None:
            front.host_value, child.host_value = child.host_value[:n], child.host_value[n:]
        front.hit_count, front.copy = child.hit_count, child.copy
        return front

    @property
    def root_node(self) -> HiNode:
        assert isinstance(self.root, HiNode)
        return self.root

    # ------------------------------------------------------------------------ lookup

    def match(self, key: Tokens) -> TierMatch:
        """One walk: the device hit and the host hit after it (whole pages)."""
        tokens = self._whole_pages(_as_tokens(key, "key"))
        path, _ = self._walk(tokens)
        device_node = host_node = self.root_node
        device_slots: list[int] = []
        host_tokens = 0
        for node in path[1:]:
            assert isinstance(node, HiNode)
            if node.on_device:       # the device part comes first: the device set is prefix-closed
                device_slots += node.value
                device_node = host_node = node
            else:
                host_tokens += len(node.key)
                host_node = node
        if self.on_event is not None:
            self.on_event(("match", {"key_len": len(tokens), "matched": len(device_slots) + host_tokens,
                                     "device": len(device_slots), "host": host_tokens,
                                     "path": [n.id for n in path]}))
        return TierMatch(device_slots, device_node, host_node, host_tokens)

    def match_prefix(self, key: Tokens) -> tuple[list[int], Node]:
        """The device hit only, as ``RadixCache.match_prefix`` (slots, node it ends on)."""
        m = self.match(key)
        return m.device_slots, m.device_node

    def peek(self, key: Tokens) -> TierPeek:
        """What ``match(key)`` would find, changing nothing: no split, no access time, no event.

        Also counts the device tokens of the hit that no lock protects yet: locking the hit moves
        them from evictable to protected, so they are not room an admission can count on."""
        tokens = self._whole_pages(_as_tokens(key, "key"))
        node, matched = self.root_node, 0
        device_slots: list[int] = []
        host_tokens = unlocked = 0
        while matched < len(tokens):
            child = node.children.get(self._child_key(tokens, matched))
            if child is None:
                break
            assert isinstance(child, HiNode)
            n = self._agree(child, tokens, matched)
            n -= n % self.page_size
            if child.on_device:
                device_slots += child.value[:n]
                unlocked += n if child.lock_ref == 0 else 0
            else:
                host_tokens += n
            matched += n
            if n < len(child.key):
                break
            node = child
        return TierPeek(device_slots, host_tokens, unlocked)

    # ------------------------------------------------------------------------ insertion

    def insert(self, key: Tokens, value: Tokens) -> int:
        """Cache ``key`` with device slots ``value``; return the tokens that were *on the device*.

        Host-only nodes on the path take the caller's slots (the caller computed that KV again, so
        the node is on the device once more; its host copy stays), so only ``value[:returned]``
        are duplicates for the caller to free. Then the write policy runs on every node of the
        path: SGLang's ``_inc_hit_count`` from ``insert``."""
        tokens, slots = _as_tokens(key, "key"), _as_tokens(value, "value")
        if len(tokens) != len(slots):
            raise ValueError(f"insert: key has {len(tokens)} tokens but value has {len(slots)} slots")
        tokens, slots = self._whole_pages(tokens), self._whole_pages(slots)
        if self.page_size > 1:
            self._check_aligned_pages(slots)
        slots = list(slots)
        path, matched = self._walk(tokens)
        on_device, offset = 0, 0
        for node in path[1:]:
            assert isinstance(node, HiNode)
            if node.on_device:
                on_device += len(node.key)
            else:                       # revive: the request's fresh copy becomes the device copy
                node.value = slots[offset:offset + len(node.key)]
                self.evictable_size += len(node.key)
            offset += len(node.key)
        parent = path[-1]
        if matched < len(tokens):
            new = self._new_node(list(tokens[matched:]), slots[matched:], parent)
            new.last_access = self._now
            parent.children[self._child_key(new.key, 0)] = new
            self._num_nodes += 1
            self._push_leaf(new)               # the plain tree's bookkeeping: every leaf is a candidate
            self.evictable_size += len(new.key)
            path.append(new)
        if self.on_event is not None:
            self.on_event(("insert", {"node": path[-1].id if matched < len(tokens) else None,
                                      "parent": parent.id, "key": list(tokens[matched:]),
                                      "slots": slots[matched:], "already_cached": on_device}))
        if self.write_through_threshold is not None:
            for node in path[1:]:
                self._inc_hit_count(node)   # type: ignore[arg-type]
        self.last_match_path = path
        return on_device

    def _inc_hit_count(self, node: HiNode) -> None:
        if node.host_value is not None:
            return
        node.hit_count += 1
        assert self.write_through_threshold is not None
        if node.hit_count >= self.write_through_threshold:
            self.write_backup(node)

    # ------------------------------------------------------------------------ copies

    def write_backup(self, node: HiNode, *, wait: bool = False) -> bool:
        """Copy ``node`` (and first its ancestors without a host copy) to the host; False if the
        host has no room even after host eviction. The copy is submitted and ``node`` locked until
        it is acknowledged; ``wait=True`` runs it at once (write-back inside ``evict``)."""
        chain = []
        n: Node = node
        while n is not self.root:
            assert isinstance(n, HiNode)
            if n.host_value is not None:
                break
            chain.append(n)
            n = n.parent_in_tree()
        for n in reversed(chain):
            if not self._backup_one(n, wait):
                self.num_backup_skipped += 1
                return False
        return True

    def _backup_one(self, node: HiNode, wait: bool) -> bool:
        assert node.on_device, f"node {node.id} has no device copy to back up"
        host_slots = self.host.allocate_slots(len(node.key))
        if host_slots is None:   # host eviction takes host-only leaves: never this node's path (on the device)
            self.make_host_room(len(node.key))
            host_slots = self.host.allocate_slots(len(node.key))
            if host_slots is None:
                return False
        copy = Copy("store", list(node.value), host_slots)
        if wait:
            try:
                self.copies.run_now(copy)
            except BaseException:
                self.host.free_slots(host_slots)
                raise
            node.host_value, node.copy = host_slots, copy
        else:
            node.host_value, node.copy = host_slots, copy
            self.inc_lock_ref(node)           # the source stays on the device until acknowledged
            copy.on_done = lambda: self.dec_lock_ref(node)
            self.copies.submit(copy)
        self.num_backups += 1
        self._emit("backup", node, medium="CPU")
        return True

    def load_back(self, m: TierMatch, allocate: Callable[[int], list[int] | None],
                  evict: Callable[[int], None] | None = None) -> int:
        """Copy the host part of ``m`` to the device: all of it or nothing. Returns the tokens
        loaded (0: shorter than ``load_back_threshold``, or no device room).

        Room as SGLang 0.5.9's ``load_back`` finds it: ``allocate(num_pages)`` gives device pages
        or None; then ``evict(num_tokens)`` frees *the whole load size* (the caller evicts device
        leaves into its pool) and ``allocate`` tries once more; if that fails, nothing is loaded
        and the evictions stay. (Without ``evict``, one try: ``allocate`` makes its own room.)
        The hit's device path is locked and its host nodes pinned meanwhile, so no eviction takes
        them. Loaded nodes are on the device, locked until their copy (submitted) is acknowledged."""
        if m.host_tokens == 0 or m.host_tokens < self.load_back_threshold:
            return 0
        nodes = m.host_nodes()
        for n in nodes:
            n.host_ref += 1
        self.inc_lock_ref(m.device_node)
        try:
            pages = allocate(m.host_tokens // self.page_size)
            if pages is None and evict is not None:
                evict(m.host_tokens)              # SGLang: evict(num_tokens=len(host_indices)), then retry
                pages = allocate(m.host_tokens // self.page_size)
        finally:
            self.dec_lock_ref(m.device_node)
            for n in nodes:
                n.host_ref -= 1
        if pages is None:
            return 0
        ps = self.page_size
        slots = [p * ps + i for p in pages for i in range(ps)]
        src: list[int] = []
        offset = 0
        copy = Copy("load", src, slots)
        for n in nodes:
            assert n.host_value is not None and not n.on_device
            n.value = slots[offset:offset + len(n.key)]
            src += n.host_value
            n.copy = copy
            offset += len(n.key)
            self.evictable_size += len(n.key)
        last = nodes[-1]
        self.inc_lock_ref(last)                # not readable, not evictable until acknowledged
        copy.on_done = lambda: self.dec_lock_ref(last)
        self.copies.submit(copy)
        self.num_loaded_tokens += m.host_tokens
        for n in nodes:
            self._emit("load", n, medium="GPU")
        return m.host_tokens

    # ------------------------------------------------------------------------ eviction

    def evict(self, num_tokens: int) -> list[int]:
        """Free at least ``num_tokens`` device slots from device leaves, least recently used
        first; returns the freed slots. A backed-up leaf keeps its node (now host-only)."""
        require_int("num_tokens", num_tokens, minimum=0)
        heap = [(n.last_access, n.id, n) for n in self._hinodes() if self._device_leaf(n)]
        heapq.heapify(heap)
        freed: list[int] = []
        self.last_evicted, self.last_evicted_parents = [], []
        while heap and len(freed) < num_tokens:
            _, _, node = heapq.heappop(heap)
            parent = node.parent_in_tree()
            if not node.backed_up and self.write_through_threshold is None:      # write-back
                try:
                    self.write_backup(node, wait=True)
                except Exception:      # the copy failed: drop the node as a tree without a tier would
                    self.num_backup_failed += 1
            freed += node.value
            self.evictable_size -= len(node.value)
            if node.backed_up:               # device+host -> host-only: just drop the device copy
                node.value = []
                self.num_demoted += 1
                self._emit("demote", node, medium="GPU")
            else:                            # device-only: gone from the tree
                assert not node.children, f"node {node.id} has no host copy but has children"
                self._detach(node, parent)
                self.last_evicted.append(node)
                self.last_evicted_parents.append(parent)
                self._emit("evict", node, medium="GPU", parent=parent.id)
            if isinstance(parent, HiNode) and self._device_leaf(parent):
                heapq.heappush(heap, (parent.last_access, parent.id, parent))
        return freed

    def _detach(self, node: HiNode, parent: Node) -> None:
        """Take a leaf out of the tree, keeping the plain tree's node count and leaf heap (a
        parent left without children is a leaf now: an eviction candidate of ``RadixCache``)."""
        del parent.children[self._child_key(node.key, 0)]
        node.parent = None
        self._num_nodes -= 1
        if not parent.children and parent is not self.root:
            self._push_leaf(parent)

    def _device_leaf(self, node: HiNode) -> bool:
        return (node is not self.root and node.on_device and node.lock_ref == 0
                and not any(c.value for c in node.children.values()))

    def evict_host(self, num_tokens: int) -> list[int]:
        """Delete host-only leaves (not pinned by a load), least recently used first, until
        ``num_tokens`` host slots are free again; returns the freed host slots."""
        heap = [(n.last_access, n.id, n) for n in self._hinodes() if self._host_leaf(n)]
        heapq.heapify(heap)
        freed: list[int] = []
        while heap and len(freed) < num_tokens:
            _, _, node = heapq.heappop(heap)
            parent = node.parent_in_tree()
            assert node.host_value is not None
            self.host.free_slots(node.host_value)
            freed += node.host_value
            node.host_value = None
            self._detach(node, parent)
            self._emit("evict_host", node, medium="CPU", parent=parent.id)
            if isinstance(parent, HiNode) and self._host_leaf(parent):
                heapq.heappush(heap, (parent.last_access, parent.id, parent))
        return freed

    def _host_leaf(self, node: HiNode) -> bool:
        return node is not self.root and not node.on_device and not node.children and node.host_ref == 0

    # ------------------------------------------------------------------------ inspection

    def _hinodes(self) -> list[HiNode]:
        return [n for n in self.nodes() if isinstance(n, HiNode)]

    @property
    def host_size(self) -> int:
        """Tokens with a host copy (ready or in flight)."""
        return sum(len(n.key) for n in self._hinodes() if n.host_value is not None)

    @property
    def host_only_size(self) -> int:
        return sum(len(n.key) for n in self._hinodes() if n.host_value is not None and not n.on_device)

    def _emit(self, kind: str, node: HiNode, **data) -> None:
        if self.on_event is not None:
            self.on_event((kind, {"node": node.id, "key": list(node.key), **data}))

    def _value_ok(self, node: Node) -> bool:
        return len(node.value) in (len(node.key), 0)

    def check_invariants(self) -> None:
        """``RadixCache.check_invariants`` plus the tier rules:

        * every node has a device copy, a host copy, or both;
        * prefix closure of both tiers: a node on the device has its parent on the device, a node
          with a host copy has its parent's host copy (the root counts as both);
        * only device nodes are locked (a lock protects device pages), and a node whose copy is in
          flight is locked;
        * host copies are whole, aligned, allocated in the host pool, and no two share a slot.
        """
        super().check_invariants()

        def require(ok: bool, message: str) -> None:
            if not ok:
                raise AssertionError(message)

        seen: set[int] = set()
        for node in self._hinodes():
            if node is self.root:
                continue
            parent = node.parent_in_tree()
            require(node.on_device or node.host_value is not None, f"node {node.id} has no copy anywhere")
            require(not node.on_device or parent is self.root or bool(parent.value),
                    f"node {node.id} is on the device but its parent {parent.id} is not")
            require(node.host_value is None or parent is self.root or parent.host_value is not None,  # type: ignore[attr-defined]
                    f"node {node.id} has a host copy but its parent {parent.id} has none")
            require(node.lock_ref == 0 or node.on_device, f"node {node.id} is locked but not on the device")
            require(not node.in_flight or node.lock_ref > 0, f"node {node.id}'s copy is in flight but it is unlocked")
            if node.host_value is not None:
                hv = node.host_value
                require(len(hv) == len(node.key), f"node {node.id}: {len(node.key)} tokens, {len(hv)} host slots")
                require(not seen.intersection(hv), f"node {node.id} shares host slots with another node")
                seen.update(hv)
                pages = hv[::self.page_size]
                require(all(self.host.pages.ref_cnt[p // self.page_size] == 1 for p in pages),
                        f"node {node.id}'s host pages are not allocated")
                require(hv == [p + i for p in pages for i in range(self.page_size)] and
                        all(p % self.page_size == 0 for p in pages), f"node {node.id}'s host pages are not aligned")
