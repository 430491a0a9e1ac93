"""pool_stepper.py - chapter 02's stepper: requests through vLLM's hashed block pool, a
``PrefixCachingBlockPool``.

The script, per request: ``lookup`` all tokens but the last (it is always computed, for its
logits), ``touch`` the hit blocks, ``allocate`` blocks for the rest (a cached block taken from the
head of the free queue is evicted here), ``cache`` its full blocks after the forward pass; when the
request finishes, ``free`` its blocks.

Stepping, going back, the widget and its static HTML are the base's: :mod:`nano_engine.notebook.stepper`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import graphviz

from nano_engine.kv_events import BlockStored, KVEvent
from nano_engine.notebook.stepper import Request, Step, _check_concurrent, _count, _schedule, _Stepper, encode_requests
from nano_engine.notebook.viz import Tokenizer, draw_block_pool, short_hash
from nano_engine.paged import ceil_div
from nano_engine.prefix_cache import PrefixCachingBlockPool


def _blocks(ids: Sequence[int]) -> str:
    return f"block {ids[0]}" if len(ids) == 1 else "blocks " + ", ".join(map(str, ids))


class _PoolRun:
    """One pass of the block-pool script over a fresh pool."""

    def __init__(self, requests: list[list[int]], num_blocks: int, block_size: int, concurrent: int,
                 tokenizer: Tokenizer | None, pool_kwargs: dict) -> None:
        self.requests, self.concurrent, self.tokenizer = requests, concurrent, tokenizer
        self.pool = PrefixCachingBlockPool(num_blocks, block_size, **pool_kwargs)
        self.events: list[KVEvent] = []
        self.pool.subscribe(self.events.append)
        self.tables: dict[int, list[int]] = {}  # running request -> its block table

    def hit_counts(self) -> tuple[int, int]:
        return self.pool.num_hits, self.pool.num_queries  # the pool counts its own lookups

    def steps(self) -> Iterator[Step]:
        # A request that would not find its blocks waits for running ones to free theirs.
        return _schedule(len(self.requests), self.concurrent, self._start, self._finish,
                         must_wait=lambda i: self.blocks_needed(i) > len(self.pool.free_queue))

    def _perform(self, kind: str, i: int, action: Callable[[], str]) -> Step:
        first = len(self.events)
        text = action()
        return Step(kind, i, f"r{i}: {text}", tuple(self.events[first:]))

    def blocks_needed(self, i: int) -> int:
        return ceil_div(len(self.requests[i]), self.pool.block_size)

    def _start(self, i: int) -> Iterator[Step]:
        pool, tokens = self.pool, self.requests[i]
        hit: list[int] = []

        def lookup() -> str:
            hit.extend(pool.lookup(tokens, max_tokens=len(tokens) - 1))
            head = f"lookup its first {len(tokens) - 1} tokens (the last is always computed): "
            if not hit:
                return head + "no full block cached"
            return head + f"{len(hit)} full block{'s' * (len(hit) > 1)} hit {hit} ({len(hit) * pool.block_size} tokens)"

        yield self._perform("lookup", i, lookup)
        if hit:
            def touch() -> str:
                was_free = [b for b in hit if pool.ref_cnt[b] == 0]
                pool.touch(hit)
                left = f"; {_blocks(was_free)} {'leaves' if len(was_free) == 1 else 'leave'} the free queue" \
                    if was_free else ""
                return f"touch {hit}: ref counts now {[pool.ref_cnt[b] for b in hit]}{left}"

            yield self._perform("touch", i, touch)
        need = self.blocks_needed(i) - len(hit)
        table = self.tables[i] = list(hit)  # the request's block table, drawn from now on
        if need:
            def allocate() -> str:
                blocks = pool.allocate(need)
                if blocks is None:  # the schedule waits until enough blocks are free
                    raise RuntimeError(f"r{i}: allocate({need}) failed with {len(pool.free_queue)} free blocks")
                table.extend(blocks)
                text = f"allocate {need} from the head of the free queue → {blocks}"
                if pool.last_evicted:
                    gone = ", ".join(f"block {b} ({short_hash(h)})" for b, h in pool.last_evicted)
                    text += f"; evict {gone}: cached but unused, now overwritten"
                return text

            yield self._perform("allocate", i, allocate)

        def cache() -> str:
            before = len(self.events)
            pool.cache_blocks(tokens, table, num_computed=len(tokens))
            stored = [h for e in self.events[before:] if isinstance(e, BlockStored) for h in e.block_hashes]
            computed = len(tokens) - len(hit) * pool.block_size
            text = f"the forward pass computes {_count(computed, 'token')}; "
            if not stored:
                return text + "no new full block to cache"
            names = [f"block {pool.hash_to_block[h]} as {short_hash(h)}" for h in stored]
            return text + "cache " + ", ".join(names)

        yield self._perform("cache", i, cache)

    def _finish(self, i: int) -> Iterator[Step]:
        pool = self.pool
        table = self.tables.pop(i)

        def free() -> str:
            pool.free(table)
            released = [b for b in reversed(table) if pool.ref_cnt[b] == 0]
            text = f"finishes; free {table}, last block first"
            if released:
                text += f": {_blocks(released)} {'joins' if len(released) == 1 else 'join'} the free queue's tail"
                kept = [b for b in released if pool.block_hash[b] is not None]
                if kept == released:
                    text += ", with their hashes" if len(kept) > 1 else ", with its hash"
                elif kept:
                    text += f", {_blocks(kept)} keeping {'their hashes' if len(kept) > 1 else 'its hash'}"
            return text

        yield self._perform("free", i, free)


class BlockPoolStepper(_Stepper):
    """Step requests through a ``PrefixCachingBlockPool``: lookup → touch → allocate → cache → free.

    Args:
        requests: token-id lists, or text when ``tokenizer`` is given.
        num_blocks, block_size: the pool's size.
        tokenizer: decodes cached blocks' tokens in the diagram (and encodes text requests).
        concurrent: how many requests run at once. A request that would not find enough free
            blocks waits for the oldest running ones to finish first.
        **pool_kwargs: passed to ``PrefixCachingBlockPool`` (``hash_algo``, ``uncached_first``).

    >>> s = BlockPoolStepper([[1, 2, 3, 4, 5], [1, 2, 3, 4, 9]], num_blocks=4, block_size=2)
    >>> [s.step().kind for _ in range(s.num_steps)]
    ['lookup', 'allocate', 'cache', 'free', 'lookup', 'touch', 'allocate', 'cache', 'free']
    """

    def __init__(self, requests: Sequence[Request], num_blocks: int, block_size: int,
                 tokenizer: Tokenizer | None = None, *, concurrent: int = 1, **pool_kwargs: Any) -> None:
        self.requests = encode_requests(requests, tokenizer)
        self.num_blocks, self.block_size, self.tokenizer = num_blocks, block_size, tokenizer
        self.concurrent = _check_concurrent(concurrent)
        self.pool_kwargs = pool_kwargs
        PrefixCachingBlockPool(num_blocks, block_size, **pool_kwargs)  # checks the sizes first
        for i, tokens in enumerate(self.requests):
            need = ceil_div(len(tokens), block_size)
            if need > num_blocks:
                raise ValueError(f"request {i} needs {need} blocks of {block_size} tokens; the pool has {num_blocks}")
        super().__init__()

    @property
    def pool(self) -> PrefixCachingBlockPool:
        """The pool in its current state (read it; step to change it)."""
        return self._run.pool

    def _new_run(self) -> _PoolRun:
        return _PoolRun(self.requests, self.num_blocks, self.block_size, self.concurrent,
                        self.tokenizer, self.pool_kwargs)

    def _draw(self, run: _PoolRun, step: Step | None) -> graphviz.Digraph:
        tables = {f"r{i}": t for i, t in run.tables.items()}
        return draw_block_pool(run.pool, self.tokenizer, block_tables=tables,
                               show_evicted=step is not None and step.kind == "allocate")

    def _intro(self) -> str:
        return (f"empty pool of {self.num_blocks} blocks × {self.block_size} tokens; "
                f"{len(self.requests)} requests to run")

