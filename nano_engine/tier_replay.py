"""tier_replay.py: hit rates of a device cache with a host tier under it, replayed on token streams.

The same classes the engine uses, without a model or KV tensors (copies only count bytes):

* ``method="radix"``: a :class:`~nano_engine.hiradix.HiRadixCache` over a device pool of
  ``capacity`` one-token pages and a host pool of ``host_capacity`` tokens;
* ``method=<block size>``: a :class:`~nano_engine.prefix_cache.PrefixCachingBlockPool` of
  ``capacity // block_size`` blocks and an :class:`~nano_engine.offload.OffloadingManager` of
  ``host_capacity // block_size`` blocks.

Each request: match all but its last token on the device, then on the host right after; load the
host hit back (all or nothing); store the request; run the write policy. Every copy completes
before the next request (a replay has no clock). ``bytes`` use ``bytes_per_token`` (default
Qwen3-0.6B in bfloat16, 112 KiB), a size model, not a measurement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nano_engine.hiradix import HiRadixCache
from nano_engine.host_tier import WRITE_POLICIES, CopyEngine, HostKVPool
from nano_engine.offload import LookupResult, OffloadingManager
from nano_engine.paged import BlockPool, ceil_div
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.traces import TOKENS_PER_ID, Trace, request_tokens

QWEN3_06B_BYTES_PER_TOKEN = 2 * 28 * 8 * 128 * 2


@dataclass
class TierReplayResult:
    capacity_tokens: int
    host_capacity_tokens: int
    write_policy: str
    tokens: int
    device_hits: int
    host_hits: int
    bytes_written: int
    bytes_loaded: int

    @property
    def hit_rate(self) -> float:
        return (self.device_hits + self.host_hits) / self.tokens if self.tokens else 0.0

    def as_dict(self) -> dict:
        t = self.tokens or 1
        return {"capacity_tokens": self.capacity_tokens, "host_capacity_tokens": self.host_capacity_tokens,
                "write_policy": self.write_policy, "hit_rate": self.hit_rate,
                "device_hit_rate": self.device_hits / t, "host_hit_rate": self.host_hits / t,
                "bytes_written": self.bytes_written, "bytes_loaded": self.bytes_loaded}


class TierReplay:
    """A bounded device cache plus a host tier, fed whole requests (see the module docstring)."""

    def __init__(self, method: str | int, capacity: int, host_capacity: int, write_policy: str = "write_through",
                 *, bytes_per_token: int = QWEN3_06B_BYTES_PER_TOKEN, load_back_threshold: int = 10,
                 key_tokens: int = 1) -> None:
        if write_policy not in WRITE_POLICIES:
            raise ValueError(f"--write-policy must be one of {WRITE_POLICIES}, got {write_policy!r}")
        if not isinstance(capacity, int) or capacity < 1 or not isinstance(host_capacity, int) or host_capacity < 1:
            raise ValueError(f"capacity and host capacity must be positive token counts, got {capacity!r}, "
                             f"{host_capacity!r}")
        self.method, self.capacity, self.host_capacity, self.write_policy = method, capacity, host_capacity, write_policy
        # key_tokens > 1: each key stands for that many tokens (a trace's hash id: 512), and a
        # request may hit in full (the paper's count); else the last token is always computed.
        self.key_tokens = key_tokens
        self.bytes_per_token = bytes_per_token * key_tokens   # bytes per key
        self.tokens = self.device_hits = self.host_hits = 0
        if method == "radix":
            self.pool = BlockPool(capacity)
            self.host = HostKVPool(host_capacity, 1, bytes_per_token=self.bytes_per_token)
            self.copies = CopyEngine(None, self.host)
            self.tree = HiRadixCache(1, host=self.host, copies=self.copies, write_policy=write_policy,
                                     load_back_threshold=ceil_div(load_back_threshold, key_tokens),
                                     numpy_min_run=64)
        elif isinstance(method, int) and not isinstance(method, bool) and method >= 1:
            if write_policy == "write_back":
                raise ValueError("the hashed cache has vLLM's policies only: write_through, write_through_selective "
                                 "(store_threshold=2); vLLM has no write-back")
            if capacity < method or host_capacity < method:
                raise ValueError(f"capacity and host capacity must hold at least one block of {method} tokens")
            self.blocks = PrefixCachingBlockPool(capacity // method, method, uncached_first=True)
            threshold = 2 if write_policy == "write_through_selective" else 1
            self.offload = OffloadingManager(host_capacity // method, method, threshold)
            self.bytes_written = self.bytes_loaded = 0
        else:
            raise ValueError(f"method must be 'radix' or a block size >= 1, got {method!r}")

    def serve(self, tokens: Sequence[int], input_length: int | None = None) -> tuple[int, int]:
        """One request of ``tokens`` keys; returns (device hit tokens, host hit tokens loaded back).

        ``input_length``: the request's tokens when keys stand for several (a trace's last id may
        be partial); hits are capped at it. Default: ``len(tokens) * key_tokens``."""
        tokens = list(tokens)
        if not tokens:
            raise ValueError("serve: a request needs at least 1 token")
        limit = len(tokens) if self.key_tokens > 1 else len(tokens) - 1
        device, host = self._serve_radix(tokens, limit) if self.method == "radix" else self._serve_blocks(tokens, limit)
        length = len(tokens) * self.key_tokens if input_length is None else input_length
        device = min(device * self.key_tokens, length)
        host = min(host * self.key_tokens, length - device)
        self.tokens += length
        self.device_hits += device
        self.host_hits += host
        return device, host

    def _alloc(self, n: int) -> list[int] | None:
        short = n - self.pool.num_free
        if short > 0:
            self.pool.free(sorted(set(self.tree.evict(short))))
        return self.pool.allocate(n)

    def _serve_radix(self, tokens: list[int], limit: int) -> tuple[int, int]:
        tree = self.tree
        m = tree.match(tokens[:limit])
        loaded = tree.load_back(m, self._alloc)
        node = m.host_node if loaded else m.device_node
        hit = m.device_tokens + loaded
        tree.inc_lock_ref(node)
        room = self.pool.num_free + tree.evictable_size
        new = self._alloc(min(len(tokens) - hit, room)) or []
        path_slots = tree.match_prefix(tokens[:hit])[0] if hit else []
        already = tree.insert(tokens[:hit + len(new)], path_slots + new)
        self.pool.free(new[:max(0, already - hit)])
        tree.dec_lock_ref(node)
        self.copies.drain()
        return m.device_tokens, loaded

    def _serve_blocks(self, tokens: list[int], limit: int) -> tuple[int, int]:
        pool, size, offload = self.blocks, self.blocks.block_size, self.offload
        gpu = pool.lookup(tokens, max_tokens=limit)
        hashes = pool.block_hashes(tokens[:limit])
        offload.touch(hashes[:len(gpu)])
        keys = []
        for h in hashes[len(gpu):]:
            if offload.lookup(h) is not LookupResult.HIT:
                break
            keys.append(h)
        pool.touch(gpu)
        used = min(ceil_div(len(tokens), size), pool.num_blocks)
        keys = keys[:used - len(gpu)]
        fresh = pool.allocate(used - len(gpu))
        assert fresh is not None, "every block is back in the free queue between requests"
        if keys:
            offload.prepare_load(keys)
            offload.touch(keys)
            offload.complete_load(keys)
            self.bytes_loaded += len(keys) * size * self.bytes_per_token
        table = gpu + fresh
        before = set(pool.hash_to_blocks)
        pool.cache_blocks(tokens, table, min(len(tokens), used * size))
        offered = hashes[:len(gpu)] + [h for h in pool.block_hashes(tokens[:used * size]) if h not in before]
        out = offload.prepare_store(offered)
        if out is not None:
            offload.complete_store(out.keys_to_store)
            self.bytes_written += len(out.keys_to_store) * size * self.bytes_per_token
        offload.take_events()
        pool.free(table)
        return len(gpu) * size, len(keys) * size

    def result(self) -> TierReplayResult:
        if self.method == "radix":
            written, loaded = self.copies.bytes_written, self.copies.bytes_loaded
        else:
            written, loaded = self.bytes_written, self.bytes_loaded
        return TierReplayResult(self.capacity, self.host_capacity, self.write_policy, self.tokens,
                                self.device_hits, self.host_hits, written, loaded)


def tier_hit_rate(workload: Sequence[Sequence[int]], method: str | int, capacity: int, host_capacity: int,
                  write_policy: str = "write_through") -> TierReplayResult:
    """Replay ``workload`` through :class:`TierReplay`; the totals."""
    replay = TierReplay(method, capacity, host_capacity, write_policy)
    for request in workload:
        replay.serve(request)
    return replay.result()


def replay_trace_tiered(trace: Trace, cache: str, capacity_tokens: int, host_capacity_tokens: int,
                        write_policy: str = "write_through", *, progress: bool = False) -> dict:
    """``traces.replay_trace`` with a host tier: ``trace`` at its own granularity (one key per
    512-token hash id, :func:`traces.request_tokens`) through :class:`TierReplay`. A request
    larger than the device cache is rejected (hits nothing), as in ``traces.TraceReplay``.
    Returns the JSON record of ``hitrate --trace --host-capacity``."""
    if cache not in ("radix", "hashed"):
        raise ValueError(f"a host tier is modelled for the radix tree and the hashed pool, not {cache!r}")
    unit = TOKENS_PER_ID
    if capacity_tokens < unit or host_capacity_tokens < unit:
        raise ValueError(f"capacity {capacity_tokens} and host capacity {host_capacity_tokens} must hold a "
                         f"hash id ({unit} tokens)")
    capacity = capacity_tokens // unit
    replay = TierReplay("radix" if cache == "radix" else 1, capacity, host_capacity_tokens // unit,
                        write_policy, key_tokens=unit)
    requests = trace.requests
    if progress:
        from tqdm.auto import tqdm

        requests = tqdm(requests, desc=f"{trace.name}, {cache} + host {host_capacity_tokens:,}, {write_policy}",
                        unit="req", leave=False, mininterval=1.0)
    rejected = 0
    for request in requests:
        keys = request_tokens(request, unit)
        if len(keys) > capacity:
            rejected += 1
            replay.tokens += request.input_length
            continue
        replay.serve(keys, request.input_length)
    r = replay.result().as_dict()
    return {"trace": trace.name, "cache": cache, "block_size": unit, "capacity_tokens": capacity_tokens,
            "host_capacity_tokens": host_capacity_tokens, "write_policy": write_policy,
            "hit_rate": round(r["hit_rate"], 6), "device_hit_rate": round(r["device_hit_rate"], 6),
            "host_hit_rate": round(r["host_hit_rate"], 6), "bytes_written": r["bytes_written"],
            "bytes_loaded": r["bytes_loaded"], "input_tokens": replay.tokens, "requests": len(trace),
            "rejected": rejected}
