"""Tests for exercise 21. Each checks a behaviour the statement asks for; none depends on the
exact hash values, so any deterministic hash of (parent, block tokens) is accepted."""

import random

from solution_under_test import block_hashes


def test_example_counts_full_blocks_only():
    assert len(block_hashes([1, 2, 3, 4, 5], block_size=2)) == 2
    assert len(block_hashes([1, 2, 3, 4], block_size=2)) == 2
    assert len(block_hashes([1, 2, 3], block_size=4)) == 0
    assert len(block_hashes([], block_size=4)) == 0


def test_example_shared_prefix_shares_hashes():
    a = block_hashes([1, 2, 3, 4, 5, 6], block_size=2)
    b = block_hashes([1, 2, 3, 4, 9, 9], block_size=2)
    assert a[:2] == b[:2], "the first two blocks are identical prefixes"
    assert a[2] != b[2], "the third blocks differ"


def test_parent_is_in_the_hash():
    a = block_hashes([1, 2, 3, 4], block_size=2)
    c = block_hashes([7, 7, 3, 4], block_size=2)
    assert a[1] != c[1], "block [3, 4] after a different first block must hash differently"


def test_repeated_blocks_hash_differently():
    hashes = block_hashes([5, 5, 5, 5, 5, 5], block_size=2)
    distinct = len(set(hashes))
    assert distinct == 3, "three equal blocks at different depths are different prefixes"


def test_order_inside_a_block_matters():
    a = block_hashes([1, 2, 3, 4], block_size=4)
    b = block_hashes([2, 1, 3, 4], block_size=4)
    assert a != b, "[1, 2, 3, 4] and [2, 1, 3, 4] are different prompts"


def test_block_size_one_and_exact_multiple():
    assert len(block_hashes([9, 8, 7], block_size=1)) == 3
    assert len(block_hashes(list(range(48)), block_size=16)) == 3


def test_same_input_same_hashes():
    tokens = list(range(100, 140))
    first = block_hashes(tokens, block_size=8)
    again = block_hashes(list(tokens), block_size=8)
    assert first == again
    assert tokens == list(range(100, 140)), "block_hashes must not modify its input"


def test_prefix_of_prompt_gives_prefix_of_hashes():
    rng = random.Random(101)
    for _ in range(30):
        block_size = rng.randint(1, 6)
        tokens = [rng.randint(0, 5) for _ in range(rng.randint(0, 40))]
        full = block_hashes(tokens, block_size)
        for cut in range(len(tokens) + 1):
            got = block_hashes(tokens[:cut], block_size)
            expected = full[: cut // block_size]
            assert got == expected, "hashes of a prefix must be a prefix of the hashes"


def test_one_changed_token_changes_that_block_and_every_later_one():
    rng = random.Random(7)
    for _ in range(50):
        block_size = rng.randint(1, 5)
        tokens = [rng.randint(0, 3) for _ in range(rng.randint(1, 30))]
        position = rng.randrange(len(tokens))
        changed = list(tokens)
        changed[position] += 10
        before, after = block_hashes(tokens, block_size), block_hashes(changed, block_size)
        first_changed_block = position // block_size
        assert after[:first_changed_block] == before[:first_changed_block]
        unequal = [x != y for x, y in zip(after[first_changed_block:], before[first_changed_block:], strict=False)]
        assert all(unequal), "every block from the changed one on covers the changed token"


def test_the_order_of_the_blocks_matters():
    """The same two blocks in the other order are a different prefix: the last hash must differ.
    (A hash that combines parent and block with + or ^ forgets the order.)"""
    a, b = [1, 2, 3], [4, 5, 6]
    for first, second in [(a, b), ([7, 7, 7], [8, 8, 8]), ([0, 0, 1], [0, 1, 0])]:
        forward, backward = block_hashes(first + second, 3), block_hashes(second + first, 3)
        assert forward[1] != backward[1], f"{first} then {second} vs {second} then {first}"
