"""Tests for exercise 22: allocate / free / touch / admit on a prefix-caching block pool, and the
pool under LLMEngine on a small Qwen3.

The random test drives the pool like an engine would and compares it after every step with a
small model that tracks cached prefixes by their tokens (no hashes), so it accepts any hash.
"""

import random

import torch
from solution_under_test import PrefixCachingBlockPool

from nano_engine import prefix_cache
from nano_engine.cache_adapters import PrefixCacheAdapter, serve_side_by_side
from nano_engine.cache_manager import HashedBlockCacheManager
from nano_engine.engine import SamplingParams


def test_example_chapter_transcript():
    pool = PrefixCachingBlockPool(num_blocks=4, block_size=2)
    a = [1, 2, 3, 4, 5]
    blocks = pool.allocate(3)
    assert blocks == [0, 1, 2], "allocate takes from the head of the queue"
    pool.cache_blocks(a, blocks, num_computed=5)
    pool.free(blocks)
    assert list(pool.free_queue) == [3, 2, 1, 0], "free walks the blocks last first, to the tail"
    hit = pool.lookup([1, 2, 3, 4, 9])
    pool.touch(hit)
    assert list(pool.free_queue) == [3, 2], "touched hits leave the free queue"
    pool.free(hit)
    assert pool.allocate(3) == [3, 2, 1], "the head goes first: block 1 is reused"
    assert pool.lookup([1, 2, 3, 4, 9]) == [0], "reusing block 1 evicted [1, 2, 3, 4]"


def test_example_admit_touches_the_hits_then_allocates():
    pool = PrefixCachingBlockPool(num_blocks=4, block_size=2)
    first = pool.admit([1, 2, 3, 4, 5])
    assert first == [0, 1, 2], "nothing cached yet: three fresh blocks"
    pool.cache_blocks([1, 2, 3, 4, 5], first, num_computed=5)
    pool.free(first)
    second = pool.admit([1, 2, 3, 4, 9, 9])
    assert second == [0, 1, 3], "the two cached blocks, then one fresh block from the head"
    assert list(pool.free_queue) == [2], "the hits left the queue; block 3 was allocated"
    assert pool.admit([7, 7, 7]) is None, "two new blocks, one free: it does not fit"
    assert list(pool.free_queue) == [2], "a request that does not fit changes nothing"


def test_allocate_from_the_head():
    pool = PrefixCachingBlockPool(num_blocks=4, block_size=2)
    assert pool.allocate(2) == [0, 1], "the head of the queue first"
    assert list(pool.free_queue) == [2, 3], "the rest stays in order"
    assert list(pool.ref_cnt) == [1, 1, 0, 0], "an allocated block has one reference"


def test_allocate_is_all_or_nothing():
    pool = PrefixCachingBlockPool(num_blocks=4, block_size=2)
    pool.allocate(3)
    queue_before, refs_before = list(pool.free_queue), list(pool.ref_cnt)
    got = pool.allocate(2)
    assert got is None, "only one block is free"
    assert list(pool.free_queue) == queue_before, "a failed allocate must not take any block"
    assert list(pool.ref_cnt) == refs_before, "a failed allocate changes no count"
    assert pool.allocate(0) == [], "allocate(0) hands out nothing"


def test_free_appends_in_reverse_order_at_the_tail():
    pool = PrefixCachingBlockPool(num_blocks=6, block_size=2)
    blocks = pool.allocate(3)
    pool.free(blocks)
    assert list(pool.free_queue) == [3, 4, 5, 2, 1, 0], "freed blocks join the tail, last block first"
    assert list(pool.ref_cnt) == [0] * 6, "every reference was dropped"


def test_shared_block_returns_only_after_the_last_free():
    pool = PrefixCachingBlockPool(num_blocks=4, block_size=2)
    tokens = [1, 2, 3, 4]
    first = pool.allocate(2)
    pool.cache_blocks(tokens, first, num_computed=4)
    hit = pool.lookup(tokens)          # a second request shares both blocks while the first runs
    pool.touch(hit)
    assert list(pool.ref_cnt[:2]) == [2, 2], "two requests use blocks 0 and 1"
    pool.free(first)
    assert list(pool.free_queue) == [2, 3], "still referenced by the second request: not free"
    pool.free(hit)
    assert list(pool.free_queue) == [2, 3, 1, 0], "the last free queues them"


