"""Tests for exercise 01: rms_norm and apply_rope, against formulas written out element by element."""

import math

import torch
from solution_under_test import apply_rope, rms_norm


def rms_norm_reference(x, weight, eps):
    """One vector at a time, with plain Python floats."""
    rows = x.reshape(-1, x.shape[-1]).tolist()
    out = []
    for row in rows:
        scale = 1.0 / math.sqrt(sum(v * v for v in row) / len(row) + eps)
        out.append([v * scale * w for v, w in zip(row, weight.tolist(), strict=False)])
    return torch.tensor(out, dtype=x.dtype).reshape(x.shape)


def rope_reference(x, positions, theta):
    """Pair i is (x[i], x[i + d/2]), turned by position * theta ** (-2i / d)."""
    out = x.clone()
    num_tokens, num_heads, d = x.shape
    half = d // 2
    for t in range(num_tokens):
        for h in range(num_heads):
            for i in range(half):
                angle = int(positions[t]) * theta ** (-2 * i / d)
                a, b = float(x[t, h, i]), float(x[t, h, i + half])
                out[t, h, i] = a * math.cos(angle) - b * math.sin(angle)
                out[t, h, i + half] = b * math.cos(angle) + a * math.sin(angle)
    return out


def max_diff(a, b):
    return float((a - b).abs().max())


def rope_tolerance(x, positions):
    """What the statement promises: angles computed in float32 (the hint's torch.arange, and
    transformers' Qwen3) are accepted. Such an angle is off by up to ~2.4e-7 x position radians,
    and float32 cos/sin add ~1.2e-7; the output error is at most that times |x|."""
    largest = max(1.0, float(positions.abs().max()))
    return 1e-6 + 4e-7 * largest * max(1.0, float(x.abs().max()))


def test_example_rms_norm_of_3_4():
    got = rms_norm(torch.tensor([[3.0, 4.0]], dtype=torch.float64), torch.ones(2, dtype=torch.float64), eps=0.0)
    rms = math.sqrt((9 + 16) / 2)
    expected = torch.tensor([[3 / rms, 4 / rms]], dtype=torch.float64)
    assert max_diff(got, expected) < 1e-12, f"expected {expected.tolist()}, got {got.tolist()}"


def test_example_rope_turns_pair_0_and_half():
    x = torch.tensor([[[1.0, 0.0, 0.0, 0.0]]], dtype=torch.float64)
    got = apply_rope(x, torch.tensor([1]), theta=10_000.0)
    expected = torch.tensor([[[math.cos(1), 0.0, math.sin(1), 0.0]]], dtype=torch.float64)
    assert max_diff(got, expected) < rope_tolerance(x, torch.tensor([1])), f"expected {expected.tolist()}, got {got.tolist()}"


def test_rms_norm_matches_the_formula():
    gen = torch.Generator().manual_seed(100)
    for shape in [(1, 8), (3, 5, 16), (7,)]:
        x = torch.randn(shape, generator=gen, dtype=torch.float64) * 3 + 1   # a nonzero mean on purpose
        weight = torch.randn(shape[-1], generator=gen, dtype=torch.float64)
        for eps in (1e-6, 0.5):
            got = rms_norm(x, weight, eps)
            expected = rms_norm_reference(x, weight, eps)
            assert got.shape == expected.shape, "the output has the input's shape"
            assert max_diff(got, expected) < 1e-9, f"shape {shape}, eps {eps}"


def test_rms_norm_keeps_a_zero_vector_finite():
    got = rms_norm(torch.zeros(2, 4), torch.ones(4), eps=1e-6)
    assert torch.equal(got, torch.zeros(2, 4)), f"eps keeps the division finite: got {got.tolist()}"


def test_rms_norm_keeps_the_dtype():
    x = torch.randn(3, 8, dtype=torch.float32)
    assert rms_norm(x, torch.ones(8), 1e-6).dtype == torch.float32, "a float32 input gives a float32 output"
    got = rms_norm(x.to(torch.bfloat16), torch.ones(8, dtype=torch.bfloat16), 1e-6)
    assert got.dtype == torch.bfloat16, "a bfloat16 input gives a bfloat16 output"
    assert got.shape == x.shape, "the output has the input's shape"


def test_rope_keeps_the_shape_and_dtype():
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        x = torch.randn(3, 2, 8).to(dtype)
        got = apply_rope(x, torch.tensor([0, 5, 9]), 10_000.0)
        assert (got.shape, got.dtype) == (x.shape, dtype), f"a {dtype} input"
        reference = rope_reference(x.double(), torch.tensor([0, 5, 9]), 10_000.0)
        assert max_diff(got.double(), reference) < (1e-5 if dtype != torch.bfloat16 else 0.1), f"a {dtype} input"


def test_rope_matches_the_formula():
    gen = torch.Generator().manual_seed(101)
    for theta in (10_000.0, 1_000_000.0):
        x = torch.randn(5, 3, 8, generator=gen, dtype=torch.float64)
        positions = torch.tensor([0, 1, 7, 100, 4096])
        got = apply_rope(x, positions, theta)
        expected = rope_reference(x, positions, theta)
        assert got.shape == x.shape, "the output has the input's shape"
        assert max_diff(got, expected) < rope_tolerance(x, positions), f"theta {theta}"


def test_rope_at_position_zero_changes_nothing():
    x = torch.randn(2, 4, 6, dtype=torch.float64)
    assert max_diff(apply_rope(x, torch.tensor([0, 0]), 10_000.0), x) < 1e-12, (
        "position 0 is a rotation by 0: nothing changes")


def test_rope_preserves_norms():
    gen = torch.Generator().manual_seed(102)
    x = torch.randn(6, 2, 16, generator=gen, dtype=torch.float64)
    got = apply_rope(x, torch.arange(0, 60, 10), 10_000.0)
    assert max_diff(got.norm(dim=-1), x.norm(dim=-1)) < 1e-5, "a rotation does not change lengths"


def test_rope_score_depends_only_on_the_distance():
    gen = torch.Generator().manual_seed(103)
    q = torch.randn(1, 1, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 1, 8, generator=gen, dtype=torch.float64)

    def score(m, n):
        return float((apply_rope(q, torch.tensor([m]), 10_000.0) * apply_rope(k, torch.tensor([n]), 10_000.0)).sum())

    assert abs(score(5, 2) - score(105, 102)) < 1e-3, "q at 5, k at 2 vs q at 105, k at 102: same distance"
    assert abs(score(5, 2) - score(2, 5)) > 1e-2, "distance +3 and -3 should differ"


def test_rope_bad_input_is_an_error():
    for x, positions in [(torch.zeros(2, 1, 5), torch.tensor([0, 1])),    # odd head_dim
                         (torch.zeros(2, 1, 4), torch.tensor([0, 1, 2]))]:  # one position too many
        try:
            apply_rope(x, positions, 10_000.0)
        except ValueError:
            continue
        raise AssertionError(f"shape {tuple(x.shape)} with {len(positions)} positions should raise ValueError")
