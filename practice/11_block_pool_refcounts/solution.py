"""Reference solution for exercise 11: a block pool with reference counts, and copy-on-write."""

from collections import Counter


class BlockPool:
    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be at least 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.ref_cnt = [0] * num_blocks
        self.free_blocks = list(range(num_blocks - 1, -1, -1))   # a stack: pop() hands out 0 first

    @property
    def num_free(self) -> int:
        return len(self.free_blocks)

    def allocate(self, n: int) -> list[int] | None:
        """n free blocks with one reference each, or None (and no change) if fewer are free."""
        if n < 0:
            raise ValueError(f"cannot allocate {n} blocks")
        if n > len(self.free_blocks):
            return None   # all or nothing: half a request's blocks would only block others
        blocks = [self.free_blocks.pop() for _ in range(n)]
        for b in blocks:
            self.ref_cnt[b] = 1
        return blocks

    def share(self, blocks: list[int]) -> None:
        """Add one reference to each listed (allocated) block."""
        self._check(blocks, "share", lambda b, times: self.ref_cnt[b] == 0)
        for b in blocks:
            self.ref_cnt[b] += 1

    def free(self, blocks: list[int]) -> None:
        """Drop one reference from each listed block; a block at 0 references is free again."""
        self._check(blocks, "free", lambda b, times: times > self.ref_cnt[b])
        for b in blocks:
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self.free_blocks.append(b)

    def copy_on_write(self, table: list[int], index: int) -> tuple[int, int] | None:
        """The sequence of ``table`` is about to write into ``table[index]``: if other sequences
        share that block, move this one to a fresh block and return (shared, fresh) for the copy."""
        if not 0 <= index < len(table):
            raise ValueError(f"index {index} is not a position of a table of {len(table)} blocks")
        shared = table[index]
        self._check([shared], "write to", lambda b, times: self.ref_cnt[b] == 0)
        if self.ref_cnt[shared] == 1:
            return None   # this sequence's alone: write in place
        if not self.free_blocks:
            raise MemoryError(f"block {shared} is shared and must be copied, but no block is free")
        fresh = self.free_blocks.pop()
        self.ref_cnt[fresh] = 1
        self.ref_cnt[shared] -= 1   # at least 1 left: the other sequences still read it
        table[index] = fresh
        return shared, fresh

    def _check(self, blocks, action, is_bad) -> None:
        # Validate the whole call before changing anything, so a bad call leaves the pool as it was.
        for b in blocks:
            if not 0 <= b < self.num_blocks:
                raise ValueError(f"cannot {action} block {b}: ids are 0..{self.num_blocks - 1}")
        for b, times in Counter(blocks).items():
            if is_bad(b, times):
                raise ValueError(f"cannot {action} block {b} {times} time(s): it holds {self.ref_cnt[b]} reference(s)")
