"""Tests for nano_engine.radix: the chapter's transcript, unit behaviour, and a hypothesis state
machine that checks the tree against a brute-force model after every step."""

import doctest
import json
import random
from array import array
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from nano_engine import radix
from nano_engine.radix import Ints, RadixCache, common_len


def path_key(node):
    """Tokens from the root down to ``node`` (walking parent links; no side effects)."""
    parts = []
    while node.parent is not None:
        parts.append(node.key)
        node = node.parent
    return [t for part in reversed(parts) for t in part]


# ----------------------------------------------------------------------------- the chapter


def test_chapter_transcript_doctest():
    result = doctest.testmod(radix, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 10
    assert result.failed == 0


def test_chapter_transcript_with_events():
    events = []
    tree = RadixCache(on_event=events.append)
    assert tree.insert([1, 2, 3, 4, 5], [10, 11, 12, 13, 14]) == 0
    assert tree.insert([1, 2, 3, 9, 9], [10, 11, 12, 20, 21]) == 3
    assert tree.last_split.key == [1, 2, 3]
    assert [n.key for n in tree.last_match_path] == [[], [1, 2, 3], [9, 9]]
    value, node = tree.match_prefix([1, 2, 3, 4, 7])
    assert (value, node.key) == ([10, 11, 12, 13], [4])
    tree.inc_lock_ref(node)
    assert (tree.evictable_size, tree.protected_size) == (3, 4)
    assert tree.evict(10) == [14, 20, 21]
    assert [n.key for n in tree.last_evicted] == [[5], [9, 9]]
    tree.dec_lock_ref(node)
    assert sorted(tree.evict(10)) == [10, 11, 12, 13] and tree.total_size() == 0
    tree.check_invariants()

    kinds = [kind for kind, _ in events]
    assert kinds == ["insert", "split", "insert", "split", "match", "lock",
                     "evict", "evict", "unlock", "evict", "evict"]
    first_split = events[1][1]
    assert first_split["key_before"] == [1, 2, 3, 4, 5]
    assert first_split["at"] == 3 and first_split["inherited_lock"] == 0
    assert events[2][1]["already_cached"] == 3 and events[2][1]["key"] == [9, 9]
    assert events[5][1]["moved"] == 4 and len(events[5][1]["path"]) == 2
    assert events[6][1] == {"node": events[6][1]["node"], "parent": events[4][1]["path"][-1],
                            "key": [5], "slots": [14]}
    assert events[8][1]["moved"] == 4


# ------------------------------------------------------------------------ fast comparison


def common_len_reference(a, b):
    """The readable, one-token-at-a-time version."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=700), st.lists(st.integers(0, 3), max_size=40),
       st.integers(0, 700), st.integers(0, 5), st.booleans())
def test_common_len_agrees_with_reference(a, tail, cut, start, as_list):
    """Windows, binary search and the list conversion against a plain loop (runs up to 700 tokens
    cross several windows)."""
    b = [9] * start + a[:cut] + tail                 # compared from ``start`` on
    key = array("Q", a)
    n = min(len(a), len(b) - start)
    expected = common_len_reference(a, b[start:])
    tokens = b if as_list else array("Q", b)
    assert common_len(key, tokens, start, n) == expected


def test_list_array_and_numpy_keys_give_the_same_tree():
    rng = random.Random(0)
    system = [rng.randrange(50_000) for _ in range(700)]
    trees = RadixCache(), RadixCache(), RadixCache()
    for i in range(60):
        prompt = system[:rng.randrange(50, 700)] + [rng.randrange(50_000) for _ in range(40)]
        forms = prompt, np.array(prompt), array("Q", prompt)
        assert trees[0].match_prefix(forms[0])[0] == trees[1].match_prefix(forms[1])[0] \
            == trees[2].match_prefix(forms[2])[0], "a key's form must not change the match"
        slots = list(range(1000 * i, 1000 * i + len(prompt)))
        cached = [tree.insert(form, s) for tree, form, s in zip(trees, forms, (slots, np.array(slots), slots))]
        assert cached[0] == cached[1] == cached[2], "a key's form must not change what insert finds"
    assert trees[0].total_size() == trees[1].total_size() == trees[2].total_size()
    for tree in trees:
        tree.check_invariants()


def test_nodes_hold_compact_runs_that_read_as_lists():
    tree = RadixCache()
    tree.insert([5, 6, 7], [70, 71, 72])
    node = tree.match_prefix([5, 6, 7])[1]
    assert isinstance(node.key, Ints) and node.key.typecode == "Q" and node.value.typecode == "I"
    assert node.key == [5, 6, 7] and node.value == [70, 71, 72] and node.key != [5, 6]
    assert repr(node.key) == "[5, 6, 7]" and node.key.itemsize == 8 and node.value.itemsize == 4


def test_out_of_range_tokens_and_slots_are_refused_by_name():
    tree = RadixCache()
    with pytest.raises(ValueError, match="token ids must be ints in 0..2\\*\\*64-1, got -1"):
        tree.insert([1, -1], [0, 1])
    with pytest.raises(ValueError, match="KV slots must be ints in 0..2\\*\\*32-1, got 4294967296"):
        tree.insert([1, 2], [0, 2 ** 32])
    with pytest.raises(ValueError, match="token ids"):
        tree.match_prefix(np.array([-3]))
    assert tree.total_size() == 0
    tree.check_invariants()


def test_numpy_min_run_is_deprecated():
    with pytest.warns(DeprecationWarning, match="numpy_min_run"):
        RadixCache(numpy_min_run=64)


def test_array_inputs_are_validated():
    tree = RadixCache()
    tree.insert(np.array([1, 2, 3], dtype=np.int32), np.array([7, 8, 9]))
    assert tree.match_prefix(np.array([1, 2, 4]))[0] == [7, 8]
    with pytest.raises(ValueError, match="1-D sequence of ints"):
        tree.match_prefix(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="1-D sequence of ints"):
        tree.insert(np.array([[1, 2]]), [1, 2])


# ------------------------------------------------------------------------ SGLang's stamping

TRANSCRIPT = Path(__file__).parent / "data" / "sglang_0.5.23_radix_transcript.json"


def replay_transcript(ops, tree):
    """Run a recorded sequence on ``tree``; return the index of the first answer that differs from
    SGLang's, or None."""
    nodes = []
    for i, op in enumerate(ops):
        if op[0] == "insert":
            if tree.insert(op[1], op[2]) != op[3]:
                return i
        elif op[0] == "match":
            slots, node = tree.match_prefix(op[1])
            nodes.append(node)
            if slots != op[2]:
                return i
        elif op[0] == "lock":
            tree.inc_lock_ref(nodes[op[1]])
        elif op[0] == "unlock":
            tree.dec_lock_ref(nodes[op[1]])
        elif tree.evict(op[1]) != op[2]:
            return i
        tree.check_invariants()
    return None


def test_sglang_mode_answers_as_sglangs_own_tree():
    """Every answer of SGLang 0.5.23's RadixCache, recorded from its released code
    (tests/data/make_sglang_radix_transcript.py), on sequences with splits under locks and
    evictions, pages of 1 and 2: the SGLang mode gives all of them; the default mode (mini-sglang's
    stamping) parts from SGLang at an eviction in at least one sequence."""
    recorded = json.loads(TRANSCRIPT.read_text())
    assert recorded["sglang"].startswith("0.5.23")
    parted = []
    for seq in recorded["sequences"]:
        evictions = sum(op[0] == "evict" for op in seq["ops"])
        assert evictions >= 3, "a sequence must exercise eviction"
        first = replay_transcript(seq["ops"], RadixCache(seq["page_size"], sglang=True))
        assert first is None, f"sglang=True differs from SGLang at op {first} of seed {seq['seed']}"
        first = replay_transcript(seq["ops"], RadixCache(seq["page_size"]))
        if first is not None:
            parted.append(seq["ops"][first][0])
    assert parted and set(parted) == {"evict"}, f"the default mode must part at an eviction only: {parted}"


def test_six_requests_keep_a_different_tail():
    """The module docstring's example: A+x, B, A+y (splits A+x), C, evict 40, D, then A+x again."""
    A, x, y = list(range(100, 140)), list(range(200, 220)), list(range(300, 320))
    B, C, D = list(range(400, 440)), list(range(500, 540)), list(range(600, 640))
    for sglang, evicted, then in ((False, [x, B], A), (True, [B], A + x)):
        tree, slot = RadixCache(sglang=sglang), 0
        for tokens in (A + x, B, A + y, C):
            tree.insert(tokens, list(range(slot, slot + len(tokens))))
            slot += len(tokens)
        tree.evict(40)
        assert [n.key for n in tree.last_evicted] == evicted, f"sglang={sglang}: evicted {tree.last_evicted}"
        tree.insert(D, list(range(slot, slot + 40)))
        assert len(tree.match_prefix(A + x)[0]) == len(then), f"sglang={sglang}"
        tree.check_invariants()


def test_sglang_mode_stamps_the_tail_and_the_front_as_sglang_does():
    tree = RadixCache(sglang=True)
    tree.insert([1, 2, 3, 4], [0, 1, 2, 3])
    old = tree.match_prefix([1, 2, 3, 4])[1]
    before = old.last_access
    _, front = tree.match_prefix([1, 2, 9])              # splits [1, 2 | 3, 4]
    assert old.key == [3, 4] and old.parent is front
    assert old.last_access > before, "SGLang stamps the old node before it becomes the tail"
    assert front.last_access > old.last_access, "the new front is created after the walk's stamp"
    tree.check_invariants()
    default = RadixCache()
    default.insert([1, 2, 3, 4], [0, 1, 2, 3])
    old = default.match_prefix([1, 2, 3, 4])[1]
    before = old.last_access
    _, front = default.match_prefix([1, 2, 9])
    assert old.last_access == before and front.last_access > before, "mini-sglang stamps the front only"


# --------------------------------------------------------------------------- unit behaviour


def test_split_inherits_lock_count_and_access_time():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 4, 5])
    _, node = tree.match_prefix([1, 2, 3, 4, 5, 6])
    tree.inc_lock_ref(node)
    tree.inc_lock_ref(node)
    before = (tree.evictable_size, tree.protected_size)
    stamp = node.last_access
    value, front = tree.match_prefix([1, 2, 3, 7])
    assert value == [0, 1, 2] and front is tree.last_split
    assert front.key == [1, 2, 3] and front.lock_ref == 2
    assert front.last_access > stamp  # inherited, then stamped by this walk
    assert node.key == [4, 5, 6] and node.parent is front and node.last_access == stamp
    assert (tree.evictable_size, tree.protected_size) == before
    tree.check_invariants()


