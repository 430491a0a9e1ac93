"""``LLMEngine(model, cache="vllm")``'s cache path against vLLM 0.33.0's own, operation by operation.

The reference below is a transcription of what vLLM 0.33.0 runs for one full-attention KV cache
group with prefix caching and KV events on (no speculative decoding, no KV connector, no
watermark, ``hash_block_size == block_size``), read from the released wheel:

* ``vllm/v1/core/kv_cache_utils.py``: ``resolve_none_hash_seed``, ``init_none_hash``,
  ``hash_block_tokens``, ``generate_block_hash_extra_keys`` (LoRA and salt), ``to_event_extra_keys``,
  ``maybe_convert_block_hash``, ``KVCacheBlock``, ``FreeKVCacheBlockQueue``;
* ``vllm/v1/core/block_pool.py``: ``BlockHashToBlockMap``, ``BlockPool`` (``get_cached_block``,
  ``cache_full_blocks``, ``get_new_blocks``, ``_maybe_evict_cached_block``, ``touch``,
  ``free_blocks``; block 0 is the null block);
* ``vllm/v1/core/kv_cache_manager.py`` ``KVCacheManager.get_computed_blocks`` / ``allocate_slots``
  / ``free``, with ``vllm/v1/core/single_type_kv_cache_manager.py``'s ``get_num_blocks_to_allocate``,
  ``add_local_computed_blocks``, ``allocate_new_blocks``, ``cache_blocks``, ``free`` and
  ``FullAttentionManager.find_longest_cache_hit``;
* ``vllm/v1/core/sched/scheduler.py`` ``Scheduler.schedule``: a running request that cannot get
  its blocks preempts ``running[-1]`` (``_preempt_request``: free, ``num_computed_tokens = 0``,
  back to the front of the waiting queue) until it fits or is itself preempted; a waiting request
  that does not fit stops admission.

The code is ours, written from reading theirs; vLLM is not a dependency. Its hashes are computed
here from vLLM's formula with ``hashlib`` and ``pickle`` directly (not through
``nano_engine.hashing``), and ``test_vllm_prefix_caching`` checks them against digests computed by
vLLM's own ``vllm.utils.hashing``.

Our side is the engine's: a :class:`~nano_engine.scheduler.Scheduler` over
``HashedBlockCacheManager(PrefixCachingBlockPool(..., vllm=True))``, driven through the
scheduler's own methods (``_admit``, ``_make_room``, ``_preempt``, ``finish``), with a fake
forward that only advances the counters. After every operation the two must agree on the free
queue's order, reference counts, every request's block table, the hash -> blocks map (what a
lookup is served), the hits and the published KV events.

Sizes: hypothesis draws 300 random sequences of 20-80 operations (about 12,000 operations a run),
and a fixed-seed loop runs 200 more sequences of 150 operations (30,000). Pools have 3-10 blocks
of 1, 2 or 4 tokens; prompts of up to half the pool are built from three shared prefixes and a
3-token alphabet, with a salt or a LoRA adapter now and then, so hits, duplicate blocks, failed
admissions and preemptions are all common (the fixed-seed test checks that each happened).
Planting any one of the four divergences this mode had (admission touching its hits first, our
own ``NONE_HASH`` seed, digests in events, our own extra-key tags) fails the fixed-seed test.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import random
from dataclasses import dataclass, field

from hypothesis import given, settings, strategies as st

from nano_engine.cache_manager import HashedBlockCacheManager
from nano_engine.kv_events import BlockRemoved, BlockStored
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.sampling import SamplingParams
from nano_engine.scheduler import Scheduler, SchedulerOutput
from nano_engine.sequence import Sequence, Status

# ----------------------------------------------------------------------------------------------
# vLLM 0.33.0, transcribed (one KV cache group, id 0)
# ----------------------------------------------------------------------------------------------


def vllm_sha256(obj) -> bytes:
    """``vllm.utils.hashing.sha256``."""
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def resolve_none_hash_seed() -> str:
    """``kv_cache_utils.resolve_none_hash_seed`` for sha256 (a cryptographic function)."""
    seed = os.getenv("PYTHONHASHSEED")
    return seed if seed is not None else "vllm-none-hash"


def hash_block_tokens(none_hash: bytes, parent: bytes | None, tokens, extra_keys) -> bytes:
    """``kv_cache_utils.hash_block_tokens``."""
    if not parent:
        parent = none_hash
    return vllm_sha256((parent, tuple(tokens), extra_keys))


def maybe_convert_block_hash(h: bytes) -> int:
    """``kv_cache_utils.maybe_convert_block_hash`` with ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1``."""
    return int.from_bytes(h, byteorder="big") & ((1 << 64) - 1)


def to_event_extra_keys(extra_keys_list):
    """``kv_cache_utils.to_event_extra_keys``."""
    if not extra_keys_list:
        return None
    return [None if keys is None else tuple(k[1:] if k[0] == "mm" else k[1] for k in keys)
            for keys in extra_keys_list] or None


@dataclass
class VRequest:
    """What vLLM's ``Request`` carries that the cache reads."""

    request_id: int
    all_token_ids: list[int]
    lora: tuple[str, str] | None
    cache_salt: str | None
    none_hash: bytes
    block_size: int
    num_computed_tokens: int = 0

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    def extra_keys(self, start: int) -> tuple | None:
        """``generate_block_hash_extra_keys`` (no multimodal inputs, no prompt embeddings)."""
        keys: list = [("lora", *self.lora)] if self.lora else []
        if start == 0 and self.cache_salt:
            keys.append(("cache_salt", self.cache_salt))
        return tuple(keys) if keys else None

    @property
    def block_hashes(self) -> list[bytes]:
        """``get_request_block_hasher``'s hashes: one per full block of all tokens so far."""
        out, parent, bs = [], None, self.block_size
        for start in range(0, self.num_tokens - bs + 1, bs):
            parent = hash_block_tokens(self.none_hash, parent, self.all_token_ids[start:start + bs],
                                       self.extra_keys(start))
            out.append(parent)
        return out


