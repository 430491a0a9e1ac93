"""Tests for exercise 24: a prefix-caching block pool with LoRA and cache_salt extra keys, and the
pool under LLMEngine on a small Qwen3.

The hash rule is part of the interface (it is what KV events and routers recompute), so one test
checks exact values with the formula from the statement; the others check behaviour, and the
random test compares the pool with a model that keys cached blocks by (adapter, salt, prefix).
"""

import random

import torch
from solution_under_test import PrefixCachingBlockPool

from nano_engine import prefix_cache
from nano_engine.cache_adapters import PrefixCacheAdapter, serve_side_by_side
from nano_engine.cache_manager import HashedBlockCacheManager
from nano_engine.engine import SamplingParams


def _expected_hashes(tokens, block_size, lora_id=None, cache_salt=None):
    """The statement's rule, written out independently of the solution."""
    out, parent = [], None
    for i in range(len(tokens) // block_size):
        block = tuple(tokens[i * block_size:(i + 1) * block_size])
        extra = [("lora", lora_id)] if lora_id is not None else []
        if i == 0 and cache_salt is not None:
            extra.append(("salt", cache_salt))
        parent = hash((parent, block, tuple(extra))) if extra else hash((parent, block))
        out.append(parent)
    return out


def _cached_pool(tokens, lora_id=None, cache_salt=None, num_blocks=8, block_size=2):
    pool = PrefixCachingBlockPool(num_blocks=num_blocks, block_size=block_size)
    blocks = pool.allocate(len(tokens) // block_size)
    pool.cache_blocks(tokens, blocks, num_computed=len(tokens), lora_id=lora_id, cache_salt=cache_salt)
    pool.free(blocks)
    return pool, blocks


def test_example_tenants_do_not_share():
    system = [1, 2, 3, 4]
    pool, blocks = _cached_pool(system, cache_salt="tenant-a")
    assert pool.lookup(system + [9], cache_salt="tenant-a") == blocks, "the same tenant hits its salted blocks"
    assert pool.lookup(system + [9], cache_salt="tenant-b") == [], "another tenant's salt gives other hashes: no hit"
    assert pool.lookup(system + [9]) == [], "an unsalted request must not see salted blocks"


def test_example_hash_rule():
    pool = PrefixCachingBlockPool(num_blocks=4, block_size=2)
    tokens = [1, 2, 3, 4, 5, 6, 7]
    for lora_id, salt in [(None, None), ("sql", None), (None, "t"), ("sql", "t")]:
        got = pool.block_hashes(tokens, lora_id=lora_id, cache_salt=salt)
        expected = _expected_hashes(tokens, 2, lora_id, salt)
        assert got == expected, f"hashes for lora_id={lora_id!r}, cache_salt={salt!r}"


def test_chapter_transcript_without_extra_keys():
    pool = PrefixCachingBlockPool(num_blocks=4, block_size=2)
    blocks = pool.allocate(3)
    pool.cache_blocks([1, 2, 3, 4, 5], blocks, num_computed=5)
    assert [pool.block_hash[b] is not None for b in blocks] == [True, True, False], (
        "the two full blocks are cached; the partial block [5] is not")
    pool.free(blocks)
    assert list(pool.free_queue) == [3, 2, 1, 0], "free walks the blocks last first, to the tail"
    hit = pool.lookup([1, 2, 3, 4, 9])
    assert hit == [0, 1], "both cached blocks hit"
    pool.touch(hit)
    assert list(pool.free_queue) == [3, 2], "touched hits leave the free queue"
    pool.free(hit)
    assert pool.allocate(3) == [3, 2, 1], "the head goes first: block 1 is reused"
    assert pool.lookup([1, 2, 3, 4, 9]) == [0], "reusing block 1 evicted [1, 2, 3, 4]"


def test_adapters_do_not_share():
    prompt = [5, 6, 7, 8, 9]
    pool, blocks = _cached_pool(prompt[:4], lora_id="sql")
    assert pool.lookup(prompt, lora_id="sql") == blocks, "the same adapter hits"
    assert pool.lookup(prompt, lora_id="chat") == [], "another adapter computes other KV: no hit"
    assert pool.lookup(prompt) == [], "the base model must not read an adapter's KV"
    pool, blocks = _cached_pool(prompt[:4])
    assert pool.lookup(prompt, lora_id="sql") == [], "nor an adapter the base model's"


def test_salt_and_adapter_combine():
    prompt = [1, 1, 2, 2, 3]
    pool, blocks = _cached_pool(prompt[:4], lora_id="x", cache_salt="a")
    assert pool.lookup(prompt, lora_id="x", cache_salt="a") == blocks, "the same adapter and tenant hit"
    assert pool.lookup(prompt, lora_id="x", cache_salt="b") == [], "another tenant: no hit"
    assert pool.lookup(prompt, lora_id="y", cache_salt="a") == [], "another adapter: no hit"


def test_a_salt_never_passes_for_an_adapter_of_the_same_name():
    pool, blocks = _cached_pool([1, 2], lora_id="x")
    assert pool.lookup([1, 2, 3], lora_id="x") == blocks, "the same adapter hits"
    assert pool.lookup([1, 2, 3], cache_salt="x") == [], "extra keys are tagged: ('lora', 'x') != ('salt', 'x')"


def test_same_tenant_shares_the_common_prefix():
    system = [7, 7, 8, 8]
    pool, blocks = _cached_pool(system + [1, 1], cache_salt="a", num_blocks=10)
    assert pool.lookup(system + [2, 2, 3], cache_salt="a") == blocks[:2], (
        "the same tenant shares the common system prompt: its two blocks")


def test_salt_reaches_every_block_through_the_chain():
    pool = PrefixCachingBlockPool(num_blocks=4, block_size=2)
    tokens = list(range(10))
    plain, salted = pool.block_hashes(tokens), pool.block_hashes(tokens, cache_salt="s")
    assert len(salted) == 5, "5 full blocks, 5 hashes"
    for i, (a, b) in enumerate(zip(plain, salted, strict=False)):
        assert a != b, f"block {i}: the salt of block 0 reaches it through the parent hashes"


def test_lookup_counts_tokens():
    pool, _ = _cached_pool([1, 2, 3, 4], cache_salt="a")
    pool.lookup([1, 2, 3, 4, 5], cache_salt="a")
    pool.lookup([1, 2, 3], cache_salt="b")
    assert (pool.num_queries, pool.num_hits) == (8, 4), (
        "8 tokens looked up, 4 served (the other tenant's lookup hits nothing)")


def test_cache_blocks_keeps_the_first_copy():
    pool = PrefixCachingBlockPool(num_blocks=4, block_size=2)
    first = pool.allocate(1)
    second = pool.allocate(1)                 # computed the same block again, before the first was cached
    pool.cache_blocks([4, 4], first, num_computed=2, cache_salt="a")
    pool.cache_blocks([4, 4], second, num_computed=2, cache_salt="a")
    assert pool.block_hash[second[0]] is None, "the hash is already cached by the first block"
    assert list(pool.hash_to_block.values()) == first, "only the first copy is registered"
    pool.cache_blocks([4, 4], second, num_computed=2, cache_salt="b")
    assert pool.block_hash[second[0]] is not None, "another tenant's copy is a different entry"
    assert sorted(pool.hash_to_block.values()) == [first[0], second[0]], "each tenant's copy is its own entry"


def test_a_block_that_has_a_hash_keeps_it():
    """cache_blocks leaves a block that already caches a hash alone, even for other tokens."""
    pool = PrefixCachingBlockPool(num_blocks=2, block_size=2)
    [b] = pool.allocate(1)
    pool.cache_blocks([1, 2], [b], num_computed=2)
    pool.cache_blocks([5, 6], [b], num_computed=2)
    assert pool.block_hash[b] == _expected_hashes([1, 2], 2)[0], "the block keeps the hash of its first content"
    assert pool.hash_to_block == {pool.block_hash[b]: b}, "and only that entry is cached"


def test_an_empty_salt_or_adapter_name_is_still_a_key():
    """The keys are added when they are not None: "" is a tenant and an adapter name like any other."""
    tokens = [1, 2, 3, 4]
    assert PrefixCachingBlockPool(4, 2).block_hashes(tokens, cache_salt="") == _expected_hashes(tokens, 2, cache_salt=""), (
        "the salt '' is added to block 0's keys like any other")
    assert PrefixCachingBlockPool(4, 2).block_hashes(tokens, lora_id="") == _expected_hashes(tokens, 2, lora_id=""), (
        "the adapter '' is added to every block's keys like any other")
    pool, _ = _cached_pool(tokens)
    assert pool.lookup(tokens, cache_salt="") == [], 'the salt "" is a tenant: no hit on unsalted blocks'
    assert pool.lookup(tokens, lora_id="") == [], 'the adapter "" is an adapter: no hit on base-model blocks'


def test_lookup_stops_at_the_first_miss():
    """Block 0's hash evicted, block 1's still cached: a lookup must stop at block 0, since block 1's
    KV is only valid after block 0's tokens."""
    pool = PrefixCachingBlockPool(num_blocks=2, block_size=2)
    blocks = pool.allocate(2)
    pool.cache_blocks([1, 2, 3, 4], blocks, num_computed=4)
    pool.free([blocks[0]])
    pool.free([blocks[1]])                    # block 0 is now at the head of the free queue
    assert pool.allocate(1) == [blocks[0]], (
        "block 0 is at the head of the free queue")    # ... and reusing it evicts the first block's hash
    assert pool.lookup([1, 2, 3, 4]) == [], (
        "block 0's hash is gone: the lookup stops there, although block 1 is cached")



def _plant_hash(pool, b, h):
    """Make block ``b`` hold hash ``h``, as if cache_blocks had met it. (nano_engine's own pool,
    which also passes these tests, keeps every cached copy in ``hash_to_blocks``.)"""
    pool.block_hash[b] = h
    if hasattr(pool, "hash_to_blocks"):
        pool.hash_to_blocks[h] = {b: None}
    else:
        pool.hash_to_block[h] = b

def test_a_hash_of_zero_is_still_a_hash():
    """Any int can be a block hash, 0 included: `if block_hash[b]:` would treat a cached 0 as no hash."""
    pool = PrefixCachingBlockPool(num_blocks=1, block_size=2)
    [b] = pool.allocate(1)
    _plant_hash(pool, b, 0)      # as if cache_blocks had met a hash of 0
    pool.cache_blocks([3, 4], [b], num_computed=2)        # b already caches a hash: left alone
    assert pool.hash_to_block == {0: b}, "a block that caches hash 0 is left alone by cache_blocks"
    assert pool.block_hash[b] == 0, "the block still caches hash 0"
    pool.free([b])
    assert pool.allocate(1) == [b], "the only block is reused"
    assert pool.hash_to_block == {}, "reusing the block evicts hash 0"
    assert pool.block_hash[b] is None, "the reused block caches nothing"


def test_only_computed_full_blocks_are_cached():
    pool = PrefixCachingBlockPool(num_blocks=4, block_size=2)
    blocks = pool.allocate(3)
    pool.cache_blocks([1, 2, 3, 4, 5, 6], blocks, num_computed=3, lora_id="x")
    assert [pool.block_hash[b] is not None for b in blocks] == [True, False, False], (
        "only the one full block among the 3 computed tokens is cached")


def test_free_queue_behaviour():
    pool = PrefixCachingBlockPool(num_blocks=4, block_size=2)
    assert pool.allocate(5) is None, "5 blocks from a pool of 4: None"
    assert list(pool.free_queue) == [0, 1, 2, 3], "a refused allocate takes nothing"
    blocks = pool.allocate(2)
    pool.cache_blocks([1, 2, 3, 4], blocks, num_computed=4, cache_salt="a")
    hit = pool.lookup([1, 2, 3, 4, 5], cache_salt="a")
    pool.touch(hit)                           # shared while the first request runs
    assert list(pool.ref_cnt) == [2, 2, 0, 0], "two requests share the two blocks"
    pool.free(blocks)
    assert list(pool.free_queue) == [2, 3], "still used by the second request: not free"
    pool.free(hit)
    assert list(pool.free_queue) == [2, 3, 1, 0], "the last free queues them, last block first"
    assert pool.allocate(3) == [2, 3, 1], "the head goes first: block 1 is reused"
    assert pool.block_hash[1] is None, "block 1 was reused: its hash is evicted"
    assert len(pool.hash_to_block) == 1, "only block 0's hash is left"
    assert pool.lookup([1, 2, 3, 4, 5], cache_salt="a") == [0], "block 0 still hits for its tenant"


def test_random_tenants_against_a_model():
    rng = random.Random(131)
    tenants = [(None, None), ("sql", None), (None, "a"), (None, "b"), ("sql", "a")]
    for _trial in range(20):
        num_blocks, bs = rng.randint(3, 10), rng.randint(1, 3)
        pool = PrefixCachingBlockPool(num_blocks, bs)
        queue, ref, key_of = list(range(num_blocks)), [0] * num_blocks, {}   # block -> (lora, salt, prefix)
        heads = [[rng.randint(0, 2) for _ in range(rng.randint(0, 6))] for _ in range(3)]
        running = []
        for _step in range(60):
            if running and (rng.random() < 0.4 or len(running) > 3):
                blocks = running.pop(rng.randrange(len(running)))
                pool.free(blocks)
                for b in blocks[::-1]:
                    ref[b] -= 1
                    if ref[b] == 0:
                        queue.append(b)
            else:
                lora, salt = rng.choice(tenants)
                tokens = rng.choice(heads) + [rng.randint(0, 2) for _ in range(rng.randint(1, 5))]
                owner = {k: b for b, k in key_of.items()}
                expected_hit = []
                for end in range(bs, len(tokens) + 1, bs):
                    if (lora, salt, tuple(tokens[:end])) not in owner:
                        break
                    expected_hit.append(owner[(lora, salt, tuple(tokens[:end]))])
                hit = pool.lookup(tokens, lora_id=lora, cache_salt=salt)
                assert hit == expected_hit, "lookup must hit exactly this tenant's cached prefix"
                pool.touch(hit)
                for b in hit:
                    if ref[b] == 0:
                        queue.remove(b)
                    ref[b] += 1
                need = -(-len(tokens) // bs) - len(hit)
                new = pool.allocate(need)
                if need > len(queue):
                    assert new is None, "allocate with too few free blocks returns None"
                    pool.free(hit)
                    for b in hit[::-1]:
                        ref[b] -= 1
                        if ref[b] == 0:
                            queue.append(b)
                    continue
                assert new == queue[:need], "allocate takes the head of the free queue"
                for b in new:
                    queue.remove(b)
                    key_of.pop(b, None)
                    ref[b] = 1
                blocks = hit + new
                pool.cache_blocks(tokens, blocks, len(tokens), lora_id=lora, cache_salt=salt)
                known = set(key_of.values())
                for i, end in enumerate(range(bs, len(tokens) + 1, bs)):
                    key = (lora, salt, tuple(tokens[:end]))
                    if blocks[i] not in key_of and key not in known:
                        key_of[blocks[i]] = key
                        known.add(key)
                running.append(blocks)
            assert list(pool.free_queue) == queue, "free queue order"
            assert list(pool.ref_cnt) == ref, "reference counts"
            cached = sorted(b for b in range(num_blocks) if pool.block_hash[b] is not None)
            assert cached == sorted(key_of), "which blocks still cache something"


_RNG = random.Random(24)
_SYSTEM = [_RNG.randrange(500) for _ in range(24)]
PROMPTS = [_SYSTEM + [_RNG.randrange(500) for _ in range(_RNG.randrange(3, 10))] for _ in range(6)]


def test_your_pool_serves_two_tenants_on_the_model():
    """Your pool under LLMEngine, beside nano_engine's PrefixCachingBlockPool, on a small Qwen3 (the
    tiny preset's body with a 512-token vocabulary, random weights): two tenants send prompts that
    share one 24-token system prompt, each with its own cache_salt. Each tenant's later requests hit
    what the tenant cached, never the other's. The two engines go step by step; the first step where
    yours does something else fails the test, naming the step and the request."""
    torch.set_num_threads(1)
    a, b = SamplingParams(max_tokens=6, cache_salt="tenant-a"), SamplingParams(max_tokens=6, cache_salt="tenant-b")
    waves = [[(PROMPTS[0], a)], [(PROMPTS[1], a), (PROMPTS[2], b)], [(PROMPTS[3], b), (PROMPTS[4], a), PROMPTS[5]]]
    yours = PrefixCacheAdapter(PrefixCachingBlockPool(24, 4))
    package = HashedBlockCacheManager(prefix_cache.PrefixCachingBlockPool(24, 4))
    run = serve_side_by_side(yours, package, waves, SamplingParams(max_tokens=6))
    assert run.cached_tokens[2] == 0, "tenant b's first request finds nothing of tenant a's"
    assert run.cached_tokens[3] > 0, "tenant b's second request hits what tenant b cached"
