"""replay.py - one replay core: a cache of this package fed whole requests, hits counted one way.

Chapters 04 to 07 measure reuse without a model: a request's tokens go through one of the package's
real caches, and what the cache already held is its hit. :class:`ReplayCache` is that replay, for
every cache and every source of requests (the chapters' token streams, Mooncake's traces):

* ``"radix"``: a :class:`~nano_engine.radix.RadixCache` (pages of ``block_size`` tokens);
* ``"hashed"``: a :class:`~nano_engine.prefix_cache.PrefixCachingBlockPool` of ``block_size``-token
  blocks, freeing hash-less blocks first (``uncached_first``, vLLM's order: a request's partial last
  block holds nothing reusable, so it is reused before any cached block);
* ``"vllm"``: the same pool in vLLM mode;
* with ``host_capacity``, a host tier under the tree (:class:`~nano_engine.hiradix.HiRadixCache`)
  or under the hashed pool (:class:`~nano_engine.offload.OffloadingManager`).

**How a hit is counted** (``ReplayCache.serve``), once for all of them: match all but the request's
last token (that one is always computed, for its logits; a key that stands for a whole block of a
trace, ``key_tokens > 1``, may hit in full, the paper's count), count what the cache (and then
the host tier) holds, store the whole request, and evict least recently used data to stay within
``capacity_tokens``. A request longer than the whole cache stores its first blocks only
(``oversized="store_prefix"``, the chapter's replay) or is refused, counted in ``rejected`` with
no hit (``"reject"``: an engine cannot run it).

A trace (:func:`replay_trace`) is replayed at its own granularity (one key per 512-token hash id,
``key_tokens=512``), or token by token (``block_size=16``): then the hashed pool is
:class:`~nano_engine.trace_pool.TraceBlockPool`, the same pool keyed by the trace's block
identities instead of hashes (50 s and 4.7 GB become about 2 s and 0.4 GB on the conversation
trace).

>>> cache = ReplayCache("radix")
>>> cache.serve([1, 2, 3, 4]), cache.serve([1, 2, 3, 9]), cache.serve([1, 2, 3, 9])
(0, 3, 3)
>>> cache.result().hit_rate
0.5
"""

from __future__ import annotations

import json
import math
import sys
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from nano_engine.hiradix import LOAD_BACK_THRESHOLD, HiRadixCache
from nano_engine.host_tier import WRITE_POLICIES, CopyEngine, HostKVPool
from nano_engine.offload import LookupResult, OffloadingManager
from nano_engine.paged import BlockPool, ceil_div
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.radix import SLOT, RadixCache
from nano_engine.trace_pool import TraceBlockPool
from nano_engine.traces import TOKENS_PER_ID, Trace, TraceRequest, check_block_size, request_tokens

CACHES = ("radix", "hashed", "vllm")
"""``"radix"``: ``RadixCache``; ``"hashed"``: the chapter's ``PrefixCachingBlockPool``; ``"vllm"``: the
same in vLLM mode."""

QWEN3_06B_BYTES_PER_TOKEN = 2 * 28 * 8 * 128 * 2
"""K and V of one token of Qwen3-0.6B in bfloat16 (28 layers, 8 KV heads of 128): the size model of
the bytes a host tier moves (112 KiB a token)."""

OVERSIZED = ("store_prefix", "reject")


@dataclass(frozen=True)
class ReplayResult:
    """What one replay served. ``capacity_tokens`` is None for an unlimited cache; ``input_tokens``
    counts every request, rejected ones included (they hit nothing), so ``hit_rate`` is over all the
    traffic; ``hit_tokens`` counts device and host hits. ``block_size`` is in tokens (a trace's hash
    id: 512). ``trace`` names the trace (or workload) replayed."""

    trace: str
    cache: str
    block_size: int
    capacity_tokens: int | None
    requests: int
    rejected: int
    input_tokens: int
    hit_tokens: int
    host_hit_tokens: int = 0
    host_capacity_tokens: int | None = None
    write_policy: str | None = None
    bytes_written: int = 0
    bytes_loaded: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.input_tokens if self.input_tokens else 0.0

    @property
    def host_hit_rate(self) -> float:
        return self.host_hit_tokens / self.input_tokens if self.input_tokens else 0.0

    @property
    def device_hit_rate(self) -> float:
        return self.hit_rate - self.host_hit_rate

    def as_dict(self) -> dict:
        """The JSON record of ``hitrate`` (``capacity_tokens`` null = unlimited); with a host tier
        also its size, policy, the host share of the hits and the bytes moved."""
        record = {"trace": self.trace, "cache": self.cache, "block_size": self.block_size,
                  "capacity_tokens": self.capacity_tokens, "hit_rate": round(self.hit_rate, 6),
                  "hit_tokens": self.hit_tokens, "input_tokens": self.input_tokens,
                  "requests": self.requests, "rejected": self.rejected}
        if self.host_capacity_tokens is not None:
            record.update(host_capacity_tokens=self.host_capacity_tokens, write_policy=self.write_policy,
                          device_hit_rate=round(self.device_hit_rate, 6), host_hit_rate=round(self.host_hit_rate, 6),
                          bytes_written=self.bytes_written, bytes_loaded=self.bytes_loaded)
        return record


