"""offload.py: a CPU tier under the hashed block pool, vLLM-style (``vllm/v1/kv_offload/``, 0.33.0).

vLLM keeps its GPU prefix cache as it is (chained block hashes, the free queue as LRU) and adds a
separate *offloading manager* that knows which block hashes also live in CPU memory. The manager
is pure bookkeeping and runs in the scheduler; workers move the bytes. Its contract
(``vllm/v1/kv_offload/base.py``, ``OffloadingManager``) is the cleanest teaching API of any anchor,
so :class:`OffloadingManager` here keeps its method names:

=====================  ===========================================================================
``lookup(key)``        ``HIT`` (stored and readable), ``HIT_PENDING`` (its store is still in
                       flight), ``MISS``
``prepare_load(keys)`` pin the blocks against eviction, return where they are
``touch(keys)``        mark them recently used (also called for GPU hits, to keep the LRU honest;
                       vLLM 0.33.0 declares it, its connector records recency when a request
                       finishes, and 0.34.0 drops it from the contract)
``complete_load``      unpin
``prepare_store``      allocate room for the keys not stored yet, evicting LRU blocks that nobody
                       is loading; returns the keys to store, where, and the keys evicted
``complete_store``     the copy is done: the blocks become loadable (or, on failure, are dropped)
``take_events``        ``BlockStored`` / ``BlockRemoved`` with ``medium="CPU"``
=====================  ===========================================================================

A block's state is its reference count, as vLLM's ``ChunkStatus`` (``cpu/policies/base.py``): -1
while its store is in flight ("not ready"), 0 stored and evictable, > 0 being loaded. Eviction is
LRU (vLLM's default ``eviction_policy``; ARC is its alternative, not built here).

:class:`TieredHashedCacheManager` puts it under ``HashedBlockCacheManager``:

* **store**: every block that became full and cached in a step, and every GPU hit of a request
  admitted in it, is offered for storing at the start of the next step (vLLM's worker defers stores "to the beginning of the next engine step, so that offloading
  starts AFTER transfers related to token sampling", ``offloading/worker.py``). That is
  ``write_through``; ``write_through_selective`` is vLLM's ``store_threshold=2`` (a block is
  stored the second time it is offered, i.e. when a second request uses it). vLLM has no write-back, so neither does this manager.
* **load**: after the GPU hit, the following blocks found on the CPU are loaded for the whole
  request before its first forward (vLLM's request-level load; the request waits in
  ``WAITING_FOR_REMOTE_KVS`` there, here the load runs synchronously on CPU before the forward).
  ``match`` only finds the CPU hit; ``can_admit`` counts its blocks as blocks to allocate, as
  vLLM's ``allocate_slots`` counts external tokens, and ``lock`` loads it, so a request that is
  not admitted loads, evicts and touches nothing. The new device blocks are registered in the GPU
  cache at once, so they count as prefix hits.

Where this manager differs from vLLM 0.33.0's defaults: it stores every newly full block, prompt or
output, as vLLM does with ``offload_prompt_only=False``; vLLM's default, ``True`` (``OffloadingSpec``
in ``vllm/v1/kv_offload/base.py``), stores prompt blocks only. (vLLM 0.34.0 also counts an offer
toward ``store_threshold`` once per request, where 0.33.0 counts every offer.)
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Collection, Hashable
from dataclasses import dataclass, replace

from nano_engine.cache_manager import HashedBlockCacheManager, PrefixMatch
from nano_engine.host_tier import BandwidthModel, Copy, CopyEngine, HostKVPool
from nano_engine.kv_cache import KVCache
from nano_engine.kv_events import BlockRemoved, BlockStored, KVEvent
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.sequence import CacheHandle, Sequence


class LookupResult(enum.Enum):
    MISS = "miss"
    HIT = "hit"
    HIT_PENDING = "hit_pending"


@dataclass
class PrepareStoreOutput:
    """``keys_to_store`` (those not stored yet), the host page of each (``pages``), and the keys
    evicted to make room."""

    keys_to_store: list[Hashable]
    pages: list[int]
    evicted_keys: list[Hashable]


@dataclass
class _Block:
    page: int
    ref_cnt: int = -1        # -1: store in flight; 0: stored, evictable; > 0: being loaded


class OffloadingManager:
    """Which block hashes live in the host pool, and where (one host page per block).

    ``num_pages`` host pages; ``store_threshold`` (1 = store on first offer, 2 = on the second, as
    vLLM's ``store_threshold``); ``block_size`` only for the events."""

    def __init__(self, num_pages: int, block_size: int, store_threshold: int = 1) -> None:
        if store_threshold < 1:
            raise ValueError(f"store_threshold must be >= 1, got {store_threshold}")
        self.num_pages, self.block_size, self.store_threshold = num_pages, block_size, store_threshold
        self.blocks: OrderedDict[Hashable, _Block] = OrderedDict()   # LRU order: first = least recent
        self.free_pages = list(range(num_pages - 1, -1, -1))
        self.offers: OrderedDict[Hashable, int] = OrderedDict()      # times offered (store_threshold >= 2)
        self.events: list[KVEvent] = []

    def lookup(self, key: Hashable) -> LookupResult:
        block = self.blocks.get(key)
        if block is None:
            return LookupResult.MISS
        return LookupResult.HIT if block.ref_cnt >= 0 else LookupResult.HIT_PENDING

    def prepare_load(self, keys: Collection[Hashable]) -> list[int]:
        """Pin ``keys`` (all stored and readable) against eviction; returns their host pages."""
        pages = []
        for key in keys:
            block = self.blocks[key]
            if block.ref_cnt < 0:
                raise ValueError(f"block {key!r} is not readable yet: its store is in flight")
            block.ref_cnt += 1
            pages.append(block.page)
        return pages

    def touch(self, keys: Collection[Hashable]) -> None:
        for key in keys:
            if key in self.blocks:
                self.blocks.move_to_end(key)

    def complete_load(self, keys: Collection[Hashable]) -> None:
        for key in keys:
            block = self.blocks[key]
            if block.ref_cnt <= 0:
                raise ValueError(f"complete_load: block {key!r} is not being loaded")
            block.ref_cnt -= 1

    def prepare_store(self, keys: Collection[Hashable]) -> PrepareStoreOutput | None:
        """Room for the keys not stored yet (evicting LRU blocks with ``ref_cnt == 0`` that are not
        among ``keys``); None, and no change, if there is not enough. New blocks start "not ready"."""
        keys = list(dict.fromkeys(keys))
        new = [k for k in keys if k not in self.blocks]
        if self.store_threshold > 1:
            for k in new:
                self.offers[k] = self.offers.pop(k, 0) + 1
            while len(self.offers) > 4 * self.num_pages:       # a bounded memory of offers
                self.offers.popitem(last=False)
            new = [k for k in new if self.offers[k] >= self.store_threshold]
        short = len(new) - len(self.free_pages)
        protected = set(keys)
        victims = []
        if short > 0:
            victims = [k for k, b in self.blocks.items() if b.ref_cnt == 0 and k not in protected][:short]
            if len(victims) < short:
                return None
        for k in victims:
            self.free_pages.append(self.blocks.pop(k).page)
        if victims:
            self.events.append(BlockRemoved(victims, medium="CPU"))
        pages = []
        for k in new:
            page = self.free_pages.pop()
            self.blocks[k] = _Block(page)
            self.offers.pop(k, None)
            pages.append(page)
        return PrepareStoreOutput(new, pages, victims)

    def complete_store(self, keys: Collection[Hashable], success: bool = True) -> None:
        stored = []
        for key in keys:
            block = self.blocks.get(key)
            if block is None or block.ref_cnt >= 0:
                continue
            if success:
                block.ref_cnt = 0
                stored.append(key)
            else:
                self.free_pages.append(self.blocks.pop(key).page)
        if stored:
            self.events.append(BlockStored(stored, None, [], self.block_size, None, [None] * len(stored),
                                           medium="CPU"))

    def take_events(self) -> list[KVEvent]:
        events, self.events = self.events, []
        return events

    def check_invariants(self) -> None:
        pages = [b.page for b in self.blocks.values()] + self.free_pages
        assert sorted(pages) == list(range(self.num_pages)), "a host page is lost or used twice"
        assert all(b.ref_cnt >= -1 for b in self.blocks.values())


@dataclass(frozen=True)
class HostLoad(CacheHandle):
    """A match's CPU hit, loaded by ``lock`` (the keys of the blocks after the GPU hit)."""

    keys: list[Hashable]


class TieredHashedCacheManager(HashedBlockCacheManager):
    """``HashedBlockCacheManager`` with a CPU tier (see the module docstring).

    Metrics: ``num_device_hit_tokens``, ``num_host_hit_tokens``, and the copy engine's
    ``bytes_loaded`` / ``bytes_written`` (``tier_stats()``). ``subscribe_cpu(callback)`` receives
    the tier's KV events (``medium="CPU"``) as they are taken each step.
    """

    def __init__(self, pool: PrefixCachingBlockPool, host_tokens: int, *, write_policy: str = "write_through",
                 bandwidth: BandwidthModel | None = None, bytes_per_token: int | None = None) -> None:
        thresholds = {"write_through": 1, "write_through_selective": 2}
        if write_policy not in thresholds:
            raise ValueError(f"write_policy for the hashed cache must be one of {tuple(thresholds)} (vLLM stores "
                             f"every newly full block; it has no write-back), got {write_policy!r}")
        bs = pool.block_size
        if not isinstance(host_tokens, int) or host_tokens < bs:
            raise ValueError(f"host_kv_tokens must be an integer of at least one block ({bs}), got {host_tokens!r}")
        super().__init__(pool)
        self.write_policy = write_policy
        self.host = HostKVPool(host_tokens // bs, bs, bytes_per_token=bytes_per_token)
        self.copies = CopyEngine(None, self.host, bandwidth)
        self.offload = OffloadingManager(self.host.num_pages, bs, thresholds[write_policy])
        self._offered: dict[Hashable, None] = {}
        self._loading: list[int] = []          # device blocks a load still holds a reference on
        self._cpu_subscribers: list = []
        self.num_device_hit_tokens = self.num_host_hit_tokens = 0

    def bind_kv_cache(self, kv_cache: KVCache, layerwise: bool = True) -> None:
        if self.copies.in_flight() or self.offload.blocks:
            raise ValueError("bind the KV cache before anything is stored")
        self.host = HostKVPool(self.host.num_pages, self.block_size, like=kv_cache)
        self.copies = CopyEngine(kv_cache, self.host, self.copies.bandwidth, layerwise=layerwise)

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

    def before_forward(self) -> None:
        self.copies.start_loads()

    # -- stores ----------------------------------------------------------------------------------

    def begin_step(self) -> None:
        """Acknowledge finished copies, then store last step's newly full blocks."""
        self.copies.poll()
        keys, self._offered = list(self._offered), {}
        blocks = {}
        for h in keys:
            b = self.pool.hash_to_block.get(h)
            if b is not None:
                blocks[h] = b
        out = self.offload.prepare_store(list(blocks))
        if out is not None and out.keys_to_store:
            pin = not self.copies.synchronous        # in flight past this call only on CUDA
            bs = self.block_size
            for h, page in zip(out.keys_to_store, out.pages, strict=True):
                b = blocks[h]
                if pin:
                    self.pool.touch([b])
                self.copies.submit(Copy("store", self._slots(b), [page * bs + i for i in range(bs)],
                                        on_done=self._store_done(h, b, pin)))
        try:
            self.copies.start_stores()
        finally:
            self.copies.poll()
            self._publish()

    def _store_done(self, h: Hashable, b: int, pinned: bool):
        def done() -> None:
            self.offload.complete_store([h])
            if pinned:
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

    def tier_stats(self) -> dict[str, float]:
        return {"device_hit_tokens": self.num_device_hit_tokens, "host_hit_tokens": self.num_host_hit_tokens,
                "query_tokens": self.pool.num_queries, "bytes_loaded": self.copies.bytes_loaded,
                "bytes_written": self.copies.bytes_written, "model_transfer_s": self.copies.model_seconds,
                "host_tokens": len(self.offload.blocks) * self.block_size,
                "host_capacity_tokens": self.host.num_slots}

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
