"""The host tier's CUDA branch on CPU: copies deferred as a GPU's copy streams run them.

``tests/copy_streams.py`` hands the engine's copy engine streams whose copies really run later
(at a wait, a synchronize, or when an event query finds them done). Every cache and write policy
runs the scenarios that once failed only on a GPU, under three completion policies: greedy
outputs must equal the reference loop (``model.generate``), no attention may read a slot a queued
load has not written and no forward may overwrite one a queued store has not read (the hazards),
and nothing may leak. Then the fixes one by one: a step that could schedule nothing waits for the
oldest copy (the only place the engine waits), a load never queues behind a store, a forward
without loads waits for nothing, the hashed tier's stores go out as runs, and faults in these new
paths leave the engine consistent.
"""

from __future__ import annotations

import random

import pytest
import torch
from copy_streams import POLICIES, deferred_copies
from engine_helpers import MAX_TOKENS, assert_running_prefixes_intact, failing_copies
from hypothesis import HealthCheck, example, given, settings, strategies as st

from nano_engine.engine import SamplingParams
from nano_engine.host_tier import WRITE_POLICIES
from nano_engine.model import generate


@pytest.fixture(scope="module")
def tiny_model(small_vocab_model):
    """Token ids only: the tiny body over a 4,096-token vocabulary (conftest.py)."""
    return small_vocab_model


CACHES = ["radix", "hashed", "vllm"]
CONFIGS = [(c, p) for c in CACHES for p in (WRITE_POLICIES if c == "radix" else WRITE_POLICIES[:2])]
_GREEDY: dict[tuple[tuple[int, ...], int], list[int]] = {}


def greedy(model, prompt: list[int], n: int) -> list[int]:
    key = (tuple(prompt), n)
    if key not in _GREEDY:
        _GREEDY[key] = generate(model, torch.tensor([prompt]), n)[0].tolist()
    return _GREEDY[key]


def run_and_check(engine, streams, model, requests: list[tuple[list[int], int]], *, one_at_a_time: bool = True):
    """Serve ``requests`` (prompt, max_tokens) and check outputs, hazards and leaks."""
    if one_at_a_time:
        out = [engine.generate([p], SamplingParams(max_tokens=n))[0] for p, n in requests]
    else:
        out = engine.generate([p for p, _ in requests], [SamplingParams(max_tokens=n) for _, n in requests])
    want = [greedy(model, p, n) for p, n in requests]
    assert not streams.hazards, f"ordering hazards: {streams.hazards[:3]}"
    assert out == want, f"outputs differ from the reference at {[i for i, (a, b) in enumerate(zip(out, want)) if a != b]}"
    engine.check_no_leaks()
    return out


@pytest.mark.parametrize("completion", POLICIES)
@pytest.mark.parametrize(("cache", "policy"), CONFIGS)
def test_two_rounds_through_a_small_device_pool(make_engine, tiny_model, prompts, cache, policy, completion):
    """The CPU suite's own tier scenario (test_host_tier_engine.py), one request at a time."""
    engine = make_engine(cache=cache, num_blocks=24, block_size=16, host_kv_tokens=4096, write_policy=policy,
                         max_num_batched_tokens=256, max_num_seqs=4)
    with deferred_copies(engine, completion) as streams:
        run_and_check(engine, streams, tiny_model, [(p, MAX_TOKENS) for p in prompts + prompts])
    assert streams.num_ran > 0 and engine.cache.tier_stats()["host_hit_tokens"] > 0


@pytest.mark.parametrize("completion", POLICIES)
@pytest.mark.parametrize(("cache", "policy"), CONFIGS)
def test_batched_with_copies_in_flight(make_engine, tiny_model, prompts, cache, policy, completion):
    engine = make_engine(cache=cache, num_blocks=24, block_size=16, host_kv_tokens=4096, write_policy=policy,
                         max_num_batched_tokens=256, max_num_seqs=4)
    with deferred_copies(engine, completion, layerwise=False) as streams:
        run_and_check(engine, streams, tiny_model, [(p, MAX_TOKENS) for p in prompts + prompts], one_at_a_time=False)


