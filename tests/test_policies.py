"""Tests for nano_engine.policies: LPM and DFS-weight orders, the FCFS fallback, the starvation
bound (measured from outside the policy), and unchanged greedy outputs on the engine."""

import random

import pytest
from engine_fixtures import single_thread, tiny_model  # noqa: F401  (fixtures)
from hypothesis import given, settings
from hypothesis import strategies as st

from nano_engine.cache_manager import HashedBlockCacheManager, RadixCacheManager
from nano_engine.engine import LLMEngine
from nano_engine.policies import FCFS, DFSWeight, LongestPrefixMatch
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.sampling import SamplingParams
from nano_engine.scheduler import Scheduler
from nano_engine.sequence import Sequence

_ids = iter(range(10**9))


def seq(tokens, max_tokens=1):
    return Sequence(next(_ids), list(tokens), SamplingParams(max_tokens=max_tokens))


class FixedMatches:
    """A stand-in cache manager whose ``peek`` returns a fixed length per sequence."""

    def __init__(self, lengths):
        self.lengths = lengths
        self.calls = 0

    def peek(self, s):
        self.calls += 1
        return self.lengths[s]


def fake_step(sched):
    """The engine's step without a model: advance, register in the cache, sample, finish."""
    plan = sched.schedule()
    for s, n in zip(plan.seqs, plan.num_new_tokens):
        s.num_computed_tokens += n
        sched.cache.cache(s, n)
    for s in plan.seqs:
        if s.num_remaining == 0:
            s.append_token(7, now=0.0)
            if s.is_finished:
                sched.finish(s)
    return plan


def run_and_record_admissions(sched, arrivals):
    """Run until done; ``arrivals[t]`` are added before step t. Returns {seq: first admission step}."""
    admitted, step = {}, 0
    while step < len(arrivals) or sched.has_unfinished:
        for s in arrivals[step] if step < len(arrivals) else []:
            sched.add(s)
        plan = fake_step(sched)
        for s in plan.seqs:
            admitted.setdefault(s, step)
        step += 1
        assert step < 10_000
    return admitted


def passed_over_counts(admitted):
    """Per request: the rounds in which a later arrival was admitted while it still waited
    (computed from the admission steps alone, independently of the policy's own counter)."""
    return {r: len({a for x, a in admitted.items() if x.request_id > r.request_id and a < admitted[r]})
            for r in admitted}


# ----------------------------------------------------------------------------- orders


def test_lpm_orders_by_cached_prefix_length_ties_in_queue_order():
    a, b, c, d = (seq([i] * 5) for i in range(4))
    cache = FixedMatches({a: 0, b: 4, c: 2, d: 4})
    assert LongestPrefixMatch().order([a, b, c, d], cache) == [b, d, c, a]


def test_lpm_on_a_real_cache_prefers_the_cached_prefix():
    pool = PrefixCachingBlockPool(64, 4)
    sched = Scheduler(HashedBlockCacheManager(pool), policy="lpm")
    shared = list(range(100, 120))
    run_and_record_admissions(sched, [[seq(shared + [1])]])          # caches the shared prefix
    miss, hit_short, hit_long = seq(range(500, 520)), seq(shared[:9] + [2]), seq(shared + [3])
    queries = pool.num_queries
    assert sched.policy.order([miss, hit_short, hit_long], sched.cache) == [hit_long, hit_short, miss]
    assert pool.num_queries == queries                                # peeking counts nothing


def test_lpm_falls_back_to_fcfs_above_the_threshold_without_matching():
    waiting = [seq([i] * 3) for i in range(6)]
    cache = FixedMatches({s: i for i, s in enumerate(waiting)})      # LPM would reverse them
    policy = LongestPrefixMatch(fcfs_threshold=5)
    assert policy.order(waiting, cache) == waiting and cache.calls == 0 and policy.num_fallbacks == 1
    assert policy.order(waiting[:5], cache) == waiting[:5][::-1] and cache.calls == 5


