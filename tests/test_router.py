"""Tests for nano_engine.router: the three policies' rules, the approximate trees and the KV-event
view, traces over simulated instances (hit rate, load balance, every request served once), and a
small run over real engines."""

import copy

import pytest
from hypothesis import given, settings, strategies as st

from nano_engine.engine import LLMEngine, SamplingParams
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.radix import RadixCache
from nano_engine.router import EngineInstance, Router, SimulatedInstance, run_trace
from nano_engine.workloads import multi_tenant

A, B, C = list(range(100, 140)), list(range(200, 240)), list(range(300, 340))


# ----------------------------------------------------------------------------- the rules


def test_round_robin_and_least_load():
    rr = Router(3, "round_robin")
    assert [rr.route(A) for _ in range(5)] == [0, 1, 2, 0, 1]
    ll = Router(3, "least_load")
    assert [ll.route(A) for _ in range(3)] == [0, 1, 2]
    ll.complete(1)
    assert ll.route(B) == 1 and ll.load == [1, 1, 1]


def test_cache_aware_affinity_then_smallest_tree():
    router = Router(3, cache_threshold=0.5)
    assert router.route(A + [1]) == 0          # nothing cached anywhere: smallest tree (ties: index)
    assert router.route(B + [1]) == 1          # A's instance is no longer the smallest
    assert router.route(A + [2]) == 0          # 40 of 41 tokens match on instance 0
    assert router.route(A[:10] + C) == 2       # 10 / 50 = 0.2 <= threshold: smallest tree
    assert router.reasons == {"smallest": 3, "affinity": 1}
    assert router.match_lengths(A + [3]) == [40, 0, 10]
    assert router.num_routed == [2, 1, 1]


def test_cache_aware_sends_to_the_least_loaded_when_imbalanced_and_records_it_there():
    router = Router(2, cache_threshold=0.5, balance_abs_threshold=2, balance_rel_threshold=1.5)
    for i in range(3):
        assert router.route(A + [i]) == 0      # affinity: gap 3 - 0 > 2 only after the third
    assert router.is_imbalanced()
    assert router.route(A + [9]) == 1 and router.reasons["balance"] == 1
    assert router.match_lengths(A + [9, 5])[1] == 41     # the prompt is in instance 1's tree now
    # Both conditions are needed: a big gap is fine if the relative one is small.
    relaxed = Router(2, balance_abs_threshold=2, balance_rel_threshold=1.5)
    relaxed.load = [10, 7]
    assert not relaxed.is_imbalanced()


def test_approximate_trees_are_trimmed_least_recently_used_first():
    router = Router(1, tree_capacity=100)
    router.route(A + [1])                      # 41 tokens
    router.route(B + [1])                      # 82
    router.route(A + [2])                      # A is fresh again; 83
    router.route(C + [1])                      # 124 > 100: B's branch (least recent) goes
    assert router.trees[0].total_size() <= 100
    assert router.match_lengths(A) == [40] and router.match_lengths(B) == [0] and router.match_lengths(C) == [40]


def test_bad_arguments():
    with pytest.raises(ValueError, match="policy"):
        Router(2, "random")
    with pytest.raises(ValueError, match="num_instances"):
        Router(0)
    with pytest.raises(ValueError, match="cache_threshold"):
        Router(2, cache_threshold=1.5)
    with pytest.raises(ValueError, match="balance"):
        Router(2, balance_rel_threshold=0.5)
    with pytest.raises(ValueError, match="one pool per instance"):
        Router(2, kv_event_pools=[PrefixCachingBlockPool(4, 4)])
    with pytest.raises(ValueError, match="same block size"):
        Router(2, kv_event_pools=[PrefixCachingBlockPool(4, 4), PrefixCachingBlockPool(4, 8)])
    with pytest.raises(ValueError, match="no request in flight"):
        Router(2).complete(0)
    with pytest.raises(ValueError, match="empty"):
        Router(2).route([])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=12), min_size=1, max_size=8),
       st.lists(st.integers(0, 3), max_size=14), st.sampled_from([1, 2, 3]))
def test_match_length_is_match_prefix_without_side_effects(inserted, key, page_size):
    tree = RadixCache(page_size=page_size)
    slot = 0
    for tokens in inserted:
        n = len(tokens) // page_size * page_size
        tree.insert(tokens, list(range(slot, slot + n)) + [0] * (len(tokens) - n))
        slot += n
    before = [(n.id, n.key, n.last_access) for n in tree.nodes()]
    length = tree.match_length(key)
    assert [(n.id, n.key, n.last_access) for n in tree.nodes()] == before      # nothing changed
    assert length == len(copy.deepcopy(tree).match_prefix(key)[0])


# ----------------------------------------------------------------------------- KV events


def test_kv_event_view_is_the_pools_cached_hashes():
    instances = [SimulatedInstance(4, capacity=64, work_per_tick=50) for _ in range(2)]
    router = Router(2, kv_event_pools=[inst.pool for inst in instances])
    workload = multi_tenant(1, num_tenants=3, num_users=8, num_turns=2, system_len=(8, 30),
                            user_len=(2, 9), answer_len=(2, 9))
    run_trace(router, instances, workload, requests_per_tick=2)
    for inst, cached in zip(instances, router.cached_hashes):
        assert cached == {h: len(blocks) for h, blocks in inst.pool.hash_to_blocks.items()}  # evictions reported too
    for prompt in workload[:10]:
        expected = [len(inst.pool.peek(prompt, max_tokens=len(prompt) - 1)) * 4 for inst in instances]
        assert router.match_lengths(prompt) == expected
    router.close()
    assert all(not inst.pool._subscribers for inst in instances)


