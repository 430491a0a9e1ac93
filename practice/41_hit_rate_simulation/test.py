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


class Approx:
    """A number within 1e-12 of the exact ratio: `got == Approx(x)` reads "expected: x ± 1e-12"."""

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return isinstance(other, (int, float)) and not isinstance(other, bool) and abs(other - self.value) < 1e-12

    def __repr__(self):
        return f"{self.value!r} ± 1e-12"


def test_example_radix_counts_tokens():
    got = hit_rate(REPEAT, "radix")
    assert got == Approx(10 / 18), "radix: 0 + 5 + 5 hit tokens of 18"


def test_example_blocks_count_whole_blocks():
    got = hit_rate(REPEAT, 4)
    assert got == Approx(8 / 18), "blocks of 4: 0 + 4 + 4 of 18, whole blocks only"


def test_exact_repeat_keeps_its_last_token_to_compute():
    got = hit_rate([[7, 8, 9], [7, 8, 9]], "radix")
    assert got == Approx(2 / 6), "an exact repeat still computes its last token: 2 of 6"
    got = hit_rate([[7, 8, 9, 10], [7, 8, 9, 10]], 2)
    assert got == Approx(2 / 8), "the second request gives up its whole last block: 2 of 8"


def test_block_size_three():
    got = hit_rate(REPEAT, 3)
    assert got == Approx(6 / 18), "blocks of 3: 0 + 3 + 3 of 18"


def test_matches_any_earlier_request():
    workload = [[1, 2, 3, 4], [9, 9], [1, 2, 3, 5]]
    got = hit_rate(workload, "radix")
    assert got == Approx(3 / 10), "the third request shares [1, 2, 3] with the first, not the second: 3 of 10"
    got = hit_rate(workload, 2)
    assert got == Approx(2 / 10), "blocks of 2: the shared [1, 2, 3] is one whole block, 2 of 10"


def test_nothing_shared():
    got = hit_rate([[1, 2], [3, 4], [5]], "radix")
    assert got == 0.0, "no request shares a first token with an earlier one: 0"
    got = hit_rate([[4]], 1)
    assert got == 0.0, "one 1-token request: its only token is its last, 0"


def test_a_one_token_request_never_hits():
    got = hit_rate([[4], [4], [4]], "radix")
    assert got == 0.0, "a 1-token request's only token is its last one: it is always computed"
    got = hit_rate([[4, 5], [4]], 1)
    assert got == 0.0, "[4] is cached, but a 1-token request computes its token anyway"


def test_block_size_one_is_the_radix_rate():
    rng = random.Random(1081)
    workload = [[rng.randint(0, 2) for _ in range(rng.randint(1, 9))] for _ in range(20)]
    got = hit_rate(workload, 1)
    assert got == Approx(hit_rate(workload, "radix")), f"blocks of 1 token are a radix tree, on {workload}"


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
            assert got == Approx(brute_force(workload, method)), f"method {method!r} on {workload}"
