"""cache_adapters.py: your own pool, prefix cache or radix tree under ``LLMEngine``.

Chapters 01 to 03 build a block pool, a hashed prefix cache and a radix tree from scratch, and the
exercises ask for variants of them. The engine talks to its KV memory through one interface,
:class:`~nano_engine.cache_manager.CacheManager`; an adapter puts a structure written from scratch
behind it, so that the reader's own class serves real requests on the model::

    LLMEngine(model, cache=PoolAdapter(MyBlockPool(64), block_size=16))
    LLMEngine(model, cache=PrefixCacheAdapter(PrefixCache(64, 16)))
    LLMEngine(model, cache=RadixTreeAdapter(RadixTree, num_tokens=4096))

Nothing has to be inherited: a structure only needs what the chapter's class has (duck typing).

============================  ===================================================================
adapter                       what the structure must have
============================  ===================================================================
:class:`PoolAdapter`          ``allocate(n) -> list | None`` (all or nothing), ``free(blocks)``,
                              ``ref_cnt`` (one count per block), ``num_free``
:class:`PrefixCacheAdapter`   the pool's four, minus ``num_free``, plus ``block_size``,
                              ``free_queue`` (the ref-0 blocks), ``block_hash`` (a hash or None per
                              block), ``lookup(token_ids)``, ``touch(blocks)``,
                              ``cache_blocks(token_ids, block_ids, num_computed)``, and the counters
                              ``num_queries`` / ``num_hits``. ``lookup`` and ``cache_blocks`` also
                              get ``lora_id=`` / ``cache_salt=`` when a request carries them
:class:`RadixTreeAdapter`     a class whose instances (a token-granular tree each) have
                              ``match_prefix(key) -> (slots, node)``, ``insert(key, slots) -> int``,
                              ``inc_lock_ref(node)``, ``dec_lock_ref(node)``,
                              ``evict(num_tokens) -> slots``, ``evictable_size``, ``protected_size``,
                              ``total_size()``
============================  ===================================================================

Each adapter calls the structure exactly where the package's manager calls its own class
(``NaiveCacheManager``, ``HashedBlockCacheManager``, ``RadixCacheManager``), so a structure that
behaves like the package's serves the same tokens with the same hits. It checks every answer it
gets (a block handed out twice, a hit longer than the lookup, a block id that does not exist) and
says which call gave it, for which request; an exception raised by the structure gets the same
prefix. :func:`serve_side_by_side` runs the same requests on an engine over your structure and on
one over the package's, step by step, and stops at the first step where they differ, naming the
step and the request: that is what chapters 01 to 03 run at the end of their build sections, and
what the exercises' engine tests run on :func:`small_model`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence as Seq
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from nano_engine.cache_manager import CacheManager, PrefixMatch, RadixCacheManager, RadixHandle, SizeInfo
from nano_engine.checks import require_int
from nano_engine.sequence import Sequence

if TYPE_CHECKING:
    from nano_engine.engine import LLMEngine
    from nano_engine.model import Transformer
    from nano_engine.sampling import SamplingParams

__all__ = ["PoolAdapter", "PrefixCacheAdapter", "RadixTreeAdapter", "SideBySide", "serve_side_by_side",
           "small_model"]


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 4] + " ...]"


class _Adapter(CacheManager):
    """What the pool and prefix-cache adapters share: the structure's calls, checked and named."""

    pool: Any     # the structure (duck-typed), where the package's managers keep their BlockPool

    def __init__(self, structure: Any, num_blocks: int, block_size: int) -> None:
        require_int("block_size", block_size)
        self.pool = structure
        self.num_blocks, self.block_size = num_blocks, block_size
        self.held: Counter[int] = Counter()    # block -> running sequences whose table lists it

    def _ask(self, seq: Sequence, method: str, *args: Any, **kwargs: Any) -> Any:
        """``structure.method(*args)``; an exception it raises says which call, for which request."""
        try:
            return getattr(self.pool, method)(*args, **kwargs)
        except Exception as exc:
            shown = ", ".join([_short(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
            exc.args = (f"request {seq.request_id}: your {method}({shown}) raised {type(exc).__name__}: {exc}",)
            raise

    def _fail(self, seq: Sequence, text: str) -> NoReturn:
        raise AssertionError(f"request {seq.request_id}: {text}")

    def _check_blocks(self, seq: Sequence, call: str, blocks: Any, count: int | None = None) -> list[int]:
        """``blocks`` as a list of valid, distinct block ids (``count`` of them, if given)."""
        if not isinstance(blocks, (list, tuple)):
            self._fail(seq, f"your {call} returned {_short(blocks)}, not a list of block ids")
        for b in blocks:
            if isinstance(b, bool) or not isinstance(b, int) or not 0 <= b < self.num_blocks:
                self._fail(seq, f"your {call} returned {_short(blocks)}: {b!r} is not a block id "
                                f"(0..{self.num_blocks - 1})")
        twice = [b for b, n in Counter(blocks).items() if n > 1]
        if twice:
            self._fail(seq, f"your {call} returned {_short(blocks)}: block {twice[0]} twice")
        if count is not None and len(blocks) != count:
            self._fail(seq, f"your {call} returned {len(blocks)} blocks, {_short(blocks)}, not {count}")
        return list(blocks)

    def allocate(self, seq: Sequence, num_tokens: int) -> bool:
        need = self.blocks_needed(num_tokens) - len(seq.block_table)
        if need <= 0:
            return True
        if need > self._num_free():        # all or nothing, asked first: a refused call changes nothing
            return False
        blocks = self._ask(seq, "allocate", need)
        if blocks is None:
            self._fail(seq, f"your allocate({need}) returned None with {self._num_free()} blocks free")
        blocks = self._check_blocks(seq, f"allocate({need})", blocks, need)
        busy = [b for b in blocks if self.held[b]]
        if busy:
            self._fail(seq, f"your allocate({need}) returned {_short(blocks)}, but block {busy[0]} is in use by "
                            f"another running request: both would write their KV into it")
        seq.block_table.extend(blocks)
        self.held.update(blocks)
        return True

    def _num_free(self) -> int:
        """Blocks the structure can hand out now (``num_free``, or the length of its free queue)."""
        raise NotImplementedError

    def _release(self, seq: Sequence) -> None:
        self.held.subtract(seq.block_table)
        self.held = +self.held
        super()._release(seq)


class PoolAdapter(_Adapter):
    """A plain block pool (chapter 01's ``MyBlockPool``, exercise 11's ``BlockPool``): no caching.

    It is asked exactly what ``NaiveCacheManager`` asks the package's ``BlockPool``: ``allocate(n)``
    when a request needs ``n`` more blocks (after checking ``num_free``), ``free(block_table)``
    when it finishes or is preempted."""

    name = "your pool"

    def __init__(self, pool: Any, block_size: int) -> None:
        super().__init__(pool, len(pool.ref_cnt), block_size)

    def _num_free(self) -> int:
        return int(self.pool.num_free)

    def _match(self, seq: Sequence, max_tokens: int) -> PrefixMatch:
        return PrefixMatch([], 0)

    def free(self, seq: Sequence) -> None:
        self._ask(seq, "free", list(seq.block_table))
        self._release(seq)

    def size_info(self) -> SizeInfo:
        free, capacity = self._num_free() * self.block_size, self.num_blocks * self.block_size
        return SizeInfo(free, 0, capacity - free, capacity)

    def check_no_leaks(self) -> None:
        held = [b for b, c in enumerate(self.pool.ref_cnt) if c]
        assert not held, f"your pool still counts references on blocks {held} after every request finished"
        assert self._num_free() == self.num_blocks, (
            f"your pool says {self._num_free()} of {self.num_blocks} blocks are free after every request finished")


class PrefixCacheAdapter(_Adapter):
    """A hashed-block prefix cache (chapter 02's ``PrefixCache``, exercises 22 and 24).

    The calls are ``HashedBlockCacheManager``'s: ``lookup(prompt[:-1])`` at admission (never the
    last token), admitted only if the new blocks plus the hits still in the free queue fit
    (vLLM's check, before anything is touched), then ``touch(hits)`` and ``allocate``;
    ``cache_blocks(token_ids, block_table, num_computed)`` after a forward that filled a block;
    ``free(block_table)`` when the request ends or is preempted."""

    name = "your prefix cache"

    def __init__(self, cache: Any, block_size: int | None = None) -> None:
        super().__init__(cache, len(cache.ref_cnt), block_size if block_size is not None else cache.block_size)

    def _num_free(self) -> int:
        return len(self.pool.free_queue)

    @staticmethod
    def _keys(seq: Sequence) -> dict:
        """The request's extra keys, only those it has (a cache without LoRA or salts never sees them)."""
        return {k: v for k, v in seq.extra_keys.items() if v is not None}

    def _match(self, seq: Sequence, max_tokens: int) -> PrefixMatch:
        tokens = seq.token_ids[:max_tokens]
        call = f"lookup(<{len(tokens)} tokens>)"
        hits = self._check_blocks(seq, call, self._ask(seq, "lookup", tokens, **self._keys(seq)))
        if len(hits) > len(tokens) // self.block_size:
            self._fail(seq, f"your {call} returned {len(hits)} blocks: more than the "
                            f"{len(tokens) // self.block_size} full blocks of those tokens")
        return PrefixMatch(hits, len(hits) * self.block_size)

    def can_admit(self, match: PrefixMatch, num_tokens: int) -> bool:
        new = self.blocks_needed(num_tokens) - len(match.blocks)
        hits_in_queue = sum(1 for b in match.blocks if self.pool.ref_cnt[b] == 0)
        return new + hits_in_queue <= self._num_free()

    def lock(self, seq: Sequence, match: PrefixMatch) -> None:
        if seq.block_table:
            raise ValueError(f"request {seq.request_id} already holds {len(seq.block_table)} blocks")
        self._ask(seq, "touch", list(match.blocks))
        seq.block_table = list(match.blocks)
        seq.num_computed_tokens = seq.num_cached_tokens = match.num_tokens
        seq.cache_handle = match.handle
        self.held.update(match.blocks)

    def cache(self, seq: Sequence, num_new_tokens: int) -> None:
        full_before = (seq.num_computed_tokens - num_new_tokens) // self.block_size
        if seq.num_computed_tokens // self.block_size > full_before:    # this forward filled a block
            self._ask(seq, "cache_blocks", list(seq.token_ids), list(seq.block_table), seq.num_computed_tokens,
                      **self._keys(seq))

    def free(self, seq: Sequence) -> None:
        self._ask(seq, "free", list(seq.block_table))
        self._release(seq)

    def size_info(self) -> SizeInfo:
        bs, queue = self.block_size, list(self.pool.free_queue)
        cached = sum(1 for b in queue if self.pool.block_hash[b] is not None)
        return SizeInfo((len(queue) - cached) * bs, cached * bs, (self.num_blocks - len(queue)) * bs,
                        self.num_blocks * bs)

    def check_no_leaks(self) -> None:
        held = [b for b, c in enumerate(self.pool.ref_cnt) if c]
        assert not held, f"your cache still counts references on blocks {held} after every request finished"
        assert self._num_free() == self.num_blocks, (
            f"{self._num_free()} of your cache's {self.num_blocks} blocks are in its free queue after every "
            f"request finished")


class RadixTreeAdapter(RadixCacheManager):
    """A radix tree over single tokens (chapter 03's ``RadixTree``, exercises 31 and 32).

    ``make_tree`` builds an empty tree (the class itself will do); the engine gets one KV slot per
    token (``block_size=1``: a token-granular tree splits edges anywhere, so its pages are single
    tokens), ``num_tokens`` of them, from the package's ``BlockPool``. The tree is called exactly as
    ``RadixCacheManager`` calls the package's ``RadixCache``: ``match_prefix(prompt[:-1])`` then
    ``inc_lock_ref`` at admission, ``evict`` when the pool runs short, and, after the prompt's
    forward and when the request ends, ``insert`` of what it computed (the duplicate slots freed),
    ``match_prefix`` again and the lock moved to the new node."""

    name = "your radix tree"

    def __init__(self, make_tree: Callable[[], Any], num_tokens: int) -> None:
        self.make_tree = make_tree
        super().__init__(num_tokens, 1)

    def _new_tree(self) -> Any:
        return self.make_tree()

    def _peek(self, seq: Sequence, max_tokens: int) -> int:
        tree = self.trees.get(self._namespace(seq))
        match_length = getattr(tree, "match_length", None)
        return 0 if match_length is None else int(match_length(seq.token_ids[:max_tokens]))

    def _match(self, seq: Sequence, max_tokens: int) -> PrefixMatch:
        match = super()._match(seq, max_tokens)
        if match.num_tokens > max_tokens:
            raise AssertionError(f"request {seq.request_id}: your match_prefix(<{max_tokens} tokens>) returned "
                                 f"{match.num_tokens} slots: more than the tokens it was given")
        return match

    def cache(self, seq: Sequence, num_new_tokens: int) -> None:
        """After a forward that computed prompt tokens: cache them while the request runs. A tree
        with a ``checkpoint(node, key, slots) -> (slots, node, duplicates)`` (exercise 31) does it
        in one call; otherwise ``RadixCacheManager.cache``'s insert, free, match and lock move."""
        handle = self._handle(seq)
        checkpoint = getattr(self.trees[handle.namespace], "checkpoint", None)
        if checkpoint is None:
            return super().cache(seq, num_new_tokens)
        if num_new_tokens == 1 and seq.num_remaining == 0:    # a decode step: insert at the end
            return None
        n = seq.num_computed_tokens
        if n <= handle.num_tokens:
            return None
        own = seq.block_table[handle.num_tokens:n]
        answer = checkpoint(handle.node, seq.token_ids[:n], list(seq.block_table[:n]))
        if not (isinstance(answer, (tuple, list)) and len(answer) == 3):
            raise AssertionError(f"request {seq.request_id}: your checkpoint returned {_short(answer)}, "
                                 f"not (slots, node, duplicates)")
        slots, node, duplicates = answer
        if len(slots) != n:
            raise AssertionError(f"request {seq.request_id}: your checkpoint(<{n} tokens>) returned {len(slots)} "
                                 f"slots, not one per token")
        stray = [s for s in duplicates if s not in own]
        if stray:
            raise AssertionError(f"request {seq.request_id}: your checkpoint returned duplicates "
                                 f"{_short(list(duplicates))}, but slot {stray[0]} is not one the request "
                                 f"computed beyond its cached prefix (its own: {_short(own)})")
        self.pool.free(list(duplicates))
        seq.block_table[:n] = list(slots)
        seq.cache_handle = RadixHandle(node, n, handle.namespace)
        return None

    def check_no_leaks(self) -> None:
        for namespace, tree in self.trees.items():
            assert tree.protected_size == 0, f"your tree {namespace or ''} still protects {tree.protected_size} tokens"
        info = self.size_info()
        held = sum(1 for c in self.pool.ref_cnt if c)
        in_trees = sum(tree.total_size() for tree in self.trees.values())
        assert held == in_trees, f"{held} KV slots are held, your trees hold {in_trees} tokens"
        assert info.free + info.evictable == info.capacity, f"free + evictable != capacity: {info}"


# -- side by side on the model -----------------------------------------------------------------


@dataclass
class SideBySide:
    """What both engines served: the same, or ``serve_side_by_side`` would have raised."""

    outputs: list[list[int]]        # per request, in the order the requests were given
    cached_tokens: list[int]        # per request: prompt tokens served from the cache at admission
    steps: int
    preemptions: int
    engines: tuple[LLMEngine, LLMEngine]    # (yours, the package's)

    @property
    def hits(self) -> int:
        """Tokens served from the cache, all requests together."""
        return sum(self.cached_tokens)


def _snapshot(seqs: dict[int, Sequence]) -> dict[int, tuple]:
    return {rid: (s.status, s.num_computed_tokens, s.metrics.num_cached_tokens, list(s.output_token_ids),
                  s.metrics.num_preemptions) for rid, s in seqs.items()}


def _first_difference(where: str, yours: dict[int, tuple], theirs: dict[int, tuple]) -> str | None:
    for rid in sorted(theirs):
        (status, computed, cached, out, preempted), (status_p, computed_p, cached_p, out_p, preempted_p) = (
            yours[rid], theirs[rid])
        at = f"{where}, request {rid}"
        if cached != cached_p:
            return (f"{at}: admitted with {cached} prompt tokens from your cache, {cached_p} from the package's "
                    f"(the same requests, in the same order, should hit the same)")
        for i, (a, b) in enumerate(zip(out, out_p)):
            if a != b:
                return (f"{at}: output token {i} is {a} on your cache, {b} on the package's: the KV it read "
                        f"differs (a block or slot handed out while another request still used it, or a hit "
                        f"that returned the wrong blocks)")
        if preempted != preempted_p:
            return (f"{at}: preempted {preempted} time(s) on your cache, {preempted_p} on the package's "
                    f"(memory ran out at another moment)")
        if computed != computed_p or len(out) != len(out_p) or status != status_p:
            return (f"{at}: {computed} tokens with KV and {len(out)} generated ({status.value}) on your cache, "
                    f"{computed_p} and {len(out_p)} ({status_p.value}) on the package's")
    return None


def serve_side_by_side(yours: CacheManager, package: CacheManager, waves: Seq[Seq[Any]],
                       params: SamplingParams, *, model: Transformer | None = None,
                       eos_token_id: int | None = None) -> SideBySide:
    """Serve the same requests on two engines, one over ``yours`` and one over ``package``, one
    step each at a time, and compare them after every step.

    ``waves``: lists of prompts; a wave is added once the one before has finished (the first
    request of a shared-prefix workload alone, say, and the others together, so that they hit what
    it cached). A prompt may come as ``(prompt, SamplingParams)`` to override ``params`` (a
    request with its own ``cache_salt``, say). After every step, for every request: the prompt tokens served from the cache at
    admission, the tokens generated, preemptions and progress must be the same on both engines,
    and so must the free, evictable and protected memory. The first difference raises
    ``AssertionError`` naming the step and the request (for memory, the requests that ran in that
    step); an exception raised by your structure inside a step gets the step in front of its
    message. ``model`` defaults to :func:`small_model`."""
    from nano_engine.engine import LLMEngine

    model = small_model() if model is None else model
    engines = (LLMEngine(model, eos_token_id=eos_token_id, cache=yours),
               LLMEngine(model, eos_token_id=eos_token_id, cache=package))
    tracked: tuple[dict[int, Sequence], dict[int, Sequence]] = ({}, {})
    order: list[int] = []
    step = 0
    for wave in waves:
        requests = [item if isinstance(item, tuple) else (item, params) for item in wave]
        order += [engines[0].add_request(p, sp) for p, sp in requests]
        for p, sp in requests:
            engines[1].add_request(p, sp)
        while any(e.scheduler.has_unfinished for e in engines):
            for engine, seqs in zip(engines, tracked):
                for s in [*engine.scheduler.running, *engine.scheduler.waiting]:
                    seqs.setdefault(s.request_id, s)
            before = _snapshot(tracked[1])
            try:
                engines[0].step()
            except Exception as exc:
                said = exc.args[0] if len(exc.args) == 1 and isinstance(exc.args[0], str) else str(exc)
                exc.args = (f"step {step}, {said}" if said else f"step {step}",)
                raise
            engines[1].step()
            snapshots = [_snapshot(seqs) for seqs in tracked]
            difference = _first_difference(f"step {step}", *snapshots)
            if difference is not None:
                raise AssertionError(difference)
            mine, theirs = (e.cache.size_info() for e in engines)
            if (mine.free, mine.evictable, mine.protected) != (theirs.free, theirs.evictable, theirs.protected):
                ran = [rid for rid, state in snapshots[1].items() if state != before.get(rid)]
                raise AssertionError(
                    f"step {step} (requests {ran} ran): after it your cache has {mine.free} free, {mine.evictable} "
                    f"evictable and {mine.protected} protected token slots, the package's {theirs.free}, "
                    f"{theirs.evictable} and {theirs.protected}")
            step += 1
    engines[0].check_no_leaks()
    seqs = tracked[0]
    preemptions = sum(s["num_preempted"] for s in engines[1].step_log)
    return SideBySide([seqs[r].output_token_ids for r in order], [seqs[r].metrics.num_cached_tokens for r in order],
                      step, preemptions, engines)


def small_model(vocab_size: int = 512, seed: int = 0) -> Transformer:
    """The ``tiny`` preset's body (Qwen3, 4 layers, hidden 128, its seed and initialisation) over a
    ``vocab_size``-token vocabulary, built in memory: nothing is written or read. The exercises'
    engine tests run on it. On the tiny preset the LM head (151,936 x 128) is 96% of the weights;
    drawing it alone costs half a second, and nothing about caching depends on the vocabulary."""
    from nano_engine.checkpoints import TINY_CONFIG, random_weights
    from nano_engine.model import Qwen3Config, Transformer

    config = {**TINY_CONFIG, "vocab_size": vocab_size, "bos_token_id": vocab_size - 2,
              "eos_token_id": vocab_size - 1}
    weights = {name.removeprefix("model."): t for name, t in random_weights(config, seed).items()}
    return Transformer.from_state_dict(Qwen3Config.from_dict(config, source="small_model"), weights)