def test_lpm_starts_one_of_several_requests_sharing_an_uncached_prefix():
    A, B = list(range(40)), list(range(100, 140))
    a1, a2, b1, a3, c1 = seq(A + [1]), seq(A + [2]), seq(B + [3]), seq(A + [4]), seq([7] * 50)
    cold = FixedMatches({s: 0 for s in (a1, a2, b1, a3, c1)})
    # a2 and a3 share 40 >= 32 tokens with a1, ahead of them: they wait for a1's prefix.
    assert LongestPrefixMatch().order([a1, a2, b1, a3, c1], cold) == [a1, b1, c1, a2, a3]
    assert LongestPrefixMatch(in_batch_threshold=None).order([a1, a2, b1, a3, c1], cold) == [a1, a2, b1, a3, c1]
    # A request whose prefix is cached beyond the threshold is not held back.
    warm = FixedMatches({a1: 0, a2: 33, b1: 0, a3: 0, c1: 0})
    assert LongestPrefixMatch().order([a1, a2, b1, a3, c1], warm) == [a2, a1, b1, c1, a3]


def test_dfs_weight_visits_the_heaviest_subtree_first():
    X, Y, Z = [1] * 8, [2] * 8, [3] * 8
    y1, n1, x1, y2, x2, x3 = seq(Y + [9]), seq([5] * 9), seq(X + [9]), seq(Y + Z + [9]), seq(X + [8]), seq(X + [7])
    cache = FixedMatches({y1: 8, n1: 0, x1: 8, y2: 16, x2: 8, x3: 8})
    # X holds three requests, Y two (y2 deeper, so before y1); the unmatched one comes last.
    assert DFSWeight().order([y1, n1, x1, y2, x2, x3], cache) == [x1, x2, x3, y2, y1, n1]


def dfs_weight_by_token_trie(waiting, lengths):
    """SGLang's DFS-weight over a plain token trie (one node per prefix), for comparison."""
    children, ends, weight = {(): []}, {}, {}
    for s in waiting:
        prefix = tuple(s.token_ids[:lengths[s]])
        for i in range(len(prefix)):
            parent, node = prefix[:i], prefix[:i + 1]
            if node not in children:
                children[node] = []
                children[parent].append(node)
        ends.setdefault(prefix, []).append(s)
    for node in sorted(children, key=len, reverse=True):
        weight[node] = len(ends.get(node, [])) + sum(weight[c] for c in children[node])

    def visit(node):
        out = []
        for child in sorted(children[node], key=lambda c: -weight[c]):
            out += visit(child)
        return out + ends.get(node, [])
    return visit(())


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 2), max_size=6), st.integers(0, 6)), min_size=1, max_size=12))
def test_dfs_weight_matches_a_token_trie_reference(requests):
    waiting, lengths = [], {}
    for tokens, cut in requests:
        s = seq(tokens + [9])
        waiting.append(s)
        lengths[s] = min(cut, len(tokens))
    assert DFSWeight().order(waiting, FixedMatches(lengths)) == dfs_weight_by_token_trie(waiting, lengths)


# ----------------------------------------------------------------------------- starvation


def stream_with_one_outsider(shared, num_followers):
    """A request sharing nothing, then a stream of requests hitting a cached prefix, one per step."""
    outsider = seq(range(900, 920))
    followers = [seq(shared + [1000 + i]) for i in range(num_followers)]
    return outsider, [[outsider, followers[0]]] + [[f] for f in followers[1:]]


@pytest.mark.parametrize("policy_class", [LongestPrefixMatch, DFSWeight])
def test_without_a_bound_the_outsider_starves_and_with_one_it_does_not(policy_class):
    shared = list(range(100, 132))
    results = {}
    for bound in (None, 3):
        sched = Scheduler(HashedBlockCacheManager(PrefixCachingBlockPool(64, 4)), max_num_seqs=1,
                          policy=policy_class(max_passed_over=bound))
        run_and_record_admissions(sched, [[seq(shared + [1])]])           # warm the shared prefix
        outsider, arrivals = stream_with_one_outsider(shared, 12)
        results[bound] = passed_over_counts(run_and_record_admissions(sched, arrivals))[outsider]
        sched.cache.check_no_leaks()
    assert results[None] >= 10            # overtaken by (nearly) every follower
    assert results[3] == 3                # exactly up to the bound, then admitted


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 4), st.integers(1, 3),
       st.sampled_from([LongestPrefixMatch, DFSWeight]), st.sampled_from(["hashed", "radix"]))
