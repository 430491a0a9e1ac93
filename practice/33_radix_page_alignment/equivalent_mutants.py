"""Mutants of solution.py that behave exactly like it (`judge.py mutate 33`), each with the reason."""

EQUIVALENT = {
    "PagedRadixCache.match_prefix: 'n = self._common_pages(child.key, key)': 'self._common_pages(child.key, key)' -> 'self._common_pages(key, child.key)'":
        'the common prefix of two keys does not depend on their order',
    "PagedRadixCache.match_prefix: 'if child is None:': 'child is None' -> 'not child'":
        'a Node is always true (it defines no __len__ or __bool__)',
    "PagedRadixCache.match_prefix: 'key = key[:self._aligned(len(key))]': ':self._aligned(len(key))' -> ':self._aligned(len(key)) + 1'":
        'the one extra token forms a partial page, which never matches a stored whole page',
    "PagedRadixCache.insert: 'n = self._common_pages(child.key, rest)': 'self._common_pages(child.key, rest)' -> 'self._common_pages(rest, child.key)'":
        'the common prefix of two keys does not depend on their order',
    "PagedRadixCache.insert: 'if child is None:': 'child is None' -> 'not child'":
        'a Node is always true (it defines no __len__ or __bool__)',
    "PagedRadixCache._split: 'assert parent is not None': 'parent is not None' -> 'parent'":
        'a Node is always true, and the root is never split',
    "PagedRadixCache._common_pages: 'while n + size <= min(len(a), len(b)) and a[n:n + size] == b[n:n + size]:': 'min(len(a), len(b))' -> 'max(len(a), len(b))'":
        "past the end of the shorter key its slice is shorter than a page and never equals the other's full page",
    "PagedRadixCache._common_pages: 'while n + size <= min(len(a), len(b)) and a[n:n + size] == b[n:n + size]:': 'min(len(a), len(b))' -> 'min(len(b), len(a))'":
        'min is symmetric',
    "PagedRadixCache.match_prefix: 'key = key[:self._aligned(len(key))]' -> 'pass'":
        'without the cut, the partial last page is looked up and never equals a stored whole page',
    "PagedRadixCache._split: 'assert parent is not None' -> 'pass'":
        'the root is never split (every match starts below it), so the assert never fires',
}
