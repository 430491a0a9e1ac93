"""Tests for exercise 31: match_prefix / insert with splits that inherit lock_ref, one clock value
per walk, a running request's checkpoint, and the tree under LLMEngine on a small Qwen3.

They use only the public interface (root, match_prefix, insert, checkpoint, inc/dec_lock_ref,
total_size, the sizes, and the nodes' key / value / parent / children / lock_ref / last_access),
so any tree with that interface can be judged. The random test checks every node against
brute-force models of the cached prefixes and of the locks after every operation.
"""

import random

import torch
from solution_under_test import RadixCache

from nano_engine.cache_adapters import RadixTreeAdapter, serve_side_by_side
from nano_engine.cache_manager import RadixCacheManager
from nano_engine.engine import SamplingParams


def _path(tree, node):
    """The cached prefix that ends at node (its tokens from the root)."""
    parts = []
    while node is not tree.root:
        parts.append(list(node.key))
        node = node.parent
    return [t for part in reversed(parts) for t in part]


def _nodes(tree):
    stack, seen = list(tree.root.children.values()), []
    while stack:
        node = stack.pop()
        seen.append(node)
        stack.extend(node.children.values())
    return seen


def _sizes(tree):
    return tree.evictable_size, tree.protected_size


def test_example_chapter_transcript():
    tree = RadixCache()
    assert tree.insert([1, 2, 3, 4, 5], [10, 11, 12, 13, 14]) == 0, "nothing was cached"
    assert tree.insert([1, 2, 3, 9, 9], [10, 11, 12, 20, 21]) == 3, "[1, 2, 3] was cached already"
    value, node = tree.match_prefix([1, 2, 3, 4, 7])
    assert value == [10, 11, 12, 13], "the slots of [1, 2, 3, 4]"
    assert list(node.key) == [4], "the match ends on the node split off [4, 5]"
    tree.inc_lock_ref(node)
    assert _sizes(tree) == (3, 4), "the lock protects [1, 2, 3] and [4]: 4 tokens"


def test_example_a_split_under_a_lock_inherits_it():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4, 5], [10, 11, 12, 13, 14])
    tree.insert([1, 2, 3, 9, 9], [10, 11, 12, 20, 21])
    _, node = tree.match_prefix([1, 2, 3, 4, 7])
    tree.inc_lock_ref(node)                                   # a request uses [1, 2, 3, 4]
    _, front = tree.match_prefix([1, 2])                      # splits [1 2 | 3] under that lock
    assert list(front.key) == [1, 2], "the match ends on the split-off front"
    assert front.lock_ref == 1, "the front is used by the request that locked [1, 2, 3]: it inherits the lock"
    assert front.children[3].lock_ref == 1, "the tail [3] keeps its lock"
    assert _sizes(tree) == (3, 4), "a split moves no tokens between evictable and protected"
    tree.dec_lock_ref(node)
    assert _sizes(tree) == (7, 0), "the request's unlock leaves everything evictable"


def test_example_checkpoint_caches_a_running_request():
    tree = RadixCache()
    tree.insert([1, 2, 3], [10, 11, 12])
    _, node = tree.match_prefix([1, 2, 3, 7])                 # request A matches [1, 2, 3] ...
    tree.inc_lock_ref(node)                                   # ... and locks it
    tree.insert([1, 2, 3, 4, 5], [10, 11, 12, 13, 14])        # B caches [4, 5] meanwhile
    slots, new, duplicates = tree.checkpoint(node, [1, 2, 3, 4, 5, 6], [10, 11, 12, 30, 31, 32])
    assert duplicates == [30, 31], "A computed [4, 5] again: its slots for them are duplicates"
    assert slots == [10, 11, 12, 13, 14, 32], "from now on A reads the tree's slots"
    assert _path(tree, new) == [1, 2, 3, 4, 5, 6], "A's lock ends where its tokens end"
    assert new.lock_ref == 1, "A locks its new node"
    assert node.lock_ref == 1, "[1, 2, 3] is counted once: A's lock moved, it did not double"
    assert _sizes(tree) == (0, 6), "all six tokens are protected by A"


def test_insert_splits_the_shared_edge():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4, 5], [10, 11, 12, 13, 14])
    tree.insert([1, 2, 3, 9, 9], [10, 11, 12, 20, 21])
    top = list(tree.root.children.values())
    assert [list(n.key) for n in top] == [[1, 2, 3]], "one node for the shared [1, 2, 3]"
    assert list(top[0].value) == [10, 11, 12], "it keeps the first insert's slots"
    below = sorted((list(n.key), list(n.value)) for n in top[0].children.values())
    assert below == [([4, 5], [13, 14]), ([9, 9], [20, 21])], "two branches below it"
    assert tree.total_size() == 7, "7 tokens are cached"


