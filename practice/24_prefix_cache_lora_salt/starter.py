"""Exercise 24: a hashed-block prefix cache with LoRA isolation and a per-tenant cache_salt.

hash_block and the constructor are given; write the rest.
"""

from collections import OrderedDict


def hash_block(parent_hash: int | None, token_ids: list[int], extra_keys: tuple | None) -> int:
    """The hash of one full block (given): its parent's hash, its tokens and, if any, its extra keys.

    Without extra keys it is exactly the hash of exercises 21 and 22.
    """
    if extra_keys is None:
        return hash((parent_hash, tuple(token_ids)))
    return hash((parent_hash, tuple(token_ids), extra_keys))


class PrefixCachingBlockPool:
    def __init__(self, num_blocks: int, block_size: int):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks and block_size must be at least 1, got {num_blocks}, {block_size}")
        self.block_size = block_size
        self.ref_cnt = [0] * num_blocks
        self.free_queue: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
        self.hash_to_block: dict[int, int] = {}
        self.block_hash: list[int | None] = [None] * num_blocks
        self.num_queries = self.num_hits = 0      # in tokens

    def block_hashes(self, token_ids: list[int], lora_id: str | None = None,
                     cache_salt: str | None = None) -> list[int]:
        """Chained hashes of the full blocks of token_ids, first block first.

        Block i's hash is hash_block(hash of block i-1 or None, its tokens, extra_keys) where
        extra_keys is a tuple of tagged keys: ("lora", lora_id) when lora_id is not None, then
        ("salt", cache_salt) for block 0 only when cache_salt is not None -- or None when the
        block has no extra key.
        """
        raise NotImplementedError

    def lookup(self, token_ids: list[int], lora_id: str | None = None,
               cache_salt: str | None = None) -> list[int]:
        """Blocks of the longest cached run of full blocks at the start of token_ids, hashed with
        the same lora_id and cache_salt. Adds len(token_ids) to num_queries and the hit tokens
        (hit blocks x block_size) to num_hits."""
        raise NotImplementedError

    def cache_blocks(self, token_ids: list[int], block_ids: list[int], num_computed: int,
                     lora_id: str | None = None, cache_salt: str | None = None) -> None:
        """After a forward pass: give each full block among the first num_computed tokens its
        hash (block_ids[i] holds block i). Leave alone a block that already has a hash, and a
        hash that another block already caches."""
        raise NotImplementedError

    def allocate(self, n: int) -> list[int] | None:
        """n blocks from the head of the free queue, evicting their cached hashes; None if short."""
        raise NotImplementedError

    def free(self, blocks: list[int]) -> None:
        """Release one reference each, last block first; ref 0 joins the tail, hash kept."""
        raise NotImplementedError

    def touch(self, blocks: list[int]) -> None:
        """Reuse cached blocks: take free ones out of the queue, add a reference."""
        raise NotImplementedError
