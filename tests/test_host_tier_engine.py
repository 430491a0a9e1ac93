"""LLMEngine with a host KV tier (host_kv_tokens=...): greedy outputs equal the reference and the
tier-off engine, hits come from the host when the device pool is too small, no leaks in either tier,
and a copy that fails mid-way leaves the engine consistent."""

from __future__ import annotations

import pytest
import torch
from engine_helpers import MAX_TOKENS, assert_running_prefixes_intact, failing_copies
from hypothesis import HealthCheck, given, settings, strategies as st

from nano_engine.engine import SamplingParams
from nano_engine.host_tier import WRITE_POLICIES
from nano_engine.model import generate


@pytest.fixture(scope="module")
def tiny_model(small_vocab_model):
    """These tests feed token ids, never text: the tiny body over a 4,096-token vocabulary
    (conftest.py's ``small_vocab_model``), so a step is not spent in a 151,936-row LM head."""
    return small_vocab_model


CACHES = ["radix", "hashed", "vllm"]


def rounds(prompts: list[list[int]]) -> list[list[int]]:
    """The prompts twice: the second round finds the first round's prefixes, mostly on the host."""
    return prompts + prompts


def policies(cache: str) -> tuple[str, ...]:
    return WRITE_POLICIES if cache == "radix" else ("write_through", "write_through_selective")


@pytest.mark.parametrize(("cache", "policy"), [(c, p) for c in CACHES for p in policies(c)])
def test_outputs_equal_reference_with_a_small_device_pool(make_engine, prompts, reference, eos, cache, policy):
    engine = make_engine(cache=cache, num_blocks=24, block_size=16, host_kv_tokens=4096, write_policy=policy,
                         eos_token_id=eos, max_num_batched_tokens=256, max_num_seqs=4)
    params = SamplingParams(max_tokens=MAX_TOKENS)
    out = []
    for p in rounds(prompts):           # one at a time: every later request finds the earlier ones
        out += engine.generate([p], params)
    assert out == reference + reference
    stats = engine.cache.tier_stats()
    assert stats["host_hit_tokens"] > 0, stats
    assert stats["bytes_written"] > 0 and stats["bytes_loaded"] == stats["host_hit_tokens"] * engine.kv_cache.bytes_per_token


@pytest.mark.parametrize("cache", CACHES)
def test_batched_run_equals_tier_off(make_engine, prompts, eos, cache):
    params = SamplingParams(max_tokens=MAX_TOKENS)
    off = make_engine(cache=cache, num_blocks=24, eos_token_id=eos, max_num_batched_tokens=128)
    on = make_engine(cache=cache, num_blocks=24, eos_token_id=eos, max_num_batched_tokens=128, host_kv_tokens=2048)
    assert on.generate(rounds(prompts), params) == off.generate(rounds(prompts), params)


def test_loaded_kv_is_byte_identical_to_what_was_written(make_engine, tiny_model):
    engine = make_engine(cache="radix", num_blocks=8, block_size=16, host_kv_tokens=1024)
    prompt = list(range(1, 65))
    engine.generate([prompt], SamplingParams(max_tokens=1))
    tree = engine.cache.tree
    engine.cache.copies.drain()
    (node,) = tree.root.children.values()
    kv = engine.kv_cache
    written = [kv.k[0][node.value].clone(), kv.v[-1][node.value].clone()]
    engine.generate([[7] * 100], SamplingParams(max_tokens=1))        # pushes the prompt off the device
    assert node.state == "host"
    (completion,) = engine.generate([prompt + [5]], SamplingParams(max_tokens=3))
    assert engine.cache.num_host_hit_tokens == 64
    assert node.on_device
    assert torch.equal(kv.k[0][node.value], written[0]) and torch.equal(kv.v[-1][node.value], written[1])
    assert completion == generate(tiny_model, torch.tensor([prompt + [5]]), 3)[0].tolist()


def test_bad_host_tier_options_raise(tiny_model):
    from nano_engine.engine import LLMEngine
    with pytest.raises(ValueError, match="write_policy"):
        LLMEngine(tiny_model, cache="radix", host_kv_tokens=64, write_policy="write_around")
    with pytest.raises(ValueError, match="host_kv_tokens"):
        LLMEngine(tiny_model, cache="radix", host_kv_tokens=3)
    with pytest.raises(ValueError, match="cache"):
        LLMEngine(tiny_model, host_kv_tokens=64)


def check_step(engine) -> None:
    """After every step: the cache's invariants (both tiers) and every running request's pages
    intact. A hashed-cache load holds one reference of its own on its device blocks until acked."""
    if engine.cache.name == "radix":
        for tree in engine.cache.trees.values():
            tree.check_invariants()
        assert_running_prefixes_intact(engine)
        return
    engine.pool.check_invariants()
    engine.cache.offload.check_invariants()
    owners: dict[int, int] = {}
    for seq in engine.scheduler.running:
        for page in seq.block_table:
            owners[page] = owners.get(page, 0) + 1
    for page in engine.cache._loading:
        owners[page] = owners.get(page, 0) + 1
    for page, n in owners.items():
        assert engine.pool.ref_cnt[page] == n, f"page {page}: ref_cnt {engine.pool.ref_cnt[page]}, {n} holders"


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(cache_policy=st.sampled_from([(c, p) for c in CACHES for p in policies(c)]), num_blocks=st.integers(6, 14),
       order=st.permutations(range(8)), fail_at=st.lists(st.integers(0, 40), max_size=3))
