"""The scheduler on its own: no model, a fake forward that only advances the token counters."""

import pytest

from nano_engine.cache_manager import HashedBlockCacheManager, NaiveCacheManager, RadixCacheManager
from nano_engine.policies import FCFS
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.sampling import SamplingParams
from nano_engine.scheduler import Scheduler
from nano_engine.sequence import Sequence, Status

_ids = iter(range(10**9))


def seq(num_prompt: int, max_tokens: int = 3, first_token: int = 0) -> Sequence:
    """A request whose tokens are all distinct across requests (so no prefix cache ever hits)."""
    start = next(_ids) * 10_000 + first_token
    return Sequence(start, list(range(start, start + num_prompt)), SamplingParams(max_tokens=max_tokens))


def fake_step(sched: Scheduler):
    """What the engine does after the forward, minus the model: advance, cache, sample, finish."""
    plan = sched.schedule()
    for s, n in zip(plan.seqs, plan.num_new_tokens):
        s.num_computed_tokens += n
        sched.cache.cache(s, n)
        assert len(s.block_table) * sched.cache.block_size >= s.num_computed_tokens
    for s in plan.seqs:
        if s.num_remaining == 0:
            s.append_token(s.request_id + 5000 + s.num_tokens, now=0.0)
            if s.is_finished:
                sched.finish(s)
    return plan


def run_all(sched: Scheduler, max_steps: int = 10_000):
    plans = []
    while sched.has_unfinished:
        plans.append(fake_step(sched))
        assert len(plans) < max_steps
    return plans


def test_decodes_first_then_prefill_chunks_within_budget():
    sched = Scheduler(NaiveCacheManager(100, 4), max_num_batched_tokens=10)
    a, b = seq(12), seq(30)
    sched.add(a)
    fake_step(sched)                        # a: 10 of 12 prompt tokens
    assert a.num_computed_tokens == 10 and a.is_prefilling
    fake_step(sched)                        # a: the last 2 (first output token); b admitted with 8
    assert (a.num_computed_tokens, a.num_tokens) == (12, 13)
    sched.add(b)
    plan = fake_step(sched)
    assert plan.seqs == [a, b] and plan.num_new_tokens == [1, 9]     # the decode comes first
    plan = fake_step(sched)
    assert plan.seqs == [a, b] and plan.num_new_tokens == [1, 9]
    assert all(p.num_tokens <= 10 for p in run_all(sched))


def test_unlimited_budget_prefills_in_one_step_and_max_num_seqs_caps_the_batch():
    sched = Scheduler(NaiveCacheManager(1000, 16), max_num_batched_tokens=None, max_num_seqs=3)
    seqs = [seq(n) for n in (100, 200, 50, 7)]
    for s in seqs:
        sched.add(s)
    plan = fake_step(sched)
    assert plan.seqs == seqs[:3] and plan.num_new_tokens == [100, 200, 50]
    assert list(sched.waiting) == [seqs[3]]
    plans = run_all(sched)
    assert max(len(p.seqs) for p in plans) <= 3
    assert all(s.is_finished for s in seqs)


def test_preempts_the_most_recently_admitted_and_recomputes_it():
    cache = NaiveCacheManager(6, 4)         # 24 slots
    sched = Scheduler(cache, max_num_batched_tokens=None)
    a, b, c = seq(8, max_tokens=10), seq(7, max_tokens=10), seq(5, max_tokens=10)
    for s in (a, b, c):
        sched.add(s)
    plan = fake_step(sched)                 # a: 2 blocks, b: 2 blocks, c: 2 blocks -> pool full
    assert plan.seqs == [a, b, c] and cache.pool.num_free == 0
    plan = fake_step(sched)                 # a needs a 3rd block (9 tokens): c, the newest, goes
    assert plan.preempted == [c] and plan.seqs == [a, b]
    assert c.status is Status.WAITING and sched.waiting[0] is c
    assert c.num_computed_tokens == 0 and c.block_table == [] and c.metrics.num_preemptions == 1
    assert c.num_tokens == 6                # its generated token is kept and will be recomputed
    run_all(sched)
    assert all(s.is_finished for s in (a, b, c))
    assert [len(s.output_token_ids) for s in (a, b, c)] == [10, 10, 10]
    cache.check_no_leaks()


def test_a_sequence_preempts_itself_when_it_is_the_newest():
    cache = NaiveCacheManager(4, 4)
    sched = Scheduler(cache, max_num_batched_tokens=None)
    a, b = seq(8, max_tokens=6), seq(8, max_tokens=6)
    sched.add(a)
    sched.add(b)
    fake_step(sched)
    plan = fake_step(sched)                 # a's growth evicts b; then b alone would need a block too
    assert plan.preempted == [b]
    run_all(sched)
    assert a.is_finished and b.is_finished and b.metrics.num_preemptions >= 1
    cache.check_no_leaks()


