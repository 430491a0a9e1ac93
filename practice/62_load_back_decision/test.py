"""Tests for exercise 62: the load-back decision is all or nothing, needs a minimum length, takes
free pages first, then evicts the least recently used unlocked entries that are not part of the
request's own hit, only as many as needed, and none when it does not load.

The random test compares with a reference written here another way: a simulated device pool
(free pages, then evictions one at a time, rolled back when the load cannot happen).
"""

import random

import pytest
from solution_under_test import Entry, LoadPlan, plan_load_back


def reference(device_hit, host_hit, page_size, min_tokens, free_pages, cached):
    pages_to_load = host_hit // page_size
    if pages_to_load * page_size < min_tokens:
        return (device_hit, 0, [])
    pool = {"free": free_pages}
    order = sorted(cached, key=lambda e: (e.last_access, e.name))
    evicted = []
    for entry in order:
        if pool["free"] >= pages_to_load:
            break
        if entry.lock_ref or entry.in_hit:
            continue
        pool["free"] += entry.pages
        evicted.append(entry.name)
    if pool["free"] < pages_to_load:          # roll back: nothing is evicted for a load that does not happen
        return (device_hit, 0, [])
    return (device_hit + pages_to_load * page_size, pages_to_load * page_size, evicted)


def plan(device_hit, host_hit, page_size=4, min_tokens=8, free_pages=0, cached=()):
    got = plan_load_back(device_hit, host_hit, page_size=page_size, min_tokens=min_tokens,
                         free_pages=free_pages, cached=list(cached))
    return tuple(got[:2]) + (list(got[2]),)


OTHERS = [Entry("old", 2, 1), Entry("mid", 3, 5), Entry("busy", 4, 0, lock_ref=1),
          Entry("own", 2, 0, in_hit=True), Entry("new", 2, 9)]


def test_example_free_pages_first_then_lru():
    assert plan(8, 16, free_pages=4, cached=OTHERS) == (24, 16, [])
    assert plan(8, 16, free_pages=1, cached=OTHERS) == (24, 16, ["old", "mid"])


def test_example_all_or_nothing():
    assert plan(8, 40, free_pages=1, cached=OTHERS) == (8, 0, []), "10 pages: 1 free + 7 evictable is short"


def test_the_result_is_a_load_plan():
    got = plan_load_back(0, 8, page_size=4, min_tokens=0, free_pages=2, cached=[])
    assert isinstance(got, LoadPlan) and got.load_tokens == 8 and got.prefix_tokens == 8 and got.evict == []


def test_minimum_length_counts_the_loaded_tokens_only():
    assert plan(64, 4, min_tokens=8, free_pages=10) == (64, 0, []), "4 host tokens < 8, whatever the device hit"
    assert plan(0, 8, min_tokens=8, free_pages=10) == (8, 8, []), "exactly the minimum loads"
    assert plan(0, 11, min_tokens=10, free_pages=10) == (0, 0, []), "11 tokens are 2 whole pages: 8 < 10"
    assert plan(0, 12, min_tokens=10, free_pages=10) == (12, 12, [])


def test_only_whole_pages_load():
    assert plan(4, 15, min_tokens=0, free_pages=10) == (16, 12, [])
    assert plan(4, 3, min_tokens=0, free_pages=10) == (4, 0, [])


def test_never_evicts_a_locked_entry_nor_the_requests_own_hit():
    assert plan(0, 36, free_pages=0, cached=OTHERS) == (0, 0, []), "9 pages; only old+mid+new = 7 may go"
    assert plan(0, 28, free_pages=0, cached=OTHERS) == (28, 28, ["old", "mid", "new"])


def test_evicts_only_what_is_needed():
    cached = [Entry("a", 2, 1), Entry("b", 2, 2), Entry("c", 2, 3)]
    assert plan(0, 16, free_pages=2, cached=cached) == (16, 16, ["a"])
    assert plan(0, 20, free_pages=2, cached=cached) == (20, 20, ["a", "b"])
    assert plan(0, 8, free_pages=2, cached=cached) == (8, 8, []), "exactly enough free pages"


def test_ties_go_by_name():
    cached = [Entry("y", 1, 3), Entry("x", 1, 3), Entry("z", 1, 2)]
    assert plan(0, 8, free_pages=0, cached=cached) == (8, 8, ["z", "x"])


def test_bad_input_raises():
    for kwargs in (dict(page_size=0), dict(min_tokens=-1), dict(free_pages=-1)):
        with pytest.raises(ValueError):
            plan(0, 8, **kwargs)
    with pytest.raises(ValueError):
        plan(-4, 8)
    with pytest.raises(ValueError):
        plan(0, -1)
    with pytest.raises(ValueError):
        plan(6, 8), "the device hit is whole pages"


def test_random_against_a_simulated_pool():
    rng = random.Random(62)
    for _ in range(3000):
        page_size = rng.choice([1, 2, 4])
        cached = [Entry(f"e{i}", rng.randint(1, 4), rng.randint(0, 6), lock_ref=rng.choice([0, 0, 0, 1, 2]),
                        in_hit=rng.random() < 0.2) for i in range(rng.randint(0, 6))]
        rng.shuffle(cached)
        args = (rng.randint(0, 5) * page_size, rng.randint(0, 24), page_size, rng.randint(0, 12),
                rng.randint(0, 6), cached)
        got = plan_load_back(args[0], args[1], page_size=page_size, min_tokens=args[3], free_pages=args[4],
                             cached=list(cached))
        assert (got.prefix_tokens, got.load_tokens, list(got.evict)) == reference(*args), args
