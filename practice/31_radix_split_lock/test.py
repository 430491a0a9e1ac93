"""Tests for exercise 31: match_prefix / insert with splits that inherit lock_ref.

They use only the public interface (root, match_prefix, insert, inc/dec_lock_ref, total_size,
the sizes, and the nodes' key / value / parent / children / lock_ref), so any tree with that
interface can be judged. The random test checks every node against brute-force models of the
cached prefixes and of the locks after every operation.
"""

import random

from solution_under_test import RadixCache


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


def test_example_chapter_transcript():
    tree = RadixCache()
    assert tree.insert([1, 2, 3, 4, 5], [10, 11, 12, 13, 14]) == 0
    assert tree.insert([1, 2, 3, 9, 9], [10, 11, 12, 20, 21]) == 3
    value, node = tree.match_prefix([1, 2, 3, 4, 7])
    assert value == [10, 11, 12, 13]
    assert list(node.key) == [4]
    tree.inc_lock_ref(node)
    sizes = (tree.evictable_size, tree.protected_size)
    assert sizes == (3, 4)


def test_example_insert_splits_the_shared_edge():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4, 5], [10, 11, 12, 13, 14])
    tree.insert([1, 2, 3, 9, 9], [10, 11, 12, 20, 21])
    top = list(tree.root.children.values())
    assert [list(n.key) for n in top] == [[1, 2, 3]]
    assert list(top[0].value) == [10, 11, 12]
    below = sorted((list(n.key), list(n.value)) for n in top[0].children.values())
    assert below == [([4, 5], [13, 14]), ([9, 9], [20, 21])]
    assert tree.total_size() == 7


def test_match_ending_inside_an_edge_splits_it():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4, 5], [10, 11, 12, 13, 14])
    value, node = tree.match_prefix([1, 2, 3])
    assert value == [10, 11, 12]
    assert list(node.key) == [1, 2, 3]
    tail = list(node.children.values())
    assert [(list(n.key), list(n.value)) for n in tail] == [([4, 5], [13, 14])]
    assert tail[0].parent is node, "the old node now hangs under the front part"
    assert node.parent is tree.root
    assert tree.total_size() == 5
    assert (tree.evictable_size, tree.protected_size) == (5, 0)


def test_match_longer_than_the_cache():
    tree = RadixCache()
    tree.insert([1, 2], [10, 11])
    value, node = tree.match_prefix([1, 2, 3, 4])
    assert value == [10, 11]
    assert list(node.key) == [1, 2]


def test_no_match_returns_the_root():
    tree = RadixCache()
    tree.insert([1, 2], [10, 11])
    value, node = tree.match_prefix([5, 1, 2])
    assert value == []
    assert node is tree.root
    value, node = tree.match_prefix([])
    assert (value, node is tree.root) == ([], True)


def test_split_inherits_the_lock():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4, 5], [10, 11, 12, 13, 14])
    _, node = tree.match_prefix([1, 2, 3, 4, 5])
    tree.inc_lock_ref(node)
    assert (tree.evictable_size, tree.protected_size) == (0, 5)
    _, front = tree.match_prefix([1, 2, 8])                 # splits the locked edge at 2
    assert list(front.key) == [1, 2]
    assert front.lock_ref == 1, "the front part is still used by the request that locked the edge"
    assert node.lock_ref == 1
    assert (tree.evictable_size, tree.protected_size) == (0, 5), "a split moves no tokens"
    tree.dec_lock_ref(node)
    locks = [n.lock_ref for n in _nodes(tree)]
    assert locks == [0, 0]
    assert (tree.evictable_size, tree.protected_size) == (5, 0)


def test_insert_splitting_a_locked_edge_then_locking_the_new_branch():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4], [10, 11, 12, 13])
    _, a = tree.match_prefix([1, 2, 3, 4])
    tree.inc_lock_ref(a)
    assert tree.insert([1, 2, 7, 7], [10, 11, 30, 31]) == 2
    _, b = tree.match_prefix([1, 2, 7, 7])
    tree.inc_lock_ref(b)
    front = b.parent
    assert list(front.key) == [1, 2]
    assert front.lock_ref == 2, "both requests use [1, 2]"
    assert (tree.evictable_size, tree.protected_size) == (0, 6)
    tree.dec_lock_ref(a)
    assert (front.lock_ref, a.lock_ref, b.lock_ref) == (1, 0, 1)
    assert (tree.evictable_size, tree.protected_size) == (2, 4)
    tree.dec_lock_ref(b)
    assert (tree.evictable_size, tree.protected_size) == (6, 0)


