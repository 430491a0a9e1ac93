"""prefix_cache.py - vLLM-style prefix caching: chained block hashes, free blocks as an LRU cache.

Requests that start with the same tokens (a system prompt, earlier turns of a chat) produce the same
K and V for those tokens, so the KV blocks computed for one request can serve the next. This module
finds such blocks the way vLLM does.

**Chained hashes.** Every *full* block gets a hash of ``(parent hash, this block's tokens)``, the
parent being the hash of the block before it (``None`` for the first block). A block's KV depends
on every token before it, not only on its own 16, and the chain makes one hash stand for the whole
prefix: equal hashes mean equal prefixes from the start of the sequence. A lookup hashes the prompt
block by block and follows ``hash_to_block`` until the first miss.

**The free queue is the cache.** A finished request's blocks drop to reference count 0 and return
to the free queue *with their content and hash*, so a later request can still hit them (``touch``
takes a hit block back out of the queue). A block's cache entry is dropped only when ``allocate``
hands the block out for new content. Allocation takes from the head and frees go to the tail, so
the block idle the longest is overwritten first: the queue order is the LRU order.

>>> pool = PrefixCachingBlockPool(num_blocks=3, block_size=2)
>>> blocks = pool.allocate(2)
>>> pool.cache_blocks([7, 7, 8, 8], blocks, num_computed=4)
>>> pool.free(blocks)
>>> pool.lookup([7, 7, 8, 8, 9]), pool.num_hits, pool.num_queries
([0, 1], 4, 5)
>>> pool.allocate(3)     # every block is needed: both cached blocks are overwritten ...
[2, 1, 0]
>>> pool.last_evicted == [(1, pool.block_hashes([7, 7, 8, 8])[1]), (0, pool.block_hashes([7, 7])[0])]
True
>>> pool.lookup([7, 7, 8, 8])   # ... and no longer hit
[]

**The last token is the caller's business.** ``lookup`` matches full blocks of whatever it is
given. An engine must still run the model on at least the last prompt token to get logits for the
next one, so it looks up at most ``len(prompt) - 1`` tokens: ``lookup(prompt[:-1])`` or, without
the copy, ``lookup(prompt, max_tokens=len(prompt) - 1)``.

Beyond the book chapter's version, as vLLM does it:

- **Extra keys** (``lora_id``, ``cache_salt``, ``mm_inputs``) are mixed into the block hashes, so
  the same tokens under a different LoRA adapter, tenant or image never share a block. The salt
  goes into the first block only; the chain carries it to every later block.
- **Collision guard.** Each cached block remembers its tokens, extra keys and its parent's cache
  entry; a hash hit counts only if all three match. Even a hash function that collides all the
  time can cost hits but can never serve another prefix's KV.
- **vLLM's free order** (``uncached_first=True``): ref-0 blocks without a hash go to the *head* of
  the queue and are reused first (they hold nothing worth keeping, and reusing the same blocks
  keeps memory warm), hashed ones to the tail. The cached blocks then survive longer. Off by
  default, where every freed block goes to the tail, as in the book chapter.
- **Hash choice** (``hash_algo``): ``"builtin"`` (default), ``"sha256"``, ``"xxhash"`` or any
  callable; see ``nano_engine.hashing``. The default is Python's hash because it is the chapter's
  (``block_hashes`` gives exactly the chapter's values), makes a lookup 2-3x cheaper than the others
  (``benchmarks/lookup_cost.py``), and is safe here thanks to the collision guard. vLLM defaults to SHA-256 because its hashes leave the
  process (KV events for routers, KV transfer between machines) and it trusts a hash match; choose
  ``"sha256"`` whenever a hash is read by another process.
- **KV events** for subscribers (``subscribe``), **pinning** a prefix (``pin`` / ``unpin``),
  ``reset`` (drop the whole cache), ``last_evicted`` for pictures, ``check_invariants`` for tests.
"""

import itertools
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass

from nano_engine.hashing import HashAlgo, HashFunction, make_hash_function
from nano_engine.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from nano_engine.paged import BlockPool

MMInput = tuple[Hashable, int, int]  # (identifier of a non-text input, first token position, number of tokens)


