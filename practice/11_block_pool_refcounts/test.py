"""Tests for exercise 11: BlockPool with reference counts, allocate / share / free, copy-on-write,
and the pool under LLMEngine on a small Qwen3."""

import random

import torch
from solution_under_test import BlockPool

from nano_engine.cache_adapters import PoolAdapter, serve_side_by_side
from nano_engine.cache_manager import NaiveCacheManager
from nano_engine.engine import SamplingParams


def raises(error, call) -> bool:
    try:
        call()
    except error:
        return True
    return False


def test_example_allocate_all_or_nothing():
    pool = BlockPool(4)
    a = pool.allocate(3)
    assert len(a) == 3, "allocate(3) hands out 3 blocks"
    assert len(set(a)) == 3, f"the 3 blocks are distinct, got {a}"
    assert pool.num_free == 1, "3 of 4 blocks are taken"
    got = pool.allocate(2)
    assert got is None, "only 1 block is free: allocate(2) must return None"
    assert pool.num_free == 1, "a refused allocation changes nothing"


def test_example_a_shared_block_is_copied_before_a_write():
    pool = BlockPool(4)
    prompt = pool.allocate(2)                      # a prompt whose last block is half full
    pool.share(prompt)                             # a second sample reads the same two blocks
    a, b = list(prompt), list(prompt)
    copy = pool.copy_on_write(a, 1)                # sample a writes its first token into block 1
    assert copy is not None, "block 1 is shared by two samples: writing it needs a copy"
    assert copy[0] == prompt[1], "the copy's source is the shared block"
    assert a == [prompt[0], copy[1]], "sample a's table now points at the copy"
    assert b == prompt, "sample b keeps the original"
    assert pool.ref_cnt[prompt[1]] == 1, "the shared block lost sample a's reference"
    assert pool.ref_cnt[copy[1]] == 1, "the copy belongs to sample a alone"
    assert pool.ref_cnt[prompt[0]] == 2, "block 0 is still read by both (nobody writes it)"
    assert pool.copy_on_write(b, 1) is None, "block 1 is sample b's alone now: written in place"
    assert b == prompt, "no copy: the table is unchanged"


def test_example_shared_block_stays_allocated():
    pool = BlockPool(2)
    [b] = pool.allocate(1)
    pool.share([b])                 # a second sequence (a fork) reads the same block
    pool.free([b])                  # the first one finishes
    assert pool.ref_cnt[b] == 1, "the fork still holds its reference"
    assert pool.num_free == 1, "the block is still used by the fork"
    pool.free([b])
    assert pool.num_free == 2, "the last free returns the block"


def test_ref_counts_start_at_zero_and_allocate_sets_one():
    pool = BlockPool(3)
    assert pool.ref_cnt == [0, 0, 0], "a new pool: every count 0"
    assert pool.num_free == 3, "a new pool: every block free"
    blocks = pool.allocate(2)
    for b in blocks:
        assert pool.ref_cnt[b] == 1, "an allocated block has one reference"
    assert pool.allocate(0) == [], "allocate(0) hands out nothing"


def test_double_free_is_an_error():
    pool = BlockPool(3)
    [b] = pool.allocate(1)
    pool.free([b])
    assert raises(ValueError, lambda: pool.free([b])), "the second free of the same block is a ValueError"
    assert pool.num_free == 3, "the rejected free changes nothing"
    assert pool.ref_cnt == [0, 0, 0], "the rejected free changes no count"


def test_freeing_a_block_never_allocated_is_an_error():
    pool = BlockPool(3)
    pool.allocate(1)
    free_block = next(b for b in range(3) if pool.ref_cnt[b] == 0)
    assert raises(ValueError, lambda: pool.free([free_block])), "freeing a free block is a ValueError"
    assert raises(ValueError, lambda: pool.free([3])), "block 3 does not exist in a pool of 3"


def test_a_bad_free_changes_nothing():
    pool = BlockPool(4)
    blocks = pool.allocate(2)
    assert raises(ValueError, lambda: pool.free([blocks[0], blocks[0]])), "one reference, freed twice"
    assert pool.ref_cnt[blocks[0]] == 1, "the call was rejected as a whole"
    assert pool.num_free == 2, "the call was rejected as a whole"