def test_kv_event_view_counts_vllm_duplicates():
    """vLLM mode caches two blocks under one hash when two requests computed it at once, and
    publishes a store and a removal per block (ints, the low 64 bits). The router counts blocks:
    evicting one copy leaves the hash matched, and the size counts both copies while they last."""
    pools = [PrefixCachingBlockPool(4, 2, vllm=True) for _ in range(2)]
    router = Router(2, kv_event_pools=pools)
    a, b = pools[0].allocate(1), pools[0].allocate(1)
    pools[0].cache_blocks([5, 6], a, 2)
    pools[0].cache_blocks([5, 6], b, 2)
    (h,) = pools[0].block_hashes([5, 6])
    assert router.cached_hashes[0] == {pools[0].event_hash(h): 2} and isinstance(pools[0].event_hash(h), int)
    assert router.cached_sizes() == [4, 0] and router.match_lengths([5, 6, 7]) == [2, 0]
    pools[0].free(a)
    pools[0].free(b)
    pools[0].allocate(3)                                      # the two never-used blocks, then copy a
    assert list(pools[0].hash_to_blocks[h]) == b
    assert router.cached_sizes() == [2, 0] and router.match_lengths([5, 6, 7]) == [2, 0]   # b still serves
    pools[0].allocate(1)                                      # now b too
    assert router.cached_hashes[0] == {} and router.match_lengths([5, 6, 7]) == [0, 0]
    router.close()


# ----------------------------------------------------------------------------- traces


def simulated(n, kv=False, **router_kwargs):
    instances = [SimulatedInstance(16, capacity=16384, work_per_tick=300, decode_work=128) for _ in range(n)]
    pools = [inst.pool for inst in instances] if kv else None
    return Router(n, kv_event_pools=pools, tree_capacity=16384, **router_kwargs), instances


@pytest.mark.parametrize("seed", [0, 1])
def test_cache_aware_beats_round_robin_and_keeps_the_load_balanced(seed):
    workload = multi_tenant(seed, num_users=128)
    results = {}
    for name, policy, kv, abs_threshold in [("round_robin", "round_robin", False, 8),
                                            ("cache_aware", "cache_aware", False, 8),
                                            ("kv_events", "cache_aware", True, 8),
                                            ("affinity only", "cache_aware", False, 10**9)]:
        router, instances = simulated(4, kv, policy=policy, balance_abs_threshold=abs_threshold,
                                      balance_rel_threshold=1.5)
        result = run_trace(router, instances, workload, requests_per_tick=4)
        results[name] = result
        # Every request served exactly once, by the instance it was routed to.
        served = sorted(r for s in result.stats for r in s.served)
        assert served == list(range(len(workload)))
        assert all(result.routed_to[r] == i for i, s in enumerate(result.stats) for r in s.served)
        assert router.load == [0, 0, 0, 0]
        if policy == "cache_aware" and abs_threshold == 8:
            for loads, chosen in zip(result.loads, result.routed_to):
                high, low = max(loads), min(loads)
                if high - low > 8 and high > 1.5 * low:          # imbalanced: the least loaded
                    assert loads[chosen] == low
            # A decision adds one to the busiest at most; completions between decisions at the
            # least-loaded instance can widen the gap a little more, never by much.
            assert result.max_load_gap <= 8 + 3
    for name in ("cache_aware", "kv_events", "affinity only"):
        assert results[name].hit_rate > results["round_robin"].hit_rate + 0.05, name
        assert results[name].computed_tokens < 0.8 * results["round_robin"].computed_tokens, name
    assert results["affinity only"].max_load_gap > 8 + 3       # the balancing rule is what holds it
    assert results["round_robin"].imbalance == 1.0


def test_real_engines_behind_the_router(tiny_model):  # noqa: F811
    workload = multi_tenant(0, num_tenants=3, num_users=8, num_turns=2, system_len=(80, 120),
                            user_len=(8, 16), answer_len=(8, 16))
    params = SamplingParams(max_tokens=2)
    reference = LLMEngine(tiny_model, cache="none", num_blocks=64).generate(workload, params)
    results = {}
    for policy in ("round_robin", "cache_aware"):
        instances = [EngineInstance(LLMEngine(tiny_model, cache="hashed", num_blocks=48, block_size=16), params)
                     for _ in range(2)]
        router = Router(2, policy, kv_event_pools=[inst.pool for inst in instances] if policy == "cache_aware" else None)
        result = run_trace(router, instances, workload, requests_per_tick=2)
        results[policy] = result
        outputs = {r: out for inst in instances for r, out in inst.outputs.items()}
        assert sorted(outputs) == list(range(len(workload)))
        assert [outputs[r] for r in range(len(workload))] == reference     # routing changes no output
        for inst in instances:
            inst.engine.check_no_leaks()
    assert results["cache_aware"].hit_rate > results["round_robin"].hit_rate
    assert results["cache_aware"].computed_tokens < results["round_robin"].computed_tokens
