"""cache_manager.py: one interface between the scheduler and the KV memory, three implementations.

The scheduler never touches a block pool or a radix tree directly. It asks a *cache manager*:

==============================  ==================================================================
``match(seq)``                  the longest cached prefix this sequence may reuse (counted in stats)
``can_admit(match, num_tokens)`` would ``lock`` then ``allocate`` fit? Asked before ``lock``, so a
                                request that does not fit changes nothing (no LRU refresh)
``lock(seq, match)``            start using that prefix: it becomes the head of ``seq.block_table``
                                and ``seq.num_computed_tokens``; nobody may evict it now
``allocate(seq, num_tokens)``   grow ``seq.block_table`` to hold ``num_tokens`` tokens, evicting
                                cached prefixes nobody uses if memory is short (all or nothing)
``cache(seq, num_new)``         after a forward: make the newly computed KV reusable by others
``free(seq)``                   the sequence finished or was preempted: keep what is worth keeping
                                in the cache, drop its lock, return its other blocks
``size_info()``                 free / evictable / protected / capacity, in tokens (slots)
``peek(seq)``                   how many tokens ``match`` would reuse, without counting or locking
                                (for cache-aware admission policies)
``rollback(seq)``               the step that would have computed ``seq``'s next tokens failed:
                                forget whatever was registered for tokens past
                                ``seq.num_computed_tokens`` (a no-op unless a manager registers
                                blocks before they are computed)
==============================  ==================================================================

Implementations:

* :class:`NaiveCacheManager`: a plain ``BlockPool``; never matches. Caching off.
* :class:`HashedBlockCacheManager`: vLLM's design, a ``PrefixCachingBlockPool`` (chained block
  hashes, the free queue doubling as the LRU cache).
* :class:`RadixCacheManager`: SGLang's design, a ``RadixTree`` over KV slots plus a page allocator.

Swapping one for another changes no scheduler line (mini-sglang's lesson: the "naive" cache
proves that prefix reuse is a pure performance feature).

All sizes are in pages of ``block_size`` slots (= tokens) underneath; ``size_info`` reports slots.
Every manager hands out its pages from one :class:`~nano_engine.paged.BlockPool`, ``manager.pool``.

Fault tolerance: every method either does all of its work or, when it raises at its start, none of
it (``lock`` protects the prefix *before* it writes the sequence's fields, ``allocate`` is all or
nothing). ``LLMEngine.step`` relies on that to undo a failed step (see its docstring).
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass

from nano_engine.kv_cache import KVCache
from nano_engine.paged import BlockPool, ceil_div
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.radix import Node, RadixCache
from nano_engine.sequence import CacheHandle, Sequence


@dataclass(frozen=True)
class SizeInfo:
    """KV slots by state. ``free + evictable + protected == capacity``.

    * ``free``: hold nothing worth keeping;
    * ``evictable``: hold a cached prefix no running request uses (reclaimed on demand);
    * ``protected``: in use by running requests (their locked prefixes and private blocks), or pinned.
    """

    free: int
    evictable: int
    protected: int
    capacity: int

    @property
    def available(self) -> int:
        """Slots an allocation can get right now: the free ones plus whatever can be evicted."""
        return self.free + self.evictable


@dataclass
class PrefixMatch:
    """A cached prefix: its pages (in order), the tokens they cover, and an implementation handle."""

    blocks: list[int]
    num_tokens: int
    handle: CacheHandle | None = None


class CacheManager(ABC):
    """The interface the scheduler and the engine use (see the module docstring).

    ``pool`` is the :class:`~nano_engine.paged.BlockPool` every page comes from. By default pages
    are allocated from it and returned to it as they are; a manager that caches overrides
    ``_protect`` (take the matched prefix), ``cache`` and ``free``."""

    name: str
    pool: BlockPool

    def __init__(self, pool: BlockPool, block_size: int) -> None:
        self.pool = pool
        self.num_blocks, self.block_size = pool.num_blocks, block_size

    # -- matching ------------------------------------------------------------------------------

    def match(self, seq: Sequence) -> PrefixMatch:
        """The longest cached prefix of ``seq`` that it may reuse: at most ``num_tokens - 1`` tokens.

        Why never the whole sequence: the model produces the logits for token ``t + 1`` only while
        computing token ``t``. Even when every prompt token's KV is cached, the last one must go
        through the model again, or there are no logits to sample the first output token from.
        So the match is looked up on ``token_ids[:-1]``; ``reusable_tokens`` is the one place this
        rule lives (``peek`` follows it too).
        """
        return self._match(seq, self.reusable_tokens(seq))

    def peek(self, seq: Sequence) -> int:
        """Tokens ``match(seq)`` would reuse right now, without counting a query or taking a lock."""
        return self._peek(seq, self.reusable_tokens(seq))

    @staticmethod
    def reusable_tokens(seq: Sequence) -> int:
        return seq.num_tokens - 1

    @abstractmethod
    def _match(self, seq: Sequence, max_tokens: int) -> PrefixMatch:
        """Longest cached prefix among the first ``max_tokens`` tokens of ``seq.token_ids``."""

    def _peek(self, seq: Sequence, max_tokens: int) -> int:
        return 0

    def lock(self, seq: Sequence, match: PrefixMatch) -> None:
        """Make ``match`` the start of ``seq``'s block table and protect it from eviction."""
        if seq.block_table:
            raise ValueError(f"request {seq.request_id} already holds {len(seq.block_table)} blocks")
        self._protect(match)        # first: if it raises, seq holds nothing yet
        seq.block_table = list(match.blocks)
        seq.num_computed_tokens = seq.num_cached_tokens = match.num_tokens
        seq.cache_handle = match.handle

    def _protect(self, match: PrefixMatch) -> None:  # noqa: B027 (a hook: empty on purpose)
        """Keep ``match`` from being evicted while a sequence uses it (nothing to do without caching)."""

    def can_admit(self, match: PrefixMatch, num_tokens: int) -> bool:
        """Would ``lock(seq, match)`` followed by ``allocate(seq, num_tokens)`` succeed?

        The scheduler asks before it locks anything, so that a request which does not fit leaves
        the cache exactly as it found it. True here means "try": ``lock`` and ``allocate``, and
        release if that fails (exact for a manager whose lock has no side effect on eviction order).
        """
        return True

    # -- memory --------------------------------------------------------------------------------

    def blocks_needed(self, num_tokens: int) -> int:
        return ceil_div(num_tokens, self.block_size)

    def allocate(self, seq: Sequence, num_tokens: int) -> bool:
        """Grow ``seq.block_table`` to hold ``num_tokens`` tokens; False (and no change) if memory
        is short even after evicting every unused cached prefix."""
        need = self.blocks_needed(num_tokens) - len(seq.block_table)
        if need <= 0:
            return True
        blocks = self._allocate(need)
        if blocks is None:
            return False
        seq.block_table.extend(blocks)
        return True

    def _allocate(self, n: int) -> list[int] | None:
        """``n`` fresh blocks (evicting if needed), or None and no change."""
        return self.pool.allocate(n)

    def cache(self, seq: Sequence, num_new_tokens: int) -> None:  # noqa: B027 (a hook: empty on purpose)
        """Called after every step that computed ``num_new_tokens`` of ``seq`` (and sampled
        successfully): make the new KV reusable by others."""

    def rollback(self, seq: Sequence) -> None:  # noqa: B027 (a hook: empty on purpose)
        """Forget what this manager registered for ``seq``'s tokens past ``seq.num_computed_tokens``,
        because the step that would have computed them failed (their KV may be garbage).

        A no-op here: these managers register KV only in ``cache``, after the step succeeded. A
        manager that registers blocks when it allocates them (vLLM hashes a request's full blocks
        as soon as their tokens are known) must drop those registrations."""

    def free(self, seq: Sequence) -> None:
        """Release everything ``seq`` holds (on finish, on preemption, or when admission fails)."""
        self.pool.free(seq.block_table)
        self._release(seq)

    @abstractmethod
    def size_info(self) -> SizeInfo:
        ...

    @property
    def usable_blocks(self) -> int:
        """Blocks one request could ever get (all of them, minus pinned ones)."""
        return self.num_blocks

    @abstractmethod
    def check_no_leaks(self) -> None:
        """With no request alive: raise AssertionError if any block is still held by anyone
        but the cache itself (and its pins)."""

    def _release(self, seq: Sequence) -> None:
        seq.block_table, seq.cache_handle = [], None

    # -- hooks for a host tier (nano_engine.tiered_cache_manager); no-ops here ---------------------

    def bind_kv_cache(self, kv_cache: KVCache, layerwise: bool = True) -> None:  # noqa: B027
        """The engine's device KV pool, for a manager made without it (a host tier copies to and
        from it; ``layerwise``: attention calls ``kv_cache.wait_layer`` before reading a layer)."""

    def begin_step(self) -> None:  # noqa: B027
        """Start of every engine step, before scheduling (a host tier starts its stores here)."""

    def before_forward(self) -> None:  # noqa: B027
        """Just before the forward, inside the part of the step a failure rolls back (a host tier
        starts its loads here: the forward is the first reader of loaded pages)."""

    def wait_for_copy(self) -> bool:
        """A step could schedule nothing: wait for the oldest copy in flight, whose pages stay
        locked until it is acknowledged. False when there is none (nothing will free up by waiting)."""
        return False

    def close(self) -> None:  # noqa: B027
        """The engine is done: wait for every copy still in flight (nothing to do without a tier)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.num_blocks} blocks x {self.block_size} tokens)"


class NaiveCacheManager(CacheManager):
    """Caching off: a plain ``BlockPool``. Nothing is ever matched; freed blocks hold nothing."""

    name = "none"

    def __init__(self, num_blocks: int, block_size: int, pool: BlockPool | None = None) -> None:
        super().__init__(pool if pool is not None else BlockPool(num_blocks), block_size)

    def _match(self, seq: Sequence, max_tokens: int) -> PrefixMatch:
        return PrefixMatch([], 0)

    def size_info(self) -> SizeInfo:
        free = self.pool.num_free * self.block_size
        capacity = self.num_blocks * self.block_size
        return SizeInfo(free, 0, capacity - free, capacity)

    def check_no_leaks(self) -> None:
        held = [b for b, c in enumerate(self.pool.ref_cnt) if c]
        assert not held, f"blocks still referenced after all requests finished: {held}"
        assert self.pool.num_free == self.num_blocks, f"{self.pool.num_free} of {self.num_blocks} blocks free"


class HashedBlockCacheManager(CacheManager):
    """vLLM's prefix caching on a :class:`~nano_engine.prefix_cache.PrefixCachingBlockPool`.

    * ``match``: ``pool.lookup(token_ids, max_tokens=num_tokens - 1, lora_id=..., cache_salt=...)``,
      which counts ``num_queries`` / ``num_hits`` exactly like ``lookup(prompt[:-1])``; ``peek`` is
      the same walk through ``pool.peek``, uncounted;
    * ``can_admit``: the new blocks plus the hits still in the free queue must fit in it, checked
      before ``lock`` as vLLM's ``allocate_slots`` does, so a failed admission touches nothing;
    * ``lock``: ``touch`` the hit blocks (a reference each; ref-0 ones leave the free queue);
    * ``allocate``: from the free queue's head, evicting whatever cached block is taken;
    * ``cache``: ``cache_blocks`` after every forward, so blocks filled during chunked prefill *and*
      during decode become reusable at once (a later request, or this one after preemption, hits);
    * ``free``: drop one reference per block, last block first; they stay cached in the free queue.

    With a vLLM-mode pool (``PrefixCachingBlockPool(..., vllm=True)``, ``LLMEngine(cache="vllm")``)
    the full blocks are registered when they are *allocated* for a step, for the tokens the step
    will compute, as vLLM 0.33.0's ``KVCacheManager.allocate_slots`` does
    (``vllm/v1/core/kv_cache_manager.py``; it calls ``coordinator.cache_blocks`` at its end): a request admitted later in the same step already hits them. That is safe because
    every layer's attention writes the whole batch's new K/V before any sequence reads
    (``PagedAttention.attend``: ``store`` first). If the step then fails, ``rollback`` forgets the
    registrations the step did not compute.
    """

    name = "hashed"
    pool: PrefixCachingBlockPool

    def __init__(self, pool: PrefixCachingBlockPool) -> None:
        super().__init__(pool, pool.block_size)

    def _match(self, seq: Sequence, max_tokens: int) -> PrefixMatch:
        blocks = self.pool.lookup(seq.token_ids, max_tokens=max_tokens, **seq.extra_keys)
        return PrefixMatch(blocks, len(blocks) * self.block_size)

    def _peek(self, seq: Sequence, max_tokens: int) -> int:
        blocks = self.pool.peek(seq.token_ids, max_tokens=max_tokens, **seq.extra_keys)
        return len(blocks) * self.block_size

    def _protect(self, match: PrefixMatch) -> None:
        self.pool.touch(match.blocks)

    def can_admit(self, match: PrefixMatch, num_tokens: int) -> bool:
        """vLLM 0.33's admission check (``KVCacheManager.allocate_slots``, with
        ``SingleTypeKVCacheManager.get_num_blocks_to_allocate``): the new blocks *plus the hit
        blocks sitting in the free queue* (touching takes them out of it) must not exceed the free
        blocks, else None before anything is touched.

        Without it, a request that hits cached blocks but cannot get the rest would touch the hits
        and give them back: freed again, they land at the tail of the free queue, as if just used,
        and the next allocation evicts some other prefix in their place.
        """
        new = self.blocks_needed(num_tokens) - len(match.blocks)
        hits_in_queue = sum(1 for b in match.blocks if self.pool.ref_cnt[b] == 0)
        return new + hits_in_queue <= self.pool.num_free

    def allocate(self, seq: Sequence, num_tokens: int) -> bool:
        if not super().allocate(seq, num_tokens):
            return False
        if self.pool.vllm:  # register now what this step will compute (vLLM: allocate_slots -> cache_blocks)
            self.pool.cache_blocks(seq.token_ids, seq.block_table, num_tokens, **seq.extra_keys)
        return True

    def cache(self, seq: Sequence, num_new_tokens: int) -> None:
        if self.pool.vllm:  # registered at allocation already
            return
        full_before = (seq.num_computed_tokens - num_new_tokens) // self.block_size
        if seq.num_computed_tokens // self.block_size > full_before:    # this forward filled a block
            self.pool.cache_blocks(seq.token_ids, seq.block_table, seq.num_computed_tokens, **seq.extra_keys)

    def rollback(self, seq: Sequence) -> None:
        """vLLM mode: uncache ``seq``'s blocks past its computed tokens (their K/V was never written).

        A request admitted in the failed step may count as computed a block that an earlier
        sequence of the same step registered and has just forgotten (rollbacks run in batch order,
        and a block is always registered before anyone can hit it). Its K/V was never written
        either, so that request goes back to recompute from that block on: it still holds the
        block, and writing the same tokens there again writes the same K/V.
        """
        if not self.pool.vllm:
            return
        bs = self.block_size
        for i, b in enumerate(seq.block_table[:seq.num_computed_tokens // bs]):
            if self.pool.block_hash[b] is None:
                seq.num_computed_tokens = i * bs
                seq.num_cached_tokens = min(seq.num_cached_tokens, i * bs)
                break
        self.pool.forget(seq.block_table[seq.num_computed_tokens // bs:])

    def size_info(self) -> SizeInfo:
        bs = self.block_size
        cached_free = sum(1 for b in self.pool.free_queue if self.pool.block_hash[b] is not None)
        free = len(self.pool.free_queue) - cached_free
        protected = self.num_blocks - len(self.pool.free_queue)
        return SizeInfo(free * bs, cached_free * bs, protected * bs, self.num_blocks * bs)

    @property
    def usable_blocks(self) -> int:
        return self.num_blocks - len(self.pool.pinned_blocks)

    def check_no_leaks(self) -> None:
        self.pool.check_invariants()
        pinned = self.pool.pinned_blocks
        held = [b for b, c in enumerate(self.pool.ref_cnt) if c and b not in pinned]
        assert not held, f"blocks still referenced after all requests finished: {held}"


@dataclass
class RadixHandle(CacheHandle):
    """What a sequence holds in the tree: the node its locked prefix ends on, the prefix length,
    and the namespace (tree) it lives in."""

    node: Node
    num_tokens: int
    namespace: tuple


class RadixCacheManager(CacheManager):
    """SGLang's prefix caching: a :class:`~nano_engine.radix.RadixCache` of KV slots over pages.

    Pages come from a ``BlockPool`` (``pool``). A page belongs either to one running request (its
    private pages) or to the tree (cached prefixes: protected while some request's lock covers them,
    evictable otherwise). The tree works at page granularity (``RadixCache(page_size=block_size)``),
    so everything it stores or evicts is whole pages.

    * ``match``: ``tree.match_prefix(token_ids[:num_tokens - 1])``, aligned down to whole pages;
    * ``lock``: ``inc_lock_ref`` on the matched node (the whole path to the root is protected);
    * ``allocate``: when the pool runs short, evict unused leaves *first*; the scheduler preempts a
      request only if that is still not enough. Because it runs after ``lock``, it sees the free
      space as it is once the match is protected (a lock can turn evictable tokens into protected);
    * ``cache`` (SGLang 0.5.23: ``RadixCache.checkpoint`` in ``python/sglang/srt/mem_cache/radix_cache.py``,
      called at the checkpoints of a running request; ``cache_unfinished_req`` before the 2026
      refactor): after a forward that computed prompt tokens, insert the page-aligned computed
      prefix so that others can match it while this request is still running, free this request's
      duplicate pages (``insert`` returns how much was there already), switch its block table to
      the tree's copies, and move its lock to the new node. Decode steps insert nothing; their
      tokens enter the tree when the request ends;
    * ``free`` (SGLang 0.5.23: ``python/sglang/srt/mem_cache/common.py::release_kv_cache``, which checkpoints
      once more, frees the row past the tree's part and unlocks; ``cache_finished_req`` before the
      refactor): insert the page-aligned computed tokens, free duplicates, unlock, and free the
      unaligned tail page(s). A preempted request does the same, so when it is readmitted it
      finds its own prefix again unless memory pressure evicted it meanwhile.
    * no ``can_admit`` check: a request that does not fit is locked, tried and released (its
      match was already refreshed by ``match_prefix``).

    Requests with extra keys (``lora_id``, ``cache_salt``) get a tree of their own (a *namespace*),
    so they never share KV across adapters or tenants. (SGLang 0.5.23 keeps one tree and namespaces
    every child key by ``(extra_key, cache_salt)``, ``RadixKey.child_key``, the LoRA id folded into
    ``extra_key``: a disjoint subtree per namespace, as here a tree per namespace.) Eviction then visits the trees least
    recently used first, and a tree left empty with no request in it is dropped: a server that
    sees thousands of salts keeps only the trees that still hold something.
    """

    name = "radix"

    def __init__(self, num_blocks: int, block_size: int) -> None:
        super().__init__(BlockPool(num_blocks), block_size)
        self.trees: dict[tuple, RadixCache] = {}
        self._last_used: dict[tuple, int] = {}
        self._users: Counter[tuple] = Counter()    # running requests locked in each namespace
        self._clock = itertools.count()
        self.num_queries = self.num_hits = 0

    @property
    def tree(self) -> RadixCache:
        """The tree of requests without extra keys (the one a single-tenant chapter looks at)."""
        return self._tree(())

    def _tree(self, namespace: tuple) -> RadixCache:
        if namespace not in self.trees:
            self.trees[namespace] = self._new_tree()
        self._last_used[namespace] = next(self._clock)
        return self.trees[namespace]

    def _new_tree(self) -> RadixCache:
        """The tree of a new namespace (``tiered_cache_manager.TieredRadixCacheManager`` makes two-tier ones)."""
        return RadixCache(page_size=self.block_size)

    def _drop_if_unused(self, namespace: tuple) -> None:
        """Forget an empty tree nobody is locked in (the default namespace stays)."""
        tree = self.trees.get(namespace)
        if namespace and tree is not None and tree.total_size() == 0 and not self._users[namespace]:
            del self.trees[namespace], self._last_used[namespace], self._users[namespace]

    @staticmethod
    def _namespace(seq: Sequence) -> tuple:
        keys = seq.extra_keys
        return () if all(v is None for v in keys.values()) else tuple(sorted(keys.items()))

    @staticmethod
    def _handle(seq: Sequence) -> RadixHandle:
        if not isinstance(seq.cache_handle, RadixHandle):
            raise ValueError(f"request {seq.request_id} holds no radix prefix (was it admitted?)")
        return seq.cache_handle

    def _slots(self, pages: list[int], num_tokens: int) -> list[int]:
        bs = self.block_size
        return [pages[t // bs] * bs + t % bs for t in range(num_tokens)]

    def _match(self, seq: Sequence, max_tokens: int) -> PrefixMatch:
        namespace = self._namespace(seq)
        slots, node = self._tree(namespace).match_prefix(seq.token_ids[:max_tokens])
        self.num_queries += max_tokens
        self.num_hits += len(slots)
        pages = [s // self.block_size for s in slots[::self.block_size]]
        return PrefixMatch(pages, len(slots), RadixHandle(node, len(slots), namespace))

    def _peek(self, seq: Sequence, max_tokens: int) -> int:
        tree = self.trees.get(self._namespace(seq))
        # match_length, not match_prefix: peeking must not split nodes or refresh their LRU time
        return 0 if tree is None else tree.match_length(seq.token_ids[:max_tokens])

    def _protect(self, match: PrefixMatch) -> None:
        assert isinstance(match.handle, RadixHandle)
        self._tree(match.handle.namespace).inc_lock_ref(match.handle.node)
        self._users[match.handle.namespace] += 1

    def _allocate(self, n: int) -> list[int] | None:
        short = n - self.pool.num_free
        if short > 0:
            self._evict(short * self.block_size)
        return self.pool.allocate(n)

    def _evict(self, num_tokens: int) -> None:
        """Evict at least ``num_tokens`` tokens of unused cached prefixes (if there are that
        many), least recently used tree first, and give their pages back to the pool."""
        freed = 0
        for namespace in sorted(self.trees, key=self._last_used.__getitem__):
            slots = self.trees[namespace].evict(num_tokens - freed)
            self.pool.free(sorted({s // self.block_size for s in slots}))
            freed += len(slots)
            self._drop_if_unused(namespace)
            if freed >= num_tokens:
                break

    def _insert(self, seq: Sequence) -> int:
        """Put the page-aligned computed prefix of ``seq`` in its tree, free the pages it
        duplicates, and return the number of tokens now in the tree."""
        handle = self._handle(seq)
        bs = self.block_size
        aligned = seq.num_computed_tokens // bs * bs
        if aligned <= handle.num_tokens:
            return handle.num_tokens
        tree = self._tree(handle.namespace)
        already = tree.insert(seq.token_ids[:aligned], self._slots(seq.block_table, aligned))
        # [0, handle.num_tokens) are the tree's own pages (our match); [handle.num_tokens, already)
        # we computed again, but the tree holds another copy (someone inserted it meanwhile).
        duplicates = seq.block_table[handle.num_tokens // bs:already // bs]
        self.pool.free(duplicates)
        return aligned

    def cache(self, seq: Sequence, num_new_tokens: int) -> None:
        if num_new_tokens == 1 and seq.num_remaining == 0:    # a decode step: insert at the end
            return
        handle = self._handle(seq)
        aligned = self._insert(seq)
        if aligned == handle.num_tokens:
            return
        tree = self.trees[handle.namespace]
        slots, node = tree.match_prefix(seq.token_ids[:aligned])
        tree.inc_lock_ref(node)             # lock the longer prefix before releasing the old one
        tree.dec_lock_ref(handle.node)
        seq.block_table[:aligned // self.block_size] = [s // self.block_size for s in slots[::self.block_size]]
        seq.cache_handle = RadixHandle(node, aligned, handle.namespace)

    def free(self, seq: Sequence) -> None:
        handle = self._handle(seq)
        aligned = self._insert(seq)
        self.trees[handle.namespace].dec_lock_ref(handle.node)
        self.pool.free(seq.block_table[aligned // self.block_size:])   # the unaligned tail
        self._release(seq)
        self._users[handle.namespace] -= 1
        self._drop_if_unused(handle.namespace)

    def size_info(self) -> SizeInfo:
        capacity = self.num_blocks * self.block_size
        free = self.pool.num_free * self.block_size
        evictable = sum(t.evictable_size for t in self.trees.values())
        return SizeInfo(free, evictable, capacity - free - evictable, capacity)

    def check_no_leaks(self) -> None:
        bs = self.block_size
        tree_pages = []
        for tree in self.trees.values():
            tree.check_invariants()
            assert tree.protected_size == 0, f"{tree.protected_size} tokens still locked in the radix tree"
            for node in tree.nodes():
                tree_pages += [s // bs for s in node.value[::bs]]
        assert not +self._users, f"requests still counted in radix namespaces: {dict(+self._users)}"
        held = [b for b, c in enumerate(self.pool.ref_cnt) if c]
        assert sorted(tree_pages) == held, (
            f"pages held outside the tree: {sorted(set(held) - set(tree_pages))}; "
            f"tree pages not held: {sorted(set(tree_pages) - set(held))}")
        info = self.size_info()
        assert info.free + info.evictable == info.capacity, f"free + evictable != capacity: {info}"
