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
identities instead of hashes (on the conversation trace, about a second of CPU per capacity and
0.6 GB unlimited, where the token-fed pool took 45-60 s and 4.7 GB: ``benchmarks/README.md``).

>>> cache = ReplayCache("radix")
>>> cache.serve([1, 2, 3, 4]), cache.serve([1, 2, 3, 9]), cache.serve([1, 2, 3, 9])
(0, 3, 3)
>>> cache.result().hit_rate
0.5
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from nano_engine.checks import is_int, require, require_int
from nano_engine.hiradix import LOAD_BACK_THRESHOLD, HiRadixCache
from nano_engine.host_tier import CopyEngine, HostKVPool, HostTier
from nano_engine.offload import LookupResult, OffloadingManager
from nano_engine.paged import BlockPool, ceil_div
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.radix import SLOT, RadixCache
from nano_engine.trace_pool import TraceBlockPool

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
        tokens_per_id: requests come as a trace's hash ids, each standing for this many tokens
            (``serve_ids``), replayed token by token (``key_tokens=1``): the hashed pool is then
            :class:`~nano_engine.trace_pool.TraceBlockPool`, the same pool keyed by the ids.
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
                 tokens_per_id: int | None = None, host_capacity: int | None = None, write_policy: str = "write_through",
                 load_back_threshold: int = LOAD_BACK_THRESHOLD,
                 bytes_per_token: int = QWEN3_06B_BYTES_PER_TOKEN) -> None:
        if cache not in CACHES:
            raise ValueError(f"cache must be one of {', '.join(CACHES)}, got {cache!r}")
        if oversized not in OVERSIZED:
            raise ValueError(f"oversized must be one of {', '.join(OVERSIZED)}, got {oversized!r}")
        block_size = (1 if cache == "radix" else 16) if block_size is None else block_size
        block_size, key_tokens = require_int("block_size", block_size), require_int("key_tokens", key_tokens)
        for name, size in (("capacity", capacity_tokens), ("host capacity", host_capacity)):
            require(size is None or (is_int(size) and size >= 1), name,
                    "a positive number of tokens or None (unlimited)", size)
        self.cache, self.block_size, self.key_tokens, self.oversized = cache, block_size, key_tokens, oversized
        self.capacity_tokens, self.host_capacity = capacity_tokens, host_capacity
        self.write_policy = write_policy if host_capacity is not None else None
        self.capacity_blocks = None if capacity_tokens is None else capacity_tokens // key_tokens // block_size
        if self.capacity_blocks is not None and self.capacity_blocks < 1:
            raise ValueError(f"capacity {capacity_tokens} tokens holds no block of {block_size * key_tokens} tokens")
        self.requests = self.rejected = self.input_tokens = self.hit_tokens = self.host_hit_tokens = 0
        require_int("num_blocks", num_blocks, optional=True)
        self.num_blocks = num_blocks
        if host_capacity is not None:
            self.side: _Side = self._tiered(load_back_threshold, bytes_per_token)
        elif cache == "radix":
            self.side = _Tree(block_size, self.capacity_blocks)
        else:
            blocks = self._built(self.capacity_blocks)
            if blocks is None:
                raise ValueError(f"a {cache} pool is finite: give capacity_tokens, or num_blocks for an unlimited one")
            if tokens_per_id is not None and key_tokens == 1:
                self.side = _TraceSide(blocks, block_size, vllm=cache == "vllm", tokens_per_id=tokens_per_id)
            else:
                self.side = _Pool(blocks, block_size, vllm=cache == "vllm")

    def _built(self, blocks: int | None) -> int | None:
        """How many blocks to build for a pool of ``blocks`` (None: unlimited): no more than
        ``num_blocks``."""
        if blocks is None or self.num_blocks is None:
            return self.num_blocks if blocks is None else blocks
        return min(blocks, self.num_blocks)

    def _tiered(self, load_back_threshold: int, bytes_per_token: int) -> _Side:
        if self.cache == "vllm":
            raise ValueError("a host tier is modelled for the radix tree and the hashed pool, not 'vllm'")
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
        if self.cache == "radix" and self.block_size != 1:
            raise ValueError("a host tier under the radix tree works in pages of one key (block_size=1)")
        # The one check of the policy and threshold (write-back on the hashed cache refused there),
        # counted in keys: a replay's key may stand for many tokens.
        assert self.write_policy is not None
        tier = HostTier(host_blocks * self.block_size, self.write_policy,
                        ceil_div(load_back_threshold, self.key_tokens)).for_cache(self.cache)
        if self.cache == "radix":
            return _TieredTree(device_blocks, tier, per_key)
        return _TieredPool(device_blocks, tier, self.block_size, per_key)

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

    @property
    def reads_ids(self) -> bool:
        """Does this replay take a trace's requests as ids (``serve_ids``: its pool is a
        :class:`~nano_engine.trace_pool.TraceBlockPool`)?"""
        return isinstance(self.side, _TraceSide)

    def serve_ids(self, hash_ids: Sequence[int], input_length: int) -> int | None:
        """``serve`` a trace's request given by its hash ids, through the trace pool (built with
        ``tokens_per_id``): the same loop, the pool reading the ids for the tokens."""
        if not self.reads_ids:
            raise TypeError("serve_ids needs a hashed or vllm replay built with tokens_per_id (a trace's ids, "
                            "token by token)")
        return self.serve(_IdTokens(hash_ids, input_length), input_length)

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


