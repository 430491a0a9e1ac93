"""Reference solution for exercise 25: vLLM's free order and duplicate cached blocks."""

from collections import Counter, OrderedDict


class VllmBlockPool:
    def __init__(self, num_blocks: int):
        if not isinstance(num_blocks, int) or num_blocks < 1:
            raise ValueError(f"num_blocks must be an int >= 1, got {num_blocks!r}")
        self.ref_cnt = [0] * num_blocks
        self._hash: list[int | None] = [None] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))  # head first
        self._holders: dict[int, dict[int, None]] = {}   # hash -> its blocks, oldest cached first

    @property
    def free_queue(self) -> list[int]:
        """Block ids with no reference, head (reused first) to tail."""
        return list(self._free)

    def allocate(self, n: int) -> list[int]:
        """Take n blocks from the head of the free queue; a block that still caches a hash loses it."""
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"n must be an int >= 0, got {n!r}")
        if n > len(self._free):
            raise ValueError(f"cannot allocate {n} blocks: only {len(self._free)} are free")
        blocks = []
        for _ in range(n):
            block, _ = self._free.popitem(last=False)
            self._uncache(block)
            self.ref_cnt[block] = 1
            blocks.append(block)
        return blocks

    def cache_block(self, block_id: int, block_hash: int) -> None:
        """Register a full, allocated block under its hash (other blocks may hold the same hash)."""
        self._check_ids([block_id])
        if block_hash is None:
            raise ValueError("block_hash must not be None")
        if self.ref_cnt[block_id] == 0:
            raise ValueError(f"block {block_id} is not allocated: only a block a request holds can be cached")
        if self._hash[block_id] == block_hash:
            return                                   # cached already (vLLM skips such a block)
        if self._hash[block_id] is not None:
            raise ValueError(f"block {block_id} already caches hash {self._hash[block_id]!r}")
        self._hash[block_id] = block_hash
        self._holders.setdefault(block_hash, {})[block_id] = None

    def lookup(self, block_hash: int) -> int | None:
        """The block that serves a hit on block_hash: the earliest cached one still holding it."""
        holders = self._holders.get(block_hash)
        return next(iter(holders)) if holders else None

    def cached_blocks(self, block_hash: int) -> list[int]:
        """Every block holding block_hash, oldest cached first."""
        return list(self._holders.get(block_hash, ()))

    def touch(self, block_ids: list[int]) -> None:
        """A request reuses these blocks (a cache hit): one more reference each."""
        self._check_ids(block_ids)
        for block in block_ids:
            if self.ref_cnt[block] == 0:
                del self._free[block]            # no longer an eviction candidate
            self.ref_cnt[block] += 1

    def free(self, block_ids: list[int]) -> None:
        """A request's blocks, in its order, are released; they are freed last block first."""
        self._check_ids(block_ids)
        for block, count in Counter(block_ids).items():
            if count > self.ref_cnt[block]:
                raise ValueError(f"block {block} is freed {count} time(s) but has {self.ref_cnt[block]} reference(s)")
        fresh: list[int] = []                    # released blocks without a hash
        cached: list[int] = []                   # released blocks holding one
        for block in reversed(block_ids):        # the tail of a request goes first
            self.ref_cnt[block] -= 1
            if self.ref_cnt[block] == 0:
                (fresh if self._hash[block] is None else cached).append(block)
        for block in reversed(fresh):            # to the head, keeping their freeing order
            self._free[block] = None
            self._free.move_to_end(block, last=False)
        for block in cached:                     # to the tail: evicted last (LRU)
            self._free[block] = None

    def _uncache(self, block: int) -> None:
        block_hash = self._hash[block]
        if block_hash is None:
            return
        holders = self._holders[block_hash]
        del holders[block]
        if not holders:
            del self._holders[block_hash]
        self._hash[block] = None

    def _check_ids(self, block_ids: list[int]) -> None:
        for block in block_ids:
            if not isinstance(block, int) or not 0 <= block < len(self.ref_cnt):
                raise ValueError(f"no block {block!r}: ids are 0..{len(self.ref_cnt) - 1}")
