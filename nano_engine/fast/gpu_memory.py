"""gpu_memory.py: how many KV blocks fit on the GPU (vLLM's ``gpu_memory_utilization``).

The KV pool is the one big allocation an engine makes, and the more of it there is, the more
sequences run at once. nano-vllm sizes it from what the GPU has left (vLLM does the same, with
the differences below):

1. load the model;
2. run one forward of the largest step the scheduler can build (``max_num_batched_tokens``
   tokens of prefill) and record the peak of the temporary tensors it allocates (activations,
   attention workspaces, logits): every later step needs at most that much on top of the pool;
3. give the KV pool ``total * gpu_memory_utilization - used - activation_peak`` bytes, where
   ``used`` is everything the GPU holds now (weights, the CUDA context, other processes).

What the fraction leaves free (10% at nano-vllm's default 0.9) absorbs the rest: CUDA graphs, the
allocator's fragmentation, small per-step tensors. vLLM 0.33.0 differs: ``used`` counts only what
its own instance consumed since it started (``gpu_memory_utilization`` is a per-instance limit,
``vllm/config/cache.py``), its default is 0.92, and it measures CUDA-graph memory and subtracts it
too (``vllm/v1/worker/gpu_worker.py::Worker.determine_available_memory``).
"""

from __future__ import annotations

import gc

import torch

from nano_engine.attention import AttentionMetadata
from nano_engine.kv_cache import KVCache
from nano_engine.model import AttentionContext, Transformer
from nano_engine.paged import ceil_div

DEFAULT_PROFILE_TOKENS = 8192
"""Tokens in the profiling forward when the step budget is unlimited (``max_num_batched_tokens=None``)."""


def kv_budget_bytes(total: int, used: int, activation_peak: int, utilization: float) -> int:
    """Bytes the KV pool may take: ``total * utilization - used - activation_peak``.

    ``total``: the GPU's memory; ``used``: what is taken already (weights, CUDA context, other
    processes); ``activation_peak``: the most a forward allocates on top. ValueError when
    ``utilization`` is not in (0, 1] or nothing is left for the pool."""
    if not 0 < utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {utilization!r}")
    budget = int(total * utilization) - used - activation_peak   # the engine cuts it into whole blocks
    if budget <= 0:
        gib = 2**30
        raise ValueError(
            f"gpu_memory_utilization={utilization} leaves no room for the KV cache: {total / gib:.2f} GiB x "
            f"{utilization} = {total * utilization / gib:.2f} GiB, but {used / gib:.2f} GiB are in use and a "
            f"forward needs {activation_peak / gib:.2f} GiB more (raise the fraction or free memory)")
    return budget


@torch.inference_mode()
def profile_kv_budget(model: Transformer, utilization: float, attention, block_size: int,
                      kv_dtype: torch.dtype, num_tokens: int | None = None) -> int:
    """KV bytes for an engine on ``model``'s CUDA device (see the module docstring).

    ``attention`` is the engine's context constructor (``(kv_cache, metadata) -> context``), so the
    profiled forward allocates what the engine's prefill steps will; ``num_tokens`` is the step
    budget (None: ``DEFAULT_PROFILE_TOKENS``). The forward is one sequence of that many tokens: for
    the reference attention, the costliest shape a step of that size can have."""
    device = model.device
    if device.type != "cuda":
        raise ValueError(f"gpu_memory_utilization sizes the KV cache from GPU memory; the model is on {device} "
                         "(pass num_blocks or kv_bytes instead)")
    num_tokens = min(num_tokens or DEFAULT_PROFILE_TOKENS, model.config.max_position_embeddings)
    num_pages = ceil_div(num_tokens, block_size)
    gc.collect()
    torch.cuda.empty_cache()
    scratch = KVCache(model.config, num_pages, block_size, device=device, dtype=kv_dtype)
    metadata = AttentionMetadata.build([list(range(num_pages))], [0], [num_tokens], block_size, device)
    input_ids = torch.zeros(num_tokens, dtype=torch.long, device=device)
    last = torch.tensor([num_tokens - 1], device=device)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    context: AttentionContext = attention(scratch, metadata)
    model(input_ids, positions=metadata.positions, context=context, logits_indices=last)
    torch.cuda.synchronize(device)
    activation_peak = torch.cuda.max_memory_allocated(device) - before
    del scratch, metadata, input_ids, last, context
    gc.collect()
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info(device)
    return kv_budget_bytes(total, total - free, activation_peak, utilization)
