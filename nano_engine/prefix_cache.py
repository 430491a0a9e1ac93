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

Beyond the pool chapter 02 builds by hand (its ``PrefixCache``), as vLLM does it:

- **Extra keys** (``lora_id``, ``cache_salt``, ``mm_inputs``) are mixed into the block hashes, so
  the same tokens under a different LoRA adapter, tenant or image never share a block. The salt
  goes into the first block only; the chain carries it to every later block.
- **Collision guard.** Each cached block remembers its tokens, extra keys and its parent's cache
  entry; a hash hit counts only if all three match (the parent compared by content, so a child
  whose parent block was evicted and computed again still matches). Even a hash function that
  collides all the time can cost hits but can never serve another prefix's KV. vLLM has no such
  check: it trusts SHA-256 (a check for the ``xxhash`` choices is proposed in PR #54727, open as of
  2026-12-01).
- **Free order** (``uncached_first=True``): ref-0 blocks without a hash go to the *head* of the
  queue (reused first: they hold nothing worth keeping), hashed ones to the tail, both reversed, so
  cached blocks survive longer. Off by default: every freed block to the tail, as in chapter 02.
- **Hash choice** (``hash_algo``): ``"builtin"`` (default), ``"sha256"``, ``"xxhash"`` or any
  callable (``nano_engine.hashing``). Python's hash is this package's teaching default, not a vLLM
  option: it gives chapter 02's values, makes a lookup 2-3x cheaper (``benchmarks/lookup_cost.py``)
  and is safe behind the collision guard. vLLM defaults to SHA-256 because its hashes leave the
  process (KV events, KV transfer) and it trusts a match: choose ``"sha256"`` whenever another
  process reads a hash.
- **KV events** for subscribers (``subscribe``), **pinning** a prefix (``pin`` / ``unpin``),
  ``reset`` (drop the whole cache), ``last_evicted`` for pictures, ``check_invariants`` for tests.

**vLLM mode** (``PrefixCachingBlockPool(..., vllm=True)``, which builds a
:class:`VllmPrefixCachingBlockPool`): vLLM v1 as it is in vLLM 0.33.0 (``vllm/v1/core/block_pool.py``,
``kv_cache_utils.py``, ``kv_cache_manager.py``, ``single_type_kv_cache_manager.py``):

