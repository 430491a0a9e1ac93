"""Classic mistakes of exercise 23, each an edit of solution.py (`judge.py mistakes 23` shows them as diffs)."""

MISTAKES = [
    {"name": 'always_drops_last_block',
     "explain": 'Always gives up the last full block, even when a token beyond it is left to compute.',
     "old": '        raise ValueError(f"num_tokens must be at least 1, got {num_tokens}")\n    max_blocks = (num_tokens - 1) // block_size   # the last token is always recomputed\n    hit = []\n    for h in block_hashes[:max_blocks]:\n        block = hash_to_block.get(h)\n        if block is None:   # chained hashes: nothing after a miss can be a hit\n            break\n        hit.append(block)\n',
     "new": '        raise ValueError("num_tokens must be at least 1")\n    hit = []\n    for h in block_hashes[:max(len(block_hashes) - 1, 0)]:\n        if h not in hash_to_block:\n            break\n        hit.append(hash_to_block[h])\n'},
    {"name": 'no_last_token_rule',
     "explain": 'Forgets the last-token rule: a fully cached prompt hits every block.',
     "old": '        raise ValueError(f"num_tokens must be at least 1, got {num_tokens}")\n    max_blocks = (num_tokens - 1) // block_size   # the last token is always recomputed\n    hit = []\n    for h in block_hashes[:max_blocks]:\n        block = hash_to_block.get(h)\n        if block is None:   # chained hashes: nothing after a miss can be a hit\n            break\n        hit.append(block)\n',
     "new": '        raise ValueError("num_tokens must be at least 1")\n    hit = []\n    for h in block_hashes:\n        if h not in hash_to_block:\n            break\n        hit.append(hash_to_block[h])\n'},
    {"name": 'partial_block_counted',
     "explain": 'Keeps the block that holds the last token and just counts one token less (a partial block hit).',
     "old": '        raise ValueError(f"num_tokens must be at least 1, got {num_tokens}")\n    max_blocks = (num_tokens - 1) // block_size   # the last token is always recomputed\n    hit = []\n    for h in block_hashes[:max_blocks]:\n        block = hash_to_block.get(h)\n        if block is None:   # chained hashes: nothing after a miss can be a hit\n            break\n        hit.append(block)\n    return hit, len(hit) * block_size\n',
     "new": '        raise ValueError("num_tokens must be at least 1")\n    hit = []\n    for h in block_hashes:\n        if h not in hash_to_block:\n            break\n        hit.append(hash_to_block[h])\n    return hit, min(len(hit) * block_size, num_tokens - 1)\n'},
    {"name": 'skips_misses',
     "explain": 'Collects every cached block instead of stopping at the first miss.',
     "old": '        raise ValueError(f"num_tokens must be at least 1, got {num_tokens}")\n    max_blocks = (num_tokens - 1) // block_size   # the last token is always recomputed\n    hit = []\n    for h in block_hashes[:max_blocks]:\n        block = hash_to_block.get(h)\n        if block is None:   # chained hashes: nothing after a miss can be a hit\n            break\n        hit.append(block)\n',
     "new": '        raise ValueError("num_tokens must be at least 1")\n    max_blocks = (num_tokens - 1) // block_size   # the last token is always recomputed\n    hit = [hash_to_block[h] for h in block_hashes[:max_blocks] if h in hash_to_block]\n'},
]
