"""Tests for exercise 22: allocate / free / touch on a prefix-caching block pool.

The random test drives the pool like an engine would and compares it after every step with a
small model that tracks cached prefixes by their tokens (no hashes), so it accepts any hash.
"""

import random

from solution_under_test import PrefixCachingBlockPool


def test_example_chapter_transcript():
    pool = PrefixCachingBlockPool(num_blocks=4, block_size=2)
    a = [1, 2, 3, 4, 5]
    blocks = pool.allocate(3)
    assert blocks == [0, 1, 2]
    pool.cache_blocks(a, blocks, num_computed=5)
    cached = [pool.block_hash[b] is not None for b in blocks]
    assert cached == [True, True, False]
    pool.free(blocks)
    assert list(pool.free_queue) == [3, 2, 1, 0]
    hit = pool.lookup([1, 2, 3, 4, 9])
    assert hit == [0, 1]
    pool.touch(hit)
    assert list(pool.free_queue) == [3, 2]
    pool.free(hit)
    assert pool.allocate(3) == [3, 2, 1]
    assert pool.lookup([1, 2, 3, 4, 9]) == [0]


def test_example_allocate_from_the_head():
    pool = PrefixCachingBlockPool(num_blocks=4, block_size=2)
    assert pool.allocate(2) == [0, 1]
    assert list(pool.free_queue) == [2, 3]
    assert list(pool.ref_cnt) == [1, 1, 0, 0]


def test_allocate_is_all_or_nothing():
    pool = PrefixCachingBlockPool(num_blocks=4, block_size=2)
    pool.allocate(3)
    queue_before, refs_before = list(pool.free_queue), list(pool.ref_cnt)
    got = pool.allocate(2)
    assert got is None, "only one block is free"
    assert list(pool.free_queue) == queue_before, "a failed allocate must not take any block"
    assert list(pool.ref_cnt) == refs_before
    assert pool.allocate(0) == []


def test_free_appends_in_reverse_order_at_the_tail():
    pool = PrefixCachingBlockPool(num_blocks=6, block_size=2)
    blocks = pool.allocate(3)
    assert list(pool.free_queue) == [3, 4, 5]
    pool.free(blocks)
    assert list(pool.free_queue) == [3, 4, 5, 2, 1, 0]
    assert list(pool.ref_cnt) == [0] * 6


def test_shared_block_returns_only_after_the_last_free():
    pool = PrefixCachingBlockPool(num_blocks=4, block_size=2)
    tokens = [1, 2, 3, 4]
    first = pool.allocate(2)
    pool.cache_blocks(tokens, first, num_computed=4)
    hit = pool.lookup(tokens)          # a second request shares both blocks while the first runs
    pool.touch(hit)
    assert list(pool.ref_cnt[:2]) == [2, 2]
    pool.free(first)
    queue = list(pool.free_queue)
    assert queue == [2, 3], "still referenced by the second request: not free"
    pool.free(hit)
    assert list(pool.free_queue) == [2, 3, 1, 0]


def test_touch_takes_a_free_cached_block_out_of_the_queue():
    pool = PrefixCachingBlockPool(num_blocks=3, block_size=2)
    blocks = pool.allocate(1)
    pool.cache_blocks([5, 6], blocks, num_computed=2)
    pool.free(blocks)
    hit = pool.lookup([5, 6, 7])
    assert hit == blocks
    pool.touch(hit)
    assert blocks[0] not in list(pool.free_queue)
    assert pool.ref_cnt[blocks[0]] == 1
    others = pool.allocate(2)
    assert blocks[0] not in others, "a block in use must never be handed out again"
    assert pool.allocate(1) is None


def test_touch_on_a_block_in_use_only_adds_a_reference():
    pool = PrefixCachingBlockPool(num_blocks=3, block_size=2)
    blocks = pool.allocate(1)
    queue_before = list(pool.free_queue)
    pool.touch(blocks)
    assert pool.ref_cnt[blocks[0]] == 2
    assert list(pool.free_queue) == queue_before


def test_reuse_evicts_the_cached_hash():
    pool = PrefixCachingBlockPool(num_blocks=2, block_size=2)
    blocks = pool.allocate(2)
    pool.cache_blocks([1, 2, 3, 4], blocks, num_computed=4)
    pool.free(blocks)
    assert len(pool.hash_to_block) == 2
    reused = pool.allocate(1)                          # the head of the queue: block 1 ([3, 4])
    assert reused == [1]
    assert pool.block_hash[1] is None, "an allocated block no longer caches its old content"
    assert sorted(pool.hash_to_block.values()) == [0]
    assert pool.lookup([1, 2, 3, 4]) == [0], "the stale [3, 4] must not be served"