def test_locks_move_size_only_for_first_and_last_user():
    tree = RadixCache()
    tree.insert([1, 2, 3], [0, 1, 2])
    tree.insert([1, 2, 9, 9], [0, 1, 5, 6])
    _, node = tree.match_prefix([1, 2, 3])
    assert (tree.evictable_size, tree.protected_size) == (5, 0)
    tree.inc_lock_ref(node)
    assert (tree.evictable_size, tree.protected_size) == (2, 3)
    tree.inc_lock_ref(node)
    assert (tree.evictable_size, tree.protected_size) == (2, 3)
    tree.dec_lock_ref(node)
    assert (tree.evictable_size, tree.protected_size) == (2, 3)
    tree.dec_lock_ref(node)
    assert (tree.evictable_size, tree.protected_size) == (5, 0)
    with pytest.raises(ValueError, match="not locked"):
        tree.dec_lock_ref(node)
    assert (tree.evictable_size, tree.protected_size) == (5, 0)
    tree.check_invariants()


def test_evicted_node_cannot_be_locked():
    tree = RadixCache()
    tree.insert([1, 2], [0, 1])
    _, node = tree.match_prefix([1, 2])
    assert tree.evict(1) == [0, 1]
    with pytest.raises(ValueError, match="evicted"):
        tree.inc_lock_ref(node)


