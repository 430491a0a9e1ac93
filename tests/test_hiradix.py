"""The two-tier radix tree (nano_engine.hiradix) on its own: node states, the two eviction rules,
write policies, load-back, copies in flight, and a randomized run against a content ledger.

The ledger is the independent reference: every device slot a "request" computes is filled with a
number that identifies the token prefix it belongs to, so after any sequence of inserts, stores,
evictions and loads each node's device and host slots must hold exactly its prefix's numbers.
"""

from __future__ import annotations

import pytest
import torch
from engine_helpers import failing_copies, serve_on
from hypothesis import HealthCheck, given, settings, strategies as st

from nano_engine.hiradix import HiNode, HiRadixCache
from nano_engine.host_tier import WRITE_POLICIES, CopyEngine, HostKVPool, HostTier, page_runs
from nano_engine.kv_cache import KVCache
from nano_engine.model import Qwen3Config
from nano_engine.paged import BlockPool

PS = 2


def tiny_kv(num_pages: int) -> KVCache:
    config = Qwen3Config(vocab_size=16, hidden_size=8, intermediate_size=8, num_hidden_layers=2,
                         num_attention_heads=1, num_key_value_heads=1, head_dim=2)
    return KVCache(config, num_pages, PS, dtype=torch.float64)


def content(prefix: tuple[int, ...]) -> float:
    return float(hash(prefix) % 1_000_003)


