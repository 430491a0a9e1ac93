"""Tests for exercise 25: vLLM's free order (unhashed to the head, hashed to the tail, a request
freed last block first) and duplicate blocks under one hash."""

import random

from solution_under_test import VllmBlockPool


def raises_value_error(call) -> bool:
    try:
        call()
    except ValueError:
        return True
    return False


def snapshot(pool, hashes=()):
    """Everything observable about a pool (for "changes nothing" checks)."""
    return (pool.free_queue, list(pool.ref_cnt), {h: pool.cached_blocks(h) for h in hashes})


def test_example_unhashed_to_head_hashed_to_tail():
    pool = VllmBlockPool(4)
    a = pool.allocate(3)
    assert a == [0, 1, 2], "allocate takes the head of the free queue, in order"
    pool.cache_block(0, 10)
    pool.cache_block(1, 11)
    pool.free(a)
    assert pool.free_queue == [2, 3, 1, 0], "2 (no hash) to the head; 1 then 0 (freed in reverse) to the tail"


def test_example_duplicates_survive_one_eviction():
    pool = VllmBlockPool(4)
    x, y = pool.allocate(1), pool.allocate(1)
    pool.cache_block(x[0], 7)
    pool.cache_block(y[0], 7)
    assert pool.cached_blocks(7) == [0, 1], "both copies are cached under hash 7, in the order they were cached"
    assert pool.lookup(7) == 0, "the block cached earliest serves the hash"
    pool.free(x)
    pool.free(y)
    assert pool.allocate(3) == [2, 3, 0], "unhashed 2 and 3 first, then block 0 from the tail's head"
    assert pool.cached_blocks(7) == [1], "only the reused block loses the hash"
    assert pool.lookup(7) == 1, "block 0 lost hash 7; block 1 serves it now"


def test_new_pool():
    pool = VllmBlockPool(3)
    assert pool.free_queue == [0, 1, 2], "a new pool's free queue is every block in id order"
    assert pool.ref_cnt == [0, 0, 0], "a new pool: every count 0"
    assert pool.lookup(0) is None, "a new pool caches nothing: no block serves hash 0"
    assert pool.cached_blocks(0) == [], "a new pool caches nothing: no block holds hash 0"


def test_bad_num_blocks():
    for bad in (0, -1, 2.0, "3", None):
        assert raises_value_error(lambda bad=bad: VllmBlockPool(bad)), f"VllmBlockPool({bad!r})"
    assert VllmBlockPool(1).free_queue == [0], "a pool of one block"


def test_allocate_takes_the_head_in_order():
    pool = VllmBlockPool(5)
    assert pool.allocate(2) == [0, 1], "allocate takes the head"
    assert pool.ref_cnt == [1, 1, 0, 0, 0], "an allocated block has one reference"
    assert pool.free_queue == [2, 3, 4], "the rest stays in order"
    assert pool.allocate(0) == [], "allocate(0) hands out nothing"
    assert pool.free_queue == [2, 3, 4], "allocate(0) changes nothing"
    pool.free([0])
    assert pool.free_queue == [0, 2, 3, 4], "an unhashed block goes to the head"
    assert pool.allocate(4) == [0, 2, 3, 4], "block 0 (at the head) first, then the others"
    assert pool.free_queue == [], "every block is taken"


def test_allocate_bad_input_changes_nothing():
    pool = VllmBlockPool(3)
    [b] = pool.allocate(1)
    pool.cache_block(b, 5)
    before = snapshot(pool, [5])
    for bad in (-1, 3, 1.0, "1", None):
        assert raises_value_error(lambda bad=bad: pool.allocate(bad)), f"allocate({bad!r})"
        assert snapshot(pool, [5]) == before, f"allocate({bad!r}) changed the pool"
    assert pool.allocate(2) == [1, 2], "exactly the free blocks can be taken"


def test_allocate_evicts_the_hash_of_a_reused_block():
    pool = VllmBlockPool(2)
    [b] = pool.allocate(1)
    pool.cache_block(b, 42)
    pool.free([b])
    assert pool.lookup(42) == b, "a freed block keeps its hash (it stays a cache hit)"
    assert pool.free_queue == [1, 0], "the freed block has a hash: to the tail"
    assert pool.allocate(1) == [1], "the unused block is taken first"
    assert pool.lookup(42) == 0, "the other block was taken: block 0 still serves hash 42"
    assert pool.allocate(1) == [0], "block 0 is the last free block"
    assert pool.lookup(42) is None, "reusing the block evicts its hash: no block serves it"
    assert pool.cached_blocks(42) == [], "reusing the block evicts its hash: no block holds it"
    pool.cache_block(0, 43)
    assert pool.cached_blocks(43) == [0], "the reused block can cache new content"