def test_eviction_is_lru_and_peels_branches_from_the_tip():
    tree = RadixCache()
    tree.insert([5, 6, 7], [0, 1, 2])           # t1
    tree.insert([5, 6, 8], [0, 1, 3])           # t2: splits into [5, 6] -> [7], [8]
    tree.insert([9], [4])                       # t3
    tree.insert([1, 1], [10, 11])               # t4
    tree.match_prefix([1, 1])                   # t5: [1, 1] is now the most recent
    # [7] (t1) goes first; then [8] (t2); its parent [5, 6] (t2) becomes a leaf and goes before [9].
    assert tree.evict(4) == [2, 3, 0, 1]
    assert [n.key for n in tree.last_evicted] == [[7], [8], [5, 6]]
    five_six = tree.last_evicted[2]
    assert tree.last_evicted_parents == [five_six, five_six, tree.root]
    assert tree.evict(1) == [4]
    assert tree.evict(100) == [10, 11]
    assert tree.total_size() == 0 and tree.root.lock_ref == 1 and tree.evict(5) == []
    tree.check_invariants()


def test_locked_prefix_survives_eviction():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4], [0, 1, 2, 3])
    tree.insert([1, 2, 8], [0, 1, 9])
    _, node = tree.match_prefix([1, 2, 3, 4])
    tree.inc_lock_ref(node)
    assert tree.evict(100) == [9]
    assert tree.match_prefix([1, 2, 3, 4])[0] == [0, 1, 2, 3]
    assert tree.evictable_size == 0 and tree.protected_size == 4


