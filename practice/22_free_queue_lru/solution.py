"""Reference solution for exercise 22: the free queue as an LRU cache, and admission that leaves it alone."""

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
        if n > len(self.free_queue):
            return None
        blocks = []
        for _ in range(n):
            b, _ = self.free_queue.popitem(last=False)
            if self.block_hash[b] is not None:   # about to be overwritten: forget what it cached
                del self.hash_to_block[self.block_hash[b]]
                self.block_hash[b] = None
            self.ref_cnt[b] = 1
            blocks.append(b)
        return blocks

    def free(self, blocks: list[int]) -> None:
        """Drop one reference to each block, walking them in reverse order.

        A block reaching ref_cnt 0 joins the tail of the free queue and keeps its hash.
        """
        for b in reversed(blocks):   # the tail of a sequence is evicted before its head
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self.free_queue[b] = None

    def touch(self, blocks: list[int]) -> None:
        """A request reuses these cached blocks: +1 reference each; a block at ref_cnt 0 leaves
        the free queue first."""
        for b in blocks:
            if self.ref_cnt[b] == 0:
                del self.free_queue[b]
            self.ref_cnt[b] += 1

    def admit(self, token_ids: list[int]) -> list[int] | None:
        """The block table of a new request for prompt token_ids: its cache hits (never the last
        token) then fresh blocks; None, touching and allocating nothing, if they do not fit."""
        if not token_ids:
            raise ValueError("a prompt needs at least one token")
        hits = self.lookup(token_ids[:-1])
        need = -(-len(token_ids) // self.block_size) - len(hits)
        hits_in_queue = sum(1 for b in hits if self.ref_cnt[b] == 0)   # touching takes them out
        if need + hits_in_queue > len(self.free_queue):
            return None
        self.touch(hits)          # first: a hit at the head of the queue must not be handed out
        return hits + self.allocate(need)

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