class _IdTokens(Sequence[int]):
    """A trace request's hash ids standing in for its tokens: :class:`TraceBlockPool` reads the ids."""

    def __init__(self, hash_ids: Sequence[int], input_length: int) -> None:
        self.hash_ids, self.input_length = hash_ids, input_length

    def __len__(self) -> int:
        return self.input_length

    def __getitem__(self, index):
        raise TypeError("a trace request's tokens are not made here: TraceBlockPool reads its hash ids")


class _TraceSide(_Side):
    """A trace's requests through :class:`~nano_engine.trace_pool.TraceBlockPool`: the same steps
    as :class:`_Pool` (lookup of all but the last token, every full block cached)."""

    def __init__(self, num_blocks: int, block_size: int, *, vllm: bool, tokens_per_id: int) -> None:
        self.pool = TraceBlockPool(num_blocks, block_size, vllm=vllm, tokens_per_id=tokens_per_id)

    def serve(self, tokens: Sequence[int], limit: int, store: int) -> tuple[int, int]:
        if not isinstance(tokens, _IdTokens):
            raise TypeError("a trace pool replays a trace's ids: use ReplayCache.serve_ids")
        assert limit == len(tokens) - 1 and store == len(tokens), "a trace pool's replay refuses oversized requests"
        return self.pool.serve(tokens.hash_ids, tokens.input_length), 0

    def check_no_leaks(self) -> None:
        self.pool.check_invariants()


class _TieredTree(_Side):
    """The device match, then the host match right after it; load the host hit back (all or
    nothing); lock; allocate what the rest needs (evicting device leaves); insert; unlock; every
    copy completes before the next request (a replay has no clock)."""

    def __init__(self, capacity: int, tier: HostTier, bytes_per_key: int) -> None:
        self.pages = BlockPool(capacity)
        self.host = HostKVPool(tier.tokens, 1, bytes_per_token=bytes_per_key)
        self.copies = CopyEngine(None, self.host)
        self.tree = HiRadixCache(1, host=self.host, copies=self.copies, tier=tier)

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

    def __init__(self, capacity_blocks: int, tier: HostTier, block_size: int, bytes_per_key: int) -> None:
        self.pool = PrefixCachingBlockPool(capacity_blocks, block_size, uncached_first=True)
        self.offload = OffloadingManager(None, block_size, tier=tier)
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
        stored = pool.block_hashes(tokens[:used * size])
        offered = hashes[:len(gpu)] + [h for h in stored if h not in pool.hash_to_blocks]   # asked before caching them
        pool.cache_blocks(tokens, table, min(len(tokens), used * size))
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
