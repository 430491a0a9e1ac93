"""Tests for exercise 23: longest_cache_hit, whole blocks and the last-token rule."""

import random

from solution_under_test import longest_cache_hit


def test_example_partial_last_block():
    table = {"h0": 7, "h1": 3}
    assert longest_cache_hit(["h0", "h1"], table, num_tokens=10, block_size=4) == ([7, 3], 8), (
        "10 tokens: 9 may hit, and both whole blocks (8 tokens) fit in 9")


def test_example_full_hit_gives_up_the_last_block():
    table = {"h0": 7, "h1": 3}
    got = longest_cache_hit(["h0", "h1"], table, num_tokens=8, block_size=4)
    assert got == ([7], 4), "8 tokens, all cached: at most 7 may hit, i.e. one whole block"


def test_one_token_past_the_boundary_keeps_every_block():
    table = {"h0": 7, "h1": 3}
    assert longest_cache_hit(["h0", "h1"], table, num_tokens=9, block_size=4) == ([7, 3], 8), (
        "9 tokens: 8 may hit, exactly the two cached blocks")


def test_stops_at_the_first_miss():
    table = {"h1": 3, "h2": 5}
    got = longest_cache_hit(["h0", "h1", "h2"], table, num_tokens=13, block_size=4)
    assert got == ([], 0), "block 0 is not cached, so nothing after it can be used"
    table = {"h0": 1, "h2": 5}
    assert longest_cache_hit(["h0", "h1", "h2"], table, num_tokens=13, block_size=4) == ([1], 4), (
        "block 1 is missing, so only block 0 is used, although block 2 is cached")


def test_nothing_cached():
    assert longest_cache_hit(["h0"], {}, num_tokens=5, block_size=4) == ([], 0), "an empty table: nothing hits"
    assert longest_cache_hit([], {"h0": 1}, num_tokens=3, block_size=4) == ([], 0), "no full block: nothing hits"


def test_single_token_prompt_never_hits():
    assert longest_cache_hit(["h0"], {"h0": 2}, num_tokens=1, block_size=1) == ([], 0), (
        "a one-token prompt has no token to spare: nothing may come from the cache")


def test_block_size_one():
    hashes = ["a", "b", "c", "d", "e"]
    table = {h: i for i, h in enumerate(hashes)}
    assert longest_cache_hit(hashes, table, num_tokens=5, block_size=1) == ([0, 1, 2, 3], 4), (
        "5 tokens in blocks of 1: at most 4 may hit, the last is computed")


def test_empty_prompt_is_an_error():
    try:
        longest_cache_hit([], {}, num_tokens=0, block_size=4)
    except ValueError:
        return
    raise AssertionError("num_tokens=0 should raise ValueError")


def test_negative_token_count_is_an_error():
    for bad in (-1, -5):
        try:
            got = longest_cache_hit(["h0"], {"h0": 7}, num_tokens=bad, block_size=4)
        except ValueError:
            continue
        raise AssertionError(f"num_tokens={bad} should raise ValueError, got {got!r}")


def test_arguments_are_not_modified():
    hashes, table = ["h0", "h1"], {"h0": 7, "h1": 3}
    longest_cache_hit(hashes, table, num_tokens=8, block_size=4)
    assert hashes == ["h0", "h1"], "longest_cache_hit must not modify block_hashes"
    assert table == {"h0": 7, "h1": 3}, "longest_cache_hit must not modify hash_to_block"


def test_random_against_brute_force():
    rng = random.Random(103)
    for _ in range(300):
        block_size = rng.randint(1, 5)
        num_tokens = rng.randint(1, 30)
        hashes = [f"h{i}" for i in range(num_tokens // block_size)]
        table = {h: 100 + i for i, h in enumerate(hashes) if rng.random() < 0.8}
        best = 0   # brute force: the largest k whose blocks are all cached and leave a token over
        for k in range(len(hashes) + 1):
            if k * block_size <= num_tokens - 1 and all(h in table for h in hashes[:k]):
                best = k
        expected = ([table[h] for h in hashes[:best]], best * block_size)
        got = longest_cache_hit(hashes, table, num_tokens, block_size)
        assert got == expected, "the longest cached run of whole blocks that leaves the last token to compute"