class ReplayCache:
    """One of the package's caches, fed whole requests (no model, no KV: only the keys).

    Args:
        cache: one of :data:`CACHES`.
        capacity_tokens: the cache's size in tokens; None for unlimited (a block pool is finite:
            give ``num_blocks``, enough for everything it will be asked to hold).
        block_size: keys per block of the pool, or per page of the tree (default 16 for a pool, 1
            for the tree).
        key_tokens: tokens each key stands for (a trace's hash id: 512); hits count in tokens.
        oversized: ``"store_prefix"`` or ``"reject"`` (the module docstring).
        num_blocks: the most blocks the requests can fill (every distinct block, and a partial one
            per request): an unlimited pool gets this many, and no pool (device or host) is built
            larger, since such a pool never evicts, whatever size was asked (so ``capacity_tokens
            =10**12`` costs no memory).
        trace_ids: requests come from a trace (``serve_request``) and are replayed token by token:
            the hashed pool is then :class:`~nano_engine.trace_pool.TraceBlockPool` (the same pool,
            keyed by the trace's ids; ``serve`` of plain tokens is refused).
        host_capacity, write_policy, load_back_threshold, bytes_per_token: a host tier of
            ``host_capacity`` tokens under the device cache ("radix" with pages of one key, or
            "hashed"); ``write_policy`` one of ``host_tier.WRITE_POLICIES`` (the hashed pool has
            vLLM's, without ``write_back``); a host hit shorter than ``load_back_threshold`` tokens
            is not loaded; bytes moved are ``bytes_per_token`` a token (a size model).

    ``serve(tokens)`` returns the hit tokens (None: refused), and the counters ``requests``,
    ``rejected``, ``input_tokens``, ``hit_tokens``, ``host_hit_tokens`` add up what it served;
    :meth:`result` freezes them.
    """

    def __init__(self, cache: str, capacity_tokens: int | None = None, *, block_size: int | None = None,
                 key_tokens: int = 1, oversized: str = "store_prefix", num_blocks: int | None = None,
                 trace_ids: bool = False, host_capacity: int | None = None, write_policy: str = "write_through",
                 load_back_threshold: int = LOAD_BACK_THRESHOLD,
                 bytes_per_token: int = QWEN3_06B_BYTES_PER_TOKEN) -> None:
        if cache not in CACHES:
            raise ValueError(f"cache must be one of {', '.join(CACHES)}, got {cache!r}")
        if oversized not in OVERSIZED:
            raise ValueError(f"oversized must be one of {', '.join(OVERSIZED)}, got {oversized!r}")
        block_size = (1 if cache == "radix" else 16) if block_size is None else block_size
        for name, value in (("block_size", block_size), ("key_tokens", key_tokens)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        for name, size in (("capacity", capacity_tokens), ("host capacity", host_capacity)):
            if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 1):
                raise ValueError(f"{name} must be a positive number of tokens or None (unlimited), got {size!r}")
        self.cache, self.block_size, self.key_tokens, self.oversized = cache, block_size, key_tokens, oversized
        self.capacity_tokens, self.host_capacity = capacity_tokens, host_capacity
        self.write_policy = write_policy if host_capacity is not None else None
        self.capacity_blocks = None if capacity_tokens is None else capacity_tokens // key_tokens // block_size
        if self.capacity_blocks is not None and self.capacity_blocks < 1:
            raise ValueError(f"capacity {capacity_tokens} tokens holds no block of {block_size * key_tokens} tokens")
        self.requests = self.rejected = self.input_tokens = self.hit_tokens = self.host_hit_tokens = 0
        if num_blocks is not None and (not isinstance(num_blocks, int) or num_blocks < 1):
            raise ValueError(f"num_blocks must be an int >= 1 or None, got {num_blocks!r}")
        self.num_blocks = num_blocks
        if host_capacity is not None:
            self.side: _Side = self._tiered(load_back_threshold, bytes_per_token)
        elif cache == "radix":
            self.side = _Tree(block_size, self.capacity_blocks)
        else:
            blocks = self._built(self.capacity_blocks)
            if blocks is None:
                raise ValueError(f"a {cache} pool is finite: give capacity_tokens, or num_blocks for an unlimited one")
            if trace_ids and key_tokens == 1:
                self.side = _TraceSide(blocks, block_size, vllm=cache == "vllm")
            else:
                self.side = _Pool(blocks, block_size, vllm=cache == "vllm")

    def _built(self, blocks: int | None) -> int | None:
        """How many blocks to build for a pool of ``blocks`` (None: unlimited): no more than
        ``num_blocks``."""
        if blocks is None or self.num_blocks is None:
            return self.num_blocks if blocks is None else blocks
        return min(blocks, self.num_blocks)

    def _tiered(self, load_back_threshold: int, bytes_per_token: int) -> _Side:
        if self.write_policy not in WRITE_POLICIES:
            raise ValueError(f"--write-policy must be one of {WRITE_POLICIES}, got {self.write_policy!r}")
        if self.capacity_blocks is None:
            raise ValueError("a host tier sits under a finite device cache: give capacity_tokens")
        assert self.host_capacity is not None
        asked = self.host_capacity // self.key_tokens // self.block_size
        if asked < 1:
            raise ValueError(f"host capacity {self.host_capacity} holds no block of "
                             f"{self.block_size * self.key_tokens} tokens")
        host_blocks, device_blocks = self._built(asked), self._built(self.capacity_blocks)
        assert host_blocks is not None and device_blocks is not None
        per_key = bytes_per_token * self.key_tokens
        if self.cache == "radix":
            if self.block_size != 1:
                raise ValueError("a host tier under the radix tree works in pages of one key (block_size=1)")
            threshold = ceil_div(load_back_threshold, self.key_tokens)
            return _TieredTree(device_blocks, host_blocks, self.write_policy, threshold, per_key)
        if self.cache == "vllm":
            raise ValueError("a host tier is modelled for the radix tree and the hashed pool, not 'vllm'")
        if self.write_policy == "write_back":
            raise ValueError("the hashed cache has vLLM's policies only: write_through, write_through_selective "
                             "(store_threshold=2); vLLM has no write-back")
        return _TieredPool(device_blocks, host_blocks, self.block_size, self.write_policy, per_key)

    # ------------------------------------------------------------------------ the replay

    def serve(self, tokens: Sequence[int], input_length: int | None = None) -> int | None:
        """Match ``tokens`` (all but the last, unless a key stands for several tokens), count the
        hits, store the request; returns the hit tokens, or None for a refused request.

        ``input_length``: the request's tokens when keys stand for several (a trace's last id may
        be partial); hits are capped at it. Default: ``len(tokens) * key_tokens``.
        """
        if not len(tokens):
            raise ValueError("serve: a request needs at least 1 token")
        length = len(tokens) * self.key_tokens if input_length is None else input_length
        self.requests += 1
        self.input_tokens += length
        store = self._fits(len(tokens))
        if store is None:
            self.rejected += 1
            return None
        limit = len(tokens) if self.key_tokens > 1 else len(tokens) - 1
        device, host = self.side.serve(tokens, limit, store)
        device = min(device * self.key_tokens, length)
        host = min(host * self.key_tokens, length - device)
        self.hit_tokens += device + host
        self.host_hit_tokens += host
        return device + host

    def serve_request(self, request: TraceRequest) -> int | None:
        """``serve`` one request of a trace, at this cache's granularity (``key_tokens`` 512: its
        hash ids; 1: its tokens, ``traces.request_tokens``; the trace pool reads its ids)."""
        if isinstance(self.side, _TraceSide):
            return self.serve(_RequestTokens(request), request.input_length)
        if self.key_tokens == TOKENS_PER_ID:
            return self.serve(request_tokens(request), request.input_length)
        return self.serve(request_tokens(request, self.block_size * self.key_tokens), request.input_length)

    def _fits(self, num_keys: int) -> int | None:
        """How many keys of a request of ``num_keys`` are stored (None: refused)."""
        if self.capacity_blocks is None or ceil_div(num_keys, self.block_size) <= self.capacity_blocks:
            return num_keys
        if self.oversized == "reject":
            return None
        return self.capacity_blocks * self.block_size

    def result(self, trace: str = "") -> ReplayResult:
        written, loaded = self.side.bytes_moved()
        return ReplayResult(trace, self.cache, self.block_size * self.key_tokens, self.capacity_tokens,
                            self.requests, self.rejected, self.input_tokens, self.hit_tokens,
                            self.host_hit_tokens, self.host_capacity, self.write_policy, written, loaded)

    def check_no_leaks(self) -> None:
        """Between requests: nothing is held, the cache is consistent and within its capacity."""
        self.side.check_no_leaks()

    @property
    def pool(self) -> PrefixCachingBlockPool:
        """The hashed pool (whose KV events a router can follow)."""
        if not isinstance(self.side, (_Pool, _TieredPool)):
            raise AttributeError(f"a {self.cache} replay has no PrefixCachingBlockPool")
        return self.side.pool

    @property
    def tree(self) -> RadixCache:
        if not isinstance(self.side, (_Tree, _TieredTree)):
            raise AttributeError(f"a {self.cache} replay has no radix tree")
        return self.side.tree