def test_match_ending_inside_an_edge_splits_it():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4, 5], [10, 11, 12, 13, 14])
    value, node = tree.match_prefix([1, 2, 3])
    assert value == [10, 11, 12], "the slots of [1, 2, 3]"
    assert list(node.key) == [1, 2, 3], "the match ends on the split-off front"
    tail = list(node.children.values())
    assert [(list(n.key), list(n.value)) for n in tail] == [([4, 5], [13, 14])], "the old node keeps the tail"
    assert tail[0].parent is node, "the old node now hangs under the front part"
    assert node.parent is tree.root, "the front takes the old node's place under the root"
    assert tree.total_size() == 5, "a split caches nothing new"
    assert _sizes(tree) == (5, 0), "nothing is locked"


def test_match_longer_than_the_cache():
    tree = RadixCache()
    tree.insert([1, 2], [10, 11])
    value, node = tree.match_prefix([1, 2, 3, 4])
    assert value == [10, 11], "only [1, 2] is cached"
    assert list(node.key) == [1, 2], "the match ends on [1, 2]"


def test_no_match_returns_the_root():
    tree = RadixCache()
    tree.insert([1, 2], [10, 11])
    value, node = tree.match_prefix([5, 1, 2])
    assert value == [], "nothing starts with 5"
    assert node is tree.root, "an empty match ends on the root"
    value, node = tree.match_prefix([])
    assert value == [], "an empty key matches nothing"
    assert node is tree.root, "an empty key ends on the root"


def test_split_inherits_the_lock():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4, 5], [10, 11, 12, 13, 14])
    _, node = tree.match_prefix([1, 2, 3, 4, 5])
    tree.inc_lock_ref(node)
    assert _sizes(tree) == (0, 5), "the lock protects all 5 tokens"
    _, front = tree.match_prefix([1, 2, 8])                 # splits the locked edge at 2
    assert list(front.key) == [1, 2], "the match ends on the front"
    assert front.lock_ref == 1, "the front part is still used by the request that locked the edge"
    assert node.lock_ref == 1, "the tail keeps its lock"
    assert _sizes(tree) == (0, 5), "a split moves no tokens"
    tree.dec_lock_ref(node)
    assert [n.lock_ref for n in _nodes(tree)] == [0, 0], "the unlock walks through both parts"
    assert _sizes(tree) == (5, 0), "everything is evictable again"


def test_insert_splitting_a_locked_edge_then_locking_the_new_branch():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4], [10, 11, 12, 13])
    _, a = tree.match_prefix([1, 2, 3, 4])
    tree.inc_lock_ref(a)
    assert tree.insert([1, 2, 7, 7], [10, 11, 30, 31]) == 2, "[1, 2] was cached"
    _, b = tree.match_prefix([1, 2, 7, 7])
    tree.inc_lock_ref(b)
    front = b.parent
    assert list(front.key) == [1, 2], "the insert split [1, 2 | 3, 4]"
    assert front.lock_ref == 2, "both requests use [1, 2]"
    assert _sizes(tree) == (0, 6), "both branches and the front are protected"
    tree.dec_lock_ref(a)
    assert [front.lock_ref, a.lock_ref, b.lock_ref] == [1, 0, 1], "a's unlock leaves b's locks"
    assert _sizes(tree) == (2, 4), "[3, 4] is evictable again"
    tree.dec_lock_ref(b)
    assert _sizes(tree) == (6, 0), "no lock is left"


def test_insert_keeps_the_cached_slots():
    tree = RadixCache()
    tree.insert([1, 2, 3], [10, 11, 12])
    assert tree.insert([1, 2, 3, 4], [20, 21, 22, 23]) == 3, "[1, 2, 3] was cached"
    value, _ = tree.match_prefix([1, 2, 3, 4])
    assert value == [10, 11, 12, 23], "the tree keeps its slots; the caller frees 20, 21, 22"


def test_insert_a_prefix_of_a_cached_sequence():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4], [10, 11, 12, 13])
    assert tree.insert([1, 2], [50, 51]) == 2, "[1, 2] is part of a cached sequence"
    assert tree.total_size() == 4, "nothing new is cached"
    _, node = tree.match_prefix([1, 2])
    assert list(node.key) == [1, 2], "the match splits at 2"
    assert tree.insert([1, 2, 3, 4], [50, 51, 52, 53]) == 4, "all four were cached"
    assert tree.evictable_size == 4, "still 4 tokens, all evictable"


