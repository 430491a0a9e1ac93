"""Mutants of solution.py that behave exactly like it (see practice/mutation.py): id -> why."""

EQUIVALENT = {
    "PrefixCachingBlockPool.touch: 'for b in blocks:' -> 'for b in reversed(list(blocks)):'":
        "each block's update depends only on its own count; a repeated block gets the same total",
}
