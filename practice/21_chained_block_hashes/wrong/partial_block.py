"""Also hashes the trailing partial block."""


def block_hashes(token_ids: list[int], block_size: int) -> list[int]:
    hashes, parent = [], None
    for start in range(0, len(token_ids), block_size):
        parent = hash((parent, tuple(token_ids[start:start + block_size])))
        hashes.append(parent)
    return hashes
