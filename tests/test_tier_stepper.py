"""The tier stepper (``nano_engine.notebook.tier_stepper.TierStepper``) and its picture
(``viz.draw_tiered_radix``), driven from code.

A hand-worked run checks the narration, the node states and the counts against what the chapter's
rules say must happen; a randomized run checks, after every step, the tree's invariants, both
pools' bookkeeping, that every node is drawn in the colour of its state with its copy in flight
marked, and, where the host holds everything, that the hits are those of a brute-force reference
(the longest prefix shared with any earlier request).
"""

import doctest
import re

import pytest
from hypothesis import given, settings, strategies as st

from nano_engine.hiradix import HiNode
from nano_engine.notebook.tier_stepper import TierStepper
from nano_engine.notebook.viz import COLORS, TIER_COLORS

S = [1, 2, 3, 4]
CHAT = [S + [10, 11, 12], S + [20, 21, 22], S + [10, 11, 12, 13, 14], S + [30, 31, 32], S + [20, 21, 22, 23]]


def run_all(stepper):
    states = [stepper.state]
    while stepper.index < stepper.num_steps:
        states.append(stepper.step())
    return states


def node_line(dot: str, node_id: int) -> str:
    [line] = [line for line in dot.splitlines() if line.strip().startswith(f"n{node_id} [")]
    return line


def states_by_key(tree) -> dict[tuple, str]:
    out = {}
    for n in tree.nodes():
        if n is tree.root:
            continue
        full, p = [], n
        while p is not tree.root:
            full = list(p.key) + full
            p = p.parent
        out[tuple(full)] = n.state
    return out


def test_write_through_demotes_then_loads_back():
    """Device 12 tokens, host 16: r3 pushes [20, 21, 22] off the device (backed up: demoted, not
    deleted), r4 finds it on the host and loads it back (3 tokens >= threshold 2)."""
    s = TierStepper(CHAT, device_tokens=12, host_tokens=16, load_back_threshold=2)
    states = run_all(s)
    kinds = [st.kind for st in states[1:]]
    assert kinds[:4] == ["match", "forward", "insert", "ack"]          # r0; its store acknowledged as r1 begins
    assert kinds.count("load") == 1 and kinds[-1] == "ack"
    [evict_r3] = [st for st in states if st.kind == "forward" and st.narration.startswith("r3")]
    assert "device evicts [20, 21, 22]: its host copy stays (now host only)" in evict_r3.narration
    [load] = [st for st in states if st.kind == "load"]
    assert load.narration.startswith("r4: load back 3 tokens (all or nothing)")
    assert "device evicts [13, 14]" in load.narration and "device evicts [10, 11, 12]" in load.narration
    assert s.counts == {"device evictions": 3, "demoted": 3, "deleted": 0, "host evictions": 0,
                        "tokens stored": 16, "tokens loaded": 3, "device hit tokens": 19, "host hit tokens": 3}
    assert states[-1].hits == 22 and states[-1].queries == sum(map(len, CHAT))
    assert states_by_key(s.tree) == {
        (1, 2, 3, 4): "device+host", (1, 2, 3, 4, 10, 11, 12): "host", (1, 2, 3, 4, 10, 11, 12, 13, 14): "host",
        (1, 2, 3, 4, 20, 21, 22): "device+host", (1, 2, 3, 4, 20, 21, 22, 23): "device+host",
        (1, 2, 3, 4, 30, 31, 32): "device+host"}


def test_the_three_policies_differ_as_the_chapter_says():
    runs = {p: TierStepper(CHAT, device_tokens=12, host_tokens=16, load_back_threshold=2, write_policy=p)
            for p in ("write_through", "write_through_selective", "write_back")}
    for s in runs.values():
        run_all(s)
    wt, sel, wb = (runs[p].counts for p in ("write_through", "write_through_selective", "write_back"))
    # selective: only [1, 2, 3, 4] and [10, 11, 12] were inserted twice; [20, 21, 22] had no host copy when evicted
    assert (sel["tokens stored"], sel["deleted"], sel["host hit tokens"]) == (7, 2, 0)
    # write-back copies only what the device evicts (with its ancestors): less than write-through, same hits
    assert wb["tokens stored"] == 12 < wt["tokens stored"] == 16
    assert wb["host hit tokens"] == wt["host hit tokens"] == 3
    narrations = [st.narration for st in run_all(TierStepper(CHAT, 12, 16, load_back_threshold=2,
                                                             write_policy="write_back"))]
    assert not any("back up" in n for n in narrations)                  # nothing is copied at insert
    assert any("written back first (write_back: the eviction waits)" in n for n in narrations)


