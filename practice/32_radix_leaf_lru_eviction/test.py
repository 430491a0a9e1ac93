"""Tests for exercise 32: evict() peels unlocked leaves in the order of the tree's policy (LRU, LFU,
SLRU), and the tree under LLMEngine on a small Qwen3.

Only the public interface is used. The random test predicts every eviction from the tree's state
(a brute-force walk over the nodes, one leaf at a time) and checks, around every eviction, that
slots are conserved, that nothing locked was freed and that the sizes add up.
"""

import random

import torch
from solution_under_test import RadixCache

from nano_engine.cache_adapters import RadixTreeAdapter, serve_side_by_side
from nano_engine.cache_manager import RadixCacheManager
from nano_engine.engine import SamplingParams


def _nodes(tree):
    stack, seen = list(tree.root.children.values()), []
    while stack:
        node = stack.pop()
        seen.append(node)
        stack.extend(node.children.values())
    return seen


def _slots(tree):
    return [slot for node in _nodes(tree) for slot in node.value]


def _key(tree, node):
    if tree.policy == "lfu":
        return (node.hit_count, node.last_access)
    if tree.policy == "slru":
        return (node.hit_count >= tree.protected_threshold, node.last_access)
    return (node.last_access,)


def _predict(tree, num_tokens):
    """The slots evict(num_tokens) frees, by brute force: the smallest key among the unlocked leaves,
    again and again, a parent left childless becoming a leaf."""
    gone, freed = set(), []
    nodes = _nodes(tree)
    while len(freed) < num_tokens:
        leaves = [n for n in nodes if id(n) not in gone and n.lock_ref == 0
                  and all(id(c) in gone for c in n.children.values())]
        if not leaves:
            break
        victim = min(leaves, key=lambda n: _key(tree, n))
        gone.add(id(victim))
        freed += victim.value
    return freed


def test_example_chapter_transcript():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4, 5], [10, 11, 12, 13, 14])
    tree.insert([1, 2, 3, 9, 9], [10, 11, 12, 20, 21])
    value, node = tree.match_prefix([1, 2, 3, 4, 7])
    tree.inc_lock_ref(node)
    assert tree.evict(10) == [14, 20, 21], "only the unlocked leaves [5] and [9, 9] can go"
    assert (tree.evictable_size, tree.protected_size) == (0, 4), "the locked [1, 2, 3, 4] stays protected"
    tree.dec_lock_ref(node)
    assert sorted(tree.evict(10)) == [10, 11, 12, 13], "unlocked, the rest goes, leaf by leaf"
    assert tree.total_size() == 0, "the tree is empty"


def test_example_least_recently_used_goes_first():
    tree = RadixCache()
    tree.insert([1, 2], [10, 11])
    tree.insert([3, 4], [30, 31])
    tree.insert([5, 6], [50, 51])
    tree.match_prefix([1, 2])
    order = [tree.evict(1), tree.evict(1), tree.evict(1)]
    assert order == [[30, 31], [50, 51], [10, 11]], "LRU: [1, 2] was used last, so it goes last"


def test_example_lfu_and_slru_keep_what_is_inserted_often():
    trees = {policy: RadixCache(policy=policy) for policy in ("lru", "lfu", "slru")}
    for tree in trees.values():
        tree.insert([1, 2], [10, 11])
        tree.insert([1, 2], [10, 11])            # inserted twice: hit_count 2
        tree.insert([3, 4], [30, 31])            # once, but later
    assert trees["lru"].evict(1) == [10, 11], "LRU: [1, 2] is the older"
    assert trees["lfu"].evict(1) == [30, 31], "LFU: [3, 4] has fewer hits (1 < 2)"
    assert trees["slru"].evict(1) == [30, 31], "SLRU: [1, 2] reached 2 hits, the protected segment"


def test_locked_leaf_survives():
    tree = RadixCache()
    tree.insert([1, 2], [10, 11])
    tree.insert([3, 4], [30, 31])
    _, node = tree.match_prefix([3, 4])
    tree.inc_lock_ref(node)
    assert tree.evict(100) == [10, 11], "the locked [3, 4] is in use"
    assert (tree.evictable_size, tree.protected_size) == (0, 2), "[3, 4] is protected"
    assert tree.match_prefix([3, 4])[0] == [30, 31], "and still cached"


