"""Tests for exercise 51: LPM order, the FCFS fallback and the passed-over bound."""

import random

from solution_under_test import LPMScheduler


def _scheduler(lengths, **kwargs):
    """A scheduler whose match_len looks the request id up in `lengths` (prompt = [id])."""
    return LPMScheduler(lambda prompt: lengths[prompt[0]], **kwargs)


def test_example_longest_match_first():
    lengths = {"a": 0, "b": 5, "c": 3}
    sched = _scheduler(lengths)
    for rid in "abc":
        sched.add(rid, [rid])
    got = sched.schedule(2)
    assert got == ["b", "c"], "the longest cached prefixes first"
    assert sched.waiting == ["a"], "the chosen requests leave the queue"
    got = sched.schedule(2)
    assert got == ["a"], "fewer waiting than max_requests: all of them"
    got = sched.schedule(2)
    assert got == [], "an empty queue schedules nothing"


def test_example_ties_keep_arrival_order():
    lengths = {"a": 4, "b": 7, "c": 4, "d": 7}
    sched = _scheduler(lengths)
    for rid in "abcd":
        sched.add(rid, [rid])
    got = sched.schedule(4)
    assert got == ["b", "d", "a", "c"], "equal matches keep their arrival order"


def test_example_the_statements_worked_example():
    cached = {"a": 0, "b": 5, "c": 3, "d": 9}
    sched = LPMScheduler(lambda p: cached[chr(p[0])], max_passed_over=2)
    for rid in "abc":
        sched.add(rid, [ord(rid)])
    got = sched.schedule(2)
    assert got == ["b", "c"], "b (5) and c (3) overtake a (0)"
    sched.add("d", [ord("d")])
    got = sched.schedule(1)
    assert got == ["d"], "a was passed over once (one round, however many overtook it): LPM still decides"
    sched.add("e", [ord("d")])
    got = sched.schedule(1)
    assert got == ["a"], "a has been passed over in two rounds = max_passed_over: it goes first"
    assert sched.waiting == ["e"], "e is left"


def test_passed_over_once_per_round_however_many_overtake():
    lengths = {"old": 0, "n0": 9, "n1": 9, "n2": 9, "n3": 9, "n4": 9}
    sched = _scheduler(lengths, max_passed_over=2)
    sched.add("old", ["old"])
    for rid in ("n0", "n1", "n2"):
        sched.add(rid, [rid])
    got = sched.schedule(3)
    assert got == ["n0", "n1", "n2"], "three later requests overtake old in one round"
    sched.add("n3", ["n3"])
    got = sched.schedule(1)
    assert got == ["n3"], "old was passed over in one round, not three: below max_passed_over 2, LPM decides"
    sched.add("n4", ["n4"])
    got = sched.schedule(1)
    assert got == ["old"], "the second round that passed old over reaches max_passed_over 2: old goes first"


def test_long_queue_falls_back_to_fcfs():
    lengths = {"a": 0, "b": 1, "c": 2, "d": 3}
    sched = _scheduler(lengths, fcfs_threshold=3)
    for rid in "abcd":
        sched.add(rid, [rid])
    got = sched.schedule(2)
    assert got == ["a", "b"], "4 waiting > threshold 3: arrival order"
    got = sched.schedule(1)
    assert got == ["d"], "2 waiting: LPM again"


def test_threshold_itself_still_uses_lpm():
    lengths = {"a": 0, "b": 1, "c": 2}
    sched = _scheduler(lengths, fcfs_threshold=3)
    for rid in "abc":
        sched.add(rid, [rid])
    got = sched.schedule(1)
    assert got == ["c"], "exactly 3 waiting is not more than the threshold"


def test_fallback_does_not_compute_matches():
    calls = []

    def match_len(prompt):
        calls.append(prompt[0])
        return 0

    sched = LPMScheduler(match_len, fcfs_threshold=2)
    for rid in "abc":
        sched.add(rid, [rid])
    sched.schedule(1)
    assert calls == [], "with a long queue, match_len must not be called"
    sched.schedule(1)
    assert sorted(calls) == ["b", "c"], "2 waiting: LPM matches each waiting prompt"


def test_matches_are_recomputed_every_round():
    lengths = {"a": 1, "b": 2, "c": 3}
    sched = _scheduler(lengths)
    for rid in "abc":
        sched.add(rid, [rid])
    got = sched.schedule(1)
    assert got == ["c"], "c has the longest match"
    lengths["a"] = 10                     # c's prefix is now cached, and a shares it
    got = sched.schedule(1)
    assert got == ["a"], "match_len is called afresh every round: a's match grew to 10"