def test_a_short_host_hit_is_recomputed():
    """Threshold 4: r4's host hit [20, 21, 22] is 3 tokens, so it is recomputed, and the insert
    gives the node its device copy back (its host copy stays)."""
    s = TierStepper(CHAT, device_tokens=12, host_tokens=16, load_back_threshold=4)
    states = run_all(s)
    [load] = [st for st in states if st.kind == "load"]
    assert load.narration == "r4: host hit of 3 tokens < load_back_threshold 4: not worth a copy, recompute it"
    assert "compute 4 tokens" in states[states.index(load) + 2].narration     # after the lock: the forward
    assert s.counts["tokens loaded"] == 0 and s.counts["host hit tokens"] == 0
    assert states_by_key(s.tree)[(1, 2, 3, 4, 20, 21, 22)] == "device+host"


def test_a_host_smaller_than_the_device_evicts_and_skips():
    """Host 8 < device 9 under write-through: the host holds copies of what is on the device, so
    it evicts host-only leaves as soon as there are some, and skips a backup when there are none."""
    s = TierStepper(CHAT, device_tokens=9, host_tokens=8, load_back_threshold=4)
    states = run_all(s)
    assert s.counts["host evictions"] == 3 and s.counts["demoted"] == 3 and s.counts["deleted"] == 1
    assert s.tree.num_backup_skipped == 1
    [skip] = [st for st in states if "no host room for 1 backup" in st.narration]
    assert skip.narration.startswith("r2: finishes; insert 9 tokens: new leaf [10, 11, 12, 13, 14]")
    ghost = next(st for st in states if any(k == "evict_host" for k, _ in st.events))
    data = next(d for k, d in ghost.events if k == "evict_host")
    assert "host evicts [10, 11, 12] (host only): gone" in ghost.narration
    assert f'n{data["node"]} [' in ghost.dot and "evicted from the host: gone" in ghost.dot
    assert f'n{data["node"]}' not in states[-1].dot


def test_copies_in_flight_are_drawn_until_acknowledged():
    s = TierStepper(CHAT, device_tokens=12, host_tokens=16, load_back_threshold=2)
    state = s.go_to(3)                                    # r0 inserted: its store queued
    [node] = [n for n in s.tree.nodes() if n is not s.tree.root]
    assert node.in_flight and node.lock_ref == 1
    line = node_line(state.dot, node.id)
    assert "store to the host in flight (queued)" in line and "dashed" in line and COLORS["protected"] in line
    state = s.step()                                      # ack
    assert not node.in_flight and node.lock_ref == 0
    assert "in flight" not in node_line(state.dot, node.id)
    assert "acknowledge 1 store (7 tokens)" in state.narration
    load = next(i for i in range(s.num_steps + 1) if s.go_to(i).kind == "load")
    loaded = [n for n in s.tree.nodes() if isinstance(n, HiNode) and n.in_flight]
    assert loaded and all("load to the device in flight (queued)" in node_line(s.state.dot, n.id) for n in loaded)
    s.go_to(load + 2)                                     # lock, then forward starts it
    assert all("load to the device in flight (started)" in node_line(s.state.dot, n.id) for n in loaded)


