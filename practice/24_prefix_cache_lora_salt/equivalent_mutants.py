"""Mutants of solution.py that behave exactly like it (see practice/mutation.py): id -> why."""

EQUIVALENT = {
    "PrefixCachingBlockPool.touch: 'for block in blocks:' -> 'for block in reversed(list(blocks)):'":
        "each block's update depends only on its own count; a repeated block gets the same total",
    "PrefixCachingBlockPool.cache_blocks: 'for i, h in enumerate(self.block_hashes(token_ids[:num_computed], lora_id, ca...' "
    "-> 'for i, h in reversed(list(enumerate(self.block_hashes(token_ids[:num_computed...'":
        "the hashes of one request's blocks are all different (chained), so the registrations are independent",
}