# ---------------------------------------------------------------------------- the caches' steps


class _Side:
    """What one kind of cache does with a request: ``serve(tokens, limit, store)`` matches
    ``tokens[:limit]`` and stores ``tokens[:store]``; returns (device hit keys, host hit keys)."""

    def serve(self, tokens: Sequence[int], limit: int, store: int) -> tuple[int, int]:
        raise NotImplementedError

    def bytes_moved(self) -> tuple[int, int]:
        return 0, 0

    def check_no_leaks(self) -> None:
        raise NotImplementedError


class _Tree(_Side):
    """match -> insert -> lock what was stored, evict down to the capacity -> unlock."""

    def __init__(self, page_size: int, capacity_pages: int | None) -> None:
        self.tree = RadixCache(page_size)
        self.capacity = None if capacity_pages is None else capacity_pages * page_size
        self.slots = array(SLOT)

    def serve(self, tokens: Sequence[int], limit: int, store: int) -> tuple[int, int]:
        tree, page = self.tree, self.tree.page_size
        hits = len(tree.match_prefix(tokens if limit == len(tokens) else tokens[:limit])[0])
        if len(self.slots) < store:   # dummy slots (only keys matter here): every page is page 0
            self.slots = array(SLOT, range(page)) * ceil_div(2 * store, page)
        tree.insert(tokens if store == len(tokens) else tokens[:store], self.slots[:store])
        if self.capacity is not None and tree.total_size() > self.capacity:
            stored = tree.last_match_path[-1]       # the request's path is the newest: others go first
            tree.inc_lock_ref(stored)
            tree.evict(tree.total_size() - self.capacity)
            tree.dec_lock_ref(stored)
        return hits, 0

    def check_no_leaks(self) -> None:
        self.tree.check_invariants()
        assert self.tree.protected_size == 0, f"{self.tree.protected_size} tokens still locked"
        if self.capacity is not None:
            assert self.tree.total_size() <= self.capacity, f"the tree holds {self.tree.total_size()} > {self.capacity}"


