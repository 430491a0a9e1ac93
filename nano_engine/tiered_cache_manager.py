"""tiered_cache_manager.py: the engine's cache managers with a host tier under them (chapter 06).

``LLMEngine(cache="radix" | "hashed" | "vllm", host_kv_tokens=N, write_policy=...)`` gets one of:

* :class:`TieredRadixCacheManager`: the radix manager whose trees are
  :class:`~nano_engine.hiradix.HiRadixCache` (SGLang's HiCache);
* :class:`TieredHashedCacheManager`: the hashed-block manager with vLLM's
  :class:`~nano_engine.offload.OffloadingManager` beside its pool (vLLM's native offloading).

Both share one host side, :class:`HostSide`: the :class:`~nano_engine.host_tier.HostTier` (the
settings, checked once where the value was made), a host pool shaped like the device KV cache and a
copy engine between the two, built once when the manager is made with the engine's KV cache; and
the copies' fixed points in an engine step:

* ``begin_step`` (start of every step): acknowledge finished copies, start the queued stores
  (vLLM defers its stores to the start of the next step in the same way);
* ``before_forward``: start the step's loads (CPU: synchronous; CUDA: on the load stream, attention
  waiting layer by layer, never for a store);
* ``wait_for_copy``: when a step could schedule nothing, the scheduler asks for the oldest copy in
  flight to be waited for: its pages are locked until it is acknowledged;
* ``check_no_leaks`` and ``close`` wait for every copy first.

The data structures themselves (:mod:`nano_engine.hiradix`, :mod:`nano_engine.offload`) import no
engine module; this one puts them under the scheduler's interface (:mod:`nano_engine.cache_manager`).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, replace

from nano_engine.cache_manager import CacheManager, HashedBlockCacheManager, PrefixMatch, RadixCacheManager, RadixHandle
from nano_engine.hiradix import HiNode, HiRadixCache, TierPeek
from nano_engine.host_tier import BandwidthModel, Copy, CopyEngine, HostKVPool, HostTier, as_host_tier
from nano_engine.kv_cache import KVCache
from nano_engine.kv_events import BlockRemoved, BlockStored
from nano_engine.offload import LookupResult, OffloadingManager
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.radix import RadixCache
from nano_engine.sequence import CacheHandle, Sequence

__all__ = ["HostLoad", "HostSide", "TierHandle", "TieredHashedCacheManager", "TieredRadixCacheManager"]


class HostSide(CacheManager):
    """What both tiered managers share: the tier, the host pool and the copy engine, and the
    copies' hooks in an engine step (see the module docstring).

    ``kv_cache``: the engine's device KV cache, whose layout the host pool copies (None: page
    bookkeeping only, ``bind_kv_cache`` adds the tensors later, once). ``layerwise``: attention
    waits for a load layer by layer (the PyTorch reference) rather than for the whole load."""

    tier: HostTier
    host: HostKVPool
    copies: CopyEngine

    def _build_host_side(self, tier: HostTier, kv_cache: KVCache | None, layerwise: bool,
                         bytes_per_token: int | None) -> None:
        self.tier = tier
        self.host = HostKVPool(tier.num_pages(self.block_size), self.block_size, like=kv_cache,
                               bytes_per_token=bytes_per_token)
        self.copies = CopyEngine(kv_cache, self.host, tier.bandwidth, layerwise=layerwise)
        self.num_device_hit_tokens = self.num_host_hit_tokens = 0

    @property
    def write_policy(self) -> str:
        return self.tier.write_policy

    def bind_kv_cache(self, kv_cache: KVCache, layerwise: bool = True) -> None:
        """Give a manager made without the engine's KV cache its tensors (host pool and copies)."""
        if self.copies.device_kv is kv_cache:
            return
        if self.copies.in_flight() or self._holds_anything():
            raise ValueError("bind the KV cache before anything is cached")
        self.host.attach(kv_cache)
        self.copies.attach(kv_cache, layerwise)

    def _holds_anything(self) -> bool:
        raise NotImplementedError

    def begin_step(self) -> None:
        self.copies.poll()
        self.copies.start_stores()
        self.copies.poll()

    def before_forward(self) -> None:
        self.copies.start_loads()

    def wait_for_copy(self) -> bool:
        return self.copies.wait_oldest()

    def close(self) -> None:
        self.copies.drain()

    def tier_stats(self) -> dict[str, float]:
        """Hits per tier, bytes moved (and their modelled transfer time), the tier's fill."""
        return {"device_hit_tokens": self.num_device_hit_tokens, "host_hit_tokens": self.num_host_hit_tokens,
                "query_tokens": self._query_tokens(), "bytes_loaded": self.copies.bytes_loaded,
                "bytes_written": self.copies.bytes_written, "model_transfer_s": self.copies.model_seconds,
                "host_tokens": self._host_tokens(), "host_capacity_tokens": self.host.num_slots}

    def _query_tokens(self) -> int:
        raise NotImplementedError

    def _host_tokens(self) -> int:
        raise NotImplementedError


