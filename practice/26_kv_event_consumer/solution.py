"""Reference solution for exercise 26: a router's view of one engine's prefix cache, rebuilt from
the engine's KV events."""

from collections.abc import Hashable
from dataclasses import dataclass

# -- the events (given; the same fields as nano_engine.kv_events) --------------------------------


@dataclass(frozen=True)
class BlockStored:
    """Full blocks of one sequence entered the cache, in sequence order."""

    block_hashes: list[int]
    parent_block_hash: int | None   # hash of the block just before the first one (None: sequence start)
    token_ids: list[int]            # the stored blocks' tokens, concatenated (block_size per block)
    block_size: int
    lora_id: Hashable | None
    extra_keys: list[tuple | None]  # per block: the extra keys mixed into its hash, or None


@dataclass(frozen=True)
class BlockRemoved:
    """One block holding each of these hashes was evicted."""

    block_hashes: list[int]


@dataclass(frozen=True)
class AllBlocksCleared:
    """The whole cache was dropped."""


def block_extra_keys(index: int, lora_id: Hashable | None = None,
                     cache_salt: Hashable | None = None) -> tuple | None:
    """The extra keys the engine mixes into the hash of block number `index` (given)."""
    keys: list[tuple] = []
    if lora_id is not None:
        keys.append(("lora", lora_id))
    if index == 0 and cache_salt is not None:
        keys.append(("salt", cache_salt))
    return tuple(keys) if keys else None


# -- the consumer -------------------------------------------------------------------------------


def _block_key(parent: int | None, tokens: list[int], keys: tuple | None) -> tuple:
    """What decides a block's hash: its parent's hash, its tokens and its extra keys."""
    return (parent, tuple(tokens), keys)


class KVEventConsumer:
    def __init__(self, block_size: int):
        if not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be an int >= 1, got {block_size!r}")
        self.block_size = block_size
        self._hash_of: dict[tuple, int] = {}    # (parent hash, block tokens, extra keys) -> hash
        self._key_of: dict[int, tuple] = {}     # the way back, to forget a hash nobody holds
        self._holders: dict[int, int] = {}      # hash -> how many blocks hold it

    @property
    def cached_hashes(self) -> set[int]:
        """The hashes at least one block of the engine holds."""
        return set(self._holders)

    def apply(self, event: object) -> None:
        """Update the view with one event (events must be applied in the order they were emitted)."""
        if isinstance(event, BlockStored):
            self._stored(event)
        elif isinstance(event, BlockRemoved):
            for block_hash in event.block_hashes:
                self._release(block_hash)
        elif isinstance(event, AllBlocksCleared):
            self._hash_of.clear()
            self._key_of.clear()
            self._holders.clear()
        else:
            raise TypeError(f"not a KV event: {event!r}")

    def match(self, token_ids: list[int], *, lora_id: Hashable | None = None,
              cache_salt: Hashable | None = None) -> int:
        """How many leading tokens of token_ids the engine holds in cached full blocks."""
        size, parent, matched = self.block_size, None, 0
        for i in range(len(token_ids) // size):
            key = _block_key(parent, token_ids[i * size:(i + 1) * size], block_extra_keys(i, lora_id, cache_salt))
            block_hash = self._hash_of.get(key)
            if block_hash is None or block_hash not in self._holders:
                break
            matched += size
            parent = block_hash
        return matched

    def _stored(self, event: BlockStored) -> None:
        n, size = len(event.block_hashes), self.block_size
        if event.block_size != size:
            raise ValueError(f"event.block_size is {event.block_size}, this view uses {size}")
        if len(event.token_ids) != n * size:
            raise ValueError(f"{n} blocks of {size} need {n * size} token_ids, got {len(event.token_ids)}")
        if len(event.extra_keys) != n:
            raise ValueError(f"extra_keys needs one entry per block ({n}), got {len(event.extra_keys)}")
        parent = event.parent_block_hash
        for i, block_hash in enumerate(event.block_hashes):
            key = _block_key(parent, event.token_ids[i * size:(i + 1) * size], event.extra_keys[i])
            self._hash_of[key] = block_hash
            self._key_of[block_hash] = key
            self._holders[block_hash] = self._holders.get(block_hash, 0) + 1
            parent = block_hash           # the next block's parent is this one

    def _release(self, block_hash: int) -> None:
        count = self._holders.get(block_hash, 0)
        if count > 1:
            self._holders[block_hash] = count - 1
        elif count == 1:                  # the last block holding it is gone: forget the hash
            del self._holders[block_hash]
            del self._hash_of[self._key_of.pop(block_hash)]
        # count 0: a hash this view never saw (it started listening late): nothing to undo
