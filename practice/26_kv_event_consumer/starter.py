"""Exercise 26: rebuild a router's view of one engine's prefix cache from the engine's KV events.

The event classes and block_extra_keys are given: leave them as they are, write KVEventConsumer."""

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


# -- the consumer: yours -------------------------------------------------------------------------


class KVEventConsumer:
    def __init__(self, block_size: int):
        """An empty view of an engine whose blocks hold block_size tokens.

        ValueError if block_size is not an int >= 1.
        """
        raise NotImplementedError

    @property
    def cached_hashes(self) -> set[int]:
        """The hashes that at least one block of the engine holds, as far as the events said."""
        raise NotImplementedError

    def apply(self, event: object) -> None:
        """Update the view with one event; events arrive in the order the engine emitted them.

        BlockStored: each listed block now holds its hash; block i's parent is block i-1, the
        first block's parent is event.parent_block_hash (None: the start of a sequence).
        BlockRemoved: one block holding each listed hash was evicted (a hash stays cached while
        another block still holds it; a hash the view never saw is ignored).
        AllBlocksCleared: nothing is cached any more.
        ValueError, changing nothing, for a BlockStored whose block_size differs from the view's,
        whose token_ids are not block_size per block, or whose extra_keys are not one per block.
        TypeError for anything that is not one of the three events.
        """
        raise NotImplementedError

    def match(self, token_ids: list[int], *, lora_id=None, cache_salt=None) -> int:
        """How many leading tokens of token_ids the engine holds: block_size times the number of
        leading full blocks that are cached, each after the one before it and with the extra keys
        block_extra_keys(i, lora_id, cache_salt). Changes nothing."""
        raise NotImplementedError
