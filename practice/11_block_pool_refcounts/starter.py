"""Exercise 11: a pool of KV blocks with reference counts."""


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
