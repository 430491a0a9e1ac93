"""vLLM mode of ``PrefixCachingBlockPool``: scenarios ported from vLLM's own tests.

Each test names the vLLM test it comes from (``tests/v1/core/test_prefix_caching.py`` and
``tests/v1/core/test_kv_cache_utils.py``, read on vLLM's main branch in 2026-11). The code is
ours; the scenario and the expected block ids, queue orders and reference counts are theirs.

Two translations:

* vLLM's pool reserves block 0 as the *null block*, so its block ids are ours plus one (a vLLM
  pool of 11 blocks is our pool of 10, and vLLM's ``[5, 4, 6, ...]`` is our ``[4, 3, 5, ...]``).
* vLLM's ``KVCacheManager`` is replaced by the three calls it makes on the pool, in
  :func:`allocate_slots` below: ``get_computed_blocks`` is ``lookup`` of all but the last token;
  ``allocate_slots`` touches the hits, allocates the missing blocks and registers the full blocks
  of the tokens scheduled in this step (``cache_blocks`` at allocation time); ``free`` frees the
  block table (the pool reverses it, as ``SingleTypeKVCacheManager.free`` does).
"""

from collections import Counter

import pytest

from nano_engine.hashing import cbor_dumps, make_hash_function, none_hash
from nano_engine.kv_events import BlockRemoved, BlockStored, replay
from nano_engine.prefix_cache import PrefixCachingBlockPool

BLOCK = 16


class Request:
    """What vLLM's tests build with ``make_request``: token ids and, once scheduled, a block table."""

    def __init__(self, token_ids, **extra):
        self.token_ids, self.extra, self.blocks, self.hits = list(token_ids), extra, [], []


def get_computed_blocks(pool, req):
    """vLLM's ``KVCacheManager.get_computed_blocks``: the cached prefix, never the last token."""
    req.hits = pool.lookup(req.token_ids, max_tokens=len(req.token_ids) - 1, **req.extra)
    return req.hits