@pytest.mark.parametrize("completion", POLICIES)
@pytest.mark.parametrize(("cache", "policy"), CONFIGS)
def test_pool_pressure(make_engine, tiny_model, cache, policy, completion):
    """A 64-token prompt whose pages the next, 100-token, request needs while their store may
    still be running; then the first prompt again, loaded back from the host."""
    engine = make_engine(cache=cache, num_blocks=8, block_size=16, host_kv_tokens=1024, write_policy=policy)
    prompt = list(range(1, 65))
    with deferred_copies(engine, completion) as streams:
        run_and_check(engine, streams, tiny_model, [(prompt, 1), ([7] * 100, 1), (prompt + [5], 3)])


@pytest.mark.parametrize("completion", ["next_step", "forced"])
@pytest.mark.parametrize(("cache", "policy"), CONFIGS)
def test_long_prompts(make_engine, tiny_model, cache, policy, completion):
    """The static review's finding 1 on a GPU: a 2,000-token prefill-only request (its store is
    one large copy, in flight for a while), then another that needs its device pages."""
    engine = make_engine(cache=cache, num_blocks=130, block_size=16, host_kv_tokens=8192, write_policy=policy)
    a, b = [(i * 7) % 4000 + 1 for i in range(2000)], [(i * 11) % 4000 + 2 for i in range(2000)]
    with deferred_copies(engine, completion) as streams:
        run_and_check(engine, streams, tiny_model, [(a, 1), (b, 1)])


@pytest.mark.parametrize("completion", POLICIES)
@pytest.mark.parametrize(("cache", "policy"), CONFIGS)
def test_abort_with_copies_in_flight(make_engine, tiny_model, cache, policy, completion):
    """A request admitted with a host hit (its load starts in that step) is aborted right after
    the step, copies still queued; later requests are served right and nothing leaks."""
    engine = make_engine(cache=cache, num_blocks=11, block_size=16, host_kv_tokens=1024, write_policy=policy)
    prompt = list(range(1, 65))
    with deferred_copies(engine, completion) as streams:
        run_and_check(engine, streams, tiny_model, [(prompt, 2), ([7] * 150, 2)])
        rid = engine.add_request(prompt + [5, 6, 7], SamplingParams(max_tokens=8))
        engine.step()
        assert engine.abort(rid)
        run_and_check(engine, streams, tiny_model, [(prompt + [9], 3), ([7] * 150, 2)])


@pytest.mark.parametrize("completion", ["next_step", "forced"])
@pytest.mark.parametrize(("cache", "policy"), CONFIGS)
def test_multi_turn_chats(make_engine, tiny_model, cache, policy, completion):
    """Chapter 06's multi-turn cell (headless size): three chats, three rounds, two at a time."""
    rng = random.Random(0)
    histories = [[rng.randrange(1000, 4000) for _ in range(150)] for _ in range(3)]
    engine = make_engine(cache=cache, num_blocks=24, block_size=16, max_num_seqs=2, host_kv_tokens=4096,
                         write_policy=policy)
    with deferred_copies(engine, completion) as streams:
        for r in range(3):
            turns = [h + [random.Random(100 * r + i).randrange(1000, 4000) for _ in range(24)]
                     for i, h in enumerate(histories)]
            outs = run_and_check(engine, streams, tiny_model, [(t, 4) for t in turns], one_at_a_time=False)
            histories = [t + o for t, o in zip(turns, outs, strict=True)]


# -- the fixes, one at a time ------------------------------------------------------------------------

@pytest.mark.parametrize("cache", CACHES)
def test_a_step_that_could_schedule_nothing_waits_for_the_oldest_copy(make_engine, tiny_model, cache):
    """The copy holding the only reclaimable pages never finishes by itself (a slow link): the
    step waits for it, instead of raising "no request could be scheduled"."""
    engine = make_engine(cache=cache, num_blocks=8, block_size=16, host_kv_tokens=1024)
    prompt = list(range(1, 65))
    with deferred_copies(engine, "forced") as streams:
        engine.generate([prompt], SamplingParams(max_tokens=1))
        engine.step()                           # a step of its own starts the prompt's store
        assert any(op.kind == "store" for op in streams.pending()), "the store should still be in flight"
        waits = streams.num_waits
        assert engine.generate([[7] * 100], SamplingParams(max_tokens=1)) == [greedy(tiny_model, [7] * 100, 1)]
        assert streams.num_waits == waits, "the store was waited for as a forward's dependency, not as a stall"
        assert not any(op.kind == "store" for op in streams.pending()), "the stalled step waited for the store"
    engine.check_no_leaks()