- *Duplicates are cached too.* Two requests that computed the same prefix at once each keep their
  own blocks (a block table is append-only, so neither can switch to the other's copy), and vLLM
  caches both under the one hash (``BlockHashToBlockMap``: hash -> ``{block_id: block}``). A lookup
  is served one (``get_one_block``: the first cached that is still there); evicting one leaves the
  others serving. ``hash_to_blocks`` lists them all.
- *Free order as vLLM*: ``BlockPool.free_blocks`` (given ``reversed(req_blocks)`` by
  ``SingleTypeKVCacheManager.free``) prepends the hash-less blocks with
  ``FreeKVCacheBlockQueue.prepend_n`` and appends the cached ones.
- *The key*: ``(parent or NONE_HASH, tokens, extra keys or None)`` (``hash_block_tokens``), the
  first block's parent being ``NONE_HASH`` derived as vLLM does (``nano_engine.hashing.none_hash``;
  vLLM's ``resolve_none_hash_seed`` / ``init_none_hash``), with vLLM's four hash functions
  (``"sha256"`` the default, ``"sha256_cbor"``, ``"xxhash"``, ``"xxhash_cbor"``; bytes). With the
  same seed and function, the hashes are vLLM's, byte for byte.
- *Tagged extra keys*, as ``generate_block_hash_extra_keys`` builds them, in this order:
  ``("lora", name, path)`` (``_gen_lora_extra_hash_keys``; pass ``lora_id=(name, path)``, a bare
  ``lora_id`` stands for the name with no path), ``("mm", identifier, offset)`` per multimodal input
  overlapping the block, ``("cache_salt", salt)`` on the first block when the salt is non-empty.
  (vLLM also mixes in ``("prompt_embeds", digest)`` for prompt embeddings; this package has none.)
- *KV events as vLLM publishes them*: each hash as the int of its low 64 bits
  (``maybe_convert_block_hash`` under ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``, on by default;
  ``int_event_hashes=False`` publishes the digests), the extra keys untagged
  (``to_event_extra_keys``: the LoRA name, ``(identifier, offset)`` pairs, the salt), the LoRA
  name in ``lora_name``, and one ``BlockRemoved`` per evicted block (``_emit_block_removed_events``).
- *Caching at allocation time* is the caller's: vLLM registers the blocks a step will fill when it
  allocates them (``cache_blocks`` with the tokens *scheduled*, not yet computed), so a request
  admitted later in the same step hits them. ``LLMEngine(model, cache="vllm")`` does that, and
  checks an admission against the free blocks before it touches any hit, as
  ``KVCacheManager.allocate_slots`` does (``nano_engine.cache_manager``).

The chapter's pool (the default) tags its keys its own way, ``("lora", id)``, ``("salt", s)``,
``("mm", identifier, offset)``, and publishes them tagged.
"""

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from nano_engine.checks import require_int
from nano_engine.hashing import HashAlgo, HashFunction, make_hash_function, none_hash
from nano_engine.kv_events import (
    FULL_ATTENTION_GROUP,
    FULL_ATTENTION_KIND,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEvent,
)
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

    Each key is tagged (``("lora", id)``, ``("salt", s)``, ``("mm", id, offset)``: :meth:`for_block`)
    so that a salt can never be mistaken for an adapter name that happens to be spelled the same.
    vLLM mode tags them as vLLM 0.33.0 does instead (:func:`vllm_block_extra_keys`).
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


def lora_name_and_path(lora_id: Hashable) -> tuple[Hashable, Hashable | None]:
    """vLLM mode: ``lora_id`` as vLLM's ``LoRARequest`` identity, ``(lora_name, lora_path)``.

    A bare id stands for the name, with no path (vLLM always has a path; this package's requests
    need not).
    """
    if isinstance(lora_id, tuple) and len(lora_id) == 2:
        return lora_id[0], lora_id[1]
    return lora_id, None


def vllm_block_extra_keys(extra: ExtraKeys, start: int, end: int) -> tuple | None:
    """vLLM 0.33's ``generate_block_hash_extra_keys`` for the block covering ``start .. end - 1``.

    Tagged and in vLLM's order: ``("lora", name, path)``, then ``("mm", identifier, offset -
    start)`` per overlapping input, then ``("cache_salt", salt)`` on the first block (a non-empty
    salt only, as vLLM tests ``request.cache_salt``).
    """
    keys: list[tuple] = []
    if extra.lora_id is not None:
        keys.append(("lora", *lora_name_and_path(extra.lora_id)))
    for identifier, offset, length in extra.mm_inputs:
        if offset < end and start < offset + length:
            keys.append(("mm", identifier, offset - start))
    if start == 0 and extra.cache_salt:
        keys.append(("cache_salt", extra.cache_salt))
    return tuple(keys) if keys else None


def untagged_extra_keys(keys: tuple | None) -> tuple | None:
    """vLLM 0.33's ``to_event_extra_keys`` for one block: the keys as KV events publish them.

    ``("mm", identifier, offset)`` becomes ``(identifier, offset)``; any other key its bare value
    (the LoRA name, the salt).
    """
    if keys is None:
        return None
    return tuple(key[1:] if key[0] == "mm" else key[1] for key in keys)


@dataclass(frozen=True, slots=True, eq=False)
class CacheEntry:
    """What a cached block holds, kept to confirm a hash hit (the collision guard).

    A hit must agree on the tokens, the extra keys *and* the parent: the block before it in the
    lookup must hold the same prefix as the entry this block was computed after. The link is that
    entry itself, not the parent's hash (two different prefixes can share a hash, and so would
    their children) nor its block id (block ids are reused for new content). An entry outlives its
    block's eviction while a child still points at it, so a child whose parent block was evicted
    and computed again (a new entry of equal content) is recognised: ``same_prefix`` compares
    content, entry by entry, back to the first block. By induction every hit then holds exactly
    the looked-up prefix, whatever the hash function does.
    """

    parent: "CacheEntry | None"  # the entry of the block before (None: first block of a sequence)
    token_ids: tuple[int, ...]
    extra_keys: tuple | None


def same_prefix(a: CacheEntry | None, b: CacheEntry | None) -> bool:
    """Do ``a`` and ``b`` stand for the same prefix (equal tokens and extra keys, block by block)?

    A loop, not recursion: chains can be thousands of blocks long. It stops at once in the usual
    case, where both are the very same entry.
    """
    while a is not b:
        if a is None or b is None or a.token_ids != b.token_ids or a.extra_keys != b.extra_keys:
            return False
        a, b = a.parent, b.parent
    return True


class _ServedBlocks(Mapping):
    """``hash_to_block``: hash -> the block a lookup is served (read-only view of ``hash_to_blocks``).

    In vLLM mode several blocks may cache one hash; like vLLM's ``BlockHashToBlockMap.get_one_block``
    the view shows the first one cached that is still there. In the default mode there is never
    more than one.
    """

    def __init__(self, groups: dict[Hashable, dict[int, None]]) -> None:
        self._groups = groups

    def __getitem__(self, h: Hashable) -> int:
        return next(iter(self._groups[h]))

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._groups)

    def __len__(self) -> int:
        return len(self._groups)

    def __repr__(self) -> str:
        return repr(dict(self))


class PrefixCachingBlockPool(BlockPool):
    """A ``BlockPool`` whose free queue doubles as an LRU cache of full, hashed blocks.

    Attributes (read them; change them only through the methods):

    - ``free_queue``: ref-0 block ids, head first (an ``OrderedDict`` used as an O(1) linked list);
    - ``hash_to_blocks``: the cache, hash -> the blocks holding it (in caching order; one block
      per hash except in vLLM mode); ``hash_to_block``: hash -> the block a lookup is served;
      ``block_hash``: block -> its hash or None; ``cache_entry``: per cached block, its tokens,
      extra keys and parent link;
    - ``num_queries`` / ``num_hits``: tokens looked up / tokens hit, over all ``lookup`` calls;
    - ``last_evicted``: ``(block, hash)`` pairs evicted by the most recent ``allocate`` call.

    ``PrefixCachingBlockPool(..., vllm=True)`` builds a :class:`VllmPrefixCachingBlockPool`
    instead (vLLM v1's behaviour, the module docstring).
    """

    vllm = False              # is this vLLM mode (VllmPrefixCachingBlockPool)?
    keeps_duplicates = False  # may several blocks cache one hash? (the chapter keeps one)

    def __new__(cls, *args: object, vllm: bool = False, **kwargs: object) -> "PrefixCachingBlockPool":
        if vllm and not issubclass(cls, VllmPrefixCachingBlockPool):
            cls = VllmPrefixCachingBlockPool
        return super().__new__(cls)

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        hash_algo: HashAlgo | HashFunction | None = None,
        uncached_first: bool = False,
        vllm: bool = False,
    ) -> None:
        super().__init__(num_blocks)
        self.block_size = require_int("block_size", block_size)
        self.hash_algo = "builtin" if hash_algo is None else hash_algo
        self.uncached_first = uncached_first
        self._hash = make_hash_function(self.hash_algo, vllm=self.vllm)
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))  # type: ignore[assignment]  # O(1) removal from the middle (touch)
        self.hash_to_blocks: dict[Hashable, dict[int, None]] = {}
        self.block_hash: list[Hashable | None] = [None] * num_blocks
        self.cache_entry: list[CacheEntry | None] = [None] * num_blocks
        self.num_queries = self.num_hits = 0
        self.last_evicted: list[tuple[int, Hashable]] = []
        self._subscribers: list[Callable[[KVEvent], None]] = []
        self._pins: dict[tuple, list[list[int]]] = {}

    @property
    def hash_to_block(self) -> Mapping[Hashable, int]:
        """Hash -> the block a lookup is served (read-only; see ``hash_to_blocks`` for duplicates)."""
        return _ServedBlocks(self.hash_to_blocks)

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
            self._emit_removed([h for _, h in self.last_evicted])
        return blocks

    def free(self, blocks: Sequence[int]) -> None:
        """Drop one reference per block, last block first; blocks at 0 keep content and hash.

        Freed in reverse so a sequence's tail (the part least likely shared) reaches the queue
        first and is evicted first. With ``uncached_first`` (and in vLLM mode) the blocks without a
        hash go to the *head* instead, in that same reversed order, so the sequence's last block
        becomes the head: they cache nothing and are reused before any cached block. This is
        vLLM's ``BlockPool.free_blocks`` (``prepend_n`` for the hash-less, ``append_n`` for the
        rest), called by ``SingleTypeKVCacheManager.free`` with ``reversed(req_blocks)``.
        """
        self._check_release(blocks)
        fresh = []
        for b in reversed(blocks):
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self.free_queue[b] = None
                if self.uncached_first and self.block_hash[b] is None:
                    fresh.append(b)
        for b in reversed(fresh):  # the first of `fresh` must end up at the head
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
    ) -> list[Hashable]:
        """The chained hash of every full block of ``token_ids`` (a trailing partial block has none)."""
        extra = extra_keys(lora_id, cache_salt, mm_inputs)
        return [h for _, h, _, _ in self._chain(token_ids, len(token_ids), extra)]

    def peek(
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
        nothing (a scheduler ranking waiting requests by their hits peeks); ``lookup`` is the same
        walk, counted. Takes no reference: ``touch`` the blocks before anything else can allocate.
        """
        end = len(token_ids) if max_tokens is None else self._check_max_tokens(max_tokens, len(token_ids))
        return self._match(token_ids, end, extra_keys(lora_id, cache_salt, mm_inputs))

    def lookup(
        self,
        token_ids: Sequence[int],
        *,
        max_tokens: int | None = None,
        lora_id: Hashable | None = None,
        cache_salt: Hashable | None = None,
        mm_inputs: Sequence[MMInput] | None = None,
    ) -> list[int]:
        """``peek``, and count the tokens looked up in ``num_queries``, the hit tokens in ``num_hits``."""
        hit = self.peek(token_ids, max_tokens=max_tokens, lora_id=lora_id, cache_salt=cache_salt, mm_inputs=mm_inputs)
        self.num_queries += len(token_ids) if max_tokens is None else min(max_tokens, len(token_ids))
        self.num_hits += len(hit) * self.block_size
        return hit

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
        """Register the full blocks among the first ``num_computed`` tokens.

        ``block_ids`` is the sequence's block table. Blocks already cached are skipped. Emits one
        ``BlockStored`` per run of newly cached consecutive blocks.

        When to call it: the chapter (and the default engine) calls it after a forward, for the
        tokens computed. vLLM calls it when it *allocates* the slots of a step, for the tokens the
        step is about to compute (``KVCacheManager.allocate_slots`` -> ``cache_blocks`` ->
        ``BlockPool.cache_full_blocks``), so a request scheduled later in the same step already
        hits them; the forward writes their K/V before anyone reads them.

        A block whose prefix another block already caches (two requests computed it at once)
        stays uncached, and the chain continues through the cached copy; in vLLM mode
        (``keeps_duplicates``) it is cached too, under the same hash.

        A block whose hash is cached for *other* content (a true collision, caught by the guard)
        is not cached, and neither is any block after it (no lookup could reach them).
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
        parent = self.cache_entry[table[first - 1]] if first else None
        chain = list(self._chain(token_ids, num_computed, extra, first, parent_hash))
        for i, h, _, _ in chain:  # check everything before changing anything
            if self.block_hash[table[i]] not in (None, h):
                raise ValueError(f"block {table[i]} at position {i} already caches other content")

        run: list[tuple[Hashable, tuple[int, ...], tuple | None]] = []  # newly cached blocks in a row
        run_parent = prev_hash = parent_hash
        for i, h, tokens, keys in chain:
            b = table[i]
            group = self.hash_to_blocks.get(h)
            if self.block_hash[b] is None and group is not None:
                copy = next(iter(group))
                if not self._holds(copy, parent, tokens, keys):
                    # A true hash collision: the hash belongs to other content. This block cannot
                    # be cached under it, and no lookup could reach the blocks after it.
                    break
                if not self.keeps_duplicates:  # one block per hash: go on through the copy
                    self._emit_stored(run, run_parent, extra)
                    run = []
                    parent, prev_hash = self.cache_entry[copy], h
                    continue
            if self.block_hash[b] is not None:  # cached by an earlier call
                self._emit_stored(run, run_parent, extra)
                run = []
                parent = self.cache_entry[b]
            else:
                parent = self._cache(b, h, CacheEntry(parent, tokens, keys))
                if not run:
                    run_parent = prev_hash
                run.append((h, tokens, keys))
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

    def forget(self, blocks: Sequence[int]) -> None:
        """Uncache ``blocks`` (a ``BlockRemoved`` for their hashes); they stay allocated to their owner.

        For registrations made ahead of the forward (vLLM mode registers at allocation) when the
        step then fails: the K/V those hashes promise was never written. A block another request
        hit in that same step must be rolled back with that request (the engine's job).
        """
        for b in blocks:
            self._check_block_id(b)
        removed = []
        for b in blocks:
            h = self.block_hash[b]
            if h is not None:
                removed.append(h)
                self._uncache(b)
        if removed:
            self._emit_removed(removed)

    def reset(self) -> bool:
        """Drop every cached hash (``AllBlocksCleared``) if no block is in use; return whether it did.

        Refuses (returns False, changes nothing) while any block is referenced, pins included:
        a running request's blocks must stay valid.
        """
        if any(self.ref_cnt):
            return False
        self.hash_to_blocks.clear()
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

    def event_hash(self, h: Hashable) -> Hashable:
        """A block hash as the KV events publish it (as it is here; vLLM mode shortens it)."""
        return h

    def _emit(self, event: KVEvent) -> None:
        for callback in list(self._subscribers):
            callback(event)

    def _emit_stored(self, run: list, parent_hash: Hashable | None, extra: ExtraKeys) -> None:
        if run and self._subscribers:
            self._emit(BlockStored(
                block_hashes=[h for h, _, _ in run],
                parent_block_hash=parent_hash,
                token_ids=[t for _, tokens, _ in run for t in tokens],
                block_size=self.block_size,
                lora_id=extra.lora_id,
                extra_keys=[keys for _, _, keys in run],
            ))

    def _emit_removed(self, hashes: list[Hashable]) -> None:
        self._emit(BlockRemoved(hashes))

    # -- checks -------------------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Raise AssertionError if the bookkeeping is inconsistent (tests call this after every step)."""

        def require(ok: bool, message: str) -> None:
            if not ok:
                raise AssertionError(message)

        require(all(c >= 0 for c in self.ref_cnt), f"negative ref_cnt: {self.ref_cnt}")
        free = [b for b in range(self.num_blocks) if self.ref_cnt[b] == 0]
        require(sorted(self.free_queue) == free, f"free_queue {list(self.free_queue)} != ref-0 blocks {free}")
        num_cached = 0
        for h, group in self.hash_to_blocks.items():
            require(len(group) >= 1 and (self.keeps_duplicates or len(group) == 1), f"hash {h!r} is cached by blocks {list(group)}")
            for b in group:
                require(self.block_hash[b] == h, f"hash_to_blocks[{h!r}] has {b} but block_hash[{b}] = {self.block_hash[b]!r}")
                first = self.cache_entry[next(iter(group))]
                require(self.cache_entry[b] is first or same_prefix(self.cache_entry[b], first),
                        f"blocks {list(group)} share hash {h!r} but hold different prefixes")
            num_cached += len(group)
        cached = [b for b in range(self.num_blocks) if self.block_hash[b] is not None]
        require(len(cached) == num_cached, f"{len(cached)} blocks have a hash, hash_to_blocks holds {num_cached}")
        for b in range(self.num_blocks):
            entry = self.cache_entry[b]
            require((entry is None) == (self.block_hash[b] is None), f"block {b}: cache_entry and block_hash disagree")
            if entry is not None:
                require(len(entry.token_ids) == self.block_size, f"block {b} caches {len(entry.token_ids)} tokens")
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
        parent: Hashable | None = None,
    ) -> Iterator[tuple[int, Hashable, tuple[int, ...], tuple | None]]:
        """Yield ``(index, hash, tokens, extra keys)`` for each full block among the first ``end`` tokens.

        Lazy, so a lookup stops hashing at its first miss. ``parent`` is the hash of block
        ``first_block - 1`` when resuming mid-sequence. The key is the chapter's ``(parent,
        tokens)``, or ``(parent, tokens, keys)`` with extra keys.
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
        parent: CacheEntry | None = None
        for _, h, tokens, keys in self._chain(token_ids, end, extra):
            group = self.hash_to_blocks.get(h)
            if group is None:
                break
            b = next(iter(group))  # vLLM's get_one_block: the first block cached under h
            if not self._holds(b, parent, tokens, keys):
                break
            hit.append(b)
            parent = self.cache_entry[b]
        return hit

    def _holds(self, b: int, parent: CacheEntry | None, tokens: tuple[int, ...], keys: tuple | None) -> bool:
        """Does cached block ``b`` really hold this block of this prefix (not just the same hash)?"""
        entry = self.cache_entry[b]
        assert entry is not None
        return entry.token_ids == tokens and entry.extra_keys == keys and same_prefix(entry.parent, parent)

    def _cache(self, b: int, h: Hashable, entry: CacheEntry) -> CacheEntry:
        self.block_hash[b], self.cache_entry[b] = h, entry
        self.hash_to_blocks.setdefault(h, {})[b] = None
        return entry

    def _uncache(self, b: int) -> None:
        h = self.block_hash[b]
        group = self.hash_to_blocks[h]
        del group[b]
        if not group:
            del self.hash_to_blocks[h]
        self.block_hash[b] = None
        self.cache_entry[b] = None

    def _check_max_tokens(self, max_tokens: int, n: int) -> int:
        return min(require_int("max_tokens", max_tokens, minimum=0), n)


class VllmPrefixCachingBlockPool(PrefixCachingBlockPool):
    """vLLM mode: the pool as vLLM 0.33.0's ``BlockPool`` keeps it (the module docstring).

    What changes against the chapter's pool, each in one place below:

    - duplicates are cached too (``keeps_duplicates``: ``BlockHashToBlockMap`` in
      ``vllm/v1/core/block_pool.py``);
    - vLLM's free order (``uncached_first``: ``BlockPool.free_blocks``);
    - the key of a block, ``(parent or NONE_HASH, tokens, extra keys or None)``, with vLLM's
      tagged extra keys and hash functions (:meth:`_chain`: ``vllm/v1/core/kv_cache_utils.py::hash_block_tokens``,
      ``generate_block_hash_extra_keys``; ``hash_algo`` default ``"sha256"``, vLLM's default);
    - KV events as vLLM publishes them (:meth:`event_hash`, :meth:`_emit_stored`,
      :meth:`_emit_removed`: ``maybe_convert_block_hash``, ``to_event_extra_keys``, one
      ``BlockRemoved`` per evicted block).

    ``int_event_hashes`` is vLLM's ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`` (on by default there):
    events carry the low 64 bits of each hash as an int; False publishes the digests.
    """

    vllm = True
    keeps_duplicates = True

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        hash_algo: HashAlgo | HashFunction | None = None,
        int_event_hashes: bool = True,
        vllm: bool = True,
    ) -> None:
        if not vllm:
            raise ValueError("VllmPrefixCachingBlockPool is vLLM mode; use PrefixCachingBlockPool for the chapter's pool")
        super().__init__(num_blocks, block_size, hash_algo="sha256" if hash_algo is None else hash_algo,
                         uncached_first=True)
        self.none_hash = none_hash(self.hash_algo)
        self.int_event_hashes = int_event_hashes

    def _chain(
        self,
        token_ids: Sequence[int],
        end: int,
        extra: ExtraKeys,
        first_block: int = 0,
        parent: Hashable | None = None,
    ) -> Iterator[tuple[int, Hashable, tuple[int, ...], tuple | None]]:
        """``vllm/v1/core/kv_cache_utils.py::hash_block_tokens``: ``hash((parent or NONE_HASH, tokens, keys or None))``."""
        size, has_extra = self.block_size, bool(extra)
        for i in range(first_block, end // size):
            start = i * size
            tokens = tuple(token_ids[start:start + size])
            keys = vllm_block_extra_keys(extra, start, start + size) if has_extra else None
            parent = self._hash((self.none_hash if parent is None else parent, tokens, keys))
            yield i, parent, tokens, keys

    def event_hash(self, h: Hashable) -> Hashable:
        """``vllm/v1/core/kv_cache_utils.py::maybe_convert_block_hash``: the low 64 bits of a digest, as an int."""
        if self.int_event_hashes and isinstance(h, bytes):
            return int.from_bytes(h, "big") & 0xFFFF_FFFF_FFFF_FFFF
        return h

    def _emit_stored(self, run: list, parent_hash: Hashable | None, extra: ExtraKeys) -> None:
        """``BlockPool.cache_full_blocks``' event: hashes converted, extra keys untagged; ``group_idx``
        (``_build_block_stored_event``) and ``kv_cache_spec_kind`` (``take_events``) as vLLM 0.33 writes them."""
        if run and self._subscribers:
            self._emit(BlockStored(
                block_hashes=[self.event_hash(h) for h, _, _ in run],
                parent_block_hash=None if parent_hash is None else self.event_hash(parent_hash),
                token_ids=[t for _, tokens, _ in run for t in tokens],
                block_size=self.block_size,
                lora_id=extra.lora_id,
                extra_keys=[untagged_extra_keys(keys) for _, _, keys in run],
                lora_name=None if extra.lora_id is None else lora_name_and_path(extra.lora_id)[0],
                group_idx=FULL_ATTENTION_GROUP,
                kv_cache_spec_kind=FULL_ATTENTION_KIND,
            ))

    def _emit_removed(self, hashes: list[Hashable]) -> None:
        """``BlockPool._emit_block_removed_events``: one ``BlockRemoved`` per evicted block, with ``group_idx``."""
        for h in hashes:
            self._emit(BlockRemoved([self.event_hash(h)], group_idx=FULL_ATTENTION_GROUP))
