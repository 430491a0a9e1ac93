"""attention.py: attention for a flat batch of many sequences, reading K/V through page tables.

The engine runs one model forward per step over a *flat* batch: the new tokens of every scheduled
sequence laid end to end, ``[T]`` tokens in all. A sequence contributes either a prefill chunk
(several prompt tokens) or a single decode token. Each layer's attention must then

1. write the new tokens' K/V into the paged cache (``slot_mapping`` says where), and
2. let every new token attend to its own sequence's history (cached tokens plus the new ones
   up to itself), which lives in scattered pages listed in that sequence's page table.

:class:`AttentionMetadata` describes one step; :class:`PagedAttention` is the attention context
the model calls (``context.attend(layer_idx, q, k, v)``). This is the readable PyTorch reference:
it gathers each sequence's K/V by slot and calls ``scaled_dot_product_attention``. It runs on CPU
and CUDA; faster kernels (``triton_attention.py``) must agree with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from nano_engine.kv_cache import KVCache


@dataclass
class AttentionMetadata:
    """Everything attention needs to know about one step's flat batch of ``B`` sequences.

    Tensors (on the model's device):

    * ``positions [T]``: each new token's position in its sequence (RoPE uses it too);
    * ``slot_mapping [T]``: the cache slot each new token's K/V is written to;
    * ``cu_seqlens_q [B+1]``: sequence ``i``'s new tokens are rows ``cu_seqlens_q[i]:cu_seqlens_q[i+1]``;
    * ``seq_lens [B]``: each sequence's context length *including* its new tokens;
    * ``page_table [B, max_pages]`` (int32): each sequence's pages, padded with page 0 (padding is
      never attended: the masks stop at ``seq_lens``).

    ``query_lens`` and ``context_lens`` repeat the lengths as Python ints, so the reference path can
    shape its tensors without reading numbers back from the GPU.
    """

    positions: torch.Tensor
    slot_mapping: torch.Tensor
    cu_seqlens_q: torch.Tensor
    seq_lens: torch.Tensor
    page_table: torch.Tensor
    page_size: int
    query_lens: list[int]
    context_lens: list[int]

    @classmethod
    def build(cls, page_tables: list[list[int]], num_computed: list[int], num_new: list[int],
              page_size: int, device: str | torch.device = "cpu") -> "AttentionMetadata":
        """Metadata for sequences whose first ``num_computed[i]`` tokens are already cached and
        whose next ``num_new[i]`` tokens are in this batch; ``page_tables[i]`` must cover them all."""
        positions: list[int] = []
        slots: list[int] = []
        cu_seqlens, seq_lens = [0], []
        for pages, start, n in zip(page_tables, num_computed, num_new, strict=True):
            end = start + n
            if n < 1:
                raise ValueError(f"every sequence in a batch needs at least one new token, got {n}")
            if len(pages) * page_size < end:
                raise ValueError(f"page table of {len(pages)} pages x {page_size} slots cannot hold {end} tokens")
            positions.extend(range(start, end))
            slots.extend(pages[p // page_size] * page_size + p % page_size for p in range(start, end))
            cu_seqlens.append(cu_seqlens[-1] + n)
            seq_lens.append(end)
        max_pages = max(len(pages) for pages in page_tables)
        padded = [pages + [0] * (max_pages - len(pages)) for pages in page_tables]
        as_tensor = lambda x, dtype: device_tensor(x, dtype, device)  # noqa: E731
        return cls(positions=as_tensor(positions, torch.long), slot_mapping=as_tensor(slots, torch.long),
                   cu_seqlens_q=as_tensor(cu_seqlens, torch.int32), seq_lens=as_tensor(seq_lens, torch.int32),
                   page_table=as_tensor(padded, torch.int32), page_size=page_size,
                   query_lens=list(num_new), context_lens=seq_lens)

    @property
    def num_tokens(self) -> int:
        return int(sum(self.query_lens))


def device_tensor(values: list, dtype: torch.dtype, device: str | torch.device) -> torch.Tensor:
    """``torch.tensor(values, dtype=dtype)`` on ``device``.

    On CUDA the values travel through pinned (page-locked) host memory with a non-blocking copy:
    the copy is queued behind the GPU's pending work, whereas ``torch.tensor(..., device="cuda")``
    makes the CPU wait for the GPU to drain first."""
    device = torch.device(device)
    if device.type != "cuda":
        return torch.tensor(values, dtype=dtype, device=device)
    return torch.tensor(values, dtype=dtype, pin_memory=True).to(device, non_blocking=True)


def context_slots(page_table: torch.Tensor, num_positions: int, page_size: int) -> torch.Tensor:
    """Slots of positions ``0 .. num_positions-1`` for every row of ``page_table``: ``[B, num_positions]``.

    The same formula as ``slot_mapping``, vectorised: page ``pos // page_size``, offset
    ``pos % page_size``. Rows shorter than ``num_positions`` read padding pages (masked later)."""
    pos = torch.arange(num_positions, device=page_table.device)
    pages = page_table.long()[:, pos // page_size]
    return pages * page_size + pos % page_size


class PagedAttention:
    """The attention context for one step: ``attend(layer_idx, q, k, v)`` stores the new K/V in
    ``cache`` and attends through the page tables in ``metadata``.

    Two shapes of work, handled differently because they cost differently:

    * **single-token rows** (decodes, or 1-token prefill chunks): all of them go into *one* batched
      SDPA call. Their contexts are gathered into a ``[B, max_len]`` grid, padded and masked.
      The gather indices, the mask and the gather buffers are shared by every layer (the shapes
      are the same in each), so a 28-layer model allocates them once per step, not 28 times.
    * **multi-token chunks** (prefill): one SDPA call per sequence over its gathered context, with
      the causal mask offset by the tokens already cached (query ``i`` of an ``n``-token chunk at
      the end of an ``L``-token context sees keys ``0 .. L - n + i``).
    """

    def __init__(self, cache: KVCache, metadata: AttentionMetadata):
        self.cache, self.metadata = cache, metadata
        md, device = metadata, metadata.page_table.device
        starts = [0]
        for n in md.query_lens:
            starts.append(starts[-1] + n)

        self.chunks = []   # (first row, last row + 1, context slots [L], mask or None)
        for i, n in enumerate(md.query_lens):
            if n == 1:
                continue
            length = md.context_lens[i]
            slots = context_slots(md.page_table[i:i + 1], length, md.page_size)[0]
            mask = None
            if n != length:   # a chunk after cached tokens: causal mask shifted by length - n
                mask = torch.ones(n, length, dtype=torch.bool, device=device).tril(length - n)
            self.chunks.append((starts[i], starts[i] + n, slots, mask))

        singles = [i for i, n in enumerate(md.query_lens) if n == 1]
        self.single_rows = torch.tensor([starts[i] for i in singles], dtype=torch.long, device=device)
        if singles:
            lengths = [md.context_lens[i] for i in singles]
            width = max(lengths)
            index = torch.tensor(singles, dtype=torch.long, device=device)
            self.single_slots = context_slots(md.page_table[index], width, md.page_size).flatten()
            valid = torch.arange(width, device=device) < torch.tensor(lengths, device=device)[:, None]
            self.single_mask = valid[:, None, None, :]           # [B, heads (bcast), query, key]
            shape = (len(singles) * width, cache.config.num_key_value_heads, cache.config.head_dim)
            self.k_buffer = torch.empty(shape, dtype=cache.dtype, device=device)
            self.v_buffer = torch.empty(shape, dtype=cache.dtype, device=device)
            self.single_width = width

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``q [T, H, D]``, ``k, v [T, KVH, D]`` for the new tokens; returns ``[T, H, D]``."""
        self.cache.store(layer_idx, k, v, self.metadata.slot_mapping)
        self.cache.wait_layer(layer_idx)       # a host-tier load of this layer may be in flight (CUDA)
        keys, values = self.cache.k[layer_idx], self.cache.v[layer_idx]
        out = torch.empty_like(q)

        for start, end, slots, mask in self.chunks:
            qs = q[start:end].transpose(0, 1)                         # [H, n, D]
            ks = keys[slots].to(q.dtype).transpose(0, 1)              # [KVH, L, D]
            vs = values[slots].to(q.dtype).transpose(0, 1)
            o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, is_causal=mask is None,
                                               enable_gqa=True)
            out[start:end] = o.transpose(0, 1)

        if len(self.single_rows):
            batch, width = len(self.single_rows), self.single_width
            torch.index_select(keys, 0, self.single_slots, out=self.k_buffer)
            torch.index_select(values, 0, self.single_slots, out=self.v_buffer)
            ks = self.k_buffer.view(batch, width, *keys.shape[1:]).transpose(1, 2).to(q.dtype)  # [B, KVH, W, D]
            vs = self.v_buffer.view(batch, width, *keys.shape[1:]).transpose(1, 2).to(q.dtype)
            qs = q[self.single_rows][:, :, None]                      # [B, H, 1, D]
            o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=self.single_mask, enable_gqa=True)
            out[self.single_rows] = o[:, :, 0]
        return out
