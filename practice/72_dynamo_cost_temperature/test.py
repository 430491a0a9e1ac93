"""Tests for exercise 72: Dynamo's router cost at commit 01690d4 (prefill_load_scale x (queued and new
prompt blocks - credited overlap) + decode blocks), the argmin with ties drawn by reservoir sampling
at temperature 0, and the spread-normalised softmax sampled with one draw."""

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


class Script:
    """An rng that answers random() and randrange(k) from the given values, in turn, and records
    every call: ("random",) or ("randrange", k)."""

    def __init__(self, *answers):
        self.answers, self.calls = list(answers), []

    def random(self):
        self.calls.append(("random",))
        return self.answers.pop(0)

    def randrange(self, k):
        self.calls.append(("randrange", k))
        return self.answers.pop(0)


def cost_of(w, isl, bs, credit=1, scale=1):
    """The cost, computed in exact fractions (independent of the solution)."""
    prefill = Fraction(w.active_prefill_tokens + isl, bs) - Fraction(credit) * w.overlap_blocks
    return Fraction(scale) * prefill + w.decode_blocks


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


def reservoir(costs, rng):
    """The argmin of exact costs, ties drawn as the statement says: every worker equal to the
    cheapest one so far is the k-th at that cost and is taken if rng.randrange(k) == 0."""
    best, tied = None, 0
    for i, c in enumerate(costs):
        if best is None or c < costs[best]:
            best, tied = i, 1
        elif c == costs[best]:
            tied += 1
            if rng.randrange(tied) == 0:
                best = i
    return best


WORKERS = [Worker(2, 10), Worker(5, 5), Worker(8, 9)]


def test_example_the_design_documents_costs():
    got = [worker_cost(w, 160, 16) for w in WORKERS]
    assert got == [18.0, 10.0, 11.0], "cost = (prompt blocks - cached blocks) + decode blocks, at the defaults"
    got = select_worker(WORKERS, 160, 16, rng=Script())
    assert got == 1, "temperature 0: the lowest cost"
    got = select_worker(WORKERS, 160, 16, rng=Script(), prefill_load_scale=3.0)
    assert got == 2, "prefill_load_scale 3 makes the costs 34, 20, 15"


def test_example_temperature_samples_with_one_draw():
    for u, expected in ((0.0, 0), (0.1, 0), (0.5, 1), (0.9, 2), (0.9999, 2)):
        rng = Script(u)
        got = select_worker(WORKERS, 160, 16, temperature=1.0, rng=rng)
        assert got == expected, f"u = {u}: the first worker whose cumulative probability reaches u"
        assert rng.calls == [("random",)], "temperature > 0: exactly one rng.random() and nothing else"


def test_example_ties_are_drawn_by_reservoir_sampling():
    tied = [Worker(1, 4), Worker(1, 4), Worker(0, 9), Worker(1, 4)]       # costs 7, 7, 13, 7
    rng = Script(0, 1)
    got = select_worker(tied, 64, 16, rng=rng)
    assert rng.calls == [("randrange", 2), ("randrange", 3)], \
        "the 2nd and the 3rd worker at the lowest cost each draw rng.randrange(k), k = 2, 3"
    assert got == 1, "randrange(2) == 0 takes worker 1; randrange(3) == 1 keeps it"


def test_cost_formula():
    cases = [(160, 16, Worker(2, 10), 1.0, 1.0), (100, 16, Worker(3, 0), 1.0, 1.0),
             (100, 16, Worker(0, 7), 1.0, 2.5), (17, 16, Worker(1, 1), 1.0, 1.0), (33, 4, Worker(2, 3), 1.0, 0.0),
             (64, 16, Worker(4, 2), 1.0, 1.0), (64, 16, Worker(3, 2, 40), 0.5, 1.0), (5, 1, Worker(2, 0, 3), 0.25, 0.5),
             (48, 16, Worker(3, 1, 100), 0.0, 2.0)]
    for isl, bs, w, credit, scale in cases:
        got = worker_cost(w, isl, bs, overlap_score_credit=credit, prefill_load_scale=scale)
        expected = float(cost_of(w, isl, bs, credit, scale))
        assert math.isclose(got, expected, rel_tol=1e-12), \
            f"{w}, isl {isl}, block size {bs}, credit {credit}, scale {scale}: expected {expected}, got {got}"


