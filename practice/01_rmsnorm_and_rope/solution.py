"""Reference solution for exercise 01: RMSNorm and rotary position embeddings (rotate half)."""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Scale each vector along the last dimension to unit root-mean-square, then by weight."""
    # No mean is subtracted: RMSNorm only rescales, unlike LayerNorm.
    mean_square = x.pow(2).mean(dim=-1, keepdim=True)
    return x * torch.rsqrt(mean_square + eps) * weight


def apply_rope(x: torch.Tensor, positions: torch.Tensor, theta: float = 1_000_000.0) -> torch.Tensor:
    """Rotate x [num_tokens, num_heads, head_dim] by its tokens' positions, "rotate half" layout."""
    num_tokens, _, head_dim = x.shape
    if head_dim % 2:
        raise ValueError(f"head_dim must be even, got {head_dim}")
    if positions.shape != (num_tokens,):
        raise ValueError(f"positions must have shape ({num_tokens},), got {tuple(positions.shape)}")
    half = head_dim // 2
    # Pair i turns at the rate theta ** (-2i / head_dim): fast for the first pairs, slow for the last.
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]          # [num_tokens, half]
    cos = angles.cos().to(x.dtype)[:, None, :]                                # broadcast over heads
    sin = angles.sin().to(x.dtype)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]   # pair i is (x[i], x[i + half])
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
