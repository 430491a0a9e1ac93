"""Exercise 22: the free queue as an LRU cache. Write allocate, free, touch and admit.

Everything else in this class is given and already works.
"""

from collections import OrderedDict


class PrefixCachingBlockPool:
    def __init__(self, num_blocks: int, block_size: int):
        self.block_size = block_size
        self.ref_cnt = [0] * num_blocks
        self.free_queue = OrderedDict((b, None) for b in range(num_blocks))   # the head is reused first
        self.hash_to_block: dict[int, int] = {}
        self.block_hash: list[int | None] = [None] * num_blocks
        self.num_queries = self.num_hits = 0                                   # in tokens

    def allocate(self, n: int) -> list[int] | None:
        """Take n blocks from the head of the free queue (all or nothing: None when short).

        A taken block that still has a hash is evicted from the cache (its hash forgotten).
        Every taken block ends with ref_cnt 1.
        """
        raise NotImplementedError

    def free(self, blocks: list[int]) -> None:
        """Drop one reference to each block, walking them in reverse order.

        A block reaching ref_cnt 0 joins the tail of the free queue and keeps its hash.
        """
        raise NotImplementedError

    def touch(self, blocks: list[int]) -> None:
        """A request reuses these cached blocks: +1 reference each; a block at ref_cnt 0 leaves
        the free queue first."""
        raise NotImplementedError

    def admit(self, token_ids: list[int]) -> list[int] | None:
        """The block table of a new request whose prompt is token_ids: the blocks of
        lookup(token_ids[:-1]) (touched), then fresh blocks for the rest of the prompt.

        If those fresh blocks plus the hit blocks now in the free queue are more than the free
        queue holds, return None having touched and allocated nothing (lookup's counters count the
        query anyway). ValueError for an empty prompt.
        """
        raise NotImplementedError

    # ---- given -------------------------------------------------------------------------------

    def block_hashes(self, token_ids: list[int]) -> list[int]:
        """Chained hashes of the full blocks (exercise 21)."""
        hashes, parent = [], None
        for start in range(0, len(token_ids) - self.block_size + 1, self.block_size):
            parent = hash((parent, tuple(token_ids[start:start + self.block_size])))
            hashes.append(parent)
        return hashes

    def lookup(self, token_ids: list[int]) -> list[int]:
        """The blocks of the longest cached run of full blocks at the start of token_ids."""
        hit = []
        for h in self.block_hashes(token_ids):
            b = self.hash_to_block.get(h)
            if b is None:
                break
            hit.append(b)
        self.num_queries += len(token_ids)
        self.num_hits += len(hit) * self.block_size
        return hit

    def cache_blocks(self, token_ids: list[int], block_ids: list[int], num_computed: int) -> None:
        """Register the full blocks among the first num_computed tokens (after a forward pass)."""
        for i, h in enumerate(self.block_hashes(token_ids[:num_computed])):
            b = block_ids[i]
            if self.block_hash[b] is None and h not in self.hash_to_block:
                self.block_hash[b] = h
                self.hash_to_block[h] = b
