"""Tests for exercise 33: a radix tree with page_size > 1 (whole-page matching, page-keyed
children, page-aligned inserts and splits, the unaligned tail of a finished request)."""

import random

from solution_under_test import PagedRadixCache


def raises_value_error(call) -> bool:
    try:
        call()
    except ValueError:
        return True
    return False


def check_tree(cache):
    """The structure the statement asks for; returns {path tuple: slots} for every node."""
    size, seen, stack = cache.page_size, {}, [(cache.root, ())]
    assert cache.root.key == [], "the root's key is empty"
    assert cache.root.value == [], "the root holds no slot"
    while stack:
        node, path = stack.pop()
        for page, child in node.children.items():
            assert child.parent is node, "a child's parent is the node that holds it"
            assert len(child.key) > 0, "no node has an empty key"
            assert len(child.key) % size == 0, f"edge {child.key} is not whole pages"
            assert len(child.value) == len(child.key), "one slot per token"
            assert page == tuple(child.key[:size]), f"child stored under {page}, its first page is {tuple(child.key[:size])}"
            seen[path + tuple(child.key)] = list(child.value)
            stack.append((child, path + tuple(child.key)))
    return seen


def test_example_match_is_whole_pages():
    cache = PagedRadixCache(page_size=2)
    assert cache.insert([1, 2, 3, 4], [10, 11, 12, 13]) == 0, "nothing was cached"
    assert cache.match_prefix([1, 2, 3, 4, 5]) == [10, 11, 12, 13], "the 5th token is not a whole page"
    assert cache.match_prefix([1, 2, 3, 9]) == [10, 11], "page [3, 9] differs from [3, 4]: no token of it"
    assert cache.match_prefix([1, 2, 3]) == [10, 11], "3 tokens: one whole page"
    assert cache.match_prefix([1]) == [], "one token is less than a page: nothing"


def test_example_finished_request_frees_duplicates_and_tail():
    cache = PagedRadixCache(page_size=2)
    cache.insert([1, 2, 3, 9], [10, 11, 20, 21])
    # A request matched [1, 2] (slots 10, 11), then computed [3, 9] again and [7, 7] and [5].
    freed = cache.cache_finished([1, 2, 3, 9, 7, 7, 5], [10, 11, 32, 33, 34, 35, 36], num_prefix=2)
    assert freed == [32, 33, 36], "slots 32, 33 duplicate cached tokens; 36 is an incomplete page"
    assert cache.match_prefix([1, 2, 3, 9, 7, 7, 5]) == [10, 11, 20, 21, 34, 35], (
        "the tree's slots: its own [10, 11, 20, 21], then the request's new page")
    assert cache.total_size() == 6, "3 pages are cached"


def test_bad_page_size():
    for bad in (0, -1, 2.0, "2", None):
        assert raises_value_error(lambda bad=bad: PagedRadixCache(bad)), f"PagedRadixCache({bad!r})"


def test_children_are_keyed_by_their_whole_first_page():
    cache = PagedRadixCache(2)
    cache.insert([1, 2, 3, 4], [10, 11, 12, 13])
    cache.insert([1, 2, 3, 9], [10, 11, 22, 23])
    nodes = check_tree(cache)
    assert nodes[(1, 2)] == [10, 11], "the shared page [1, 2]"
    assert sorted(cache.root.children[(1, 2)].children) == [(3, 4), (3, 9)], "two pages starting with 3"
    assert cache.match_prefix([1, 2, 3, 4]) == [10, 11, 12, 13], "the cached slots of [1, 2, 3, 4]"
    assert cache.match_prefix([1, 2, 3, 9]) == [10, 11, 22, 23], "the cached slots of [1, 2, 3, 9]"


def test_splits_land_on_page_boundaries():
    cache = PagedRadixCache(3)
    cache.insert([1, 2, 3, 4, 5, 6, 7, 8, 9], list(range(100, 109)))
    assert cache.insert([1, 2, 3, 4, 5, 0, 7, 8, 9], list(range(200, 209))) == 3, "pages differ from the 2nd on"
    nodes = check_tree(cache)
    assert nodes[(1, 2, 3)] == [100, 101, 102], "the shared first page"
    assert nodes[(1, 2, 3, 4, 5, 6, 7, 8, 9)] == [103, 104, 105, 106, 107, 108], (
        "the first insert's branch, split after one page")
    assert nodes[(1, 2, 3, 4, 5, 0, 7, 8, 9)] == [203, 204, 205, 206, 207, 208], "the second insert's branch"
    assert len(nodes) == 3, "three nodes"
    assert cache.match_prefix([1, 2, 3, 4, 5, 6, 7, 8]) == [100, 101, 102, 103, 104, 105], (
        "8 tokens: two whole pages of 3")
    assert cache.total_size() == 15, "5 pages of 3 are cached"


