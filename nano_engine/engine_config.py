"""engine_config.py: every ``LLMEngine`` option in one dataclass, checked once, at construction.

``LLMEngine(model, **options)`` builds an :class:`EngineConfig` from its keyword arguments, so a
wrong option fails before anything is allocated, with a ``ValueError`` naming the option and its
allowed values. The KV pool can be sized four ways, and :meth:`EngineConfig.build_cache_manager`
is the one place that tells them apart:

1. ``cache=<CacheManager>``: the given manager, with its own pool;
2. ``pool=<BlockPool>``: a ``PrefixCachingBlockPool`` means vLLM-style hashed caching on it, a plain
   ``BlockPool`` no caching (its size and block size win);
3. ``gpu_memory_utilization=0.9``: what the GPU has left after a profiling forward
   (``nano_engine.fast.gpu_memory``, like vLLM's ``gpu_memory_utilization``);
4. ``num_blocks=`` or ``kv_bytes=``, else the default: 16384 tokens or 2 GiB of KV, whichever is
   smaller; with ``cache="none" | "hashed" | "vllm" | "radix"`` choosing the manager (``"vllm"``:
   ``"hashed"`` on ``PrefixCachingBlockPool(..., vllm=True)``, blocks registered when allocated).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from nano_engine.attention import PagedAttention
from nano_engine.cache_manager import CacheManager, HashedBlockCacheManager, NaiveCacheManager, RadixCacheManager
from nano_engine.kv_cache import KVCache, bytes_per_token
from nano_engine.paged import BlockPool
from nano_engine.policies import AdmissionPolicy, make_policy
from nano_engine.prefix_cache import PrefixCachingBlockPool

if TYPE_CHECKING:
    from nano_engine.model import Transformer

DEFAULT_KV_TOKENS = 16384
"""Default pool: room for this many tokens (1024 blocks of 16) ..."""
DEFAULT_KV_BYTES = 2 * 2**30
"""... unless that takes more than 2 GiB (Qwen3-0.6B in float32: 9362 tokens fit)."""

DEFAULT_STEP_LOG_SIZE = 10_000
"""``LLMEngine.step_log`` keeps the last this many steps (about 10 MB); None keeps every step."""

CACHE_KINDS = ("none", "hashed", "vllm", "radix")
ATTENTION_NAMES = ("torch", "triton", "auto")


def _is_int(x: object) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _require(ok: bool, name: str, allowed: str, value: object) -> None:
    if not ok:
        raise ValueError(f"{name} must be {allowed}, got {value!r}")


@dataclass
class EngineConfig:
    """The options of :class:`~nano_engine.engine.LLMEngine` (see its docstring for what each does)."""

    eos_token_id: int | None = None
    pool: BlockPool | None = None
    cache: str | CacheManager | None = None
    num_blocks: int | None = None
    block_size: int = 16
    kv_bytes: int | None = None
    kv_dtype: torch.dtype | None = None
    max_num_batched_tokens: int | None = 4096
    max_num_seqs: int = 256
    policy: str | AdmissionPolicy = "fcfs"
    attention: str | Callable = PagedAttention
    progress: bool | None = None
    gpu_memory_utilization: float | None = None
    cuda_graphs: bool = False
    step_log_size: int | None = DEFAULT_STEP_LOG_SIZE
    host_kv_tokens: int | None = None
    write_policy: str = "write_through"

    def __post_init__(self) -> None:
        self._check_values()
        self._check_memory_choice()
        make_policy(self.policy)        # raises for an unknown name or a non-policy
        self._check_host_tier()

    def _check_host_tier(self) -> None:
        """``host_kv_tokens`` adds a host-memory tier (``nano_engine.hiradix`` for ``cache="radix"``,
        ``nano_engine.offload`` for ``"hashed"`` / ``"vllm"``); ``write_policy`` says when it is written."""
        from nano_engine.host_tier import WRITE_POLICIES
        _require(self.write_policy in WRITE_POLICIES, "write_policy", f"one of {WRITE_POLICIES}", self.write_policy)
        if self.host_kv_tokens is None:
            return
        _require(_is_int(self.host_kv_tokens) and self.host_kv_tokens >= self.block_size, "host_kv_tokens",
                 f"None or an integer >= block_size ({self.block_size})", self.host_kv_tokens)
        _require(self.cache in ("radix", "hashed", "vllm"), "cache",
                 "'radix', 'hashed' or 'vllm' when host_kv_tokens is given (the host tier sits under a prefix cache)",
                 self.cache)

    def _check_values(self) -> None:
        def optional_count(name: str, minimum: int = 1) -> None:
            value = getattr(self, name)
            _require(value is None or (_is_int(value) and value >= minimum), name,
                     f"None or an integer >= {minimum}", value)
        optional_count("eos_token_id", minimum=0)
        for name in ("num_blocks", "kv_bytes", "max_num_batched_tokens"):
            optional_count(name)
        optional_count("step_log_size", minimum=0)
        _require(_is_int(self.block_size) and self.block_size >= 1, "block_size", "an integer >= 1", self.block_size)
        _require(_is_int(self.max_num_seqs) and self.max_num_seqs >= 1, "max_num_seqs", "an integer >= 1",
                 self.max_num_seqs)
        _require(self.kv_dtype is None or (isinstance(self.kv_dtype, torch.dtype) and self.kv_dtype.is_floating_point),
                 "kv_dtype", "None (the model's dtype) or a floating torch dtype (torch.float32, torch.bfloat16, ...)",
                 self.kv_dtype)
        _require(self.attention in ATTENTION_NAMES or (callable(self.attention) and not isinstance(self.attention, str)),
                 "attention", f"one of {ATTENTION_NAMES} or a callable (kv_cache, metadata) -> context", self.attention)
        for name in ("progress", "cuda_graphs"):
            value = getattr(self, name)
            _require(isinstance(value, bool) or (name == "progress" and value is None), name,
                     "True or False" + (" or None" if name == "progress" else ""), value)
        u = self.gpu_memory_utilization
        _require(u is None or (isinstance(u, numbers.Real) and not isinstance(u, bool) and 0 < u <= 1),
                 "gpu_memory_utilization", "None or a fraction in (0, 1]", u)

    def _check_memory_choice(self) -> None:
        _require(self.pool is None or isinstance(self.pool, BlockPool), "pool",
                 "None or a BlockPool (a PrefixCachingBlockPool for hashed caching)", self.pool)
        _require(self.cache is None or self.cache in CACHE_KINDS or isinstance(self.cache, CacheManager), "cache",
                 f"None, one of {CACHE_KINDS} or a CacheManager", self.cache)
        if self.gpu_memory_utilization is not None and (self.pool is not None or self.num_blocks is not None
                                                        or self.kv_bytes is not None
                                                        or isinstance(self.cache, CacheManager)):
            raise ValueError("gpu_memory_utilization sizes the KV pool itself; drop pool=, num_blocks=, "
                             "kv_bytes= or the cache-manager object")
        if isinstance(self.cache, CacheManager) and self.pool is not None:
            raise ValueError("pass either pool= or a cache manager as cache=, not both")
        if self.pool is not None and self.cache is not None:
            raise ValueError(f"pool= already chooses the cache; drop cache={self.cache!r}")
        if self.num_blocks is not None and self.kv_bytes is not None:
            raise ValueError("pass either num_blocks or kv_bytes, not both")

    # -- the four ways of sizing the KV pool --------------------------------------------------------

    def build_cache_manager(self, model: Transformer, attention: Callable, kv_dtype: torch.dtype) -> CacheManager:
        """The cache manager (and with it the pool) these options describe (module docstring)."""
        if isinstance(self.cache, CacheManager):
            return self.cache
        if self.pool is not None:
            if isinstance(self.pool, PrefixCachingBlockPool):
                return HashedBlockCacheManager(self.pool)
            return NaiveCacheManager(self.pool.num_blocks, self.block_size, self.pool)
        num_blocks = self.num_blocks or KVCache.pages_for_budget(
            model.config, self._kv_budget(model, attention, kv_dtype), self.block_size, kv_dtype)
        if self.host_kv_tokens is not None:
            return self._build_tiered(num_blocks, bytes_per_token(model.config, kv_dtype))
        if self.cache in ("hashed", "vllm"):
            return HashedBlockCacheManager(PrefixCachingBlockPool(num_blocks, self.block_size, vllm=self.cache == "vllm"))
        if self.cache == "radix":
            return RadixCacheManager(num_blocks, self.block_size)
        return NaiveCacheManager(num_blocks, self.block_size)

    def _build_tiered(self, num_blocks: int, token_bytes: int) -> CacheManager:
        assert self.host_kv_tokens is not None
        if self.cache == "radix":
            from nano_engine.hiradix import TieredRadixCacheManager
            return TieredRadixCacheManager(num_blocks, self.block_size, self.host_kv_tokens,
                                           write_policy=self.write_policy, bytes_per_token=token_bytes)
        from nano_engine.offload import TieredHashedCacheManager
        pool = PrefixCachingBlockPool(num_blocks, self.block_size, vllm=self.cache == "vllm")
        return TieredHashedCacheManager(pool, self.host_kv_tokens, write_policy=self.write_policy,
                                        bytes_per_token=token_bytes)

    def _kv_budget(self, model: Transformer, attention: Callable, kv_dtype: torch.dtype) -> int:
        """Bytes of KV: measured on the GPU, given, or the default."""
        if self.gpu_memory_utilization is not None:
            from nano_engine.fast.gpu_memory import profile_kv_budget
            return profile_kv_budget(model, self.gpu_memory_utilization, attention, self.block_size, kv_dtype,
                                     self.max_num_batched_tokens)
        if self.kv_bytes is not None:
            return self.kv_bytes
        return min(DEFAULT_KV_BYTES, DEFAULT_KV_TOKENS * bytes_per_token(model.config, kv_dtype))
