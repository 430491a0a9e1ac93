"""Real KV events for the transport tests: a vLLM-mode pool caching, sharing and evicting prefixes."""

from __future__ import annotations

import random

from nano_engine.prefix_cache import PrefixCachingBlockPool


def pool_events(num_requests: int = 12, seed: int = 0, *, num_blocks: int = 12, block_size: int = 4,
                num_prefixes: int = 3, loras: bool = True) -> list:
    """The events of ``num_requests`` requests through a small vLLM-mode pool (sha256, int hashes).

    Each request shares one of ``num_prefixes`` 2-block prefixes, adds 1-8 own tokens, takes its hit,
    allocates the rest (evicting), registers its blocks and frees them; some run under a LoRA name
    or a cache salt. The pool's invariants are checked after every request.
    """
    rng = random.Random(seed)
    pool = PrefixCachingBlockPool(num_blocks, block_size, vllm=True)
    events: list = []
    pool.subscribe(events.append)
    prefixes = [[rng.randrange(1000) for _ in range(2 * block_size)] for _ in range(num_prefixes)]
    for i in range(num_requests):
        tokens = rng.choice(prefixes) + [rng.randrange(1000) for _ in range(rng.randrange(1, 2 * block_size + 1))]
        lora = "ada" if loras and i % 5 == 4 else None
        salt = "t1" if loras and i % 7 == 6 else None
        hit = pool.lookup(tokens, max_tokens=len(tokens) - 1, lora_id=lora, cache_salt=salt)
        pool.touch(hit)
        new = pool.allocate(-(-len(tokens) // block_size) - len(hit))
        if new is None:
            pool.free(hit)
            continue
        blocks = hit + new
        pool.cache_blocks(tokens, blocks, len(tokens), lora_id=lora, cache_salt=salt)
        pool.free(blocks)
        pool.check_invariants()
    return events
