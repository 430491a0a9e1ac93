"""nano_engine.instances: traces through a routing policy to simulated instances (hit rate, load
balance, every request served once), the approximate tree against the KV-event view fed in
process, and a small run over real engines (outputs equal to one engine's)."""

import pytest

from nano_engine.engine import LLMEngine, SamplingParams
from nano_engine.instances import EngineInstance, SimulatedInstance, run_trace
from nano_engine.kv_index import KVBlockIndex
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.routing import RoutingRequest, make_policy
from nano_engine.workloads import multi_tenant


def followed(pools) -> KVBlockIndex:
    """An index fed in process by each pool's KV events (worker i = pool i)."""
    index = KVBlockIndex()
    for i, pool in enumerate(pools):
        index.follow(i, pool)
    return index


def test_event_index_fed_in_process_is_the_pools_cached_blocks():
    instances = [SimulatedInstance(4, capacity=64, work_per_tick=50) for _ in range(2)]
    index = followed(inst.pool for inst in instances)
    policy = make_policy("approx", 2, event_index=index)
    workload = multi_tenant(1, num_tenants=3, num_users=8, num_turns=2, system_len=(8, 30),
                            user_len=(2, 9), answer_len=(2, 9))
    result = run_trace(policy, instances, workload, requests_per_tick=2)
    assert result.policy == "approx+kv_events"
    for i, inst in enumerate(instances):   # evictions reported too; duplicates counted
        assert index.num_blocks(i) == sum(len(blocks) for blocks in inst.pool.hash_to_blocks.values()), i
        assert index.blocks(i) == {inst.pool.event_hash(h) for h in inst.pool.hash_to_blocks}, i
    for prompt in workload[:10]:
        expected = [len(inst.pool.peek(prompt, max_tokens=len(prompt) - 1)) * 4 for inst in instances]
        assert policy.match_lengths(RoutingRequest.of(prompt, instances[0].pool)) == expected


def test_event_index_counts_vllm_duplicates():
    """vLLM mode caches two blocks under one hash when two requests computed it at once, and
    publishes a store and a removal per block (ints, the low 64 bits). The policy counts blocks:
    evicting one copy leaves the hash matched, and the size counts both copies while they last."""
    pools = [PrefixCachingBlockPool(4, 2, vllm=True) for _ in range(2)]
    policy = make_policy("approx", 2, event_index=followed(pools))
    a, b = pools[0].allocate(1), pools[0].allocate(1)
    pools[0].cache_blocks([5, 6], a, 2)
    pools[0].cache_blocks([5, 6], b, 2)
    (h,) = pools[0].block_hashes([5, 6])
    request = RoutingRequest.of([5, 6, 7], pools[0])
    assert isinstance(pools[0].event_hash(h), int), "vLLM publishes int hashes"
    assert policy.cached_sizes(2) == [4, 0], "both copies count in the size"
    assert policy.match_lengths(request) == [2, 0]
    pools[0].free(a)
    pools[0].free(b)
    pools[0].allocate(3)                                      # the two never-used blocks, then copy a
    assert list(pools[0].hash_to_blocks[h]) == b
    assert policy.cached_sizes(2) == [2, 0], "one copy evicted"
    assert policy.match_lengths(request) == [2, 0], "b still serves the hash"
    pools[0].allocate(1)                                      # now b too
    assert policy.match_lengths(request) == [0, 0]


def test_an_event_match_never_counts_the_prompts_last_token():
    """An engine reuses at most the blocks before a prompt's last token: a prompt of exactly two
    blocks that a worker holds whole matches one block, as the pool's own lookup does."""
    pool = PrefixCachingBlockPool(4, 2, vllm=True)
    policy = make_policy("approx", 1, event_index=followed([pool]))
    blocks = pool.allocate(2)
    pool.cache_blocks([1, 2, 3, 4], blocks, 4)
    request = RoutingRequest.of([1, 2, 3, 4], pool)
    assert len(request.block_hashes) == 2
    assert policy.match_lengths(request) == [len(pool.peek([1, 2, 3, 4], max_tokens=3)) * 2] == [2]


