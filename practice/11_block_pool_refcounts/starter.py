"""Exercise 11: a pool of KV blocks with reference counts, and copy-on-write."""


class BlockPool:
    def __init__(self, num_blocks: int):
        """num_blocks blocks, ids 0..num_blocks-1, all free (reference count 0)."""
        raise NotImplementedError

    @property
    def num_free(self) -> int:
        """How many blocks have no reference."""
        raise NotImplementedError

    def allocate(self, n: int) -> list[int] | None:
        """n distinct free blocks, each now with ref_cnt 1; None (changing nothing) if fewer are free.

        ValueError for n < 0.
        """
        raise NotImplementedError

    def share(self, blocks: list[int]) -> None:
        """Add one reference to each listed block (a fork: another sequence reads the same KV).

        ValueError, changing nothing, if a block is not allocated or not a valid id.
        """
        raise NotImplementedError

    def free(self, blocks: list[int]) -> None:
        """Drop one reference per listing; a block whose count reaches 0 is free again.

        ValueError, changing nothing, if a block would be freed more times than it is referenced
        (a double free, or a block never allocated) or is not a valid id.
        """
        raise NotImplementedError

    def copy_on_write(self, table: list[int], index: int) -> tuple[int, int] | None:
        """The sequence whose block table is ``table`` is about to write into ``table[index]``.

        If other sequences also use that block (ref_cnt > 1): take a free block, drop this
        sequence's reference to the shared one, put the new block in ``table[index]`` (change the
        list in place) and return ``(shared, new)``, so the caller copies the KV before writing.
        If the block is this sequence's alone, return None and change nothing.

        ValueError, changing nothing, if index is not a position of the table or table[index] is
        not an allocated block; MemoryError, changing nothing, if a copy is needed and no block is free.
        """
        raise NotImplementedError