def test_insert_keeps_cached_slots_and_returns_the_cached_length():
    cache = PagedRadixCache(2)
    assert cache.insert([5, 6], [1, 2]) == 0, "nothing was cached"
    assert cache.insert([5, 6, 7, 8], [9, 9, 3, 4]) == 2, "the first page was cached"
    assert cache.match_prefix([5, 6, 7, 8]) == [1, 2, 3, 4], "the cached slots 1, 2 stay; 9, 9 are the caller's to free"
    assert cache.insert([5, 6, 7, 8], [0, 0, 0, 0]) == 4, "everything was cached"
    assert cache.insert([5, 6], [0, 0]) == 2, "a cached prefix"
    assert cache.match_prefix([5, 6, 7, 8]) == [1, 2, 3, 4], "no insert replaced a cached slot"
    assert cache.total_size() == 4, "2 pages, nothing more"
    nodes = check_tree(cache)
    assert nodes == {(5, 6): [1, 2], (5, 6, 7, 8): [3, 4]}, "two nodes, split after the first page"


def test_insert_ending_inside_an_edge_splits_it():
    cache = PagedRadixCache(2)
    cache.insert([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6])
    assert cache.insert([1, 2, 3, 4], [0, 0, 0, 0]) == 4, "everything was cached"
    nodes = check_tree(cache)
    assert nodes == {(1, 2, 3, 4): [1, 2, 3, 4], (1, 2, 3, 4, 5, 6): [5, 6]}, (
        "the edge is split after the inserted pages")
    assert cache.total_size() == 6, "a split caches nothing new"


def test_insert_rejects_unaligned_or_mismatched_keys():
    cache = PagedRadixCache(2)
    cache.insert([1, 2], [1, 2])
    for key, value in (([1, 2, 3], [1, 2, 3]), ([3], [3]), ([1, 2, 3, 4], [1, 2, 3]), ([4, 4], [4])):
        assert raises_value_error(lambda key=key, value=value: cache.insert(key, value)), f"insert({key}, {value})"
        assert check_tree(cache) == {(1, 2): [1, 2]}, "a refused insert changes nothing"
    assert cache.insert([], []) == 0, "an empty insert caches nothing"
    assert cache.total_size() == 2, "only [1, 2] is cached"


def test_match_changes_nothing_cached():
    cache = PagedRadixCache(2)
    cache.insert([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6])
    for key in ([1, 2, 3, 4, 9, 9], [1, 2, 3], [], [7, 7], [1, 2, 3, 4, 5, 6, 7, 8]):
        cache.match_prefix(key)
    assert cache.total_size() == 6, "match_prefix cached nothing"
    assert cache.match_prefix([1, 2, 3, 4, 5, 6]) == [1, 2, 3, 4, 5, 6], "and removed nothing"
    check_tree(cache)


def test_finished_request_with_an_aligned_length_frees_no_tail():
    cache = PagedRadixCache(4)
    assert cache.cache_finished([1, 2, 3, 4, 5, 6, 7, 8], list(range(8)), num_prefix=0) == [], (
        "8 tokens, 2 whole pages: nothing to free")
    assert cache.match_prefix([1, 2, 3, 4, 5, 6, 7, 8]) == list(range(8)), "the request's slots are the tree's now"
    assert cache.cache_finished([1, 2, 3], [50, 51, 52], num_prefix=0) == [50, 51, 52], "shorter than a page"
    assert cache.total_size() == 8, "the 3-token request cached nothing"


def test_finished_request_duplicates_are_exactly_its_recomputed_part():
    cache = PagedRadixCache(2)
    # Requests A and B share [1, 2, 3, 4]; both matched nothing and ran side by side.
    a = cache.cache_finished([1, 2, 3, 4, 5], [10, 11, 12, 13, 14], num_prefix=0)
    b = cache.cache_finished([1, 2, 3, 4, 6, 6, 7], [20, 21, 22, 23, 24, 25, 26], num_prefix=0)
    assert a == [14], "A's tail [5] is an incomplete page"
    assert b == [20, 21, 22, 23, 26], "B's copy of [1, 2, 3, 4] and its tail go back; [6, 6] is kept"
    # C matched [1, 2] (the tree's slots 10, 11) and computed the rest itself.
    c = cache.cache_finished([1, 2, 3, 4, 6, 6, 8, 8, 9], [10, 11, 32, 33, 34, 35, 36, 37, 38], num_prefix=2)
    assert c == [32, 33, 34, 35, 38], "C's copies of [3, 4, 6, 6] and its tail [9] go back; [8, 8] is kept"
    assert cache.match_prefix([1, 2, 3, 4, 6, 6, 8, 8]) == [10, 11, 12, 13, 24, 25, 36, 37], (
        "the tree's slots: A's, then B's [6, 6], then C's [8, 8]")


