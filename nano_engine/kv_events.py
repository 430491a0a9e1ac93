"""kv_events.py - what a prefix cache tells the outside world about its contents.

vLLM publishes these so that a router in another process can know which block hashes each engine
holds without asking it. The pool emits:

- ``BlockStored`` when full blocks enter the cache (one event per run of consecutive blocks of a
  sequence, with the hash of the block before the run as ``parent_block_hash``);
- ``BlockRemoved`` when cached blocks are evicted because their block is being reused;
- ``AllBlocksCleared`` when the whole cache is dropped (``reset``).

Replaying the events in order onto an empty set gives exactly the set of hashes the cache holds
(``replay``). For a consumer in another process the hashes must be stable across processes: use
``hash_algo="sha256"`` (or ``"xxhash"``), not the built-in hash.
"""

from collections.abc import Hashable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class BlockStored:
    """Full blocks of one sequence entered the cache, in sequence order."""

    block_hashes: list[int]
    parent_block_hash: int | None  # hash of the block just before the first one (None: sequence start)
    token_ids: list[int]  # the stored blocks' tokens, concatenated (block_size per block)
    block_size: int
    lora_id: Hashable | None
    extra_keys: list[tuple | None]  # per block: the extra keys mixed into its hash, or None


@dataclass(frozen=True)
class BlockRemoved:
    """These hashes left the cache (their blocks were reallocated to new content)."""

    block_hashes: list[int]


@dataclass(frozen=True)
class AllBlocksCleared:
    """Every cached hash was dropped."""


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared


def replay(events: Iterable[KVEvent], hashes: set[int] | None = None) -> set[int]:
    """Apply events in order to a set of cached hashes (a new empty set by default) and return it."""
    hashes = set() if hashes is None else hashes
    for event in events:
        if isinstance(event, BlockStored):
            hashes.update(event.block_hashes)
        elif isinstance(event, BlockRemoved):
            hashes.difference_update(event.block_hashes)
        elif isinstance(event, AllBlocksCleared):
            hashes.clear()
        else:
            raise TypeError(f"not a KV event: {event!r}")
    return hashes
