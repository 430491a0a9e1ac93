"""paged.py - the block allocator behind a paged KV cache.

The KV cache is cut into fixed-size blocks (``block_size`` tokens each). A sequence owns a list of
block ids (its *block table*) instead of one contiguous buffer, so memory is handed out a block at
a time and nothing is reserved for tokens that may never be generated.

``BlockPool`` only does the bookkeeping: which block ids are free, and how many owners each
allocated block has (``ref_cnt``). The tensors that hold K and V live elsewhere and are addressed
by the ids this pool hands out.

>>> pool = BlockPool(4)
>>> a = pool.allocate(3)
>>> a, pool.num_free
([0, 1, 2], 1)
>>> pool.allocate(2) is None        # all or nothing: two blocks do not fit, none is taken
True
>>> pool.num_free
1
>>> pool.free(a)
>>> pool.ref_cnt
[0, 0, 0, 0]
>>> pool.free([1])
Traceback (most recent call last):
...
ValueError: block 1 is freed 1 time(s) but holds 0 reference(s): it is not allocated
"""

from collections import Counter, deque
from collections.abc import Sequence

from nano_engine.checks import require_int


def ceil_div(a: int, b: int) -> int:
    """``a / b`` rounded up, in integers: the blocks that ``a`` tokens need at ``b`` tokens a block.

    >>> ceil_div(33, 16), ceil_div(32, 16), ceil_div(0, 16)
    (3, 2, 0)
    """
    return -(-a // b)


class BlockPool:
    """A fixed set of ``num_blocks`` KV blocks with reference counts.

    ``allocate(n)`` hands out ``n`` free blocks with one reference each, or ``None`` (and changes
    nothing) when fewer than ``n`` are free. ``free(blocks)`` drops one reference per listed block;
    a block whose count reaches 0 becomes free again. Freeing a block more times than it is
    referenced raises ``ValueError`` before anything changes, so a double free is reported where
    it happens instead of silently handing the same block to two sequences later.

    ``free_queue`` holds the free block ids; its head is handed out first.
    """

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = require_int("num_blocks", num_blocks)
        self.ref_cnt: list[int] = [0] * num_blocks
        self.free_queue: deque[int] = deque(range(num_blocks))   # head is handed out first

    @property
    def num_free(self) -> int:
        """How many blocks ``allocate`` can hand out right now."""
        return len(self.free_queue)

    def allocate(self, n: int) -> list[int] | None:
        """Take ``n`` blocks from the head of the free queue, or return None if fewer are free."""
        self._check_count(n)
        if n > self.num_free:
            return None
        blocks = [self.free_queue.popleft() for _ in range(n)]
        for b in blocks:
            self.ref_cnt[b] = 1
        return blocks

    def free(self, blocks: Sequence[int]) -> None:
        """Drop one reference from each block; blocks that reach 0 go back to the free queue."""
        self._check_release(blocks)
        for b in blocks:
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self.free_queue.append(b)

    # -- argument checks shared with subclasses ----------------------------------------------

    @staticmethod
    def _check_count(n: int) -> None:
        require_int("number of blocks to allocate", n, minimum=0)

    def _check_block_id(self, b: int) -> None:
        if not isinstance(b, int) or not 0 <= b < self.num_blocks:
            raise ValueError(f"block id {b!r} is not in the pool (valid ids: 0..{self.num_blocks - 1})")

    def _check_release(self, blocks: Sequence[int]) -> None:
        """Validate a whole ``free`` call up front, so a bad call leaves the pool untouched."""
        for b in blocks:
            self._check_block_id(b)
        for b, times in Counter(blocks).items():
            if times > self.ref_cnt[b]:
                raise ValueError(
                    f"block {b} is freed {times} time(s) but holds {self.ref_cnt[b]} reference(s): "
                    + ("it is not allocated" if self.ref_cnt[b] == 0 else "that is a double free")
                )