@dataclass(eq=False)
class KVCacheBlock:
    block_id: int
    ref_cnt: int = 0
    block_hash: bytes | None = None         # BlockHashWithGroupId: hash + group id (4 bytes)
    prev_free_block: KVCacheBlock | None = None
    next_free_block: KVCacheBlock | None = None
    is_null: bool = False


class FreeKVCacheBlockQueue:
    """A doubly linked list with fake head and tail."""

    def __init__(self, blocks: list[KVCacheBlock]) -> None:
        self.num_free_blocks = len(blocks)
        self.head, self.tail = KVCacheBlock(-1), KVCacheBlock(-1)
        chain = [self.head, *blocks, self.tail]
        for a, b in zip(chain, chain[1:]):
            a.next_free_block, b.prev_free_block = b, a

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        assert self.num_free_blocks >= n
        out = []
        for _ in range(n):
            block = self.head.next_free_block
            assert block is not None and block is not self.tail
            self.remove(block)
            out.append(block)
        return out

    def remove(self, block: KVCacheBlock) -> None:
        prev, nxt = block.prev_free_block, block.next_free_block
        assert prev is not None and nxt is not None, "remove() called on a block not in the queue"
        prev.next_free_block, nxt.prev_free_block = nxt, prev
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1

    def _insert_after(self, anchor: KVCacheBlock, blocks: list[KVCacheBlock]) -> None:
        after = anchor.next_free_block
        assert after is not None
        for block in blocks:
            anchor.next_free_block, block.prev_free_block = block, anchor
            anchor = block
        anchor.next_free_block, after.prev_free_block = after, anchor
        self.num_free_blocks += len(blocks)

    def prepend_n(self, blocks: list[KVCacheBlock]) -> None:
        self._insert_after(self.head, blocks)

    def append_n(self, blocks: list[KVCacheBlock]) -> None:
        last = self.tail.prev_free_block
        assert last is not None
        self._insert_after(last, blocks)

    def get_all_free_blocks(self) -> list[KVCacheBlock]:
        out, block = [], self.head.next_free_block
        while block is not None and block is not self.tail:
            out.append(block)
            block = block.next_free_block
        return out


