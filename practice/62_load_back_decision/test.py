"""Tests for exercise 62: the load-back decision of SGLang 0.5.9's HiRadixCache.load_back. All or
nothing, a minimum length, free pages first; when they are short, evict the least recently used
unlocked entries that are not part of the request's own hit until the evicted pages reach the whole
load, retry once, and keep the evictions when the retry fails.

The random test compares with a reference written here another way: a simulated device pool that
tries to allocate, evicts for the whole load when that fails, and tries again.
"""

import random

from solution_under_test import Entry, LoadPlan, plan_load_back


def reference(device_hit, host_hit, page_size, min_tokens, free_pages, cached):
    pages_to_load = host_hit // page_size
    if pages_to_load * page_size < min_tokens:
        return (device_hit, 0, [])
    pool = {"free": free_pages}

    def allocate(n):
        if pool["free"] < n:
            return False
        pool["free"] -= n
        return True

    if allocate(pages_to_load):
        return (device_hit + pages_to_load * page_size, pages_to_load * page_size, [])
    evicted, freed = [], 0
    for entry in sorted(cached, key=lambda e: (e.last_access, e.name)):
        if freed >= pages_to_load:
            break
        if entry.lock_ref or entry.in_hit:
            continue
        pool["free"] += entry.pages
        freed += entry.pages
        evicted.append(entry.name)
    if allocate(pages_to_load):
        return (device_hit + pages_to_load * page_size, pages_to_load * page_size, evicted)
    return (device_hit, 0, evicted)           # the retry failed: nothing loads, the evictions stay


def plan(device_hit, host_hit, page_size=4, min_tokens=8, free_pages=0, cached=()):
    got = plan_load_back(device_hit, host_hit, page_size=page_size, min_tokens=min_tokens,
                         free_pages=free_pages, cached=list(cached))
    return tuple(got[:2]) + (list(got[2]),)


def raises_value_error(call) -> bool:
    try:
        call()
    except ValueError:
        return True
    return False


OTHERS = [Entry("old", 2, 1), Entry("mid", 3, 5), Entry("busy", 4, 0, lock_ref=1),
          Entry("own", 2, 0, in_hit=True), Entry("new", 2, 9)]


def test_example_free_pages_first_then_lru_for_the_whole_load():
    got = plan(8, 16, free_pages=4, cached=OTHERS)
    assert got == (24, 16, []), "4 pages to load, 4 free: load, evict nothing"
    got = plan(8, 16, free_pages=2, cached=OTHERS)
    assert got == (24, 16, ["old", "mid"]), \
        "2 of 4 pages free: evict least recently used first until the evicted pages reach the whole load (4)"


def test_example_a_failed_retry_keeps_its_evictions():
    got = plan(8, 40, free_pages=1, cached=OTHERS)
    assert got == (8, 0, ["old", "mid", "new"]), \
        "10 pages: 1 free + 7 evictable is short; nothing loads and the evictions are not undone"


def test_the_result_is_a_load_plan():
    got = plan_load_back(0, 8, page_size=4, min_tokens=0, free_pages=2, cached=[])
    assert isinstance(got, LoadPlan), "plan_load_back returns a LoadPlan"
    assert got == LoadPlan(8, 8, []), "LoadPlan(prefix_tokens, load_tokens, evict), in this order"


def test_minimum_length_counts_the_loaded_tokens_only():
    got = plan(64, 4, min_tokens=8, free_pages=10)
    assert got == (64, 0, []), "4 host tokens < 8, whatever the device hit"
    got = plan(0, 8, min_tokens=8, free_pages=10)
    assert got == (8, 8, []), "exactly the minimum loads"
    got = plan(0, 11, min_tokens=10, free_pages=10)
    assert got == (0, 0, []), "11 tokens are 2 whole pages: 8 < 10"
    got = plan(0, 12, min_tokens=10, free_pages=10)
    assert got == (12, 12, []), "12 tokens are 3 whole pages: 12 >= 10"