def _plant_hash(pool, b, h):
    """Make block ``b`` hold hash ``h``, as if cache_blocks had met it. (nano_engine's own pool,
    which also passes these tests, keeps every cached copy in ``hash_to_blocks``.)"""
    pool.block_hash[b] = h
    if hasattr(pool, "hash_to_blocks"):
        pool.hash_to_blocks[h] = {b: None}
    else:
        pool.hash_to_block[h] = b

def test_a_hash_of_zero_is_still_a_hash():
    """Any int can be a block hash, 0 included: `if block_hash[b]:` would keep a stale 0 cached."""
    pool = PrefixCachingBlockPool(num_blocks=1, block_size=2)
    [b] = pool.allocate(1)
    _plant_hash(pool, b, 0)      # as if cache_blocks had met a hash of 0
    pool.free([b])
    assert pool.allocate(1) == [b]
    assert pool.hash_to_block == {} and pool.block_hash[b] is None, "reusing the block evicts hash 0"


def test_lru_order_across_requests():
    pool = PrefixCachingBlockPool(num_blocks=4, block_size=2)
    a, b = [1, 1, 2, 2], [3, 3, 4, 4]
    for tokens in (a, b):
        blocks = pool.allocate(2)
        pool.cache_blocks(tokens, blocks, num_computed=4)
        pool.free(blocks)
    hit = pool.lookup(a)                               # a is used again: it becomes most recent
    pool.touch(hit)
    pool.free(hit)
    pool.allocate(2)                                   # evicts the least recently used: b
    assert len(pool.lookup(a)) == 2
    assert pool.lookup(b) == []


class _Model:
    """Brute-force pool: a plain list for the queue, cached prefixes keyed by their tokens."""

    def __init__(self, num_blocks, block_size):
        self.block_size = block_size
        self.ref = [0] * num_blocks
        self.queue = list(range(num_blocks))
        self.prefix_of = {}           # block -> tuple of all tokens up to the end of the block

    def allocate(self, n):
        if n > len(self.queue):
            return None
        taken, self.queue = self.queue[:n], self.queue[n:]
        for b in taken:
            self.prefix_of.pop(b, None)
            self.ref[b] = 1
        return taken

    def free(self, blocks):
        for b in blocks[::-1]:
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.queue.append(b)

    def touch(self, blocks):
        for b in blocks:
            if self.ref[b] == 0:
                self.queue.remove(b)
            self.ref[b] += 1

    def lookup(self, tokens):
        owner = {p: b for b, p in self.prefix_of.items()}
        hit = []
        for end in range(self.block_size, len(tokens) + 1, self.block_size):
            if tuple(tokens[:end]) not in owner:
                break
            hit.append(owner[tuple(tokens[:end])])
        return hit

    def cache(self, tokens, blocks, num_computed):
        known = set(self.prefix_of.values())
        for i, end in enumerate(range(self.block_size, num_computed + 1, self.block_size)):
            prefix = tuple(tokens[:end])
            if blocks[i] not in self.prefix_of and prefix not in known:
                self.prefix_of[blocks[i]] = prefix
                known.add(prefix)


def test_random_requests_against_a_model():
    rng = random.Random(102)
    for _trial in range(20):
        num_blocks, block_size = rng.randint(3, 10), rng.randint(1, 3)
        pool, model = PrefixCachingBlockPool(num_blocks, block_size), _Model(num_blocks, block_size)
        prefixes = [[rng.randint(0, 2) for _ in range(rng.randint(0, 6))] for _ in range(3)]
        running = []
        for _step in range(60):
            if running and (rng.random() < 0.4 or len(running) > 3):
                blocks = running.pop(rng.randrange(len(running)))
                pool.free(blocks)
                model.free(blocks)
            else:
                tokens = rng.choice(prefixes) + [rng.randint(0, 2) for _ in range(rng.randint(1, 5))]
                hit = pool.lookup(tokens)
                assert hit == model.lookup(tokens), "lookup disagrees with the model"
                pool.touch(hit)
                model.touch(hit)
                need = -(-len(tokens) // block_size) - len(hit)
                new = pool.allocate(need)
                assert new == model.allocate(need), "allocate disagrees with the model"
                if new is None:
                    pool.free(hit)
                    model.free(hit)
                else:
                    pool.cache_blocks(tokens, hit + new, len(tokens))
                    model.cache(tokens, hit + new, len(tokens))
                    running.append(hit + new)
            free_queue, ref_cnt = list(pool.free_queue), list(pool.ref_cnt)
            assert free_queue == model.queue, "free queue order"
            assert ref_cnt == model.ref, "reference counts"
            cached = sorted(b for b in range(num_blocks) if pool.block_hash[b] is not None)
            assert cached == sorted(model.prefix_of), "which blocks still cache something"