class Harness:
    """A tree, a device pool with real KV tensors, a host pool, and request-like operations."""

    def __init__(self, device_pages: int, host_pages: int, policy: str, threshold: int = PS) -> None:
        self.kv = tiny_kv(device_pages)
        self.pool = BlockPool(device_pages)
        self.host = HostKVPool(host_pages, PS, like=self.kv)
        self.copies = CopyEngine(self.kv, self.host)
        self.tree = HiRadixCache(PS, host=self.host, copies=self.copies,
                                 tier=HostTier(host_pages * PS, policy, load_back_threshold=threshold))

    def alloc(self, n: int) -> list[int] | None:
        short = n - self.pool.num_free
        if short > 0:
            slots = self.tree.evict(short * PS)
            self.pool.free(sorted({s // PS for s in slots}))
        return self.pool.allocate(n)

    def evict(self, num_tokens: int) -> list[int]:
        slots = self.tree.evict(num_tokens)
        self.pool.free(sorted({s // PS for s in slots}))
        return slots

    def serve(self, tokens: list[int]) -> tuple[int, int] | None:
        """Match, load back, lock, compute the rest, insert, unlock: a request's life.
        Returns (device hit, host hit loaded) or None when the pool could not hold it."""
        tokens = tokens[:len(tokens) // PS * PS]
        m = self.tree.match(tokens)
        loaded = self.tree.load_back(m, self.alloc)
        node = m.host_node if loaded else m.device_node
        hit = m.device_tokens + loaded
        self.tree.inc_lock_ref(node)
        pages = self.alloc((len(tokens) - hit) // PS)
        if pages is None:
            self.tree.dec_lock_ref(node)
            return None
        try:
            self.copies.start_loads()       # before the "forward" that reads them
        except RuntimeError:                # the step fails: nothing computed, the load stays queued
            self.pool.free(pages)
            self.tree.dec_lock_ref(node)
            raise
        slots = [s for n in self._path(node) for s in n.value]
        new = [p * PS + i for p in pages for i in range(PS)]
        for t, slot in enumerate(new, start=hit):        # the forward writes the new tokens' KV
            for layer in range(len(self.kv.k)):
                self.kv.k[layer][slot] = content(tuple(tokens[:t + 1]))
                self.kv.v[layer][slot] = -content(tuple(tokens[:t + 1]))
        already = self.tree.insert(tokens, slots + new)
        assert already >= hit
        self.pool.free(sorted({s // PS for s in new[:already - hit]}))   # duplicates
        self.tree.dec_lock_ref(node)
        return m.device_tokens, loaded

    def _path(self, node) -> list[HiNode]:
        path = []
        while node is not self.tree.root:
            path.append(node)
            node = node.parent_in_tree()
        return path[::-1]

    def check(self) -> None:
        """Invariants, page ownership, and every readable copy holding its prefix's numbers."""
        tree = self.tree
        tree.check_invariants()
        device_pages = sorted(s // PS for n in tree.nodes() for s in n.value[::PS])
        held = [b for b, c in enumerate(self.pool.ref_cnt) if c]
        assert device_pages == held
        for node in tree.nodes():
            if node is tree.root:
                continue
            assert isinstance(node, HiNode)
            prefix_len = sum(len(n.key) for n in self._path(node)) - len(node.key)
            full = [t for n in self._path(node) for t in n.key]
            want = [content(tuple(full[:prefix_len + i + 1])) for i in range(len(node.key))]
            pending = node.copy in self.copies.submitted
            if node.on_device and not (pending and node.copy.kind == "load"):
                assert self.kv.k[1][node.value, 0, 0].tolist() == want
                assert self.kv.v[0][node.value, 0, 1].tolist() == [-w for w in want]
            if node.host_value is not None and not (pending and node.copy.kind == "store"):
                assert self.host.k[0][node.host_value, 0, 1].tolist() == want, f"host copy of {node}"
                assert self.host.v[1][node.host_value, 0, 0].tolist() == [-w for w in want]


def test_page_runs_merges_consecutive_slots():
    assert list(page_runs([4, 5, 6, 10, 11], [0, 1, 2, 3, 4])) == [(4, 0, 3), (10, 3, 2)]
    assert list(page_runs([], [])) == []


def test_three_states_and_the_two_eviction_rules():
    h = Harness(device_pages=4, host_pages=8, policy="write_through")
    tree = h.tree
    assert h.serve([1, 2, 3, 4, 5, 6, 7]) == (0, 0)      # 6 tokens cached (whole pages)
    (node,) = tree.root.children.values()
    assert node.state == "device+host" and node.in_flight and node.lock_ref == 1   # store queued: locked
    assert tree.evict(6) == []                              # a copy in flight pins its source
    h.check()
    h.copies.start_stores()
    h.copies.poll()
    assert not node.in_flight and node.lock_ref == 0
    h.check()
    slots = list(node.value)
    assert tree.evict(1) == slots
    h.pool.free(sorted({s // PS for s in slots}))
    assert node.state == "host" and node.parent is tree.root   # demoted, not deleted
    assert h.pool.num_free == 4
    h.check()
    m = tree.match([1, 2, 3, 4, 5, 6, 9])
    assert (m.device_tokens, m.host_tokens) == (0, 6)
    # host eviction takes host-only leaves only
    assert len(tree.evict_host(1)) == 6 and tree.total_size() == 0 and not tree.root.children
    h.check()


def test_device_eviction_demotes_a_backed_up_parent_only_after_its_children():
    h = Harness(device_pages=6, host_pages=12, policy="write_through")
    h.serve([1, 2, 3, 4, 5, 6])
    h.serve([1, 2, 3, 4, 7, 8])                             # splits: [1,2,3,4] -> [5,6] | [7,8]
    h.copies.drain()
    h.check()
    parent = h.tree.root.children[(1, 2)]
    assert len(parent.children) == 2
    h.evict(2)                                          # one leaf goes first, never the parent
    assert parent.on_device
    h.evict(4)
    assert all(c.state == "host" for c in parent.children.values()) and parent.state == "host"
    h.check()


def test_load_back_is_all_or_nothing_with_a_minimum_and_bytes_identical():
    h = Harness(device_pages=5, host_pages=8, policy="write_through", threshold=4)
    h.serve([1, 2, 3, 4, 5, 6, 7, 8])
    h.copies.drain()
    h.evict(8)
    assert h.tree.host_only_size == 8
    # a 2-token host hit is under the threshold: nothing loaded
    m = h.tree.match([1, 2, 9, 9])
    assert m.host_tokens == 2 and h.tree.load_back(m, h.alloc) == 0
    # the full hit loads (8 tokens): byte-identical to what was written (check() compares)
    assert h.serve([1, 2, 3, 4, 5, 6, 7, 8, 9, 9]) == (0, 8)
    h.copies.drain()
    h.check()
    assert h.copies.bytes_loaded == 8 * h.host.bytes_per_token


def test_load_back_without_room_loads_nothing_and_evicts_nothing_it_loads():
    h = Harness(device_pages=2, host_pages=8, policy="write_through")
    h.serve([1, 2, 3, 4])
    h.copies.drain()
    h.evict(4)
    h.serve([5, 6, 7, 8])                     # fills the device pool
    h.copies.drain()
    other = h.tree.root.children[(5, 6)]
    h.tree.inc_lock_ref(other)                # a running request holds it: no room can be made
    m = h.tree.match([1, 2, 3, 4, 9])
    assert h.tree.load_back(m, h.alloc) == 0
    assert m.host_node.state == "host"        # untouched, still loadable
    h.tree.dec_lock_ref(other)
    h.check()
    assert h.tree.load_back(h.tree.match([1, 2, 3, 4, 9]), h.alloc) == 4   # now it evicts [5,6,7,8]
    h.copies.drain()
    h.check()


def sglang_load_back(h: Harness, tokens: list[int]) -> int:
    """``load_back`` as the engine's manager calls it: ``allocate`` takes free pages only, and
    ``evict`` frees device tokens (SGLang 0.5.9's order: try, evict the load size, try again)."""
    def evict(num_tokens: int) -> None:
        h.evict(num_tokens)

    return h.tree.load_back(h.tree.match(tokens), h.pool.allocate, evict)


def test_load_back_finds_room_as_sglang_does():
    """SGLang 0.5.9's ``load_back``: one try with the free pages; if short, evict *the whole load
    size* and try again; if that fails too, load nothing and keep the evictions.

    First: two free pages, four to load: 8 tokens are evicted, not the two pages short, so both
    cached prefixes leave the device. Then: five to load, two free and one evictable prefix of
    two (the other is locked): nothing is loaded and the evicted prefix stays evicted."""
    h = Harness(device_pages=6, host_pages=16, policy="write_through")
    a, b_tokens, c_tokens = list(range(1, 9)), [11, 12, 13, 14], [21, 22, 23, 24]
    h.serve(a)
    h.copies.drain()
    h.evict(8)                                 # a is on the host only
    h.serve(b_tokens)
    h.serve(c_tokens)
    h.copies.drain()
    assert h.pool.num_free == 2
    assert sglang_load_back(h, a + [9, 9]) == 8
    b, c = h.tree.root.children[(11, 12)], h.tree.root.children[(21, 22)]
    assert (b.state, c.state) == ("host", "host"), "the whole load size (8 tokens) is evicted, not the shortfall"
    h.copies.drain()
    h.check()

    h = Harness(device_pages=6, host_pages=16, policy="write_through")
    a = list(range(1, 11))
    h.serve(a)
    h.copies.drain()
    h.evict(10)                                # a (5 pages) is on the host only
    h.serve(b_tokens)
    h.serve(c_tokens)
    h.copies.drain()
    b, c = h.tree.root.children[(11, 12)], h.tree.root.children[(21, 22)]
    h.tree.inc_lock_ref(c)                     # a running request holds c
    assert sglang_load_back(h, a + [9, 9]) == 0
    assert b.state == "host" and h.pool.num_free == 4, "b's eviction is kept though nothing was loaded"
    assert h.tree.match(a).host_tokens == 10, "a is still on the host, loadable"
    h.tree.dec_lock_ref(c)
    h.check()


@pytest.mark.parametrize("policy", WRITE_POLICIES)
def test_write_policies_move_different_bytes(policy):
    h = Harness(device_pages=4, host_pages=16, policy=policy)
    h.serve([1, 2, 3, 4])
    h.copies.drain()
    first = h.copies.bytes_written
    h.serve([1, 2, 3, 4, 5])                  # a second hit on [1, 2, 3, 4]
    h.copies.drain()
    second = h.copies.bytes_written
    per = 4 * h.host.bytes_per_token
    assert (first, second) == {"write_through": (per, per), "write_through_selective": (0, per),
                               "write_back": (0, 0)}[policy]
    h.evict(4)                                # write-back copies at eviction (and waits for it)
    assert h.copies.bytes_written == per
    h.check()
    assert h.tree.match([1, 2, 3, 4, 5]).host_tokens == 4


def test_a_failed_copy_stays_queued_and_is_retried():
    h = Harness(device_pages=4, host_pages=8, policy="write_through")
    h.serve([1, 2, 3, 4])
    with failing_copies({2}), pytest.raises(RuntimeError, match="injected"):
        h.copies.start_stores()
    (node,) = h.tree.root.children.values()
    assert node.in_flight and node.lock_ref == 1 and h.copies.bytes_written == 0
    h.check()
    h.copies.drain()
    assert not node.in_flight and node.lock_ref == 0
    h.check()


OPS = st.lists(st.tuples(st.sampled_from(["serve", "evict", "evict_host", "stores", "poll"]),
                         st.lists(st.integers(0, 2), min_size=1, max_size=9), st.booleans()),
               min_size=1, max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=st.sampled_from(WRITE_POLICIES), device_pages=st.integers(3, 6), host_pages=st.integers(2, 10),
       ops=OPS)
def test_random_operations_keep_invariants_and_bytes(policy, device_pages, host_pages, ops):
    h = Harness(device_pages, host_pages, policy)
    fail = {"on": False}
    real = CopyEngine._copy_layer

    def maybe_failing(self, layer, copy, to_host):
        if fail["on"] and layer == 1:
            raise RuntimeError("injected copy failure")
        return real(self, layer, copy, to_host)

    CopyEngine._copy_layer = maybe_failing        # type: ignore[method-assign]
    try:
        for op, tokens, flaky in ops:
            fail["on"] = flaky
            try:
                if op == "serve":
                    h.serve([t % 3 for t in tokens] + [0])
                elif op == "evict":
                    h.evict(len(tokens))
                elif op == "evict_host":
                    h.tree.evict_host(len(tokens))
                elif op == "stores":
                    h.copies.start_stores()
                else:
                    h.copies.poll()
            except RuntimeError as e:
                assert "injected" in str(e)
            h.check()
        fail["on"] = False
        h.copies.drain()
        h.check()
        assert h.tree.protected_size == 0
    finally:
        CopyEngine._copy_layer = real             # type: ignore[method-assign]


def tier_state(manager) -> tuple:
    """Everything an admission could change in a tiered radix manager: every node's key, copies,
    locks, pins, LRU time and hit count, the tree sizes, both pools, the queued copies, the counters."""
    trees = []
    for namespace, tree in sorted(manager.trees.items()):
        nodes = sorted((n.id, tuple(n.key), tuple(n.value), None if n.host_value is None else tuple(n.host_value),
                        n.lock_ref, n.host_ref, n.last_access, n.hit_count, n.parent.id if n.parent else None)
                       for n in tree.nodes())
        trees.append((namespace, nodes, tree.evictable_size, tree.protected_size))
    return (trees, list(manager.pool.ref_cnt), manager.pool.num_free, list(manager.host.pages.ref_cnt),
            [(c.kind, tuple(c.src), tuple(c.dst)) for c in manager.copies.in_flight()],
            manager.num_queries, manager.num_hits, manager.num_host_hit_tokens, manager.num_device_hit_tokens)


def test_a_failed_admission_leaves_both_tiers_exactly_as_before():
    """``match`` only looks (no split, no load, no LRU refresh); ``can_admit`` counts the pages to
    load and to compute against the free and evictable ones; a request that does not fit changes
    nothing at all. One that fits is loaded back when it is locked."""
    from nano_engine.sampling import SamplingParams
    from nano_engine.sequence import Sequence
    from nano_engine.tiered_cache_manager import TieredRadixCacheManager

    bs = 4
    manager = TieredRadixCacheManager(8, bs, HostTier(64 * bs, load_back_threshold=1))
    a, b = list(range(100, 124)), list(range(200, 232))
    serve_on(manager, 0, a)
    serve_on(manager, 1, b)                                   # a is host-only now, b fills the device
    assert manager.tree.peek(a).host_tokens == len(a) and manager.tree.peek(a).device_slots == []
    before = tier_state(manager)
    big = Sequence(2, a[:22] + list(range(300, 340)), SamplingParams())   # its hit ends inside a's node
    match = manager.match(big)
    assert (match.num_tokens, match.blocks) == (20, [])      # 5 host pages to load, none on the device
    assert not manager.can_admit(match, len(big.token_ids))  # 5 loaded + 11 computed pages > 8
    assert tier_state(manager) == before                     # no split, no load, no eviction, no refresh
    assert big.block_table == [] and manager.peek(big) == 20

    small = Sequence(3, a + [1, 2, 3, 4, 5], SamplingParams())
    match = manager.match(small)
    assert tier_state(manager) == before
    assert manager.can_admit(match, len(small.token_ids))
    manager.lock(small, match)                                # now: load a (6 pages), evicting b's
    assert match.num_tokens == small.num_computed_tokens == 24 and manager.num_host_hit_tokens == 24
    assert manager.allocate(small, len(small.token_ids))
    manager.tree.check_invariants()
    manager.free(small)
    manager.check_no_leaks()


@settings(max_examples=40, deadline=None)
@given(device_blocks=st.integers(3, 8), host_blocks=st.integers(1, 12), policy=st.sampled_from(WRITE_POLICIES),
       requests=st.lists(st.tuples(st.lists(st.integers(0, 2), min_size=1, max_size=12), st.booleans()),
                         min_size=1, max_size=12))
def test_can_admit_is_exact_and_a_refused_request_changes_nothing(device_blocks, host_blocks, policy, requests):
    """Brute force as the reference: admit every request on a copy of the manager; ``can_admit``
    must say True exactly when lock + allocate succeed there. Refused: the state is untouched.
    Admitted ones stay running (``keep``) or finish, so locks and loads pile up."""
    import copy as copy_module

    from nano_engine.sampling import SamplingParams
    from nano_engine.sequence import Sequence
    from nano_engine.tiered_cache_manager import TieredRadixCacheManager

    bs = 2
    manager = TieredRadixCacheManager(device_blocks, bs, HostTier(host_blocks * bs, policy, load_back_threshold=3))
    running = []
    for i, (tokens, keep) in enumerate(requests):
        tokens = [t % 3 for t in tokens] * 2 + [7]
        seq = Sequence(i, tokens, SamplingParams())
        before = tier_state(manager)
        match = manager.match(seq)
        assert tier_state(manager) == before
        trial = copy_module.deepcopy((manager, seq, match))
        trial[0].lock(trial[1], trial[2])
        fits = trial[0].allocate(trial[1], len(tokens))
        assert manager.can_admit(match, len(tokens)) == fits
        if not fits:
            assert tier_state(manager) == before
            continue
        manager.lock(seq, match)
        assert manager.allocate(seq, len(tokens))
        seq.num_computed_tokens = len(tokens)
        manager.cache(seq, len(tokens) - match.num_tokens)
        manager.tree.check_invariants()
        if keep:
            running.append(seq)
        else:
            manager.free(seq)
        manager.begin_step()
    for seq in running:
        manager.free(seq)
    manager.check_no_leaks()