def test_internal_node_waits_for_its_children():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4], [10, 11, 12, 13])
    tree.insert([1, 2, 5, 6], [10, 11, 15, 16])     # [1, 2] becomes an internal node
    assert tree.evict(2) == [12, 13], "the older leaf [3, 4] first"
    assert tree.evict(2) == [15, 16], "[1, 2] still has a child: only the leaf [5, 6] may go"
    assert tree.total_size() == 2, "[1, 2] is left"
    assert tree.evict(2) == [10, 11], "now [1, 2] is a leaf"
    assert tree.total_size() == 0, "the tree is empty"


def test_parent_that_becomes_a_leaf_goes_in_the_same_call():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4], [10, 11, 12, 13])
    tree.insert([1, 2, 5, 6], [10, 11, 15, 16])
    freed = tree.evict(6)
    assert sorted(freed) == [10, 11, 12, 13, 15, 16], "the whole branch is freed in one call"
    assert freed[-2:] == [10, 11], "the shared prefix goes last"
    assert (tree.total_size(), tree.evictable_size) == (0, 0), "nothing is left"


def test_a_parent_that_becomes_a_leaf_keeps_its_own_key():
    """A parent left childless competes with its *own* last_access, not its last child's: here the
    prefix [1, 2] was used after the cold leaf [9, 9], so the cold leaf goes before it."""
    tree = RadixCache()
    tree.insert([1, 2, 3, 4], [10, 11, 12, 13])      # oldest
    tree.insert([9, 9], [90, 91])                     # cold
    tree.match_prefix([1, 2])                         # splits: [1, 2] is now the most recent node
    assert tree.evict(4) == [12, 13, 90, 91], "[3, 4] first, then the cold leaf; the hot prefix [1, 2] stays"
    assert tree.match_prefix([1, 2])[0] == [10, 11], "[1, 2] is still cached"


def test_a_shared_prefix_has_more_hits_than_its_branches():
    """Under LFU a parent that becomes a leaf enters with its own hit count: the prefix shared by
    two inserts has 2 and outlives a leaf inserted once."""
    tree = RadixCache(policy="lfu")
    tree.insert([1, 2, 3], [10, 11, 12])
    tree.insert([1, 2, 4], [10, 11, 14])             # [1, 2]: 2 hits, [3] and [4]: 1 each
    tree.insert([7], [70])                            # 1 hit, the most recent
    assert tree.evict(2) == [12, 14], "the two branches first (1 hit, older than [7])"
    assert tree.evict(1) == [70], "then [7] (1 hit) before the shared [1, 2] (2 hits)"
    assert tree.evict(1) == [10, 11], "the shared prefix goes last"


def test_slru_evicts_the_probationary_segment_first():
    tree = RadixCache(policy="slru", protected_threshold=3)
    for _ in range(3):
        tree.insert([1, 1], [10, 11])                 # 3 hits: protected
    tree.insert([2, 2], [20, 21])
    tree.insert([2, 2], [20, 21])                     # 2 hits: still probationary
    tree.insert([3, 3], [30, 31])                     # 1 hit, the most recent
    assert tree.evict(4) == [20, 21, 30, 31], "probationary leaves by age, whatever their hit count"
    assert tree.evict(2) == [10, 11], "then the protected segment"


def test_a_split_front_keeps_the_hit_count():
    """The given split copies hit_count to the front, as SGLang's _split_node does."""
    tree = RadixCache(policy="lfu")
    tree.insert([1, 2, 3, 4], [10, 11, 12, 13])
    tree.insert([1, 2, 3, 4], [10, 11, 12, 13])       # 2 hits
    tree.insert([5], [50])                            # 1 hit
    tree.match_prefix([1, 2])                         # a split: [1, 2] and [3, 4], both 2 hits
    assert tree.evict(1) == [50], "[5] has 1 hit; both halves of the split have 2"
    assert tree.evict(1) == [12, 13], "then the older of the two halves: the tail"


