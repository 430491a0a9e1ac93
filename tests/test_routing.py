"""The routers of nano_engine.routing against brute-force references on hand-built indexes and loads."""

import copy
import math
import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nano_engine.radix import RadixCache
from nano_engine.routing import (
    POLICIES,
    ApproxTreePolicy,
    DynamoPolicy,
    LlmdPolicy,
    RoutingRequest,
    make_policy,
    softmax_sample,
)


class FakeIndex:
    """hash -> {worker: {mediums}}, the one method the policies read."""

    def __init__(self, holdings: dict[int, dict[str, list]]) -> None:
        self.table: dict[object, dict[int, set[str]]] = {}
        for worker, by_medium in holdings.items():
            for medium, hashes in by_medium.items():
                for h in hashes:
                    self.table.setdefault(h, {}).setdefault(worker, set()).add(medium)

    def workers_for(self, block_hash):
        return self.table.get(block_hash, {})


def request(num_blocks: int, block_size: int = 4, extra_tokens: int = 0) -> RoutingRequest:
    hashes = [f"h{i}" for i in range(num_blocks)]
    tokens = list(range(num_blocks * block_size + extra_tokens))
    return RoutingRequest(tokens, hashes, len(tokens), block_size)


def brute_overlap(holdings, worker, hashes, medium="GPU"):
    held = set(holdings.get(worker, {}).get(medium, []))
    n = 0
    for h in hashes:
        if h not in held:
            break
        n += 1
    return n


def load(policy, worker, blocks, n=1):
    for _ in range(n):
        policy.on_routed(worker, RoutingRequest([0], [], blocks * 4, 4))


def test_dynamo_matches_the_formula_and_takes_the_argmin():
    rng = random.Random(1)
    for trial in range(200):
        n = rng.randint(2, 5)
        req = request(rng.randint(1, 12), extra_tokens=rng.randint(0, 3))
        holdings = {w: {"GPU": req.block_hashes[:rng.randint(0, len(req.block_hashes))]} for w in range(n)}
        weight = rng.choice([0.0, 0.5, 1.0, 2.0])
        policy = DynamoPolicy(n, FakeIndex(holdings), overlap_score_weight=weight, seed=trial)
        for w in range(n):
            load(policy, w, rng.randint(0, 20))
        expected = []
        for w in range(n):
            overlap = brute_overlap(holdings, w, req.block_hashes)
            prefill = (req.num_tokens - overlap * 4) / 4
            decode = policy.loads.active_blocks[w] + math.ceil(req.num_tokens / 4)
            expected.append(weight * prefill + decode)
        assert policy.logits(req) == pytest.approx(expected)
        assert expected[policy.pick(req)] == min(expected)


def test_dynamo_design_doc_example():
    # Dynamo's router design doc: overlaps 2/5/8 of 10 blocks, decode 10/5/9 -> costs 18/10/11 -> worker 1.
    req = request(10, block_size=1)
    holdings = {0: {"GPU": req.block_hashes[:2]}, 1: {"GPU": req.block_hashes[:5]}, 2: {"GPU": req.block_hashes[:8]}}
    policy = DynamoPolicy(3, FakeIndex(holdings))
    for w, decode in enumerate((10, 5, 9)):
        policy.loads.active_blocks[w] = decode - req.num_blocks   # decode_blocks counts this request too
    assert policy.logits(req) == [18, 10, 11]
    assert policy.pick(req) == 1


def test_dynamo_overlap_counts_device_blocks_only_and_stops_at_a_hole():
    req = request(4)
    h = req.block_hashes
    holdings = {0: {"GPU": [h[0], h[2], h[3]]}, 1: {"CPU": h}, 2: {"GPU": h[:2], "CPU": h[2:]}}
    policy = DynamoPolicy(3, FakeIndex(holdings))
    prefill = [(16 - 4 * o) / 4 for o in (1, 0, 2)]
    assert policy.logits(req) == [p + 4 for p in prefill]