def test_a_load_never_waits_for_a_store(make_engine, tiny_model):
    """Loads and stores run on streams of their own: the forward that reads a load waits for it
    (layer by layer), and a store queued before it is still in flight afterwards."""
    engine = make_engine(cache="hashed", num_blocks=16, block_size=16, host_kv_tokens=1024)
    a, b = list(range(1, 65)), [7] * 100
    with deferred_copies(engine, "forced") as streams:
        engine.generate([a], SamplingParams(max_tokens=1))
        engine.cache.begin_step()                      # a's blocks are offered at the next step's start
        engine.cache.copies.drain()                    # a is on the host now
        pool = engine.pool
        pool.free(pool.allocate(pool.num_free))        # and no longer on the device
        engine.generate([b], SamplingParams(max_tokens=1))
        engine.step()                                  # b's stores start (and stay in flight)
        assert any(op.kind == "store" for op in streams.pending())
        assert engine.generate([a + [5]], SamplingParams(max_tokens=1)) == [greedy(tiny_model, a + [5], 1)]
        assert engine.cache.tier_stats()["host_hit_tokens"] == 64, "a was loaded back from the host"
        assert any(op.kind == "store" for op in streams.pending()), "the load's forward waited for a store too"
        assert not streams.hazards
    engine.check_no_leaks()


def test_a_forward_without_loads_waits_for_no_copy(make_engine, tiny_model, prompts):
    """With attention that cannot wait per layer (Triton, CUDA graphs), a step waits for its own
    loads only: steps that load nothing wait for nothing, so stores never sit on the critical path."""
    engine = make_engine(cache="radix", num_blocks=64, block_size=16, host_kv_tokens=4096)
    with deferred_copies(engine, "forced", layerwise=False) as streams:
        engine.generate([prompts[2]], SamplingParams(max_tokens=MAX_TOKENS))
        assert streams.num_queued > 0, "the prompt's pages were stored"
        assert any(op.kind == "store" for op in streams.pending()), "a forward waited for the stores"
        assert streams.num_waits == 0, "a forward waited though nothing was loaded"


def test_the_hashed_tier_stores_a_step_in_runs(make_engine, tiny_model):
    """A 2,000-token write-through: one copy for the step's 125 blocks, cut into runs of
    consecutive slots, not one copy per 16-token block (and per layer, and K and V)."""
    engine = make_engine(cache="hashed", num_blocks=130, block_size=16, host_kv_tokens=8192)
    prompt = [(i * 7) % 4000 + 1 for i in range(2000)]
    engine.generate([prompt], SamplingParams(max_tokens=1))
    engine.cache.begin_step()
    copies = engine.cache.copies
    layers = tiny_model.config.num_hidden_layers
    blocks = 2000 // 16
    assert copies.bytes_written == blocks * 16 * engine.kv_cache.bytes_per_token
    assert copies.num_copies == 1, f"{copies.num_copies} store copies for one step"
    assert copies.num_transfers <= 2 * layers * 4, f"{copies.num_transfers} tensor copies for {blocks} blocks"
    engine.check_no_leaks()


def test_close_waits_for_the_copies_in_flight(make_engine, tiny_model, prompts):
    """The static review's finding 15: an engine dropped with a copy running would let the
    allocator hand the copy's memory out; ``close`` (or leaving a ``with`` block) waits first."""
    with make_engine(cache="radix", num_blocks=64, block_size=16, host_kv_tokens=4096) as engine:
        with deferred_copies(engine, "forced") as streams:
            engine.generate([prompts[2]], SamplingParams(max_tokens=MAX_TOKENS))
            assert any(True for _ in streams.pending())
    assert not any(True for _ in streams.pending()) and not engine.cache.copies.in_flight()


def test_pinned_host_memory_is_one_registration_released_with_the_pool(monkeypatch, tiny_model):
    """The static review's finding 12: pinned tensors from torch's caching host allocator were
    rounded up to a power of two (+31% for a 100k-token tier) and never given back. The pool is
    now one ordinary allocation, page-locked by ``cudaHostRegister`` (a stand-in here: no GPU),
    exactly its size, and unlocked when the pool is collected."""
    import gc

    from nano_engine.host_tier import HostKVPool
    from nano_engine.kv_cache import KVCache

    calls: list[tuple] = []

    class FakeCudart:
        def cudaHostRegister(self, ptr, nbytes, flags):
            calls.append(("register", ptr, nbytes))
            return 0

        def cudaHostUnregister(self, ptr):
            calls.append(("unregister", ptr))
            return 0

    monkeypatch.setattr(torch.cuda, "cudart", lambda: FakeCudart())
    like = KVCache(tiny_model.config, 4, 16)
    like.device = torch.device("cuda")              # what the pool reads to decide to pin
    pool = HostKVPool(10, 16, like=like)
    c = tiny_model.config
    want = 2 * c.num_hidden_layers * 160 * c.num_key_value_heads * c.head_dim * 4
    assert calls == [("register", pool.k[0].data_ptr(), want)] and pool.pinned
    ptr = pool.k[0].data_ptr()
    del pool
    gc.collect()
    assert calls[-1] == ("unregister", ptr), "the registration outlived the pool"


