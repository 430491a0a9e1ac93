"""Tests for exercise 52: LPM order with SGLang's in-batch prefix de-duplication (thresholds,
who is compared with whom, the order of the deprioritized, the FCFS fallback)."""

import random

from solution_under_test import lpm_order

SYSTEM = list(range(1000, 1040))            # a 40-token system prompt nobody has cached yet


def raises_value_error(call) -> bool:
    try:
        call()
    except ValueError:
        return True
    return False


def nothing_cached(tokens):
    return 0


def cached_lengths(table):
    """match_len from a table keyed by the first token of a prompt."""
    return lambda tokens: table[tokens[0]]


def test_example_siblings_wait_for_the_first():
    waiting = [("a", SYSTEM + [1, 2]), ("b", SYSTEM + [3]), ("x", [7] * 50), ("c", SYSTEM + [4, 4])]
    assert lpm_order(waiting, nothing_cached) == ["a", "x", "b", "c"], (
        "b and c share 40 tokens with a: they wait until a has put the system prompt in the cache")


def test_example_next_round_they_hit():
    table = {1000: 40, 7: 0}
    waiting = [("x", [7] * 50), ("b", SYSTEM + [3]), ("c", SYSTEM + [4, 4])]
    assert lpm_order(waiting, lambda t: table[t[0]]) == ["b", "c", "x"], (
        "with the system prompt cached, b and c have long matches: no check, LPM order")


def test_check_threshold_is_inclusive():
    prompt = list(range(60))
    for cached, deprioritized in ((31, True), (32, True), (33, False)):
        table = {0: cached, 500: 0}
        waiting = [("first", [500] + prompt), ("p", prompt), ("q", prompt)]
        got = lpm_order(waiting, lambda t, table=table: table[t[0]] if t[0] in table else 0)
        if deprioritized:
            assert got == ["p", "first", "q"], f"cached {cached} <= 32: q shares 60 tokens with p, it waits"
        else:
            assert got == ["p", "q", "first"], f"cached {cached} > 32: p and q are not checked, LPM order"


def test_deprioritize_threshold_is_inclusive():
    for shared, deprioritized in ((31, False), (32, True), (33, True)):
        a = list(range(shared)) + [-1, -1]
        b = list(range(shared)) + [-2]
        got = lpm_order([("a", a), ("b", b), ("z", [9])], nothing_cached)
        assert got == (["a", "z", "b"] if deprioritized else ["a", "b", "z"]), f"sharing {shared} tokens"


def test_custom_thresholds():
    waiting = [("a", [1, 2, 3, 9]), ("b", [1, 2, 3, 8]), ("c", [1, 2, 7]), ("d", [5])]
    assert lpm_order(waiting, nothing_cached, deprioritize_threshold=3) == ["a", "c", "d", "b"], \
        "deprioritize_threshold 3: b shares 3 tokens with a and waits; c shares 2 and is kept"
    assert lpm_order(waiting, nothing_cached, deprioritize_threshold=2) == ["a", "d", "b", "c"], \
        "deprioritize_threshold 2: b and c both share at least 2 tokens with a and wait"
    assert lpm_order(waiting, nothing_cached, deprioritize_threshold=5) == ["a", "b", "c", "d"], \
        "deprioritize_threshold 5: nobody shares 5 tokens, queue order"
    assert lpm_order(waiting, cached_lengths({1: 1, 5: 0}), deprioritize_threshold=2, check_threshold=0) == [
        "a", "b", "c", "d"], "cached length 1 > check_threshold 0: nobody is checked"


def test_check_threshold_zero_still_checks_uncached_requests():
    waiting = [("a", [1, 2, 3, 9]), ("b", [1, 2, 3, 8]), ("d", [5])]
    assert lpm_order(waiting, nothing_cached, deprioritize_threshold=3, check_threshold=0) == ["a", "d", "b"], (
        "nothing cached: 0 <= check_threshold 0, so b is checked and waits for a")


def test_small_deprioritize_thresholds():
    lengths = {1: 0, 2: 10, 3: 50}
    waiting = [("a", [1, 5]), ("b", [2, 6]), ("c", [3, 7])]

    def match(tokens):
        return lengths[tokens[0]]

    assert lpm_order(waiting, match, deprioritize_threshold=1) == ["c", "b", "a"], (
        "a and b share no token: both kept, LPM order")
    assert lpm_order(waiting + [("d", [2, 9])], match, deprioritize_threshold=1) == ["c", "b", "a", "d"], \
        "d shares 1 token with the kept b: it waits"
    assert lpm_order(waiting, match, deprioritize_threshold=0) == ["c", "a", "b"], (
        "sharing >= 0 tokens always holds: every checked request is deprioritized, the first one too")


