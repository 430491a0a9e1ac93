"""Triton kernels for the paged KV cache: write new K/V by slot, and attention through page tables.

These are the fast GPU counterparts of the engine's PyTorch reference attention; they must agree
with it, and the tests check them on CPU with Triton's interpreter (``TRITON_INTERPRET=1``).

The KV layout
-------------
Per layer, the K cache and the V cache are each one tensor of shape
``[num_slots, num_kv_heads, head_dim]`` with ``num_slots = num_pages * page_size``. A slot holds
the key (or value) vectors of one token for all KV heads. A sequence owns a list of pages, its row
of ``page_table [batch, max_pages]`` (int32, padded at the end with anything), and its token at
position ``t`` lives at::

    slot = page_table[b, t // page_size] * page_size + t % page_size

``page_size`` is 16 (or another block size) for the hashed-block cache and 1 for the radix cache,
where every token has its own page. The kernels work with any page size >= 1.

A step's new tokens form one flat batch, sequences back to back:

- ``q [T, num_heads, head_dim]``, ``k, v [T, num_kv_heads, head_dim]``;
- ``slot_mapping [T]``: where each new token's K/V goes (a negative slot marks a padding token);
- ``cu_seqlens_q [B + 1]``: sequence ``b``'s new tokens are rows ``cu_seqlens_q[b] .. cu_seqlens_q[b+1]``;
- ``seq_lens [B]``: each sequence's whole context length, new tokens included, so its new tokens
  sit at positions ``seq_lens[b] - q_len .. seq_lens[b] - 1``.

Grouped-query attention: query head ``h`` reads KV head ``h // (num_heads // num_kv_heads)``.

The kernels
-----------
- :func:`store_kv` copies each new token's K and V into its slot. Call it before attention: the
  attention kernels read *every* key, the new ones included, from the cache.
- :func:`paged_decode_attention`: one new token per sequence (the decode step). One program takes one
  sequence and one KV head, and all the query heads that share that KV head, so each K/V tile is
  loaded from memory once per group instead of once per query head. Long contexts can be cut into
  splits processed in parallel and combined afterwards (flash-decoding).
- :func:`paged_prefill_attention`: any number of new tokens per sequence attending to the cached
  prefix plus themselves, causally (prefill, chunked prefill, and prefill after a prefix-cache hit).

Softmax is computed "online" in float32: a program walks the keys tile by tile, keeping for each
query row the running maximum ``m``, the running sum of ``exp(score - m)`` and the running weighted
sum of values, rescaling the last two whenever ``m`` grows. The full score row never exists in
memory, which is what lets one program handle a context of any length.

Importing this module never needs a GPU or Triton itself: without Triton, ``HAS_TRITON`` is False
and the functions raise a clear error, so the CPU engine imports freely.
"""

from __future__ import annotations

import functools
import os

import torch

from nano_engine.checks import require_int
from nano_engine.paged import ceil_div

try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # CPU-only installs: keep the module importable, refuse calls in _check_runnable
    HAS_TRITON = False

    class _NoTriton:
        """Just enough of ``triton`` / ``triton.language`` for the kernel definitions to parse."""

        constexpr = None

        @staticmethod
        def jit(fn):
            return fn

    triton = tl = _NoTriton()


# TRITON_INTERPRET=1 runs kernels in Triton's interpreter, on CPU tensors. It is read when each
# @triton.jit decorator runs, not per call: when triton is first imported (for its own helpers such
# as tl.max) and when this module is imported (for the kernels below), so it must be set before both.
def _interpret_requested() -> bool:
    knobs = getattr(triton, "knobs", None)  # Triton >= 3.4
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on")


_INTERPRETED = HAS_TRITON and _interpret_requested()


