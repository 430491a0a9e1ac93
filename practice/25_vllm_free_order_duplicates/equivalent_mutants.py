"""Mutants of solution.py that behave exactly like it (`judge.py mutate 25`), each with the reason."""

EQUIVALENT = {
    "VllmBlockPool.touch: 'for block in block_ids:' -> 'for block in reversed(list(block_ids)):'":
        "each block's count and queue removal is independent of the others; removal from an OrderedDict keeps the order of the rest",
    "VllmBlockPool.free: 'for block, count in Counter(block_ids).items():' -> "
    "'for block, count in reversed(list(Counter(block_ids).items())):'":
        "the check only decides whether to raise ValueError; which bad block is named first does not matter",
    "VllmBlockPool._uncache: 'if not holders:' -> 'pass'":
        "an empty holder dict reads like a missing one: lookup() returns None and cached_blocks() [] either way",
    "VllmBlockPool._uncache: 'del self._holders[block_hash]' -> 'pass'":
        "same as above: only an empty entry is left behind",
    "VllmBlockPool._check_ids: 'for block in block_ids:' -> 'for block in reversed(list(block_ids)):'":
        "any bad id raises the same ValueError; the order of the checks only changes which id the message names",
}