def test_cache_block_appends_duplicates_in_order():
    pool = VllmBlockPool(4)
    blocks = pool.allocate(4)
    for b in (2, 0, 3):
        pool.cache_block(b, 9)
    assert pool.cached_blocks(9) == [2, 0, 3], "holders in the order they were cached"
    assert pool.lookup(9) == 2, "the block cached earliest serves the hash"
    pool.cache_block(0, 9)
    assert pool.cached_blocks(9) == [2, 0, 3], "caching a block again under its own hash changes nothing"
    pool.cache_block(1, 8)
    assert pool.cached_blocks(8) == [1], "block 1 caches hash 8"
    assert pool.cached_blocks(9) == [2, 0, 3], "hash 9's holders are unchanged"
    pool.free(blocks)
    assert pool.free_queue == [3, 2, 1, 0], "unhashed 3 then 2 at the head, hashed 1 then 0 at the tail"


def test_evicting_the_serving_block_hands_over_to_the_next():
    pool = VllmBlockPool(5)
    blocks = pool.allocate(3)
    for b in blocks:
        pool.cache_block(b, 1)
    pool.free([blocks[1]])
    pool.free([blocks[0]])
    pool.free([blocks[2]])
    assert pool.free_queue == [3, 4, 1, 0, 2], "each free appends its hashed block at the tail"
    assert pool.allocate(3) == [3, 4, 1], "the unhashed blocks, then block 1 from the tail's head"
    assert pool.cached_blocks(1) == [0, 2], "block 1 was reused: 0 and 2 still hold hash 1"
    assert pool.lookup(1) == 0, "block 0, cached before block 2, serves hash 1"
    assert pool.allocate(1) == [0], "then block 0"
    assert pool.cached_blocks(1) == [2], "block 0 was reused: only block 2 holds hash 1"
    assert pool.lookup(1) == 2, "block 2 serves hash 1 now"
    assert pool.allocate(1) == [2], "then block 2"
    assert pool.lookup(1) is None, "every copy of hash 1 was reused"


def test_cache_block_bad_input_changes_nothing():
    pool = VllmBlockPool(3)
    a, b = pool.allocate(2)
    pool.cache_block(a, 5)
    before = snapshot(pool, [5, 6])
    assert raises_value_error(lambda: pool.cache_block(2, 6)), "block 2 is not allocated"
    assert raises_value_error(lambda: pool.cache_block(a, 6)), "block a already caches another hash"
    assert raises_value_error(lambda: pool.cache_block(b, None)), "None is not a hash"
    assert raises_value_error(lambda: pool.cache_block(3, 6)), "block 3 does not exist"
    assert raises_value_error(lambda: pool.cache_block(-1, 6)), "block -1 does not exist"
    assert snapshot(pool, [5, 6]) == before, "refused calls change nothing"
    assert pool.lookup(5) == a, "block a still serves hash 5"
    pool.cache_block(b, 0)
    assert raises_value_error(lambda: pool.cache_block(b, 6)), "block b already caches hash 0 (0 is a hash too)"
    assert pool.cached_blocks(0) == [b], "block b caches hash 0"
    assert pool.cached_blocks(6) == [], "the refused call cached nothing under hash 6"


def test_block_ids_must_be_ints():
    pool = VllmBlockPool(3)
    [b] = pool.allocate(1)
    before = snapshot(pool, [1])
    for bad in (0.0, "0", None, [0]):
        assert raises_value_error(lambda bad=bad: pool.touch([bad])), f"touch([{bad!r}])"
        assert raises_value_error(lambda bad=bad: pool.free([bad])), f"free([{bad!r}])"
        assert raises_value_error(lambda bad=bad: pool.cache_block(bad, 1)), f"cache_block({bad!r}, 1)"
        assert snapshot(pool, [1]) == before, "refused calls change nothing"