def test_fcfs_threshold_zero():
    calls = []
    waiting = [("a", [1]), ("b", [2])]
    assert lpm_order(waiting, lambda t: calls.append(t) or t[0], fcfs_threshold=0) == ["a", "b"], \
        "fcfs_threshold 0: any waiting request is more than 0, so queue order"
    assert calls == [], "any waiting request is more than 0: match_len is not called"
    assert lpm_order([], lambda t: 0, fcfs_threshold=0) == [], "an empty queue has an empty order"


def test_negative_check_threshold_disables_the_check():
    waiting = [("a", SYSTEM), ("b", SYSTEM), ("c", SYSTEM + [1])]
    assert lpm_order(waiting, nothing_cached, check_threshold=-1) == ["a", "b", "c"], \
        "check_threshold -1: no cached length is <= -1, so nobody is checked"


def test_long_matches_are_neither_checked_nor_compared_against():
    table = {1000: 35, 1: 0, 2: 0}
    waiting = [("long", SYSTEM + [5]), ("s1", [1] + SYSTEM), ("s2", [1] + SYSTEM + [6]), ("s3", [2])]
    got = lpm_order(waiting, cached_lengths(table))
    assert got == ["long", "s1", "s3", "s2"]
    lengths = {5: 35, 6: 0, 9: 0}
    waiting = [("long", SYSTEM + [5]), ("short", SYSTEM + [6]), ("z", [9])]
    assert lpm_order(waiting, lambda t: lengths[t[-1]]) == ["long", "short", "z"], (
        "long's prompt does not join the comparison, so short is not deprioritized")


def test_only_earlier_requests_count():
    lengths = {0: 0, 2: 10, 5: 0}
    waiting = [("a", [1] * 40 + [0]), ("b", [1] * 40 + [2]), ("z", [5])]
    assert lpm_order(waiting, lambda t: lengths[t[-1]]) == ["a", "z", "b"], "b comes after a: b waits"
    waiting = [waiting[1], waiting[0], waiting[2]]
    assert lpm_order(waiting, lambda t: lengths[t[-1]]) == ["b", "z", "a"], "a comes after b: a waits"
    waiting = [("c", [5] * 10), ("a", [1] * 40), ("b", [1] * 39 + [2])]
    assert lpm_order(waiting, nothing_cached) == ["c", "a", "b"], "b shares 39 tokens only"


def test_compared_with_every_kept_prompt():
    waiting = [("a", [1] * 40), ("b", [2] * 40), ("c", [3] * 40), ("d", [2] * 33 + [0]), ("e", [4])]
    assert lpm_order(waiting, nothing_cached) == ["a", "b", "c", "e", "d"], "d shares 33 with b, the 2nd kept"
    assert lpm_order(waiting, nothing_cached, deprioritize_threshold=34) == ["a", "b", "c", "d", "e"], \
        "d shares 33 < 34 tokens with b: kept"
    waiting.insert(4, ("f", [3] * 41))
    assert lpm_order(waiting, nothing_cached) == ["a", "b", "c", "e", "d", "f"], "f shares 40 with c, the last kept"


def test_deprioritized_go_after_every_other_request():
    table = {1000: 30, 9: 0, 8: 5}
    waiting = [("a", SYSTEM + [1]), ("b", SYSTEM + [2]), ("n", [9]), ("m", [8])]
    assert lpm_order(waiting, cached_lengths(table)) == ["a", "m", "n", "b"], (
        "b (cached 30) waits behind n (cached 0): it would recompute what a computes")


def test_lpm_order_longest_first_ties_in_queue_order():
    table = {1: 10, 2: 50, 3: 10, 4: 50, 5: 0}
    waiting = [(f"r{k}", [k]) for k in (1, 2, 3, 4, 5)]
    assert lpm_order(waiting, cached_lengths(table)) == ["r2", "r4", "r1", "r3", "r5"], \
        "longest cached length first, equal lengths in queue order"


def test_deprioritized_keep_queue_order_among_themselves():
    table = {1: 0, 2: 20, 3: 10}
    waiting = [("a", [1] + SYSTEM), ("b", [2] + SYSTEM), ("c", [3]), ("d", [1] + SYSTEM + [5]), ("e", [2] + SYSTEM)]
    got = lpm_order(waiting, cached_lengths(table))
    assert got == ["b", "c", "a", "d", "e"], "the deprioritized (d, then e) come last, in queue order"


