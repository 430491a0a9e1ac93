"""Rotates neighbouring pairs (x[2i], x[2i+1]) -- the GPT-J / original RoPE layout, not Qwen's."""

import torch


def rms_norm(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def apply_rope(x, positions, theta=1_000_000.0):
    num_tokens, _, head_dim = x.shape
    if head_dim % 2:
        raise ValueError("head_dim must be even")
    if positions.shape != (num_tokens,):
        raise ValueError("positions must have one entry per token")
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    cos, sin = angles.cos().to(x.dtype)[:, None, :], angles.sin().to(x.dtype)[:, None, :]
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = odd * cos + even * sin
    return out
