"""Tests for exercise 53: cache-aware routing (imbalance rule, score, smallest-cache fallback,
chained block hashes and the per-replica LRU). The random test compares every decision with a
small model that keys cached blocks by their token prefixes instead of hashes."""

import random
from collections import OrderedDict

from solution_under_test import CacheAwareRouter

NO_BALANCING = dict(balance_abs_threshold=10**9)


def test_example_same_prefix_same_replica():
    router = CacheAwareRouter(2, block_size=4)
    chat = list(range(12))
    got = router.route(chat)
    assert got == 0, "nothing cached anywhere: the smallest cache, ties to the lower load and index"
    got = router.route(list(range(100, 112)))
    assert got == 1, "an unrelated prompt: replica 1 holds fewer blocks"
    got = router.route(chat + [50, 51, 52, 53])
    assert got == 0, "3 of 4 blocks cached at replica 0: 0.75 > 0.5, the best score"
    assert router.load == [2, 1], "each routed request adds 1 to its replica's load"


def test_example_imbalance_sends_to_the_least_loaded():
    router = CacheAwareRouter(2, block_size=4, balance_abs_threshold=2, balance_rel_threshold=1.5)
    chat = list(range(12))
    got = [router.route(chat) for _ in range(3)]
    assert got == [0, 0, 0], "the same prompt follows its blocks while the loads are balanced enough"
    got = router.route(chat)
    assert got == 1, "loads 3 vs 0: 3 - 0 > 2 and 3 > 0 * 1.5"
    assert router.matched_blocks(1, chat) == 3, "the chosen replica records the prompt too"


def test_both_imbalance_conditions_are_needed():
    chat = list(range(8))
    router = CacheAwareRouter(2, block_size=4, balance_abs_threshold=3, balance_rel_threshold=1.1,
                              load_weight=0.0)
    got = [router.route(chat) for _ in range(5)]
    assert got == [0, 0, 0, 0, 1], "3 > 0 * 1.1 already holds, but the gap must exceed 3 first"
    router = CacheAwareRouter(2, block_size=4, balance_abs_threshold=0, balance_rel_threshold=10.0,
                              load_weight=0.0)
    router.route(chat)
    router.route(list(range(50, 58)))
    assert router.load == [1, 1], "one request on each replica"
    got = [router.route(chat) for _ in range(3)]
    assert got == [0, 0, 0], "gaps of 1 and 2 exceed 0, but loads 2 and 3 are not above 10 x 1"


def test_score_trades_matched_blocks_against_load():
    chat = list(range(12))
    router = CacheAwareRouter(2, block_size=4, load_weight=1.0, **NO_BALANCING)
    got = [router.route(chat) for _ in range(4)]
    assert got == [0, 0, 0, 1], "load_weight 1: 3 - 3 = 0 at replica 0 against 3 - 0 at replica 1 after the first"
    router = CacheAwareRouter(2, block_size=4, load_weight=0.5, **NO_BALANCING)
    got = [router.route(chat) for _ in range(7)]
    assert got == [0, 0, 0, 0, 0, 0, 1], "load_weight 0.5: 3 - 0.5 x 6 = 0 below replica 1's score only at load 6"


def test_a_weak_match_goes_to_the_smallest_cache():
    router = CacheAwareRouter(2, block_size=4, cache_threshold=0.5, **NO_BALANCING)
    a = list(range(16))                               # 4 blocks -> replica 0
    got = router.route(a)
    assert got == 0, "nothing cached: replica 0"
    got = router.route(list(range(100, 108)))         # 2 blocks -> replica 1
    assert got == 1, "nothing matched: the smaller cache, replica 1"
    weak = a[:4] + list(range(200, 212))             # 1 of 4 blocks cached at replica 0
    got = router.route(weak)
    assert got == 1, "0.25 is not above the threshold: fill the smaller cache"
    assert router.num_cached_blocks(0) == 4, "replica 0 holds a's 4 blocks"
    assert router.num_cached_blocks(1) == 6, "replica 1 holds 2 + 4 blocks"


def test_a_match_equal_to_the_threshold_is_no_match():
    router = CacheAwareRouter(2, block_size=4, cache_threshold=0.5, **NO_BALANCING)
    a = list(range(16))
    router.route(a)                                   # 4 blocks at replica 0
    router.route(list(range(100, 108)))               # 2 blocks at replica 1
    half = a[:8] + list(range(300, 308))             # 2 of its 4 blocks cached at replica 0
    got = router.route(half)
    assert got == 1, ("2 of 4 blocks is 0.5, not greater than cache_threshold 0.5: no useful match, "
                      "so the smaller cache (replica 1), not the score (replica 0)")


def test_short_prompt_has_no_full_block():
    router = CacheAwareRouter(2, block_size=4, **NO_BALANCING)
    got = router.route([1, 2, 3])
    assert got == 0, "no full block: no match, the smallest cache (a tie: lower load, lower index)"
    assert router.num_cached_blocks(0) == 0, "a prompt without a full block records nothing"
    got = router.route([1, 2, 3])
    assert got == 1, "no blocks anywhere: equal caches, lower load wins"
    got = router.route([1, 2, 3, 4, 5])
    assert got == 0, "no match: equal caches and loads, the lower index"
    assert router.num_cached_blocks(0) == 1, "only the full block [1, 2, 3, 4] is recorded"