def test_cost_rules_one_by_one():
    got = worker_cost(Worker(0, 0), 100, 16)
    assert got == 6.25, "prefill blocks are a fraction (100 / 16), not 100 // 16"
    got = worker_cost(Worker(1, 3), 64, 16, prefill_load_scale=2.0)
    assert got == 9.0, "prefill_load_scale multiplies the prefill term only: 2 x (4 - 1) + 3"
    got = worker_cost(Worker(1, 3, active_prefill_tokens=32), 64, 16)
    assert got == 8.0, "the worker's queued prefill tokens count as prompt blocks: (2 + 4 - 1) + 3"
    got = worker_cost(Worker(2, 3), 64, 16, overlap_score_credit=0.5)
    assert got == 6.0, "the credit multiplies the cached blocks only: (4 - 0.5 x 2) + 3"
    got = worker_cost(Worker(2, 3), 64, 16, overlap_score_credit=0.0)
    assert got == 7.0, "credit 0 ignores the cache: 4 + 3"
    got = worker_cost(Worker(1, 3), 64, 16)
    assert got == 6.0, "the defaults are a credit of 1 and a scale of 1"


def test_no_tie_no_draw():
    rng = Script()
    got = select_worker(WORKERS, 160, 16, temperature=0.0, rng=rng)
    assert got == 1, "temperature 0: the lowest cost"
    assert rng.calls == [], "one worker at the lowest cost: the rng is not called"
    rng = Script()
    got = select_worker([Worker(0, 3)], 16, 16, rng=rng)
    assert got == 0, "one worker: it is the choice"
    assert rng.calls == [], "one worker at temperature 0: the rng is not called"
    rng = Script()
    got = select_worker([Worker(0, 9), Worker(0, 8), Worker(0, 7)], 16, 16, rng=rng)
    assert got == 2, "each cheaper worker becomes the choice"
    assert rng.calls == [], "falling costs are not ties: the rng is not called"


def test_reservoir_draws_exactly():
    four = [Worker(0, 2)] * 4
    for answers, expected in (((1, 1, 1), 0), ((0, 0, 0), 3), ((0, 1, 2), 1), ((1, 0, 1), 2), ((1, 2, 0), 3)):
        rng = Script(*answers)
        got = select_worker(four, 16, 16, rng=rng)
        assert rng.calls == [("randrange", 2), ("randrange", 3), ("randrange", 4)], \
            "four workers tied: randrange(2), randrange(3), randrange(4), in index order"
        assert got == expected, f"answers {answers}: a tied worker is taken when its draw is 0"
    rng = Script(0, 1)
    got = select_worker([Worker(0, 7), Worker(0, 7), Worker(0, 5), Worker(0, 5)], 16, 16, rng=rng)
    assert rng.calls == [("randrange", 2), ("randrange", 2)], \
        "a cheaper worker starts a new count: the tie after it draws randrange(2), not randrange(3)"
    assert got == 2, "worker 2 is cheaper than the tie before it; worker 3's draw of 1 keeps it"
    rng = Script(0)
    got = select_worker([Worker(0, 5), Worker(0, 7), Worker(0, 5)], 16, 16, rng=rng)
    assert rng.calls == [("randrange", 2)], "a dearer worker in between does not end the tie"
    assert got == 2, "randrange(2) == 0 takes the second worker at the lowest cost"


def test_ties_are_uniform():
    rng = random.Random(72)
    workers = [Worker(1, 4), Worker(0, 9), Worker(1, 4), Worker(1, 4), Worker(2, 7)]    # 7, 13, 7, 7, 9
    counts = [0] * len(workers)
    for _ in range(1200):
        counts[select_worker(workers, 64, 16, rng=rng)] += 1
    assert counts[1] + counts[4] == 0, f"only the workers at the lowest cost are chosen: {counts}"
    for i in (0, 2, 3):
        share = counts[i] / 1200
        assert abs(share - 1 / 3) < 0.05, f"each of three tied workers about 1/3 of the time (sd 0.014): {counts}"


