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
    assert sched.schedule(2) == ["b", "c"]
    assert sched.waiting == ["a"]
    assert sched.schedule(2) == ["a"]
    assert sched.schedule(2) == []


def test_example_ties_keep_arrival_order():
    lengths = {"a": 4, "b": 7, "c": 4, "d": 7}
    sched = _scheduler(lengths)
    for rid in "abcd":
        sched.add(rid, [rid])
    assert sched.schedule(4) == ["b", "d", "a", "c"]


def test_long_queue_falls_back_to_fcfs():
    lengths = {"a": 0, "b": 1, "c": 2, "d": 3}
    sched = _scheduler(lengths, fcfs_threshold=3)
    for rid in "abcd":
        sched.add(rid, [rid])
    assert sched.schedule(2) == ["a", "b"], "4 waiting > threshold 3: arrival order"
    assert sched.schedule(1) == ["d"], "2 waiting: LPM again"


def test_threshold_itself_still_uses_lpm():
    lengths = {"a": 0, "b": 1, "c": 2}
    sched = _scheduler(lengths, fcfs_threshold=3)
    for rid in "abc":
        sched.add(rid, [rid])
    assert sched.schedule(1) == ["c"], "exactly 3 waiting is not more than the threshold"


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
    assert sorted(calls) == ["b", "c"]


def test_matches_are_recomputed_every_round():
    lengths = {"a": 1, "b": 2, "c": 3}
    sched = _scheduler(lengths)
    for rid in "abc":
        sched.add(rid, [rid])
    assert sched.schedule(1) == ["c"]
    lengths["a"] = 10                     # c's prefix is now cached, and a shares it
    assert sched.schedule(1) == ["a"]


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
    assert picked[:3] == [["new0"], ["new1"], ["old"]]


def test_passed_over_is_counted_only_when_overtaken():
    lengths = {"a": 5, "b": 1, "c": 9}
    sched = _scheduler(lengths, max_passed_over=1)
    sched.add("a", ["a"])
    sched.add("b", ["b"])
    assert sched.schedule(1) == ["a"], "a arrived first: b was not overtaken"
    sched.add("c", ["c"])
    assert sched.schedule(1) == ["c"], "b has not been passed over yet, so LPM decides"
    assert sched.schedule(1) == ["b"]


def test_starving_requests_keep_arrival_order():
    lengths = {"a": 0, "b": 0, "x": 5, "y": 5}
    sched = _scheduler(lengths, max_passed_over=1)
    for rid in "abx":
        sched.add(rid, [rid])
    assert sched.schedule(1) == ["x"]     # a and b are both passed over once
    sched.add("y", ["y"])
    assert sched.schedule(3) == ["a", "b", "y"]


def test_random_traffic_never_exceeds_the_bound():
    rng = random.Random(106)
    for _trial in range(40):
        bound = rng.randint(0, 4)
        lengths = {}
        sched = _scheduler(lengths, max_passed_over=bound, fcfs_threshold=rng.choice([3, 8, 128]))
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
            chosen = sched.schedule(rng.randint(1, 3))
            assert len(set(chosen)) == len(chosen) and set(chosen) <= set(before)
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
    assert scheduler.schedule(0) == []
    assert scheduler.waiting == ["a", "b"]
    assert scheduler.schedule(1) == ["b"], "a was not passed over by the empty round"
    try:
        scheduler.schedule(-1)
    except ValueError:
        assert scheduler.waiting == ["a"]
    else:
        raise AssertionError("schedule(-1) should raise ValueError")