def test_blocks_are_chained():
    router = CacheAwareRouter(1, block_size=2)
    router.route([1, 1, 2, 2, 3, 3])
    got = router.matched_blocks(0, [1, 1, 2, 2, 9, 9])
    assert got == 2, "the first two blocks match, the third differs"
    got = router.matched_blocks(0, [2, 2, 3, 3])
    assert got == 0, "[2, 2] after nothing is another prefix"
    got = router.matched_blocks(0, [9, 9, 2, 2, 3, 3])
    assert got == 0, "a different first block: nothing matches, the later blocks included"


def test_capacity_keeps_the_head_of_a_long_prompt():
    router = CacheAwareRouter(1, block_size=2, capacity_blocks=4)
    prompt = list(range(12))                          # 6 blocks, only 4 fit
    router.route(prompt)
    assert router.num_cached_blocks(0) == 4, "capacity_blocks 4 bounds the replica's LRU"
    assert router.matched_blocks(0, prompt) == 4, "the first four blocks must survive"


def test_least_recently_routed_prompt_is_forgotten_first():
    router = CacheAwareRouter(1, block_size=2, capacity_blocks=6)
    a, b, c = list(range(0, 6)), list(range(10, 16)), list(range(20, 26))
    router.route(a)
    router.route(b)
    router.route(a)                                   # a is fresh again
    router.route(c)
    got = [router.matched_blocks(0, p) for p in (a, b, c)]
    assert got == [3, 0, 3], "routing a again refreshed it: b, the least recently routed, is forgotten"


def test_matched_blocks_only_looks():
    router = CacheAwareRouter(1, block_size=2, capacity_blocks=6)
    a, b, c = list(range(0, 6)), list(range(10, 16)), list(range(20, 26))
    router.route(a)
    router.route(b)
    got = router.matched_blocks(0, a)                 # must not refresh a
    assert got == 3, "a is cached"
    router.route(c)
    got = [router.matched_blocks(0, p) for p in (a, b, c)]
    assert got == [0, 3, 3], "matched_blocks did not refresh a: a, the least recently routed, is forgotten"


def test_finish_lowers_the_load():
    router = CacheAwareRouter(3, block_size=4)
    for prompt in ([1] * 8, [2] * 8, [3] * 8):
        router.route(prompt)
    assert router.load == [1, 1, 1], "one request on each replica"
    router.finish(1)
    assert router.load == [1, 0, 1], "finish(1) subtracts 1 from replica 1"
    try:
        router.finish(1)
    except ValueError:
        return
    raise AssertionError("finish() on a replica with load 0 should raise ValueError")


def test_bad_arguments():
    for kwargs in ({"num_replicas": 0, "block_size": 4}, {"num_replicas": 2, "block_size": 0}):
        try:
            CacheAwareRouter(**kwargs)
        except ValueError:
            continue
        raise AssertionError(f"CacheAwareRouter({kwargs}) should raise ValueError")


class _Model:
    """The routing rule spelled out plainly; cached blocks are keyed by their token prefixes."""

    def __init__(self, n, block_size, capacity, weight, threshold, abs_t, rel_t):
        self.bs, self.capacity, self.weight = block_size, capacity, weight
        self.threshold, self.abs_t, self.rel_t = threshold, abs_t, rel_t
        self.load = [0] * n
        self.cached = [OrderedDict() for _ in range(n)]

    def route(self, tokens):
        n = len(self.load)
        keys = [tuple(tokens[:end]) for end in range(self.bs, len(tokens) + 1, self.bs)]
        matched = []
        for r in range(n):
            k = 0
            while k < len(keys) and keys[k] in self.cached[r]:
                k += 1
            matched.append(k)
        if max(self.load) - min(self.load) > self.abs_t and max(self.load) > min(self.load) * self.rel_t:
            best = sorted(range(n), key=lambda r: (self.load[r], r))[0]
        elif keys and max(matched) / len(keys) > self.threshold:
            best = sorted(range(n), key=lambda r: (-(matched[r] - self.weight * self.load[r]), self.load[r], r))[0]
        else:
            best = sorted(range(n), key=lambda r: (len(self.cached[r]), self.load[r], r))[0]
        for key in reversed(keys):
            self.cached[best].pop(key, None)
            self.cached[best][key] = None
            while len(self.cached[best]) > self.capacity:
                self.cached[best].popitem(last=False)
        self.load[best] += 1
        return best


def test_random_traces_against_a_model():
    rng = random.Random(130)
    for _trial in range(30):
        params = dict(capacity_blocks=rng.randint(2, 12), load_weight=rng.choice([0.0, 0.5, 1.0, 3.0]),
                      cache_threshold=rng.choice([0.0, 0.3, 0.5, 0.9]),
                      balance_abs_threshold=rng.randint(0, 5), balance_rel_threshold=rng.choice([1.1, 1.5, 3.0]))
        n, block_size = rng.randint(1, 4), rng.randint(1, 3)
        router = CacheAwareRouter(n, block_size, **params)
        model = _Model(n, block_size, params["capacity_blocks"], params["load_weight"],
                       params["cache_threshold"], params["balance_abs_threshold"],
                       params["balance_rel_threshold"])
        heads = [[rng.randint(0, 3) for _ in range(rng.randint(0, 8))] for _ in range(4)]
        for _step in range(80):
            if rng.random() < 0.35 and any(model.load):
                replica = rng.choice([r for r in range(n) if model.load[r]])
                router.finish(replica)
                model.load[replica] -= 1
                continue
            prompt = rng.choice(heads) + [rng.randint(0, 3) for _ in range(rng.randint(0, 6))]
            loads = list(model.load)
            expected = model.route(prompt)
            got = router.route(prompt)
            assert got == expected, (f"routing decision differs from the rule: loads {loads} before, "
                                     f"settings {params}, prompt {prompt}")
            assert list(router.load) == model.load, "the loads after routing"