def test_probabilities_are_normalised_by_the_spread():
    for costs in ([18.0, 10.0, 11.0], [10.0, 11.0], [10.0, 1000.0], [3.0, 3.0, 7.0, 5.0], [0.0, 0.5, 0.25, 0.5]):
        for t in (0.1, 0.5, 1.0, 3.0):
            got = selection_probabilities(costs, t)
            want = probs_of(costs, t)
            assert len(got) == len(costs), "one probability per cost"
            assert math.isclose(sum(got), 1.0, rel_tol=1e-9), f"{costs} at T = {t}: the probabilities sum to 1"
            for g, w in zip(got, want):
                assert math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-15), \
                    f"{costs} at T = {t}: p_i proportional to exp(-(c_i - min) / (spread x T)); want {want}, got {got}"
    a, b = selection_probabilities([10.0, 11.0], 1.0)
    assert math.isclose(a / b, math.e), "T = 1: the cheapest weighs e times the dearest (spread 1)"
    a, b = selection_probabilities([10.0, 1000.0], 1.0)
    assert math.isclose(a / b, math.e), "T = 1: the cheapest weighs e times the dearest at any spread (here 990)"
    got = selection_probabilities([4.0, 4.0, 4.0, 4.0], 0.5)
    assert got == [0.25] * 4, "equal costs: uniform"
    got = selection_probabilities([2.0], 1.0)
    assert got == [1.0], "one cost: probability 1"
    big = selection_probabilities([5000.0, 5001.0], 0.02)       # costs in the thousands, a low temperature
    assert math.isclose(big[0], 1 / (1 + math.exp(-50))), "shift by the minimum before exp(): exp(-50) is still > 0"
    assert big[1] > 0, "shift by the minimum before exp(): the dearer worker keeps a probability above 0"
    low, high = selection_probabilities([1.0, 2.0, 3.0], 0.2), selection_probabilities([1.0, 2.0, 3.0], 5.0)
    assert low[0] > high[0], "a lower temperature gives the cheapest more"
    assert low[2] < high[2], "a lower temperature gives the dearest less"


def test_sampling_walks_the_cumulative_probabilities():
    equal = [Worker(1, 2), Worker(1, 2)]
    got = select_worker(equal, 64, 16, temperature=1.0, rng=Script(0.5))
    assert got == 0, "u == cumulative picks that worker"
    got = select_worker(equal, 64, 16, temperature=1.0, rng=Script(0.5000001))
    assert got == 1, "u above the first cumulative probability goes on"
    got = select_worker(equal, 64, 16, temperature=1.0, rng=Script(0.4999999))
    assert got == 0, "u below the first cumulative probability stops there"
    four = [Worker(1, 2)] * 4
    got = [select_worker(four, 64, 16, temperature=2.0, rng=Script(u)) for u in (0.0, 0.25, 0.26, 0.5, 0.74, 0.76, 0.999)]
    assert got == [0, 0, 1, 1, 2, 3, 3], "four equal costs: quarters of [0, 1]"
    ten = [Worker(1, 2)] * 10                                  # ten times 0.1 sums to just below 1.0
    got = select_worker(ten, 64, 16, temperature=1.0, rng=Script(1.0))
    assert got == 9, "rounding left no cumulative sum >= u: the last worker"
    one = Script(0.7)
    got = select_worker([Worker(0, 0)], 16, 16, temperature=1.0, rng=one)
    assert got == 0, "one worker at T > 0: it is the choice"
    assert one.calls == [("random",)], "T > 0 draws once even for one worker"
    costs = [float(cost_of(w, 160, 16)) for w in WORKERS]
    for u in [i / 50 for i in range(50)] + [0.9999999999]:
        got = select_worker(WORKERS, 160, 16, temperature=0.7, rng=Script(u))
        assert got == pick(costs, 0.7, u), f"u = {u}: the first worker whose cumulative probability reaches u"


