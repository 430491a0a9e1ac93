"""Reference solution for exercise 23: lookup with the last-token rule."""


def longest_cache_hit(block_hashes: list[int], hash_to_block: dict[int, int],
                      num_tokens: int, block_size: int) -> tuple[list[int], int]:
    """Longest cached run of whole blocks covering at most num_tokens - 1 tokens."""
    if num_tokens < 1:
        raise ValueError(f"num_tokens must be at least 1, got {num_tokens}")
    max_blocks = (num_tokens - 1) // block_size   # the last token is always recomputed
    hit = []
    for h in block_hashes[:max_blocks]:
        block = hash_to_block.get(h)
        if block is None:   # chained hashes: nothing after a miss can be a hit
            break
        hit.append(block)
    return hit, len(hit) * block_size
