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
    assert router.route(chat) == 0
    assert router.route(list(range(100, 112))) == 1
    assert router.route(chat + [50, 51, 52, 53]) == 0
    assert router.load == [2, 1]


def test_example_imbalance_sends_to_the_least_loaded():
    router = CacheAwareRouter(2, block_size=4, balance_abs_threshold=2, balance_rel_threshold=1.5)
    chat = list(range(12))
    assert [router.route(chat) for _ in range(3)] == [0, 0, 0]
    assert router.route(chat) == 1, "loads 3 vs 0: 3 - 0 > 2 and 3 > 0 * 1.5"
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
    assert router.load == [1, 1]
    got = [router.route(chat) for _ in range(3)]
    assert got == [0, 0, 0], "gaps of 1 and 2 exceed 0, but loads 2 and 3 are not above 10 x 1"


def test_score_trades_matched_blocks_against_load():
    chat = list(range(12))
    router = CacheAwareRouter(2, block_size=4, load_weight=1.0, **NO_BALANCING)
    assert [router.route(chat) for _ in range(4)] == [0, 0, 0, 1]
    router = CacheAwareRouter(2, block_size=4, load_weight=0.5, **NO_BALANCING)
    assert [router.route(chat) for _ in range(7)] == [0, 0, 0, 0, 0, 0, 1]


def test_a_weak_match_goes_to_the_smallest_cache():
    router = CacheAwareRouter(2, block_size=4, cache_threshold=0.5, **NO_BALANCING)
    a = list(range(16))                               # 4 blocks -> replica 0
    assert router.route(a) == 0
    assert router.route(list(range(100, 108))) == 1  # 2 blocks -> replica 1
    weak = a[:4] + list(range(200, 212))             # 1 of 4 blocks cached at replica 0
    assert router.route(weak) == 1, "0.25 is not above the threshold: fill the smaller cache"
    half = a[:8] + list(range(300, 308))             # exactly 2 of 4: 0.5 is not *greater*
    assert router.num_cached_blocks(0) == 4 and router.num_cached_blocks(1) == 6
    assert router.route(half) == 0, "0.5 is not above 0.5: the smaller cache is replica 0 now"


def test_short_prompt_has_no_full_block():
    router = CacheAwareRouter(2, block_size=4, **NO_BALANCING)
    assert router.route([1, 2, 3]) == 0
    assert router.num_cached_blocks(0) == 0
    assert router.route([1, 2, 3]) == 1, "no blocks anywhere: equal caches, lower load wins"
    assert router.route([1, 2, 3, 4, 5]) == 0
    assert router.num_cached_blocks(0) == 1, "only the full block [1, 2, 3, 4] is recorded"


def test_blocks_are_chained():
    router = CacheAwareRouter(1, block_size=2)
    router.route([1, 1, 2, 2, 3, 3])
    assert router.matched_blocks(0, [1, 1, 2, 2, 9, 9]) == 2
    assert router.matched_blocks(0, [2, 2, 3, 3]) == 0, "[2, 2] after nothing is another prefix"
    assert router.matched_blocks(0, [9, 9, 2, 2, 3, 3]) == 0


def test_capacity_keeps_the_head_of_a_long_prompt():
    router = CacheAwareRouter(1, block_size=2, capacity_blocks=4)
    prompt = list(range(12))                          # 6 blocks, only 4 fit
    router.route(prompt)
    assert router.num_cached_blocks(0) == 4
    assert router.matched_blocks(0, prompt) == 4, "the first four blocks must survive"


def test_least_recently_routed_prompt_is_forgotten_first():
    router = CacheAwareRouter(1, block_size=2, capacity_blocks=6)
    a, b, c = list(range(0, 6)), list(range(10, 16)), list(range(20, 26))
    router.route(a)
    router.route(b)
    router.route(a)                                   # a is fresh again
    router.route(c)
    assert [router.matched_blocks(0, p) for p in (a, b, c)] == [3, 0, 3]


def test_matched_blocks_only_looks():
    router = CacheAwareRouter(1, block_size=2, capacity_blocks=6)
    a, b, c = list(range(0, 6)), list(range(10, 16)), list(range(20, 26))
    router.route(a)
    router.route(b)
    assert router.matched_blocks(0, a) == 3           # must not refresh a
    router.route(c)
    assert [router.matched_blocks(0, p) for p in (a, b, c)] == [0, 3, 3]


def test_finish_lowers_the_load():
    router = CacheAwareRouter(3, block_size=4)
    for prompt in ([1] * 8, [2] * 8, [3] * 8):
        router.route(prompt)
    assert router.load == [1, 1, 1]
    router.finish(1)
    assert router.load == [1, 0, 1]
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
            expected = model.route(prompt)
            got = router.route(prompt)
            assert got == expected, "routing decision differs from the rule"
            assert list(router.load) == model.load
