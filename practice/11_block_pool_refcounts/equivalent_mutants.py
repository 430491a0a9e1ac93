"""Mutants of solution.py that behave exactly like it (see practice/mutation.py): id -> why."""

EQUIVALENT = {
    "BlockPool.allocate: 'for b in blocks:' -> 'for b in reversed(list(blocks)):'":
        "each block's count is set independently; the order of the assignments is invisible",
    "BlockPool.share: 'for b in blocks:' -> 'for b in reversed(list(blocks)):'":
        "increments commute (the whole call was validated before the loop)",
    "BlockPool.free: 'for b in blocks:' -> 'for b in reversed(list(blocks)):'":
        "only changes which free block allocate() hands out next, and the statement allows any",
    "BlockPool._check: 'for b in blocks:' -> 'for b in reversed(list(blocks)):'":
        "only changes which bad id the ValueError names first; the call is rejected either way",
    "BlockPool._check: 'for b, times in Counter(blocks).items():' -> 'for b, times in reversed(list(Counter(blocks).items())):'":
        "only changes which bad block the ValueError names first; the call is rejected either way",
}