def test_sampling_follows_a_seeded_rng():
    rng = random.Random(72)
    for _ in range(300):
        n = rng.randint(1, 6)
        bs = rng.choice([1, 4, 16])
        isl = rng.randint(1, 200)
        workers = [Worker(rng.randint(0, isl // bs), rng.randint(0, 30), rng.choice([0, 0, rng.randint(0, 99)]))
                   for _ in range(n)]
        credit, scale = rng.choice([0, 0.5, 1]), rng.choice([0.0, 0.5, 1.0, 2.0])
        t = rng.choice([0.0, 0.0, 0.05, 0.5, 1.0, 4.0])
        # exact in binary floating point: block sizes are powers of 2, credits and scales halves
        costs = [scale * (w.active_prefill_tokens + isl - credit * w.overlap_blocks * bs) / bs + w.decode_blocks
                 for w in workers]
        seed = rng.random()
        got = select_worker(workers, isl, bs, overlap_score_credit=credit, prefill_load_scale=scale,
                            temperature=t, rng=random.Random(seed))
        if t == 0:
            expected = reservoir(costs, random.Random(seed))
        else:
            expected = pick(costs, t, random.Random(seed).random())
        assert got == expected, f"{workers}, isl {isl}, block size {bs}, credit {credit}, scale {scale}, T {t}: costs {costs}"


def test_frequencies_match_the_probabilities():
    rng = random.Random(7)
    counts = [0, 0, 0]
    for _ in range(3000):
        counts[select_worker(WORKERS, 160, 16, temperature=0.5, rng=rng)] += 1
    want = probs_of([18, 10, 11], 0.5)
    for c, p in zip(counts, want):
        assert abs(c / 3000 - p) < 0.04, f"3,000 draws at T = 0.5 follow the probabilities {want}: {counts}"


def test_bad_input():
    cases = {"no workers": lambda: select_worker([], 16, 16, rng=Script()),
             "isl_tokens 0": lambda: select_worker(WORKERS, 0, 16, rng=Script()),
             "isl_tokens 0, nothing cached": lambda: select_worker([Worker(0, 3)], 0, 16, rng=Script()),
             "isl_tokens -16, nothing cached": lambda: select_worker([Worker(0, 3)], -16, 16, rng=Script()),
             "block_size 0": lambda: select_worker(WORKERS, 16, 0, rng=Script()),
             "temperature -0.1": lambda: select_worker(WORKERS, 16, 16, temperature=-0.1, rng=Script(0.5)),
             "temperature -2": lambda: select_worker(WORKERS, 16, 16, temperature=-2.0, rng=Script(0.5)),
             "temperature inf": lambda: select_worker(WORKERS, 16, 16, temperature=math.inf, rng=Script(0.5)),
             "temperature nan": lambda: select_worker(WORKERS, 16, 16, temperature=math.nan, rng=Script(0.5)),
             "credit -0.5": lambda: select_worker(WORKERS, 160, 16, overlap_score_credit=-0.5, rng=Script()),
             "credit 1.5": lambda: select_worker(WORKERS, 160, 16, overlap_score_credit=1.5, rng=Script()),
             "scale -1": lambda: select_worker(WORKERS, 160, 16, prefill_load_scale=-1.0, rng=Script()),
             "overlap 11 of 10 blocks": lambda: select_worker(WORKERS + [Worker(11, 0)], 160, 16, rng=Script()),
             "overlap 2 of 1 full block (31 tokens)": lambda: select_worker([Worker(2, 0)], 31, 16, rng=Script()),
             "overlap -1": lambda: select_worker([Worker(-1, 0)], 16, 16, rng=Script())}
    for name, call in cases.items():
        assert raises(ValueError, call), f"select_worker with {name} must raise ValueError"
    edges = {"credit 0": dict(overlap_score_credit=0.0), "credit 1": dict(overlap_score_credit=1.0),
             "scale 0": dict(prefill_load_scale=0.0)}
    for name, options in edges.items():
        got = select_worker([Worker(0, 3), Worker(1, 3)], 32, 16, rng=Script(0), **options)
        assert got in (0, 1), f"select_worker with {name} is valid input"
    got = select_worker([Worker(2, 0), Worker(0, 5)], 32, 16, rng=Script())
    assert got == 0, "an overlap of all the prompt's full blocks (2 of 32 tokens) is valid"
    got = select_worker([Worker(0, 1)], 1, 1, rng=Script())
    assert got == 0, "isl_tokens 1 and block_size 1 are valid"


def test_selection_probabilities_bad_input():
    cases = {"no costs": lambda: selection_probabilities([], 1.0),
             "temperature 0": lambda: selection_probabilities([1.0, 2.0], 0.0),
             "temperature -1": lambda: selection_probabilities([1.0, 2.0], -1.0),
             "temperature inf": lambda: selection_probabilities([1.0, 2.0], math.inf),
             "temperature nan": lambda: selection_probabilities([1.0, 2.0], math.nan)}
    for name, call in cases.items():
        assert raises(ValueError, call), f"selection_probabilities with {name} must raise ValueError"