@dataclass(frozen=True)
class ExtraKeys:
    """Everything besides the tokens that decides a block's KV.

    ``lora_id``: the adapter the request runs with (in every block's hash).
    ``cache_salt``: a per-tenant secret (first block only; the chain carries it on).
    ``mm_inputs``: non-text inputs (images, audio) as ``(identifier, offset, length)``: their
    placeholder tokens sit at positions ``offset .. offset + length - 1`` and look alike for every
    image, so each block they overlap mixes in ``(identifier, offset - block_start)``.

    Each key is tagged (``("lora", id)``, ``("salt", s)``, ``("mm", id, offset)``) so that a salt
    can never be mistaken for an adapter name that happens to be spelled the same.
    """

    lora_id: Hashable | None = None
    cache_salt: Hashable | None = None
    mm_inputs: tuple[MMInput, ...] = ()

    def __bool__(self) -> bool:
        return self.lora_id is not None or self.cache_salt is not None or bool(self.mm_inputs)

    def for_block(self, index: int, start: int, end: int) -> tuple | None:
        """The extra keys of the block covering token positions ``start .. end - 1``."""
        keys: list[tuple] = []
        if self.lora_id is not None:
            keys.append(("lora", self.lora_id))
        for identifier, offset, length in self.mm_inputs:
            if offset < end and start < offset + length:
                keys.append(("mm", identifier, offset - start))
        if index == 0 and self.cache_salt is not None:
            keys.append(("salt", self.cache_salt))
        return tuple(keys) if keys else None


def extra_keys(
    lora_id: Hashable | None = None,
    cache_salt: Hashable | None = None,
    mm_inputs: Sequence[MMInput] | None = None,
) -> ExtraKeys:
    """Build (and check) the extra keys of a request."""
    checked = []
    for item in mm_inputs or ():
        if len(item) != 3:
            raise ValueError(f"mm_inputs entries are (identifier, offset, length), got {item!r}")
        identifier, offset, length = item
        if not isinstance(offset, int) or offset < 0 or not isinstance(length, int) or length < 1:
            raise ValueError(f"mm input {identifier!r}: need offset >= 0 and length >= 1, got {offset!r}, {length!r}")
        checked.append((identifier, offset, length))
    return ExtraKeys(lora_id, cache_salt, tuple(checked))


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """What a cached block holds, kept to confirm a hash hit (the collision guard).

    A hit must agree on the tokens, the extra keys *and* the parent: the block before it in the
    lookup must be the very entry this block was computed after. The link is a serial number, not
    the parent's hash (two different prefixes can share a hash, and so would their children) nor
    its block id (block ids are reused for new content). By induction from the first block, every
    hit then holds exactly the looked-up prefix, whatever the hash function does.
    """

    serial: int  # unique per registration, never reused; the blocks after this one point at it
    parent_serial: int  # serial of the entry of the block before (0: first block of a sequence)
    token_ids: tuple[int, ...]
    extra_keys: tuple | None