def test_under_the_minimum_nothing_is_evicted():
    got = plan(0, 4, min_tokens=8, free_pages=0, cached=OTHERS)
    assert got == (0, 0, []), "a load under the minimum is skipped before any eviction"


def test_only_whole_pages_load():
    got = plan(4, 15, min_tokens=0, free_pages=10)
    assert got == (16, 12, []), "15 host tokens are 3 whole pages of 4"
    got = plan(4, 3, min_tokens=0, free_pages=10)
    assert got == (4, 0, []), "3 host tokens are no whole page"


def test_never_evicts_a_locked_entry_nor_the_requests_own_hit():
    got = plan(0, 36, free_pages=0, cached=OTHERS)
    assert got == (0, 0, ["old", "mid", "new"]), "9 pages; only old + mid + new = 7 may go, and they do"
    got = plan(0, 28, free_pages=0, cached=OTHERS)
    assert got == (28, 28, ["old", "mid", "new"]), "7 pages: old + mid + new are exactly enough"
    got = plan(0, 8, free_pages=0, cached=[Entry("busy", 4, 0, lock_ref=2), Entry("x", 2, 1)])
    assert got == (8, 8, ["x"]), "an entry with lock_ref > 0 is never evicted"
    got = plan(0, 8, free_pages=0, cached=[Entry("own", 4, 0, in_hit=True), Entry("x", 2, 1)])
    assert got == (8, 8, ["x"]), "the request's own hit (in_hit) is never evicted"


def test_evicts_for_the_whole_load_not_the_shortfall():
    cached = [Entry("a", 2, 1), Entry("b", 2, 2), Entry("c", 2, 3), Entry("d", 2, 4)]
    got = plan(0, 16, free_pages=2, cached=cached)
    assert got == (16, 16, ["a", "b"]), "4 pages to load, 2 free: evict 4 pages (a, b), not the 2 missing"
    got = plan(0, 20, free_pages=3, cached=cached)
    assert got == (20, 20, ["a", "b", "c"]), "5 pages to load, 3 free: evict until 5 or more (6)"
    got = plan(0, 8, free_pages=2, cached=cached)
    assert got == (8, 8, []), "exactly enough free pages: evict nothing"
    got = plan(0, 8, free_pages=1, cached=cached)
    assert got == (8, 8, ["a"]), "evicted pages equal to the load (2 of 2): stop there"


def test_the_retry_uses_free_and_evicted_pages():
    got = plan(0, 16, free_pages=3, cached=[Entry("a", 1, 1), Entry("busy", 9, 0, lock_ref=1)])
    assert got == (16, 16, ["a"]), "3 free + 1 evicted hold 4 pages: the retry loads"
    got = plan(0, 16, free_pages=2, cached=[Entry("a", 1, 1), Entry("busy", 9, 0, lock_ref=1)])
    assert got == (0, 0, ["a"]), "2 free + 1 evicted < 4 pages: nothing loads, a stays evicted"
    got = plan(0, 16, free_pages=3, cached=[])
    assert got == (0, 0, []), "nothing may be evicted and 3 < 4 pages: nothing loads"


def test_ties_go_by_name():
    cached = [Entry("y", 1, 3), Entry("x", 1, 3), Entry("z", 1, 2)]
    got = plan(0, 8, free_pages=0, cached=cached)
    assert got == (8, 8, ["z", "x"]), "least recently used first; at equal last_access the smaller name"


def test_bad_input_raises():
    cases = {"page_size 0": lambda: plan(0, 8, page_size=0), "min_tokens -1": lambda: plan(0, 8, min_tokens=-1),
             "free_pages -1": lambda: plan(0, 8, free_pages=-1), "device_hit -4": lambda: plan(-4, 8),
             "host_hit -1": lambda: plan(0, -1), "device_hit 6, not whole pages of 4": lambda: plan(6, 8)}
    for name, call in cases.items():
        assert raises_value_error(call), f"plan_load_back with {name} must raise ValueError"


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
        expected = reference(*args)
        assert (got.prefix_tokens, got.load_tokens, list(got.evict)) == expected, \
            f"device_hit, host_hit, page_size, min_tokens, free_pages, cached = {args}"
