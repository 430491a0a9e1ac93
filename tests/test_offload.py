"""The vLLM-style offloading manager (nano_engine.offload.OffloadingManager): its contract, LRU
eviction that spares pinned and in-flight blocks, store_threshold, and CPU events."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from engine_helpers import serve_on
from hypothesis import given, settings, strategies as st

from nano_engine.host_tier import HostTier
from nano_engine.kv_events import BlockRemoved, BlockStored, replay
from nano_engine.offload import LookupResult, OffloadingManager
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.sampling import SamplingParams
from nano_engine.sequence import Sequence


def test_store_then_load_contract():
    m = OffloadingManager(num_pages=2, block_size=4)
    out = m.prepare_store(["a", "b"])
    assert out is not None and out.keys_to_store == ["a", "b"] and out.evicted_keys == []
    assert m.lookup("a") is LookupResult.HIT_PENDING          # not readable before complete_store
    m.complete_store(["a", "b"])
    assert m.lookup("a") is LookupResult.HIT and m.lookup("z") is LookupResult.MISS
    assert m.prepare_store(["a"]).keys_to_store == []            # stored already
    pages = m.prepare_load(["a"])
    assert pages == [out.pages[0]]
    assert m.prepare_store(["c"]).evicted_keys == ["b"]          # "a" is being loaded: "b" goes
    m.complete_load(["a"])
    m.complete_store(["c"])
    m.touch(["a"])                                              # "c" is now the least recent
    assert m.prepare_store(["d"]).evicted_keys == ["c"]
    m.complete_store(["d"], success=False)                      # a failed store frees its page
    assert m.lookup("d") is LookupResult.MISS
    m.check_invariants()


def test_no_room_returns_none_and_changes_nothing():
    m = OffloadingManager(num_pages=1, block_size=4)
    m.prepare_store(["a"])                                        # in flight: not evictable
    assert m.prepare_store(["b"]) is None
    assert list(m.blocks) == ["a"]
    m.check_invariants()


def test_store_threshold_stores_on_the_second_offer():
    m = OffloadingManager(num_pages=4, block_size=4, store_threshold=2)
    assert m.prepare_store(["a"]).keys_to_store == []
    assert m.prepare_store(["a", "b"]).keys_to_store == ["a"]


def test_events_carry_medium_cpu_and_replay_filters_by_medium():
    m = OffloadingManager(num_pages=1, block_size=4)
    m.prepare_store(["a"])
    m.complete_store(["a"])
    m.prepare_store(["b"])
    events = m.take_events()
    assert [type(e) for e in events] == [BlockStored, BlockRemoved] and all(e.medium == "CPU" for e in events)
    assert m.take_events() == []
    assert replay(events, medium="CPU") == set() and replay(events[:1], medium="CPU") == {"a"}
    assert replay(events[:1]) == set()                            # the default reads the GPU's events


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["store", "done", "fail", "load", "unload", "touch"]),
                          st.lists(st.sampled_from("abcdef"), min_size=1, max_size=3)), max_size=40),
       st.integers(1, 4))
def test_against_a_brute_force_lru(ops, num_pages):
    """The manager against a plain model: an ordered dict of key -> state, LRU = insertion order."""
    m = OffloadingManager(num_pages, block_size=1)
    model: OrderedDict[str, int] = OrderedDict()                  # key -> ref_cnt (-1 pending)
    for op, keys in ops:
        if op == "store":
            new = [k for k in dict.fromkeys(keys) if k not in model]
            free = num_pages - len(model)
            victims = [k for k, r in model.items() if r == 0 and k not in keys][:max(0, len(new) - free)]
            out = m.prepare_store(keys)
            if len(new) - free > len(victims):
                assert out is None
                continue
            assert out is not None and out.keys_to_store == new and out.evicted_keys == victims
            for k in victims:
                del model[k]
            for k in new:
                model[k] = -1
        elif op in ("done", "fail"):
            m.complete_store(keys, success=op == "done")
            for k in dict.fromkeys(keys):
                if model.get(k) == -1:
                    if op == "done":
                        model[k] = 0
                    else:
                        del model[k]
        elif op == "load":
            if all(model.get(k, -1) >= 0 for k in keys):
                m.prepare_load(keys)
                for k in keys:
                    model[k] += 1
        elif op == "unload":
            if all(model.get(k, 0) > 0 for k in dict.fromkeys(keys)) and len(set(keys)) == len(keys):
                m.complete_load(keys)
                for k in keys:
                    model[k] -= 1
        else:
            m.touch(keys)
            for k in keys:
                if k in model:
                    model.move_to_end(k)
        m.check_invariants()
        assert {k: b.ref_cnt for k, b in m.blocks.items()} == dict(model)
        assert list(m.blocks) == list(model)


@pytest.mark.parametrize("vllm", [False, True])
def test_a_failed_admission_loads_evicts_and_touches_nothing(vllm):
    """A CPU hit counts as device blocks to allocate in ``can_admit`` (vLLM's allocate_slots counts
    the external tokens); a request that does not fit leaves both tiers exactly as they were,
    and the same request admitted later loads its CPU hit."""
    import copy

    from nano_engine.tiered_cache_manager import TieredHashedCacheManager

    bs = 4
    pool = PrefixCachingBlockPool(8, bs, vllm=vllm)
    manager = TieredHashedCacheManager(pool, HostTier(64 * bs))
    a, b = list(range(100, 124)), list(range(200, 232))           # 6 and 8 blocks
    serve_on(manager, 0, a)
    serve_on(manager, 1, b)                                          # a leaves the device, stays on the CPU
    assert pool.lookup(a, max_tokens=len(a) - 1) == []
    big = Sequence(2, a + list(range(300, 340)), SamplingParams())  # a's 6 blocks on the CPU + 10 new
    match = manager.match(big)
    assert match.num_tokens == 6 * bs and match.blocks == []
    before = (list(pool.free_queue), copy.deepcopy(pool.hash_to_blocks), list(manager.offload.blocks),
              {k: v.ref_cnt for k, v in manager.offload.blocks.items()}, manager.copies.in_flight(),
              manager.num_host_hit_tokens)
    assert not manager.can_admit(match, len(big.token_ids))       # 6 to load + 10 new > 8 blocks
    after = (list(pool.free_queue), copy.deepcopy(pool.hash_to_blocks), list(manager.offload.blocks),
             {k: v.ref_cnt for k, v in manager.offload.blocks.items()}, manager.copies.in_flight(),
             manager.num_host_hit_tokens)
    assert after == before
    small = Sequence(3, a + [7], SamplingParams())                 # fits: its CPU hit is loaded at lock
    match = manager.match(small)
    assert manager.can_admit(match, len(small.token_ids))
    manager.lock(small, match)
    assert manager.num_host_hit_tokens == len(a) and small.num_computed_tokens == len(a)
    assert manager.allocate(small, len(small.token_ids))
    manager.copies.drain()
    manager.free(small)
    manager.begin_step()
    manager.check_no_leaks()