def test_one_clock_value_per_walk():
    """match_prefix and insert take one value of the clock per call and stamp it on every node they
    pass (exercise 32 evicts by last_access, and chapter 03's tree does the same)."""
    tree = RadixCache()
    tree.insert([1, 2, 3, 4], [10, 11, 12, 13])
    tree.insert([1, 2, 7], [10, 11, 17])             # splits [1, 2 | 3, 4]
    tree.insert([5, 6], [50, 51])
    _, node = tree.match_prefix([1, 2, 3, 4])
    path = [node, node.parent]
    assert path[0].last_access == path[1].last_access, "every node of one walk gets the same clock value"
    others = [n for n in _nodes(tree) if all(n is not m for m in path)]
    assert min(n.last_access for n in path) > max(n.last_access for n in others), "the matched path is the newest"

    tree.insert([5, 6, 8], [50, 51, 58])              # passes [5, 6], adds the leaf [8]
    leaf = next(n for n in _nodes(tree) if list(n.key) == [8])
    assert leaf.last_access == leaf.parent.last_access, "insert stamps its whole path, the new leaf too"
    assert leaf.last_access > node.last_access, "insert takes a new clock value"

    _, front = tree.match_prefix([1, 2, 3])          # ends inside [3, 4]: the split front is stamped
    assert _path(tree, front) == [1, 2, 3], "the match ends on the front [3]"
    assert front.last_access == front.parent.last_access, "the split front gets this walk's value"
    assert front.last_access == max(n.last_access for n in _nodes(tree)), "and that value is the newest"
    assert front.children[4].last_access == node.last_access, "the tail keeps its own, older stamp"


def test_checkpoint_from_the_root():
    tree = RadixCache()
    root = tree.root
    tree.inc_lock_ref(root)                          # a request that matched nothing (no-op lock)
    slots, node, duplicates = tree.checkpoint(root, [4, 5, 6], [40, 41, 42])
    assert (slots, duplicates) == ([40, 41, 42], []), "nothing was cached: the request's slots become the tree's"
    assert list(node.key) == [4, 5, 6], "the new leaf"
    assert node.lock_ref == 1, "the request now locks it"
    assert _sizes(tree) == (0, 3), "its tokens are protected"


def test_checkpoint_that_adds_nothing():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4], [10, 11, 12, 13])
    _, node = tree.match_prefix([1, 2, 3, 4])
    tree.inc_lock_ref(node)
    slots, new, duplicates = tree.checkpoint(node, [1, 2, 3, 4], [10, 11, 12, 13])
    assert duplicates == [], "the request computed nothing beyond its match"
    assert new is node, "the lock stays on the same node"
    assert node.lock_ref == 1, "locked once, not twice"
    assert slots == [10, 11, 12, 13], "the tree's slots"


def test_checkpoint_frees_only_the_requests_own_slots():
    """The duplicates start after the request's own cached prefix: the slots it matched are the
    tree's, and freeing them would hand out KV the tree still serves."""
    tree = RadixCache()
    tree.insert([1, 2], [10, 11])
    _, node = tree.match_prefix([1, 2, 9])
    tree.inc_lock_ref(node)
    tree.insert([1, 2, 3, 4, 5, 6], [10, 11, 12, 13, 14, 15])
    slots, new, duplicates = tree.checkpoint(node, [1, 2, 3, 4, 5, 6, 7], [10, 11, 22, 23, 24, 25, 26])
    assert duplicates == [22, 23, 24, 25], "tokens 3 to 6 were cached by someone else"
    assert slots == [10, 11, 12, 13, 14, 15, 26], "the tree's slots, then the request's new one"
    assert new.lock_ref == 1, "the request locks its new leaf"
    assert node.lock_ref == 1, "[1, 2] is still locked, once, through the new leaf"
    tree.dec_lock_ref(new)
    assert _sizes(tree) == (7, 0), "after the request ends nothing is locked"


def test_checkpoint_checks_its_arguments():
    tree = RadixCache()
    try:
        tree.checkpoint(tree.root, [1, 2], [10])
        raised = False
    except ValueError:
        raised = True
    assert raised, "two tokens, one slot: ValueError"
    assert tree.total_size() == 0, "the rejected call cached nothing"