def test_starving_request_goes_first():
    lengths = {"old": 0}
    sched = _scheduler(lengths, max_passed_over=2)
    sched.add("old", ["old"])
    picked = []
    for i in range(4):
        rid = f"new{i}"
        lengths[rid] = 100
        sched.add(rid, [rid])
        picked.append(sched.schedule(1))
    assert picked[:3] == [["new0"], ["new1"], ["old"]], "old goes first once passed over max_passed_over (2) times"


def test_passed_over_is_counted_only_when_overtaken():
    lengths = {"a": 5, "b": 1, "c": 9}
    sched = _scheduler(lengths, max_passed_over=1)
    sched.add("a", ["a"])
    sched.add("b", ["b"])
    got = sched.schedule(1)
    assert got == ["a"], "a arrived first: b was not overtaken"
    sched.add("c", ["c"])
    got = sched.schedule(1)
    assert got == ["c"], "b has not been passed over yet, so LPM decides"
    got = sched.schedule(1)
    assert got == ["b"], "b is all that is left"


def test_starving_requests_keep_arrival_order():
    lengths = {"a": 0, "b": 0, "x": 5, "y": 5}
    sched = _scheduler(lengths, max_passed_over=1)
    for rid in "abx":
        sched.add(rid, [rid])
    got = sched.schedule(1)
    assert got == ["x"], "x has the longest match; a and b are both passed over once"
    sched.add("y", ["y"])
    got = sched.schedule(3)
    assert got == ["a", "b", "y"], "the requests passed over max_passed_over times go first, in arrival order"


def test_random_traffic_against_a_model_and_the_bound():
    """The test keeps its own passed-over counts (one per round in which a later arrival was
    chosen) and derives each round's order from them; it also checks the bound."""
    rng = random.Random(106)
    for _trial in range(40):
        bound = rng.randint(0, 4)
        threshold = rng.choice([3, 8, 128])
        lengths = {}
        sched = _scheduler(lengths, max_passed_over=bound, fcfs_threshold=threshold)
        arrival, passed, served = {}, {}, []
        next_id = 0
        for _step in range(60):
            for _ in range(rng.randint(0, 3)):
                rid = f"r{next_id}"
                lengths[rid] = rng.randint(0, 20)
                arrival[rid], passed[rid] = next_id, 0
                next_id += 1
                sched.add(rid, [rid])
            for rid in lengths:
                lengths[rid] = max(0, lengths[rid] + rng.randint(-3, 3))
            before = sched.waiting
            assert before == sorted(before, key=arrival.get), "waiting is in arrival order"
            k = rng.randint(1, 3)
            if len(before) > threshold:
                order = before
            else:
                due = [r for r in before if passed[r] >= bound]
                order = due + sorted((r for r in before if passed[r] < bound), key=lambda r: (-lengths[r], arrival[r]))
            chosen = sched.schedule(k)
            assert len(set(chosen)) == len(chosen), "no request is chosen twice in a round"
            assert set(chosen) <= set(before), "only waiting requests are chosen"
            assert chosen == order[:k], (f"passed over {dict((r, passed[r]) for r in before)} (max {bound}), "
                                         f"matches {dict((r, lengths[r]) for r in before)}, fcfs above {threshold}")
            served += chosen
            latest = max((arrival[r] for r in chosen), default=-1)
            for rid in sched.waiting:
                passed[rid] += arrival[rid] < latest
                assert passed[rid] <= bound, "a request was passed over more than max_passed_over times"
        while sched.waiting:
            served += sched.schedule(3)
        assert sorted(served) == sorted(arrival), "every request is served exactly once"


def test_zero_requests_changes_nothing_and_negative_is_an_error():
    scheduler = _scheduler({0: 5, 1: 9}, max_passed_over=1)
    scheduler.add("a", [0])
    scheduler.add("b", [1])
    got = scheduler.schedule(0)
    assert got == [], "schedule(0) chooses nothing"
    assert scheduler.waiting == ["a", "b"], "schedule(0) changes nothing"
    got = scheduler.schedule(1)
    assert got == ["b"], "a was not passed over by the empty round"
    try:
        scheduler.schedule(-1)
    except ValueError:
        assert scheduler.waiting == ["a"], "a rejected schedule(-1) changes nothing"
    else:
        raise AssertionError("schedule(-1) should raise ValueError")
