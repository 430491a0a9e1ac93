"""Mutants of solution.py that behave exactly like it (see practice/mutation.py): id -> why."""

EQUIVALENT = {
    "RadixCache.match_prefix: 'n = _common_len(child.key, key)': '_common_len(child.key, key)' -> '_common_len(key, child.key)'":
        "the length of the common prefix is symmetric",
    "RadixCache.insert: 'n = _common_len(child.key, key)': '_common_len(child.key, key)' -> '_common_len(key, child.key)'":
        "the length of the common prefix is symmetric",
    "RadixCache.match_prefix: 'if child is None:': 'child is None' -> 'not child'":
        "a Node defines neither __bool__ nor __len__, so every node is true",
    "RadixCache.insert: 'if child is None:': 'child is None' -> 'not child'":
        "a Node defines neither __bool__ nor __len__, so every node is true",
}
