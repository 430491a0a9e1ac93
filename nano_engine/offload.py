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

:class:`~nano_engine.tiered_cache_manager.TieredHashedCacheManager` puts it under the engine's
``HashedBlockCacheManager`` (this module is the bookkeeping only, and imports no engine module):

* **store**: every block that became full and cached in a step, and every GPU hit of a request
  admitted in it, is offered for storing at the start of the next step (vLLM's worker defers stores "to the beginning of the next engine step, so that offloading
  starts AFTER transfers related to token sampling", ``offloading/worker.py``). That is
  ``write_through``; ``write_through_selective`` is vLLM's ``store_threshold=2`` (a block is
  stored the second time it is offered, i.e. when a second request uses it). vLLM has no
  write-back, so neither does this manager: a :class:`~nano_engine.host_tier.HostTier` with
  ``write_policy="write_back"`` is refused (``HostTier.for_cache``). The stores of one step go
  out as one copy, which the copy engine cuts into runs of consecutive slots: a 2,000-token
  write-through is a few dozen tensor copies, not one per 16-token block, layer and K/V.
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
import itertools
from collections import OrderedDict
from collections.abc import Collection, Hashable
from dataclasses import dataclass

from nano_engine.checks import require_int
from nano_engine.deprecation import moved
from nano_engine.host_tier import HostTier
from nano_engine.kv_events import BlockRemoved, BlockStored, KVEvent

__all__ = ["LookupResult", "OffloadingManager", "PrepareStoreOutput"]

# The engine's manager moved to tiered_cache_manager.py; the old import works for one release.
__getattr__ = moved(__name__, {"TieredHashedCacheManager": "nano_engine.tiered_cache_manager",
                               "HostLoad": "nano_engine.tiered_cache_manager"})


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

    ``num_pages`` host pages of ``block_size`` tokens (``block_size`` is also what the events
    carry); the store threshold (1 = store on first offer, 2 = on the second, as vLLM's
    ``store_threshold``) comes from ``tier``'s write policy, or is given as ``store_threshold``
    (default 1). With ``tier``, ``num_pages=None`` means as many as the tier holds."""

    def __init__(self, num_pages: int | None, block_size: int, store_threshold: int | None = None, *,
                 tier: HostTier | None = None) -> None:
        if tier is not None:
            if store_threshold is not None:
                raise ValueError("pass either tier= or store_threshold=, not both")
            store_threshold = tier.for_cache("hashed").store_threshold
            if num_pages is None:
                num_pages = tier.num_pages(block_size)
        num_pages = require_int("num_pages", num_pages)
        store_threshold = require_int("store_threshold", 1 if store_threshold is None else store_threshold)
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
            victims = list(itertools.islice((k for k, b in self.blocks.items()   # LRU first; stop at `short`
                                             if b.ref_cnt == 0 and k not in protected), short))
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
