"""Mixes in the block's position instead of the parent's hash."""


def block_hashes(token_ids: list[int], block_size: int) -> list[int]:
    return [hash((start // block_size, tuple(token_ids[start:start + block_size])))
            for start in range(0, len(token_ids) - block_size + 1, block_size)]
