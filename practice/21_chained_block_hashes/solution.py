"""Reference solution for exercise 21: chained block hashes."""


def block_hashes(token_ids: list[int], block_size: int) -> list[int]:
    """One hash per full block; each covers the parent's hash, so equal hash <=> equal prefix."""
    hashes, parent = [], None
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(token_ids[start:start + block_size])))
        hashes.append(parent)
    return hashes
