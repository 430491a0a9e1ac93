"""KVBlockIndex against brute force: per-worker, per-medium ``kv_events.replay`` onto Counters, and a
literal walk of the request's hashes for ``match``."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st
from kv_event_helpers import pool_events

from nano_engine.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, replay
from nano_engine.kv_index import KVBlockIndex

MEDIA = ("GPU", "CPU", "STORAGE")


def stored(hashes, medium="GPU"):
    return BlockStored(list(hashes), None, [0] * len(hashes), 1, None, [None] * len(hashes), medium=medium)


def brute_held(log: dict, worker, medium: str) -> set:
    return replay(log.get(worker, []), Counter(), medium=medium)


def brute_match(log: dict, workers, chain) -> dict:
    """Per worker: walk the chain; a block on GPU counts as GPU, else on CPU as CPU, else in any other
    medium as other (llm-d: any tier keeps the pod in the run); held nowhere, the run ends."""
    result = {}
    for w in workers:
        gpu, cpu = brute_held(log, w, "GPU"), brute_held(log, w, "CPU")
        anywhere = set().union(*(brute_held(log, w, m) for m in MEDIA))
        g = c = o = 0
        for h in chain:
            if h in gpu:
                g += 1
            elif h in cpu:
                c += 1
            elif h in anywhere:
                o += 1
            else:
                break
        result[w] = (g, c, o)
    return result


hashes = st.lists(st.integers(0, 7), min_size=1, max_size=4)
events = st.one_of(
    st.builds(stored, hashes, st.sampled_from(MEDIA)),
    st.builds(lambda hs, m: BlockRemoved(hs, medium=m), hashes, st.sampled_from(MEDIA)),
    st.just(AllBlocksCleared()),
)
ops = st.lists(st.one_of(st.tuples(st.sampled_from("abc"), st.lists(events, max_size=4)),
                         st.tuples(st.sampled_from("abc"), st.none())), max_size=30)


@settings(max_examples=100, deadline=None)
@given(ops, st.lists(st.lists(st.integers(0, 7), max_size=6), min_size=1, max_size=4))
def test_index_matches_brute_force(operations, chains):
    index, log = KVBlockIndex(), {}
    for worker, batch in operations:
        if batch is None:                       # reset: the engine restarted
            index.reset(worker)
            log[worker] = []
        else:
            index.apply(worker, batch)
            log.setdefault(worker, []).extend(batch)
        index.check_invariants()
    assert set(index.workers) == set(log)
    for w in log:
        for medium in MEDIA:
            assert index.blocks(w, medium) == brute_held(log, w, medium)
            assert index.num_blocks(w, medium) == sum(replay_counter(log[w], medium).values())
    for h in range(8):
        expected = {w: {m for m in MEDIA if h in brute_held(log, w, m)} for w in log}
        assert index.workers_for(h) == {w: media for w, media in expected.items() if media}
    for chain in chains:
        assert index.match(chain) == brute_match(log, log, chain)


def replay_counter(events, medium):
    counts: Counter = Counter()
    replay(events, counts, medium=medium)
    return counts


def test_duplicates_are_counted_as_vllm_emits_them():
    """vLLM mode: two blocks cache hash 5; evicting one (one BlockRemoved) leaves it held."""
    index = KVBlockIndex()
    index.apply("w", [stored([5]), stored([5]), BlockRemoved([5])])
    assert index.blocks("w") == {5} and index.num_blocks("w") == 1
    index.apply("w", [BlockRemoved([5]), BlockRemoved([5])])   # the second removal: unknown, ignored
    assert index.blocks("w") == set() and index.workers_for(5) == {}
    index.check_invariants()


def test_match_counts_cpu_only_blocks_after_the_gpu_ones():
    index = KVBlockIndex()
    index.apply("a", [stored([1, 2]), stored([2, 3, 4], "CPU")])
    index.apply("b", [stored([1, 2, 3], "CPU")])
    index.add_worker("c")
    assert index.match([1, 2, 3, 4, 9]) == {"a": (2, 2, 0), "b": (0, 3, 0), "c": (0, 0, 0)}
    assert index.match([2, 3]) == {"a": (1, 1, 0), "b": (0, 2, 0), "c": (0, 0, 0)}
    assert index.match([9, 1]) == {"a": (0, 0, 0), "b": (0, 0, 0), "c": (0, 0, 0)}      # a run starts at block 0
    assert index.workers_for(2) == {"a": {"GPU", "CPU"}, "b": {"CPU"}}
    index.apply("a", [AllBlocksCleared()])
    assert index.match([1]) == {"a": (0, 0, 0), "b": (0, 1, 0), "c": (0, 0, 0)}


def test_a_block_on_another_medium_does_not_end_the_run():
    """llm-d (LongestPrefixScorer at a378f5b): a pod stays in the run while it holds the key in any
    tier; vLLM's third medium, "STORAGE", counts as other."""
    index = KVBlockIndex()
    index.apply("a", [stored([1]), stored([2], "STORAGE"), stored([3], "CPU"), stored([4])])
    index.apply("b", [stored([1]), stored([2, 3], "STORAGE"), stored([3], "CPU")])
    match = index.match([1, 2, 3, 4, 5])
    assert match["a"] == (2, 1, 1), "the STORAGE block 2 keeps a's run going to block 4"
    assert match["a"].blocks == 4, "the run's length counts every medium"
    assert match["b"] == (1, 1, 1), "a block on CPU and STORAGE counts as CPU"


def test_real_pool_events():
    events = pool_events(300, seed=2)
    index = KVBlockIndex()
    for i in range(0, len(events), 7):
        index.apply(0, events[i:i + 7])
    assert index.blocks(0) == replay(events, Counter()) and index.blocks(0, "CPU") == set()
    index.check_invariants()


def test_bad_event_is_refused():
    with pytest.raises(TypeError, match="not a KV event"):
        KVBlockIndex().apply(0, ["BlockStored"])      # type: ignore[list-item]
