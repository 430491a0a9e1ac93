"""Tests for exercise 32: evict() peels unlocked leaves, least recently used first.

Only the public interface is used. The random test checks, around every eviction, that slots
are conserved (freed + still cached = cached before), that nothing locked was freed, that the
sizes add up and that enough was freed.
"""

import random

from solution_under_test import RadixCache


def _nodes(tree):
    stack, seen = list(tree.root.children.values()), []
    while stack:
        node = stack.pop()
        seen.append(node)
        stack.extend(node.children.values())
    return seen


def _slots(tree):
    return [slot for node in _nodes(tree) for slot in node.value]


def test_example_chapter_transcript():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4, 5], [10, 11, 12, 13, 14])
    tree.insert([1, 2, 3, 9, 9], [10, 11, 12, 20, 21])
    value, node = tree.match_prefix([1, 2, 3, 4, 7])
    tree.inc_lock_ref(node)
    assert tree.evict(10) == [14, 20, 21]
    assert (tree.evictable_size, tree.protected_size) == (0, 4)
    tree.dec_lock_ref(node)
    assert sorted(tree.evict(10)) == [10, 11, 12, 13]
    assert tree.total_size() == 0


def test_example_least_recently_used_goes_first():
    tree = RadixCache()
    tree.insert([1, 2], [10, 11])
    tree.insert([3, 4], [30, 31])
    tree.insert([5, 6], [50, 51])
    tree.match_prefix([1, 2])
    order = [tree.evict(1), tree.evict(1), tree.evict(1)]
    assert order == [[30, 31], [50, 51], [10, 11]]


def test_locked_leaf_survives():
    tree = RadixCache()
    tree.insert([1, 2], [10, 11])
    tree.insert([3, 4], [30, 31])
    _, node = tree.match_prefix([3, 4])
    tree.inc_lock_ref(node)
    freed = tree.evict(100)
    assert freed == [10, 11], "the locked [3, 4] is in use"
    assert (tree.evictable_size, tree.protected_size) == (0, 2)
    assert tree.match_prefix([3, 4])[0] == [30, 31]


def test_internal_node_waits_for_its_children():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4], [10, 11, 12, 13])
    tree.insert([1, 2, 5, 6], [10, 11, 15, 16])     # [1, 2] becomes an internal node
    assert tree.evict(2) == [12, 13]
    second = tree.evict(2)
    assert second == [15, 16], "[1, 2] still has a child: only the leaf [5, 6] may go"
    assert tree.total_size() == 2
    assert tree.evict(2) == [10, 11]
    assert tree.total_size() == 0


def test_parent_that_becomes_a_leaf_goes_in_the_same_call():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4], [10, 11, 12, 13])
    tree.insert([1, 2, 5, 6], [10, 11, 15, 16])
    freed = tree.evict(6)
    assert sorted(freed) == [10, 11, 12, 13, 15, 16]
    assert freed[-2:] == [10, 11], "the shared prefix goes last"
    assert (tree.total_size(), tree.evictable_size) == (0, 0)


def test_a_parent_that_becomes_a_leaf_keeps_its_own_stamp():
    """A parent left childless competes with its *own* last_access, not its last child's: here the
    prefix [1, 2] was used after the cold leaf [9, 9], so the cold leaf goes before it."""
    tree = RadixCache()
    tree.insert([1, 2, 3, 4], [10, 11, 12, 13])      # oldest
    tree.insert([9, 9], [90, 91])                     # cold
    tree.match_prefix([1, 2])                         # splits: [1, 2] is now the most recent node
    freed = tree.evict(4)
    assert freed == [12, 13, 90, 91], "[3, 4] first, then the cold leaf; the hot prefix [1, 2] stays"
    assert tree.match_prefix([1, 2])[0] == [10, 11]


def test_stops_once_enough_is_freed():
    tree = RadixCache()
    tree.insert([1, 2, 3], [10, 11, 12])
    tree.insert([4, 5, 6], [40, 41, 42])
    freed = tree.evict(1)
    assert freed == [10, 11, 12], "one whole leaf frees enough"
    assert tree.total_size() == 3
    assert tree.evictable_size == 3


def test_evict_zero_and_empty_tree():
    tree = RadixCache()
    assert tree.evict(5) == []
    tree.insert([1, 2], [10, 11])
    assert tree.evict(0) == []
    assert tree.total_size() == 2


def test_match_refreshes_the_whole_path():
    tree = RadixCache()
    tree.insert([1, 2, 3], [10, 11, 12])
    tree.insert([7, 8], [70, 71])
    tree.match_prefix([1, 2, 3])                     # [1, 2, 3] is now more recent than [7, 8]
    assert tree.evict(2) == [70, 71]


def test_random_operations_keep_every_invariant():
    rng = random.Random(105)
    for _trial in range(25):
        tree = RadixCache()
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
                freed = tree.evict(want)
                after = _slots(tree)
                assert len(set(freed)) == len(freed), "a slot is freed once"
                assert sorted(after + freed) == sorted(before), "freed + still cached = cached before"
                assert not set(freed) & locked, "a locked slot was freed"
                assert len(freed) >= min(want, evictable), "frees enough when enough is evictable"
                assert (tree.evictable_size, tree.protected_size) == (evictable - len(freed), protected)
                assert tree.total_size() == len(after)
            for node in held:                        # every locked prefix is still in the tree
                while node is not tree.root:
                    assert node.parent.children.get(node.key[0]) is node
                    node = node.parent
