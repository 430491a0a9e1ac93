"""Paged attention against plain causal attention on contiguous K/V.

A step's flat batch mixes prefill chunks (after any number of cached tokens) and single-token
rows; pages are handed out in a shuffled order so that no sequence's slots are contiguous."""

import random

import pytest
import torch
from hypothesis import given, settings, strategies as st

from nano_engine.attention import AttentionMetadata, PagedAttention, context_slots
from nano_engine.kv_cache import KVCache
from nano_engine.model import Qwen3Config, causal_attention

pytestmark = pytest.mark.usefixtures("single_thread")

CFG = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=8)


def run_mix(seqs: list[tuple[int, int]], page_size: int, seed: int, device="cpu", dtype=torch.float32):
    """seqs: (context length incl. new tokens, new tokens). Returns (paged output, reference output)."""
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *shape: torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)  # noqa: E731
    pages_needed = [-(-length // page_size) for length, _ in seqs]
    free_pages = list(range(sum(pages_needed) + 3))
    random.Random(seed).shuffle(free_pages)
    cache = KVCache(CFG, num_pages=len(free_pages), page_size=page_size, device=device, dtype=dtype)
    layer = 1
    page_tables, computed, new, full_k, full_v = [], [], [], [], []
    for (length, n), need in zip(seqs, pages_needed):
        pages = [free_pages.pop() for _ in range(need)]
        k, v = rand(length, 2, 8), rand(length, 2, 8)
        history = torch.tensor([pages[t // page_size] * page_size + t % page_size for t in range(length - n)],
                               dtype=torch.long, device=device)
        if len(history):
            cache.store(layer, k[:length - n], v[:length - n], history)
        page_tables.append(pages)
        computed.append(length - n)
        new.append(n)
        full_k.append(k)
        full_v.append(v)
    md = AttentionMetadata.build(page_tables, computed, new, page_size, device=device)
    q = rand(md.num_tokens, 4, 8)
    k_new = torch.cat([k[c:] for k, c in zip(full_k, computed)])
    v_new = torch.cat([v[c:] for v, c in zip(full_v, computed)])
    out = PagedAttention(cache, md).attend(layer, q, k_new, v_new)
    expected, row = [], 0
    for k, v, n in zip(full_k, full_v, new):
        expected.append(causal_attention(q[None, row:row + n], k[None], v[None])[0])
        row += n
    return out, torch.cat(expected), md


mixes = st.lists(st.integers(1, 40).flatmap(lambda length: st.tuples(
    st.just(length), st.one_of(st.just(1), st.just(length), st.integers(1, length)))), min_size=1, max_size=6)


@settings(max_examples=100, deadline=None)
@given(seqs=mixes, page_size=st.sampled_from([1, 16, 5]), seed=st.integers(0, 2**16))
def test_paged_attention_matches_causal_attention(seqs, page_size, seed):
    out, expected, _ = run_mix(seqs, page_size, seed)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_metadata_layout():
    md = AttentionMetadata.build([[3, 1], [0], [2, 4, 5]], num_computed=[2, 0, 9], num_new=[3, 1, 1], page_size=4)
    assert md.positions.tolist() == [2, 3, 4, 0, 9]
    # sequence 0: page 3 holds positions 0-3 (slots 12-15), page 1 positions 4-7 (slots 4-7);
    # sequence 2: position 9 is the second slot of its third page, page 5
    assert md.slot_mapping.tolist() == [14, 15, 4, 0, 5 * 4 + 1]
    assert md.cu_seqlens_q.tolist() == [0, 3, 4, 5]
    assert md.seq_lens.tolist() == [5, 1, 10]
    assert md.page_table.dtype == torch.int32
    assert md.page_table.tolist() == [[3, 1, 0], [0, 0, 0], [2, 4, 5]]
    assert context_slots(md.page_table, 6, 4)[0].tolist() == [12, 13, 14, 15, 4, 5]


def test_metadata_rejects_short_page_table_and_empty_rows():
    with pytest.raises(ValueError, match="cannot hold"):
        AttentionMetadata.build([[0]], num_computed=[3], num_new=[2], page_size=4)
    with pytest.raises(ValueError, match="at least one new token"):
        AttentionMetadata.build([[0]], num_computed=[3], num_new=[0], page_size=4)


def test_new_kv_is_written_to_the_cache():
    md = AttentionMetadata.build([[0, 1, 2, 3], [7, 6, 5, 4, 8]], num_computed=[0, 8], num_new=[7, 1], page_size=2)
    cache = KVCache(CFG, num_pages=16, page_size=2)
    k, v = torch.randn(md.num_tokens, 2, 8), torch.randn(md.num_tokens, 2, 8)
    PagedAttention(cache, md).attend(0, torch.randn(md.num_tokens, 4, 8), k, v)
    torch.testing.assert_close(cache.k[0][md.slot_mapping], k)
    torch.testing.assert_close(cache.v[0][md.slot_mapping], v)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 3e-2)])
def test_paged_attention_on_cuda(dtype, tol):
    seqs = [(37, 37), (20, 1), (50, 13), (3, 1), (64, 1)]
    for page_size in (1, 16, 5):
        out, expected, _ = run_mix(seqs, page_size, seed=page_size, device="cuda", dtype=dtype)
        assert out.device.type == "cuda"
        torch.testing.assert_close(out.float(), expected.float(), atol=tol, rtol=tol)