class BlockHashToBlockMap:
    """hash -> one block, or a dict ``{block_id: block}`` once a second block caches it."""

    def __init__(self) -> None:
        self._cache: dict[bytes, KVCacheBlock | dict[int, KVCacheBlock]] = {}

    def get_one_block(self, key: bytes) -> KVCacheBlock | None:
        blocks = self._cache.get(key)
        if isinstance(blocks, dict):
            return next(iter(blocks.values()))
        return blocks

    def insert(self, key: bytes, block: KVCacheBlock) -> None:
        blocks = self._cache.get(key)
        if blocks is None:
            self._cache[key] = block
        elif isinstance(blocks, KVCacheBlock):
            self._cache[key] = {blocks.block_id: blocks, block.block_id: block}
        else:
            blocks[block.block_id] = block

    def pop(self, key: bytes, block_id: int) -> KVCacheBlock | None:
        blocks = self._cache.pop(key, None)
        if blocks is None:
            return None
        if isinstance(blocks, KVCacheBlock):
            if blocks.block_id == block_id:
                return blocks
            self._cache[key] = blocks
            return None
        block = blocks.pop(block_id, None)
        if blocks:
            self._cache[key] = blocks
        return block

    def block_ids(self) -> dict[bytes, list[int]]:
        return {key[:-4]: [b.block_id for b in (v.values() if isinstance(v, dict) else [v])]
                for key, v in self._cache.items()}