def test_bad_arguments():
    with pytest.raises(ValueError, match="write_policy"):
        TierStepper([[1]], 4, 4, write_policy="write_around")
    with pytest.raises(ValueError, match="device_tokens"):
        TierStepper([[1]], 0, 4)
    with pytest.raises(ValueError, match="host_tokens"):
        TierStepper([[1, 2]], 4, 3, page_size=2)
    with pytest.raises(ValueError, match="request 0 has 5 tokens; the device pool holds 4"):
        TierStepper([[1, 2, 3, 4, 5]], 4, 8)
    with pytest.raises(ValueError, match="load_back_threshold"):
        TierStepper([[1]], 4, 4, load_back_threshold=-1)


def longest_earlier_prefix(requests, i, page_size):
    best = 0
    for earlier in requests[:i]:
        n = 0
        while n < min(len(earlier), len(requests[i])) and earlier[n] == requests[i][n]:
            n += 1
        best = max(best, n - n % page_size)
    return best


@settings(max_examples=25, deadline=None)
@given(requests=st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=6), min_size=1, max_size=7),
       device_pages=st.integers(3, 8), host_pages=st.integers(1, 12), page_size=st.sampled_from([1, 2]),
       policy=st.sampled_from(["write_through", "write_through_selective", "write_back"]),
       threshold=st.integers(0, 3), back_to=st.integers(0, 200))
def test_every_step_is_consistent_and_drawn_as_it_is(requests, device_pages, host_pages, page_size, policy,
                                                     threshold, back_to):
    device, host = device_pages * page_size, host_pages * page_size
    requests = [r for r in requests if -(-len(r) // page_size) * page_size <= device] or [[1]]
    s = TierStepper(requests, device, host, page_size=page_size, write_policy=policy, load_back_threshold=threshold)
    dots = [s.state.dot]
    for _ in range(s.num_steps):
        state = s.step()
        tree, run = s.tree, s._run
        tree.check_invariants()
        # the device pool holds exactly the tree's device pages and the running request's
        in_tree = {v // page_size for n in tree.nodes() for v in n.value}
        held = {p for p in range(run.device.num_blocks) if run.device.ref_cnt[p]}
        running = {v // page_size for v in run.slots} if state.kind in ("forward",) else set()
        assert in_tree | running == held
        assert run.host.pages.num_free * page_size + tree.host_size == host
        for node in tree.nodes():
            if node is tree.root:
                continue
            line = node_line(state.dot, node.id)
            border, fill = TIER_COLORS[node.state]
            assert f'fillcolor="{fill}"' in line
            assert ("in flight" in line) == node.in_flight
        counts = s.counts
        assert counts["demoted"] == tree.num_demoted
        assert counts["device evictions"] == counts["demoted"] + counts["deleted"]
        assert counts["host hit tokens"] == tree.num_loaded_tokens
        queued = sum(len(c.src) for c in tree.copies.submitted if c.kind == "load")   # counted once started
        assert counts["tokens loaded"] == tree.num_loaded_tokens - queued
        dots.append(state.dot)
    assert s.tree.protected_size == 0 and not s.tree.copies.in_flight()   # every lock released, every copy acked
    index = back_to % (s.num_steps + 1)
    assert s.go_to(index).dot == dots[index]
    if policy != "write_through_selective" and host >= sum(map(len, requests)) and threshold <= page_size:
        # the host holds everything ever cached: every request hits its longest earlier prefix
        matches = [st for st in run_all(TierStepper(requests, device, host, page_size=page_size,
                                                    write_policy=policy, load_back_threshold=threshold))
                   if st.kind in ("forward",)]
        hits = [len(requests[i]) - int(re.search(r"compute (\d+) token", m.narration).group(1))
                for i, m in enumerate(matches)]
        assert hits == [longest_earlier_prefix(requests, i, page_size) for i in range(len(requests))]


def test_docstring_examples_and_static_html():
    from nano_engine.notebook import tier_stepper

    result = doctest.testmod(tier_stepper)
    assert result.failed == 0 and result.attempted > 0
    s = TierStepper(CHAT[:3], device_tokens=12, host_tokens=16)
    page = s.to_html()
    assert page.count('class="nano-stepper-frame"') == s.num_steps + 1
    assert "store to the host in flight (queued)" in page and "host only" in page