# -- faults in the new paths -------------------------------------------------------------------------

def check_step(engine) -> None:
    if engine.cache.name == "radix":
        for tree in engine.cache.trees.values():
            tree.check_invariants()
        assert_running_prefixes_intact(engine)
    else:
        engine.pool.check_invariants()
        engine.cache.offload.check_invariants()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
# Found by this test: a write-back whose copy raised after its first layer was queued dropped its
# node while that layer's copy still had to run (its pages reused: a WAR hazard, a corrupt host copy).
@example(config=("radix", "write_back"), completion="next_step", num_blocks=6, order=list(range(8)), fail_at=[2],
         seed=0)
@given(config=st.sampled_from(CONFIGS), completion=st.sampled_from(POLICIES), num_blocks=st.integers(6, 14),
       order=st.permutations(range(8)), fail_at=st.lists(st.integers(0, 60), max_size=3), seed=st.integers(0, 9))
def test_random_runs_with_failing_deferred_copies(make_engine, tiny_model, prompts, config, completion, num_blocks,
                                                  order, fail_at, seed):
    """Copies raise when they are issued (as a CUDA call does), at random points, while others are
    in flight: every step either works or raises the injected error, the caches stay consistent,
    and every request ends with the reference's tokens."""
    cache, policy = config
    chosen = [i for i in order if len(prompts[i]) + MAX_TOKENS <= num_blocks * 8]
    engine = make_engine(cache=cache, num_blocks=num_blocks, block_size=8, host_kv_tokens=num_blocks * 16,
                         write_policy=policy, max_num_batched_tokens=64, max_num_seqs=3)
    outputs: dict[int, list[int]] = {}
    with failing_copies(fail_at):
        with deferred_copies(engine, completion, seed=seed) as streams:
            ids = [engine.add_request(prompts[i], SamplingParams(max_tokens=MAX_TOKENS)) for i in chosen * 2]
            for _ in range(2000):
                if not engine.scheduler.has_unfinished:
                    break
                try:
                    for seq in engine.step():
                        outputs[seq.request_id] = seq.output_token_ids
                except RuntimeError as e:
                    assert "injected" in str(e)
                check_step(engine)
            assert not streams.hazards, streams.hazards[:3]
    assert [outputs[i] for i in ids] == [greedy(tiny_model, prompts[i], MAX_TOKENS) for i in chosen * 2]


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("fault", [RuntimeError, KeyboardInterrupt])
def test_a_fault_while_waiting_for_a_copy_leaves_the_engine_consistent(make_engine, tiny_model, cache, fault):
    """The stalled step's wait raises (a CUDA error, or Ctrl-C while it blocks): the step fails,
    nothing is lost, and the next steps finish every request with the reference's tokens."""
    engine = make_engine(cache=cache, num_blocks=8, block_size=16, host_kv_tokens=1024)
    prompt = list(range(1, 65))
    with deferred_copies(engine, "forced") as streams:
        engine.generate([prompt], SamplingParams(max_tokens=1))
        engine.step()
        real_wait = engine.cache.wait_for_copy
        raised = {"n": 0}

        def failing_wait():
            if not raised["n"]:
                raised["n"] += 1
                raise fault("injected fault while waiting for a copy")
            return real_wait()

        engine.cache.wait_for_copy = failing_wait
        rid = engine.add_request([7] * 100, SamplingParams(max_tokens=2))
        with pytest.raises(fault, match="injected"):
            engine.step()
        check_step(engine)
        outputs = {}
        while engine.scheduler.has_unfinished:
            for seq in engine.step():
                outputs[seq.request_id] = seq.output_token_ids
            check_step(engine)
        assert outputs[rid] == greedy(tiny_model, [7] * 100, 2) and not streams.hazards
    engine.check_no_leaks()
