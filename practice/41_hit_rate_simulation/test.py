"""Tests for exercise 41: hit_rate, by hand-worked workloads and a brute-force replay."""

import random

from solution_under_test import hit_rate

REPEAT = [[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 7], [1, 2, 3, 4, 5, 6]]   # 18 tokens


def common_prefix(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def brute_force(workload, method) -> float:
    """Compare each request with every earlier one, token by token."""
    hits = 0
    for i, request in enumerate(workload):
        longest = max((common_prefix(request, earlier) for earlier in workload[:i]), default=0)
        usable = min(longest, len(request) - 1)           # the last token is always computed
        hits += usable if method == "radix" else usable // method * method
    return hits / sum(len(r) for r in workload)


def close(got, expected) -> bool:
    return abs(got - expected) < 1e-12


def test_example_radix_counts_tokens():
    got = hit_rate(REPEAT, "radix")
    expected = 10 / 18
    assert close(got, expected), f"0 + 5 + 5 hit tokens of 18: expected {expected}, got {got}"


def test_example_blocks_count_whole_blocks():
    got = hit_rate(REPEAT, 4)
    expected = 8 / 18
    assert close(got, expected), f"0 + 4 + 4 of 18: expected {expected}, got {got}"


def test_exact_repeat_keeps_its_last_token_to_compute():
    got = hit_rate([[7, 8, 9], [7, 8, 9]], "radix")
    assert close(got, 2 / 6), f"expected {2 / 6}, got {got}"
    got = hit_rate([[7, 8, 9, 10], [7, 8, 9, 10]], 2)
    assert close(got, 2 / 8), f"the second request gives up its whole last block: expected {2 / 8}, got {got}"


def test_block_size_three():
    got = hit_rate(REPEAT, 3)
    assert close(got, 6 / 18), f"0 + 3 + 3 of 18: expected {6 / 18}, got {got}"


def test_matches_any_earlier_request():
    workload = [[1, 2, 3, 4], [9, 9], [1, 2, 3, 5]]
    got = hit_rate(workload, "radix")
    assert close(got, 3 / 10), f"the third request shares [1, 2, 3] with the first: expected {3 / 10}, got {got}"
    got = hit_rate(workload, 2)
    assert close(got, 2 / 10), f"expected {2 / 10}, got {got}"


def test_nothing_shared():
    assert hit_rate([[1, 2], [3, 4], [5]], "radix") == 0.0
    assert hit_rate([[4]], 1) == 0.0


def test_block_size_one_is_the_radix_rate():
    rng = random.Random(1081)
    workload = [[rng.randint(0, 2) for _ in range(rng.randint(1, 9))] for _ in range(20)]
    assert close(hit_rate(workload, 1), hit_rate(workload, "radix"))


def test_bad_input_is_an_error():
    for workload, method in [([], "radix"), ([[1, 2], []], "radix"), ([[1, 2]], 0), ([[1, 2]], -2),
                             ([[1, 2]], "hashed"), ([[1, 2]], True), ([[1, 2]], 2.0)]:
        try:
            hit_rate(workload, method)
        except ValueError:
            continue
        raise AssertionError(f"hit_rate({workload}, {method!r}) should raise ValueError")


def test_random_workloads_against_brute_force():
    rng = random.Random(108)
    for _ in range(200):
        prefixes = [[rng.randint(0, 3) for _ in range(rng.randint(0, 12))] for _ in range(3)]
        workload = [rng.choice(prefixes) + [rng.randint(0, 3) for _ in range(rng.randint(1, 6))]
                    for _ in range(rng.randint(1, 8))]
        for method in ("radix", 1, 2, 3, 5):
            got = hit_rate(workload, method)
            expected = brute_force(workload, method)
            assert close(got, expected), f"{method!r} on {workload}"
