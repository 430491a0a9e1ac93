"""Tests for exercise 26: rebuilding one engine's cache view from BlockStored / BlockRemoved /
AllBlocksCleared events (parent chaining, the first block's parent, extra keys, duplicates)."""

import random
from collections import Counter

from solution_under_test import AllBlocksCleared, BlockRemoved, BlockStored, KVEventConsumer


def raises(error, call) -> bool:
    try:
        call()
    except error:
        return True
    return False


def keys_for(i, lora_id=None, cache_salt=None):
    """The engine's extra keys of block i (independent of the solution's copy)."""
    keys = ([("lora", lora_id)] if lora_id is not None else []) + (
        [("salt", cache_salt)] if i == 0 and cache_salt is not None else [])
    return tuple(keys) or None


def chain(token_ids, block_size, lora_id=None, cache_salt=None):
    """The engine's chained block hashes. The first block's hash starts from a seed (vLLM's
    NONE_HASH), but its event reports parent_block_hash=None."""
    hashes, parent = [], "NONE_HASH seed"
    for i in range(len(token_ids) // block_size):
        parent = hash((parent, tuple(token_ids[i * block_size:(i + 1) * block_size]), keys_for(i, lora_id, cache_salt)))
        hashes.append(parent)
    return hashes


def stored(token_ids, block_size, start=0, end=None, lora_id=None, cache_salt=None):
    """The BlockStored event for blocks start..end-1 of a sequence."""
    hashes = chain(token_ids, block_size, lora_id, cache_salt)
    end = len(hashes) if end is None else end
    return BlockStored(block_hashes=hashes[start:end], parent_block_hash=hashes[start - 1] if start else None,
                       token_ids=list(token_ids[start * block_size:end * block_size]), block_size=block_size,
                       lora_id=lora_id, extra_keys=[keys_for(i, lora_id, cache_salt) for i in range(start, end)])


PROMPT = [1, 2, 3, 4, 5, 6, 7, 8, 9]            # 4 full blocks of 2 and one token


def view_of(*events, block_size=2):
    consumer = KVEventConsumer(block_size)
    for event in events:
        consumer.apply(event)
    return consumer


def test_example_a_stored_sequence_matches():
    consumer = view_of(stored(PROMPT, 2))
    assert consumer.cached_hashes == set(chain(PROMPT, 2)), "every stored hash is cached"
    assert consumer.match(PROMPT) == 8, "4 full blocks; the 9th token is in no full block"
    assert consumer.match([1, 2, 3, 4, 0, 0]) == 4, "the third block differs"
    assert consumer.match([9, 9] + PROMPT) == 0, "[9, 9] was never stored at the start of a sequence"


def test_example_salt_keeps_tenants_apart():
    consumer = view_of(stored(PROMPT, 2, cache_salt="tenant-a"))
    assert consumer.match(PROMPT) == 0, "without the salt, the first block is another block"
    assert consumer.match(PROMPT, cache_salt="tenant-b") == 0, "another tenant's salt: block 0 is another block"
    assert consumer.match(PROMPT, cache_salt="tenant-a") == 8, "the same tenant matches all 4 full blocks"


def test_bad_block_size():
    for bad in (0, -2, 2.0, "2", None):
        assert raises(ValueError, lambda bad=bad: KVEventConsumer(bad)), f"KVEventConsumer({bad!r})"
    assert KVEventConsumer(1).match([5]) == 0, "a view that saw no event matches nothing"


def test_runs_chain_through_the_parent_hash():
    first, second = stored(PROMPT, 2, 0, 2), stored(PROMPT, 2, 2, 4)
    assert second.parent_block_hash == chain(PROMPT, 2)[1], "the second event's parent is block 1's hash"
    consumer = view_of(first, second)
    assert consumer.match(PROMPT) == 8, "the two runs chain into one prompt"
    assert view_of(first).match(PROMPT) == 4, "the first run alone: 2 blocks"
    assert view_of(second).match(PROMPT) == 0, "blocks 2-3 alone: the walk from the start finds no block 0"


def test_the_first_block_parent_is_the_sequence_start():
    # Blocks [5, 6] [7, 8] stored as the *start* of a sequence (parent None) ...
    start = stored([5, 6, 7, 8], 2)
    consumer = view_of(start)
    assert consumer.match([5, 6, 7, 8]) == 4, "the stored sequence start matches"
    # ... are not the blocks [5, 6] [7, 8] that follow [1, 2] [3, 4] in PROMPT.
    assert consumer.match([1, 2, 3, 4, 5, 6, 7, 8]) == 0, "[5, 6] was stored at a sequence start, not after [3, 4]"
    consumer.apply(stored(PROMPT, 2, 0, 2))
    assert consumer.match(PROMPT) == 4, "blocks 2-3 of PROMPT were never stored after block 1"
    # And a run stored after a parent is not a sequence start.
    consumer = view_of(stored(PROMPT, 2, 2, 4))
    assert consumer.match([5, 6, 7, 8]) == 0, "a run stored after a parent is not a sequence start"


def test_same_tokens_after_different_parents_are_different_blocks():
    a, b = [1, 1, 3, 3], [2, 2, 3, 3]
    consumer = view_of(stored(a, 2), stored(b, 2, 0, 1))
    assert consumer.match(a) == 4, "a's blocks match"
    assert consumer.match(b) == 2, "[3, 3] was stored after [1, 1], not after [2, 2]"


def test_extra_keys_come_from_the_event_per_block():
    lora = stored(PROMPT, 2, lora_id=7)
    consumer = view_of(lora)
    assert consumer.match(PROMPT, lora_id=7) == 8, "LoRA keys in every block"
    assert consumer.match(PROMPT) == 0, "the base model's blocks are not the adapter's"
    assert consumer.match(PROMPT, lora_id=8) == 0, "another adapter's blocks are not adapter 7's"
    both = view_of(stored(PROMPT, 2, lora_id=7, cache_salt="s"))
    assert both.match(PROMPT, lora_id=7, cache_salt="s") == 8, "the salt only in block 0, the adapter in all"
    assert both.match(PROMPT, lora_id=7) == 0, "without the salt, block 0 is another block"
    assert both.match(PROMPT, cache_salt="s") == 0, "without the adapter, every block is another block"
    # An event whose block 1 carries other keys than the engine would compute for a plain prompt.
    odd = stored(PROMPT, 2)
    odd = BlockStored(odd.block_hashes, None, odd.token_ids, 2, None, [None, ("mm", "img", 0), None, None])
    assert view_of(odd).match(PROMPT) == 2, "block 1 was stored with other extra keys: the match stops there"


def test_zero_is_a_hash_like_any_other():
    consumer = view_of(BlockStored(block_hashes=[0, 1], parent_block_hash=None, token_ids=[1, 2, 3, 4],
                                   block_size=2, lora_id=None, extra_keys=[None, None]))
    assert consumer.cached_hashes == {0, 1}, "0 and 1 are hashes"
    assert consumer.match([1, 2, 3, 4]) == 4, "both blocks match"
    consumer.apply(BlockStored(block_hashes=[2], parent_block_hash=0, token_ids=[7, 7], block_size=2,
                               lora_id=None, extra_keys=[None]))
    assert consumer.match([1, 2, 7, 7]) == 4, "block [7, 7] was stored after the block with hash 0"
    assert consumer.match([7, 7]) == 0, "its parent is the block with hash 0, not the sequence start"


def test_removed_block_breaks_the_chain():
    hashes = chain(PROMPT, 2)
    consumer = view_of(stored(PROMPT, 2), BlockRemoved([hashes[1]]))
    assert consumer.cached_hashes == set(hashes) - {hashes[1]}, "only block 1's hash is gone"
    assert consumer.match(PROMPT) == 2, "block 1 is gone: blocks 2 and 3 cannot be reached"
    consumer.apply(stored(PROMPT, 2, 1, 2))
    assert consumer.match(PROMPT) == 8, "stored again, the chain is whole"
    consumer.apply(BlockRemoved([hashes[3], hashes[0]]))
    assert consumer.match(PROMPT) == 0, "block 0 is gone: nothing can be reached"
    assert consumer.cached_hashes == {hashes[1], hashes[2]}, "blocks 1 and 2 are still held"


def test_duplicate_blocks_are_counted():
    hashes = chain(PROMPT, 2)
    consumer = view_of(stored(PROMPT, 2), stored(PROMPT, 2, 0, 2))   # blocks 0-1 stored twice
    consumer.apply(BlockRemoved([hashes[0]]))
    assert consumer.match(PROMPT) == 8, "one of the two blocks holding hash 0 is left"
    assert hashes[0] in consumer.cached_hashes, "one block still holds hash 0"
    consumer.apply(BlockRemoved([hashes[0]]))
    assert consumer.match(PROMPT) == 0, "the second removal took the last block holding hash 0"
    assert hashes[0] not in consumer.cached_hashes, "no block holds hash 0 now"
    consumer.apply(BlockRemoved([hashes[1], hashes[1]]))
    assert consumer.cached_hashes == set(hashes[2:]), (
        "hash 1's last holder is gone too (a removal beyond that is ignored)")


def test_unknown_removal_is_ignored():
    consumer = view_of(stored(PROMPT, 2))
    consumer.apply(BlockRemoved([12345]))
    consumer.apply(BlockRemoved([]))
    assert consumer.cached_hashes == set(chain(PROMPT, 2)), "an unknown hash's removal changes nothing"
    assert consumer.match(PROMPT) == 8, "the whole prompt still matches"
    consumer.apply(BlockRemoved([chain(PROMPT, 2)[0], 12345]))
    assert consumer.match(PROMPT) == 0, "block 0 is gone"
    consumer.apply(stored(PROMPT, 2, 0, 1))
    assert consumer.match(PROMPT) == 8, "a hash removed once more than stored is not owed a removal"


def test_removing_more_than_was_stored_owes_nothing():
    hashes = chain(PROMPT, 2)
    consumer = view_of(BlockRemoved([hashes[0]]))          # removed before it was ever stored
    consumer.apply(stored(PROMPT, 2))
    assert consumer.match(PROMPT) == 8, "a removal of a hash the view did not hold is ignored"
    consumer.apply(BlockRemoved([hashes[1], hashes[1], hashes[1]]))   # held once, removed three times
    consumer.apply(stored(PROMPT, 2, 1, 2))
    assert consumer.match(PROMPT) == 8, "stored again: the chain is whole"
    assert hashes[1] in consumer.cached_hashes, "stored again: held again"


def test_all_blocks_cleared():
    consumer = view_of(stored(PROMPT, 2), stored(PROMPT, 2), AllBlocksCleared())
    assert consumer.cached_hashes == set(), "AllBlocksCleared: nothing is cached"
    assert consumer.match(PROMPT) == 0, "AllBlocksCleared: nothing matches"
    consumer.apply(stored(PROMPT, 2, 0, 1))
    assert consumer.match(PROMPT) == 2, "blocks 1-3 were cleared, and their twins too"
    consumer.apply(BlockRemoved([chain(PROMPT, 2)[0]]))
    assert consumer.cached_hashes == set(), "removing a hash that was cleared changes nothing"


def test_match_is_whole_blocks_and_changes_nothing():
    consumer = view_of(stored(PROMPT, 2), block_size=2)
    before = consumer.cached_hashes
    assert consumer.match([1]) == 0, "one token: no full block"
    assert consumer.match([]) == 0, "no token: no match"
    assert consumer.match([1, 2, 3]) == 2, "3 tokens: 1 full block"
    assert consumer.cached_hashes == before, "match changes nothing"
    consumer3 = view_of(stored(PROMPT, 3), block_size=3)
    assert consumer3.match(PROMPT) == 9, "3 full blocks of 3"
    assert consumer3.match(PROMPT[:8]) == 6, "8 tokens: 2 full blocks of 3"


def test_bad_events_change_nothing():
    consumer = view_of(stored(PROMPT, 2))
    good = stored([7, 7, 8, 8], 2)
    bad = [
        BlockStored(good.block_hashes, None, good.token_ids, 4, None, good.extra_keys),        # another block size
        BlockStored(good.block_hashes, None, good.token_ids[:3], 2, None, good.extra_keys),    # 3 tokens for 2 blocks
        BlockStored(good.block_hashes, None, good.token_ids + [1, 1], 2, None, good.extra_keys),
        BlockStored(good.block_hashes, None, good.token_ids, 2, None, [None]),                 # keys for 1 block of 2
        BlockStored(good.block_hashes, None, good.token_ids, 2, None, [None, None, None]),
    ]
    for event in bad:
        assert raises(ValueError, lambda event=event: consumer.apply(event)), f"{event} must be refused"
        assert consumer.cached_hashes == set(chain(PROMPT, 2)), "a refused event changes nothing"
        assert consumer.match([7, 7, 8, 8]) == 0, "the refused event's blocks are not cached"
        assert consumer.match(PROMPT) == 8, "the earlier blocks still match"
    for junk in (None, "BlockStored", 42, [good], {"block_hashes": [1]}):
        assert raises(TypeError, lambda junk=junk: consumer.apply(junk)), f"{junk!r} is not an event"
    assert consumer.cached_hashes == set(chain(PROMPT, 2)), "refused events change nothing"


class Engine:
    """An engine that caches chained-hash blocks (duplicates included), evicts them, and emits
    the events in order; `held` is the ground truth the view must reproduce."""

    def __init__(self, block_size):
        self.block_size, self.held, self.events = block_size, Counter(), []

    def run(self, token_ids, lora_id=None, cache_salt=None, duplicate=False):
        hashes = chain(token_ids, self.block_size, lora_id, cache_salt)
        start = 0
        while not duplicate and start < len(hashes) and self.held[hashes[start]]:
            start += 1
        if start < len(hashes):
            self.events.append(stored(token_ids, self.block_size, start, None, lora_id, cache_salt))
            self.held.update(hashes[start:])

    def evict(self, rng):
        if self.held:
            h = rng.choice(sorted(self.held))
            self.held[h] -= 1
            self.held += Counter()          # drop zero counts
            self.events.append(BlockRemoved([h]))

    def expected_match(self, token_ids, lora_id=None, cache_salt=None):
        n = 0
        for h in chain(token_ids, self.block_size, lora_id, cache_salt):
            if not self.held[h]:
                break
            n += self.block_size
        return n


def test_random_engine_against_ground_truth():
    rng = random.Random(26)
    for _trial in range(15):
        bs = rng.choice([1, 2, 3, 4])
        engine, consumer = Engine(bs), KVEventConsumer(bs)
        stems = [[rng.randint(0, 3) for _ in range(rng.randint(0, 12))] for _ in range(4)]

        def prompt(stems=stems):
            return rng.choice(stems) + [rng.randint(0, 3) for _ in range(rng.randint(0, 10))]

        for _step in range(80):
            action = rng.random()
            if action < 0.45:
                engine.run(prompt(), lora_id=rng.choice([None, None, 1]), cache_salt=rng.choice([None, None, "s"]),
                           duplicate=rng.random() < 0.2)
            elif action < 0.9:
                engine.evict(rng)
            elif action < 0.93:
                engine.events.append(AllBlocksCleared())
                engine.held.clear()
            else:
                engine.events.append(BlockRemoved([rng.randint(10**6, 10**7)]))   # a view that joined late
            for event in engine.events:
                consumer.apply(event)
            engine.events.clear()
            assert consumer.cached_hashes == set(engine.held), "the view holds exactly the hashes the engine holds"
            for _ in range(3):
                p, lora, salt = prompt(), rng.choice([None, 1]), rng.choice([None, "s"])
                assert consumer.match(p, lora_id=lora, cache_salt=salt) == engine.expected_match(p, lora, salt), (
                    "the view matches what the engine would serve")
