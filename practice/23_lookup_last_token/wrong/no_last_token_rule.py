"""Forgets the last-token rule: a fully cached prompt hits every block."""


def longest_cache_hit(block_hashes, hash_to_block, num_tokens, block_size):
    if num_tokens < 1:
        raise ValueError("num_tokens must be at least 1")
    hit = []
    for h in block_hashes:
        if h not in hash_to_block:
            break
        hit.append(hash_to_block[h])
    return hit, len(hit) * block_size