def test_softmax_sample_against_numpy_reference():
    rng = random.Random(0)
    for _ in range(100):
        costs = [rng.uniform(0, 50) for _ in range(rng.randint(2, 6))]
        t = rng.choice([0.1, 0.5, 1.0, 3.0])
        norm = (np.array(costs) - min(costs)) / (max(costs) - min(costs))
        p = np.exp(-norm / t)
        cdf = np.cumsum(p / p.sum())
        for s in np.linspace(0.001, 0.999, 37):
            assert softmax_sample(costs, t, float(s)) == int(np.searchsorted(cdf, s))
    assert [softmax_sample([3.0, 3.0, 3.0], 1.0, s) for s in (0.1, 0.5, 0.9)] == [0, 1, 2]
    with pytest.raises(ValueError, match="temperature"):
        softmax_sample([1.0, 2.0], 0.0, 0.5)


def test_dynamo_temperature_zero_is_argmin_and_high_temperature_spreads():
    req = request(8)
    holdings = {0: {"GPU": req.block_hashes}, 1: {}, 2: {}}
    cold = DynamoPolicy(3, FakeIndex(holdings), temperature=0.0, seed=3)
    assert {cold.pick(req) for _ in range(50)} == {0}
    hot = DynamoPolicy(3, FakeIndex(holdings), temperature=5.0, seed=3)
    picks = [hot.pick(req) for _ in range(600)]
    assert set(picks) == {0, 1, 2}
    assert picks.count(0) > picks.count(1)    # the cheapest is still the likeliest


def brute_llmd(holdings, hashes, in_flight, active_blocks, capacity, tiers=None, weights=None):
    tiers = tiers or {"GPU": 1.0, "CPU": 0.8}     # any other medium: 1.0 (llm-d's getMaxWeight)
    weights = weights or {"prefix": 2.0, "queue": 1.0, "kv-cache": 1.0}
    n = len(in_flight)
    raw = {}
    for w in range(n):
        s, held = 0.0, holdings.get(w, {})
        for h in hashes:
            best = max((tiers.get(m, 1.0) for m, hs in held.items() if h in hs), default=None)
            if best is None:
                break
            s += best
        if s > 0:
            raw[w] = s
    prefix = []
    for w in range(n):
        if w not in raw:
            prefix.append(0.0)
        elif max(raw.values()) == min(raw.values()):
            prefix.append(1.0)
        else:
            prefix.append((raw[w] - min(raw.values())) / (max(raw.values()) - min(raw.values())))
    qmax, qmin = max(in_flight), min(in_flight)
    queue = [1.0 if qmax == qmin else (qmax - q) / (qmax - qmin) for q in in_flight]
    kv = [1 - min(1.0, b / capacity) for b in active_blocks]
    return [weights["prefix"] * prefix[w] + weights["queue"] * queue[w] + weights["kv-cache"] * kv[w]
            for w in range(n)]


def test_llmd_matches_the_weighted_scorers():
    rng = random.Random(7)
    for trial in range(200):
        n = rng.randint(2, 5)
        req = request(rng.randint(1, 10))
        h = req.block_hashes
        holdings = {}
        for w in range(n):
            cut = rng.randint(0, len(h))
            split = rng.randint(0, cut)
            holdings[w] = {"GPU": [x for x in h[:split] if rng.random() < 0.9], "CPU": h[split:cut],
                           "STORAGE": [x for x in h if rng.random() < 0.3]}
        policy = LlmdPolicy(n, FakeIndex(holdings), capacity_blocks=40, seed=trial)
        for w in range(n):
            load(policy, w, rng.randint(0, 12), n=rng.randint(0, 3))
        expected = brute_llmd(holdings, h, policy.loads.in_flight, policy.loads.active_blocks, 40)
        assert policy.totals(req) == pytest.approx(expected)
        assert expected[policy.pick(req)] == pytest.approx(max(expected))


def test_llmd_cpu_tier_weighs_less_than_gpu():
    req = request(5)
    holdings = {0: {"GPU": req.block_hashes}, 1: {"CPU": req.block_hashes}, 2: {"GPU": req.block_hashes[:3]}}
    policy = LlmdPolicy(3, FakeIndex(holdings), capacity_blocks=100)
    # raw 5.0, 4.0, 3.0 -> normalised 1, 0.5, 0; equal loads.
    assert policy.scores(req)["prefix"] == pytest.approx([1.0, 0.5, 0.0])
    assert policy.pick(req) == 0