class VllmBlockPool:
    def __init__(self, num_gpu_blocks: int, block_size: int) -> None:
        self.block_size = block_size
        self.blocks = [KVCacheBlock(i) for i in range(num_gpu_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        self.cached_block_hash_to_block = BlockHashToBlockMap()
        self.null_block = self.free_block_queue.popleft_n(1)[0]
        self.null_block.is_null = True
        self.kv_event_queue: list[tuple] = []

    def get_cached_block(self, block_hash: bytes) -> KVCacheBlock | None:
        return self.cached_block_hash_to_block.get_one_block(block_hash + (0).to_bytes(4, "big"))

    def cache_full_blocks(self, request: VRequest, blocks: list[KVCacheBlock], num_cached_blocks: int,
                          num_full_blocks: int) -> None:
        if num_cached_blocks >= num_full_blocks:
            return
        block_hashes = request.block_hashes
        new_hashes = []
        for i, blk in enumerate(blocks[num_cached_blocks:num_full_blocks]):
            block_hash = block_hashes[num_cached_blocks + i]
            key = block_hash + (0).to_bytes(4, "big")
            assert blk.block_hash is None      # no partial blocks with one group at hash_block_size
            blk.block_hash = key
            self.cached_block_hash_to_block.insert(key, blk)
            new_hashes.append(maybe_convert_block_hash(block_hash))
        parent = None if num_cached_blocks == 0 else maybe_convert_block_hash(block_hashes[num_cached_blocks - 1])
        bs = self.block_size
        extra = [request.extra_keys(i * bs) for i in range(num_cached_blocks, num_full_blocks)]
        self.kv_event_queue.append((
            "stored", new_hashes, parent, request.all_token_ids[num_cached_blocks * bs:num_full_blocks * bs],
            bs, request.lora[0] if request.lora else None, to_event_extra_keys(extra)))

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        if num_blocks > self.free_block_queue.num_free_blocks:
            raise ValueError(f"Cannot get {num_blocks} free blocks from the pool")
        ret = self.free_block_queue.popleft_n(num_blocks)
        for block in ret:
            self._maybe_evict_cached_block(block)
            assert block.ref_cnt == 0
            block.ref_cnt += 1
        return ret

    def _maybe_evict_cached_block(self, block: KVCacheBlock) -> None:
        if block.block_hash is None:
            return
        if self.cached_block_hash_to_block.pop(block.block_hash, block.block_id) is not None:
            self.kv_event_queue.append(("removed", [maybe_convert_block_hash(block.block_hash[:-4])]))
        block.block_hash = None

    def touch(self, blocks: list[KVCacheBlock]) -> None:
        for block in blocks:
            if block.ref_cnt == 0:
                self.free_block_queue.remove(block)
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks) -> None:
        evict_last, evict_first = [], []
        for block in ordered_blocks:
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                (evict_first if block.block_hash is None else evict_last).append(block)
        self.free_block_queue.prepend_n(evict_first)
        self.free_block_queue.append_n(evict_last)


class VllmKVCacheManager:
    """``KVCacheManager`` over one ``FullAttentionManager``."""

    def __init__(self, num_gpu_blocks: int, block_size: int) -> None:
        self.block_size = block_size
        self.block_pool = VllmBlockPool(num_gpu_blocks, block_size)
        self.req_to_blocks: dict[int, list[KVCacheBlock]] = {}
        self.num_cached_block: dict[int, int] = {}

    def get_computed_blocks(self, request: VRequest) -> tuple[list[KVCacheBlock], int]:
        max_length = request.num_tokens - 1
        hits = []
        for block_hash in request.block_hashes[:max_length // self.block_size]:
            block = self.block_pool.get_cached_block(block_hash)
            if block is None:
                break
            hits.append(block)
        return hits, len(hits) * self.block_size

    def allocate_slots(self, request: VRequest, num_new_tokens: int, num_new_computed_tokens: int = 0,
                       new_computed_blocks: list[KVCacheBlock] | None = None) -> list[KVCacheBlock] | None:
        new_computed_blocks = new_computed_blocks or []
        total_computed_tokens = request.num_computed_tokens + num_new_computed_tokens
        num_tokens_need_slot = total_computed_tokens + num_new_tokens
        # SingleTypeKVCacheManager.get_num_blocks_to_allocate
        num_required = -(-num_tokens_need_slot // self.block_size)
        num_req_blocks = len(self.req_to_blocks.get(request.request_id, ()))
        if request.request_id in self.num_cached_block:
            num_blocks_to_allocate = max(num_required - num_req_blocks, 0)
        else:
            num_new = max(num_required - (len(new_computed_blocks) + num_req_blocks), 0)
            num_evictable = sum(b.ref_cnt == 0 and not b.is_null for b in new_computed_blocks)
            num_blocks_to_allocate = num_new + num_evictable
        if num_blocks_to_allocate > self.block_pool.free_block_queue.num_free_blocks:
            return None
        req_blocks = self.req_to_blocks.setdefault(request.request_id, [])
        if new_computed_blocks:       # add_local_computed_blocks
            assert not req_blocks
            self.block_pool.touch(new_computed_blocks)
            req_blocks.extend(new_computed_blocks)
            self.num_cached_block[request.request_id] = len(req_blocks)
        num_new_blocks = num_required - len(req_blocks)     # allocate_new_blocks
        new_blocks = self.block_pool.get_new_blocks(num_new_blocks) if num_new_blocks > 0 else []
        req_blocks.extend(new_blocks)
        self.cache_blocks(request, min(total_computed_tokens + num_new_tokens, request.num_tokens))
        return new_blocks

    def cache_blocks(self, request: VRequest, num_tokens: int) -> None:
        num_cached = self.num_cached_block.get(request.request_id, 0)
        num_full = min(num_tokens, len(request.block_hashes) * self.block_size) // self.block_size
        if num_cached >= num_full:
            return
        self.block_pool.cache_full_blocks(request, self.req_to_blocks[request.request_id], num_cached, num_full)
        self.num_cached_block[request.request_id] = num_full

    def free(self, request: VRequest) -> None:
        blocks = self.req_to_blocks.pop(request.request_id, [])
        self.num_cached_block.pop(request.request_id, None)
        self.block_pool.free_blocks(reversed(blocks))

    def take_events(self) -> list[tuple]:
        events, self.block_pool.kv_event_queue = self.block_pool.kv_event_queue, []
        return events


# ----------------------------------------------------------------------------------------------
# The two sides, driven together
# ----------------------------------------------------------------------------------------------

PREFIXES = [[0, 1, 2, 0, 1, 2, 0, 1], [2, 2, 1, 1, 0, 0], [1, 0]]
EXTRA = [{}, {"cache_salt": "tenant-a"}, {"lora_id": ("adapter", "/adapters/a")}]


def our_event(e) -> tuple:
    if isinstance(e, BlockStored):
        return ("stored", e.block_hashes, e.parent_block_hash, e.token_ids, e.block_size, e.lora_name, e.extra_keys)
    assert isinstance(e, BlockRemoved)
    return ("removed", e.block_hashes)


@dataclass
class Pair:
    """One request on both sides."""

    seq: Sequence
    req: VRequest


@dataclass
class Sides:
    num_blocks: int
    block_size: int
    pool: PrefixCachingBlockPool = field(init=False)
    sched: Scheduler = field(init=False)
    vllm: VllmKVCacheManager = field(init=False)
    events: list = field(default_factory=list)
    pairs: dict[int, Pair] = field(default_factory=dict)
    waiting: list[Pair] = field(default_factory=list)   # vLLM's queues, kept beside the scheduler's
    running: list[Pair] = field(default_factory=list)
    ops: int = 0

    def __post_init__(self) -> None:
        self.pool = PrefixCachingBlockPool(self.num_blocks, self.block_size, vllm=True)
        self.pool.subscribe(lambda e: self.events.append(our_event(e)))
        self.sched = Scheduler(HashedBlockCacheManager(self.pool))
        self.vllm = VllmKVCacheManager(self.num_blocks + 1, self.block_size)   # + vLLM's null block 0
        self.none_hash = vllm_sha256(resolve_none_hash_seed())

    def ids(self, blocks) -> list[int]:
        return [b.block_id - 1 for b in blocks]

    # -- operations ---------------------------------------------------------------------------

    def add(self, rng: random.Random) -> None:
        length = rng.randint(1, max(1, self.num_blocks * self.block_size // 2))   # fits beside others
        prefix = rng.choice(PREFIXES)[:rng.randint(0, length)]
        prompt = prefix + [rng.randrange(3) for _ in range(length - len(prefix))]
        extra = rng.choice(EXTRA)
        rid = len(self.pairs)
        seq = Sequence(rid, prompt, SamplingParams(max_tokens=10**6, **extra))
        req = VRequest(rid, list(prompt), extra.get("lora_id"), extra.get("cache_salt"), self.none_hash, self.block_size)
        pair = self.pairs[rid] = Pair(seq, req)
        self.sched.add(seq)
        self.waiting.append(pair)

    def admit(self, budget: int) -> None:
        """Step 3 of ``Scheduler.schedule``: waiting requests in FCFS order while the budget lasts,
        each through ``Scheduler._admit`` against ``get_computed_blocks`` + ``allocate_slots``;
        the first that does not fit stops admission (as in both schedulers)."""
        while self.waiting and budget > 0:
            pair = self.waiting[0]
            assert self.sched.waiting[0] is pair.seq
            hits, num_hit_tokens = self.vllm.get_computed_blocks(pair.req)
            assert self.pool.peek(pair.seq.token_ids, max_tokens=pair.seq.num_tokens - 1, **pair.seq.extra_keys) \
                == self.ids(hits), "different hits"
            num_new = min(pair.req.num_tokens - num_hit_tokens, budget)
            new = self.vllm.allocate_slots(pair.req, num_new, num_hit_tokens, hits)
            n = self.sched._admit(pair.seq, budget)
            assert (n > 0) == (new is not None), f"admission: ours {n}, vLLM {new}"
            if new is None:
                return
            assert n == num_new and pair.seq.num_computed_tokens == num_hit_tokens
            self.waiting.pop(0)
            self.running.append(pair)
            pair.req.num_computed_tokens = num_hit_tokens
            self.forward(pair, n)
            budget -= n

    def run(self, pair: Pair, budget: int) -> None:
        """A running request's next chunk: ``Scheduler._make_room`` (preempting the latest admitted
        until it fits) against vLLM's ``allocate_slots`` / ``running[-1]`` loop."""
        n = min(pair.seq.num_remaining, budget)
        assert n == min(pair.req.num_tokens - pair.req.num_computed_tokens, budget)
        out = SchedulerOutput()
        ok = self.sched._make_room(pair.seq, n, out)
        preempted = []
        while self.vllm.allocate_slots(pair.req, n) is None:
            victim = self.running.pop()
            self.vllm_preempt(victim)
            preempted.append(victim)
            if victim is pair:
                break
        assert [p.seq for p in preempted] == out.preempted, "different preemptions"
        assert ok == (pair not in preempted)
        if ok:
            self.forward(pair, n)

    def forward(self, pair: Pair, n: int) -> None:
        """The fake forward: the counters advance; a finished prefill or decode samples a token."""
        pair.seq.num_computed_tokens += n
        pair.req.num_computed_tokens += n
        if pair.seq.num_remaining == 0:
            token = (pair.seq.num_tokens * 7 + pair.seq.request_id) % 3
            pair.seq.append_token(token, now=0.0)
            pair.req.all_token_ids.append(token)

    def vllm_preempt(self, pair: Pair) -> None:
        self.vllm.free(pair.req)
        pair.req.num_computed_tokens = 0
        self.waiting.insert(0, pair)

    def preempt(self, pair: Pair) -> None:
        self.sched._preempt(pair.seq)
        self.running.remove(pair)
        self.vllm_preempt(pair)

    def finish(self, pair: Pair) -> None:
        pair.seq.status = Status.FINISHED
        self.sched.finish(pair.seq)
        self.running.remove(pair)
        self.vllm.free(pair.req)

    def step(self, op: int, arg: int) -> None:
        rng = random.Random(arg)
        if op == 0 or not self.pairs:
            self.add(rng)
        elif op == 1:
            self.admit(budget=1 + arg % (4 * self.block_size))
        elif self.running and op == 2:
            self.run(self.running[arg % len(self.running)], budget=1 + arg % (3 * self.block_size))
        elif self.running and op == 3:
            self.finish(self.running[arg % len(self.running)])
        elif self.running and op == 4:
            self.preempt(self.running[arg % len(self.running)])
        self.ops += 1
        self.compare()

    # -- the comparison -----------------------------------------------------------------------

    def compare(self) -> None:
        v = self.vllm.block_pool
        assert list(self.pool.free_queue) == self.ids(v.free_block_queue.get_all_free_blocks()), "free queue"
        assert self.pool.ref_cnt == [b.ref_cnt for b in v.blocks[1:]], "reference counts"
        for pair in self.pairs.values():
            assert pair.seq.block_table == self.ids(self.vllm.req_to_blocks.get(pair.req.request_id, [])), "block table"
        assert {h: list(blocks) for h, blocks in self.pool.hash_to_blocks.items()} == \
            {h: [b - 1 for b in ids] for h, ids in v.cached_block_hash_to_block.block_ids().items()}, "cached hashes"
        assert self.events == self.vllm.take_events(), "KV events"
        self.events.clear()
        assert [p.seq for p in self.waiting] == list(self.sched.waiting)
        assert [p.seq for p in self.running] == self.sched.running
        self.pool.check_invariants()


WEIGHTED_OPS = [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 4]   # add, admit, run, finish, preempt
OPS = st.lists(st.tuples(st.sampled_from(WEIGHTED_OPS), st.integers(0, 2**16)), min_size=20, max_size=80)


@settings(max_examples=300, deadline=None)
@given(num_blocks=st.integers(3, 10), block_size=st.sampled_from([1, 2, 4]), ops=OPS)
def test_vllm_mode_matches_vllm_op_for_op(num_blocks, block_size, ops):
    sides = Sides(num_blocks, block_size)
    for op, arg in ops:
        sides.step(op, arg)


def test_vllm_mode_matches_vllm_on_long_random_runs():
    """200 fixed-seed sequences of 150 operations, longer than hypothesis draws."""
    kinds = {"failed admissions": 0, "hits": 0, "preemptions": 0, "duplicate hashes": 0}
    for seed in range(200):
        rng = random.Random(seed)
        sides = Sides(rng.randint(3, 10), rng.choice([1, 2, 4]))
        for _ in range(150):
            waiting_before = len(sides.waiting)
            op = rng.choice(WEIGHTED_OPS)
            sides.step(op, rng.randrange(2**16))
            if op == 1 and waiting_before and len(sides.waiting) == waiting_before:
                kinds["failed admissions"] += 1
            kinds["duplicate hashes"] += any(len(g) > 1 for g in sides.pool.hash_to_blocks.values())
        kinds["hits"] += sides.pool.num_hits > 0
        kinds["preemptions"] += sum(p.seq.metrics.num_preemptions for p in sides.pairs.values())
    assert all(kinds.values()), f"the random runs never exercised something: {kinds}"
