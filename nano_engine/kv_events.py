"""kv_events.py - what a prefix cache tells the outside world about its contents.

vLLM publishes these so that a router in another process can know which block hashes each engine
holds without asking it. The pool emits:

- ``BlockStored`` when full blocks enter the cache (one event per run of consecutive blocks of a
  sequence, with the hash of the block before the run as ``parent_block_hash``);
- ``BlockRemoved`` when cached blocks are evicted because their block is being reused;
- ``AllBlocksCleared`` when the whole cache is dropped (``reset``).

Each ``BlockStored`` / ``BlockRemoved`` names its ``medium`` as vLLM's do (``MEDIUM_GPU = "GPU"``,
``MEDIUM_CPU = "CPU"`` in ``vllm/distributed/kv_events.py``, 0.33.0): the pool's events are "GPU",
the host tier's (``nano_engine.offload``) "CPU".

Replaying the events in order onto an empty set gives exactly the set of hashes the cache holds
(``replay``). For a consumer in another process the hashes must be stable across processes: use
``hash_algo="sha256"`` (or ``"xxhash"``), not the built-in hash.

In vLLM mode one hash can be cached by several blocks at once (duplicates), and, as vLLM 0.33.0
does (``vllm/v1/core/block_pool.py``: ``BlockPool.cache_full_blocks``, ``_maybe_evict_cached_block``
-> ``_emit_block_removed_events``), every block stored emits its hash and every block evicted emits
its own ``BlockRemoved``, even while another block still holds the hash. A consumer must then
count: pass a ``collections.Counter`` to ``replay``, and a hash is cached while it is in the
Counter (its count above zero). (A plain set would forget a hash that a duplicate still serves.)

vLLM mode also publishes what vLLM publishes (``vllm/distributed/kv_events.py``: ``BlockStored``):
each hash as the int of its digest's low 64 bits (``vllm/v1/core/kv_cache_utils.py::maybe_convert_block_hash``, with
``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`` on, its default), and the extra keys untagged
(``vllm/v1/core/kv_cache_utils.py::to_event_extra_keys``), the LoRA name in ``lora_name``. A consumer that
recomputes a hash from an event must therefore re-tag the keys first. The pool's ``event_hash``
turns a hash into its published form.

Across processes these dataclasses travel as vLLM 0.33.0 encodes its own (``nano_engine.kv_wire``:
msgspec / msgpack, byte for byte), over ZeroMQ as vLLM sends them (``nano_engine.kv_pubsub``). The
fields after ``lora_name`` (``group_idx``, ``kv_cache_spec_kind``, ...) are vLLM's, carried for
that. vLLM 0.33 always writes ``group_idx`` (``BlockPool._build_block_stored_event`` and
``_emit_block_removed_events``, ``vllm/v1/core/block_pool.py``) and, on ``BlockStored``, the group's
``kv_cache_spec_kind`` (``KVCacheManager.take_events``): vLLM mode writes them as vLLM does for a
model whose layers are all full attention (one group, 0, ``"full_attention"``); the chapter's pool
leaves them ``None``, as do the rest.
"""

from collections import Counter
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

FULL_ATTENTION_GROUP = 0
"""vLLM's ``group_idx`` for a model with one KV cache group (all layers full attention, as Qwen3's)."""
FULL_ATTENTION_KIND = "full_attention"
"""vLLM's ``KVCacheSpecKind.FULL_ATTENTION`` (``vllm/v1/kv_cache_interface.py``), that group's kind."""


@dataclass(frozen=True)
class BlockStored:
    """Full blocks of one sequence entered the cache, in sequence order."""

    block_hashes: list[Hashable]  # as the pool's event_hash gives them (vLLM mode: ints, the digests' low 64 bits)
    parent_block_hash: Hashable | None  # hash of the block just before the first one (None: sequence start)
    token_ids: list[int]  # the stored blocks' tokens, concatenated (block_size per block)
    block_size: int
    lora_id: Hashable | None
    extra_keys: list[tuple | None] | None  # per block: the extra keys mixed into its hash (vLLM mode: untagged), or None
    medium: str = "GPU"  # where the blocks are: "GPU" (the device pool) or "CPU" (a host tier, offload.py)
    lora_name: Hashable | None = None  # vLLM mode: the LoRA adapter's name (vLLM's BlockStored.lora_name)
    # vLLM 0.33's further fields, carried for wire compatibility (nano_engine.kv_wire); vLLM mode sets
    # group_idx and kv_cache_spec_kind as vLLM does, the rest stay None (an omitted field on the wire).
    group_idx: int | None = None  # the KV cache group (vLLM: one per group of layers sharing a KV-cache spec; 0 for a full-attention-only model)
    kv_cache_spec_kind: str | None = None  # e.g. "full_attention"
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None  # "LOCAL" / "REMOTE" relative to the publisher
    ownership: str | None = None  # a secondary offloading tier's identifier
    session_id: str | None = None  # the request context that stored the blocks
    lookahead_token_ids: list[list[int]] | None = None  # tokens beyond each block used in its hash


@dataclass(frozen=True)
class BlockRemoved:
    """These hashes left the cache (their blocks were reallocated to new content)."""

    block_hashes: list[Hashable]
    medium: str = "GPU"
    group_idx: int | None = None  # vLLM 0.33's further fields (see BlockStored)
    locality: str | None = None
    ownership: str | None = None


@dataclass(frozen=True)
class AllBlocksCleared:
    """Every cached hash was dropped."""


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared


def replay(events: Iterable[KVEvent], hashes: set | Counter | None = None, medium: str = "GPU") -> set:
    """Apply events in order to the cached hashes and return the set of hashes cached.

    Only events of ``medium`` count (vLLM publishes the device pool and the CPU tier in one
    stream, ``medium`` telling them apart; a router weighs a CPU hit lower than a GPU hit).

    ``hashes``: a set (updated in place; one block per hash, the default mode), or a ``Counter``
    (updated in place; counts blocks per hash, needed for vLLM mode's duplicates; a hash whose
    count drops to zero leaves it). A new empty set by default.
    """
    hashes = set() if hashes is None else hashes
    for event in events:
        if isinstance(event, (BlockStored, BlockRemoved)) and event.medium != medium:
            continue
        if isinstance(event, BlockStored):
            hashes.update(event.block_hashes)  # a Counter adds one per listed hash
        elif isinstance(event, BlockRemoved):
            if isinstance(hashes, Counter):
                hashes.subtract(event.block_hashes)
                for h in event.block_hashes:
                    if h in hashes and hashes[h] <= 0:
                        del hashes[h]
            else:
                hashes.difference_update(event.block_hashes)
        elif isinstance(event, AllBlocksCleared):
            hashes.clear()
        else:
            raise TypeError(f"not a KV event: {event!r}")
    return set(hashes) if isinstance(hashes, Counter) else hashes