# ------------------------------------------------------------------------------------- radix


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


class TieredRadixCacheManager(HostSide, RadixCacheManager):
    """The radix cache manager with a host tier: every tree is a :class:`~nano_engine.hiradix.HiRadixCache`
    sharing one host pool and one copy engine.

    * ``match``: one walk that changes nothing (``HiRadixCache.peek``): the device hit, plus the
      host hit when it is at least ``load_back_threshold`` tokens long (it will be loaded back);
    * ``can_admit``: exact. The pages to load and to compute must fit in the free pages plus the
      evictable ones, less the unlocked part of the hit itself (the lock protects it). So a request
      that does not fit leaves both tiers exactly as they were: nothing split, loaded, evicted,
      refreshed;
    * ``lock``: the request is admitted. Now the walk splits and refreshes (``HiRadixCache.match``),
      the host hit is loaded back all or nothing (``load_back``: the free pages first, else evict
      the whole load size and try again, as SGLang 0.5.9 does; never the hit itself; the copy runs
      before the next forward), and the request locks the whole prefix. ``can_admit`` made sure
      the room is there, so the second try does not fail; if it raises, the request holds nothing.
      The hit counters count here, once per admitted request.

    SGLang 0.5.9 splits the same way: ``Req.init_next_round_input``
    (``python/sglang/srt/managers/schedule_batch.py``) only calls ``match_prefix``, which returns
    ``host_hit_length``; ``PrefillAdder.add_one_req``
    (``python/sglang/srt/managers/schedule_policy.py``) calls ``HiRadixCache.init_load_back`` (then
    ``load_back``) under the request's lock once its budget checks pass;
    ``Scheduler._get_new_batch_prefill_raw`` (``python/sglang/srt/managers/scheduler.py``) starts
    the copies when the batch is built (``ready_to_load_host_cache``). Here the admission check runs
    before the load, so a request refused after loading cannot leave loaded pages behind (in SGLang
    it can: they stay in the tree as a cached prefix).

    Metrics: ``num_device_hit_tokens``, ``num_host_hit_tokens`` (loaded back), and the copy
    engine's ``bytes_loaded`` / ``bytes_written`` (``tier_stats()``).
    """

    name = "radix"

    def __init__(self, num_blocks: int, block_size: int, tier: HostTier | int, *, kv_cache: KVCache | None = None,
                 layerwise: bool = True, bytes_per_token: int | None = None, write_policy: str | None = None,
                 load_back_threshold: int | None = None, bandwidth: BandwidthModel | None = None) -> None:
        tier = as_host_tier(tier, write_policy=write_policy, load_back_threshold=load_back_threshold,
                            bandwidth=bandwidth).for_cache("radix")
        super().__init__(num_blocks, block_size)
        self._build_host_side(tier, kv_cache, layerwise, bytes_per_token)

    @property
    def load_back_threshold(self) -> int:
        return self.tier.load_back_threshold

    def _holds_anything(self) -> bool:
        return any(t.total_size() or t.root.children for t in self.trees.values())

    def _new_tree(self) -> RadixCache:
        return HiRadixCache(self.block_size, host=self.host, copies=self.copies, tier=self.tier,
                            make_host_room=self._make_host_room)

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
        loaded = tree.load_back(m, self.pool.allocate, self._evict) if h.load_tokens and m.host_tokens else 0
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

    def _query_tokens(self) -> int:
        return self.num_queries

    def _host_tokens(self) -> int:
        return sum(t.host_size for t in self.trees.values() if isinstance(t, HiRadixCache))

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


# ------------------------------------------------------------------------------------- hashed


