"""Tests for exercise 72: Dynamo's router cost (overlap_weight x prefill blocks + decode blocks), the
argmin with its tie rule at temperature 0, and the spread-normalised softmax sampled with one draw."""

import math
import random
from fractions import Fraction

from solution_under_test import Worker, select_worker, selection_probabilities, worker_cost


def raises(error, call) -> bool:
    try:
        call()
    except error:
        return True
    return False


class Draw:
    """An rng whose random() returns the given values in turn, and counts the calls."""

    def __init__(self, *values):
        self.values, self.calls = list(values), 0

    def random(self):
        self.calls += 1
        return self.values.pop(0)


def cost_of(w, isl, bs, weight=1.0):
    """The cost, computed in exact fractions (independent of the solution)."""
    uncached = Fraction(max(isl - w.overlap_blocks * bs, 0), bs)
    return Fraction(weight) * uncached + w.decode_blocks


def probs_of(costs, t):
    """p_i = e^{-x_i} / sum e^{-x_j}, x = (c - min) / (spread * t), summed with fsum."""
    lo, hi = min(costs), max(costs)
    if lo == hi:
        return [1 / len(costs)] * len(costs)
    xs = [float((c - lo) / (hi - lo)) / t for c in costs]
    e = [math.exp(-x) for x in xs]
    s = math.fsum(e)
    return [v / s for v in e]


def pick(costs, t, u):
    acc = 0.0
    for i, p in enumerate(probs_of(costs, t)):
        acc += p
        if u <= acc:
            return i
    return len(costs) - 1


WORKERS = [Worker(2, 10), Worker(5, 5), Worker(8, 9)]


def test_example_the_design_documents_costs():
    assert [worker_cost(w, 160, 16) for w in WORKERS] == [18.0, 10.0, 11.0]
    assert select_worker(WORKERS, 160, 16) == 1
    assert select_worker(WORKERS, 160, 16, overlap_weight=3.0) == 2


def test_example_temperature_samples_with_one_draw():
    for u, expected in ((0.0, 0), (0.1, 0), (0.5, 1), (0.9, 2), (0.9999, 2)):
        rng = Draw(u)
        assert select_worker(WORKERS, 160, 16, temperature=1.0, rng=rng) == expected, f"u = {u}"
        assert rng.calls == 1


def test_cost_formula():
    for isl, bs, w, weight in ((160, 16, Worker(2, 10), 1.0), (100, 16, Worker(3, 0), 1.0), (100, 16, Worker(0, 7), 2.5),
                               (17, 16, Worker(1, 1), 1.0), (33, 4, Worker(2, 3), 0.0), (64, 16, Worker(4, 2), 1.0),
                               (64, 16, Worker(9, 2), 1.0), (5, 1, Worker(2, 0), 0.5)):
        got = worker_cost(w, isl, bs, weight)
        assert math.isclose(got, float(cost_of(w, isl, bs, weight)), rel_tol=1e-12), (isl, bs, w, weight)
    assert worker_cost(Worker(0, 0), 100, 16) == 6.25, "prefill blocks are a fraction, not 100 // 16"
    assert worker_cost(Worker(9, 2), 64, 16) == 2.0, "a worker holding more than the prompt prefills nothing"
    assert worker_cost(Worker(1, 3), 64, 16, overlap_weight=2.0) == 9.0, "the weight multiplies prefill only"
    assert worker_cost(Worker(1, 3), 64, 16) == 6.0, "default overlap_weight is 1"


def test_argmin_ties():
    tied = [Worker(1, 4, tree_size=9), Worker(1, 4, tree_size=3), Worker(1, 4, tree_size=3)]
    assert select_worker(tied, 64, 16) == 1, "equal costs: the smaller tree, then the lower index"
    assert select_worker([Worker(0, 3, 1), Worker(0, 3, 1)], 64, 16) == 0
    assert select_worker([Worker(0, 3, 5), Worker(1, 3, 0), Worker(0, 3, 0)], 64, 16) == 1, "cost before tree size"
    assert select_worker([Worker(0, 2, 9), Worker(0, 3, 0)], 64, 16) == 0, "cost before tree size"


def test_temperature_zero_uses_no_rng():
    rng = Draw()
    assert select_worker(WORKERS, 160, 16, temperature=0.0, rng=rng) == 1 and rng.calls == 0
    assert select_worker(WORKERS, 160, 16, temperature=0) == 1