def test_llmd_a_block_on_another_medium_keeps_the_run_going():
    """llm-d (LongestPrefixScorer at a378f5b): a pod stays in the run while it holds the key in any
    tier, and a tier without a configured weight (STORAGE) counts 1.0."""
    req = request(4)
    h = req.block_hashes
    holdings = {0: {"GPU": [h[0], h[2], h[3]], "STORAGE": [h[1]]}, 1: {"GPU": h[:1], "CPU": h[1:2]},
                2: {"CPU": [h[0]], "STORAGE": [h[0], h[1]]}}
    policy = LlmdPolicy(3, FakeIndex(holdings), capacity_blocks=100)
    # raw: 1 + 1 (storage) + 1 + 1 = 4; 1 + 0.8 = 1.8; max(0.8, 1.0) + 1.0 = 2.0
    assert policy.scores(req)["prefix"] == pytest.approx([1.0, 0.0, (2.0 - 1.8) / (4 - 1.8)])
    # Dynamo's overlap is the leading device run: the STORAGE block ends it
    assert DynamoPolicy(3, FakeIndex(holdings)).logits(req) == [(16 - 4) / 4 + 4, (16 - 4) / 4 + 4, 16 / 4 + 4]


def test_dynamo_breaks_ties_uniformly_at_random_and_seeded():
    """Dynamo at 01690d4 (select_worker, reservoir sampling): tied minima are equally likely."""
    req = request(4)
    holdings = {w: {"GPU": req.block_hashes[:2]} for w in (0, 2, 3)}      # workers 0, 2, 3 tie; 1 costs more
    policy = DynamoPolicy(4, FakeIndex(holdings), seed=11)
    sequence = [policy.pick(req) for _ in range(3000)]
    picks = Counter(sequence)
    assert set(picks) == {0, 2, 3}, picks
    for w in (0, 2, 3):     # 1000 expected each; 5 standard deviations is +-129
        assert 870 < picks[w] < 1130, (w, picks)
    again = DynamoPolicy(4, FakeIndex(holdings), seed=11)
    assert [again.pick(req) for _ in range(3000)] == sequence, "seeded: the same draws"


def test_cache_blind_policies():
    req = request(2)
    rr = make_policy("round-robin", 3)
    assert [rr.route(req) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    ll = make_policy("least-loaded", 3)
    load(ll, 0, 1, n=2)
    load(ll, 1, 1, n=1)
    assert ll.pick(req) == 2
    ll.on_routed(2, req)
    ll.on_routed(2, req)
    assert ll.pick(req) == 1
    rnd = make_policy("random", 4, seed=5)
    picks = [rnd.route(req) for _ in range(400)]
    assert set(picks) == {0, 1, 2, 3}
    again = make_policy("random", 4, seed=5)
    assert [again.pick(req) for _ in range(400)] == picks      # seeded: the same draws


A, B, C = list(range(100, 140)), list(range(200, 240)), list(range(300, 340))


def tokens(prompt) -> RoutingRequest:
    return RoutingRequest.of(prompt)


def test_approx_affinity_then_smallest_tree():
    policy = ApproxTreePolicy(3, cache_threshold=0.5)
    assert policy.route(tokens(A + [1])) == 0          # nothing cached anywhere: smallest tree (ties: index)
    assert policy.route(tokens(B + [1])) == 1          # A's worker is no longer the smallest
    assert policy.route(tokens(A + [2])) == 0          # 40 of 41 tokens match on worker 0
    assert policy.route(tokens(A[:10] + C)) == 2       # 10 / 50 = 0.2 <= threshold: smallest tree
    assert policy.reasons == {"smallest": 3, "affinity": 1}
    assert policy.match_lengths(tokens(A + [3])) == [40, 0, 10]
    assert policy.loads.routed == [2, 1, 1]


def test_approx_sends_to_the_least_loaded_when_imbalanced_and_records_it_there():
    policy = ApproxTreePolicy(2, cache_threshold=0.5, balance_abs_threshold=2, balance_rel_threshold=1.5)
    for i in range(3):
        assert policy.route(tokens(A + [i])) == 0      # affinity: gap 3 - 0 > 2 only after the third
    assert policy.is_imbalanced()
    assert policy.route(tokens(A + [9])) == 1 and policy.reasons["balance"] == 1
    assert policy.match_lengths(tokens(A + [9, 5]))[1] == 41     # the prompt is in worker 1's tree now
    # Both conditions are needed: a big gap is fine if the relative one is small.
    relaxed = ApproxTreePolicy(2, balance_abs_threshold=2, balance_rel_threshold=1.5)
    relaxed.loads.in_flight[:] = [10, 7]
    assert not relaxed.is_imbalanced()


def test_approx_counts_a_requests_load_once():
    """The balance rule reads the one load every policy keeps (``loads.in_flight``): a router
    restarted with the old loads (cluster.py hands them over) balances on them at once."""
    policy = ApproxTreePolicy(2, balance_abs_threshold=2, balance_rel_threshold=1.5)
    first = policy.route(tokens(A + [1]))
    assert policy.route(tokens(A + [2])) == first, "affinity"
    policy.loads.in_flight[first] += 10                # requests still in flight from before a restart
    assert policy.route(tokens(A + [3])) == 1 - first, "the balance rule sees the handed-over load"
    assert policy.reasons["balance"] == 1
    assert not hasattr(policy, "tree_router"), "no second router inside, no second count"


def test_approximate_trees_are_trimmed_least_recently_used_first():
    policy = ApproxTreePolicy(1, tree_capacity=100)
    policy.route(tokens(A + [1]))                      # 41 tokens
    policy.route(tokens(B + [1]))                      # 82
    policy.route(tokens(A + [2]))                      # A is fresh again; 83
    policy.route(tokens(C + [1]))                      # 124 > 100: B's branch (least recent) goes
    assert policy.trees[0].total_size() <= 100
    assert [policy.match_lengths(tokens(x)) for x in (A, B, C)] == [[40], [0], [40]]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=12), min_size=1, max_size=8),
       st.lists(st.integers(0, 3), max_size=14), st.sampled_from([1, 2, 3]))
