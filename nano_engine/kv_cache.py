"""kv_cache.py: the paged KV storage every attention path reads and writes.

One K tensor and one V tensor per layer, each ``[num_slots, num_kv_heads, head_dim]``, allocated
once when the engine starts. A *slot* holds one token's K (or V) for one layer; slots are grouped
into pages (blocks) of ``page_size`` consecutive slots, so token ``t`` of a sequence whose page
table is ``pages`` lives at::

    slot = pages[t // page_size] * page_size + t % page_size

The block allocators (``paged.BlockPool`` and friends) hand out page ids; this module only stores
the numbers. Nothing here knows about sequences: the attention metadata carries the page tables
and the ``slot_mapping`` (where each new token's K/V goes).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from nano_engine.checks import require_int
from nano_engine.model import Qwen3Config


def bytes_per_token(config: Qwen3Config, dtype: torch.dtype) -> int:
    """KV bytes one token occupies across all layers: K and V, every KV head, every layer.

    Qwen3-0.6B in bfloat16: 2 * 28 layers * 8 heads * 128 dims * 2 bytes = 112 KiB per token,
    which is why long contexts and many concurrent requests are limited by KV memory."""
    element_size = torch.empty((), dtype=dtype).element_size()
    return 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * element_size


class KVCache:
    """Preallocated per-layer K/V tensors addressed by slot.

    ``KVCache(config, num_pages, page_size)`` holds ``num_pages * page_size`` slots per layer.
    The tensors are zero-filled so that reading a slot nobody wrote yet (padding in a batched
    gather) yields finite numbers that a mask can cancel, never NaNs."""

    def __init__(self, config: Qwen3Config, num_pages: int, page_size: int,
                 device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
        require_int("num_pages", num_pages)
        require_int("page_size", page_size)
        self.config = config
        self.num_pages, self.page_size = num_pages, page_size
        self.device, self.dtype = torch.device(device), dtype
        shape = (num_pages * page_size, config.num_key_value_heads, config.head_dim)
        self.k = [torch.zeros(shape, device=self.device, dtype=dtype) for _ in range(config.num_hidden_layers)]
        self.v = [torch.zeros(shape, device=self.device, dtype=dtype) for _ in range(config.num_hidden_layers)]
        # Set by host_tier.CopyEngine while a step's host-to-device loads are in flight: makes the
        # compute stream wait for one layer of them.
        self.pending_load: Callable[[int], None] | None = None

    def wait_layer(self, layer: int) -> None:
        """Called by attention before it reads ``layer``: on CUDA, while a host-tier load is in flight
        (``host_tier.CopyEngine``), the compute stream waits for that layer's copy only, so layer
        ``i + 1`` is still arriving while layer ``i`` computes. Nothing to do otherwise."""
        if self.pending_load is not None:
            self.pending_load(layer)

    @classmethod
    def from_budget(cls, config: Qwen3Config, num_bytes: int, page_size: int,
                    device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> "KVCache":
        """As many whole pages as fit in ``num_bytes`` (all layers, K and V together)."""
        num_pages = cls.pages_for_budget(config, num_bytes, page_size, dtype)
        return cls(config, num_pages, page_size, device, dtype)

    @staticmethod
    def pages_for_budget(config: Qwen3Config, num_bytes: int, page_size: int, dtype: torch.dtype) -> int:
        page_bytes = bytes_per_token(config, dtype) * page_size
        if num_bytes < page_bytes:
            raise ValueError(f"a KV budget of {num_bytes} bytes is less than one page "
                             f"({page_size} tokens x {bytes_per_token(config, dtype)} bytes = {page_bytes})")
        return num_bytes // page_bytes

    @property
    def num_slots(self) -> int:
        return self.num_pages * self.page_size

    @property
    def bytes_per_token(self) -> int:
        return bytes_per_token(self.config, self.dtype)

    @property
    def num_bytes(self) -> int:
        return self.num_slots * self.bytes_per_token

    def store(self, layer: int, k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor) -> None:
        """Write the new tokens' ``k, v [T, num_kv_heads, head_dim]`` to their slots ``[T]``."""
        self.k[layer].index_copy_(0, slot_mapping, k.to(self.dtype))
        self.v[layer].index_copy_(0, slot_mapping, v.to(self.dtype))

    def __repr__(self) -> str:
        return (f"KVCache({self.num_pages} pages x {self.page_size} slots, {self.config.num_hidden_layers} layers, "
                f"{self.dtype}, {self.device}, {self.num_bytes / 2**20:.1f} MiB, {self.bytes_per_token} B/token)")