def test_probabilities_are_normalised_by_the_spread():
    for costs in ([18.0, 10.0, 11.0], [10.0, 11.0], [10.0, 1000.0], [3.0, 3.0, 7.0, 5.0], [0.0, 0.5, 0.25, 0.5]):
        for t in (0.1, 0.5, 1.0, 3.0):
            got = selection_probabilities(costs, t)
            want = probs_of(costs, t)
            assert len(got) == len(costs) and math.isclose(sum(got), 1.0, rel_tol=1e-9)
            for g, w in zip(got, want):
                assert math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-15), (costs, t, got, want)
    a, b = selection_probabilities([10.0, 11.0], 1.0)
    assert math.isclose(a / b, math.e), "T = 1: the cheapest weighs e times the dearest, at any spread"
    a, b = selection_probabilities([10.0, 1000.0], 1.0)
    assert math.isclose(a / b, math.e)
    assert selection_probabilities([4.0, 4.0, 4.0, 4.0], 0.5) == [0.25] * 4, "equal costs: uniform"
    assert selection_probabilities([2.0], 1.0) == [1.0]
    big = selection_probabilities([5000.0, 5001.0], 0.02)       # costs in the thousands, a low temperature
    assert math.isclose(big[0], 1 / (1 + math.exp(-50))) and big[1] > 0, "shift by the minimum before exp()"
    low, high = selection_probabilities([1.0, 2.0, 3.0], 0.2), selection_probabilities([1.0, 2.0, 3.0], 5.0)
    assert low[0] > high[0] > high[2] > low[2], "a lower temperature favours the cheapest more"


def test_sampling_walks_the_cumulative_probabilities():
    equal = [Worker(1, 2), Worker(1, 2)]
    assert select_worker(equal, 64, 16, temperature=1.0, rng=Draw(0.5)) == 0, "u == cumulative picks that worker"
    assert select_worker(equal, 64, 16, temperature=1.0, rng=Draw(0.5000001)) == 1
    assert select_worker(equal, 64, 16, temperature=1.0, rng=Draw(0.4999999)) == 0
    four = [Worker(1, 2)] * 4
    assert [select_worker(four, 64, 16, temperature=2.0, rng=Draw(u)) for u in (0.0, 0.25, 0.26, 0.5, 0.74, 0.76, 0.999)] \
        == [0, 0, 1, 1, 2, 3, 3]
    ten = [Worker(1, 2)] * 10                                  # ten times 0.1 sums to just below 1.0
    assert select_worker(ten, 64, 16, temperature=1.0, rng=Draw(1.0)) == 9, "rounding left none: the last one"
    one = Draw(0.7)
    assert select_worker([Worker(0, 0)], 16, 16, temperature=1.0, rng=one) == 0 and one.calls == 1
    costs = [float(cost_of(w, 160, 16)) for w in WORKERS]
    for u in [i / 50 for i in range(50)] + [0.9999999999]:
        assert select_worker(WORKERS, 160, 16, temperature=0.7, rng=Draw(u)) == pick(costs, 0.7, u), f"u = {u}"


def test_sampling_follows_a_seeded_rng():
    rng = random.Random(72)
    for _ in range(300):
        n = rng.randint(1, 6)
        bs = rng.choice([1, 4, 16])
        isl = rng.randint(1, 200)
        workers = [Worker(rng.randint(0, isl // bs + 1), rng.randint(0, 30), rng.randint(0, 5)) for _ in range(n)]
        weight = rng.choice([0.0, 0.5, 1.0, 2.0])
        t = rng.choice([0.0, 0.0, 0.05, 0.5, 1.0, 4.0])
        costs = [cost_of(w, isl, bs, weight) for w in workers]
        seed = rng.random()
        got = select_worker(workers, isl, bs, overlap_weight=weight, temperature=t, rng=random.Random(seed))
        if t == 0:
            best = min(costs)
            expected = min(i for i, c in enumerate(costs) if c == best and workers[i].tree_size ==
                           min(workers[j].tree_size for j, cj in enumerate(costs) if cj == best))
        else:
            expected = pick(costs, t, random.Random(seed).random())
        assert got == expected, (workers, isl, bs, weight, t)


def test_frequencies_match_the_probabilities():
    rng = random.Random(7)
    counts = [0, 0, 0]
    for _ in range(3000):
        counts[select_worker(WORKERS, 160, 16, temperature=0.5, rng=rng)] += 1
    want = probs_of([18, 10, 11], 0.5)
    for c, p in zip(counts, want):
        assert abs(c / 3000 - p) < 0.04, (counts, want)


def test_bad_input():
    assert raises(ValueError, lambda: select_worker([], 16, 16))
    assert raises(ValueError, lambda: select_worker(WORKERS, 0, 16))
    assert raises(ValueError, lambda: select_worker(WORKERS, 16, 0))
    assert raises(ValueError, lambda: select_worker(WORKERS, 16, 16, temperature=-0.1))
    assert raises(ValueError, lambda: select_worker(WORKERS, 16, 16, temperature=0.5))
    for t in (-0.1, -2.0):
        assert raises(ValueError, lambda t=t: select_worker(WORKERS, 16, 16, temperature=t, rng=Draw(0.5)))
    assert select_worker(WORKERS, 1, 1) in (0, 1, 2)
