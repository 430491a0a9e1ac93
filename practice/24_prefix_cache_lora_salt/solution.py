"""Reference solution for exercise 24: a hashed-block prefix cache with LoRA isolation and
a per-tenant cache_salt."""

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
        """Chained hashes of the full blocks. Every block's extra keys carry the LoRA adapter;
        only the first block's carry the salt -- the chain passes it on to the rest. Each key is
        tagged, so a salt can never pass for an adapter of the same name."""
        lora = () if lora_id is None else (("lora", lora_id),)
        salt = () if cache_salt is None else (("salt", cache_salt),)
        hashes, parent = [], None
        for i, start in enumerate(range(0, len(token_ids) - self.block_size + 1, self.block_size)):
            extra = lora + (salt if i == 0 else ())
            parent = hash_block(parent, token_ids[start:start + self.block_size], extra or None)
            hashes.append(parent)
        return hashes

    def lookup(self, token_ids: list[int], lora_id: str | None = None,
               cache_salt: str | None = None) -> list[int]:
        """Blocks of the longest cached run of full blocks at the start of token_ids."""
        hit = []
        for h in self.block_hashes(token_ids, lora_id, cache_salt):
            block = self.hash_to_block.get(h)
            if block is None:
                break
            hit.append(block)
        self.num_queries += len(token_ids)
        self.num_hits += len(hit) * self.block_size
        return hit

    def cache_blocks(self, token_ids: list[int], block_ids: list[int], num_computed: int,
                     lora_id: str | None = None, cache_salt: str | None = None) -> None:
        """Register the full blocks among the first num_computed tokens."""
        for i, h in enumerate(self.block_hashes(token_ids[:num_computed], lora_id, cache_salt)):
            block = block_ids[i]
            if self.block_hash[block] is None and h not in self.hash_to_block:
                self.block_hash[block] = h
                self.hash_to_block[h] = block

    def allocate(self, n: int) -> list[int] | None:
        """n blocks from the head of the free queue, evicting their cached hashes; None if short."""
        if n > len(self.free_queue):
            return None
        blocks = []
        for _ in range(n):
            block, _ = self.free_queue.popitem(last=False)
            if self.block_hash[block] is not None:
                del self.hash_to_block[self.block_hash[block]]
                self.block_hash[block] = None
            self.ref_cnt[block] = 1
            blocks.append(block)
        return blocks

    def free(self, blocks: list[int]) -> None:
        """Release one reference each, last block first; ref 0 joins the tail, hash kept."""
        for block in reversed(blocks):
            self.ref_cnt[block] -= 1
            if self.ref_cnt[block] == 0:
                self.free_queue[block] = None

    def touch(self, blocks: list[int]) -> None:
        """Reuse cached blocks: take free ones out of the queue, add a reference."""
        for block in blocks:
            if self.ref_cnt[block] == 0:
                del self.free_queue[block]
            self.ref_cnt[block] += 1