class _Pool(_Side):
    """lookup -> touch the hits -> allocate the rest (the pool evicts from the LRU end) ->
    cache_blocks -> free, last block first."""

    def __init__(self, num_blocks: int, block_size: int, *, vllm: bool) -> None:
        self.pool = (PrefixCachingBlockPool(num_blocks, block_size, vllm=True) if vllm
                     else PrefixCachingBlockPool(num_blocks, block_size, uncached_first=True))

    def serve(self, tokens: Sequence[int], limit: int, store: int) -> tuple[int, int]:
        pool, size = self.pool, self.pool.block_size
        hit = pool.lookup(tokens, max_tokens=limit)
        pool.touch(hit)
        fresh = pool.allocate(ceil_div(store, size) - len(hit))
        assert fresh is not None, "every block is back in the free queue between requests"
        table = hit + fresh
        pool.cache_blocks(tokens, table, store)
        pool.free(table)
        return len(hit) * size, 0

    def check_no_leaks(self) -> None:
        self.pool.check_invariants()
        held = [b for b, c in enumerate(self.pool.ref_cnt) if c]
        assert not held, f"blocks still referenced between requests: {held[:10]}"


class _RequestTokens(Sequence[int]):
    """A trace request standing in for its tokens, for :class:`TraceBlockPool` (which reads its ids)."""

    def __init__(self, request: TraceRequest) -> None:
        self.request = request

    def __len__(self) -> int:
        return self.request.input_length

    def __getitem__(self, index):
        raise TypeError("a trace request's tokens are not made here: TraceBlockPool reads its hash ids")


class _TraceSide(_Side):
    """A trace's requests through :class:`~nano_engine.trace_pool.TraceBlockPool`: the same steps
    as :class:`_Pool` (lookup of all but the last token, every full block cached)."""

    def __init__(self, num_blocks: int, block_size: int, *, vllm: bool) -> None:
        self.pool = TraceBlockPool(num_blocks, block_size, vllm=vllm)

    def serve(self, tokens: Sequence[int], limit: int, store: int) -> tuple[int, int]:
        if not isinstance(tokens, _RequestTokens):
            raise TypeError("a trace pool replays trace requests: use ReplayCache.serve_request")
        assert limit == len(tokens) - 1 and store == len(tokens), "a trace pool's replay refuses oversized requests"
        return self.pool.serve(tokens.request), 0

    def check_no_leaks(self) -> None:
        self.pool.check_invariants()


