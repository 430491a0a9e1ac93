"""Tests for exercise 11: BlockPool with reference counts, allocate / share / free."""

import random

from solution_under_test import BlockPool


def raises_value_error(call) -> bool:
    try:
        call()
    except ValueError:
        return True
    return False


def test_example_allocate_all_or_nothing():
    pool = BlockPool(4)
    a = pool.allocate(3)
    assert sorted(set(a)) == sorted(a) and len(a) == 3, f"3 distinct blocks expected, got {a}"
    assert pool.num_free == 1
    got = pool.allocate(2)
    assert got is None, "only 1 block is free: allocate(2) must return None"
    assert pool.num_free == 1, "a refused allocation changes nothing"


def test_example_shared_block_stays_allocated():
    pool = BlockPool(2)
    [b] = pool.allocate(1)
    pool.share([b])                 # a second sequence (a fork) reads the same block
    pool.free([b])                  # the first one finishes
    assert pool.ref_cnt[b] == 1
    assert pool.num_free == 1, "the block is still used by the fork"
    pool.free([b])
    assert pool.num_free == 2


def test_ref_counts_start_at_zero_and_allocate_sets_one():
    pool = BlockPool(3)
    assert pool.ref_cnt == [0, 0, 0] and pool.num_free == 3
    blocks = pool.allocate(2)
    for b in blocks:
        assert pool.ref_cnt[b] == 1
    assert pool.allocate(0) == []


def test_double_free_is_an_error():
    pool = BlockPool(3)
    [b] = pool.allocate(1)
    pool.free([b])
    assert raises_value_error(lambda: pool.free([b])), "the second free of the same block"
    assert pool.num_free == 3 and pool.ref_cnt == [0, 0, 0]


def test_freeing_a_block_never_allocated_is_an_error():
    pool = BlockPool(3)
    pool.allocate(1)
    free_block = next(b for b in range(3) if pool.ref_cnt[b] == 0)
    assert raises_value_error(lambda: pool.free([free_block]))
    assert raises_value_error(lambda: pool.free([3])), "block 3 does not exist in a pool of 3"


def test_a_bad_free_changes_nothing():
    pool = BlockPool(4)
    blocks = pool.allocate(2)
    assert raises_value_error(lambda: pool.free([blocks[0], blocks[0]])), "one reference, freed twice"
    assert pool.ref_cnt[blocks[0]] == 1, "the call was rejected as a whole"
    assert pool.num_free == 2


def test_share_needs_an_allocated_block():
    pool = BlockPool(2)
    [b] = pool.allocate(1)
    other = 1 - b
    assert raises_value_error(lambda: pool.share([other])), "a free block has no owner to share with"
    assert pool.ref_cnt[other] == 0
    pool.share([b, b])
    assert pool.ref_cnt[b] == 3


def test_freed_blocks_are_allocated_again():
    pool = BlockPool(2)
    first = pool.allocate(2)
    pool.free(first)
    assert sorted(pool.allocate(2)) == [0, 1]


def test_negative_allocation_is_an_error():
    assert raises_value_error(lambda: BlockPool(2).allocate(-1))


def test_a_pool_needs_at_least_one_block():
    for bad in (0, -3):
        assert raises_value_error(lambda bad=bad: BlockPool(bad)), f"BlockPool({bad}) has no block to hand out"
    assert BlockPool(1).allocate(1) == [0]


def test_a_share_rejected_halfway_changes_nothing():
    """share() validates the whole call first: a bad block at the end must not leave the blocks
    before it with an extra reference (a leak nobody would ever free)."""
    pool = BlockPool(4)
    blocks = pool.allocate(2)
    free_block = next(b for b in range(4) if pool.ref_cnt[b] == 0)
    before = list(pool.ref_cnt)
    for bad in ([*blocks, free_block], [*blocks, 4], [*blocks, -1]):
        assert raises_value_error(lambda bad=bad: pool.share(bad)), f"share({bad})"
        assert pool.ref_cnt == before, f"share({bad}) was rejected, so nothing changes"
        assert pool.num_free == 2


def test_negative_block_ids_are_an_error_not_a_wrap():
    """ref_cnt[-1] is Python for the last block: an id of -1 must be refused, not wrap around."""
    pool = BlockPool(3)
    blocks = pool.allocate(3)
    before = list(pool.ref_cnt)
    assert raises_value_error(lambda: pool.share([-1])), "share([-1])"
    assert raises_value_error(lambda: pool.free([-1])), "free([-1])"
    assert raises_value_error(lambda: pool.free([blocks[0], -3])), "free([b, -3])"
    assert pool.ref_cnt == before and pool.num_free == 0


def test_random_operations_against_a_model():
    rng = random.Random(107)
    for _ in range(40):
        num_blocks = rng.randint(1, 8)
        pool, refs = BlockPool(num_blocks), [0] * num_blocks   # refs: the model
        for _ in range(60):
            used = [b for b in range(num_blocks) if refs[b] > 0]
            action = rng.choice(["allocate", "share", "free", "bad free"])
            if action == "allocate":
                n = rng.randint(0, num_blocks)
                got = pool.allocate(n)
                if n > refs.count(0):
                    assert got is None
                else:
                    assert got is not None and len(got) == n and len(set(got)) == n
                    assert all(refs[b] == 0 for b in got), f"{got} includes a block in use: {refs}"
                    for b in got:
                        refs[b] = 1
            elif action == "share" and used:
                blocks = rng.sample(used, rng.randint(1, len(used)))
                pool.share(blocks)
                for b in blocks:
                    refs[b] += 1
            elif action == "free" and used:
                blocks = rng.sample(used, rng.randint(1, len(used)))
                pool.free(blocks)
                for b in blocks:
                    refs[b] -= 1
            elif action == "bad free":
                b = rng.randrange(num_blocks)
                bad = [b] * (refs[b] + 1)
                assert raises_value_error(lambda pool=pool, bad=bad: pool.free(bad))
            assert pool.ref_cnt == refs
            assert pool.num_free == refs.count(0)
