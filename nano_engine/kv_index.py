"""kv_index.py - the router's global view: which worker holds which block, and where.

Every engine (a *worker*) publishes KV events (:mod:`nano_engine.kv_events`, carried by
:mod:`nano_engine.kv_pubsub`). A router applies them, worker by worker, to one index and asks it,
for a new request's chain of block hashes, how much of the chain each worker already holds.

:class:`KVBlockIndex` has llm-d's shape: a map from block hash to the workers that hold it, with
the medium (tier) of each copy (``llm-d/llm-d-kv-cache-manager``, ``pkg/kvcache/kvblock/index.go``:
``Index.Add(keys, entries)`` / ``Evict(key, entries)`` with ``PodEntry{PodIdentifier, DeviceTier}``;
read at commit ``00bb4ca``, 2025-09-04; by ``a378f5b`` ``Add`` takes the engine's and the request's
keys apart, ``Add(engineKeys, requestKeys, entries)``). NVIDIA Dynamo keeps a radix tree whose nodes carry worker sets
instead, plus a per-worker lookup from the engine's hash to the node
(``lib/kv-router/src/indexer/README.md``); both answer the same question. Because a block's hash
chains its whole prefix, a hash names one prefix, and a flat map is enough: the tree only saves
walking.

**Counting, not sets.** In vLLM mode one hash can be cached by several blocks of one engine at once
(duplicates), and vLLM emits one ``BlockRemoved`` per evicted block (vLLM 0.33.0,
``vllm/v1/core/block_pool.py``: ``_emit_block_removed_events``). So the index counts blocks per
(worker, medium, hash), as :func:`nano_engine.kv_events.replay` does with a ``Counter``: a hash is
held while its count is above zero. (llm-d's in-memory index keeps a *set* of pod entries per key,
``InMemoryIndex.Evict`` in ``pkg/kvcache/kvblock/in_memory.go`` at commit ``00bb4ca``: there one
``BlockRemoved`` of a duplicated hash drops the pod although its other block still holds it.) A ``BlockRemoved`` for a hash the worker is not known to hold
(a subscriber that joined late) is ignored: a count never goes below zero.

``AllBlocksCleared`` drops everything the worker holds, every medium (as ``replay`` does for the
medium it follows).

**Matching** (:meth:`KVBlockIndex.match`), as llm-d's ``LongestPrefixScorer`` sees a pod
(``pkg/kvcache/kvblock_scorer.go`` at commit ``a378f5b``, 2025-12-10, as the chapter's notes read it): walk the request's block hashes from the first;
a worker's prefix is the longest run from block 0 of blocks it holds in any medium; each block of
that run counts once, on the best tier it is held on. ``match`` returns, per worker, a
:class:`PrefixMatch` ``(gpu, cpu, other)``: how many blocks of its prefix it holds on GPU, how many
on CPU and not GPU, and how many only in another medium (``"STORAGE"``); their sum is the prefix's
length. A block held in another medium does not end the run, as in llm-d: a pod stays in the run
while it holds the key in any tier, and a tier without a configured weight counts 1.0 (llm-d
weighs ``gpu`` 1.0 and ``cpu`` 0.8, ``pkg/kvcache/backend.go``; :class:`~nano_engine.routing.LlmdPolicy`).
Dynamo's current cost subtracts ``overlap_score_credit`` (1) × device blocks + 0.75 × host + 0.25 × disk
blocks from the prefill blocks, clamped at 0 (``DefaultWorkerSelector::worker_logit`` in
``lib/kv-router/src/scheduling/selector.rs`` at ``01690d4``; the flags in
``docs/components/router/router-configuration.md``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from nano_engine.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent

GPU, CPU = "GPU", "CPU"   # vLLM's MEDIUM_GPU, MEDIUM_CPU (its third, MEDIUM_STORAGE, is "STORAGE")


class BlockIndex(Protocol):
    """What a router reads from an index: which workers hold a block hash, in which media."""

    def workers_for(self, block_hash: Hashable) -> Mapping[Any, Collection[str]]: ...


class PrefixMatch(NamedTuple):
    """One worker's prefix run, by the best tier of each block (:meth:`KVBlockIndex.match`)."""

    gpu: int      # blocks held on the device
    cpu: int      # held on the host (CPU), not the device
    other: int    # held only in another medium ("STORAGE")

    @property
    def blocks(self) -> int:
        """The run's length: every block of the prefix the worker holds somewhere."""
        return self.gpu + self.cpu + self.other


def prefix_runs(index: BlockIndex, block_hashes: Sequence[Hashable],
                workers: Iterable[Any]) -> dict[Any, list[frozenset[str]]]:
    """Per worker, the media of each block of its prefix: the longest run from ``block_hashes[0]``
    of blocks the worker holds in any medium (the module docstring: llm-d's rule)."""
    return {w: [frozenset(media) for media in run] for w, run in _runs(index.workers_for, block_hashes, workers).items()}


def _runs(holders_of: Callable[[Hashable], Mapping[Any, Collection[str]]], block_hashes: Sequence[Hashable],
          workers: Iterable[Any]) -> dict[Any, list[Collection[str]]]:
    """``prefix_runs`` over a lookup ``block hash -> {worker: media}``; the media are the lookup's
    own collections (``KVBlockIndex.match`` reads its map without copying it)."""
    runs: dict[Any, list[Collection[str]]] = {w: [] for w in workers}
    alive = set(runs)
    for h in block_hashes:
        if not alive:
            break
        holders = holders_of(h)
        for w in list(alive):
            media = holders.get(w)
            if media:
                runs[w].append(media)
            else:
                alive.discard(w)
    return runs


