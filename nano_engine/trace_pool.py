"""trace_pool.py - the hashed block pool's bookkeeping, over a trace's block identities.

Replaying Mooncake's conversation trace token by token through
:class:`~nano_engine.prefix_cache.PrefixCachingBlockPool` means hashing some 9 million 16-token
blocks per pass, each a tuple of Python ints, and keeping a cache entry per block: about 50 s of
CPU and 4.7 GB. A trace does not need the hashes. Its tokens are made from its hash ids
(:func:`nano_engine.traces.request_tokens`), so a full block is named exactly by *which id prefix
it sits in and where*: two requests' blocks hold the same tokens, after the same prefix, exactly
when their ids agree up to that block. :class:`TraceBlockPool` numbers the distinct id prefixes
(``prefix``, a dict from ``(parent prefix, id)``) and calls block ``j`` of prefix ``p`` by the key
``p * blocks_per_id + j``. With those keys in place of the chained hashes it keeps the pool's state
the pool's way, in NumPy arrays instead of Python objects, and a request is a few vectorised steps:

* ``lookup``: the longest run of leading keys that are cached (``block_of[key]``), among the full
  blocks of the first ``len - 1`` tokens;
* ``touch`` the hits, ``allocate`` the rest from the head of the free queue (a cached block taken
  there leaves the cache: the eviction), ``cache_blocks`` the full blocks, ``free`` the request's
  blocks, last block first.

The free queue is vLLM's order (``uncached_first``, as every replay in this package uses): hash-less
blocks go back to the head, cached ones to the tail. It is a stack of hash-less blocks (the head)
in front of a FIFO log of cached ones; a cached block taken out by a hit leaves a stale log entry,
skipped when reached. ``vllm=True`` is vLLM mode's rule for duplicates: a block whose key another
block already caches is cached too (the first one cached is served, as ``get_one_block``); the
chapter's pool leaves it uncached.

It is the same pool: ``tests/test_trace_pool.py`` replays trace slices through both and compares,
after every request, the hit blocks (by id), the free queue's order and the cached keys.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nano_engine.checks import require_int


class TraceBlockPool:
    """``PrefixCachingBlockPool(num_blocks, block_size, uncached_first=True)`` (or ``vllm=True``),
    fed a trace's requests as ids (each standing for ``tokens_per_id`` tokens: see the module
    docstring). ``serve(hash_ids, input_length)`` returns the hit tokens."""

    def __init__(self, num_blocks: int, block_size: int, *, vllm: bool = False, tokens_per_id: int = 512) -> None:
        require_int("num_blocks", num_blocks)
        if require_int("block_size", block_size) and tokens_per_id % block_size:
            raise ValueError(f"block_size must divide {tokens_per_id} (the tokens behind one hash id), got {block_size!r}")
        self.num_blocks, self.block_size = num_blocks, block_size
        self.blocks_per_id = tokens_per_id // block_size
        self.vllm = vllm
        self.prefix: dict[tuple[int, int], int] = {}            # (parent prefix or -1, id) -> prefix
        self.block_of = np.full(1024, -1, dtype=np.int64)        # key -> the block a lookup is served
        self.block_key = np.full(num_blocks, -1, dtype=np.int64)  # block -> its key, -1: caches nothing
        self.duplicates: dict[int, list[int]] = {}               # vLLM mode: key -> later blocks caching it
        self.head: list[int] = []                                # hash-less free blocks; the head is the end
        self.log = np.arange(num_blocks, dtype=np.int64)         # cached (and never used) free blocks, FIFO
        self.log_start, self.log_end = 0, num_blocks
        self.pos = np.arange(num_blocks, dtype=np.int64)         # block -> its entry in log, -1: none

    # ------------------------------------------------------------------------ one request

    def keys(self, hash_ids: Sequence[int], input_length: int) -> np.ndarray:
        """The keys of the full blocks of a request of ``input_length`` tokens, in order."""
        parent, prefixes = -1, []
        for h in hash_ids:
            parent = self.prefix.setdefault((parent, h), len(self.prefix))
            prefixes.append(parent)
        if len(self.prefix) * self.blocks_per_id > len(self.block_of):
            grown = np.full(2 * len(self.prefix) * self.blocks_per_id, -1, dtype=np.int64)
            grown[:len(self.block_of)] = self.block_of
            self.block_of = grown
        keys = np.asarray(prefixes, dtype=np.int64)[:, None] * self.blocks_per_id + np.arange(self.blocks_per_id)
        return keys.ravel()[:input_length // self.block_size]

    def serve(self, hash_ids: Sequence[int], input_length: int) -> int:
        """lookup -> touch -> allocate (evicting) -> cache_blocks -> free; returns the hit tokens
        (blocks x block size). The caller rejects a request with more blocks than the pool."""
        keys = self.keys(hash_ids, input_length)
        num_blocks = -(-input_length // self.block_size)
        hit = self.lookup(keys[:(input_length - 1) // self.block_size])
        self.pos[hit] = -1                                      # touch: out of the free queue
        fresh = self.allocate(num_blocks - len(hit))
        table = np.concatenate([hit, fresh])
        self.cache_blocks(keys, table)
        self.free(table)
        return len(hit) * self.block_size

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """The blocks of the longest run of cached keys at the start of ``keys``."""
        served = self.block_of[keys]
        missing = np.flatnonzero(served < 0)
        return served[:missing[0]] if len(missing) else served

    def allocate(self, n: int) -> np.ndarray:
        """``n`` blocks from the head of the free queue; a cached one leaves the cache."""
        taken = [self.head.pop() for _ in range(min(n, len(self.head)))]
        need = n - len(taken)
        out = np.asarray(taken, dtype=np.int64)
        if need:
            window = 2 * need + 64
            while True:
                end = min(self.log_start + window, self.log_end)
                entries = np.arange(self.log_start, end)
                live = np.flatnonzero(self.pos[self.log[self.log_start:end]] == entries)
                if len(live) >= need or end == self.log_end:
                    break
                window *= 2
            assert len(live) >= need, "the pool holds fewer free blocks than a request needs"
            chosen = self.log[self.log_start + live[:need]]
            self.log_start += int(live[need - 1]) + 1
            self.pos[chosen] = -1
            self._uncache(chosen[self.block_key[chosen] >= 0])
            out = np.concatenate([out, chosen])
        return out

    def cache_blocks(self, keys: np.ndarray, table: np.ndarray) -> None:
        """Cache the full blocks of ``table`` that are not cached yet (all but the hits)."""
        blocks = table[:len(keys)]
        todo = np.flatnonzero(self.block_key[blocks] < 0)
        if not len(todo):
            return
        blocks, keys = blocks[todo], keys[todo]
        first = self.block_of[keys] < 0
        self.block_of[keys[first]] = blocks[first]
        self.block_key[blocks[first]] = keys[first]
        if self.vllm:                                   # a copy of a cached key is cached too
            for b, k in zip(blocks[~first].tolist(), keys[~first].tolist()):
                self.duplicates.setdefault(k, []).append(b)
                self.block_key[b] = k

    def free(self, table: np.ndarray) -> None:
        """Last block first: cached blocks to the log's tail, hash-less ones to the head."""
        order = table[::-1]
        cached = self.block_key[order] >= 0
        self.head.extend(order[~cached][::-1].tolist())   # the request's last hash-less block on top
        tail = order[cached]
        if self.log_end + len(tail) > len(self.log):
            self._compact(len(tail))
        self.log[self.log_end:self.log_end + len(tail)] = tail
        self.pos[tail] = np.arange(self.log_end, self.log_end + len(tail))
        self.log_end += len(tail)

    # ------------------------------------------------------------------------ internals

    def _uncache(self, blocks: np.ndarray) -> None:
        keys = self.block_key[blocks]
        self.block_key[blocks] = -1
        if not self.duplicates:
            self.block_of[keys] = -1
            return
        for b, k in zip(blocks.tolist(), keys.tolist()):
            later = self.duplicates.get(k)
            if self.block_of[k] == b:
                self.block_of[k] = later.pop(0) if later else -1
            elif later is not None:
                later.remove(b)
            if later is not None and not later:
                del self.duplicates[k]

    def _compact(self, room: int) -> None:
        """Drop the log's consumed front (and stale entries), growing it if ``room`` still lacks."""
        entries = np.arange(self.log_start, self.log_end)
        live = self.log[self.log_start:self.log_end][self.pos[self.log[self.log_start:self.log_end]] == entries]
        size = max(len(self.log), 2 * (len(live) + room))
        self.log = np.empty(size, dtype=np.int64)
        self.log[:len(live)] = live
        self.pos[live] = np.arange(len(live))
        self.log_start, self.log_end = 0, len(live)

    # ------------------------------------------------------------------------ inspection

    def free_queue(self) -> list[int]:
        """The free blocks, head first (as ``PrefixCachingBlockPool.free_queue``)."""
        entries = np.arange(self.log_start, self.log_end)
        log = self.log[self.log_start:self.log_end]
        return self.head[::-1] + log[self.pos[log] == entries].tolist()

    @property
    def num_cached(self) -> int:
        return int((self.block_key >= 0).sum())

    def check_invariants(self) -> None:
        """Every block is free between requests, once; the cache maps agree both ways."""
        queue = self.free_queue()
        assert sorted(queue) == list(range(self.num_blocks)), "every block is in the free queue once"
        cached = np.flatnonzero(self.block_key >= 0)
        served = self.block_of[self.block_key[cached]]
        extra = sum(len(v) for v in self.duplicates.values())
        assert (served >= 0).all(), "a cached block's key has no served block"
        assert int((served == cached).sum()) + extra == len(cached), "block_of and block_key disagree"
        assert (self.block_key[np.asarray(self.head, dtype=np.int64)] < 0).all(), \
            "a block at the head of the free queue caches a key"