def test_no_request_is_passed_over_more_than_the_bound(seed, bound, max_num_seqs, policy_class, kind):
    rng = random.Random(seed)
    prefixes = [[rng.randrange(50, 5000) for _ in range(rng.randint(4, 24))] for _ in range(3)]
    arrivals = []
    for _ in range(rng.randint(1, 10)):
        step = []
        for _ in range(rng.randint(0, 4)):
            head = rng.choice(prefixes + [[]])
            step.append(seq(head + [rng.randrange(50, 5000) for _ in range(rng.randint(1, 12))],
                            max_tokens=rng.randint(1, 3)))
        arrivals.append(step)
    cache = (HashedBlockCacheManager(PrefixCachingBlockPool(24, 4)) if kind == "hashed"
             else RadixCacheManager(24, 4))
    sched = Scheduler(cache, max_num_batched_tokens=rng.choice([None, 16, 40]), max_num_seqs=max_num_seqs,
                      policy=policy_class(max_passed_over=bound))
    admitted = run_and_record_admissions(sched, arrivals)
    assert len(admitted) == sum(len(a) for a in arrivals)
    assert max(passed_over_counts(admitted).values(), default=0) <= bound
    cache.check_no_leaks()


def test_bad_policy_arguments():
    with pytest.raises(ValueError, match="fcfs_threshold"):
        LongestPrefixMatch(fcfs_threshold=-1)
    with pytest.raises(ValueError, match="in_batch_threshold"):
        LongestPrefixMatch(in_batch_threshold=0)
    with pytest.raises(ValueError, match="max_passed_over"):
        DFSWeight(max_passed_over=-2)


# ----------------------------------------------------------------------------- the engine


def interleaved_groups(num_groups=4, per_group=4, prefix_len=96, suffix_len=8, seed=0):
    """Requests of ``num_groups`` shared prefixes, interleaved: g0, g1, g2, g3, g0, ..."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(1000, 50000) for _ in range(prefix_len)] for _ in range(num_groups)]
    return [prefixes[g] + [rng.randrange(1000, 50000) for _ in range(suffix_len)]
            for _ in range(per_group) for g in range(num_groups)]


def test_engine_selects_policies_by_name(tiny_model):  # noqa: F811
    assert isinstance(LLMEngine(tiny_model, num_blocks=8, policy="lpm").scheduler.policy, LongestPrefixMatch)
    assert isinstance(LLMEngine(tiny_model, num_blocks=8, policy="dfs-weight").scheduler.policy, DFSWeight)
    assert isinstance(LLMEngine(tiny_model, num_blocks=8).scheduler.policy, FCFS)


@pytest.mark.parametrize("cache", ["hashed", "radix"])
def test_policies_never_change_greedy_outputs(tiny_model, cache):  # noqa: F811
    prompts = interleaved_groups()
    outputs, hits = {}, {}
    for policy in ("fcfs", "lpm", "dfs-weight"):
        # 20 blocks of 16: room for about two prefixes next to the running requests.
        engine = LLMEngine(tiny_model, cache=cache, num_blocks=20, block_size=16, max_num_seqs=2,
                           max_num_batched_tokens=256, policy=policy)
        outputs[policy] = engine.generate(prompts, SamplingParams(max_tokens=3))
        hits[policy] = sum(step["num_cached_tokens"] for step in engine.step_log)
        engine.check_no_leaks()
    assert outputs["fcfs"] == outputs["lpm"] == outputs["dfs-weight"]
    assert hits["lpm"] > hits["fcfs"] and hits["dfs-weight"] > hits["fcfs"]   # the orders really differ