def test_insert_returns_already_cached_and_keeps_first_slots():
    tree = RadixCache()
    assert tree.insert([1, 2, 3], [0, 1, 2]) == 0
    assert tree.insert([1, 2, 3, 4], [7, 8, 9, 3]) == 3
    assert tree.match_prefix([1, 2, 3, 4])[0] == [0, 1, 2, 3]
    assert tree.insert([1, 2], [5, 6]) == 2        # fully cached, ends mid-edge: split, no new node
    assert tree.last_match_path[-1].key == [1, 2] and tree.total_size() == 4
    assert tree.insert([], []) == 0
    with pytest.raises(ValueError, match="same length"):
        tree.insert([1, 2], [1])
    tree.check_invariants()


def test_bad_arguments():
    with pytest.raises(ValueError, match="page_size"):
        RadixCache(page_size=0)
    with pytest.raises(ValueError, match="num_tokens"):
        RadixCache().evict(-1)


def test_node_ids_are_small_unique_and_stable():
    tree = RadixCache()
    tree.insert([1, 2, 3], [0, 1, 2])
    leaf = tree.last_match_path[-1]
    leaf_id = leaf.id
    tree.insert([1, 5], [0, 5])                 # splits leaf; leaf keeps its id (and the tail)
    ids = [n.id for n in tree.nodes()]
    assert tree.root.id == 0 and len(set(ids)) == len(ids) == 4 and max(ids) == 3
    assert leaf.id == leaf_id and leaf.key == [2, 3]


def test_check_invariants_detects_corruption():
    tree = RadixCache()
    tree.insert([1, 2, 3], [0, 1, 2])
    tree.check_invariants()
    tree.evictable_size += 1
    with pytest.raises(AssertionError, match="evictable_size"):
        tree.check_invariants()
    tree.evictable_size -= 1
    _, node = tree.match_prefix([1, 2, 3])
    node.lock_ref = 1                           # locked behind the tree's back: sizes are stale
    with pytest.raises(AssertionError, match="evictable_size is 3, unlocked nodes hold 0"):
        tree.check_invariants()
    tree.inc_lock_ref(tree.root)                # locking the root changes nothing
    node.lock_ref = 0
    tree.insert([1, 2, 3, 4], [0, 1, 2, 3])
    node.children[4].lock_ref = 1               # a locked child under an unlocked parent
    tree.evictable_size, tree.protected_size = 3, 1
    with pytest.raises(AssertionError, match="children count 1 users"):
        tree.check_invariants()


# ------------------------------------------------------------------------------ page size


def page_slots(pages, page_size):
    return [p * page_size + i for p in pages for i in range(page_size)]


