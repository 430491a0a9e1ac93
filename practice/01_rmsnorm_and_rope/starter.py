"""Exercise 01: RMSNorm and rotary position embeddings in the "rotate half" layout Qwen uses."""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Scale each vector along the last dimension to unit root-mean-square, then by weight.

    out = x / sqrt(mean(x ** 2 over the last dim) + eps) * weight. Same shape and dtype as x.
    """
    raise NotImplementedError


def apply_rope(x: torch.Tensor, positions: torch.Tensor, theta: float = 1_000_000.0) -> torch.Tensor:
    """Rotate x [num_tokens, num_heads, head_dim] by its tokens' positions [num_tokens].

    Pair i (for i < head_dim // 2) is (x[..., i], x[..., i + head_dim // 2]) and turns by the angle
    position * theta ** (-2 * i / head_dim). ValueError for an odd head_dim or positions of the
    wrong shape. Same shape and dtype as x.
    """
    raise NotImplementedError
