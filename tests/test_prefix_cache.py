"""PrefixCachingBlockPool: an independent implementation's transcript, vLLM's extras, and state machines
against a brute-force model that keys blocks by their exact prefix (no hashing at all)."""

import doctest
import hashlib
import json
import os
import subprocess
import sys
import textwrap

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import nano_engine.hashing
import nano_engine.prefix_cache
from nano_engine.hashing import make_hash_function
from nano_engine.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, replay
from nano_engine.paged import BlockPool
from nano_engine.prefix_cache import PrefixCachingBlockPool

# The doctest transcript of an independent implementation (a flat `prefix_cache` module, the one
# this package's default mode follows), code and outputs as it printed them (our own comments).
# Every line must hold.
CHAPTER_TRANSCRIPT = """
>>> from prefix_cache import PrefixCachingBlockPool
>>> pool = PrefixCachingBlockPool(num_blocks=4, block_size=2)
>>> a = [1, 2, 3, 4, 5]                          # two full blocks and a partial one
>>> blocks = pool.allocate(3)
>>> pool.cache_blocks(a, blocks, num_computed=5)
>>> [pool.block_hash[b] is not None for b in blocks]
[True, True, False]
>>> pool.free(blocks)
>>> list(pool.free_queue)
[3, 2, 1, 0]
>>> hit = pool.lookup([1, 2, 3, 4, 9])
>>> hit
[0, 1]
>>> pool.touch(hit)
>>> list(pool.free_queue)
[3, 2]
>>> pool.free(hit)
>>> pool.allocate(3)                             # block 1 is reused: its hash is evicted
[3, 2, 1]
>>> pool.lookup([1, 2, 3, 4, 9])
[0]
"""