class PrefixCachingBlockPool(BlockPool):
    """A ``BlockPool`` whose free queue doubles as an LRU cache of full, hashed blocks.

    Attributes (read them; change them only through the methods):

    - ``free_queue``: ref-0 block ids, head first (an ``OrderedDict`` used as an O(1) linked list);
    - ``hash_to_block`` / ``block_hash``: the cache, both directions; ``cache_entry``: per cached
      block, its tokens, extra keys and parent link;
    - ``num_queries`` / ``num_hits``: tokens looked up / tokens hit, over all ``lookup`` calls;
    - ``last_evicted``: ``(block, hash)`` pairs evicted by the most recent ``allocate`` call.
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        hash_algo: HashAlgo | HashFunction = "builtin",
        uncached_first: bool = False,
    ) -> None:
        super().__init__(num_blocks)
        if not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be an integer >= 1, got {block_size!r}")
        self.block_size = block_size
        self.hash_algo = hash_algo
        self.uncached_first = uncached_first
        self._hash = make_hash_function(hash_algo)
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.hash_to_block: dict[int, int] = {}
        self.block_hash: list[int | None] = [None] * num_blocks
        self.cache_entry: list[CacheEntry | None] = [None] * num_blocks
        self.num_queries = self.num_hits = 0
        self.last_evicted: list[tuple[int, int]] = []
        self._serials = itertools.count(1)
        self._subscribers: list[Callable[[KVEvent], None]] = []
        self._pins: dict[tuple, list[list[int]]] = {}

    # -- allocation -------------------------------------------------------------------------

    def allocate(self, n: int) -> list[int] | None:
        """Take ``n`` blocks from the head of the free queue (None, and no change, if too few).

        A taken block that still caches a prefix is about to be overwritten, so its hash leaves
        the cache here (a ``BlockRemoved`` event) and the pair lands in ``last_evicted``.
        """
        self._check_count(n)
        self.last_evicted = []
        if n > len(self.free_queue):
            return None
        blocks = []
        for _ in range(n):
            b, _ = self.free_queue.popitem(last=False)
            if self.block_hash[b] is not None:
                self.last_evicted.append((b, self.block_hash[b]))
                self._uncache(b)
            self.ref_cnt[b] = 1
            blocks.append(b)
        if self.last_evicted:
            self._emit(BlockRemoved([h for _, h in self.last_evicted]))
        return blocks

    def free(self, blocks: Sequence[int]) -> None:
        """Drop one reference per block, last block first; blocks at 0 keep content and hash.

        Freed in reverse so a sequence's tail (the part least likely shared) reaches the queue
        first and is evicted first. With ``uncached_first`` a block without a hash goes to the head
        instead: it caches nothing, so it should be reused before any cached block.
        """
        self._check_release(blocks)
        for b in reversed(blocks):
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self.free_queue[b] = None
                if self.uncached_first and self.block_hash[b] is None:
                    self.free_queue.move_to_end(b, last=False)

    def touch(self, blocks: Sequence[int]) -> None:
        """Add a reference to each block (hit blocks a new request reuses); take ref-0 ones off the queue."""
        for b in blocks:
            self._check_block_id(b)
            if self.ref_cnt[b] == 0 and self.block_hash[b] is None:
                raise ValueError(f"block {b} is free and caches nothing: allocate blocks, touch only cache hits")
        for b in blocks:
            if self.ref_cnt[b] == 0:
                del self.free_queue[b]
            self.ref_cnt[b] += 1

    # -- hashing and lookup -----------------------------------------------------------------

    def block_hashes(
        self,
        token_ids: Sequence[int],
        *,
        lora_id: Hashable | None = None,
        cache_salt: Hashable | None = None,
        mm_inputs: Sequence[MMInput] | None = None,
    ) -> list[int]:
        """The chained hash of every full block of ``token_ids`` (a trailing partial block has none)."""
        extra = extra_keys(lora_id, cache_salt, mm_inputs)
        return [h for _, h, _, _ in self._chain(token_ids, len(token_ids), extra)]

    def lookup(
        self,
        token_ids: Sequence[int],
        *,
        max_tokens: int | None = None,
        lora_id: Hashable | None = None,
        cache_salt: Hashable | None = None,
        mm_inputs: Sequence[MMInput] | None = None,
    ) -> list[int]:
        """The blocks of the longest cached run of full blocks at the start of ``token_ids``.

        Only the first ``max_tokens`` tokens take part when given (an engine passes
        ``len(prompt) - 1``: the last prompt token must be computed for its logits). Counts
        those tokens in ``num_queries`` and the hit tokens in ``num_hits``. Does not take a
        reference: ``touch`` the blocks before anything else can allocate.
        """
        end = len(token_ids) if max_tokens is None else self._check_max_tokens(max_tokens, len(token_ids))
        hit = self._match(token_ids, end, extra_keys(lora_id, cache_salt, mm_inputs))
        self.num_queries += end
        self.num_hits += len(hit) * self.block_size
        return hit

    def peek(
        self,
        token_ids: Sequence[int],
        *,
        max_tokens: int | None = None,
        lora_id: Hashable | None = None,
        cache_salt: Hashable | None = None,
        mm_inputs: Sequence[MMInput] | None = None,
    ) -> list[int]:
        """``lookup`` without counting it: for a scheduler ranking waiting requests by their hits."""
        end = len(token_ids) if max_tokens is None else self._check_max_tokens(max_tokens, len(token_ids))
        return self._match(token_ids, end, extra_keys(lora_id, cache_salt, mm_inputs))

    def cache_blocks(
        self,
        token_ids: Sequence[int],
        block_ids: Sequence[int],
        num_computed: int,
        *,
        lora_id: Hashable | None = None,
        cache_salt: Hashable | None = None,
        mm_inputs: Sequence[MMInput] | None = None,
    ) -> None:
        """Register the full blocks among the first ``num_computed`` tokens (call after a forward).

        ``block_ids`` is the sequence's block table. Blocks already cached are skipped. A block
        whose prefix another block already caches (two requests computed it at once) stays
        uncached, and the chain continues through the cached copy. Emits one ``BlockStored`` per
        run of newly cached consecutive blocks.
        """
        if not isinstance(num_computed, int) or not 0 <= num_computed <= len(token_ids):
            raise ValueError(f"num_computed must be in 0..{len(token_ids)} (the number of tokens), got {num_computed!r}")
        num_full = num_computed // self.block_size
        if len(block_ids) < num_full:
            raise ValueError(f"{num_computed} computed tokens fill {num_full} blocks, but the block table has {len(block_ids)}")
        table = list(block_ids[:num_full])
        for b in table:
            self._check_block_id(b)
            if self.ref_cnt[b] == 0:
                raise ValueError(f"block {b} is not allocated: only blocks a sequence holds can be cached")
        if len(set(table)) != num_full:
            raise ValueError(f"the block table lists a block twice: {table}")
        extra = extra_keys(lora_id, cache_salt, mm_inputs)

        # The leading blocks already cached need no hashing: the chain resumes from the last one.
        first = 0
        while first < num_full and self.block_hash[table[first]] is not None:
            first += 1
        if first == num_full:
            return
        parent_hash = self.block_hash[table[first - 1]] if first else None
        parent_serial = self.cache_entry[table[first - 1]].serial if first else 0
        chain = list(self._chain(token_ids, num_computed, extra, first, parent_hash))
        for i, h, _, _ in chain:  # check everything before changing anything
            if self.block_hash[table[i]] not in (None, h):
                raise ValueError(f"block {table[i]} at position {i} already caches other content")

        run: list[tuple[int, tuple[int, ...], tuple | None]] = []  # newly cached blocks in a row
        run_parent = prev_hash = parent_hash
        for i, h, tokens, keys in chain:
            b = table[i]
            owner = self.hash_to_block.get(h)
            if self.block_hash[b] is None and owner is None:
                entry = CacheEntry(next(self._serials), parent_serial, tokens, keys)
                self.block_hash[b], self.cache_entry[b], self.hash_to_block[h] = h, entry, b
                parent_serial = entry.serial
                if not run:
                    run_parent = prev_hash
                run.append((h, tokens, keys))
            else:
                self._emit_stored(run, run_parent, extra)
                run = []
                if self.block_hash[b] is not None:  # cached by an earlier call
                    parent_serial = self.cache_entry[b].serial
                elif self._holds(owner, parent_serial, tokens, keys):  # a duplicate of a cached block
                    parent_serial = self.cache_entry[owner].serial
                else:
                    # A true hash collision: the slot belongs to other content. This block cannot
                    # be cached under its hash, and no lookup could reach the blocks after it.
                    return
            prev_hash = h
        self._emit_stored(run, run_parent, extra)

    # -- pinning, reset, statistics -----------------------------------------------------------

    def pin(
        self,
        token_ids: Sequence[int],
        *,
        lora_id: Hashable | None = None,
        cache_salt: Hashable | None = None,
        mm_inputs: Sequence[MMInput] | None = None,
    ) -> list[int]:
        """Keep the cached prefix of ``token_ids`` out of eviction until ``unpin`` with the same arguments.

        Holds an extra reference on each cached prefix block, so none of them is in the free queue.
        Returns the pinned blocks (empty when nothing is cached yet: pin after the prefix is
        computed). Does not count as a query. Pinning twice needs two unpins.
        """
        extra = extra_keys(lora_id, cache_salt, mm_inputs)
        blocks = self._match(token_ids, len(token_ids), extra)
        self.touch(blocks)
        self._pins.setdefault((tuple(token_ids), extra), []).append(blocks)
        return blocks

    def unpin(
        self,
        token_ids: Sequence[int],
        *,
        lora_id: Hashable | None = None,
        cache_salt: Hashable | None = None,
        mm_inputs: Sequence[MMInput] | None = None,
    ) -> None:
        """Release the most recent ``pin`` made with the same arguments; its blocks become evictable."""
        key = (tuple(token_ids), extra_keys(lora_id, cache_salt, mm_inputs))
        pins = self._pins.get(key)
        if not pins:
            raise ValueError(f"no pin for these {len(token_ids)} tokens and extra keys {key[1]}")
        blocks = pins.pop()
        if not pins:
            del self._pins[key]
        self.free(blocks)

    @property
    def pinned_blocks(self) -> set[int]:
        """Blocks held by at least one pin."""
        return {b for pins in self._pins.values() for blocks in pins for b in blocks}

    def reset(self) -> bool:
        """Drop every cached hash (``AllBlocksCleared``) if no block is in use; return whether it did.

        Refuses (returns False, changes nothing) while any block is referenced, pins included:
        a running request's blocks must stay valid.
        """
        if any(self.ref_cnt):
            return False
        self.hash_to_block.clear()
        self.block_hash = [None] * self.num_blocks
        self.cache_entry = [None] * self.num_blocks
        self.last_evicted = []
        self._emit(AllBlocksCleared())
        return True

    @property
    def hit_rate(self) -> float:
        """``num_hits / num_queries`` (0.0 before any query)."""
        return self.num_hits / self.num_queries if self.num_queries else 0.0

    def reset_stats(self) -> None:
        self.num_queries = self.num_hits = 0

    # -- KV events ----------------------------------------------------------------------------

    def subscribe(self, callback: Callable[[KVEvent], None]) -> Callable[[], None]:
        """Call ``callback(event)`` for every future KV event; returns a function that unsubscribes."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    def _emit(self, event: KVEvent) -> None:
        for callback in list(self._subscribers):
            callback(event)

    def _emit_stored(self, run: list, parent_hash: int | None, extra: ExtraKeys) -> None:
        if run and self._subscribers:
            self._emit(BlockStored(
                block_hashes=[h for h, _, _ in run],
                parent_block_hash=parent_hash,
                token_ids=[t for _, tokens, _ in run for t in tokens],
                block_size=self.block_size,
                lora_id=extra.lora_id,
                extra_keys=[keys for _, _, keys in run],
            ))

    # -- checks -------------------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Raise AssertionError if the bookkeeping is inconsistent (tests call this after every step)."""

        def require(ok: bool, message: str) -> None:
            if not ok:
                raise AssertionError(message)

        require(all(c >= 0 for c in self.ref_cnt), f"negative ref_cnt: {self.ref_cnt}")
        free = [b for b in range(self.num_blocks) if self.ref_cnt[b] == 0]
        require(sorted(self.free_queue) == free, f"free_queue {list(self.free_queue)} != ref-0 blocks {free}")
        for h, b in self.hash_to_block.items():
            require(self.block_hash[b] == h, f"hash_to_block[{h}] = {b} but block_hash[{b}] = {self.block_hash[b]}")
        cached = [b for b in range(self.num_blocks) if self.block_hash[b] is not None]
        require(len(cached) == len(self.hash_to_block), f"{len(cached)} blocks have a hash, hash_to_block has {len(self.hash_to_block)}")
        for b in range(self.num_blocks):
            entry = self.cache_entry[b]
            require((entry is None) == (self.block_hash[b] is None), f"block {b}: cache_entry and block_hash disagree")
            if entry is not None:
                require(len(entry.token_ids) == self.block_size, f"block {b} caches {len(entry.token_ids)} tokens")
        serials = [e.serial for e in self.cache_entry if e is not None]
        require(len(set(serials)) == len(serials), "two cache entries share a serial")
        pin_count: dict[int, int] = {}
        for pins in self._pins.values():
            for blocks in pins:
                for b in blocks:
                    pin_count[b] = pin_count.get(b, 0) + 1
        for b, count in pin_count.items():
            require(self.ref_cnt[b] >= count and self.block_hash[b] is not None, f"pinned block {b} lost its pin")

    # -- internals ----------------------------------------------------------------------------

    def _chain(
        self,
        token_ids: Sequence[int],
        end: int,
        extra: ExtraKeys,
        first_block: int = 0,
        parent: int | None = None,
    ) -> Iterator[tuple[int, int, tuple[int, ...], tuple | None]]:
        """Yield ``(index, hash, tokens, extra keys)`` for each full block among the first ``end`` tokens.

        Lazy, so a lookup stops hashing at its first miss. ``parent`` is the hash of block
        ``first_block - 1`` when resuming mid-sequence.
        """
        size, has_extra = self.block_size, bool(extra)
        for i in range(first_block, end // size):
            start = i * size
            tokens = tuple(token_ids[start:start + size])
            keys = extra.for_block(i, start, start + size) if has_extra else None
            parent = self._hash((parent, tokens) if keys is None else (parent, tokens, keys))
            yield i, parent, tokens, keys

    def _match(self, token_ids: Sequence[int], end: int, extra: ExtraKeys) -> list[int]:
        hit: list[int] = []
        parent_serial = 0
        for _, h, tokens, keys in self._chain(token_ids, end, extra):
            b = self.hash_to_block.get(h)
            if b is None or not self._holds(b, parent_serial, tokens, keys):
                break
            hit.append(b)
            parent_serial = self.cache_entry[b].serial
        return hit

    def _holds(self, b: int, parent_serial: int, tokens: tuple[int, ...], keys: tuple | None) -> bool:
        """Does cached block ``b`` really hold this block of this prefix (not just the same hash)?"""
        entry = self.cache_entry[b]
        return entry.parent_serial == parent_serial and entry.token_ids == tokens and entry.extra_keys == keys

    def _uncache(self, b: int) -> None:
        del self.hash_to_block[self.block_hash[b]]
        self.block_hash[b] = None
        self.cache_entry[b] = None

    def _check_max_tokens(self, max_tokens: int, n: int) -> int:
        if not isinstance(max_tokens, int) or max_tokens < 0:
            raise ValueError(f"max_tokens must be an integer >= 0, got {max_tokens!r}")
        return min(max_tokens, n)