def test_share_needs_an_allocated_block():
    pool = BlockPool(2)
    [b] = pool.allocate(1)
    other = 1 - b
    assert raises(ValueError, lambda: pool.share([other])), "a free block has no owner to share with"
    assert pool.ref_cnt[other] == 0, "the rejected share changes nothing"
    pool.share([b, b])
    assert pool.ref_cnt[b] == 3, "a block listed twice gets two references"


def test_freed_blocks_are_allocated_again():
    pool = BlockPool(2)
    first = pool.allocate(2)
    pool.free(first)
    assert sorted(pool.allocate(2)) == [0, 1], "freed blocks can be handed out again"


def test_negative_allocation_is_an_error():
    assert raises(ValueError, lambda: BlockPool(2).allocate(-1)), "allocate(-1) is a ValueError"


def test_a_pool_needs_at_least_one_block():
    for bad in (0, -3):
        assert raises(ValueError, lambda bad=bad: BlockPool(bad)), f"BlockPool({bad}) has no block to hand out"
    assert BlockPool(1).allocate(1) == [0], "a pool of one block hands out block 0"


def test_a_share_rejected_halfway_changes_nothing():
    """share() validates the whole call first: a bad block at the end must not leave the blocks
    before it with an extra reference (a leak nobody would ever free)."""
    pool = BlockPool(4)
    blocks = pool.allocate(2)
    free_block = next(b for b in range(4) if pool.ref_cnt[b] == 0)
    before = list(pool.ref_cnt)
    for bad in ([*blocks, free_block], [*blocks, 4], [*blocks, -1]):
        assert raises(ValueError, lambda bad=bad: pool.share(bad)), f"share({bad}) is a ValueError"
        assert pool.ref_cnt == before, f"share({bad}) was rejected, so no count changes"
        assert pool.num_free == 2, f"share({bad}) was rejected, so no block is taken"


def test_negative_block_ids_are_an_error_not_a_wrap():
    """ref_cnt[-1] is Python for the last block: an id of -1 must be refused, not wrap around."""
    pool = BlockPool(3)
    blocks = pool.allocate(3)
    before = list(pool.ref_cnt)
    assert raises(ValueError, lambda: pool.share([-1])), "share([-1]) is a ValueError"
    assert raises(ValueError, lambda: pool.free([-1])), "free([-1]) is a ValueError"
    assert raises(ValueError, lambda: pool.free([blocks[0], -3])), "free([b, -3]) is a ValueError"
    assert pool.ref_cnt == before, "the rejected calls change no count"
    assert pool.num_free == 0, "the rejected calls free nothing"


def test_copy_on_write_of_a_block_shared_three_ways():
    pool = BlockPool(6)
    table = pool.allocate(3)
    pool.share(table)
    pool.share(table)                              # three samples of one prompt
    samples = [list(table) for _ in range(3)]
    first = pool.copy_on_write(samples[0], 2)
    assert first is not None, "three users: the writer needs a copy"
    assert pool.ref_cnt[table[2]] == 2, "the other two still read the shared block"
    second = pool.copy_on_write(samples[1], 2)
    assert second is not None, "two users left: the second writer needs a copy too"
    assert second[1] != first[1], "each writer gets a block of its own"
    assert pool.copy_on_write(samples[2], 2) is None, "the last user writes in place"
    assert samples[2] == table, "the last user's table is unchanged"
    assert samples[0][:2] == table[:2], "a copy replaces only the block being written"
    assert pool.ref_cnt[table[0]] == 3, "the blocks nobody writes stay shared"
    assert pool.num_free == 1, "two copies took two of the three free blocks"


def test_copy_on_write_without_a_free_block_is_a_memory_error():
    pool = BlockPool(2)
    table = pool.allocate(2)
    pool.share(table)
    mine = list(table)
    before = list(pool.ref_cnt)
    assert raises(MemoryError, lambda: pool.copy_on_write(mine, 0)), "a copy is needed and no block is free"
    assert mine == table, "the refused copy leaves the table alone"
    assert pool.ref_cnt == before, "the refused copy changes no count"
    pool.free(mine)
    assert pool.copy_on_write(table, 1) is None, "after the other sequence left, nothing is shared"


