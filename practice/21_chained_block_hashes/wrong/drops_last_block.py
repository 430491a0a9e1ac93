"""Off by one: misses the last full block when the length is a multiple of block_size."""


def block_hashes(token_ids: list[int], block_size: int) -> list[int]:
    hashes, parent = [], None
    for start in range(0, len(token_ids) - block_size, block_size):
        parent = hash((parent, tuple(token_ids[start:start + block_size])))
        hashes.append(parent)
    return hashes
