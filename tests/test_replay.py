"""nano_engine.replay: one serve loop for every cache, checked across caches that must agree."""

import doctest

import pytest

from nano_engine import replay
from nano_engine.replay import ReplayCache, replay_workload
from nano_engine.traces import trace_replay
from nano_engine.workloads import chapter_workloads, multi_tenant


def test_module_examples():
    result = doctest.testmod(replay)
    assert result.attempted >= 3 and result.failed == 0


@pytest.mark.parametrize("block_size", [1, 16])
def test_every_cache_counts_the_same_hits_at_the_same_granularity(block_size):
    """Unbounded, a radix tree with pages of B and a pool of B-token blocks hold the same whole
    blocks (no partial one is shared): the one serve loop must count the same hits for all three."""
    for w in (*chapter_workloads(1).values(), multi_tenant(2, num_users=16, num_turns=2)):
        rates = {cache: ReplayCache(cache, None, block_size=block_size, num_blocks=replay.blocks_needed(w, block_size))
                 for cache in replay.CACHES}
        for request in w:
            hits = {cache: r.serve(request) for cache, r in rates.items()}
            assert len(set(hits.values())) == 1, f"block size {block_size}: {hits}"
        for r in rates.values():
            r.check_no_leaks()


def test_refusals():
    with pytest.raises(ValueError, match="at least 1 token"):
        ReplayCache("radix").serve([])
    with pytest.raises(ValueError, match="oversized"):
        ReplayCache("radix", oversized="truncate")
    with pytest.raises(ValueError, match="not 'vllm'"):
        ReplayCache("vllm", 1000, host_capacity=1000)
    with pytest.raises(ValueError, match="pages of one key"):
        ReplayCache("radix", 1000, block_size=16, host_capacity=1000)
    trace_side = trace_replay(None, "hashed", 10**6, block_size=16)
    with pytest.raises(TypeError, match="serve_ids"):
        trace_side.serve([1, 2, 3])
    with pytest.raises(TypeError, match="tokens_per_id"):
        ReplayCache("hashed", 10**6).serve_ids([1], 512)


def test_an_oversized_request_is_stored_in_part_or_refused():
    long = list(range(100))
    head = ReplayCache("radix", 40)
    assert [head.serve(long), head.serve(long)] == [0, 40] and head.rejected == 0
    refuse = ReplayCache("radix", 40, oversized="reject")
    assert [refuse.serve(long), refuse.serve(long)] == [None, None] and refuse.rejected == 2
    assert refuse.result().input_tokens == 200 and replay_workload([long, long], "radix", 40).hit_tokens == 40