def test_touch_takes_a_free_cached_block_out_of_the_queue():
    pool = PrefixCachingBlockPool(num_blocks=3, block_size=2)
    blocks = pool.allocate(1)
    pool.cache_blocks([5, 6], blocks, num_computed=2)
    pool.free(blocks)
    pool.touch(blocks)
    assert blocks[0] not in list(pool.free_queue), "a touched block leaves the queue"
    assert pool.ref_cnt[blocks[0]] == 1, "and has one reference"
    others = pool.allocate(2)
    assert blocks[0] not in others, "a block in use must never be handed out again"
    assert pool.allocate(1) is None, "every block is in use"


def test_touch_on_a_block_in_use_only_adds_a_reference():
    pool = PrefixCachingBlockPool(num_blocks=3, block_size=2)
    blocks = pool.allocate(1)
    queue_before = list(pool.free_queue)
    pool.touch(blocks)
    assert pool.ref_cnt[blocks[0]] == 2, "one more reference"
    assert list(pool.free_queue) == queue_before, "the queue does not change"


def test_reuse_evicts_the_cached_hash():
    pool = PrefixCachingBlockPool(num_blocks=2, block_size=2)
    blocks = pool.allocate(2)
    pool.cache_blocks([1, 2, 3, 4], blocks, num_computed=4)
    pool.free(blocks)
    assert pool.allocate(1) == [1], "the head of the queue: block 1 ([3, 4])"
    assert pool.block_hash[1] is None, "an allocated block no longer caches its old content"
    assert sorted(pool.hash_to_block.values()) == [0], "only block 0's hash is left"
    assert pool.lookup([1, 2, 3, 4]) == [0], "the stale [3, 4] must not be served"


def _plant_hash(pool, b, h):
    """Make block ``b`` hold hash ``h``, as if cache_blocks had met it. (nano_engine's own pool
    keeps every cached copy in ``hash_to_blocks``.)"""
    pool.block_hash[b] = h
    if hasattr(pool, "hash_to_blocks"):
        pool.hash_to_blocks[h] = {b: None}
    else:
        pool.hash_to_block[h] = b


def test_a_hash_of_zero_is_still_a_hash():
    """Any int can be a block hash, 0 included: `if block_hash[b]:` would keep a stale 0 cached."""
    pool = PrefixCachingBlockPool(num_blocks=1, block_size=2)
    [b] = pool.allocate(1)
    _plant_hash(pool, b, 0)
    pool.free([b])
    assert pool.allocate(1) == [b], "the only block is reused"
    assert pool.hash_to_block == {}, "reusing the block evicts hash 0"
    assert pool.block_hash[b] is None, "the reused block caches nothing"


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
    assert len(pool.lookup(a)) == 2, "the recently used prefix survives"
    assert pool.lookup(b) == [], "the least recently used prefix was evicted"


