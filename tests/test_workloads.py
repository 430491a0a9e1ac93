"""Tests for nano_engine.workloads: the chapter's streams and table, brute-force hit rates, and the
bounded-capacity variant."""

import random

import pytest

from nano_engine.replay import ReplayCache
from nano_engine.workloads import (
    CHAPTER_METHODS,
    CHAPTER_TABLE,
    chapter_workloads,
    few_shot,
    hit_rate,
    hit_rate_table,
    multi_tenant,
    multi_turn,
    parallel_sampling,
    shared_system_prompt,
    unique_tokens,
)


def chapter_generator_with_global_random():
    """The chapter's generator as printed: global ``random`` seeded with 0, calls in its order."""
    state = random.getstate()
    try:
        random.seed(0)

        def rand_tokens(n):
            return [random.randrange(1000, 50000) for _ in range(n)]

        system = rand_tokens(1000)
        shared_system = [system + rand_tokens(random.randint(20, 200)) for _ in range(100)]
        multi = []
        for _ in range(20):
            history = rand_tokens(300)
            for _ in range(8):
                history = history + rand_tokens(random.randint(10, 60))
                multi.append(list(history))
                history = history + rand_tokens(random.randint(50, 300))
        examples, header = [rand_tokens(random.randint(100, 200)) for _ in range(5)], rand_tokens(37)
        shots = [header + sum(examples[:random.randint(2, 5)], []) + rand_tokens(random.randint(20, 80))
                 for _ in range(100)]
        parallel = []
        for _ in range(30):
            problem = rand_tokens(random.randint(80, 400))
            parallel += [problem + rand_tokens(1) for _ in range(8)]
        return [shared_system, multi, shots, parallel]
    finally:
        random.setstate(state)


