"""Keeps the block that holds the last token and just counts one token less (a partial block hit)."""


def longest_cache_hit(block_hashes, hash_to_block, num_tokens, block_size):
    if num_tokens < 1:
        raise ValueError("num_tokens must be at least 1")
    hit = []
    for h in block_hashes:
        if h not in hash_to_block:
            break
        hit.append(hash_to_block[h])
    return hit, min(len(hit) * block_size, num_tokens - 1)
