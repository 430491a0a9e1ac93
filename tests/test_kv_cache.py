"""The paged KV storage: sizes, byte budgets, and writes landing in the right slots."""

import pytest
import torch

from nano_engine.kv_cache import KVCache, bytes_per_token
from nano_engine.model import Qwen3Config

SMALL = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=8)
QWEN3_06B = Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                        num_attention_heads=16, num_key_value_heads=8, head_dim=128)


def test_bytes_per_token_counts_k_and_v_of_every_layer():
    # Qwen3-0.6B: 2 (K, V) * 28 layers * 8 KV heads * 128 dims * 2 bytes (bf16) = 114688 = 112 KiB
    assert bytes_per_token(QWEN3_06B, torch.bfloat16) == 114688
    assert bytes_per_token(QWEN3_06B, torch.float32) == 2 * 114688
    assert bytes_per_token(SMALL, torch.float32) == 2 * 3 * 2 * 8 * 4


def test_block_count_sizing_and_reported_bytes():
    cache = KVCache(SMALL, num_pages=5, page_size=4, dtype=torch.float32)
    assert cache.num_slots == 20
    assert len(cache.k) == len(cache.v) == SMALL.num_hidden_layers
    assert cache.k[0].shape == (20, SMALL.num_key_value_heads, SMALL.head_dim)
    assert cache.num_bytes == sum(t.numel() * t.element_size() for t in cache.k + cache.v)
    assert cache.bytes_per_token == bytes_per_token(SMALL, torch.float32)


def test_byte_budget_gives_whole_pages_within_budget():
    per_page = bytes_per_token(SMALL, torch.bfloat16) * 16
    cache = KVCache.from_budget(SMALL, 10 * per_page + per_page - 1, page_size=16, dtype=torch.bfloat16)
    assert cache.num_pages == 10
    assert cache.num_bytes <= 11 * per_page - 1
    assert cache.k[1].dtype == torch.bfloat16
    with pytest.raises(ValueError, match="less than one page"):
        KVCache.from_budget(SMALL, per_page - 1, page_size=16)
    with pytest.raises(ValueError, match="num_pages"):
        KVCache(SMALL, num_pages=0, page_size=16)


def test_store_writes_each_token_to_its_slot_only():
    cache = KVCache(SMALL, num_pages=4, page_size=3)
    k = torch.randn(5, 2, 8)
    v = torch.randn(5, 2, 8)
    slots = torch.tensor([7, 0, 11, 3, 4])
    cache.store(1, k, v, slots)
    torch.testing.assert_close(cache.k[1][slots], k)
    torch.testing.assert_close(cache.v[1][slots], v)
    untouched = [s for s in range(cache.num_slots) if s not in slots.tolist()]
    assert cache.k[1][untouched].abs().sum() == 0
    assert cache.k[0].abs().sum() == 0 and cache.k[2].abs().sum() == 0   # other layers untouched