def test_finished_request_bad_input_changes_nothing():
    cache = PagedRadixCache(2)
    cache.insert([1, 2], [1, 2])
    for args in (([1, 2, 3], [1, 2]), ([1, 2, 3, 4], [1, 2, 3, 4], 1), ([1, 2, 3, 4], [1, 2, 3, 4], 6),
                 ([1, 2, 3, 4, 5], [1, 2, 3, 4, 5], -2), ([1, 2, 3, 4, 5], [1, 2, 3, 4, 5], 2.0),
                 ([1, 2, 3, 4, 5], [1, 2, 3, 4, 5], 6)):     # 5 tokens hold 2 whole pages: at most 4
        tokens, slots = args[0], args[1]
        num_prefix = args[2] if len(args) > 2 else 0
        assert raises_value_error(lambda t=tokens, s=slots, p=num_prefix: cache.cache_finished(t, s, p)), f"cache_finished{args}"
        assert check_tree(cache) == {(1, 2): [1, 2]}, "a refused call changes nothing"
    assert cache.cache_finished([1, 2, 3, 4, 5], [1, 2, 3, 4, 5], 4) == [5], "num_prefix may be the aligned length"


def test_page_size_one_is_a_plain_radix_tree():
    cache = PagedRadixCache(1)
    cache.insert([1, 2, 3], [1, 2, 3])
    assert cache.match_prefix([1, 2, 4]) == [1, 2], "page size 1: any common prefix matches"
    assert cache.cache_finished([1, 2, 4, 5], [1, 2, 9, 8], 2) == [], (
        "[1, 2] were matched and [4, 5] are new: nothing to free")
    assert cache.match_prefix([1, 2, 4, 5, 6]) == [1, 2, 9, 8], "the new tokens are cached"
    assert sorted(cache.root.children[(1,)].children) == [(3,), (4,)], "the split after [1] gives two children"
    assert raises_value_error(lambda: cache.cache_finished([7], [70], -1)), "num_prefix -1 is a multiple of 1, but negative"
    assert cache.match_prefix([7]) == [], "the refused call cached nothing"


class Model:
    """Every cached page, keyed by the whole prefix through it: slow and obviously right."""

    def __init__(self, size):
        self.size, self.pages = size, {}

    def insert(self, key, value):
        done = None
        for j in range(len(key) // self.size):
            through = tuple(key[:(j + 1) * self.size])
            if through not in self.pages:
                done = j * self.size if done is None else done
                self.pages[through] = value[j * self.size:(j + 1) * self.size]
        return len(key) if done is None else done

    def match(self, key):
        got = []
        for j in range(len(key) // self.size):
            page = self.pages.get(tuple(key[:(j + 1) * self.size]))
            if page is None:
                break
            got += page
        return got


def test_random_against_a_model():
    rng = random.Random(33)
    for _trial in range(30):
        size = rng.choice([1, 2, 3, 4])
        cache, model, slot = PagedRadixCache(size), Model(size), 0
        for _step in range(40):
            n = rng.randint(0, 5) * size
            key = [rng.randint(0, 2) for _ in range(n)]
            value = list(range(slot, slot + n))
            slot += n
            if rng.random() < 0.5:
                assert cache.insert(key, value) == model.insert(key, value), (
                    "insert returns the already-cached length")
            else:
                tail = [rng.randint(0, 2) for _ in range(rng.randint(0, size - 1))]
                extra = list(range(slot, slot + len(tail)))
                slot += len(tail)
                prefix = len(model.match(key)) if rng.random() < 0.7 else 0
                slots = (model.match(key)[:prefix] + value[prefix:]) + extra
                already = model.insert(key, slots[:n])
                assert cache.cache_finished(key + tail, slots, prefix) == slots[prefix:already] + extra, (
                    "cache_finished frees the duplicates, then the tail")
            check_tree(cache)
            assert cache.total_size() == len(model.pages) * size, "total_size counts the cached pages"
            for _ in range(3):
                probe = [rng.randint(0, 2) for _ in range(rng.randint(0, 14))]
                assert cache.match_prefix(probe) == model.match(probe), (
                    "match_prefix returns the longest cached prefix in whole pages")
