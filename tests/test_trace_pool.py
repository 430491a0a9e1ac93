"""TraceBlockPool against the real PrefixCachingBlockPool: the same pool, keyed by trace ids.

The reference replays the request's tokens (traces.request_tokens) through PrefixCachingBlockPool
as the replay did before (lookup all but the last token, touch, allocate, cache_blocks, free), and
after every request the two must agree on the hit blocks (by id), the free queue's order and the
number of cached blocks."""

import random

import pytest

from nano_engine.paged import ceil_div
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.trace_pool import TraceBlockPool
from nano_engine.traces import Trace, TraceRequest, load_trace, request_tokens


def reference_pool(num_blocks: int, vllm: bool) -> PrefixCachingBlockPool:
    return PrefixCachingBlockPool(num_blocks, 16, vllm=True) if vllm else \
        PrefixCachingBlockPool(num_blocks, 16, uncached_first=True)


def reference_serve(pool: PrefixCachingBlockPool, request: TraceRequest) -> list[int]:
    tokens = request_tokens(request, 16)
    hit = pool.lookup(tokens, max_tokens=len(tokens) - 1)
    pool.touch(hit)
    fresh = pool.allocate(ceil_div(len(tokens), 16) - len(hit))
    assert fresh is not None
    table = hit + fresh
    pool.cache_blocks(tokens, table, len(tokens))
    pool.free(table)
    return hit


def assert_same_pool(trace: Trace, num_blocks: int, vllm: bool) -> TraceBlockPool:
    real, compact = reference_pool(num_blocks, vllm), TraceBlockPool(num_blocks, 16, vllm=vllm)
    for i, request in enumerate(trace):
        if ceil_div(request.input_length, 16) > num_blocks:
            continue
        keys = compact.keys(request.hash_ids, request.input_length)
        compact_hit = compact.lookup(keys[:(request.input_length - 1) // 16]).tolist()
        hit = reference_serve(real, request)
        assert compact_hit == hit, f"request {i}: hit blocks {compact_hit[:8]} vs the pool's {hit[:8]}"
        assert compact.serve(request.hash_ids, request.input_length) == 16 * len(hit), f"request {i}: hit tokens"
        assert compact.free_queue() == list(real.free_queue), f"request {i}: the free queue's order differs"
        cached = sum(len(group) for group in real.hash_to_blocks.values())
        assert compact.num_cached == cached, f"request {i}: {compact.num_cached} cached blocks vs {cached}"
    compact.check_invariants()
    return compact


@pytest.mark.parametrize("vllm", [False, True])
@pytest.mark.parametrize("name, num_blocks", [("conversation", 3000), ("conversation", 30_000),
                                              ("synthetic", 5000)])
def test_trace_slices_replay_as_the_real_pool(name, num_blocks, vllm):
    assert_same_pool(load_trace(name)[:120], num_blocks, vllm)


def duplicate_heavy_trace(seed: int) -> Trace:
    """Requests over 6 ids whose lengths are often whole blocks: a fully cached prompt's last
    block is then allocated fresh (the last token is never looked up) and is a duplicate, and an
    evicted middle block breaks a chain whose later blocks are still cached."""
    rng = random.Random(seed)
    requests = []
    for _ in range(150):
        ids = tuple(rng.choice([(0, 1, 2), (0, 1, 3), (4,), (0, 5)])[:rng.randint(1, 3)])
        length = 512 * (len(ids) - 1) + rng.choice([16, 32, 200, 512, 497])
        requests.append(TraceRequest(0.0, length, 1, ids))
    return Trace("dup", tuple(requests))


@pytest.mark.parametrize("vllm", [False, True])
@pytest.mark.parametrize("num_blocks", [40, 70, 200])
def test_duplicates_and_broken_chains_replay_as_the_real_pool(vllm, num_blocks):
    compact = assert_same_pool(duplicate_heavy_trace(num_blocks), num_blocks, vllm)
    if vllm and num_blocks == 200:
        assert compact.duplicates, "the trace must make vLLM mode cache duplicates"


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_blocks"):
        TraceBlockPool(0, 16)
    with pytest.raises(ValueError, match="divide 512"):
        TraceBlockPool(10, 24)
