"""Leaves eps out of the square root: an all-zero vector becomes NaN, and eps changes nothing."""

import torch


def rms_norm(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True)) * weight


def apply_rope(x, positions, theta=1_000_000.0):
    num_tokens, _, head_dim = x.shape
    if head_dim % 2:
        raise ValueError("head_dim must be even")
    if positions.shape != (num_tokens,):
        raise ValueError("positions must have one entry per token")
    half = head_dim // 2
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    cos, sin = angles.cos().to(x.dtype)[:, None, :], angles.sin().to(x.dtype)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