def test_match_length_is_match_prefix_without_side_effects(inserted, key, page_size):
    tree = RadixCache(page_size=page_size)
    slot = 0
    for prompt in inserted:
        n = len(prompt) // page_size * page_size
        tree.insert(prompt, list(range(slot, slot + n)) + [0] * (len(prompt) - n))
        slot += n
    before = [(n.id, n.key, n.last_access) for n in tree.nodes()]
    length = tree.match_length(key)
    assert [(n.id, n.key, n.last_access) for n in tree.nodes()] == before      # nothing changed
    assert length == len(copy.deepcopy(tree).match_prefix(key)[0])


def test_one_name_per_policy():
    """make_policy knows each policy by one name; chapter 05's old spellings are not names."""
    assert POLICIES == ("random", "round-robin", "least-loaded", "approx", "dynamo", "llm-d")
    for old in ("round_robin", "least_load", "cache_aware"):
        with pytest.raises(ValueError, match="unknown router"):
            make_policy(old, 2)
    assert {make_policy(name, 2, index=FakeIndex({})).name for name in POLICIES} == set(POLICIES)


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown router"):
        make_policy("sticky", 2)
    with pytest.raises(ValueError, match="index"):
        make_policy("dynamo", 2)
    with pytest.raises(ValueError, match="temperature"):
        DynamoPolicy(2, FakeIndex({}), temperature=-1)
    with pytest.raises(ValueError, match="num_workers"):
        make_policy("random", 0)
    policy = make_policy("round-robin", 2)
    with pytest.raises(ValueError, match="no request in flight"):
        policy.on_finished(0, request(1))
    assert set(POLICIES) == {"random", "round-robin", "least-loaded", "approx", "dynamo", "llm-d"}


@pytest.mark.parametrize("argv, fragment", [
    (["--instances", "0"], "--instances must be >= 1"),
    (["--restart-instance", "4@3"], "no instance 4"),
    (["--restart-instance", "1-3"], "write K@T"),
    (["--capacity", "inf"], "finite"),
    (["--capacity", "100"], "capacity_tokens must be an integer >= 512"),
    (["--drop-rate", "1"], "--drop-rate must be in [0, 1)"),
    (["--requests", "5", "--restart-router", "5"], "past the trace's last"),
    (["--trace", "no/such/file.jsonl"], "no such file"),
    (["--router", "llm-d", "--router-temperature", "1"], "apply to --router dynamo"),
    (["--router", "dynamo", "--router-temperature", "-1"], "temperature must be"),
    (["--router", "dynamo", "--overlap-score-weight", "nan"], "overlap_score_weight must be"),
])
def test_cluster_command_refuses_bad_arguments_before_starting_anything(capsys, argv, fragment):
    from nano_engine.__main__ import main

    assert main(["cluster", *argv]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == "" and len(lines) == 1 and lines[0].startswith("nano-engine cluster: error: "), captured.err
    assert fragment in lines[0], lines[0]
