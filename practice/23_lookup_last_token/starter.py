"""Exercise 23: lookup with the last-token rule."""


def longest_cache_hit(block_hashes: list[int], hash_to_block: dict[int, int],
                      num_tokens: int, block_size: int) -> tuple[list[int], int]:
    """Return (block ids, tokens covered) of the longest cached run of whole blocks at the start
    of a prompt of ``num_tokens`` tokens, leaving at least the last token to compute.

    block_hashes: chained hashes of the prompt's full blocks, first block first.
    hash_to_block: cached block hash -> block id.
    Raises ValueError when num_tokens < 1.
    """
    raise NotImplementedError
