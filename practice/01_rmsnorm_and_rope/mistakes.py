"""Classic mistakes of exercise 01, each an edit of solution.py (`judge.py mistakes 01` shows them as diffs)."""

MISTAKES = [
    {"name": 'frequency_exponent',
     "explain": 'Uses theta ** (-i / head_dim) for pair i, dropping the factor 2: the slow pairs turn too fast.',
     "old": '    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)\n',
     "new": '    inv_freq = theta ** (-torch.arange(half, dtype=torch.float64) / head_dim)\n'},
    {"name": 'layer_norm',
     "explain": 'Subtracts the mean first (that is LayerNorm, not RMSNorm).',
     "old": '    mean_square = x.pow(2).mean(dim=-1, keepdim=True)\n    return x * torch.rsqrt(mean_square + eps) * weight\n',
     "new": '    centered = x - x.mean(dim=-1, keepdim=True)\n    return centered * torch.rsqrt(centered.pow(2).mean(dim=-1, keepdim=True) + eps) * weight\n'},
    {"name": 'no_eps',
     "explain": 'Leaves eps out of the square root: an all-zero vector becomes NaN, and eps changes nothing.',
     "old": '    mean_square = x.pow(2).mean(dim=-1, keepdim=True)\n    return x * torch.rsqrt(mean_square + eps) * weight\n',
     "new": '    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True)) * weight\n'},
]
