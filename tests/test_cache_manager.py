"""The cache managers behind one interface: none, hashed blocks (vLLM), radix tree (SGLang).

Unit tests drive a manager by hand with a *fake KV store*: every slot remembers which prefix
wrote it (a token's KV is a function of all tokens up to it). A manager is correct if every
reused or still-running position always reads the KV of exactly its own prefix: nothing a running
request uses is ever evicted or handed to someone else, and no hit serves another prefix's KV.
The engine tests at the end run the real model through the three managers.
"""

import copy
import itertools

import pytest
import torch
from engine_helpers import total
from hypothesis import given, settings, strategies as st

from nano_engine.cache_manager import HashedBlockCacheManager, NaiveCacheManager, RadixCacheManager
from nano_engine.model import generate
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.sampling import SamplingParams
from nano_engine.sequence import Sequence


def make_manager(kind: str, num_blocks: int, block_size: int):
    if kind == "none":
        return NaiveCacheManager(num_blocks, block_size)
    if kind in ("hashed", "vllm"):
        return HashedBlockCacheManager(PrefixCachingBlockPool(num_blocks, block_size, vllm=kind == "vllm"))
    return RadixCacheManager(num_blocks, block_size)


class Harness:
    """Drives a manager the way the scheduler and engine do, checking a fake KV store."""

    def __init__(self, cache):
        self.cache, self.bs = cache, cache.block_size
        self.kv: dict[int, tuple] = {}           # slot -> (namespace, prefix) whose KV it holds
        self.running: list[Sequence] = []
        self.ids = itertools.count()
        self.hits = 0

    def slot(self, seq: Sequence, pos: int) -> int:
        return seq.block_table[pos // self.bs] * self.bs + pos % self.bs

    def expected(self, seq: Sequence, pos: int) -> tuple:
        return (seq.params.cache_salt, tuple(seq.token_ids[:pos + 1]))

    def admit(self, tokens: list[int], salt=None, chunk: int = 10**6, max_tokens: int = 4) -> Sequence | None:
        seq = Sequence(next(self.ids), tokens, SamplingParams(max_tokens=max_tokens, cache_salt=salt))
        match = self.cache.match(seq)
        assert match.num_tokens <= len(tokens) - 1 and match.num_tokens % self.bs == 0
        num_tokens = match.num_tokens + min(chunk, len(tokens) - match.num_tokens)
        if not self.cache.can_admit(match, num_tokens):   # asked before lock, as the scheduler does
            trial_cache, trial_seq = copy.deepcopy((self.cache, seq))
            trial_cache.lock(trial_seq, copy.deepcopy(match))
            assert not trial_cache.allocate(trial_seq, num_tokens), "can_admit refused a request that fits"
            return None
        self.cache.lock(seq, match)
        for pos in range(match.num_tokens):      # a hit must hold exactly this prefix's KV
            assert self.kv[self.slot(seq, pos)] == self.expected(seq, pos), "a hit served the wrong KV"
        self.hits += match.num_tokens
        if not self.cache.allocate(seq, seq.num_computed_tokens + min(chunk, seq.num_remaining)):
            assert not isinstance(self.cache, HashedBlockCacheManager), "can_admit let in a request that does not fit"
            self.cache.free(seq)
            return None
        self.running.append(seq)
        self.compute(seq, chunk)
        return seq

    def compute(self, seq: Sequence, n: int) -> None:
        n = min(n, seq.num_remaining)
        start = seq.num_computed_tokens
        if not self.cache.allocate(seq, start + n):
            self.finish(seq)                      # preemption: release everything
            return
        others = {self.slot(o, p) for o in self.running if o is not seq for p in range(o.num_computed_tokens)}
        for pos in range(start, start + n):
            slot = self.slot(seq, pos)
            assert slot not in others, f"slot {slot} is written while another request reads it"
            self.kv[slot] = self.expected(seq, pos)
        seq.num_computed_tokens += n
        self.cache.cache(seq, n)
        if seq.num_remaining == 0:               # "sample": a token that depends on the prefix only
            seq.append_token(hash(tuple(seq.token_ids)) % 3, now=0.0)
            if seq.is_finished:
                self.finish(seq)

    def run(self, seq: Sequence) -> None:
        """Compute (and decode) until the request finishes or is preempted."""
        while seq in self.running:
            self.compute(seq, 10**6)

    def finish(self, seq: Sequence) -> None:
        self.cache.free(seq)
        self.running.remove(seq)

    def check(self) -> None:
        info = self.cache.size_info()
        assert info.free + info.evictable + info.protected == info.capacity
        assert min(info.free, info.evictable, info.protected) >= 0
        for seq in self.running:
            for pos in range(seq.num_computed_tokens):
                assert self.kv[self.slot(seq, pos)] == self.expected(seq, pos), (
                    f"request {seq.request_id}: KV of position {pos} was overwritten")

    def drain(self) -> None:
        for seq in list(self.running):
            self.finish(seq)
        self.cache.check_no_leaks()
        info = self.cache.size_info()
        assert info.free + info.evictable == info.capacity and info.protected == 0


BASES = [[1, 2, 1, 2, 0, 1, 1, 0, 2, 2, 0, 1], [1, 2, 1, 2, 0, 2, 2, 2], [2, 0, 0, 1, 2, 1, 0, 0, 0, 1]]
op = st.one_of(
    st.tuples(st.just("admit"), st.integers(0, len(BASES) - 1), st.integers(1, 12), st.integers(0, 9),
              st.sampled_from([None, None, "tenant-b"]), st.integers(1, 9)),
    st.tuples(st.just("compute"), st.integers(0, 7), st.integers(1, 6)),
    st.tuples(st.just("finish"), st.integers(0, 7)),
)


@settings(max_examples=120, deadline=None)
@given(kind=st.sampled_from(["none", "hashed", "vllm", "radix"]), block_size=st.sampled_from([1, 2, 4]),
       num_blocks=st.integers(6, 16), ops=st.lists(op, max_size=40))
def test_random_operations_never_serve_or_overwrite_wrong_kv(kind, block_size, num_blocks, ops):
    h = Harness(make_manager(kind, num_blocks, block_size))
    for o in ops:
        if o[0] == "admit":
            _, base, cut, extra, salt, chunk = o
            tokens = BASES[base][:cut] + [extra % 3] * (extra % 4) + [extra]
            if h.cache.blocks_needed(len(tokens) + 3) <= num_blocks:
                h.admit(tokens, salt, chunk)
        elif h.running:
            seq = h.running[o[1] % len(h.running)]
            if o[0] == "compute":
                h.compute(seq, o[2])
            else:
                h.finish(seq)
        h.check()
    h.drain()
    if kind == "none":
        assert h.hits == 0


@pytest.mark.parametrize("kind", ["hashed", "radix"])
def test_match_never_covers_the_last_token(kind):
    h = Harness(make_manager(kind, 16, 4))
    tokens = list(range(12))                       # three full blocks
    h.admit(tokens)
    h.drain()
    again = Sequence(99, tokens, SamplingParams())
    match = h.cache.match(again)
    assert match.num_tokens == 8                   # 11 tokens may hit: two whole blocks
    longer = Sequence(100, tokens + [5], SamplingParams())
    assert h.cache.match(longer).num_tokens == 12
    assert h.cache.peek(longer) == 12


def test_hashed_manager_counts_like_the_chapter():
    """``match`` queries num_tokens - 1 tokens and counts whole-block hits, as ``lookup(prompt[:-1])``."""
    pool = PrefixCachingBlockPool(16, 4)
    h = Harness(HashedBlockCacheManager(pool))
    h.admit(list(range(10)))
    assert (pool.num_queries, pool.num_hits) == (9, 0)
    h.admit(list(range(9)) + [50, 51])
    assert (pool.num_queries, pool.num_hits) == (19, 8)
    h.drain()
    assert all(c == 0 for c in pool.ref_cnt)


def test_hashed_manager_isolates_tenants_and_adapters():
    pool = PrefixCachingBlockPool(32, 4)
    cache = HashedBlockCacheManager(pool)
    tokens = list(range(13))

    def hit(**keys):
        seq = Sequence(0, tokens, SamplingParams(**keys))
        return cache.peek(seq), cache.match(seq).num_tokens

    h = Harness(cache)
    seq = Sequence(1, tokens, SamplingParams(max_tokens=1, cache_salt="a", lora_id="l1"))
    cache.lock(seq, cache.match(seq))
    cache.allocate(seq, 13)
    seq.num_computed_tokens = 13
    cache.cache(seq, 13)
    cache.free(seq)
    assert hit(cache_salt="a", lora_id="l1") == (12, 12)
    assert hit(cache_salt="b", lora_id="l1") == (0, 0)
    assert hit(cache_salt="a", lora_id="l2") == (0, 0)
    assert hit() == (0, 0)
    h.drain()


def test_radix_evicts_before_failing_and_frees_whole_pages():
    cache = RadixCacheManager(8, 4)               # 32 slots
    h = Harness(cache)
    h.run(h.admit(list(range(14))))               # 14 + 3 computed tokens: 4 pages stay in the tree
    h.run(h.admit(list(range(100, 109))))         # 9 + 3: 3 more pages
    info = cache.size_info()
    assert (info.free, info.evictable, info.protected) == (4, 28, 0)
    assert cache.tree.evictable_size == 28
    seq = h.admit(list(range(200, 222)), chunk=4)  # 1 page free: the first chunk fits ...
    assert seq is not None and cache.tree.protected_size == 4   # ... and is in the tree already
    h.compute(seq, 100)                           # 18 more tokens: eviction, not failure
    assert seq in h.running and seq.num_computed_tokens == 22
    assert cache.tree.total_size() % 4 == 0 and cache.tree.evictable_size < 28
    assert cache.tree.total_size() % 4 == 0
    pages_in_tree = {s // 4 for node in cache.tree.nodes() for s in node.value}
    shared = seq.cache_handle.num_tokens // 4          # its prompt pages are in the tree, locked
    assert set(seq.block_table[:shared]) <= pages_in_tree and cache.tree.protected_size == shared * 4
    private = set(seq.block_table[shared:])
    assert not pages_in_tree & private, "a running request got a page the tree still holds"
    assert not set(cache.pool.free_queue) & (pages_in_tree | private)
    h.drain()


def test_radix_lock_protects_a_match_from_eviction():
    """After ``lock``, the matched prefix is protected: an allocation that would need it fails
    instead of evicting it (the scheduler then waits or preempts)."""
    cache = RadixCacheManager(6, 2)
    h = Harness(cache)
    h.admit(list(range(9)), max_tokens=1)         # finishes at once; 8 tokens = 4 pages in the tree
    seq = Sequence(7, list(range(8)) + [77], SamplingParams())
    match = cache.match(seq)
    assert match.num_tokens == 8
    cache.lock(seq, match)
    assert cache.size_info().evictable == 0 and cache.tree.protected_size == 8
    assert not cache.allocate(seq, 8 + 6)         # 1 page more than the 2 free: nothing to evict
    assert cache.tree.total_size() == 8 and seq.block_table == match.blocks
    assert cache.allocate(seq, 8 + 4)
    cache.free(seq)
    h.drain()


def test_radix_finished_duplicates_and_tail_are_freed():
    """Two requests compute the same prompt at once: when both finish, the tree keeps one copy
    of the page-aligned part; the second copy and the unaligned tails go back to the pool."""
    cache = RadixCacheManager(16, 4)
    h = Harness(cache)
    a = h.admit(list(range(10)), chunk=1)
    b = h.admit(list(range(10)), chunk=1)
    for _ in range(9):
        h.compute(a, 1)
        h.compute(b, 1)
    assert a.num_computed_tokens == b.num_computed_tokens == 10
    # chunked prefill inserted the first pages; b's duplicate pages were swapped for the tree's
    assert a.block_table[:2] == b.block_table[:2]
    h.drain()
    assert cache.tree.total_size() == 8           # 10 computed tokens -> 2 whole pages (one copy)
    assert cache.pool.num_free == 16 - 2


def test_radix_chunked_prefill_is_shared_while_running():
    cache = RadixCacheManager(32, 2)
    h = Harness(cache)
    a = h.admit(list(range(20)), chunk=8)         # 8 of 20 prompt tokens computed: inserted already
    assert cache.tree.total_size() == 8 and cache.tree.protected_size == 8
    b = h.admit(list(range(8)) + [50, 51])        # matches a's first 8 tokens while a still runs
    assert b.num_cached_tokens == 8 and b.block_table[:4] == a.block_table[:4]
    h.compute(a, 100)
    h.check()
    h.drain()


@pytest.mark.parametrize("kind", ["none", "hashed", "radix"])
def test_naming_and_sizes(kind):
    cache = make_manager(kind, 10, 4)
    assert cache.name == kind and cache.size_info().capacity == 40
    assert cache.size_info().free == 40


# -- the real model through the three managers -------------------------------------------------

def test_multi_turn_conversation_across_managers(make_engine, tiny_model):
    """Each turn's prompt is the previous prompt + the model's answer + a new user message."""
    g = torch.Generator().manual_seed(1)
    messages = [torch.randint(0, tiny_model.config.vocab_size, (n,), generator=g).tolist() for n in (37, 9, 20, 14)]

    def converse(engine):
        history, answers, cached = [], [], []
        for message in messages:
            history = history + message
            before = len(engine.step_log)
            (answer,) = engine.generate([history], SamplingParams(max_tokens=6))
            cached.append(total(engine, "num_cached_tokens", before))
            answers.append(answer)
            history = history + answer
        return answers, cached, total(engine, "num_tokens")

    reference, history = [], []
    for message in messages:
        history = history + message
        reference.append(generate(tiny_model, torch.tensor([history]), 6)[0].tolist())
        history = history + reference[-1]

    computed = {}
    for kind, block_size in [("none", 16), ("hashed", 16), ("radix", 16), ("radix", 1)]:
        answers, cached, computed[kind, block_size] = converse(make_engine(cache=kind, block_size=block_size))
        assert answers == reference, kind
        if kind == "none":
            assert cached == [0, 0, 0, 0]
        else:
            assert cached[0] == 0 and all(c > 0 for c in cached[1:]), (kind, cached)
    assert computed["radix", 16] <= computed["hashed", 16] < computed["none", 16]
    assert computed["radix", 1] < computed["hashed", 16]


@pytest.mark.parametrize("kind", ["hashed", "radix"])
@pytest.mark.parametrize("key", ["cache_salt", "lora_id"])
def test_tenants_never_share_kv(make_engine, tiny_model, kind, key):
    g = torch.Generator().manual_seed(2)
    system = torch.randint(0, tiny_model.config.vocab_size, (64,), generator=g).tolist()
    prompts = [system + [i, i + 1, i + 2] for i in range(4)]
    engine = make_engine(cache=kind, block_size=16)
    params = {name: SamplingParams(max_tokens=2, **{key: name}) for name in ("a", "b")}

    def cached(prompt, tenant):
        before = len(engine.step_log)
        out = engine.generate([prompt], params[tenant])
        assert out == [generate(tiny_model, torch.tensor([prompt]), 2)[0].tolist()]
        return total(engine, "num_cached_tokens", before)

    assert cached(prompts[0], "a") == 0
    assert cached(prompts[1], "b") == 0, "tenant b hit tenant a's KV"
    assert cached(prompts[2], "a") == 64       # the same tenant still hits the shared system prompt
    assert cached(prompts[3], "b") == 64


@pytest.mark.parametrize("kind", ["none", "hashed", "radix"])
def test_every_manager_has_a_pool_and_a_no_op_rollback(kind):
    cache = make_manager(kind, 8, 4)
    assert cache.pool.num_blocks == 8
    seq = Sequence(0, list(range(10)), SamplingParams())
    cache.lock(seq, cache.match(seq))
    assert cache.allocate(seq, 10)
    before = (list(seq.block_table), seq.num_computed_tokens, cache.size_info())
    cache.rollback(seq)
    assert (seq.block_table, seq.num_computed_tokens, cache.size_info()) == before
    cache.free(seq)
    cache.check_no_leaks()


@pytest.mark.parametrize("kind", ["hashed", "radix"])
def test_lock_that_raises_leaves_the_sequence_holding_nothing(kind, monkeypatch):
    cache = make_manager(kind, 8, 4)
    first = Sequence(0, list(range(9)), SamplingParams())
    cache.lock(first, cache.match(first))
    assert cache.allocate(first, 9)
    first.num_computed_tokens = 9
    cache.cache(first, 9)
    cache.free(first)                         # its first two pages are cached now
    seq = Sequence(1, list(range(9)), SamplingParams())
    match = cache.match(seq)
    assert match.num_tokens == 8

    def fail(match):
        raise RuntimeError("injected")
    monkeypatch.setattr(cache, "_protect", fail)
    with pytest.raises(RuntimeError):
        cache.lock(seq, match)
    assert (seq.block_table, seq.num_computed_tokens, seq.cache_handle) == ([], 0, None)
    cache.check_no_leaks()


def test_radix_drops_empty_namespaces():
    """One tree per salt: once a salt's pages are evicted and nobody runs under it, the tree goes,
    so a server that saw thousands of salts does not walk thousands of empty trees."""
    cache = RadixCacheManager(4, 4)
    for salt in range(20):
        seq = Sequence(salt, list(range(8)), SamplingParams(cache_salt=salt))
        cache.lock(seq, cache.match(seq))
        assert cache.allocate(seq, 8)
        seq.num_computed_tokens = 8
        cache.free(seq)                        # its 2 pages stay cached in its namespace
        assert len(cache.trees) <= 3, sorted(cache.trees)   # the default tree + at most 2 salts
    cache.check_no_leaks()
    salted = [ns for ns in cache.trees if ns]
    assert salted and all(cache.trees[ns].total_size() for ns in salted)