@dataclass(frozen=True)
class HostLoad(CacheHandle):
    """A match's CPU hit, loaded by ``lock`` (the keys of the blocks after the GPU hit)."""

    keys: list[Hashable]


class TieredHashedCacheManager(HostSide, HashedBlockCacheManager):
    """``HashedBlockCacheManager`` with vLLM's CPU tier (``nano_engine.offload``'s docstring has the
    store and load rules).

    Metrics: ``num_device_hit_tokens``, ``num_host_hit_tokens``, and the copy engine's
    ``bytes_loaded`` / ``bytes_written`` (``tier_stats()``). ``subscribe_cpu(callback)`` receives
    the tier's KV events (``medium="CPU"``) as they are taken each step.
    """

    def __init__(self, pool: PrefixCachingBlockPool, tier: HostTier | int, *, kv_cache: KVCache | None = None,
                 layerwise: bool = True, bytes_per_token: int | None = None, write_policy: str | None = None,
                 bandwidth: BandwidthModel | None = None) -> None:
        tier = as_host_tier(tier, write_policy=write_policy, bandwidth=bandwidth).for_cache("hashed")
        super().__init__(pool)
        self._build_host_side(tier, kv_cache, layerwise, bytes_per_token)
        self.offload = OffloadingManager(self.host.num_pages, self.block_size, tier=tier)
        self._offered: dict[Hashable, None] = {}
        self._loading: list[int] = []          # device blocks a load still holds a reference on
        self._cpu_subscribers: list = []

    def _holds_anything(self) -> bool:
        return bool(self.offload.blocks)

    def subscribe_cpu(self, callback) -> None:
        self._cpu_subscribers.append(callback)

    # -- what to offer: the blocks that became cached, by the pool's own hash -----------------------
    # (not from the pool's KV events: in vLLM mode those publish a 64-bit int per hash,
    # ``PrefixCachingBlockPool.event_hash``, which is not the key ``hash_to_block`` knows)

    def allocate(self, seq: Sequence, num_tokens: int) -> bool:
        return self._offering_new(seq, lambda: super(TieredHashedCacheManager, self).allocate(seq, num_tokens))

    def cache(self, seq: Sequence, num_new_tokens: int) -> None:
        self._offering_new(seq, lambda: super(TieredHashedCacheManager, self).cache(seq, num_new_tokens))

    def _offering_new(self, seq: Sequence, register):
        """Run ``register`` (a call that may cache ``seq``'s blocks) and offer the blocks it cached."""
        block_hash, held = self.pool.block_hash, len(seq.block_table)
        uncached = [b for b in seq.block_table if block_hash[b] is None]
        result = register()
        uncached += seq.block_table[held:]             # blocks it allocated (vLLM mode caches them at once)
        self._offered.update(dict.fromkeys(block_hash[b] for b in uncached if block_hash[b] is not None))
        return result

    def _slots(self, block: int) -> list[int]:
        bs = self.block_size
        return list(range(block * bs, (block + 1) * bs))

    # -- loads -----------------------------------------------------------------------------------

    def _match(self, seq: Sequence, max_tokens: int) -> PrefixMatch:
        gpu = self.pool.lookup(seq.token_ids, max_tokens=max_tokens, **seq.extra_keys)
        self.num_device_hit_tokens += len(gpu) * self.block_size
        hashes = self.pool.block_hashes(seq.token_ids[:max_tokens], **seq.extra_keys)
        self.offload.touch(hashes[:len(gpu)])
        # vLLM offers every full block of a scheduled request, GPU hits included (its
        # next_stored_chunk_idx starts at 0), so a block is offered once per request using it:
        # what store_threshold counts.
        self._offered.update(dict.fromkeys(hashes[:len(gpu)]))
        keys = []
        for h in hashes[len(gpu):]:
            if self.offload.lookup(h) is not LookupResult.HIT:
                break
            keys.append(h)
        # The CPU hit counts in the match, but its device blocks are not taken yet: can_admit counts
        # them as blocks to allocate (vLLM's allocate_slots counts num_external_computed_tokens),
        # and lock loads them, so a request that is not admitted loads, evicts and touches nothing.
        return PrefixMatch(gpu, (len(gpu) + len(keys)) * self.block_size, HostLoad(keys) if keys else None)

    def lock(self, seq: Sequence, match: PrefixMatch) -> None:
        """Load the CPU hit onto fresh device blocks (all or nothing), then lock as the plain
        manager does."""
        if isinstance(match.handle, HostLoad):
            if seq.block_table:
                raise ValueError(f"request {seq.request_id} already holds {len(seq.block_table)} blocks")
            loaded = self._load(seq, match.blocks, match.handle.keys)
            match = PrefixMatch(match.blocks + loaded, (len(match.blocks) + len(loaded)) * self.block_size)
        super().lock(seq, match)

    def _load(self, seq: Sequence, gpu: list[int], keys: list[Hashable]) -> list[int]:
        """All of ``keys`` onto fresh device blocks, or nothing: pin the GPU hit while allocating
        (the free queue must not hand it out), register the new blocks in the GPU cache, queue
        the copy (started before the forward). The load holds a reference on its blocks until
        the copy is acknowledged."""
        bs = self.block_size
        self.pool.touch(gpu)
        try:
            new = self.pool.allocate(len(keys))
            if new is None:
                return []
            self.pool.cache_blocks(seq.token_ids, gpu + new, (len(gpu) + len(new)) * bs, **seq.extra_keys)
        finally:
            self.pool.free(gpu)
        pages = self.offload.prepare_load(keys)
        self.offload.touch(keys)
        src = [p * bs + i for p in pages for i in range(bs)]
        dst = [s for b in new for s in self._slots(b)]
        self._loading += new

        def done() -> None:
            self.offload.complete_load(keys)
            self.pool.free(new)
            for b in new:
                self._loading.remove(b)

        self.copies.submit(Copy("load", src, dst, on_done=done))
        self.num_host_hit_tokens += len(new) * bs
        return new

    # -- stores ----------------------------------------------------------------------------------

    def begin_step(self) -> None:
        """Acknowledge finished copies, then store last step's newly full blocks: one copy for
        all of them (the copy engine cuts it into runs of consecutive slots)."""
        self.copies.poll()
        keys, self._offered = list(self._offered), {}
        blocks = {}
        for h in keys:
            b = self.pool.hash_to_block.get(h)
            if b is not None:
                blocks[h] = b
        out = self.offload.prepare_store(list(blocks))
        if out is not None and out.keys_to_store:
            pin = not self.copies.synchronous        # in flight past this call only with streams
            bs = self.block_size
            stored = [blocks[h] for h in out.keys_to_store]
            if pin:
                self.pool.touch(stored)
            src = [s for b in stored for s in self._slots(b)]
            dst = [page * bs + i for page in out.pages for i in range(bs)]
            self.copies.submit(Copy("store", src, dst, on_done=self._stores_done(out.keys_to_store, stored, pin)))
        try:
            self.copies.start_stores()
        finally:
            self.copies.poll()
            self._publish()

    def _stores_done(self, keys: list[Hashable], blocks: list[int], pinned: bool):
        def done() -> None:
            self.offload.complete_store(keys)
            if pinned:
                for b in blocks:          # one at a time, in order: the free queue's LRU order as before
                    self.pool.free([b])
        return done

    def _publish(self) -> None:
        """The tier's events, hashes written as the pool's own events write them (vLLM mode: the
        64-bit ints of ``event_hash``), so a subscriber matches GPU and CPU events by one hash."""
        for event in self.offload.take_events():
            if isinstance(event, BlockStored | BlockRemoved):
                event = replace(event, block_hashes=[self.pool.event_hash(h) for h in event.block_hashes])
            for callback in self._cpu_subscribers:
                callback(event)

    # -- checks and figures ----------------------------------------------------------------------

    def _query_tokens(self) -> int:
        return self.pool.num_queries

    def _host_tokens(self) -> int:
        return len(self.offload.blocks) * self.block_size

    def check_no_leaks(self) -> None:
        """Wait for every copy, then check the pool (nothing held but pins) and the tier (every
        host page either free or holding one readable, unpinned block)."""
        self.copies.drain()
        self._publish()
        super().check_no_leaks()
        assert not self._loading, f"device blocks still held by loads: {self._loading}"
        self.offload.check_invariants()
        busy = {k: b.ref_cnt for k, b in self.offload.blocks.items() if b.ref_cnt != 0}
        assert not busy, f"host blocks still in flight or pinned: {busy}"