def test_random_operations_against_models():
    rng = random.Random(104)
    for _trial in range(10):
        tree = RadixCache()
        slot_of = {}                   # cached prefix (tuple of tokens) -> its last token's slot
        held = []                      # nodes locked by our pretend requests
        next_slot = 0
        for _step in range(80):
            key = [rng.randint(0, 2) for _ in range(rng.randint(0, 7))]
            action = rng.random()
            if action < 0.3:
                value = list(range(next_slot, next_slot + len(key)))
                next_slot += len(key)
                already = 0
                while already < len(key) and tuple(key[:already + 1]) in slot_of:
                    already += 1
                got = tree.insert(key, value)
                assert got == already, "insert returns the already-cached length"
                for i in range(len(key)):
                    slot_of.setdefault(tuple(key[:i + 1]), value[i])
            elif action < 0.55:
                value, node = tree.match_prefix(key)
                expected = []
                while len(expected) < len(key) and tuple(key[:len(expected) + 1]) in slot_of:
                    expected.append(slot_of[tuple(key[:len(expected) + 1])])
                assert value == expected, "match_prefix returns the slots of the longest cached prefix"
                assert _path(tree, node) == key[:len(expected)], "the returned node ends at the match"
                if rng.random() < 0.6:
                    tree.inc_lock_ref(node)
                    held.append(node)
            elif action < 0.75 and held:
                i = rng.randrange(len(held))
                node = held[i]
                prefix = _path(tree, node)
                full = prefix + key                      # the request computed more tokens
                value = [slot_of[tuple(full[:j + 1])] for j in range(len(prefix))]
                value += list(range(next_slot, next_slot + len(key)))
                next_slot += len(key)
                already = 0
                while already < len(full) and tuple(full[:already + 1]) in slot_of:
                    already += 1
                slots, new, duplicates = tree.checkpoint(node, full, value)
                assert duplicates == value[len(prefix):already], "the duplicates: computed again, cached meanwhile"
                for j in range(len(full)):
                    slot_of.setdefault(tuple(full[:j + 1]), value[j])
                assert slots == [slot_of[tuple(full[:j + 1])] for j in range(len(full))], "the tree's slots for key"
                assert _path(tree, new) == full, "the lock moves to where key ends"
                held[i] = new
            elif held:
                tree.dec_lock_ref(held.pop(rng.randrange(len(held))))
            nodes = _nodes(tree)
            for node in nodes:
                path = _path(tree, node)
                assert len(node.key) > 0, "no node has an empty key"
                assert len(node.key) == len(node.value), "one slot per token"
                for child in node.children.values():
                    assert child.parent is node, "every child points back at its parent"
                start = len(path) - len(node.key)
                for j, slot in enumerate(node.value):
                    assert slot_of.get(tuple(path[:start + j + 1])) == slot, "a node holds the slots of its tokens"
                users = 0
                for h in held:
                    while h is not tree.root and h is not node:
                        h = h.parent
                    users += h is node
                assert node.lock_ref == users, "lock_ref counts the requests using the node or a descendant"
            assert tree.total_size() == len(slot_of), "total_size counts the cached tokens"
            protected = sum(len(n.key) for n in nodes if n.lock_ref > 0)
            assert tree.protected_size == protected, "protected_size: the tokens of locked nodes"
            assert tree.evictable_size == len(slot_of) - protected, "evictable_size: the tokens of unlocked nodes"


_RNG = random.Random(31)
_SYSTEM = [_RNG.randrange(500) for _ in range(24)]
PROMPTS = [_SYSTEM + [_RNG.randrange(500) for _ in range(_RNG.randrange(3, 10))] for _ in range(5)]


def test_your_tree_serves_requests_on_the_model():
    """Your tree under LLMEngine, beside nano_engine's RadixCache, on a small Qwen3 (the tiny preset's
    body with a 512-token vocabulary, random weights), one KV slot per token: one request, then four
    more that share its 24-token prefix (their prompts split its edges while it is locked), then the
    first prompt again. After each prompt's forward your checkpoint caches it. The two engines go
    step by step; the first step where yours does something else fails the test, naming the step
    and the request."""
    torch.set_num_threads(1)
    yours = RadixTreeAdapter(RadixCache, num_tokens=400)
    package = RadixCacheManager(400, 1)
    run = serve_side_by_side(yours, package, [PROMPTS[:1], PROMPTS[1:], PROMPTS[:1]], SamplingParams(max_tokens=6))
    assert run.hits > 0, "the requests that share the prefix were served from your tree"