class _TieredTree(_Side):
    """The device match, then the host match right after it; load the host hit back (all or
    nothing); lock; allocate what the rest needs (evicting device leaves); insert; unlock; every
    copy completes before the next request (a replay has no clock)."""

    def __init__(self, capacity: int, host_capacity: int, write_policy: str, load_back_threshold: int,
                 bytes_per_key: int) -> None:
        self.pages = BlockPool(capacity)
        self.host = HostKVPool(host_capacity, 1, bytes_per_token=bytes_per_key)
        self.copies = CopyEngine(None, self.host)
        self.tree = HiRadixCache(1, host=self.host, copies=self.copies, write_policy=write_policy,
                                 load_back_threshold=load_back_threshold)

    def _alloc(self, n: int) -> list[int] | None:
        short = n - self.pages.num_free
        if short > 0:
            self.pages.free(sorted(set(self.tree.evict(short))))
        return self.pages.allocate(n)

    def serve(self, tokens: Sequence[int], limit: int, store: int) -> tuple[int, int]:
        tree, tokens = self.tree, list(tokens)
        m = tree.match(tokens[:limit])
        loaded = tree.load_back(m, self._alloc)
        node = m.host_node if loaded else m.device_node
        hit = m.device_tokens + loaded
        tree.inc_lock_ref(node)
        room = self.pages.num_free + tree.evictable_size
        new = self._alloc(min(len(tokens) - hit, room)) or []
        path_slots = list(tree.match_prefix(tokens[:hit])[0]) if hit else []
        already = tree.insert(tokens[:hit + len(new)], path_slots + new)
        self.pages.free(new[:max(0, already - hit)])
        tree.dec_lock_ref(node)
        self.copies.drain()
        return m.device_tokens, loaded

    def bytes_moved(self) -> tuple[int, int]:
        return self.copies.bytes_written, self.copies.bytes_loaded

    def check_no_leaks(self) -> None:
        self.tree.check_invariants()


class _TieredPool(_Side):
    """The hashed pool's lookup, then the host hit after it (vLLM's ``OffloadingManager``); load it
    back; cache the request; offer its blocks to the host by the write policy."""

    def __init__(self, capacity_blocks: int, host_blocks: int, block_size: int, write_policy: str,
                 bytes_per_key: int) -> None:
        self.pool = PrefixCachingBlockPool(capacity_blocks, block_size, uncached_first=True)
        self.offload = OffloadingManager(host_blocks, block_size, 2 if write_policy == "write_through_selective" else 1)
        self.bytes_per_block = bytes_per_key * block_size
        self.bytes_written = self.bytes_loaded = 0

    def serve(self, tokens: Sequence[int], limit: int, store: int) -> tuple[int, int]:
        pool, size, offload = self.pool, self.pool.block_size, self.offload
        gpu = pool.lookup(tokens, max_tokens=limit)
        hashes = pool.block_hashes(tokens[:limit])
        offload.touch(hashes[:len(gpu)])
        keys = []
        for h in hashes[len(gpu):]:
            if offload.lookup(h) is not LookupResult.HIT:
                break
            keys.append(h)
        pool.touch(gpu)
        used = ceil_div(store, size)
        keys = keys[:used - len(gpu)]
        fresh = pool.allocate(used - len(gpu))
        assert fresh is not None, "every block is back in the free queue between requests"
        if keys:
            offload.prepare_load(keys)
            offload.touch(keys)
            offload.complete_load(keys)
            self.bytes_loaded += len(keys) * self.bytes_per_block
        table = gpu + fresh
        before = set(pool.hash_to_blocks)
        pool.cache_blocks(tokens, table, min(len(tokens), used * size))
        offered = hashes[:len(gpu)] + [h for h in pool.block_hashes(tokens[:used * size]) if h not in before]
        out = offload.prepare_store(offered)
        if out is not None:
            offload.complete_store(out.keys_to_store)
            self.bytes_written += len(out.keys_to_store) * self.bytes_per_block
        offload.take_events()
        pool.free(table)
        return len(gpu) * size, len(keys) * size

    def bytes_moved(self) -> tuple[int, int]:
        return self.bytes_written, self.bytes_loaded

    def check_no_leaks(self) -> None:
        self.pool.check_invariants()


# ---------------------------------------------------------------------------- traces and workloads


