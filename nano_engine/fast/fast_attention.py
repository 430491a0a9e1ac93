"""fast_attention.py: the engine's attention context on the Triton kernels, and picking a context by name.

The engine calls ``context.attend(layer_idx, q, k, v)`` once per layer (see ``model.py``). The
readable reference, :class:`~nano_engine.attention.PagedAttention`, gathers every sequence's K/V
into contiguous tensors and calls ``scaled_dot_product_attention``: simple, and on a GPU it moves
each token's K/V twice (gather, then attention). :class:`TritonPagedAttention` does the same work
with the kernels of :mod:`nano_engine.fast.triton_attention`, which read K/V straight from the pages:

* ``store_kv`` writes the new tokens' K/V to their slots (a negative slot is padding: skipped);
* a step where every sequence brings exactly one new token (decode, or a one-token prefill chunk)
  runs ``paged_decode_attention``: one query per sequence over its whole context;
* any other step runs ``paged_prefill_attention``: causal attention of each sequence's new tokens
  over its cached prefix and themselves (prefill, chunked prefill, prefill after a cache hit).

Both read the same :class:`~nano_engine.attention.AttentionMetadata` as the reference, and nothing
in them waits for the GPU: every length they need on the host is already a Python int.

``attention_factory("torch" | "triton" | "auto" | callable, device)`` is how ``LLMEngine(attention=...)``
picks one. Importing this module needs neither a GPU nor Triton.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F

from nano_engine.attention import AttentionMetadata, PagedAttention
from nano_engine.devices import device_defaults
from nano_engine.fast import triton_attention as ta
from nano_engine.kv_cache import KVCache
from nano_engine.model import AttentionContext
from nano_engine.paged import ceil_div

AttentionFactory = Callable[[KVCache, AttentionMetadata], AttentionContext]

ATTENTION_CHOICES = ("torch", "triton", "auto")

PAGE_TABLE_ALIGN = 16
"""Page tables are padded to a multiple of 16 columns. Triton compiles one variant of a kernel per
"shape class" of its integer arguments (a row stride divisible by 16, equal to 1, or neither); a
page table whose width changes every step would otherwise make it compile three."""

MIN_TOKENS_PER_SPLIT = 256
"""flash-decoding: a piece of context shorter than this costs more to merge than it saves."""
MAX_SPLITS = 32
DECODE_SPLIT_CHOICES = (1, 2, 4, 8, 16, 32)
"""Split counts are powers of two, so at most six decode-kernel variants are ever compiled."""


class TritonPagedAttention:
    """The attention context on the Triton kernels: the same interface and the same metadata as the
    reference ``PagedAttention``, for CUDA (or Triton's CPU interpreter in tests).

    The KV cache's dtype rules: the kernels take K/V and queries in the cache's dtype (a model
    running in another dtype has them cast on the way in and the output cast back).
    """

    def __init__(self, cache: KVCache, metadata: AttentionMetadata):
        self.cache, self.metadata = cache, metadata
        self.decode_only = all(n == 1 for n in metadata.query_lens)
        self.max_q_len = max(metadata.query_lens)
        self.page_table = pad_columns(metadata.page_table, PAGE_TABLE_ALIGN)
        self.num_splits = 1
        if self.decode_only:
            max_context = self.page_table.shape[1] * metadata.page_size
            programs = self.page_table.shape[0] * cache.config.num_key_value_heads
            self.num_splits = decode_num_splits(programs, max_context, num_compute_units(cache.device))

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``q [T, H, D]``, ``k, v [T, KVH, D]`` for the new tokens; returns ``[T, H, D]``."""
        md = self.metadata
        k_cache, v_cache = self.cache.k[layer_idx], self.cache.v[layer_idx]
        dtype = k_cache.dtype
        ta.store_kv(k.to(dtype), v.to(dtype), k_cache, v_cache, md.slot_mapping)
        if self.decode_only:
            out = ta.paged_decode_attention(q.to(dtype), k_cache, v_cache, self.page_table, md.seq_lens,
                                            md.page_size, num_splits=self.num_splits)
        else:
            out = ta.paged_prefill_attention(q.to(dtype), k_cache, v_cache, self.page_table, md.cu_seqlens_q,
                                             md.seq_lens, md.page_size, max_q_len=self.max_q_len)
        return out.to(q.dtype)


def pad_columns(table: torch.Tensor, multiple: int) -> torch.Tensor:
    """``table [rows, cols]`` with zero columns appended up to a multiple of ``multiple`` (the same
    tensor when it is one already). Extra page-table columns are never read: lengths stop first."""
    extra = -table.shape[1] % multiple
    return F.pad(table, (0, extra)) if extra else table


def decode_num_splits(num_programs: int, max_context: int, num_compute_units: int) -> int:
    """How many pieces each decode context is cut into (flash-decoding), from shapes only.

    Enough programs for about two per streaming multiprocessor, no piece shorter than
    ``MIN_TOKENS_PER_SPLIT`` tokens of the longest possible context, at most ``MAX_SPLITS``;
    rounded down to a power of two (see ``DECODE_SPLIT_CHOICES``). Depending on shapes and never
    on the values of ``seq_lens`` keeps the launch identical from step to step, which a CUDA graph
    needs."""
    wanted = ceil_div(2 * num_compute_units, max(num_programs, 1))
    worthwhile = ceil_div(max_context, MIN_TOKENS_PER_SPLIT)
    splits = max(1, min(wanted, worthwhile, MAX_SPLITS))
    return 1 << (splits.bit_length() - 1)


@functools.lru_cache(maxsize=None)
def num_compute_units(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device (132 on an H100/H200); 8 elsewhere (the interpreter)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 8


def triton_usable(device: torch.device | str) -> bool:
    """True when the Triton kernels can run on ``device``: Triton is installed and the device is
    CUDA, or the interpreter (``TRITON_INTERPRET=1`` before the first ``import triton``) is on."""
    device = torch.device(device)
    return ta.HAS_TRITON and (device.type == "cuda" or ta._INTERPRETED)


def attention_factory(attention: str | AttentionFactory, device: torch.device | str) -> AttentionFactory:
    """The attention-context constructor for ``LLMEngine(attention=...)``.

    * ``"torch"``: the PyTorch reference ``PagedAttention`` (CPU and CUDA; the default);
    * ``"triton"``: :class:`TritonPagedAttention` (CUDA with Triton; ValueError elsewhere);
    * ``"auto"``: Triton where the device's defaults say so (``nano_engine.devices``: a GPU of
      compute capability 8.0 or later, Triton installed), else the reference. Triton supports
      sm_80+ only, and on a T4 (sm_75) it turns every ``tl.dot`` into plain FMA: slower than the
      reference there, though ``"triton"`` still runs if asked for;
    * a callable ``(kv_cache, metadata) -> context`` is used as given.
    """
    if callable(attention):
        return attention
    if attention == "torch":
        return PagedAttention
    if attention == "triton":
        if not triton_usable(device):
            reason = "Triton is not installed" if not ta.HAS_TRITON else f"the model is on {torch.device(device)}"
            raise ValueError(f"attention='triton' needs Triton and a CUDA device ({reason}); "
                             "use attention='torch' or 'auto' (or TRITON_INTERPRET=1 for CPU tests)")
        return TritonPagedAttention
    if attention == "auto":
        use_triton = ta.HAS_TRITON and device_defaults(device).attention == "triton"
        return TritonPagedAttention if use_triton else PagedAttention
    raise ValueError(f"attention must be one of {ATTENTION_CHOICES} or a callable, got {attention!r}")


@torch.inference_mode()
def precompile(cache: KVCache, num_heads: int) -> None:
    """Compile every kernel variant the fast path can launch on ``cache`` (a few seconds, once per
    process), so that no compilation lands inside a timed run or a CUDA-graph capture.

    Variants differ by decode split count (``DECODE_SPLIT_CHOICES``); the page table is always a
    multiple of ``PAGE_TABLE_ALIGN`` wide. Nothing is written: the one new token has slot -1."""
    device, dtype = cache.device, cache.dtype
    kv_heads, head_dim = cache.config.num_key_value_heads, cache.config.head_dim
    k_cache, v_cache = cache.k[0], cache.v[0]
    page_table = torch.zeros(1, PAGE_TABLE_ALIGN, dtype=torch.int32, device=device)
    seq_lens = torch.ones(1, dtype=torch.int32, device=device)
    q = torch.zeros(1, num_heads, head_dim, dtype=dtype, device=device)
    kv = torch.zeros(1, kv_heads, head_dim, dtype=dtype, device=device)
    ta.store_kv(kv, kv, k_cache, v_cache, torch.full((1,), -1, dtype=torch.long, device=device))
    for splits in DECODE_SPLIT_CHOICES:
        ta.paged_decode_attention(q, k_cache, v_cache, page_table, seq_lens, cache.page_size, num_splits=splits)
    cu_seqlens_q = torch.tensor([0, 1], dtype=torch.int32, device=device)
    ta.paged_prefill_attention(q, k_cache, v_cache, page_table, cu_seqlens_q, seq_lens, cache.page_size,
                               max_q_len=1)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
