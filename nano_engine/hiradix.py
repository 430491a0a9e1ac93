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
(SGLang: 10), evicting device pages to make room but never the nodes it is loading or their
ancestors. ``match`` changes the tree (it splits and refreshes, as SGLang's does), so the engine's
manager looks first with ``peek``, which changes nothing, and walks, loads and locks only once the
request is admitted (``TieredRadixCacheManager.lock``).

**Copies in flight.** A node whose copy (store or load) has been submitted but not acknowledged is
locked (``inc_lock_ref``), so no eviction can take its device pages, and its host copy is not
readable yet (``node.copy.done`` is False). ``hiradix.TieredRadixCacheManager`` runs the copies at
fixed points of an engine step (``host_tier.CopyEngine``); on CPU they are synchronous.

Fair simplifications: one device, so no tensor-parallel agreement on acknowledgements (SGLang
all-reduces the ack count with MIN so every rank changes its tree identically); no third (storage)
tier; LRU only.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from nano_engine.cache_manager import PrefixMatch, RadixCacheManager, RadixHandle
from nano_engine.host_tier import WRITE_POLICIES, BandwidthModel, Copy, CopyEngine, HostKVPool
from nano_engine.kv_cache import KVCache
from nano_engine.radix import Node, RadixCache, Tokens, _as_tokens
from nano_engine.sequence import CacheHandle, Sequence

LOAD_BACK_THRESHOLD = 10
"""Shortest host hit worth loading, in tokens (SGLang 0.5.9 ``HiRadixCache.load_back_threshold``)."""


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
    :class:`~nano_engine.host_tier.CopyEngine` that moves them; ``write_policy``: one of
    ``host_tier.WRITE_POLICIES``; ``evict_host``: how to find host room when the pool is short
    (default: this tree's own ``evict_host``; a manager with several trees passes its own).

    Counters: ``num_backups`` (nodes backed up), ``num_backup_skipped`` (no host room),
    ``num_backup_failed`` (a write-back copy raised: the node was dropped instead),
    ``num_demoted`` (device copies dropped, host copy kept), ``num_loaded_tokens``.
    """

    def __init__(self, page_size: int = 1, *, host: HostKVPool, copies: CopyEngine,
                 write_policy: str = "write_through", load_back_threshold: int = LOAD_BACK_THRESHOLD,
                 make_host_room: Callable[[int], None] | None = None, **kwargs) -> None:
        if write_policy not in WRITE_POLICIES:
            raise ValueError(f"write_policy must be one of {WRITE_POLICIES}, got {write_policy!r}")
        if host.page_size != page_size:
            raise ValueError(f"the host pool's pages ({host.page_size} tokens) must be the tree's ({page_size})")
        super().__init__(page_size, **kwargs)
        self.host, self.copies, self.write_policy = host, copies, write_policy
        self.write_through_threshold = 2 if write_policy == "write_through_selective" else 1
        self.load_back_threshold = load_back_threshold
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
        if self.write_policy != "write_back":
            for node in path[1:]:
                self._inc_hit_count(node)   # type: ignore[arg-type]
        self.last_match_path = path
        return on_device

    def _inc_hit_count(self, node: HiNode) -> None:
        if node.host_value is not None:
            return
        node.hit_count += 1
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

    def load_back(self, m: TierMatch, allocate: Callable[[int], list[int] | None]) -> int:
        """Copy the host part of ``m`` to the device: all of it or nothing. Returns the tokens
        loaded (0: shorter than ``load_back_threshold``, or no device room).

        ``allocate(num_pages)`` returns device pages (evicting device leaves if it must) or None.
        While it runs, the device path above the hit is locked and the host nodes are pinned, so
        neither eviction can take what is being loaded. The nodes are on the device from here on
        (locked until the copy is acknowledged); the copy itself is submitted to ``copies``."""
        if m.host_tokens == 0 or m.host_tokens < self.load_back_threshold:
            return 0
        nodes = m.host_nodes()
        for n in nodes:
            n.host_ref += 1
        self.inc_lock_ref(m.device_node)
        try:
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
        if num_tokens < 0:
            raise ValueError(f"evict: num_tokens must be >= 0, got {num_tokens}")
        heap = [(n.last_access, n.id, n) for n in self._hinodes() if self._device_leaf(n)]
        heapq.heapify(heap)
        freed: list[int] = []
        self.last_evicted, self.last_evicted_parents = [], []
        while heap and len(freed) < num_tokens:
            _, _, node = heapq.heappop(heap)
            parent = node.parent_in_tree()
            if not node.backed_up and self.write_policy == "write_back":
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


@dataclass
class TierHandle(CacheHandle):
    """What ``TieredRadixCacheManager.match`` found, before anything is touched: the namespace, the
    tokens looked up, the device hit, the host tokens ``lock`` will load, and the device hit's
    unlocked tokens (``can_admit`` does not count them as room)."""

    namespace: tuple
    max_tokens: int
    device_tokens: int
    load_tokens: int
    unlocked_tokens: int


class TieredRadixCacheManager(RadixCacheManager):
    """The radix cache manager with a host tier: every tree is a :class:`HiRadixCache` sharing one
    host pool and one copy engine.

    * ``match``: one walk that changes nothing (``HiRadixCache.peek``): the device hit, plus the
      host hit when it is at least ``load_back_threshold`` tokens long (it will be loaded back);
    * ``can_admit``: exact. The pages to load and to compute must fit in the free pages plus the
      evictable ones, less the unlocked part of the hit itself (the lock protects it). So a request
      that does not fit leaves both tiers exactly as they were: nothing split, loaded, evicted,
      refreshed;
    * ``lock``: the request is admitted. Now the walk splits and refreshes (``HiRadixCache.match``),
      the host hit is loaded back all or nothing (``load_back``: device pages allocated now,
      evicting device leaves but never the hit itself; the copy runs before the next forward),
      and the request locks the whole prefix. If the load gets no room after all, the request
      locks the device hit alone; if it raises, the request holds nothing. The hit counters count
      here, once per admitted request.

    SGLang 0.5.9 splits the same way: ``Req.init_next_round_input``
    (``python/sglang/srt/managers/schedule_batch.py``) only calls ``match_prefix``, which returns
    ``host_hit_length``; ``PrefillAdder.add_one_req``
    (``python/sglang/srt/managers/schedule_policy.py``) calls ``HiRadixCache.init_load_back`` (then
    ``load_back``) under the request's lock once its budget checks pass;
    ``Scheduler._get_new_batch_prefill_raw`` (``python/sglang/srt/managers/scheduler.py``) starts
    the copies when the batch is built (``ready_to_load_host_cache``). Here the admission check runs before the
    load, so a request refused after loading cannot leave loaded pages behind (in SGLang it can:
    they stay in the tree as a cached prefix).
    * ``begin_step`` (start of every engine step): acknowledge finished copies, start the queued
      stores (vLLM defers its stores to the start of the next step in the same way);
    * ``before_forward``: start the queued loads (CPU: synchronous; CUDA: on the copy stream,
      attention waiting layer by layer);
    * ``check_no_leaks`` waits for every copy first, then checks both pools.

    Metrics: ``num_device_hit_tokens``, ``num_host_hit_tokens`` (loaded back), and the copy
    engine's ``bytes_loaded`` / ``bytes_written`` (``tier_stats()``).
    """

    name = "radix"

    def __init__(self, num_blocks: int, block_size: int, host_tokens: int, *,
                 write_policy: str = "write_through", load_back_threshold: int = LOAD_BACK_THRESHOLD,
                 bandwidth: BandwidthModel | None = None, bytes_per_token: int | None = None) -> None:
        if write_policy not in WRITE_POLICIES:
            raise ValueError(f"write_policy must be one of {WRITE_POLICIES}, got {write_policy!r}")
        if not isinstance(host_tokens, int) or host_tokens < block_size:
            raise ValueError(f"host_kv_tokens must be an integer of at least one block ({block_size}), "
                             f"got {host_tokens!r}")
        super().__init__(num_blocks, block_size)
        self.write_policy, self.load_back_threshold = write_policy, load_back_threshold
        self.host = HostKVPool(host_tokens // block_size, block_size, bytes_per_token=bytes_per_token)
        self.copies = CopyEngine(None, self.host, bandwidth)
        self.num_device_hit_tokens = self.num_host_hit_tokens = 0

    def bind_kv_cache(self, kv_cache: KVCache, layerwise: bool = True) -> None:
        """Give the tier real tensors: a host pool shaped like ``kv_cache`` and a copy engine
        between the two (called by the engine once it has allocated the device pool)."""
        if self.copies.in_flight() or any(t.total_size() or t.root.children for t in self.trees.values()):
            raise ValueError("bind the KV cache before anything is cached")
        self.host = HostKVPool(self.host.num_pages, self.block_size, like=kv_cache)
        self.copies = CopyEngine(kv_cache, self.host, self.copies.bandwidth, layerwise=layerwise)
        for tree in self.trees.values():
            assert isinstance(tree, HiRadixCache)
            tree.host, tree.copies = self.host, self.copies

    def _new_tree(self) -> RadixCache:
        return HiRadixCache(self.block_size, host=self.host, copies=self.copies, write_policy=self.write_policy,
                            load_back_threshold=self.load_back_threshold, make_host_room=self._make_host_room)

    def _make_host_room(self, num_tokens: int) -> None:
        """Host eviction across trees, least recently used tree first."""
        for namespace in sorted(self.trees, key=self._last_used.__getitem__):
            tree = self.trees[namespace]
            assert isinstance(tree, HiRadixCache)
            tree.evict_host(num_tokens - self.host.pages.num_free * self.block_size)
            if self.host.pages.num_free * self.block_size >= num_tokens:
                return

    def _peek_tiers(self, seq: Sequence, max_tokens: int) -> tuple[TierPeek, int]:
        """The tree's answer, changing nothing, and the host tokens a lock would load."""
        tree = self.trees.get(self._namespace(seq))
        if tree is None:
            return TierPeek([], 0, 0), 0
        assert isinstance(tree, HiRadixCache)
        p = tree.peek(seq.token_ids[:max_tokens])
        return p, p.host_tokens if p.host_tokens >= max(1, self.load_back_threshold) else 0

    def _match(self, seq: Sequence, max_tokens: int) -> PrefixMatch:
        """The device pages of the hit; ``num_tokens`` also counts the host part ``lock`` loads."""
        p, load = self._peek_tiers(seq, max_tokens)
        pages = [s // self.block_size for s in p.device_slots[::self.block_size]]
        handle = TierHandle(self._namespace(seq), max_tokens, len(p.device_slots), load, p.unlocked_tokens)
        return PrefixMatch(pages, len(p.device_slots) + load, handle)

    def _peek(self, seq: Sequence, max_tokens: int) -> int:
        p, load = self._peek_tiers(seq, max_tokens)
        return len(p.device_slots) + load

    def can_admit(self, match: PrefixMatch, num_tokens: int) -> bool:
        """Would ``lock`` (with its load) and ``allocate(num_tokens)`` fit? Exact: every unlocked
        device leaf can be evicted, and nothing else can."""
        h = match.handle
        if not isinstance(h, TierHandle):
            raise ValueError("can_admit takes a match made by this manager's match()")
        bs = self.block_size
        need = self.blocks_needed(num_tokens) - h.device_tokens // bs      # pages to load + to compute
        evictable = sum(t.evictable_size for t in self.trees.values()) - h.unlocked_tokens
        return need <= self.pool.num_free + evictable // bs

    def lock(self, seq: Sequence, match: PrefixMatch) -> None:
        """Admit ``seq`` on ``match``: walk (split, refresh), load the host part back, lock.

        ``match`` is updated to what was locked (its pages, tokens and handle), which is less than
        planned only if the load found no room. If anything raises, ``seq`` holds nothing."""
        h = match.handle
        if not isinstance(h, TierHandle):
            raise ValueError("lock takes a match made by this manager's match()")
        if seq.block_table:
            raise ValueError(f"request {seq.request_id} already holds {len(seq.block_table)} blocks")
        tree = self._tree(h.namespace)
        assert isinstance(tree, HiRadixCache)
        m = tree.match(seq.token_ids[:h.max_tokens])
        loaded = tree.load_back(m, self._allocate) if h.load_tokens and m.host_tokens else 0
        slots, node = list(m.device_slots), m.device_node
        if loaded:        # the loaded nodes are on the device now (locked until their copy is acknowledged)
            for n in m.host_nodes():
                slots += n.value
            node = m.host_node
        tree.inc_lock_ref(node)
        self._users[h.namespace] += 1
        self.num_queries += h.max_tokens
        self.num_hits += len(slots)
        self.num_device_hit_tokens += m.device_tokens
        self.num_host_hit_tokens += loaded
        pages = [s // self.block_size for s in slots[::self.block_size]]
        match.blocks, match.num_tokens = pages, len(slots)
        match.handle = RadixHandle(node, len(slots), h.namespace)
        seq.block_table = list(pages)
        seq.num_computed_tokens = seq.num_cached_tokens = len(slots)
        seq.cache_handle = match.handle

    def _drop_if_unused(self, namespace: tuple) -> None:
        tree = self.trees.get(namespace)
        if isinstance(tree, HiRadixCache) and tree.host_size:
            return            # its host copies are still worth something
        super()._drop_if_unused(namespace)

    # -- the copies' fixed points in a step -----------------------------------------------------

    def begin_step(self) -> None:
        self.copies.poll()
        self.copies.start_stores()
        self.copies.poll()

    def before_forward(self) -> None:
        self.copies.start_loads()

    def tier_stats(self) -> dict[str, float]:
        host_tokens = sum(t.host_size for t in self.trees.values() if isinstance(t, HiRadixCache))
        return {"device_hit_tokens": self.num_device_hit_tokens, "host_hit_tokens": self.num_host_hit_tokens,
                "query_tokens": self.num_queries, "bytes_loaded": self.copies.bytes_loaded,
                "bytes_written": self.copies.bytes_written, "model_transfer_s": self.copies.model_seconds,
                "host_tokens": host_tokens, "host_capacity_tokens": self.host.num_slots}

    def check_no_leaks(self) -> None:
        """Wait for every copy, then: the device checks of ``RadixCacheManager`` and the host pool
        holding exactly the trees' host copies."""
        self.copies.drain()
        super().check_no_leaks()
        held = sorted(p for p, c in enumerate(self.host.pages.ref_cnt) if c)
        in_trees = sorted(s // self.block_size for t in self.trees.values() for n in t.nodes()
                          if isinstance(n, HiNode) and n.host_value is not None for s in n.host_value[::self.block_size])
        assert held == in_trees, (f"host pages held outside the trees: {sorted(set(held) - set(in_trees))}; "
                                  f"tree host pages not held: {sorted(set(in_trees) - set(held))}")
        assert all(n.host_ref == 0 for t in self.trees.values() for n in t.nodes() if isinstance(n, HiNode)), \
            "a host copy is still pinned"