def test_long_queue_falls_back_to_fcfs_without_matching():
    calls = []

    def match_len(tokens):
        calls.append(tokens[0])
        return 100 * tokens[0]

    waiting = [(f"r{k}", [k]) for k in range(5)]
    assert lpm_order(waiting, match_len, fcfs_threshold=4) == ["r0", "r1", "r2", "r3", "r4"], \
        "5 waiting > fcfs_threshold 4: queue order"
    assert calls == [], "with more than fcfs_threshold waiting, match_len is not called"
    assert lpm_order(waiting, match_len, fcfs_threshold=5) == ["r4", "r3", "r2", "r1", "r0"], "5 is not more than 5"
    assert sorted(calls) == [0, 1, 2, 3, 4], "match_len once per request"
    assert lpm_order([], match_len) == [], "an empty queue has an empty order"


def test_default_fcfs_threshold_is_128():
    waiting = [(f"r{k}", [k]) for k in range(129)]
    assert lpm_order(waiting, lambda t: t[0]) == [rid for rid, _ in waiting], "129 > 128 waiting: queue order"
    assert lpm_order(waiting[:128], lambda t: t[0])[0] == "r127", "128 waiting is not more than 128: LPM order"


def test_bad_input():
    assert raises_value_error(lambda: lpm_order([("a", [1]), ("a", [2])], nothing_cached)), "id listed twice"
    for fcfs in (0, 1):
        assert raises_value_error(lambda fcfs=fcfs: lpm_order([("a", [1]), ("a", [2])], nothing_cached,
                                                              fcfs_threshold=fcfs)), f"id listed twice, fcfs_threshold={fcfs}"
    for bad in (-1, 2.5, True, "4"):
        assert raises_value_error(lambda bad=bad: lpm_order([("a", [1])], nothing_cached, fcfs_threshold=bad)), \
            f"fcfs_threshold={bad!r} is not an int >= 0 (a bool is not)"


def test_input_is_not_changed():
    waiting = [("a", SYSTEM + [1]), ("b", SYSTEM + [2]), ("c", [3])]
    copy = [(rid, list(tokens)) for rid, tokens in waiting]
    lpm_order(waiting, nothing_cached)
    assert waiting == copy, "waiting is not changed"


def reference(waiting, match_len, check, dep, fcfs):
    """The same rules, written as a trie walk over the kept prompts."""
    if len(waiting) > fcfs:
        return [rid for rid, _ in waiting]
    trie, lengths, late = {}, {}, []
    for rid, tokens in waiting:
        lengths[rid] = match_len(tokens)
        if lengths[rid] > check:
            continue
        node, depth = trie, 0
        for t in tokens:
            if t not in node:
                break
            node, depth = node[t], depth + 1
        if depth >= dep:
            late.append(rid)
            continue
        node = trie
        for t in tokens:
            node = node.setdefault(t, {})
    early = [rid for rid, _ in waiting if rid not in late]
    buckets = {}
    for rid in early:
        buckets.setdefault(lengths[rid], []).append(rid)
    return [rid for n in sorted(buckets, reverse=True) for rid in buckets[n]] + late


def test_random_queues_against_a_trie():
    rng = random.Random(52)
    for _trial in range(300):
        stems = [[rng.randint(0, 2) for _ in range(rng.randint(0, 8))] for _ in range(3)]
        waiting = [(f"r{i}", rng.choice(stems) + [rng.randint(0, 2) for _ in range(rng.randint(0, 5))])
                   for i in range(rng.randint(0, 12))]
        lengths = {rid: rng.randint(0, 8) for rid, _ in waiting}
        by_prompt = {tuple(t): lengths[rid] for rid, t in waiting}
        check, dep, fcfs = rng.randint(-1, 8), rng.randint(1, 8), rng.choice([4, 8, 128])
        match_len = by_prompt.__getitem__
        got = lpm_order(waiting, lambda t, m=match_len: m(tuple(t)), check_threshold=check,
                        deprioritize_threshold=dep, fcfs_threshold=fcfs)
        expected = reference(waiting, lambda t, m=match_len: m(tuple(t)), check, dep, fcfs)
        assert got == expected, (f"check_threshold {check}, deprioritize_threshold {dep}, fcfs_threshold {fcfs}, "
                                 f"cached lengths {lengths}")
