"""Tests for exercise 21: vLLM's chained block hashes. The expected values are computed here, from
vLLM's formula written out with hashlib and pickle; the tests never call your _sha256."""

import hashlib
import pickle
import random

from solution_under_test import block_hashes


def vllm_sha256(obj) -> bytes:
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


NONE_HASH = vllm_sha256("vllm-none-hash")


def expected_hashes(token_ids, block_size):
    """vLLM's chain, block by block from the start (hash_block_tokens with no extra keys)."""
    out, parent = [], NONE_HASH
    for end in range(block_size, len(token_ids) + 1, block_size):
        parent = vllm_sha256((parent, tuple(token_ids[end - block_size:end]), None))
        out.append(parent)
    return out


def test_example_counts_full_blocks_only():
    assert len(block_hashes([1, 2, 3, 4, 5], block_size=2)) == 2, "[1, 2] and [3, 4] are full; [5] is not"
    assert len(block_hashes([1, 2, 3, 4], block_size=2)) == 2, "4 tokens: two full blocks of 2"
    assert block_hashes([1, 2, 3], block_size=4) == [], "no full block yet: no hash"
    assert block_hashes([], block_size=4) == [], "no tokens: no hash"


def test_example_the_chain_starts_at_none_hash_and_grows():
    hashes = block_hashes([1, 2, 3, 4, 5], block_size=2)
    first = vllm_sha256((NONE_HASH, (1, 2), None))
    assert hashes[0] == first, "block 0: sha256((NONE_HASH, (1, 2), None)), NONE_HASH = sha256('vllm-none-hash')"
    assert hashes[1] == vllm_sha256((first, (3, 4), None)), "block 1: sha256((hash of block 0, (3, 4), None))"
    new = block_hashes([1, 2, 3, 4, 5, 6], 2, hashes)            # a decode step appended token 6
    assert new == [vllm_sha256((hashes[1], (5, 6), None))], "one new full block, chained from the last known hash"
    assert block_hashes([1, 2, 3, 4, 5, 6, 7], 2, hashes + new) == [], "[7] is not full yet: nothing new"


def test_block_size_one_and_exact_multiple():
    hashes = block_hashes(list(range(48)), block_size=16)
    assert len(hashes) == 3, "48 tokens: exactly 3 full blocks of 16"
    assert [len(h) for h in hashes] == [32] * 3, "each hash is a 32-byte SHA-256 digest"
    assert block_hashes([9, 8, 7], block_size=1) == expected_hashes([9, 8, 7], 1), "blocks of 1: a hash per token"


def test_every_hash_is_vllms():
    rng = random.Random(101)
    for _ in range(30):
        block_size = rng.randint(1, 6)
        tokens = [rng.randint(0, 5) for _ in range(rng.randint(0, 40))]
        assert block_hashes(tokens, block_size) == expected_hashes(tokens, block_size), (
            f"the chain of {tokens} in blocks of {block_size}")


def test_parent_is_in_the_hash():
    a = block_hashes([1, 2, 3, 4], block_size=2)
    c = block_hashes([7, 7, 3, 4], block_size=2)
    assert a[1] != c[1], "block [3, 4] after a different first block must hash differently"


def test_repeated_blocks_hash_differently():
    hashes = block_hashes([5, 5, 5, 5, 5, 5], block_size=2)
    distinct = len(set(hashes))
    assert distinct == 3, "three equal blocks at different depths are different prefixes"


def test_the_order_of_the_blocks_matters():
    """The same two blocks in the other order are a different prefix: the last hash must differ."""
    for first, second in [([1, 2, 3], [4, 5, 6]), ([7, 7, 7], [8, 8, 8]), ([0, 0, 1], [0, 1, 0])]:
        forward, backward = block_hashes(first + second, 3), block_hashes(second + first, 3)
        assert forward[1] != backward[1], f"{first} then {second} vs {second} then {first}"


def test_known_hashes_are_continued_not_recomputed():
    """vLLM keeps a request's hashes and only extends them: block i's parent is known[-1] as given."""
    tokens = list(range(10, 22))
    stand_in = vllm_sha256("another chain")
    got = block_hashes(tokens, 4, [stand_in])
    first = vllm_sha256((stand_in, tuple(tokens[4:8]), None))
    assert got[0] == first, "block 1's parent is the known hash of block 0, whatever it is"
    assert got == [first, vllm_sha256((first, tuple(tokens[8:12]), None))], "then the chain goes on from there"
    assert block_hashes(tokens, 4, expected_hashes(tokens, 4)) == [], "every full block is known: nothing new"


def test_decoding_one_token_at_a_time_gives_the_whole_chain():
    rng = random.Random(7)
    for _ in range(20):
        block_size = rng.randint(1, 5)
        prompt = [rng.randint(0, 9) for _ in range(rng.randint(1, 12))]
        request, hashes = list(prompt), block_hashes(prompt, block_size)
        for _step in range(rng.randint(1, 15)):
            request.append(rng.randint(0, 9))                 # one generated token per step
            new = block_hashes(request, block_size, list(hashes))
            assert len(new) <= 1, "one new token fills at most one block"
            hashes += new
        assert hashes == expected_hashes(request, block_size), "step by step equals all at once"


def test_the_input_is_not_changed():
    tokens, known = list(range(100, 140)), [NONE_HASH]
    block_hashes(tokens, 8, known)
    assert tokens == list(range(100, 140)), "block_hashes must not modify token_ids"
    assert known == [NONE_HASH], "block_hashes must not modify known"