def test_no_admission_in_a_step_that_preempted_and_no_overtaking():
    cache = NaiveCacheManager(5, 4)
    sched = Scheduler(cache, max_num_batched_tokens=None)
    big, small = seq(17, max_tokens=2), seq(1, max_tokens=2)
    filler = seq(8, max_tokens=3)
    sched.add(filler)
    fake_step(sched)
    sched.add(big)                          # needs 5 blocks: does not fit while filler runs
    sched.add(small)                        # would fit, but must not overtake big
    plan = fake_step(sched)
    assert plan.seqs == [filler] and list(sched.waiting) == [big, small]
    run_all(sched)
    assert big.metrics.first_token_time is not None and small.is_finished


class ShortestFirst:
    name = "shortest"

    def order(self, waiting, cache):
        return sorted(waiting, key=lambda s: s.num_tokens)


def test_policy_object_decides_admission_order():
    sched = Scheduler(NaiveCacheManager(100, 4), max_num_batched_tokens=20, policy=ShortestFirst())
    long, short = seq(30), seq(5)
    sched.add(long)
    sched.add(short)
    plan = fake_step(sched)
    assert plan.seqs == [short, long] and plan.num_new_tokens == [5, 15]
    assert isinstance(Scheduler(NaiveCacheManager(4, 4)).policy, FCFS)
    with pytest.raises(ValueError, match="unknown policy"):
        Scheduler(NaiveCacheManager(4, 4), policy="lpm-typo")


@pytest.mark.parametrize("budget", [None, 1, 13])
def test_same_schedule_with_every_cache_manager_when_nothing_is_shared(budget):
    """The scheduler code is the same whatever the manager: with no shared prefixes the three
    produce the same plans step for step. (Under preemption they may not: a preempted request
    readmitted under a prefix cache hits its own blocks, which is the point of caching.)"""
    lengths = [(30, 4), (3, 9), (45, 2), (17, 6), (8, 8), (33, 3)]

    def schedule_with(cache):
        sched = Scheduler(cache, max_num_batched_tokens=budget)
        seqs = [Sequence(i, [i * 1000 + t for t in range(n)], SamplingParams(max_tokens=m))
                for i, (n, m) in enumerate(lengths)]
        for s in seqs:
            sched.add(s)
        plans = run_all(sched)
        cache.check_no_leaks()
        return [([s.request_id for s in p.seqs], p.num_new_tokens, [s.request_id for s in p.preempted])
                for p in plans]

    naive = schedule_with(NaiveCacheManager(40, 4))
    assert schedule_with(HashedBlockCacheManager(PrefixCachingBlockPool(40, 4))) == naive
    assert schedule_with(RadixCacheManager(40, 4)) == naive


def test_rejects_bad_limits():
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        Scheduler(NaiveCacheManager(4, 4), max_num_batched_tokens=0)
    with pytest.raises(ValueError, match="max_num_seqs"):
        Scheduler(NaiveCacheManager(4, 4), max_num_seqs=0)


@pytest.mark.parametrize("vllm", [False, True])
def test_a_failed_admission_leaves_the_free_queue_as_it_was(vllm):
    """Three 1-token blocks: r0 ``[5]`` and r1 ``[6]`` finish; r2 ``[5, 6, 6, 6]`` hits block 0 but
    cannot get the 3 blocks it also needs. vLLM 0.33's ``KVCacheManager.allocate_slots`` counts the
    hit sitting in the free queue with the new blocks and returns None before touching anything,
    so the queue stays ``[2, 0, 1]`` and the next allocation evicts ``[5]``'s block 0 (not ``[6]``'s
    block 1, as touching the hit and giving it back to the tail would make it)."""
    pool = PrefixCachingBlockPool(3, 1, vllm=vllm)
    sched = Scheduler(HashedBlockCacheManager(pool))
    for token in (5, 6):
        sched.add(Sequence(token, [token], SamplingParams(max_tokens=1)))
        run_all(sched)
    assert list(pool.free_queue) == [2, 0, 1]
    r2 = Sequence(2, [5, 6, 6, 6], SamplingParams(max_tokens=1))
    sched.add(r2)
    assert sched.cache.peek(r2) == 1                  # it hits block 0 ...
    plan = sched.schedule()
    assert plan.seqs == [] and r2.status is Status.WAITING and r2.block_table == []   # ... but does not fit
    assert list(pool.free_queue) == [2, 0, 1] and pool.ref_cnt == [0, 0, 0]
    assert pool.allocate(2) == [2, 0] and pool.lookup([6, 6]) == [1]    # [5] goes first, [6] stays
    pool.check_invariants()