def allocate_slots(pool, req, num_new_tokens, num_computed_tokens=None):
    """vLLM's ``KVCacheManager.allocate_slots``: touch the hits, allocate, cache the full blocks
    of every token computed so far *or scheduled now*. Returns the new blocks (None if short)."""
    if num_computed_tokens is None:
        num_computed_tokens = len(req.hits) * BLOCK
    total = num_computed_tokens + num_new_tokens
    if not req.blocks:
        pool.touch(req.hits)
        req.blocks = list(req.hits)
    need = -(-total // BLOCK) - len(req.blocks)
    new = pool.allocate(max(need, 0))
    if new is None:
        return None
    req.blocks += new
    pool.cache_blocks(req.token_ids, req.blocks, total, **req.extra)
    return new


def chain(pool, token_ids):
    """The block hashes, computed here from vLLM's formula: hash((parent or NONE_HASH, tokens, None))."""
    fn, parent, out = make_hash_function(pool.hash_algo, vllm=True), none_hash(pool.hash_algo), []
    for i in range(len(token_ids) // BLOCK):
        parent = fn((parent, tuple(token_ids[i * BLOCK:(i + 1) * BLOCK]), None))
        out.append(parent)
    return out


@pytest.mark.parametrize("hash_algo", ["sha256", "sha256_cbor"])
def test_prefill(hash_algo):
    """From vLLM's ``test_prefill``: hits while the first request runs, vLLM's free order, eviction order."""
    pool = PrefixCachingBlockPool(10, BLOCK, vllm=True, hash_algo=hash_algo)
    common = [i for i in range(3) for _ in range(BLOCK)]  # 3 full blocks
    req0 = Request(common + [3] * 7)
    assert get_computed_blocks(pool, req0) == []
    assert allocate_slots(pool, req0, 55) == [0, 1, 2, 3]
    # Registered at allocation: the 3 full blocks carry their chained hashes before any forward.
    assert [pool.block_hash[b] for b in (0, 1, 2)] == chain(pool, req0.token_ids)
    assert pool.block_hash[3] is None and pool.ref_cnt[:4] == [1, 1, 1, 1]

    req1 = Request(common + [3] * 5)  # hits while req0 still holds the blocks
    assert get_computed_blocks(pool, req1) == [0, 1, 2]
    assert allocate_slots(pool, req1, 53 - 48) == [4]
    assert pool.ref_cnt[:3] == [2, 2, 2] and pool.num_free == 5

    pool.free(req0.blocks)
    pool.free(req1.blocks)
    # Hash-less partial blocks of req1 and req0 at the head, never-used ones, then the prefix, reversed.
    assert list(pool.free_queue) == [4, 3, 5, 6, 7, 8, 9, 2, 1, 0]

    req2 = Request(common + [3] * 6)  # hits the free, still cached prefix
    assert get_computed_blocks(pool, req2) == [0, 1, 2]
    assert allocate_slots(pool, req2, 54 - 48) == [4]  # the partial block at the head is reused
    assert pool.num_free == 6 and all(pool.ref_cnt[b] == 0 for b in pool.free_queue)
    pool.free(req2.blocks)

    req3 = Request([99] * (BLOCK * 10))  # a miss that needs every block: the eviction order
    assert get_computed_blocks(pool, req3) == []
    assert allocate_slots(pool, req3, BLOCK * 10) == [4, 3, 5, 6, 7, 8, 9, 2, 1, 0]
    assert pool.num_free == 0
    pool.check_invariants()


def test_prefill_plp_duplicates():
    """From vLLM's ``test_prefill_plp``: a request that skips the lookup (vLLM: one asking for prompt
    logprobs) computes the prefix again, and its blocks are cached too, duplicates of the first."""
    pool = PrefixCachingBlockPool(10, BLOCK, vllm=True)
    common = [i for i in range(3) for _ in range(BLOCK)]
    req0 = Request(common + [3] * 7)
    allocate_slots(pool, req0, 55)
    first = [pool.block_hash[b] for b in req0.blocks]
    req2 = Request(common + [3] * 6)  # no get_computed_blocks: no hit
    new = allocate_slots(pool, req2, 54)
    assert new != req0.blocks and [pool.block_hash[b] for b in new] == first  # same hashes, other blocks
    assert all(pool.ref_cnt[b] == 1 for b in new)
    assert [list(pool.hash_to_blocks[h]) for h in first[:3]] == [[req0.blocks[i], new[i]] for i in range(3)]
    pool.check_invariants()


def test_decode():
    """From vLLM's ``test_decode``: decode fills the partial block, which is cached once full."""
    pool = PrefixCachingBlockPool(10, BLOCK, vllm=True)
    req0 = Request([i for i in range(3) for _ in range(BLOCK)] + [3] * 7)
    assert allocate_slots(pool, req0, 55) == [0, 1, 2, 3]
    req0.token_ids += [8] * 4  # 4 decode tokens fit in the partial block
    assert allocate_slots(pool, req0, 4, num_computed_tokens=55) == []
    assert pool.block_hash[req0.blocks[-1]] is None
    req0.token_ids += [7] * (9 + 10)  # 9 fill the block, 10 go to a new one
    assert len(allocate_slots(pool, req0, 19, num_computed_tokens=59)) == 1
    assert pool.block_hash[req0.blocks[-2]] is not None and pool.block_hash[req0.blocks[-1]] is None


def test_evict():
    """From vLLM's ``test_evict``: partial blocks to the head, the rest to the tail in LRU order."""
    pool = PrefixCachingBlockPool(10, BLOCK, vllm=True)
    last = 5 * BLOCK + 7
    req0 = Request(range(last))
    assert get_computed_blocks(pool, req0) == []
    assert len(allocate_slots(pool, req0, last)) == 6  # 5 full + 1 partial
    req1 = Request(range(last, last + 3 * BLOCK))
    assert get_computed_blocks(pool, req1) == []
    assert len(allocate_slots(pool, req1, 3 * BLOCK)) == 3
    assert pool.num_free == 1
    pool.free(req0.blocks)
    assert list(pool.free_queue) == [5, 9, 4, 3, 2, 1, 0]
    pool.free(req1.blocks)
    assert list(pool.free_queue) == [5, 9, 4, 3, 2, 1, 0, 8, 7, 6]
    req2 = Request(range(2 * BLOCK + 3))  # touch the first two blocks
    assert get_computed_blocks(pool, req2) == [0, 1]
    assert allocate_slots(pool, req2, 3) == [5]
    assert pool.num_free == 7


def test_hash_block_correct_reuse():
    """From vLLM's ``test_hash_block_correct_reuse``: a reused cached block loses its hash."""
    pool = PrefixCachingBlockPool(1, BLOCK, vllm=True)
    req = Request(range(BLOCK))
    assert get_computed_blocks(pool, req) == [] and len(allocate_slots(pool, req, BLOCK)) == 1
    pool.free(req.blocks)
    req = Request(range(BLOCK - 1))  # not full
    assert get_computed_blocks(pool, req) == []
    assert allocate_slots(pool, req, BLOCK - 1) == [0]
    assert pool.block_hash[0] is None and pool.hash_to_blocks == {}


def test_computed_blocks_not_evicted():
    """From vLLM's ``test_computed_blocks_not_evicted``: a hit block is taken off the queue before allocating."""
    pool = PrefixCachingBlockPool(2, BLOCK, vllm=True)
    req0, req1 = Request(range(BLOCK)), Request(range(BLOCK, 2 * BLOCK))
    assert allocate_slots(pool, req0, BLOCK) == [0]
    assert allocate_slots(pool, req1, BLOCK) == [1]
    pool.free(req0.blocks)
    pool.free(req1.blocks)
    req2 = Request(range(2 * BLOCK))
    assert get_computed_blocks(pool, req2) == [0]
    assert allocate_slots(pool, req2, BLOCK) == [1]  # the other cached block is evicted, not the hit


def test_cache_blocks():
    """From vLLM's ``test_cache_blocks`` (``BlockPool.cache_full_blocks``): from the start, then resumed."""
    pool = PrefixCachingBlockPool(5, 4, vllm=True)
    tokens = list(range(14))
    blocks = pool.allocate(2)
    pool.cache_blocks(tokens, blocks, 8)
    assert len(pool.hash_to_blocks) == 2 and all(pool.block_hash[b] is not None for b in blocks)
    blocks += pool.allocate(1)
    pool.cache_blocks(tokens, blocks, 12)
    assert len(pool.hash_to_blocks) == 3 and pool.block_hash[blocks[0]] is not None


def test_block_lookup_cache_multi_blocks_per_key():
    """From vLLM's ``test_block_lookup_cache_multi_blocks_per_key`` (``BlockHashToBlockMap``): one hash,
    two blocks; a lookup gets the first; once it is evicted the second serves; then none."""
    pool = PrefixCachingBlockPool(4, 2, vllm=True)
    a, b = pool.allocate(1), pool.allocate(1)
    pool.cache_blocks([5, 6], a, 2)
    pool.cache_blocks([5, 6], b, 2)
    h = pool.block_hashes([5, 6])[0]
    assert list(pool.hash_to_blocks[h]) == a + b and pool.hash_to_block[h] == a[0]
    pool.free(a)
    pool.free(b)
    assert pool.lookup([5, 6]) == a
    pool.allocate(2)  # the two never-used blocks
    assert pool.allocate(1) == a and pool.lookup([5, 6]) == b  # a evicted: b still serves
    assert pool.allocate(1) == b and pool.lookup([5, 6]) == [] and pool.hash_to_blocks == {}
    pool.check_invariants()


def test_cache_key_salting():
    """From vLLM's ``test_cache_key_salting``: the salt goes into the first block only, the chain
    carries it on; the same tokens under another salt (or none) miss."""
    pool = PrefixCachingBlockPool(11, BLOCK, vllm=True)
    tokens = [i for i in range(3) for _ in range(BLOCK)] + [3] * 11
    salted = pool.block_hashes(tokens, cache_salt="salt1")
    assert len(salted) == 3 and all(x != y for x, y in zip(salted, pool.block_hashes(tokens), strict=True))
    fn = make_hash_function("sha256", vllm=True)
    assert salted[1] == fn((salted[0], tuple(tokens[BLOCK:2 * BLOCK]), None))  # no salt past block 0
    req0 = Request(tokens, cache_salt="salt1")
    get_computed_blocks(pool, req0)
    allocate_slots(pool, req0, len(tokens))
    assert get_computed_blocks(pool, Request(tokens, cache_salt="salt1")) == req0.blocks[:3]
    assert get_computed_blocks(pool, Request(tokens, cache_salt="salt2")) == []
    assert get_computed_blocks(pool, Request(tokens)) == []


def test_kv_cache_events():
    """From vLLM's ``test_kv_cache_events``: one BlockStored per allocation (parent None at the start),
    one BlockRemoved per evicted block, hashes published as the int of their low 64 bits."""
    pool = PrefixCachingBlockPool(3, BLOCK, vllm=True)
    events = []
    pool.subscribe(events.append)
    req0 = Request(list(range(2 * BLOCK + 5)))
    allocate_slots(pool, req0, len(req0.token_ids))
    assert len(events) == 1 and isinstance(events[0], BlockStored)
    published = [int.from_bytes(h, "big") % 2**64 for h in chain(pool, req0.token_ids)]
    assert events[0].block_hashes == published and events[0].parent_block_hash is None
    assert events[0].token_ids == req0.token_ids[:2 * BLOCK]
    pool.free(req0.blocks)
    req1 = Request([99] * 3 * BLOCK)
    allocate_slots(pool, req1, 3 * BLOCK)  # takes the partial block, then evicts the two cached ones
    removed = [e.block_hashes for e in events if isinstance(e, BlockRemoved)]
    assert removed == [[h] for h in published[::-1]]


def test_kv_event_hashes_are_the_low_64_bits_as_int(monkeypatch):
    """vLLM 0.33's ``maybe_convert_block_hash`` under ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`` (its
    default, 1): the int of the digest's low 64 bits; with the option off, the digest itself. The
    value below is vLLM's, computed with its ``vllm.utils.hashing.sha256`` on the same block."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    none_hash.cache_clear()
    try:
        for int_hashes, expected in [(True, VLLM_FIRST_BLOCK_PUBLISHED), (False, bytes.fromhex(VLLM_FIRST_BLOCK))]:
            pool = PrefixCachingBlockPool(2, 4, vllm=True, int_event_hashes=int_hashes)
            events = []
            pool.subscribe(events.append)
            pool.cache_blocks([1, 2, 3, 4], pool.allocate(1), 4)
            assert events[0].block_hashes == [expected]
            assert pool.event_hash(pool.block_hashes([1, 2, 3, 4])[0]) == expected
    finally:
        none_hash.cache_clear()


def test_kv_event_extra_keys_are_untagged():
    """vLLM 0.33 hashes tagged extra keys but publishes them untagged (``to_event_extra_keys``): the
    LoRA name (not its path), ``(identifier, offset)`` per image, the bare salt; ``lora_name`` too."""
    pool = PrefixCachingBlockPool(4, 4, vllm=True)
    events = []
    pool.subscribe(events.append)
    pool.cache_blocks([1, 2, 3, 4, 5, 6, 7, 8], pool.allocate(2), 8, lora_id=("a", "/p"), cache_salt="s",
                      mm_inputs=[("img", 1, 2)])
    (stored,) = events
    assert stored.extra_keys == [("a", ("img", 1), "s"), ("a",)]
    assert stored.lora_name == "a"


def test_duplicates_need_counting_consumers():
    """vLLM emits a store per cached block and a removal per evicted block, duplicates included: a
    consumer keeping a set would forget a hash another block still serves. Counting is right."""
    pool = PrefixCachingBlockPool(4, 2, vllm=True)
    events = []
    pool.subscribe(events.append)
    a, b = pool.allocate(1), pool.allocate(1)
    pool.cache_blocks([5, 6], a, 2)
    pool.cache_blocks([5, 6], b, 2)
    pool.free(a)
    pool.free(b)
    pool.allocate(3)  # evicts a only
    counts = Counter()
    assert replay(events, counts) == {pool.event_hash(h) for h in pool.hash_to_block} == \
        {pool.event_hash(h) for h in pool.block_hashes([5, 6])}
    assert replay(events) == set()  # the set consumer lost it


# -- the free queue (vLLM's tests/v1/core/test_kv_cache_utils.py) --------------------------------


def test_free_kv_cache_block_queue_initialization():
    """From vLLM's ``test_free_kv_cache_block_queue_initialization``: every block free, in id order."""
    pool = PrefixCachingBlockPool(4, BLOCK, vllm=True)
    assert list(pool.free_queue) == [0, 1, 2, 3] and pool.num_free == 4


def test_free_kv_cache_block_queue_operations():
    """From vLLM's ``test_free_kv_cache_block_queue_operations``: pop from the head, remove from the
    middle (a hit), append at the tail, pop until empty."""
    pool = PrefixCachingBlockPool(5, 2, vllm=True)
    assert pool.allocate(1) == [0] and list(pool.free_queue) == [1, 2, 3, 4]
    blocks = pool.allocate(1) + [] + pool.allocate(1)  # 1, 2
    pool.cache_blocks([1, 2, 3, 4], blocks, 4)
    pool.free(blocks)  # cached: to the tail, last block first
    assert list(pool.free_queue) == [3, 4, 2, 1]
    pool.touch(pool.lookup([1, 2, 3, 4]))  # a hit removes them from the middle / tail
    assert list(pool.free_queue) == [3, 4]
    pool.free([0])  # a hash-less block: to the head
    assert list(pool.free_queue) == [0, 3, 4]
    assert pool.allocate(3) == [0, 3, 4] and pool.allocate(1) is None  # empty: nothing is taken


def test_free_blocks_prepends_hashless_blocks_as_a_list():
    """From vLLM's ``BlockPool.free_blocks`` (``prepend_n``), as ``test_prefill`` checks it ("partial
    without hashes ... prepended for immediate reuse"): hash-less blocks go to the head *as a list*,
    so the sequence's last block (freed first) is the new head."""
    pool = PrefixCachingBlockPool(6, 2, vllm=True)
    table = pool.allocate(4)  # nothing cached (the request was preempted before computing)
    pool.free(table)
    assert list(pool.free_queue) == [3, 2, 1, 0, 4, 5]


# -- NONE_HASH and the hash functions ----------------------------------------------------------


def test_none_hash(monkeypatch):
    """From vLLM's ``test_none_hash`` (``init_none_hash``, ``resolve_none_hash_seed``): PYTHONHASHSEED
    set -> hash_fn(seed); unset -> hash_fn("vllm-none-hash") for sha256 (vLLM since PR #51875),
    hash_fn(32 random bytes as hex) for xxhash, drawn once per process."""
    none_hash.cache_clear()
    monkeypatch.setenv("PYTHONHASHSEED", "python hash seed")
    assert none_hash("sha256") == make_hash_function("sha256", vllm=True)("python hash seed")
    none_hash.cache_clear()
    monkeypatch.delenv("PYTHONHASHSEED")
    assert none_hash("sha256") == make_hash_function("sha256", vllm=True)("vllm-none-hash")  # fixed default
    random_start = none_hash("xxhash")
    assert isinstance(random_start, bytes) and len(random_start) == 16  # an XXH3-128 digest of the seed
    assert none_hash("xxhash") is random_start  # once per process
    none_hash.cache_clear()
    assert none_hash("xxhash") != random_start
    none_hash.cache_clear()


# Computed with vLLM 0.33.0's own functions (``vllm/utils/hashing.py``: ``sha256``, ``sha256_cbor``,
# with cbor2) on the same inputs: NONE_HASH = hash_fn("vllm-none-hash"), then the first block of
# [1, 2, 3, 4] without and with extra keys, tagged as ``generate_block_hash_extra_keys`` tags them.
VLLM_NONE_HASH = {"sha256": "066b1e8987e027138e98701c46128929378935f9b6cd1549105ae6b4f0d71198",
                  "sha256_cbor": "9bd96a485ad84efdafb72ee48a1d7a69bcead0f8f0433173941b276b9581eef0"}
VLLM_FIRST_BLOCK = "52a7f141c60918f65779927090482b5a24adbe68c8613a211a1eb4e3edd9361a"
VLLM_FIRST_BLOCK_PUBLISHED = 1882140585328457242  # maybe_convert_block_hash of the above
VLLM_FIRST_BLOCK_LORA_SALT = "7d750e5d839b491d6826821c108332e3e5e99b8ab4438958bd65da7f7ca25c2a"
VLLM_FIRST_BLOCK_CBOR_LORA_MM_SALT = "ed8515ae1a76ca655e2d684fd87fdc16e0e44decefa90c1684ea2df4966e651a"


@pytest.mark.parametrize("algo", ["sha256", "sha256_cbor"])
def test_none_hash_is_vllms_byte_for_byte(monkeypatch, algo):
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    none_hash.cache_clear()
    try:
        assert none_hash(algo).hex() == VLLM_NONE_HASH[algo]
    finally:
        none_hash.cache_clear()


def test_block_hashes_are_vllms_byte_for_byte(monkeypatch):
    """The same prompt, LoRA (name, path), salt and image give vLLM 0.33's block hashes exactly:
    ``("lora", name, path)``, ``("mm", identifier, offset)``, ``("cache_salt", salt)``, tagged."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    none_hash.cache_clear()
    try:
        sha = PrefixCachingBlockPool(2, 4, vllm=True)
        assert sha.block_hashes([1, 2, 3, 4])[0].hex() == VLLM_FIRST_BLOCK
        assert sha.block_hashes([1, 2, 3, 4], lora_id=("a", "/p"), cache_salt="s")[0].hex() == VLLM_FIRST_BLOCK_LORA_SALT
        cbor = PrefixCachingBlockPool(2, 4, vllm=True, hash_algo="sha256_cbor")
        assert cbor.block_hashes([1, 2, 3, 4], lora_id=("a", "/p"), cache_salt="s",
                                 mm_inputs=[("img", 1, 2)])[0].hex() == VLLM_FIRST_BLOCK_CBOR_LORA_MM_SALT
    finally:
        none_hash.cache_clear()


@pytest.mark.parametrize("algo, size", [("sha256", 32), ("sha256_cbor", 32), ("xxhash", 16), ("xxhash_cbor", 16)])
def test_vllm_hash_functions_return_digests(algo, size):
    pool = PrefixCachingBlockPool(4, 2, vllm=True, hash_algo=algo)
    hashes = pool.block_hashes([1, 2, 3, 4])
    assert all(isinstance(h, bytes) and len(h) == size for h in hashes)
    blocks = pool.allocate(2)
    pool.cache_blocks([1, 2, 3, 4], blocks, 4)
    pool.free(blocks)
    assert pool.lookup([1, 2, 3, 4, 5]) == blocks


def test_bad_vllm_hash_algo():
    with pytest.raises(ValueError, match="hash_algo"):
        PrefixCachingBlockPool(4, 2, vllm=True, hash_algo="md5")


# RFC 8949, Appendix A: (value, expected encoding in hex), the examples our encoder's types cover.
RFC8949_EXAMPLES = [
    (0, "00"), (1, "01"), (10, "0a"), (23, "17"), (24, "1818"), (25, "1819"), (100, "1864"),
    (1000, "1903e8"), (1000000, "1a000f4240"), (1000000000000, "1b000000e8d4a51000"),
    (18446744073709551615, "1bffffffffffffffff"), (18446744073709551616, "c249010000000000000000"),
    (-18446744073709551616, "3bffffffffffffffff"), (-18446744073709551617, "c349010000000000000000"),
    (-1, "20"), (-10, "29"), (-100, "3863"), (-1000, "3903e7"),
    (False, "f4"), (True, "f5"), (None, "f6"),
    (b"", "40"), (b"\x01\x02\x03\x04", "4401020304"),
    ("", "60"), ("a", "6161"), ("IETF", "6449455446"), ("\"\\", "62225c"), ("\u00fc", "62c3bc"),
    ("\u6c34", "63e6b0b4"), ([], "80"), ([1, 2, 3], "83010203"), ((1, (2, 3), [4, 5]), "8301820203820405"),
    (list(range(1, 26)), "98190102030405060708090a0b0c0d0e0f101112131415161718181819"),
]


@pytest.mark.parametrize("value, expected", RFC8949_EXAMPLES)
def test_cbor_matches_rfc8949_examples(value, expected):
    assert cbor_dumps(value).hex() == expected


def test_cbor_refuses_what_it_cannot_encode():
    with pytest.raises(TypeError, match="float"):
        cbor_dumps((1.5,))