def _cached(pool, tokens):
    blocks = pool.allocate(-(-len(tokens) // pool.block_size))
    pool.cache_blocks(tokens, blocks, len(tokens))
    pool.free(blocks)
    return blocks


def test_admit_that_does_not_fit_leaves_the_lru_order_alone():
    """Touching the hits and giving them back when the rest does not fit would queue them again at
    the tail, as if just used, and the next allocation would evict another prefix in their place."""
    pool = PrefixCachingBlockPool(num_blocks=4, block_size=2)
    _cached(pool, [1, 1, 2, 2])                        # blocks 0, 1 cached, at the tail
    queue, refs = list(pool.free_queue), list(pool.ref_cnt)
    assert pool.admit([1, 1, 2, 2, 3, 3, 4, 4, 5]) is None, "2 hits in the queue + 3 new blocks > 4"
    assert list(pool.free_queue) == queue, "the hits were not touched: the queue keeps its order"
    assert list(pool.ref_cnt) == refs, "nothing was allocated"


def test_admit_counts_the_hits_that_leave_the_queue():
    pool = PrefixCachingBlockPool(num_blocks=5, block_size=2)
    _cached(pool, [1, 1, 2, 2])                        # blocks 0, 1: free and cached
    assert pool.admit([1, 1, 2, 2, 6, 6, 7, 7, 8, 8, 9, 9]) is None, (
        "4 new blocks fit in 5 free ones, but not once the 2 hits have left the queue")
    table = pool.admit([1, 1, 2, 2, 6, 6, 7, 7, 8, 8])
    assert table is not None, "3 new blocks + 2 hits from the queue fit in 5 free blocks"
    assert table[:2] == [0, 1], "the hits come first, in prompt order"
    assert len(pool.free_queue) == 0, "every block is in use"


def test_admit_touches_before_it_allocates():
    """A hit block at the head of the free queue is the next one allocate hands out: touch it
    first, or its cached KV is overwritten by the very request that hit it."""
    pool = PrefixCachingBlockPool(num_blocks=3, block_size=2)
    blocks = pool.allocate(3)
    pool.cache_blocks([4, 4, 5, 5, 6, 6], blocks, 6)
    pool.free(blocks[2:])                              # block 2 first...
    pool.free(blocks[:2])                              # ...then 1 and 0: the queue is [2, 1, 0]
    pool.allocate(1)                                   # block 2 is reused: the queue is [1, 0]
    table = pool.admit([4, 4, 9, 9])                   # hits block 0; needs one fresh block
    assert table == [0, 1], "the hit, then the head of the queue"
    assert pool.block_hash[0] is not None, "the hit block still caches [4, 4]"
    assert pool.ref_cnt[0] == 1, "the hit is referenced once, by the request"


def test_admit_never_serves_the_last_token():
    pool = PrefixCachingBlockPool(num_blocks=4, block_size=2)
    _cached(pool, [1, 2, 3, 4])
    table = pool.admit([1, 2, 3, 4])                   # an exact repeat of a cached prompt
    assert table == [0, 2], "only the first block hits: the last token is computed again"
    assert pool.num_hits == 2, "the hit counter counts the 2 tokens served"


def test_admit_an_empty_prompt_is_an_error():
    pool = PrefixCachingBlockPool(num_blocks=2, block_size=2)
    try:
        pool.admit([])
        raised = False
    except ValueError:
        raised = True
    assert raised, "an empty prompt has no last token to compute: ValueError"
    assert list(pool.free_queue) == [0, 1], "the rejected call changes nothing"


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

    def admit(self, tokens):
        hit = self.lookup(tokens[:-1])
        need = -(-len(tokens) // self.block_size) - len(hit)
        if need + sum(self.ref[b] == 0 for b in hit) > len(self.queue):
            return None
        self.touch(hit)
        return hit + self.allocate(need)

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
            elif rng.random() < 0.5:
                tokens = rng.choice(prefixes) + [rng.randint(0, 2) for _ in range(rng.randint(1, 5))]
                table = pool.admit(tokens)
                assert table == model.admit(tokens), f"admit({tokens}) disagrees with the model"
                if table is not None:
                    pool.cache_blocks(tokens, table, len(tokens))
                    model.cache(tokens, table, len(tokens))
                    running.append(table)
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
            assert list(pool.free_queue) == model.queue, "free queue order"
            assert list(pool.ref_cnt) == model.ref, "reference counts"
            cached = sorted(b for b in range(num_blocks) if pool.block_hash[b] is not None)
            assert cached == sorted(model.prefix_of), "which blocks still cache something"


_RNG = random.Random(22)
_SYSTEM = [_RNG.randrange(500) for _ in range(24)]
PROMPTS = [_SYSTEM + [_RNG.randrange(500) for _ in range(_RNG.randrange(3, 10))] for _ in range(5)]
OTHERS = [[_RNG.randrange(500) for _ in range(28)] for _ in range(2)]


def test_your_pool_serves_requests_on_the_model():
    """Your pool under LLMEngine, beside nano_engine's PrefixCachingBlockPool, on a small Qwen3 (the
    tiny preset's body with a 512-token vocabulary, random weights): one request, then four more that
    share its 24-token prefix and hit it, then two unrelated requests that make the pool of 20
    blocks of 4 tokens evict cached blocks, then the first prompt again. The two engines go step by
    step; the first step where yours does something else fails the test, naming the step and the
    request."""
    torch.set_num_threads(1)
    yours = PrefixCacheAdapter(PrefixCachingBlockPool(20, 4))
    package = HashedBlockCacheManager(prefix_cache.PrefixCachingBlockPool(20, 4))
    waves = [PROMPTS[:1], PROMPTS[1:], OTHERS, PROMPTS[:1]]
    run = serve_side_by_side(yours, package, waves, SamplingParams(max_tokens=6))
    assert run.hits > 0, "the requests that share the prefix were served from the cache"