def trace_replay(trace: Trace | None, cache: str, capacity_tokens: int | None, *,
                 block_size: int = TOKENS_PER_ID, host_capacity: int | None = None,
                 write_policy: str = "write_through") -> ReplayCache:
    """A :class:`ReplayCache` for trace requests (``serve_request``) at ``block_size`` tokens a
    block: 512 (one key per hash id, the paper's count) or a divisor of it (the request's tokens,
    blocks and pages of that many; the hashed pool is then :class:`TraceBlockPool`). A request
    larger than the cache is refused. An unlimited pool gets a block for every distinct block of
    ``trace`` and one partial block per request, so it never evicts."""
    if cache not in CACHES:
        raise ValueError(f"cache must be one of {', '.join(CACHES)}, got {cache!r}")
    check_block_size(block_size)
    coarse = block_size == TOKENS_PER_ID
    num_blocks = None if trace is None else trace.unique_ids * (TOKENS_PER_ID // block_size) + len(trace)
    if capacity_tokens is None and cache != "radix" and num_blocks is None:
        raise ValueError("an unlimited block pool is sized from the trace: pass trace=")
    if host_capacity is not None and not coarse:
        raise ValueError("a host tier is replayed at the trace's granularity: block size 512 only")
    return ReplayCache(cache, capacity_tokens, block_size=1 if coarse else block_size,
                       key_tokens=TOKENS_PER_ID if coarse else 1, oversized="reject", num_blocks=num_blocks,
                       trace_ids=True, host_capacity=host_capacity, write_policy=write_policy)


def replay_trace(trace: Trace, cache: str, capacity_tokens: int | None, *, block_size: int = TOKENS_PER_ID,
                 host_capacity: int | None = None, write_policy: str = "write_through",
                 progress: bool = False) -> ReplayResult:
    """Replay ``trace`` through ``cache`` bounded to ``capacity_tokens`` (None: unlimited)."""
    replay = trace_replay(trace, cache, capacity_tokens, block_size=block_size, host_capacity=host_capacity,
                          write_policy=write_policy)
    requests: Iterable[TraceRequest] = trace.requests
    if progress:
        from tqdm.auto import tqdm

        size = "unlimited" if capacity_tokens is None else f"{capacity_tokens:,} tokens"
        host = "" if host_capacity is None else f" + host {host_capacity:,}, {write_policy}"
        requests = tqdm(requests, desc=f"{trace.name}, {cache}, {size}{host}", unit="req", leave=False,
                        mininterval=1.0)
    for request in requests:
        replay.serve_request(request)
    return replay.result(trace.name)


def method_cache(method: str | int) -> tuple[str, int]:
    """A workload replay's ``method`` (``"radix"`` or a block size) as ``(cache, block_size)``."""
    if method == "radix":
        return "radix", 1
    if isinstance(method, int) and not isinstance(method, bool) and method >= 1:
        return "hashed", method
    raise ValueError(f"method must be 'radix' or a block size >= 1, got {method!r}")


def blocks_needed(workload: Sequence[Sequence[int]], block_size: int) -> int:
    """Blocks of ``block_size`` keys that replaying ``workload`` can fill at most: all of its blocks."""
    return sum(ceil_div(len(request), block_size) for request in workload)


def replay_workload(workload: Sequence[Sequence[int]], method: str | int, capacity: int | None = None, *,
                    host_capacity: int | None = None, write_policy: str = "write_through",
                    name: str = "") -> ReplayResult:
    """Replay ``workload`` (token streams) through ``method`` (``"radix"`` or a block size) bounded
    to ``capacity`` tokens (None: unbounded), with a host tier of ``host_capacity`` tokens under it
    or none; a longer request stores its head (``oversized="store_prefix"``)."""
    cache, block_size = method_cache(method)
    replay = ReplayCache(cache, capacity, block_size=block_size, num_blocks=blocks_needed(workload, block_size),
                         host_capacity=host_capacity, write_policy=write_policy)
    for request in workload:
        replay.serve(request)
    return replay.result(name)


def tier_hit_rate(workload: Sequence[Sequence[int]], method: str | int, capacity: int, host_capacity: int,
                  write_policy: str = "write_through") -> ReplayResult:
    """Replay ``workload`` through a device cache of ``capacity`` tokens (``method``: ``"radix"`` or
    a block size) with a host tier of ``host_capacity`` tokens under it; the totals."""
    return replay_workload(workload, method, capacity, host_capacity=host_capacity, write_policy=write_policy)


# ---------------------------------------------------------------------------- showing results


def format_results(results: Sequence[ReplayResult]) -> str:
    """One row per capacity, one column per cache: hit rates in percent."""
    caches = list(dict.fromkeys(r.cache for r in results))
    rows: dict[int | None, dict[str, ReplayResult]] = {}
    for r in results:
        rows.setdefault(r.capacity_tokens, {})[r.cache] = r
    lines = [f"{'capacity (tokens)':>18s}" + "".join(f"{c:>10s}" for c in caches) + f"{'rejected':>10s}"]
    for capacity in sorted(rows, key=lambda c: math.inf if c is None else c):
        by_cache = rows[capacity]
        label = "unlimited" if capacity is None else f"{capacity:,}"
        cells = "".join(f"{by_cache[c].hit_rate:10.1%}" if c in by_cache else f"{'':10s}" for c in caches)
        rejected = max(r.rejected for r in by_cache.values())
        lines.append(f"{label:>18s}{cells}{rejected:10d}")
    return "\n".join(lines)


def plot_capacity_curves(results: Sequence[ReplayResult], path: str | None = None, *, ax=None,
                         paper: bool = True):
    """Hit rate against capacity, one line per (trace, cache); unlimited as a dotted level, and
    (``paper``) the paper's Table 2 figure as a grey dashed one. Saved to ``path`` when given."""
    import matplotlib
    if path is not None and ax is None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nano_engine.traces import PAPER_UNLIMITED_HIT_RATE

    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 4))
    groups: dict[tuple[str, str], list[ReplayResult]] = {}
    for r in results:
        groups.setdefault((r.trace, r.cache), []).append(r)
    for (trace, cache), rs in groups.items():
        bounded = sorted((r for r in rs if r.capacity_tokens is not None), key=lambda r: r.capacity_tokens or 0)
        line, = ax.plot([r.capacity_tokens for r in bounded], [100 * r.hit_rate for r in bounded], marker="o",
                        label=f"{trace}, {cache}")
        for r in rs:
            if r.capacity_tokens is None:
                ax.axhline(100 * r.hit_rate, color=line.get_color(), linestyle=":", linewidth=1)
    if paper:
        for trace in dict.fromkeys(t for t, _ in groups):
            if trace in PAPER_UNLIMITED_HIT_RATE:
                level = 100 * PAPER_UNLIMITED_HIT_RATE[trace]
                ax.axhline(level, color="grey", linestyle="--", linewidth=1)
                ax.annotate(f"paper, {trace}: {level:.0f}%", (0.01, level + 1), xycoords=("axes fraction", "data"),
                            fontsize=8, color="grey")
    ax.set_xscale("log")
    ax.set_xlabel("cache capacity (tokens)")
    ax.set_ylabel("prefix hit rate (%)")
    ax.set_ylim(0, 100)
    ax.set_title("dotted: unlimited cache; dashed: Mooncake paper (Table 2)", fontsize=9)
    ax.legend(fontsize=8)
    if fig is not None:
        fig.tight_layout()
        if path is not None:
            fig.savefig(path, dpi=120)
    return fig if fig is not None else ax.figure