def _fix_interpreter_scalar_index() -> None:
    """Let the interpreter use a loaded value as a loop bound (``range(start, end, ...)``) under NumPy 2.4.

    The interpreter stores scalars as 1-element arrays and converts them with ``int(array)``, which
    NumPy 2.4 refuses for arrays that are not 0-dimensional (triton-lang/triton#9171, fixed after
    Triton 3.6). Re-registering ``__index__`` with a reshape to 0-d does what Triton's fix does.
    Compiled kernels are untouched: this runs only in interpreter mode.
    """
    from triton.runtime import interpreter

    patch_tensor = getattr(interpreter, "_patch_lang_tensor", None)
    if patch_tensor is None or getattr(patch_tensor, "_nano_engine_fixed", False):
        return  # a Triton whose interpreter is organised differently (and presumably fixed), or done

    def patch_tensor_with_scalar_index(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(())))

    patch_tensor_with_scalar_index._nano_engine_fixed = True  # type: ignore[attr-defined]  # a marker on the function
    interpreter._patch_lang_tensor = patch_tensor_with_scalar_index


if _INTERPRETED:
    _fix_interpreter_scalar_index()

# tl.dot lowers to tensor-core instructions that need every dimension >= 16, so the tiles are at
# least 16 wide even when a GQA group has 2 query heads (the padding rows are masked out).
_MIN_DOT = 16
_DECODE_BLOCK_N = 64  # keys per tile in decode
PREFILL_TILES = ((64, 64), (64, 32), (32, 32))
"""(BLOCK_M query rows, BLOCK_N keys) per prefill program, largest first. On a GPU the first whose
compiled kernel fits the device's shared memory is used (:func:`prefill_tiles`): float32 at
Qwen3-0.6B's shapes needs 115,200 B at 64 x 64 on sm_80+ (82,176 B on sm_75), more than an A10G,
L4 or RTX 30/40 (101,376 B) or a T4 (65,536 B) gives a block; 64 x 32 needs 74,112 B (57,600 B)."""
# flash-decoding: a split shorter than this costs more to combine than it saves in parallelism.
_MIN_TOKENS_PER_SPLIT = 256
_MAX_SPLITS = 32


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------


@triton.jit
def _store_kv_kernel(
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr,
    stride_k_tok, stride_k_head, stride_v_tok, stride_v_head,
    stride_kc_slot, stride_kc_head, stride_vc_slot, stride_vc_head,
    NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
):
    # One program per new token: it copies the token's [num_kv_heads, head_dim] K and V tiles.
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)

    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    # A negative slot is a padding token (e.g. a CUDA-graph batch padded to a captured size):
    # folding it into the mask turns the whole program into a no-op.
    mask = (offs_h[:, None] < NUM_KV_HEADS) & (offs_d[None, :] < HEAD_DIM) & (slot >= 0)

    k = tl.load(k_ptr + token * stride_k_tok + offs_h[:, None] * stride_k_head + offs_d[None, :], mask=mask)
    v = tl.load(v_ptr + token * stride_v_tok + offs_h[:, None] * stride_v_head + offs_d[None, :], mask=mask)
    tl.store(k_cache_ptr + slot * stride_kc_slot + offs_h[:, None] * stride_kc_head + offs_d[None, :], k,
             mask=mask)
    tl.store(v_cache_ptr + slot * stride_vc_slot + offs_h[:, None] * stride_vc_head + offs_d[None, :], v,
             mask=mask)


