"""Exercise 25: vLLM's free order (unhashed blocks first, hashed ones LRU) and duplicate cached blocks."""


class VllmBlockPool:
    def __init__(self, num_blocks: int):
        """num_blocks blocks, ids 0..num_blocks-1, all free; the free queue starts as [0, 1, ..., n-1].

        Public attribute: ref_cnt, a list with one reference count per block.
        ValueError if num_blocks is not an int >= 1.
        """
        raise NotImplementedError

    @property
    def free_queue(self) -> list[int]:
        """Block ids with no reference, head (reused first) to tail."""
        raise NotImplementedError

    def allocate(self, n: int) -> list[int]:
        """Take n blocks from the head of the free queue, in queue order; each gets ref_cnt 1.

        A taken block that still caches a hash is evicted: it no longer holds that hash (other
        blocks holding the same hash keep it). ValueError, changing nothing, if n is not an
        int >= 0 or fewer than n blocks are free.
        """
        raise NotImplementedError

    def cache_block(self, block_id: int, block_hash: int) -> None:
        """Register an allocated, full block under its hash. Several blocks may hold one hash.

        Caching a block again under the hash it already holds changes nothing. ValueError,
        changing nothing, for an unknown id, a block with ref_cnt 0, a block that already holds
        another hash, or block_hash None.
        """
        raise NotImplementedError

    def lookup(self, block_hash: int) -> int | None:
        """The block that serves a hit on block_hash: of the blocks holding it, the one cached
        earliest; None if no block holds it. Changes nothing."""
        raise NotImplementedError

    def cached_blocks(self, block_hash: int) -> list[int]:
        """Every block holding block_hash, in the order they were cached ([] if none)."""
        raise NotImplementedError

    def touch(self, block_ids: list[int]) -> None:
        """A request reuses these blocks (a cache hit): one more reference each; a block that had
        none leaves the free queue. ValueError, changing nothing, for an unknown id."""
        raise NotImplementedError

    def free(self, block_ids: list[int]) -> None:
        """A request releases its blocks, given in the request's order (first block first).

        The blocks are released in reverse order (last block first), one reference per listing.
        Of the blocks whose count reaches 0, those holding no hash go to the head of the free
        queue, those holding a hash to the tail, each group in the order it was released.
        ValueError, changing nothing, for an unknown id or a block listed more times than it has
        references.
        """
        raise NotImplementedError