# ---------------------------------------------------------------------------- the hitrate command

PLOT_FORMATS = (".png", ".svg", ".pdf")


@dataclass
class HitRateStudy:
    """What ``python -m nano_engine hitrate`` runs, every option checked when it is made (the
    messages name the command's flags): the chapter's four workloads (``trace=None``: their table,
    curves at ``capacities``, rows with a host tier) or a trace through ``caches`` at each capacity
    (None: unlimited), with a host tier of each of ``host_capacities`` under them, or not.
    :meth:`run` prints the report (JSON records with ``as_json``) and returns the results."""

    trace: str | None = None
    caches: Sequence[str] | None = None
    capacities: Sequence[int | None] = ()
    block_size: int = TOKENS_PER_ID
    requests: int | None = None
    host_capacities: Sequence[int | None] = ()
    write_policies: Sequence[str] = ("write_through",)
    seed: int = 0
    as_json: bool = False
    plot: str | None = None

    def __post_init__(self) -> None:
        hosts, trace = list(self.host_capacities), self.trace is not None
        if self.plot is not None:
            path = Path(self.plot)
            if path.suffix.lower() not in PLOT_FORMATS:
                raise ValueError(f"--plot {path}: the file name must end in one of {', '.join(PLOT_FORMATS)}")
            if not path.parent.is_dir():
                raise ValueError(f"--plot {path}: the folder {path.parent} does not exist")
        if list(self.write_policies) != ["write_through"] and not hosts:
            raise ValueError("--write-policy applies to a host tier only: add --host-capacity")
        if None in hosts:
            raise ValueError("--host-capacity inf: a host tier is finite (give a size in tokens, e.g. 6e6)")
        if hosts and (not self.capacities or None in self.capacities):
            raise ValueError("--host-capacity needs a finite --capacity (the device size under which the host tier sits)")
        if not trace:
            for option, given in (("--cache", self.caches), ("--json", self.as_json), ("--requests", self.requests),
                                  ("--block-size", self.block_size != TOKENS_PER_ID)):
                if given:
                    raise ValueError(f"{option} applies to a trace replay only: add --trace conversation (or synthetic)")
            if None in self.capacities:
                raise ValueError("--capacity inf: the chapter's table is already the unlimited cache (inf is for --trace)")
            return
        check_block_size(self.block_size)
        if self.requests is not None and self.requests < 1:
            raise ValueError(f"--requests must be >= 1, got {self.requests}")
        self.caches = list(dict.fromkeys(self.caches or ["hashed", "radix"]))
        self.capacities = list(self.capacities) or [None]
        for capacity in self.capacities:
            if capacity is not None and capacity < self.block_size:
                raise ValueError(f"--capacity {capacity}: holds no block of {self.block_size} tokens")
        if hosts:
            if self.block_size != TOKENS_PER_ID:
                raise ValueError("--host-capacity with --trace replays at the trace's granularity: --block-size 512 only")
            for cache in self.caches:
                if cache not in ("radix", "hashed"):
                    raise ValueError(f"--host-capacity: --cache {cache} has no host tier here (radix or hashed)")
                if cache == "hashed" and "write_back" in self.write_policies:
                    raise ValueError("--cache hashed has vLLM's policies only (write_through, write_through_selective)")
            if self.plot:
                raise ValueError("--plot with --host-capacity is not supported; use --json")

    def run(self, out=print) -> list[ReplayResult]:
        """Replay and print; the trace is read first, so a bad file fails before any replay."""
        if self.trace is None:
            return self._run_workloads(out)
        from nano_engine.traces import load_trace

        trace = load_trace(self.trace)
        if self.requests is not None:
            trace = trace[:self.requests]
        results = []
        for cache in self.caches or ():
            for capacity in self.capacities:
                result = replay_trace(trace, cache, capacity, block_size=self.block_size, progress=True)
                if self.host_capacities:
                    result = replace(result, host_capacity_tokens=0)   # the device-only row
                results.append(result)
                if self.as_json and not self.host_capacities:
                    out(json.dumps(result.as_dict()))
                for host in self.host_capacities:
                    for policy in self.write_policies:
                        results.append(replay_trace(trace, cache, capacity, host_capacity=host, write_policy=policy,
                                                    progress=True))
        if self.host_capacities:
            for result in results:
                out(json.dumps(result.as_dict()) if self.as_json else format_tier_row(result))
        elif not self.as_json:
            out(f"{trace.name}: {len(trace):,} requests, {trace.input_tokens:,} input tokens, "
                f"blocks of {self.block_size} tokens; prefix hit rate:")
            out(format_results(results))
        if self.plot:
            plot_capacity_curves(results, self.plot)
            print(f"figure saved to {self.plot}", file=sys.stderr if self.as_json else sys.stdout)
        return results

    def _run_workloads(self, out) -> list[ReplayResult]:
        from nano_engine.workloads import (
            CHAPTER_METHODS,
            capacity_curve,
            chapter_workloads,
            format_table,
            hit_rate_table,
            plot_hit_rates,
        )

        workloads = chapter_workloads(self.seed)
        table = hit_rate_table(workloads)
        out(format_table(table))
        capacities = sorted(c for c in self.capacities if c is not None)
        curves = None
        if capacities:
            curves = {name: {m: capacity_curve(w, m, capacities) for m in CHAPTER_METHODS}
                      for name, w in workloads.items()}
            out(f"\nbounded caches (LRU), hit rate at capacity {', '.join(map(str, capacities))} tokens:")
            for name, by_method in curves.items():
                for m, rates in by_method.items():
                    label = f"{name}, {'radix' if m == 'radix' else f'block {m}'}"
                    out(f"  {label:36s}" + "".join(f"{r:8.1%}" for r in rates))
        results: list[ReplayResult] = []
        if self.host_capacities:
            out("\nwith a host tier (bytes at 112 KiB/token, Qwen3-0.6B bf16; a size model):")
            for name, w in workloads.items():
                for method in ("radix", 16):    # the chapter's tree and its hashed pool of 16-token blocks
                    for capacity in capacities:
                        device_only = replay_workload(w, method, capacity, name=name)
                        results.append(replace(device_only, host_capacity_tokens=0))
                        for host in self.host_capacities:
                            for policy in self.write_policies:
                                if method != "radix" and policy == "write_back":
                                    continue
                                results.append(replay_workload(w, method, capacity, host_capacity=host,
                                                               write_policy=policy, name=name))
            for result in results:
                out(format_tier_row(result))
        if self.plot:
            plot_hit_rates(table, self.plot, curves=curves, capacities=capacities)
            out(f"figure saved to {self.plot}")
        return results


def format_tier_row(r: ReplayResult) -> str:
    """One row of a replay with a host tier (device-only rows have host capacity 0)."""
    policy = r.write_policy or "device only"
    capacity = "inf" if r.capacity_tokens is None else f"{r.capacity_tokens:,}"
    return (f"{r.trace:22s} {r.cache:6s} C={capacity:<10s} H={r.host_capacity_tokens or 0:<10,d} {policy:24s} "
            f"hit {r.hit_rate:6.1%} (device {r.device_hit_rate:6.1%}, host {r.host_hit_rate:6.1%})  "
            f"written {r.bytes_written / 2**30:9.2f} GiB  loaded {r.bytes_loaded / 2**30:9.2f} GiB")