def test_copy_on_write_checks_its_arguments_first():
    pool = BlockPool(4)
    table = pool.allocate(2)
    pool.share(table)
    free_block = next(b for b in range(4) if pool.ref_cnt[b] == 0)
    before, num_free = list(pool.ref_cnt), pool.num_free
    for bad_table, index in ((table, 2), (table, -1), ([free_block], 0), ([7], 0), ([-1], 0), ([], 0)):
        copied = list(bad_table)
        assert raises(ValueError, lambda t=copied, i=index: pool.copy_on_write(t, i)), (
            f"copy_on_write({bad_table}, {index}) is a ValueError")
        assert copied == bad_table, f"copy_on_write({bad_table}, {index}) was rejected: the table is unchanged"
    assert pool.ref_cnt == before, "the rejected calls change no count"
    assert pool.num_free == num_free, "the rejected calls take no block"


def test_random_operations_against_a_model():
    rng = random.Random(107)
    for _ in range(40):
        num_blocks = rng.randint(1, 8)
        pool, refs = BlockPool(num_blocks), [0] * num_blocks   # refs: the model
        tables = []                                            # the sequences' block tables
        for _ in range(60):
            action = rng.choice(["allocate", "fork", "free", "write", "bad free"])
            if action == "allocate":
                n = rng.randint(0, num_blocks)
                got = pool.allocate(n)
                if n > refs.count(0):
                    assert got is None, f"allocate({n}) with {refs.count(0)} free blocks returns None"
                    continue
                assert got is not None, f"allocate({n}) with {refs.count(0)} free blocks succeeds"
                assert len(got) == n, f"allocate({n}) hands out {n} blocks"
                assert all(refs[b] == 0 for b in got), f"{got} includes a block in use: {refs}"
                for b in got:
                    refs[b] = 1
                tables.append(list(got))
            elif action == "fork" and tables:
                table = rng.choice(tables)
                pool.share(table)
                for b in table:
                    refs[b] += 1
                tables.append(list(table))
            elif action == "free" and tables:
                table = tables.pop(rng.randrange(len(tables)))
                pool.free(table)
                for b in table:
                    refs[b] -= 1
            elif action == "write" and any(tables):
                table = rng.choice([t for t in tables if t])
                index = rng.randrange(len(table))
                shared = table[index]
                if refs[shared] > 1 and refs.count(0) == 0:
                    assert raises(MemoryError, lambda p=pool, t=table, i=index: p.copy_on_write(t, i)), (
                        "a copy is needed and no block is free")
                    continue
                got = pool.copy_on_write(table, index)
                if refs[shared] == 1:
                    assert got is None, f"block {shared} has one user: written in place"
                    continue
                assert got is not None, f"block {shared} has {refs[shared]} users: copied before the write"
                assert got[0] == shared, "the copy's source is the block that was written"
                assert refs[got[1]] == 0, f"the copy {got[1]} was a free block"
                assert table[index] == got[1], "the table points at the copy"
                refs[shared] -= 1
                refs[got[1]] = 1
            elif action == "bad free":
                b = rng.randrange(num_blocks)
                bad = [b] * (refs[b] + 1)
                assert raises(ValueError, lambda pool=pool, bad=bad: pool.free(bad)), (
                    f"freeing block {b} {len(bad)} times is a ValueError")
            assert pool.ref_cnt == refs, "the reference counts"
            assert pool.num_free == refs.count(0), "num_free counts the blocks nobody uses"


_RNG = random.Random(11)
_SYSTEM = [_RNG.randrange(500) for _ in range(24)]
PROMPTS = [_SYSTEM + [_RNG.randrange(500) for _ in range(_RNG.randrange(3, 10))] for _ in range(5)]


def test_your_pool_serves_requests_on_the_model():
    """Your pool under LLMEngine, beside nano_engine's BlockPool, on a small Qwen3 (the tiny preset's
    body with a 512-token vocabulary, random weights): one request, then four more that share its
    24-token prefix, in a pool of 16 blocks of 4 tokens, too small for their growth (requests are
    preempted and their blocks freed). The two engines go step by step; the first step where yours
    does something else fails the test, naming the step and the request."""
    torch.set_num_threads(1)
    yours = PoolAdapter(BlockPool(16), block_size=4)
    package = NaiveCacheManager(16, 4)
    run = serve_side_by_side(yours, package, [PROMPTS[:1], PROMPTS[1:]], SamplingParams(max_tokens=6))
    assert run.preemptions > 0, "the pool is small enough that requests are preempted and their blocks freed"