def test_insert_keeps_the_cached_slots():
    tree = RadixCache()
    tree.insert([1, 2, 3], [10, 11, 12])
    assert tree.insert([1, 2, 3, 4], [20, 21, 22, 23]) == 3
    value, _ = tree.match_prefix([1, 2, 3, 4])
    assert value == [10, 11, 12, 23], "the tree keeps its slots; the caller frees 20, 21, 22"


def test_insert_a_prefix_of_a_cached_sequence():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4], [10, 11, 12, 13])
    assert tree.insert([1, 2], [50, 51]) == 2
    assert tree.total_size() == 4
    _, node = tree.match_prefix([1, 2])
    assert list(node.key) == [1, 2]
    assert tree.insert([1, 2, 3, 4], [50, 51, 52, 53]) == 4
    assert tree.evictable_size == 4


def test_every_node_passed_is_stamped():
    """match_prefix and insert stamp each node they pass with a new, larger last_access (exercise
    32 evicts the least recently used leaf by it)."""
    tree = RadixCache()
    tree.insert([1, 2, 3, 4], [10, 11, 12, 13])
    tree.insert([1, 2, 7], [10, 11, 17])             # splits [1, 2 | 3, 4]
    tree.insert([5, 6], [50, 51])
    _, node = tree.match_prefix([1, 2, 3, 4])
    path = [n for n in _nodes(tree) if _path(tree, n) in ([1, 2], [1, 2, 3, 4])]
    others = [n for n in _nodes(tree) if all(n is not m for m in path)]
    assert len(path) == 2 and len(others) == 2
    assert min(n.last_access for n in path) > max(n.last_access for n in others), "the matched path is the newest"

    tree.insert([5, 6, 8], [50, 51, 58])              # passes [5, 6], adds the leaf [8]
    newest = [n for n in _nodes(tree) if _path(tree, n) in ([5, 6], [5, 6, 8])]
    rest = [n for n in _nodes(tree) if all(n is not m for m in newest)]
    assert min(n.last_access for n in newest) > max(n.last_access for n in rest), "insert stamps too"

    _, front = tree.match_prefix([1, 2, 3])          # ends inside [3, 4]: the split front is stamped
    assert _path(tree, front) == [1, 2, 3]
    assert front.last_access == max(n.last_access for n in _nodes(tree))


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
            if action < 0.4:
                value = list(range(next_slot, next_slot + len(key)))
                next_slot += len(key)
                already = 0
                while already < len(key) and tuple(key[:already + 1]) in slot_of:
                    already += 1
                got = tree.insert(key, value)
                assert got == already, "insert returns the already-cached length"
                for i in range(len(key)):
                    slot_of.setdefault(tuple(key[:i + 1]), value[i])
            elif action < 0.75:
                value, node = tree.match_prefix(key)
                expected = []
                while len(expected) < len(key) and tuple(key[:len(expected) + 1]) in slot_of:
                    expected.append(slot_of[tuple(key[:len(expected) + 1])])
                assert value == expected, "match_prefix returns the slots of the longest cached prefix"
                assert _path(tree, node) == key[:len(expected)], "the returned node ends at the match"
                if rng.random() < 0.6:
                    tree.inc_lock_ref(node)
                    held.append(node)
            elif held:
                tree.dec_lock_ref(held.pop(rng.randrange(len(held))))
            nodes = _nodes(tree)
            for node in nodes:
                path = _path(tree, node)
                assert len(node.key) > 0 and len(node.key) == len(node.value)
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
            assert tree.total_size() == len(slot_of)
            protected = sum(len(n.key) for n in nodes if n.lock_ref > 0)
            assert (tree.evictable_size, tree.protected_size) == (len(slot_of) - protected, protected)
