"""Hashes each block's tokens alone, without the parent's hash."""


def block_hashes(token_ids: list[int], block_size: int) -> list[int]:
    return [hash(tuple(token_ids[s:s + block_size]))
            for s in range(0, len(token_ids) - block_size + 1, block_size)]