class KVBlockIndex:
    """Which worker holds which block hash, in which medium, from the workers' KV events.

    ``apply(worker, events)`` in each worker's publication order; ``reset(worker)`` forgets a worker
    (an engine restart: its cache is empty again); queries: :meth:`workers_for`, :meth:`match`,
    :meth:`blocks`. ``check_invariants`` for tests.
    """

    def __init__(self) -> None:
        # worker -> medium -> hash -> number of blocks: the truth, as the events tell it
        self._counts: dict[Hashable, dict[str, Counter]] = {}
        # hash -> worker -> the media it holds the hash in (derived: kept equal to _counts' keys)
        self._holders: dict[Hashable, dict[Hashable, set[str]]] = {}

    @property
    def workers(self) -> list[Hashable]:
        """Every worker the index has heard of (``apply`` or ``reset``), in first-seen order."""
        return list(self._counts)

    def add_worker(self, worker: Hashable) -> None:
        """Make a worker known (holding nothing) so that ``match`` reports it."""
        self._counts.setdefault(worker, {})

    def apply(self, worker: Hashable, events: Iterable[KVEvent]) -> None:
        """Apply one worker's events, in order."""
        media = self._counts.setdefault(worker, {})
        for event in events:
            if isinstance(event, BlockStored):
                counts = media.setdefault(event.medium, Counter())
                for h in event.block_hashes:
                    counts[h] += 1
                    if counts[h] == 1:
                        self._holders.setdefault(h, {}).setdefault(worker, set()).add(event.medium)
            elif isinstance(event, BlockRemoved):
                counts = media.get(event.medium, Counter())
                for h in event.block_hashes:
                    if counts.get(h, 0) <= 0:   # not known to be held (joined late): a count stays >= 0
                        continue
                    counts[h] -= 1
                    if counts[h] == 0:
                        del counts[h]
                        self._drop_holder(h, worker, event.medium)
            elif isinstance(event, AllBlocksCleared):
                self._clear(worker)
            else:
                raise TypeError(f"not a KV event: {event!r}")

    def reset(self, worker: Hashable) -> None:
        """Forget everything ``worker`` holds (it stays known, holding nothing)."""
        self._counts.setdefault(worker, {})
        self._clear(worker)

    def _clear(self, worker: Hashable) -> None:
        media = self._counts[worker]
        for medium, counts in media.items():
            for h in counts:
                self._drop_holder(h, worker, medium)
        media.clear()

    def _drop_holder(self, h: Hashable, worker: Hashable, medium: str) -> None:
        holders = self._holders[h]
        holders[worker].discard(medium)
        if not holders[worker]:
            del holders[worker]
            if not holders:
                del self._holders[h]

    # -- queries ------------------------------------------------------------------------------------

    def workers_for(self, block_hash: Hashable) -> dict[Hashable, set[str]]:
        """The workers holding ``block_hash``, each with the media it holds it in (a copy)."""
        return {w: set(media) for w, media in self._holders.get(block_hash, {}).items()}

    def blocks(self, worker: Hashable, medium: str = GPU) -> set:
        """The hashes ``worker`` holds in ``medium`` (empty for an unknown worker)."""
        return set(self._counts.get(worker, {}).get(medium, ()))

    def num_blocks(self, worker: Hashable, medium: str = GPU) -> int:
        """Blocks ``worker`` holds in ``medium``, duplicates counted (its cache's fill)."""
        return sum(self._counts.get(worker, {}).get(medium, Counter()).values())

    def match(self, block_hashes: Sequence[Hashable]) -> dict[Hashable, PrefixMatch]:
        """Per known worker, its :class:`PrefixMatch` for the request's chain ``block_hashes``.

        The worker's prefix is the longest run from ``block_hashes[0]`` of blocks it holds in any
        medium; each block counts once, as GPU if held there, else CPU, else other. Every known
        worker is in the result, ``(0, 0, 0)`` when it holds not even the first block.
        """
        result = {}
        for w, run in _runs(lambda h: self._holders.get(h, {}), block_hashes, self._counts).items():
            gpu = sum(GPU in media for media in run)
            cpu = sum(GPU not in media and CPU in media for media in run)
            result[w] = PrefixMatch(gpu, cpu, len(run) - gpu - cpu)
        return result

    def follow(self, worker: Hashable, source: Any) -> Callable[[], None]:
        """Apply ``source``'s KV events to ``worker`` as they happen, in this process; returns the
        unsubscribe. ``source`` is anything with ``subscribe(callback) -> unsubscribe``, such as a
        :class:`~nano_engine.prefix_cache.PrefixCachingBlockPool` (no socket in between)."""
        self.add_worker(worker)
        return source.subscribe(lambda event: self.apply(worker, [event]))

    def check_invariants(self) -> None:
        """Raise AssertionError unless the hash -> workers map is exactly the per-worker counts' keys."""
        expected: dict[Hashable, dict[Hashable, set[str]]] = {}
        for w, media in self._counts.items():
            for medium, counts in media.items():
                for h, n in counts.items():
                    if n <= 0:
                        raise AssertionError(f"worker {w!r}, {medium}: hash {h!r} has count {n}")
                    expected.setdefault(h, {}).setdefault(w, set()).add(medium)
        if expected != self._holders:
            raise AssertionError("the hash -> workers map disagrees with the per-worker counts")