def test_chapter_transcript(monkeypatch):
    # The chapter's flat module `prefix_cache` is our `nano_engine.prefix_cache`.
    monkeypatch.setitem(sys.modules, "prefix_cache", nano_engine.prefix_cache)
    test = doctest.DocTestParser().get_doctest(CHAPTER_TRANSCRIPT, {}, "chapter", None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.summarize(verbose=False) == doctest.TestResults(failed=0, attempted=15)


@pytest.mark.parametrize("module", [nano_engine.prefix_cache, nano_engine.hashing])
def test_module_doctests(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def chapter_block_hashes(tokens, block_size):
    """The chapter's chained hash, written out independently."""
    hashes, parent = [], None
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash((parent, tuple(tokens[start:start + block_size])))
        hashes.append(parent)
    return hashes


def test_builtin_hashes_are_the_chapters():
    pool = PrefixCachingBlockPool(4, 3)
    tokens = list(range(100, 111))
    assert pool.block_hashes(tokens) == chapter_block_hashes(tokens, 3)
    assert len(pool.block_hashes(tokens)) == 3  # 11 tokens: 3 full blocks, the partial one has no hash


def run_request(pool, tokens, **extra):
    """Look up, touch, allocate the rest, compute everything, cache; returns (hit, blocks)."""
    hit = pool.lookup(tokens, **extra)
    pool.touch(hit)
    new = pool.allocate(-(-len(tokens) // pool.block_size) - len(hit))
    assert new is not None
    blocks = hit + new
    pool.cache_blocks(tokens, blocks, len(tokens), **extra)
    pool.check_invariants()
    return hit, blocks


# -- extra keys --------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["cache_salt", "lora_id"])
def test_extra_keys_isolate_tenants_and_adapters(key):
    pool = PrefixCachingBlockPool(16, 4)
    system = list(range(12))
    _, a = run_request(pool, system + [50], **{key: "A"})
    pool.free(a)
    hit, b = run_request(pool, system + [60], **{key: "B"})
    assert hit == []  # same tokens, other tenant/adapter: no shared block
    pool.free(b)
    hit, c = run_request(pool, system + [70], **{key: "A"})
    assert hit == a[:3]  # same tenant/adapter still hits its own three full blocks
    pool.free(c)
    hit, d = run_request(pool, system + [80])
    assert hit == []  # and no key at all is a third, separate namespace
    pool.free(d)
    pool.check_invariants()


def test_salt_is_in_the_first_block_only_and_the_chain_carries_it():
    pool = PrefixCachingBlockPool(8, 2)
    events = []
    pool.subscribe(events.append)
    tokens = [1, 2, 3, 4, 5, 6]
    salted = pool.block_hashes(tokens, cache_salt="tenant-7")
    plain = pool.block_hashes(tokens)
    assert all(s != p for s, p in zip(salted, plain, strict=True))  # every block differs, through the chain
    blocks = pool.allocate(3)
    pool.cache_blocks(tokens, blocks, 6, cache_salt="tenant-7", lora_id=3)
    (stored,) = events
    assert stored.extra_keys == [(("lora", 3), ("salt", "tenant-7")), (("lora", 3),), (("lora", 3),)]
    assert stored.lora_id == 3 and stored.block_hashes == pool.block_hashes(tokens, cache_salt="tenant-7", lora_id=3)


def test_salt_and_adapter_with_the_same_name_do_not_meet():
    pool = PrefixCachingBlockPool(4, 2)
    assert pool.block_hashes([1, 2], cache_salt="x") != pool.block_hashes([1, 2], lora_id="x")


def test_mm_inputs_change_only_the_blocks_they_overlap():
    pool = PrefixCachingBlockPool(8, 4)
    tokens = [0] * 4 + [9] * 6 + [0] * 6  # an "image" of 6 placeholder tokens at positions 4..9
    cat = pool.block_hashes(tokens, mm_inputs=[("cat.png", 4, 6)])
    dog = pool.block_hashes(tokens, mm_inputs=[("dog.png", 4, 6)])
    assert cat[0] == dog[0]  # block 0 (positions 0..3) is before the image
    assert cat[1] != dog[1] and cat[2] != dog[2] and cat[3] != dog[3]  # 1 and 2 overlap, 3 inherits
    shifted = pool.block_hashes(tokens, mm_inputs=[("cat.png", 5, 5)])
    assert shifted[1] != cat[1]  # same image, other position in the block: other KV
    blocks = pool.allocate(4)
    pool.cache_blocks(tokens, blocks, 16, mm_inputs=[("cat.png", 4, 6)])
    pool.free(blocks)
    assert pool.lookup(tokens, mm_inputs=[("dog.png", 4, 6)]) == [blocks[0]]
    assert pool.lookup(tokens, mm_inputs=[("cat.png", 4, 6)]) == blocks


@pytest.mark.parametrize("bad", [[("img", -1, 3)], [("img", 0, 0)], [("img", 0)], [("img", 1.0, 2)]])
def test_bad_mm_inputs(bad):
    with pytest.raises(ValueError, match="mm"):
        PrefixCachingBlockPool(4, 2).lookup([1, 2, 3], mm_inputs=bad)


# -- the collision guard ---------------------------------------------------------------------


def test_colliding_hash_never_serves_other_tokens():
    pool = PrefixCachingBlockPool(8, 2, hash_algo=lambda key: 0)  # every key collides
    _, a = run_request(pool, [1, 2])
    pool.free(a)
    assert pool.lookup([3, 4]) == []  # hash 0 is cached, but it holds [1, 2]
    assert pool.lookup([1, 2]) == a


def test_colliding_parent_hash_never_serves_a_child_of_other_content():
    """Blocks [3, 4] and [5, 6] after [1, 2] collide; both prompts then continue with [7, 8].

    The two [7, 8] blocks get the same hash (same parent hash, same tokens) although their KV
    differs. Checking a hit's tokens and its parent's *hash* would serve one for the other; the
    guard links each entry to its parent's entry instead.
    """

    def bad_hash(key):
        parent, tokens = key[0], key[1]
        return hash((parent, (3, 4) if tokens == (5, 6) else tokens))

    pool = PrefixCachingBlockPool(8, 2, hash_algo=bad_hash)
    one, two = [1, 2, 5, 6, 7, 8], [1, 2, 3, 4, 7, 8]
    assert pool.block_hashes(one) == pool.block_hashes(two)  # a full collision from block 1 on
    a = pool.allocate(2)
    pool.cache_blocks(one[:4], a, 4)  # the first request has computed [1, 2, 5, 6] so far
    hit, b = run_request(pool, two)  # the second hits [1, 2] only, then computes the rest
    assert hit == a[:1]
    assert [pool.block_hash[x] is not None for x in b] == [True, False, False]
    a += pool.allocate(1)
    pool.cache_blocks(one, a, 6)  # the first request finishes its prompt
    pool.free(a)
    pool.free(b)
    pool.check_invariants()
    assert pool.lookup(one) == a
    assert pool.lookup(two) == a[:1]


def test_duplicate_blocks_stay_uncached_and_the_chain_goes_through_the_copy():
    """Two requests computed the same prompt at once; the second's later blocks still connect."""
    pool = PrefixCachingBlockPool(12, 2)
    prompt = [1, 2, 3, 4]
    a = pool.allocate(2)
    b = pool.allocate(3)  # the second request did not hit (it arrived before the first finished)
    pool.cache_blocks(prompt, a, 4)
    pool.cache_blocks(prompt + [7, 8], b, 6)
    assert [pool.block_hash[x] is None for x in b] == [True, True, False]
    pool.check_invariants()
    pool.free(a)
    pool.free(b)
    assert pool.lookup(prompt + [7, 8]) == a + b[2:]


def test_cache_blocks_rejects_a_wrong_block_table():
    pool = PrefixCachingBlockPool(6, 2)
    a = pool.allocate(2)
    pool.cache_blocks([1, 2, 3, 4], a, 4)
    b = pool.allocate(2)
    with pytest.raises(ValueError, match="other content"):
        pool.cache_blocks([9, 9, 1, 2, 3, 4], [b[0], b[1], a[1]], 6)
    with pytest.raises(ValueError, match="block table has"):
        pool.cache_blocks([1, 2, 3, 4], b[:1], 4)
    with pytest.raises(ValueError, match="twice"):
        pool.cache_blocks([5, 6, 7, 8], [b[0], b[0]], 4)
    with pytest.raises(ValueError, match="num_computed"):
        pool.cache_blocks([5, 6], b, 3)
    pool.free(a)
    with pytest.raises(ValueError, match="not allocated"):
        pool.cache_blocks([1, 2, 3, 4], a, 4)
    pool.check_invariants()


# -- free orders, LRU, pinning, reset ----------------------------------------------------------


@pytest.mark.parametrize("uncached_first, after_free, after_reuse", [
    (False, [3, 2, 1, 0], [1, 0, 2, 3]),  # chapter: every freed block to the tail
    (True, [2, 3, 1, 0], [3, 2, 1, 0]),  # vLLM: blocks without a hash to the head, last block first
])
def test_free_orders(uncached_first, after_free, after_reuse):
    pool = PrefixCachingBlockPool(4, 2, uncached_first=uncached_first)
    a = pool.allocate(3)
    pool.cache_blocks([1, 2, 3, 4, 5], a, 5)  # blocks 0 and 1 cached, block 2 (partial) not
    pool.free(a)  # reversed: 2, 1, 0
    assert list(pool.free_queue) == after_free
    b = pool.allocate(2)
    assert b == after_free[:2] and pool.last_evicted == []
    pool.free(b)
    assert list(pool.free_queue) == after_reuse
    pool.check_invariants()


def test_vllm_order_keeps_cached_blocks_longer():
    lost = {}
    for uncached_first in (False, True):
        pool = PrefixCachingBlockPool(6, 2, uncached_first=uncached_first)
        _, a = run_request(pool, [1, 2, 3, 4])  # a cached prefix
        scratch = pool.allocate(2)  # a request that caches nothing (e.g. still in its first chunk)
        pool.free(a)
        pool.free(scratch)
        pool.allocate(4)  # pressure: four blocks are needed again
        lost[uncached_first] = [b for b, _ in pool.last_evicted]
    assert lost[False] == [1, 0]  # chapter order: the cached blocks sit before the scratch ones
    assert lost[True] == []  # vLLM order: the scratch blocks are reused first, the prefix survives


def test_after_all_frees_blocks_stay_cached_and_are_evicted_in_lru_order():
    pool = PrefixCachingBlockPool(6, 2)
    prompts = {"A": [1, 1, 1, 1], "B": [2, 2, 2, 2], "C": [3, 3, 3, 3]}
    owned = {name: run_request(pool, p)[1] for name, p in prompts.items()}
    for name in "ABC":
        pool.free(owned[name])
    assert pool.ref_cnt == [0] * 6 and pool.num_free == 6
    assert sorted(pool.hash_to_block.values()) == list(range(6))  # every block still caches
    assert list(pool.free_queue) == owned["A"][::-1] + owned["B"][::-1] + owned["C"][::-1]
    hit, again = run_request(pool, prompts["A"])  # A is used again: now the most recent
    assert hit == owned["A"]
    pool.free(again)
    assert pool.allocate(2) == owned["B"][::-1]  # B is the least recently used
    assert sorted(pool.last_evicted) == sorted((b, pool.block_hashes(prompts["B"])[i]) for i, b in enumerate(owned["B"]))
    assert pool.lookup(prompts["B"]) == []
    assert pool.lookup(prompts["C"]) == owned["C"] and pool.lookup(prompts["A"]) == owned["A"]
    assert pool.allocate(2) == owned["C"][::-1]
    pool.check_invariants()


def test_pinned_prefix_survives_pressure_until_unpinned():
    pool = PrefixCachingBlockPool(4, 2)
    system = [5, 6, 7, 8]
    _, a = run_request(pool, system)
    pool.free(a)
    assert pool.pin(system) == a and pool.pinned_blocks == set(a)
    pool.check_invariants()
    assert pool.allocate(3) is None  # only two blocks are free; the pinned two are not
    other = pool.allocate(2)
    assert pool.last_evicted == [] and pool.lookup(system) == a
    pool.free(other)
    other = pool.allocate(2)  # again, and again nothing pinned is touched
    assert set(other).isdisjoint(a)
    pool.free(other)
    hit, b = run_request(pool, system + [9])
    assert hit == a  # a pinned prefix is shared like any hit
    pool.free(b)
    pool.unpin(system)
    assert pool.pinned_blocks == set() and pool.ref_cnt == [0] * 4
    pool.allocate(4)
    assert sorted(b for b, _ in pool.last_evicted) == sorted(a)  # evictable again
    with pytest.raises(ValueError, match="no pin"):
        pool.unpin(system)


def test_pin_twice_needs_two_unpins_and_pin_of_nothing_is_empty():
    pool = PrefixCachingBlockPool(4, 2)
    assert pool.pin([1, 2]) == []
    _, a = run_request(pool, [1, 2])
    pool.free(a)
    pool.pin([1, 2])
    pool.pin([1, 2])
    assert pool.ref_cnt[a[0]] == 2
    pool.unpin([1, 2])
    assert pool.ref_cnt[a[0]] == 1
    pool.unpin([1, 2])
    pool.unpin([1, 2])  # the empty pin from the start
    assert pool.ref_cnt == [0] * 4
    pool.check_invariants()


def test_reset_drops_the_cache_only_when_nothing_is_in_use():
    pool = PrefixCachingBlockPool(4, 2)
    events = []
    pool.subscribe(events.append)
    _, a = run_request(pool, [1, 2, 3, 4])
    assert pool.reset() is False and pool.lookup([1, 2, 3, 4]) == a
    pool.free(a)
    pool.pin([1, 2])
    assert pool.reset() is False  # a pin is a use
    pool.unpin([1, 2])
    assert pool.reset() is True
    assert pool.hash_to_block == {} and pool.block_hash == [None] * 4 and pool.lookup([1, 2, 3, 4]) == []
    assert isinstance(events[-1], AllBlocksCleared) and replay(events) == set()
    pool.check_invariants()


def test_lookup_max_tokens_and_statistics():
    pool = PrefixCachingBlockPool(4, 2)
    prompt = [1, 2, 3, 4]
    _, a = run_request(pool, prompt)
    pool.free(a)
    pool.reset_stats()
    assert pool.lookup(prompt) == a  # the whole prompt is cached ...
    assert pool.lookup(prompt, max_tokens=len(prompt) - 1) == a[:1]  # ... but the engine keeps the last token
    assert pool.lookup(prompt, max_tokens=100) == a
    assert (pool.num_queries, pool.num_hits) == (4 + 3 + 4, 4 + 2 + 4)
    assert pool.hit_rate == 10 / 11
    pool.reset_stats()
    assert (pool.num_queries, pool.num_hits, pool.hit_rate) == (0, 0, 0.0)
    with pytest.raises(ValueError, match="max_tokens"):
        pool.lookup(prompt, max_tokens=-1)


def test_bad_arguments():
    with pytest.raises(ValueError, match="block_size"):
        PrefixCachingBlockPool(4, 0)
    with pytest.raises(ValueError, match="num_blocks"):
        PrefixCachingBlockPool(0, 2)
    with pytest.raises(ValueError, match="hash_algo"):
        PrefixCachingBlockPool(4, 2, hash_algo="md5")
    pool = PrefixCachingBlockPool(4, 2)
    with pytest.raises(ValueError, match="caches nothing"):
        pool.touch([0])
    with pytest.raises(ValueError, match="not in the pool"):
        pool.touch([7])
    with pytest.raises(ValueError, match="allocate"):
        pool.allocate(-1)
    with pytest.raises(ValueError, match="not allocated"):
        pool.free([0])
    pool.check_invariants()


def test_is_a_block_pool():
    assert issubclass(PrefixCachingBlockPool, BlockPool)
    pool = PrefixCachingBlockPool(3, 2)
    assert pool.allocate(4) is None and pool.num_free == 3 and pool.last_evicted == []


# -- hash choices ------------------------------------------------------------------------------

STABILITY_SCRIPT = textwrap.dedent("""
    import json
    from nano_engine.prefix_cache import PrefixCachingBlockPool
    out = {}
    for algo in ("builtin", "sha256", "xxhash"):
        pool = PrefixCachingBlockPool(4, 4, hash_algo=algo)
        out[algo] = pool.block_hashes(list(range(12)), lora_id="adapter-a", cache_salt="tenant-1",
                                      mm_inputs=[("img-1", 2, 5)])
    print(json.dumps(out))
""")


def hashes_in_fresh_interpreter(seed: str) -> dict:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    done = subprocess.run([sys.executable, "-c", STABILITY_SCRIPT], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_stable_hashes_agree_across_interpreters():
    one, two = hashes_in_fresh_interpreter("1"), hashes_in_fresh_interpreter("2")
    here = json.loads(json.dumps({algo: PrefixCachingBlockPool(4, 4, hash_algo=algo).block_hashes(
        list(range(12)), lora_id="adapter-a", cache_salt="tenant-1", mm_inputs=[("img-1", 2, 5)])
        for algo in ("sha256", "xxhash")}))
    for algo in ("sha256", "xxhash"):
        assert one[algo] == two[algo] == here[algo]
        assert len(set(one[algo])) == 3
    assert one["builtin"] != two["builtin"]  # string keys hash differently per interpreter


def test_sha256_value_is_pinned():
    """sha256 over the memo-free protocol-5 pickle of (None, (1, 2, 3, 4)), bytes spelled out."""
    pickled = b"\x80\x05\x95\r\x00\x00\x00\x00\x00\x00\x00N(K\x01K\x02K\x03K\x04t\x86."
    pool = PrefixCachingBlockPool(2, 4, hash_algo="sha256")
    assert pool.block_hashes([1, 2, 3, 4])[0] == int(hashlib.sha256(pickled).hexdigest(), 16)


def test_equal_keys_hash_equally_whatever_objects_they_share():
    """Plain pickle would write a back-reference for a repeated string object."""
    sha = make_hash_function("sha256")
    s = "tenant"
    copy = "".join(["ten", "ant"])
    assert s == copy and s is not copy
    assert sha((None, (1,), (("lora", s), ("salt", s)))) == sha((None, (1,), (("lora", s), ("salt", copy))))


def test_xxhash_missing_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "xxhash", None)
    with pytest.raises(ImportError, match="pip install xxhash"):
        PrefixCachingBlockPool(4, 2, hash_algo="xxhash")


@pytest.mark.parametrize("algo", ["sha256", "xxhash"])
def test_stable_algorithms_run_the_transcript_flow(algo):
    pool = PrefixCachingBlockPool(4, 2, hash_algo=algo)
    blocks = pool.allocate(3)
    pool.cache_blocks([1, 2, 3, 4, 5], blocks, 5)
    pool.free(blocks)
    assert pool.lookup([1, 2, 3, 4, 9]) == [0, 1]
    assert all(h.bit_length() > 64 for h in pool.hash_to_block)  # 256 / 128-bit digests


# -- KV events -----------------------------------------------------------------------------------


def test_events_describe_stores_and_evictions():
    pool = PrefixCachingBlockPool(4, 2)
    events = []
    unsubscribe = pool.subscribe(events.append)
    a = pool.allocate(3)
    pool.cache_blocks([1, 2, 3], a, 3)  # first forward: one full block
    pool.cache_blocks([1, 2, 3, 4, 5, 6], a, 6)  # the next chunk fills two more
    hashes = pool.block_hashes([1, 2, 3, 4, 5, 6])
    assert events == [
        BlockStored([hashes[0]], None, [1, 2], 2, None, [None]),
        BlockStored(hashes[1:], hashes[0], [3, 4, 5, 6], 2, None, [None, None]),
    ]
    # a consumer can verify the chain from the event alone (built-in hash: the chapter's formula)
    for event in events:
        parent = event.parent_block_hash
        for i, h in enumerate(event.block_hashes):
            parent = hash((parent, tuple(event.token_ids[2 * i:2 * i + 2])))
            assert parent == h
    pool.free(a)
    pool.allocate(4)
    assert events[-1] == BlockRemoved([hashes[2], hashes[1], hashes[0]])
    unsubscribe()
    pool.reset()
    assert not isinstance(events[-1], AllBlocksCleared)


# -- state machines against a brute-force model --------------------------------------------------

BLOCK_SIZE = 2
NUM_BLOCKS = 8
token_lists = st.lists(st.integers(0, 2), min_size=1, max_size=9)
tenants = st.sampled_from([{}, {"cache_salt": "s"}, {"lora_id": 1}, {"lora_id": 1, "cache_salt": "s"}])


def exact_key(tokens, extra, i):
    """The identity of block i's KV: the whole prefix up to its end, plus the extra keys."""
    return extra.get("lora_id"), extra.get("cache_salt"), tuple(tokens[:(i + 1) * BLOCK_SIZE])


class PrefixPoolMachine(RuleBasedStateMachine):
    """Requests go through the pool as an engine drives it; a model mirrors every step.

    The model keeps the free queue as a list, reference counts, and a cache keyed by the exact
    prefix (no hashing). ``content`` records what KV each block physically holds (set when a
    request computes it), which is the ground truth a hit must agree with.
    With ``EXACT`` (a hash that does not collide in practice) the pool must hit exactly what the
    model hits; with a colliding hash it may hit less, but never a block holding other content.
    """

    HASH_ALGO = "builtin"
    UNCACHED_FIRST = False
    EXACT = True

    def __init__(self):
        super().__init__()
        self.pool = PrefixCachingBlockPool(NUM_BLOCKS, BLOCK_SIZE, hash_algo=self.HASH_ALGO,
                                           uncached_first=self.UNCACHED_FIRST)
        self.events = []
        self.pool.subscribe(self.events.append)
        self.replayed: set[int] = set()
        self.ref = [0] * NUM_BLOCKS
        self.free = list(range(NUM_BLOCKS))
        self.cache: dict[tuple, int] = {}  # exact key -> block
        self.cached_key: dict[int, tuple] = {}  # block -> exact key
        self.content: dict[int, tuple] = {}  # block -> exact key of the KV it holds
        self.requests: list[dict] = []
        self.seen: list[tuple[list[int], dict]] = []  # every prompt so far, to draw related ones
        self.pins: dict[tuple, list[list[int]]] = {}  # (tokens, extra) -> stack of pinned block lists
        self.queries = self.hits = 0

    # model operations
    def model_match(self, tokens, extra, end):
        hit = []
        for i in range(end // BLOCK_SIZE):
            b = self.cache.get(exact_key(tokens, extra, i))
            if b is None:
                break
            hit.append(b)
        return hit

    def model_touch(self, blocks):
        for b in blocks:
            if self.ref[b] == 0:
                self.free.remove(b)
            self.ref[b] += 1

    def model_free(self, blocks):
        fresh = []  # vLLM: BlockPool.free_blocks(reversed(blocks)) prepends these as a list
        for b in reversed(blocks):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                if self.UNCACHED_FIRST and b not in self.cached_key:
                    fresh.append(b)
                else:
                    self.free.append(b)
        self.free[:0] = fresh

    def model_allocate(self, n):
        taken, self.free = self.free[:n], self.free[n:]
        for b in taken:
            self.ref[b] = 1
            self.content.pop(b, None)  # about to be overwritten
            key = self.cached_key.pop(b, None)
            if key is not None:
                del self.cache[key]
        return taken

    def check_hit(self, tokens, extra, end, hit):
        for i, b in enumerate(hit):  # ground truth: the block really holds this prefix
            assert self.content.get(b) == exact_key(tokens, extra, i), f"block {b} served for the wrong prefix"
        if self.EXACT:
            assert hit == self.model_match(tokens, extra, end)

    def start(self, tokens, extra):
        """Admit a request as an engine does: look up, take the hits, allocate the rest."""
        self.seen.append((tokens, extra))
        end = len(tokens) - 1  # the engine keeps the last prompt token to compute
        hit = self.pool.lookup(tokens, max_tokens=end, **extra)
        self.queries += end
        self.hits += len(hit) * BLOCK_SIZE
        self.check_hit(tokens, extra, end, hit)
        need = -(-len(tokens) // BLOCK_SIZE) - len(hit)
        self.pool.touch(hit)
        self.model_touch(hit)
        new = self.pool.allocate(need)
        if need > len(self.free):
            assert new is None
            self.pool.free(hit)
            self.model_free(hit)
            return
        assert new == self.model_allocate(need)
        self.requests.append({"tokens": tokens, "extra": extra, "blocks": hit + new, "computed": len(hit) * BLOCK_SIZE})

    def related(self, data, suffix):
        """A prompt sharing a prefix with an earlier one (same tenant, or a random one)."""
        tokens, extra = data.draw(st.sampled_from(self.seen))
        cut = data.draw(st.integers(0, len(tokens)))
        if data.draw(st.booleans()):
            extra = data.draw(tenants)
        return (tokens[:cut] + suffix) or [0], extra

    # rules
    @rule(tokens=token_lists, extra=tenants)
    def start_request(self, tokens, extra):
        self.start(tokens, extra)

    @precondition(lambda self: self.seen)
    @rule(data=st.data(), suffix=st.lists(st.integers(0, 2), max_size=4))
    def start_related_request(self, data, suffix):
        self.start(*self.related(data, suffix))

    @precondition(lambda self: self.requests)
    @rule(data=st.data(), k=st.integers(1, 5))
    def compute(self, data, k):
        req = data.draw(st.sampled_from(self.requests))
        tokens, extra, blocks = req["tokens"], req["extra"], req["blocks"]
        req["computed"] = min(len(tokens), req["computed"] + k)
        for i in range(req["computed"] // BLOCK_SIZE):
            key = exact_key(tokens, extra, i)
            self.content[blocks[i]] = key
            if blocks[i] not in self.cached_key and key not in self.cache:
                self.cache[key] = blocks[i]
                self.cached_key[blocks[i]] = key
        self.pool.cache_blocks(tokens, blocks, req["computed"], **extra)

    @precondition(lambda self: self.requests)
    @rule(data=st.data())
    def finish(self, data):
        req = self.requests.pop(data.draw(st.integers(0, len(self.requests) - 1)))
        self.pool.free(req["blocks"])
        self.model_free(req["blocks"])

    @precondition(lambda self: self.seen)
    @rule(data=st.data(), suffix=st.lists(st.integers(0, 2), max_size=2))
    def probe(self, data, suffix):
        tokens, extra = self.related(data, suffix)
        hit = self.pool.lookup(tokens, **extra)
        self.queries += len(tokens)
        self.hits += len(hit) * BLOCK_SIZE
        self.check_hit(tokens, extra, len(tokens), hit)

    @precondition(lambda self: self.seen)
    @rule(data=st.data(), max_tokens=st.none() | st.integers(0, 10))
    def peek(self, data, max_tokens):
        tokens, extra = self.related(data, [])
        hit = self.pool.peek(tokens, max_tokens=max_tokens, **extra)  # like lookup, not counted
        self.check_hit(tokens, extra, len(tokens) if max_tokens is None else min(max_tokens, len(tokens)), hit)

    @precondition(lambda self: self.seen)
    @rule(data=st.data())
    def pin(self, data):
        tokens, extra = self.related(data, [])
        blocks = self.pool.pin(tokens, **extra)
        self.check_hit(tokens, extra, len(tokens), blocks)
        self.model_touch(blocks)
        self.pins.setdefault((tuple(tokens), tuple(sorted(extra.items()))), []).append(blocks)

    @precondition(lambda self: self.pins)
    @rule(data=st.data())
    def unpin(self, data):
        tokens, extra = data.draw(st.sampled_from(sorted(self.pins)))
        blocks = self.pins[tokens, extra].pop()  # unpin releases the most recent such pin
        if not self.pins[tokens, extra]:
            del self.pins[tokens, extra]
        self.pool.unpin(list(tokens), **dict(extra))
        self.model_free(blocks)

    @rule()
    def reset(self):
        done = self.pool.reset()
        assert done == (not any(self.ref))
        if done:
            self.cache.clear()
            self.cached_key.clear()

    @invariant()
    def agrees_with_model(self):
        self.pool.check_invariants()
        for event in self.events:
            replay([event], self.replayed)
        self.events.clear()
        assert self.replayed == set(self.pool.hash_to_block)
        assert self.pool.ref_cnt == self.ref
        assert list(self.pool.free_queue) == self.free
        assert (self.pool.num_queries, self.pool.num_hits) == (self.queries, self.hits)
        if self.EXACT:
            assert {b for b in range(NUM_BLOCKS) if self.pool.block_hash[b] is not None} == set(self.cached_key)
        assert self.pool.pinned_blocks == {b for stack in self.pins.values() for bs in stack for b in bs}


class UncachedFirstMachine(PrefixPoolMachine):
    UNCACHED_FIRST = True


class Sha256Machine(PrefixPoolMachine):
    HASH_ALGO = "sha256"


class CollidingHashMachine(PrefixPoolMachine):
    HASH_ALGO = staticmethod(lambda key: hash(key) % 3)  # three hash values for everything
    EXACT = False


_settings = settings(max_examples=120, stateful_step_count=30, deadline=None)
TestPrefixPool = PrefixPoolMachine.TestCase
TestPrefixPool.settings = _settings
TestPrefixPoolUncachedFirst = UncachedFirstMachine.TestCase
TestPrefixPoolUncachedFirst.settings = _settings
TestPrefixPoolSha256 = Sha256Machine.TestCase
TestPrefixPoolSha256.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
TestPrefixPoolCollidingHash = CollidingHashMachine.TestCase
TestPrefixPoolCollidingHash.settings = _settings