@triton.jit
def _paged_decode_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, page_table_ptr, seq_lens_ptr, out_ptr, lse_ptr,
    stride_q_seq, stride_q_head,
    stride_kc_slot, stride_kc_head, stride_vc_slot, stride_vc_head,
    stride_pt_seq,
    stride_out_seq, stride_out_head, stride_out_split,
    stride_lse_seq, stride_lse_head,
    scale,
    HEAD_DIM: tl.constexpr, GROUP_SIZE: tl.constexpr, PAGE_SIZE: tl.constexpr, NUM_SPLITS: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    # Program (seq, kv_head, split) attends the GROUP_SIZE query heads that share kv_head to the
    # keys of one split of the sequence's context. Tiles: Q [BLOCK_H, BLOCK_D] stays in registers;
    # K and V [BLOCK_N, BLOCK_D] stream through, BLOCK_N tokens at a time.
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)

    # Cut the context into NUM_SPLITS pieces, each a whole number of tiles. With a short context
    # the last splits come out empty; they write "no keys" (lse = -inf) and the combine skips them.
    seq_len = tl.load(seq_lens_ptr + seq)
    split_len = tl.cdiv(tl.cdiv(seq_len, NUM_SPLITS), BLOCK_N) * BLOCK_N
    start = split * split_len
    end = tl.minimum(start + split_len, seq_len)

    offs_h = tl.arange(0, BLOCK_H)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    heads = kv_head * GROUP_SIZE + offs_h  # the query heads of this group (rows past GROUP_SIZE are padding)
    head_mask = offs_h < GROUP_SIZE
    d_mask = offs_d < HEAD_DIM

    q = tl.load(
        q_ptr + seq * stride_q_seq + heads[:, None] * stride_q_head + offs_d[None, :],
        mask=head_mask[:, None] & d_mask[None, :], other=0.0,
    )

    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)  # running max score per query head
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)  # running sum of exp(score - m_i)
    acc = tl.zeros([BLOCK_H, BLOCK_D], dtype=tl.float32)  # running sum of exp(score - m_i) * v

    for tile_start in range(start, end, BLOCK_N):
        # Translate positions to slots token by token through the page table. Gathering per token
        # (instead of per page) makes one code path serve page_size 1 (radix cache) and 16 alike.
        pos = tile_start + offs_n
        valid = pos < end
        page = tl.load(page_table_ptr + seq * stride_pt_seq + pos // PAGE_SIZE, mask=valid, other=0)
        slot = page.to(tl.int64) * PAGE_SIZE + pos % PAGE_SIZE
        kv_mask = valid[:, None] & d_mask[None, :]

        k = tl.load(k_cache_ptr + slot[:, None] * stride_kc_slot + kv_head * stride_kc_head + offs_d[None, :],
                    mask=kv_mask, other=0.0)
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale  # [BLOCK_H, BLOCK_N]
        scores = tl.where(valid[None, :], scores, float("-inf"))

        # Online softmax: every tile holds at least one valid key, so m_new is finite.
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        alpha = tl.exp(m_i - m_new)  # rescales what was accumulated under the old maximum
        p = tl.exp(scores - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)

        v = tl.load(v_cache_ptr + slot[:, None] * stride_vc_slot + kv_head * stride_vc_head + offs_d[None, :],
                    mask=kv_mask, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    # An empty split (or a padded batch entry with seq_len 0) has l_i = 0: write zeros, not 0/0.
    has_keys = l_i > 0
    out = acc / tl.where(has_keys, l_i, 1.0)[:, None]
    tl.store(
        out_ptr + seq * stride_out_seq + split * stride_out_split
        + heads[:, None] * stride_out_head + offs_d[None, :],
        out.to(out_ptr.dtype.element_ty), mask=head_mask[:, None] & d_mask[None, :],
    )
    if NUM_SPLITS > 1:
        # log-sum-exp of this split's scores: all the combine step needs to weigh the splits.
        lse = tl.where(has_keys, m_i + tl.log(tl.where(has_keys, l_i, 1.0)), float("-inf"))
        tl.store(lse_ptr + seq * stride_lse_seq + heads * stride_lse_head + split, lse, mask=head_mask)


@triton.jit
def _combine_splits_kernel(
    partial_ptr, lse_ptr, out_ptr,
    stride_p_seq, stride_p_head, stride_p_split,
    stride_lse_seq, stride_lse_head,
    stride_out_seq, stride_out_head,
    HEAD_DIM: tl.constexpr, NUM_SPLITS: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
):
    # Program (seq, head) merges the per-split results. Split s saw the scores with log-sum-exp
    # lse_s and produced o_s = softmax-weighted mean of its values; the whole-context result is
    # sum_s w_s * o_s with w_s = exp(lse_s) / sum_r exp(lse_r) (shifted by the max for safety).
    seq = tl.program_id(0)
    head = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    s_mask = offs_s < NUM_SPLITS

    lse = tl.load(lse_ptr + seq * stride_lse_seq + head * stride_lse_head + offs_s, mask=s_mask,
                  other=float("-inf"))
    # Shift by the largest lse before exponentiating (kept finite for a padded seq_len 0 entry,
    # where every split is empty); a split without keys has lse = -inf and so weight 0.
    lse_max = tl.max(lse, axis=0)
    lse_max = tl.where(lse_max > float("-inf"), lse_max, 0.0)
    weights = tl.exp(lse - lse_max)
    total = tl.sum(weights, axis=0)

    partial = tl.load(
        partial_ptr + seq * stride_p_seq + head * stride_p_head
        + offs_s[:, None] * stride_p_split + offs_d[None, :],
        mask=s_mask[:, None] & (offs_d[None, :] < HEAD_DIM), other=0.0,
    )
    out = tl.sum(weights[:, None] * partial, axis=0) / tl.where(total > 0, total, 1.0)
    tl.store(out_ptr + seq * stride_out_seq + head * stride_out_head + offs_d,
             out.to(out_ptr.dtype.element_ty), mask=offs_d < HEAD_DIM)


@triton.jit
def _paged_prefill_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, page_table_ptr, cu_seqlens_q_ptr, seq_lens_ptr, out_ptr,
    stride_q_tok, stride_q_head,
    stride_kc_slot, stride_kc_head, stride_vc_slot, stride_vc_head,
    stride_pt_seq,
    stride_out_tok, stride_out_head,
    scale,
    HEAD_DIM: tl.constexpr, GROUP_SIZE: tl.constexpr, PAGE_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    # Program (q_block, head, seq) takes BLOCK_M consecutive new tokens of one sequence for one
    # query head, and streams the sequence's keys from the cache in tiles of BLOCK_N tokens.
    q_block = tl.program_id(0)
    head = tl.program_id(1)
    seq = tl.program_id(2)
    kv_head = head // GROUP_SIZE

    q_start = tl.load(cu_seqlens_q_ptr + seq)
    q_len = tl.load(cu_seqlens_q_ptr + seq + 1) - q_start
    if q_block * BLOCK_M >= q_len:  # the grid is sized for the longest sequence; shorter ones stop here
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    prefix_len = seq_len - q_len  # tokens already in the cache before this step

    offs_m = q_block * BLOCK_M + tl.arange(0, BLOCK_M)  # index among this sequence's new tokens
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    row_valid = offs_m < q_len
    q_pos = prefix_len + offs_m  # absolute position of each query token
    d_mask = offs_d < HEAD_DIM
    rows = (q_start + offs_m).to(tl.int64)

    q = tl.load(q_ptr + rows[:, None] * stride_q_tok + head * stride_q_head + offs_d[None, :],
                mask=row_valid[:, None] & d_mask[None, :], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # Causality: no row of this block sees past its last row's position, so stop the key loop there.
    kv_end = tl.minimum(seq_len, prefix_len + (q_block + 1) * BLOCK_M)
    for tile_start in range(0, kv_end, BLOCK_N):
        pos = tile_start + offs_n
        kv_valid = pos < kv_end
        page = tl.load(page_table_ptr + seq * stride_pt_seq + pos // PAGE_SIZE, mask=kv_valid, other=0)
        slot = page.to(tl.int64) * PAGE_SIZE + pos % PAGE_SIZE
        kv_mask = kv_valid[:, None] & d_mask[None, :]

        k = tl.load(k_cache_ptr + slot[:, None] * stride_kc_slot + kv_head * stride_kc_head + offs_d[None, :],
                    mask=kv_mask, other=0.0)
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale  # [BLOCK_M, BLOCK_N]
        visible = kv_valid[None, :] & (pos[None, :] <= q_pos[:, None])
        scores = tl.where(visible, scores, float("-inf"))

        # Key 0 is visible to every row, so after the first tile every m_i is finite and a row
        # whose keys in a later tile are all masked just gets p = 0 there.
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(scores - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)

        v = tl.load(v_cache_ptr + slot[:, None] * stride_vc_slot + kv_head * stride_vc_head + offs_d[None, :],
                    mask=kv_mask, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    out = acc / l_i[:, None]
    tl.store(out_ptr + rows[:, None] * stride_out_tok + head * stride_out_head + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=row_valid[:, None] & d_mask[None, :])


# --------------------------------------------------------------------------------------------
# Python wrappers: check the inputs, size the tiles and the grid, launch.
# --------------------------------------------------------------------------------------------


def store_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Write the new tokens' keys and values into the paged cache, in place.

    ``k, v [T, num_kv_heads, head_dim]``; ``k_cache, v_cache [num_slots, num_kv_heads, head_dim]``;
    ``slot_mapping [T]`` (int32 or int64): token ``t`` goes to slot ``slot_mapping[t]``, and tokens
    with a negative slot (padding) are skipped. Equivalent to
    ``k_cache[slot_mapping[keep]] = k[keep]`` (same for v) with ``keep = slot_mapping >= 0``.
    """
    _check_runnable(k, v, k_cache, v_cache, slot_mapping)
    _check_cache(k_cache, v_cache)
    _check_index_tensor("slot_mapping", slot_mapping, dims=1)
    num_tokens = slot_mapping.shape[0]
    for name, x in (("k", k), ("v", v)):
        if x.dim() != 3 or x.shape[0] != num_tokens or x.shape[1:] != k_cache.shape[1:]:
            raise ValueError(
                f"store_kv: {name} must have shape [len(slot_mapping), num_kv_heads, head_dim] = "
                f"[{num_tokens}, {k_cache.shape[1]}, {k_cache.shape[2]}], got {tuple(x.shape)}"
            )
        if x.dtype != k_cache.dtype:
            raise ValueError(f"store_kv: {name} has dtype {x.dtype} but the cache holds {k_cache.dtype}")
    if num_tokens == 0:
        return
    k, v = _last_dim_contiguous(k), _last_dim_contiguous(v)
    num_kv_heads, head_dim = k_cache.shape[1], k_cache.shape[2]

    _store_kv_kernel[(num_tokens,)](
        k, v, k_cache, v_cache, slot_mapping,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_cache.stride(0), k_cache.stride(1), v_cache.stride(0), v_cache.stride(1),
        NUM_KV_HEADS=num_kv_heads, HEAD_DIM=head_dim,
        BLOCK_H=_next_power_of_2(num_kv_heads), BLOCK_D=_next_power_of_2(head_dim),
    )


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    page_table: torch.Tensor,
    seq_lens: torch.Tensor,
    page_size: int,
    scale: float | None = None,
    *,
    num_splits: int | None = None,
) -> torch.Tensor:
    """Attention of one new query token per sequence over its whole cached context.

    ``q [B, num_heads, head_dim]`` is each sequence's newest token, whose K/V must already be in
    the cache (:func:`store_kv`); ``page_table [B, max_pages]`` and ``seq_lens [B]`` (int32) locate
    the context (see the module docstring). ``scale`` defaults to ``head_dim ** -0.5``. Returns
    ``[B, num_heads, head_dim]`` in ``q``'s dtype. A sequence with ``seq_len == 0`` (batch padding)
    gets zeros.

    ``num_splits`` cuts each context into that many pieces processed by separate programs and then
    combined (flash-decoding); the default picks it from the shapes alone — never from the values
    of ``seq_lens`` — so the launch is the same every step and can be captured in a CUDA graph.
    """
    _check_runnable(q, k_cache, v_cache, page_table, seq_lens)
    _check_cache(k_cache, v_cache)
    group_size = _check_query("paged_decode_attention", q, k_cache)
    batch, num_heads, head_dim = q.shape
    _check_index_tensor("page_table", page_table, dims=2)
    _check_index_tensor("seq_lens", seq_lens, dims=1)
    if page_table.shape[0] != batch or seq_lens.shape[0] != batch:
        raise ValueError(
            f"paged_decode_attention: q has {batch} sequences but page_table has {page_table.shape[0]} "
            f"rows and seq_lens {seq_lens.shape[0]} entries"
        )
    _check_page_size(page_size)
    if num_splits is None:
        max_context = page_table.shape[1] * page_size
        num_splits = _default_num_splits(batch * k_cache.shape[1], max_context, q.device)
    elif not 1 <= num_splits <= _MAX_SPLITS:
        raise ValueError(f"paged_decode_attention: num_splits must be in 1..{_MAX_SPLITS}, got {num_splits}")
    scale = head_dim**-0.5 if scale is None else float(scale)

    q = _last_dim_contiguous(q)
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if batch == 0:
        return out
    if num_splits == 1:
        # One split: the kernel's normalised result is the answer; write it straight to `out`.
        partial, lse = out.unsqueeze(2), out  # lse is unused (NUM_SPLITS == 1 compiles it away)
    else:
        # Keep the per-split results in float32: they are reweighted before rounding to q's dtype.
        partial = torch.empty(batch, num_heads, num_splits, head_dim, dtype=torch.float32, device=q.device)
        lse = torch.empty(batch, num_heads, num_splits, dtype=torch.float32, device=q.device)

    block_d = max(_MIN_DOT, _next_power_of_2(head_dim))
    _paged_decode_kernel[(batch, k_cache.shape[1], num_splits)](
        q, k_cache, v_cache, page_table, seq_lens, partial, lse,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), v_cache.stride(0), v_cache.stride(1),
        page_table.stride(0),
        partial.stride(0), partial.stride(1), partial.stride(2),
        lse.stride(0), lse.stride(1),
        scale,
        HEAD_DIM=head_dim, GROUP_SIZE=group_size, PAGE_SIZE=page_size, NUM_SPLITS=num_splits,
        BLOCK_H=max(_MIN_DOT, _next_power_of_2(group_size)), BLOCK_N=_DECODE_BLOCK_N, BLOCK_D=block_d,
        DOT_PRECISION=_dot_precision(q.dtype),
    )
    if num_splits > 1:
        _combine_splits_kernel[(batch, num_heads)](
            partial, lse, out,
            partial.stride(0), partial.stride(1), partial.stride(2),
            lse.stride(0), lse.stride(1),
            out.stride(0), out.stride(1),
            HEAD_DIM=head_dim, NUM_SPLITS=num_splits, BLOCK_S=_next_power_of_2(num_splits), BLOCK_D=block_d,
        )
    return out


def paged_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    page_table: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seq_lens: torch.Tensor,
    page_size: int,
    scale: float | None = None,
    *,
    max_q_len: int | None = None,
) -> torch.Tensor:
    """Causal attention of a flat batch of new tokens over their sequences' cached prefix and themselves.

    ``q [T, num_heads, head_dim]`` holds the new tokens of all sequences back to back, sequence ``b``
    in rows ``cu_seqlens_q[b] .. cu_seqlens_q[b+1]`` (int32 ``[B + 1]``). Its new tokens are the last
    ``q_len`` of its ``seq_lens[b]`` context positions, and a token at position ``p`` attends to
    positions ``0 .. p``. All K/V, the new tokens' included, are read from the cache, so call
    :func:`store_kv` first. ``scale`` defaults to ``head_dim ** -0.5``. Returns ``[T, num_heads,
    head_dim]`` in ``q``'s dtype.

    ``max_q_len`` (the longest ``q_len``) sizes the grid; pass it when known, otherwise it is read
    from ``cu_seqlens_q``, which waits for the device.
    """
    _check_runnable(q, k_cache, v_cache, page_table, cu_seqlens_q, seq_lens)
    _check_cache(k_cache, v_cache)
    group_size = _check_query("paged_prefill_attention", q, k_cache)
    num_tokens, num_heads, head_dim = q.shape
    _check_index_tensor("page_table", page_table, dims=2)
    _check_index_tensor("cu_seqlens_q", cu_seqlens_q, dims=1)
    _check_index_tensor("seq_lens", seq_lens, dims=1)
    batch = seq_lens.shape[0]
    if cu_seqlens_q.shape[0] != batch + 1 or page_table.shape[0] != batch:
        raise ValueError(
            f"paged_prefill_attention: seq_lens has {batch} sequences, so cu_seqlens_q needs {batch + 1} "
            f"entries (got {cu_seqlens_q.shape[0]}) and page_table {batch} rows (got {page_table.shape[0]})"
        )
    _check_page_size(page_size)
    if max_q_len is None:
        max_q_len = int((cu_seqlens_q[1:] - cu_seqlens_q[:-1]).max()) if batch > 0 else 0
    scale = head_dim**-0.5 if scale is None else float(scale)

    q = _last_dim_contiguous(q)
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if num_tokens == 0 or max_q_len <= 0:
        return out

    block_m, block_n = _prefill_tiles_on(q.device, q.dtype, head_dim, group_size)
    grid = (ceil_div(max_q_len, block_m), num_heads, batch)
    _paged_prefill_kernel[grid](
        q, k_cache, v_cache, page_table, cu_seqlens_q, seq_lens, out,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), v_cache.stride(0), v_cache.stride(1),
        page_table.stride(0),
        out.stride(0), out.stride(1),
        scale,
        HEAD_DIM=head_dim, GROUP_SIZE=group_size, PAGE_SIZE=page_size,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=max(_MIN_DOT, _next_power_of_2(head_dim)),
        DOT_PRECISION=_dot_precision(q.dtype),
    )
    return out


# --------------------------------------------------------------------------------------------
# Shared memory, checked before launch
# --------------------------------------------------------------------------------------------

SHARED_MEMORY_PER_BLOCK = {75: 65_536, 80: 166_912, 86: 101_376, 87: 166_912, 89: 101_376, 90: 232_448}
"""Shared memory one block may opt into, in bytes, by compute capability (NVIDIA's CUDA C++
Programming Guide, "Technical Specifications per Compute Capability"). A real device is asked
instead (``max_shared_mem``); the table is for checking other GPUs from here."""

_POINTER_TYPES = {"slot_mapping_ptr": "*i64", "page_table_ptr": "*i32", "seq_lens_ptr": "*i32",
                  "cu_seqlens_q_ptr": "*i32", "lse_ptr": "*fp32", "partial_ptr": "*fp32"}
_TRITON_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def kernel_shared_memory(kernel, constexprs: dict, dtype: torch.dtype, arch: int) -> int:
    """Bytes of shared memory ``kernel`` needs once compiled for ``sm_{arch}`` with data in
    ``dtype``: Triton's ahead-of-time compile (its bundled ``ptxas``), no GPU needed."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    data = "*" + _TRITON_DTYPES[dtype]
    signature = {name: "constexpr" if name in constexprs
                 else _POINTER_TYPES.get(name, data) if name.endswith("_ptr")
                 else "fp32" if name == "scale" else "i32"
                 for name in kernel.arg_names}
    compiled = triton.compile(ASTSource(kernel, signature, constexprs), target=GPUTarget("cuda", arch, 32))
    return compiled.metadata.shared


@functools.lru_cache(maxsize=None)
def prefill_tiles(dtype: torch.dtype, head_dim: int, group_size: int, arch: int,
                  max_shared: int) -> tuple[int, int] | None:
    """The largest of :data:`PREFILL_TILES` whose prefill kernel fits ``max_shared`` bytes on
    ``sm_{arch}``; None if none does."""
    for block_m, block_n in PREFILL_TILES:
        constexprs = dict(HEAD_DIM=head_dim, GROUP_SIZE=group_size, PAGE_SIZE=16, BLOCK_M=block_m,
                          BLOCK_N=block_n, BLOCK_D=max(_MIN_DOT, _next_power_of_2(head_dim)),
                          DOT_PRECISION=_dot_precision(dtype))
        if kernel_shared_memory(_paged_prefill_kernel, constexprs, dtype, arch) <= max_shared:
            return block_m, block_n
    return None


def _prefill_tiles_on(device: torch.device, dtype: torch.dtype, head_dim: int, group_size: int) -> tuple[int, int]:
    """The prefill tiles for ``device``: the largest that fit its shared memory (CUDA), checked
    once per shape before the first launch; the largest in the interpreter."""
    if device.type != "cuda":
        return PREFILL_TILES[0]
    arch, max_shared = _device_limits(device)
    tiles = prefill_tiles(dtype, head_dim, group_size, arch, max_shared)
    if tiles is None:
        raise RuntimeError(f"the Triton prefill kernel needs more shared memory than sm_{arch} gives a block "
                           f"({max_shared:,} B) even with {PREFILL_TILES[-1][0]} x {PREFILL_TILES[-1][1]} tiles in "
                           f"{dtype}; use attention='torch' or a 16-bit dtype")
    return tiles


@functools.lru_cache(maxsize=None)
def _device_limits(device: torch.device) -> tuple[int, int]:
    major, minor = torch.cuda.get_device_capability(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    max_shared = triton.runtime.driver.active.utils.get_device_properties(index)["max_shared_mem"]
    return 10 * major + minor, max_shared


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check_runnable(*tensors: torch.Tensor) -> None:
    if not HAS_TRITON:
        raise RuntimeError(
            "Triton is not installed, so the Triton attention kernels are unavailable; "
            "use the PyTorch reference attention (it runs everywhere)"
        )
    devices = {t.device for t in tensors}
    if len(devices) != 1:
        raise ValueError(f"Triton attention: all tensors must be on one device, got {sorted(map(str, devices))}")
    device = devices.pop()
    if _INTERPRETED and not _triton_helpers_interpreted():
        raise RuntimeError(
            "TRITON_INTERPRET=1 was set after triton had been imported, so Triton's own helpers are "
            "compiled-mode functions the interpreter cannot call; set it before anything imports triton"
        )
    if device.type != "cuda" and not _INTERPRETED:
        raise RuntimeError(
            f"Triton attention got {device.type} tensors: the kernels need a CUDA device, or the Triton "
            "interpreter (set TRITON_INTERPRET=1 before importing nano_engine.fast.triton_attention)"
        )


def _triton_helpers_interpreted() -> bool:
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.max, InterpretedFunction)


def _check_cache(k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    if k_cache.dim() != 3 or k_cache.shape != v_cache.shape:
        raise ValueError(
            "k_cache and v_cache must both have shape [num_slots, num_kv_heads, head_dim], "
            f"got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}"
        )
    if k_cache.dtype not in _FLOAT_DTYPES or v_cache.dtype != k_cache.dtype:
        raise ValueError(
            f"k_cache and v_cache must share one dtype among {_FLOAT_DTYPES}, "
            f"got {k_cache.dtype} and {v_cache.dtype}"
        )
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("k_cache and v_cache must be contiguous along head_dim (stride 1 in the last dimension)")


def _check_query(caller: str, q: torch.Tensor, k_cache: torch.Tensor) -> int:
    """Check q against the cache; return the GQA group size (query heads per KV head)."""
    if q.dim() != 3 or q.shape[2] != k_cache.shape[2]:
        raise ValueError(
            f"{caller}: q must have shape [tokens, num_heads, head_dim={k_cache.shape[2]}], got {tuple(q.shape)}"
        )
    if q.dtype != k_cache.dtype:
        raise ValueError(f"{caller}: q has dtype {q.dtype} but the cache holds {k_cache.dtype}")
    num_heads, num_kv_heads = q.shape[1], k_cache.shape[1]
    if num_heads % num_kv_heads != 0:
        raise ValueError(
            f"{caller}: num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})"
        )
    return num_heads // num_kv_heads


def _check_index_tensor(name: str, x: torch.Tensor, dims: int) -> None:
    if x.dim() != dims or x.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{name} must be a {dims}-D int32 or int64 tensor, got {x.dim()}-D {x.dtype}")
    if x.stride(-1) != 1 and x.numel() > 1:
        raise ValueError(f"{name} must be contiguous along its last dimension")


def _check_page_size(page_size: int) -> None:
    require_int("page_size", page_size)


def _last_dim_contiguous(x: torch.Tensor) -> torch.Tensor:
    # The kernels index head_dim with stride 1; other dimensions may have any stride (views of a
    # fused QKV projection are fine).
    return x if x.stride(-1) == 1 else x.contiguous()


def _dot_precision(dtype: torch.dtype) -> str:
    # float32 inputs would otherwise be rounded to tf32 inside tl.dot; "ieee" keeps them exact so the
    # float32 path matches the reference. 16-bit inputs are multiplied exactly either way.
    return "ieee" if dtype == torch.float32 else "tf32"


def _default_num_splits(num_programs: int, max_context: int, device: torch.device) -> int:
    """How many pieces to cut each context into, from shapes only (so CUDA graphs can capture it).

    Enough programs to give every streaming multiprocessor about two, but no split shorter than
    ``_MIN_TOKENS_PER_SPLIT`` tokens of the longest possible context.
    """
    wanted = ceil_div(2 * _num_compute_units(device), max(num_programs, 1))
    worthwhile = ceil_div(max_context, _MIN_TOKENS_PER_SPLIT)
    return max(1, min(wanted, worthwhile, _MAX_SPLITS))


@functools.lru_cache(maxsize=None)
def _num_compute_units(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 8  # the interpreter: any small number exercises the split path


def _next_power_of_2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()