def test_page_size_aligns_inserts_and_matches():
    tree = RadixCache(page_size=4)
    key = list(range(100, 110))                        # 10 tokens: two pages and a partial one
    value = page_slots([2, 0], 4) + [40, 41]
    assert tree.insert(key, value) == 0
    assert tree.total_size() == 8                      # the partial page stays the caller's
    assert tree.match_prefix(key)[0] == page_slots([2, 0], 4)
    # agreement stops inside the second page: the match (and the split) fall back to the page edge
    value, node = tree.match_prefix(key[:6] + [0, 0, 0, 0])
    assert value == page_slots([2], 4) and node.key == key[:4] and tree.last_split is node
    assert tree.match_prefix(key[:7])[0] == page_slots([2], 4)
    assert tree.insert(key[:4] + [1, 1, 1, 1], page_slots([2, 5], 4)) == 4
    assert sorted(node.children) == [(1, 1, 1, 1), (104, 105, 106, 107)]
    tree.check_invariants()


def test_page_size_rejects_slots_that_are_not_aligned_pages():
    tree = RadixCache(page_size=2)
    with pytest.raises(ValueError, match="page"):
        tree.insert([1, 2, 3, 4], [1, 2, 4, 5])        # first page starts at an odd slot
    with pytest.raises(ValueError, match="page"):
        tree.insert([1, 2, 3, 4], [0, 1, 5, 4])        # second page not consecutive
    assert tree.total_size() == 0