def test_lookup_changes_nothing():
    pool = VllmBlockPool(3)
    [b] = pool.allocate(1)
    pool.cache_block(b, 4)
    pool.free([b])
    before = snapshot(pool, [4])
    assert pool.lookup(4) == b, "a freed block keeps its hash"
    assert pool.lookup(5) is None, "hash 5 was never cached"
    assert snapshot(pool, [4]) == before, "a lookup is not a touch"


def test_touch_takes_a_free_block_out_of_the_queue():
    pool = VllmBlockPool(4)
    blocks = pool.allocate(2)
    pool.cache_block(blocks[0], 20)
    pool.cache_block(blocks[1], 21)
    pool.free(blocks)
    assert pool.free_queue == [2, 3, 1, 0], "unhashed to the head; hashed 1, then 0 (freed in reverse), to the tail"
    pool.touch([0])
    assert pool.ref_cnt[0] == 1, "a touch adds a reference"
    assert pool.free_queue == [2, 3, 1], "a touched block leaves the free queue"
    pool.touch([0, 1])
    assert pool.ref_cnt[:2] == [2, 1], "one reference more on each"
    assert pool.free_queue == [2, 3], "a held block stays out of the queue"
    pool.free([0, 1])
    assert pool.free_queue == [2, 3, 1], "block 0 still has a reference"
    pool.free([0])
    assert pool.free_queue == [2, 3, 1, 0], "block 0 rejoins the tail"
    assert pool.lookup(20) == 0, "a freed block keeps its hash"
    assert pool.lookup(21) == 1, "a freed block keeps its hash"


def test_touch_bad_input_changes_nothing():
    pool = VllmBlockPool(3)
    before = snapshot(pool)
    assert raises_value_error(lambda: pool.touch([0, 3])), "block 3 does not exist"
    assert raises_value_error(lambda: pool.touch([1, -1])), "block -1 does not exist"
    assert snapshot(pool) == before, "a refused touch changes no count and no queue"


def test_free_order_within_a_request():
    pool = VllmBlockPool(8)
    req = pool.allocate(6)                      # blocks 0..5: 4 full (hashed), 2 never cached
    for i, h in enumerate((100, 101, 102, 103)):
        pool.cache_block(req[i], h)
    pool.free(req)
    assert pool.free_queue == [5, 4, 6, 7, 3, 2, 1, 0], (
        "unhashed 5 then 4 (release order) at the head; hashed 3, 2, 1, 0 at the tail")


def test_free_goes_after_earlier_freed_hashed_blocks():
    pool = VllmBlockPool(6)
    first, second = pool.allocate(2), pool.allocate(2)
    for b, h in zip(first + second, (1, 2, 3, 4), strict=True):
        pool.cache_block(b, h)
    pool.free(first)
    pool.free(second)
    assert pool.free_queue == [4, 5, 1, 0, 3, 2], "the second request's blocks are more recent: evicted later"
    third = pool.allocate(3)
    assert third == [4, 5, 1], "unhashed 4 and 5, then block 1 from the tail's head"
    pool.free(third)
    assert pool.free_queue == [1, 5, 4, 0, 3, 2], "unhashed blocks (1 lost its hash) go to the head"


def test_free_one_reference_per_listing():
    pool = VllmBlockPool(3)
    [b] = pool.allocate(1)
    pool.touch([b])
    pool.free([b])
    assert pool.ref_cnt[b] == 1, "two references, one freed"
    assert b not in pool.free_queue, "a block with a reference is not free"
    pool.touch([b, b])
    assert pool.ref_cnt[b] == 3, "a block listed twice in touch gets two references"
    pool.free([b, b])
    assert pool.ref_cnt[b] == 1, "a block listed twice in free loses two references"
    assert b not in pool.free_queue, "one reference is left"
    pool.free([b])
    assert pool.ref_cnt[b] == 0, "the last reference is gone"
    assert pool.free_queue == [b, 1, 2], "an unhashed block goes to the head"


