"""Collects every cached block instead of stopping at the first miss."""


def longest_cache_hit(block_hashes, hash_to_block, num_tokens, block_size):
    if num_tokens < 1:
        raise ValueError("num_tokens must be at least 1")
    max_blocks = (num_tokens - 1) // block_size
    hit = [hash_to_block[h] for h in block_hashes[:max_blocks] if h in hash_to_block]
    return hit, len(hit) * block_size