def test_evicted_slots_are_whole_pages():
    page_size, rng = 4, random.Random(1)
    tree = RadixCache(page_size=page_size)
    free_pages = list(range(64))
    for _ in range(12):
        n_pages = rng.randint(1, 4)
        key = [rng.randrange(3) for _ in range(n_pages * page_size)]
        pages = [free_pages.pop() for _ in range(n_pages)]
        cached = tree.insert(key, page_slots(pages, page_size))
        free_pages += pages[:cached // page_size]      # duplicates go back to the pool
    while tree.total_size():
        freed = tree.evict(rng.randint(1, 6)).tolist()
        assert len(freed) % page_size == 0
        for start in range(0, len(freed), page_size):
            page = freed[start:start + page_size]
            assert page[0] % page_size == 0 and page == list(range(page[0], page[0] + page_size))
        tree.check_invariants()


# --------------------------------------------------------------- brute-force state machine


class RadixAgainstModel(RuleBasedStateMachine):
    """The model: a dict from every cached prefix of whole pages (a tuple of tokens) to the slots
    of its last page, the clock value of the last walk through each, and the locked handles.
    With pages the tree does not share a partial page, so neither does the model."""

    fresh_keys = st.lists(st.integers(0, 2), max_size=10)

    @initialize(page_size=st.sampled_from([1, 2, 3]))
    def setup(self, page_size):
        self.ps = page_size
        self.tree = RadixCache(page_size)
        self.cached: dict[tuple, tuple] = {}
        self.access: dict[tuple, int] = {}
        self.clock = 0
        self.handles: list = []
        self.next_page = 0
        self.inserted: list[list[int]] = []

    def draw_key(self, data):
        """A fresh key, or a cut of an inserted key or locked prefix followed by a few new tokens
        (so that walks often stop inside edges, locked ones included, and split them)."""
        key = data.draw(self.fresh_keys)
        bases = self.inserted + [list(prefix) for _, prefix in self.handles if prefix]
        if bases and data.draw(st.booleans()):
            base = data.draw(st.sampled_from(bases))
            key = base[:data.draw(st.integers(0, len(base)))] + key[:data.draw(st.integers(0, 3))]
        return key

    # model helpers
    def prefixes(self, key):
        """The whole-page prefixes of key, shortest first."""
        return [tuple(key[:end]) for end in range(self.ps, len(key) + 1, self.ps)]

    def model_match_len(self, key):
        n = 0
        for prefix in self.prefixes(key):
            if prefix not in self.cached:
                break
            n = len(prefix)
        return n

    def touch(self, key, n):
        self.clock += 1
        for prefix in self.prefixes(key[:n]):
            self.access[prefix] = self.clock

    def match(self, key, as_array):
        value, node = self.tree.match_prefix(np.array(key, dtype=np.int64) if as_array else key)
        self.touch(key, self.model_match_len(key))
        return value, node

    def locked_prefixes(self):
        return {p for _, prefix in self.handles for p in self.prefixes(prefix)}

    # rules
    @rule(as_array=st.booleans(), data=st.data())
    def insert(self, as_array, data):
        key = self.draw_key(data)
        self.inserted.append(key)
        pages = range(self.next_page, self.next_page + -(-len(key) // self.ps))
        self.next_page = pages.stop
        value = page_slots(pages, self.ps)[:len(key)]
        expected = self.model_match_len(key)
        if as_array:
            got = self.tree.insert(np.array(key, dtype=np.int64), np.array(value, dtype=np.int64))
        else:
            got = self.tree.insert(key, value)
        assert got == expected
        for prefix in self.prefixes(key):
            self.cached.setdefault(prefix, tuple(value[len(prefix) - self.ps:len(prefix)]))
        aligned = len(key) - len(key) % self.ps
        self.touch(key, aligned)
        assert path_key(self.tree.last_match_path[-1]) == key[:aligned]

    @rule(as_array=st.booleans(), data=st.data())
    def match_prefix(self, as_array, data):
        key = self.draw_key(data)
        n = self.model_match_len(key)
        expected = [slot for p in self.prefixes(key[:n]) for slot in self.cached[p]]
        value, node = self.match(key, as_array)
        assert value == expected
        assert path_key(node) == key[:n]
        # prefix closure: every whole-page prefix of the match matches in full
        k = data.draw(st.integers(0, n // self.ps)) * self.ps
        assert self.match(key[:k], as_array)[0] == expected[:k]

    @rule(data=st.data())
    def lock(self, data):
        key = self.draw_key(data)
        _, node = self.match(key, False)
        self.tree.inc_lock_ref(node)
        self.handles.append((node, tuple(path_key(node))))

    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def unlock(self, data):
        node, _ = self.handles.pop(data.draw(st.integers(0, len(self.handles) - 1)))
        self.tree.dec_lock_ref(node)

    @rule(num_tokens=st.integers(0, 6))
    def evict(self, num_tokens):
        evictable_before = self.tree.evictable_size
        freed = self.tree.evict(num_tokens)
        assert len(freed) == evictable_before - self.tree.evictable_size
        assert len(freed) >= num_tokens or self.tree.evictable_size == 0
        if self.tree.last_evicted:  # stops as soon as enough is freed
            assert len(freed) - len(self.tree.last_evicted[-1].value) < num_tokens
        by_page = {slots: prefix for prefix, slots in self.cached.items()}
        pages = [tuple(freed[i:i + self.ps]) for i in range(0, len(freed), self.ps)]
        removed = {by_page[page] for page in pages}  # KeyError: freed something not cached
        assert len(removed) == len(pages)
        assert not removed & self.locked_prefixes()
        for prefix in removed:
            del self.cached[prefix], self.access[prefix]
        # least recently used first: times popped never go down, and no unlocked leaf left is older
        order = [n.last_access for n in self.tree.last_evicted]
        assert order == sorted(order)
        if order:
            left = [n.last_access for n in self.tree.nodes() if not n.children and n.lock_ref == 0]
            assert all(t >= order[-1] for t in left)

    # checked after every step
    @invariant()
    def tree_equals_model(self):
        self.tree.check_invariants()
        contents, times = {}, {}
        stack = [(self.tree.root, ())]
        while stack:
            node, prefix = stack.pop()
            for child in node.children.values():
                p = prefix
                for start in range(0, len(child.key), self.ps):
                    p += tuple(child.key[start:start + self.ps])
                    contents[p] = tuple(child.value[start:start + self.ps])
                    times[p] = child.last_access
                stack.append((child, p))
        assert contents == self.cached
        assert times == self.access
        assert all(len(p) == self.ps or p[:-self.ps] in self.cached for p in self.cached)

    @invariant()
    def sizes_and_locks(self):
        locked = self.locked_prefixes()
        assert self.tree.total_size() == len(self.cached) * self.ps
        assert self.tree.protected_size == len(locked) * self.ps
        assert self.tree.evictable_size == (len(self.cached) - len(locked)) * self.ps
        for node, prefix in self.handles:  # a locked path is still attached and still cached
            assert path_key(node) == list(prefix)
            assert all(p in self.cached for p in self.prefixes(prefix))


RadixAgainstModel.TestCase.settings = settings(max_examples=150, stateful_step_count=50,
                                               deadline=None)
TestRadixAgainstModel = RadixAgainstModel.TestCase