def test_a_block_listed_twice_is_released_where_its_count_reaches_zero():
    """free walks the list from its end, one reference per listing; a block is released at the
    listing that takes it to 0: for a block listed twice, the one nearer the front."""
    pool = VllmBlockPool(5)
    a, b, c = pool.allocate(3)
    pool.touch([a])                           # a: 2 references
    pool.free([a, b, c, a])                   # walked as a (2 -> 1), c, b, a (1 -> 0)
    assert pool.free_queue == [c, b, a, 3, 4], "released c, b, then a (not a first): c, the first released, at the head"
    x, y, z = pool.allocate(3)
    for block, h in ((x, 70), (y, 71), (z, 72)):
        pool.cache_block(block, h)
    pool.touch([x])
    pool.free([x, y, z, x])                   # hashed: to the tail in release order z, y, x
    assert pool.free_queue[-3:] == [z, y, x], "released z, y, then x: x joins the tail last"


def test_free_bad_input_changes_nothing():
    pool = VllmBlockPool(4)
    a, b = pool.allocate(2)
    pool.cache_block(a, 1)
    before = snapshot(pool, [1])
    assert raises_value_error(lambda: pool.free([a, 2])), "block 2 has no reference"
    assert raises_value_error(lambda: pool.free([b, b])), "block b has one reference, listed twice"
    assert raises_value_error(lambda: pool.free([a, 4])), "block 4 does not exist"
    assert raises_value_error(lambda: pool.free([a, -1])), "block -1 does not exist"
    assert snapshot(pool, [1]) == before, "a refused free changes no count and no queue"
    pool.free([a, b])
    assert pool.free_queue == [b, 2, 3, a], "b (unhashed) to the head, a (hashed) to the tail"
    assert raises_value_error(lambda: pool.free([a])), "a double free"
    assert pool.free_queue == [b, 2, 3, a], "a refused double free changes nothing"


class Model:
    """A slow, obviously correct model of the rules, with plain lists."""

    def __init__(self, n):
        self.queue, self.ref, self.hash, self.cached = list(range(n)), [0] * n, [None] * n, []   # cached: (hash, block)

    def allocate(self, n):
        taken, self.queue = self.queue[:n], self.queue[n:]
        for b in taken:
            self.ref[b] = 1
            self.cached = [(h, x) for h, x in self.cached if x != b]
            self.hash[b] = None
        return taken

    def cache(self, b, h):
        if self.hash[b] is None:
            self.hash[b] = h
            self.cached.append((h, b))

    def holders(self, h):
        return [x for hh, x in self.cached if hh == h]

    def touch(self, blocks):
        for b in blocks:
            if self.ref[b] == 0:
                self.queue.remove(b)
            self.ref[b] += 1

    def free(self, blocks):
        released = []
        for b in blocks[::-1]:
            self.ref[b] -= 1
            if self.ref[b] == 0:
                released.append(b)
        head = [b for b in released if self.hash[b] is None]
        tail = [b for b in released if self.hash[b] is not None]
        self.queue = head + self.queue + tail


def test_random_requests_against_a_model():
    rng = random.Random(25)
    for _trial in range(30):
        n = rng.randint(2, 10)
        pool, model = VllmBlockPool(n), Model(n)
        requests = []
        for _step in range(80):
            action = rng.random()
            if action < 0.4 and model.queue:
                k = rng.randint(1, len(model.queue))
                got = pool.allocate(k)
                assert got == model.allocate(k), "allocate disagrees with the model"
                for b in got:
                    if rng.random() < 0.7:
                        h = rng.randint(0, 4)          # few hashes: many duplicates
                        pool.cache_block(b, h)
                        model.cache(b, h)
                requests.append(got)
            elif action < 0.5:
                h = rng.randint(0, 4)                  # a cache hit, maybe on a free block
                b = pool.lookup(h)
                assert b == (model.holders(h) or [None])[0], "lookup disagrees with the model"
                if b is not None:
                    pool.touch([b])
                    model.touch([b])
                    requests.append([b])
            elif action < 0.6 and requests:
                req = rng.choice(requests)
                hit = req[:rng.randint(1, len(req))]
                pool.touch(hit)
                model.touch(hit)
                requests.append(hit)
            elif requests:
                req = requests.pop(rng.randrange(len(requests)))
                pool.free(req)
                model.free(req)
            assert pool.free_queue == model.queue, "free queue order"
            assert list(pool.ref_cnt) == model.ref, "reference counts"
            for h in range(5):
                assert pool.cached_blocks(h) == model.holders(h), (
                    "the blocks holding each hash, in the order they were cached")
                assert pool.lookup(h) == (model.holders(h) or [None])[0], "the block that serves each hash"