def test_stops_once_enough_is_freed():
    tree = RadixCache()
    tree.insert([1, 2, 3], [10, 11, 12])
    tree.insert([4, 5, 6], [40, 41, 42])
    assert tree.evict(1) == [10, 11, 12], "one whole leaf frees enough"
    assert tree.total_size() == 3, "the other leaf stays"
    assert tree.evictable_size == 3, "and stays evictable"


def test_evict_zero_and_empty_tree():
    tree = RadixCache()
    assert tree.evict(5) == [], "an empty tree frees nothing"
    tree.insert([1, 2], [10, 11])
    assert tree.evict(0) == [], "evict(0) frees nothing"
    assert tree.total_size() == 2, "and keeps everything"


def test_match_refreshes_the_whole_path():
    tree = RadixCache()
    tree.insert([1, 2, 3], [10, 11, 12])
    tree.insert([7, 8], [70, 71])
    tree.match_prefix([1, 2, 3])                     # [1, 2, 3] is now more recent than [7, 8]
    assert tree.evict(2) == [70, 71], "LRU: [7, 8] is the older"


def test_random_evictions_follow_the_policy():
    rng = random.Random(105)
    for trial in range(30):
        policy = ("lru", "lfu", "slru")[trial % 3]
        tree = RadixCache(policy=policy, protected_threshold=rng.randint(1, 3))
        held = []
        next_slot = 0
        for _step in range(80):
            action = rng.random()
            key = [rng.randint(0, 2) for _ in range(rng.randint(1, 6))]
            if action < 0.4:
                tree.insert(key, list(range(next_slot, next_slot + len(key))))
                next_slot += len(key)
            elif action < 0.6:
                _, node = tree.match_prefix(key)
                if node is not tree.root:
                    tree.inc_lock_ref(node)
                    held.append(node)
            elif action < 0.7 and held:
                tree.dec_lock_ref(held.pop(rng.randrange(len(held))))
            else:
                want = rng.randint(0, 6)
                before = _slots(tree)
                locked = {s for n in _nodes(tree) if n.lock_ref > 0 for s in n.value}
                evictable, protected = tree.evictable_size, tree.protected_size
                expected = _predict(tree, want)
                freed = tree.evict(want)
                assert freed == expected, f"{policy}: the leaves with the smallest keys, one at a time"
                after = _slots(tree)
                assert sorted(after + freed) == sorted(before), "freed + still cached = cached before"
                assert not set(freed) & locked, "a locked slot was freed"
                assert tree.evictable_size == evictable - len(freed), "evictable_size drops by what was freed"
                assert tree.protected_size == protected, "protected_size does not change"
                assert tree.total_size() == len(after), "total_size counts what is left"
            for node in held:                        # every locked prefix is still in the tree
                while node is not tree.root:
                    assert node.parent.children.get(node.key[0]) is node, "a locked node was removed"
                    node = node.parent


_RNG = random.Random(32)
_SYSTEM = [_RNG.randrange(500) for _ in range(24)]
PROMPTS = [_SYSTEM + [_RNG.randrange(500) for _ in range(_RNG.randrange(3, 10))] for _ in range(5)]
OTHERS = [[_RNG.randrange(500) for _ in range(28)] for _ in range(2)]


def test_your_tree_serves_requests_on_the_model():
    """Your tree (LRU) under LLMEngine, beside nano_engine's RadixCache, on a small Qwen3 (the tiny
    preset's body with a 512-token vocabulary, random weights), one KV slot per token and 100 of
    them: one request, four more that share its 24-token prefix, two unrelated ones that make the
    engine evict, and the first prompt again. The two engines go step by step; the first step where
    yours does something else fails the test, naming the step and the request."""
    torch.set_num_threads(1)
    yours = RadixTreeAdapter(RadixCache, num_tokens=100)
    package = RadixCacheManager(100, 1)
    waves = [PROMPTS[:1], PROMPTS[1:], OTHERS, PROMPTS[:1]]
    run = serve_side_by_side(yours, package, waves, SamplingParams(max_tokens=6))
    assert run.hits > 0, "the requests that share the prefix were served from your tree"