def lcp(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def brute_force_hit_rate(workload, method):
    """Unbounded cache, by definition: a request hits the longest prefix of its first len - 1
    tokens that some earlier request holds (for blocks: rounded down to whole blocks)."""
    hits = 0
    for j, req in enumerate(workload):
        best = max((lcp(prev, req[:-1]) for prev in workload[:j]), default=0)
        hits += best if method == "radix" else best // method * method
    return hits / sum(len(r) for r in workload)


def small_workloads(seed):
    rng = random.Random(seed)
    return {
        "shared": shared_system_prompt(rng, num_requests=12, system_len=70, question_len=(1, 30)),
        "multi": multi_turn(rng, num_conversations=3, num_turns=4, first_len=20, user_len=(1, 20),
                            answer_len=(5, 40)),
        "few-shot": few_shot(rng, num_requests=12, example_len=(10, 40), header_len=5),
        "parallel": parallel_sampling(rng, num_questions=4, num_samples=3, question_len=(10, 90)),
        "tenants": multi_tenant(rng, num_tenants=3, num_users=6, num_turns=2, system_len=(30, 90),
                                user_len=(3, 20), answer_len=(3, 20)),
    }


# ----------------------------------------------------------------------------- the chapter


def test_chapter_workloads_are_the_chapters_token_streams():
    assert list(chapter_workloads(seed=0).values()) == chapter_generator_with_global_random()


def test_chapter_table_reproduced_to_a_tenth_of_a_point():
    table = hit_rate_table(chapter_workloads(seed=0), CHAPTER_METHODS)
    assert list(table) == list(CHAPTER_TABLE)
    for name, rates in table.items():
        assert [round(100 * r, 1) for r in rates] == list(CHAPTER_TABLE[name]), name


def test_generators_use_their_own_random_state():
    random.seed(123)
    before = random.random()
    random.seed(123)
    a = chapter_workloads(seed=5)
    assert random.random() == before                  # the global generator was not touched
    assert chapter_workloads(seed=5) == a              # same seed, same workload
    assert chapter_workloads(seed=6) != a
    assert multi_tenant(3) == multi_tenant(random.Random(3))


# ----------------------------------------------------------------------------- hit rates


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hit_rate_matches_brute_force(seed):
    for name, workload in small_workloads(seed).items():
        for method in ("radix", 1, 4, 16, 64):
            assert hit_rate(workload, method) == pytest.approx(brute_force_hit_rate(workload, method)), (name, method)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_radix_at_least_block16_at_least_block64(seed):
    workloads = chapter_workloads(seed)
    workloads["multi-tenant"] = multi_tenant(seed)
    for name, rates in hit_rate_table(workloads, ("radix", 16, 64)).items():
        radix, b16, b64 = rates
        assert radix >= b16 >= b64, (seed, name, rates)
        assert radix > b64, (seed, name, rates)   # every shape leaves partial blocks behind


def test_last_token_never_hits_and_hits_count_over_all_tokens():
    # The same request twice: the second matches all but its last token.
    assert hit_rate([[1, 2, 3, 4], [1, 2, 3, 4]], "radix") == 3 / 8
    assert hit_rate([[1, 2, 3, 4], [1, 2, 3, 4]], 2) == 2 / 8          # 3 tokens -> 1 full block
    assert hit_rate([[1, 2, 3, 4], [1, 2, 3, 4, 5]], 2) == 4 / 9


# ----------------------------------------------------------------------------- bounded


def test_bounded_equals_unbounded_with_room_for_everything():
    workloads = chapter_workloads(0)
    workloads["multi-tenant"] = multi_tenant(0)
    for name, w in workloads.items():
        room = sum(len(r) for r in w)
        for method in CHAPTER_METHODS:
            assert hit_rate(w, method, capacity=room) == hit_rate(w, method), (name, method)
        # The tree needs no more than the distinct tokens.
        assert hit_rate(w, "radix", capacity=unique_tokens(w)) == hit_rate(w, "radix"), name


@pytest.mark.parametrize("seed", [0, 1])
def test_bounded_hit_rate_degrades_monotonically(seed):
    workloads = {"few-shot": chapter_workloads(seed)["few-shot"],
                 "multi-tenant": multi_tenant(seed, num_users=64, num_turns=3)}
    for name, w in workloads.items():
        top = unique_tokens(w)
        capacities = [max(64, top * k // 10) for k in range(1, 11)]
        for method in CHAPTER_METHODS:
            rates = [hit_rate(w, method, c) for c in capacities]
            assert all(a <= b for a, b in zip(rates, rates[1:])), (name, method, rates)
            assert rates[0] < rates[-1], (name, method, rates)   # pressure really costs hits


def test_bounded_cache_evicts_least_recently_used():
    a, b, c = [1] * 8 + [2], [3] * 8 + [4], [5] * 8 + [6]
    # Room for two requests: a, b, a hits a; c evicts b (older than a); then a hits, b misses.
    cache = ReplayCache("radix", 18)
    assert [cache.serve(r) for r in (a, b, a, c, a, b)] == [0, 0, 8, 0, 8, 0]
    pool_cache = ReplayCache("hashed", 12 + 8, block_size=4)   # two requests of 3 blocks of 4 + 2 spare
    assert [pool_cache.serve(r) for r in (a, b, a, c, a, b)] == [0, 0, 8, 0, 8, 0]
    # Room for one: alternating prefixes never hit.
    assert hit_rate([a, b] * 4, "radix", capacity=9) == 0
    assert hit_rate([a, b] * 4, 4, capacity=12) == 0
    assert hit_rate([a, b] * 4, 4, capacity=24) > 0


def test_request_longer_than_the_cache_keeps_its_head():
    long = list(range(100))
    assert hit_rate([long, long], "radix", capacity=40) == 40 / 200
    assert hit_rate([long, long], 16, capacity=40) == 32 / 200    # 2 blocks of 16 fit


def test_bad_arguments():
    with pytest.raises(ValueError, match="method"):
        hit_rate([[1, 2]], "hash")
    with pytest.raises(ValueError, match="method"):
        hit_rate([[1, 2]], 0)
    with pytest.raises(ValueError, match="capacity"):
        hit_rate([[1, 2]], 16, capacity=8)
    with pytest.raises(ValueError, match="capacity"):
        hit_rate([[1, 2]], "radix", capacity=0)
    with pytest.raises(ValueError, match="empty"):
        hit_rate([], "radix")
    with pytest.raises(ValueError, match="at least 1 token"):
        hit_rate([[1], []], "radix")
    with pytest.raises(ValueError, match="capacity_tokens"):
        ReplayCache("hashed")


def test_a_capacity_beyond_the_workload_builds_only_what_it_can_fill():
    """``hitrate --capacity 1e12``: the old replay asked for a pool of 62 billion blocks."""
    w = chapter_workloads(0)["few-shot"]
    assert hit_rate(w, 16, capacity=10**12) == hit_rate(w, 16)
    assert hit_rate(w, "radix", capacity=10**12) == hit_rate(w, "radix")


def test_the_old_replay_cache_still_works_with_a_warning():
    import nano_engine.workloads as workloads_module

    with pytest.warns(DeprecationWarning, match="moved to nano_engine.replay.ReplayCache"):
        old = workloads_module.ReplayCache(4, 20)
    a, b = [1] * 8 + [2], [3] * 8 + [4]
    assert [old.serve(r) for r in (a, b, a)] == [0, 0, 8] and (old.hits, old.tokens) == (8, 27)


# ----------------------------------------------------------------------------- the command


def test_hitrate_command_prints_the_chapter_table(capsys):
    from nano_engine.__main__ import main
    assert main(["hitrate"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["workload", "radix", "block", "16", "block", "64"]
    for line, (name, expected) in zip(lines[1:], CHAPTER_TABLE.items()):
        assert line.startswith(name) and line.split()[-3:] == [f"{x:.1f}%" for x in expected]


def test_hitrate_command_bounded_curve_and_plot(capsys, tmp_path):
    from nano_engine.__main__ import main
    figure = tmp_path / "hit_rates.png"
    assert main(["hitrate", "--capacity", "4096", "512", "--plot", str(figure)]) == 0
    out = capsys.readouterr().out
    assert "capacity 512, 4096 tokens" in out
    few_shot_radix = next(line for line in out.splitlines() if line.strip().startswith("few-shot, radix"))
    w = chapter_workloads(0)["few-shot"]
    assert few_shot_radix.split()[-2:] == [f"{100 * hit_rate(w, 'radix', c):.1f}%" for c in (512, 4096)]
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_module_examples():
    import doctest

    from nano_engine import workloads
    result = doctest.testmod(workloads)
    assert result.attempted >= 2 and result.failed == 0