def test_pools_that_hash_differently_are_refused():
    instances = [SimulatedInstance(4, capacity=64), SimulatedInstance(8, capacity=64)]
    policy = make_policy("approx", 2, event_index=followed(inst.pool for inst in instances))
    with pytest.raises(ValueError, match="same block size"):
        run_trace(policy, instances, [[1, 2, 3]])
    with pytest.raises(ValueError, match="routes to 2 instances, got 1"):
        run_trace(policy, instances[:1], [[1, 2, 3]])


def simulated(n, kv=False, **options):
    instances = [SimulatedInstance(16, capacity=16384, work_per_tick=300, decode_work=128) for _ in range(n)]
    if kv:
        options["event_index"] = followed(inst.pool for inst in instances)
    return make_policy("approx", n, tree_capacity=16384, **options), instances


@pytest.mark.parametrize("seed", [0, 1])
def test_cache_aware_beats_round_robin_and_keeps_the_load_balanced(seed):
    workload = multi_tenant(seed, num_users=128)
    results = {}
    for name, kv, abs_threshold in [("round-robin", False, 8), ("approx", False, 8), ("kv_events", True, 8),
                                    ("affinity only", False, 10**9)]:
        if name == "round-robin":
            instances = [SimulatedInstance(16, capacity=16384, work_per_tick=300, decode_work=128) for _ in range(4)]
            policy = make_policy("round-robin", 4)
        else:
            policy, instances = simulated(4, kv, balance_abs_threshold=abs_threshold, balance_rel_threshold=1.5)
        result = run_trace(policy, instances, workload, requests_per_tick=4)
        results[name] = result
        served = sorted(r for s in result.stats for r in s.served)
        assert served == list(range(len(workload))), "every request served exactly once"
        assert all(result.routed_to[r] == i for i, s in enumerate(result.stats) for r in s.served), \
            "each by the instance it was routed to"
        assert policy.loads.in_flight == [0, 0, 0, 0], "one load count, back to zero"
        assert policy.loads.active_blocks == [0, 0, 0, 0], "the blocks in flight back to zero"
        if name == "approx":
            for loads, chosen in zip(result.loads, result.routed_to):
                high, low = max(loads), min(loads)
                if high - low > 8 and high > 1.5 * low:
                    assert loads[chosen] == low, "imbalanced: the least loaded"
            # A decision adds one to the busiest at most; completions between decisions at the
            # least-loaded instance can widen the gap a little more, never by much.
            assert result.max_load_gap <= 8 + 3
    for name in ("approx", "kv_events", "affinity only"):
        assert results[name].hit_rate > results["round-robin"].hit_rate + 0.05, name
        assert results[name].computed_tokens < 0.8 * results["round-robin"].computed_tokens, name
    assert results["affinity only"].max_load_gap > 8 + 3, "the balancing rule is what holds the gap"
    assert results["round-robin"].imbalance == 1.0


def test_real_engines_behind_the_router(tiny_model):  # noqa: F811
    workload = multi_tenant(0, num_tenants=3, num_users=8, num_turns=2, system_len=(80, 120),
                            user_len=(8, 16), answer_len=(8, 16))
    params = SamplingParams(max_tokens=2)
    reference = LLMEngine(tiny_model, cache="none", num_blocks=64).generate(workload, params)
    results = {}
    for name in ("round-robin", "approx"):
        instances = [EngineInstance(LLMEngine(tiny_model, cache="hashed", num_blocks=48, block_size=16), params)
                     for _ in range(2)]
        options = {"event_index": followed(inst.pool for inst in instances)} if name == "approx" else {}
        result = run_trace(make_policy(name, 2, **options), instances, workload, requests_per_tick=2)
        results[name] = result
        outputs = {r: out for inst in instances for r, out in inst.outputs.items()}
        assert sorted(outputs) == list(range(len(workload)))
        assert [outputs[r] for r in range(len(workload))] == reference, "routing changes no output"
        for inst in instances:
            inst.engine.check_no_leaks()
    assert results["approx"].hit_rate > results["round-robin"].hit_rate
    assert results["approx"].computed_tokens < results["round-robin"].computed_tokens