def test_random_runs_with_failing_copies(make_engine, prompts, reference, eos, cache_policy, num_blocks, order,
                                         fail_at):
    cache, policy = cache_policy
    chosen = [i for i in order if len(prompts[i]) + MAX_TOKENS <= num_blocks * 8]
    engine = make_engine(cache=cache, num_blocks=num_blocks, block_size=8, host_kv_tokens=num_blocks * 16,
                         write_policy=policy, eos_token_id=eos, max_num_batched_tokens=64, max_num_seqs=3)
    params = SamplingParams(max_tokens=MAX_TOKENS)
    with failing_copies(fail_at):
        for _ in range(2):
            for i in chosen:
                engine.add_request(prompts[i], params)
        outputs: dict[int, list[int]] = {}
        steps = 0
        while engine.scheduler.has_unfinished:
            steps += 1
            assert steps < 2000
            try:
                for seq in engine.step():
                    outputs.setdefault(seq.request_id, seq.output_token_ids)
            except RuntimeError as e:
                assert "injected" in str(e)
            check_step(engine)
    want = [reference[i] for i in chosen] * 2
    assert [outputs[r] for r in sorted(outputs)] == want


def test_vllm_mode_stores_and_loads_back_by_the_pools_own_hashes(make_engine, prompts, eos):
    """vLLM mode publishes each hash as a 64-bit int (``pool.event_hash``); the tier keys its
    blocks by the pool's own hashes, so blocks are stored, found and loaded back, and the tier's
    CPU events carry the same int form as the pool's GPU events."""
    from nano_engine.kv_events import replay

    engine = make_engine(cache="vllm", num_blocks=24, block_size=16, host_kv_tokens=4096, eos_token_id=eos,
                         max_num_batched_tokens=256, max_num_seqs=4)
    pool, cache = engine.cache.pool, engine.cache
    assert pool.int_event_hashes
    gpu_events: list = []
    cpu_events: list = []
    pool.subscribe(gpu_events.append)
    cache.subscribe_cpu(cpu_events.append)
    for p in prompts:
        engine.generate([p], SamplingParams(max_tokens=MAX_TOKENS))
    cache.begin_step()                       # stores are offered at the start of the next step
    first = pool.block_hashes(prompts[0][:len(prompts[0]) // 16 * 16])
    assert first and set(first) <= set(cache.offload.blocks)        # the pool's own keys, stored
    assert replay(cpu_events, medium="CPU") == {pool.event_hash(k) for k in cache.offload.blocks}
    assert all(isinstance(h, int) for e in gpu_events + cpu_events for h in getattr(e, "block_hashes", []))
    before = cache.num_host_hit_tokens
    for p in prompts:                                               # the device pool (24 blocks) lost them
        engine.generate([p], SamplingParams(max_tokens=MAX_TOKENS))
    assert cache.num_host_hit_tokens > before
    cache.check_no_leaks()


@pytest.mark.parametrize("policy", WRITE_POLICIES)
def test_a_fault_in_the_middle_of_a_load_back_leaves_the_engine_consistent(make_engine, prompts, eos, policy):
    """The fault strikes inside ``load_back`` after it has evicted device pages to make room and
    before it got its own: the request being admitted holds nothing, both tiers pass their checks
    after every step, and the run still ends with the tier-off engine's greedy outputs."""
    from nano_engine.hiradix import HiRadixCache

    params = SamplingParams(max_tokens=MAX_TOKENS)
    off = make_engine(cache="radix", num_blocks=24, block_size=16, eos_token_id=eos, max_num_batched_tokens=128)
    want = off.generate(rounds(prompts), params)
    engine = make_engine(cache="radix", num_blocks=24, block_size=16, host_kv_tokens=4096, write_policy=policy,
                         eos_token_id=eos, max_num_batched_tokens=128, max_num_seqs=2)
    pool, real_load, real_allocate = engine.cache.pool, HiRadixCache.load_back, engine.cache.pool.allocate
    loads = {"n": 0, "failed": 0, "loading": False}

    def failing_allocate(n):
        if loads["loading"] and loads["n"] % 2 == 1:       # every other load: after eviction, before allocation
            loads["failed"] += 1
            raise RuntimeError("injected fault in load-back")
        return real_allocate(n)

    def counted_load(self, m, allocate, evict=None):
        loads["n"] += 1
        loads["loading"] = True
        try:
            return real_load(self, m, allocate, evict)
        finally:
            loads["loading"] = False

    pool.allocate = failing_allocate                        # type: ignore[method-assign]
    HiRadixCache.load_back = counted_load                   # type: ignore[method-assign]
    try:
        ids = [engine.add_request(p, params) for p in rounds(prompts)]
        outputs: dict[int, list[int]] = {}
        for _ in range(3000):
            if not engine.scheduler.has_unfinished:
                break
            try:
                for seq in engine.step():
                    outputs[seq.request_id] = seq.output_token_ids
            except RuntimeError as e:
                assert "injected" in str(e)
                assert all(not s.block_table for s in engine.scheduler.waiting)
            check_step(engine)
    finally:
        HiRadixCache.load_back = real_load                  # type: ignore[method-assign]
    assert loads["failed"] > 0 and engine.cache.num_host_hit_tokens > 0
    assert [outputs[i] for i in ids] == want
    engine.cache.check_no_leaks()
