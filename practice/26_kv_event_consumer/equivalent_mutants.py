"""Mutants of solution.py that behave exactly like it (`judge.py mutate 26`), each with the reason."""

EQUIVALENT = {
    "KVEventConsumer.apply: 'for block_hash in event.block_hashes:' -> 'for block_hash in reversed(list(event.block_hashes)):'":
        'each listed hash is released independently: the order of the releases does not matter',
    "KVEventConsumer.match: 'for i in range(len(token_ids) // size):': 'range(len(token_ids) // size)' -> 'range(len(token_ids) // size + 1)'":
        'the extra step looks up a partial (or empty) block, and every stored key has block_size tokens',
    "KVEventConsumer.match: 'if block_hash is None or block_hash not in self._holders:': 'block_hash is None or block_hash not in self._holders' -> 'block_hash is None and block_hash not in self._holders'":
        'the view only remembers keys of held hashes (forgotten on release and on clear), so a found hash is always held',
    "KVEventConsumer.match: 'if block_hash is None or block_hash not in self._holders:': 'block_hash is None or block_hash not in self._holders' -> 'block_hash not in self._holders'":
        'None is never a held hash, so this breaks exactly when the original does',
    "KVEventConsumer.match: 'if block_hash is None or block_hash not in self._holders:': 'block_hash is None or block_hash not in self._holders' -> 'block_hash is None'":
        'the view only remembers keys of held hashes, so a found hash is always held',
    "KVEventConsumer.match: 'for i in range(len(token_ids) // size):': 'len(token_ids) // size' -> 'len(token_ids) * size'":
        'the extra steps look up partial or empty blocks, which no stored key matches',
    "KVEventConsumer._release: 'count = self._holders.get(block_hash, 0)': '0' -> '-1'":
        'a missing hash with count -1 takes neither branch, like count 0',
    "KVEventConsumer.apply: 'self._hash_of.clear()' -> 'pass'":
        'after AllBlocksCleared no hash is held, so a remembered key leads only to a hash match() rejects',
    "KVEventConsumer.apply: 'self._key_of.clear()' -> 'pass'":
        'a stale way back is overwritten when its hash is stored again, and never read before',
    "KVEventConsumer._release: 'del self._hash_of[self._key_of.pop(block_hash)]' -> 'pass'":
        'forgetting the key only saves memory: match() also checks that the hash is held',
}
