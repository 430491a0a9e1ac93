"""engine_config.py: every ``LLMEngine`` option in one dataclass, checked once, at construction.

``LLMEngine(model, **options)`` builds an :class:`EngineConfig` from its keyword arguments, so a
wrong option fails before anything is allocated, with a ``ValueError`` naming the option and its
allowed values. The KV pool can be sized four ways, and :meth:`EngineConfig.layout` is the one
place that tells them apart: it settles the number of blocks, the block size and the kind of cache
(a :class:`KVLayout`) before anything is built. The engine then allocates the device KV cache, and
:meth:`EngineConfig.build_cache_manager` builds the manager on it (a host tier once, shaped like it).

1. ``cache=<CacheManager>``: the given manager, with its own pool and block size;
2. ``pool=<BlockPool>``: a ``PrefixCachingBlockPool`` means vLLM-style hashed caching on it (its
   size and block size), a plain ``BlockPool`` no caching (its size, and ``block_size=``);
3. ``gpu_memory_utilization=0.9``: what the GPU has left after a profiling forward
   (``nano_engine.fast.gpu_memory``, like vLLM's ``gpu_memory_utilization``);
4. ``num_blocks=`` or ``kv_bytes=``, else the default: 16384 tokens or 2 GiB of KV, whichever is
   smaller; with ``cache="none" | "hashed" | "vllm" | "radix"`` choosing the manager (``"vllm"``:
   ``"hashed"`` on ``PrefixCachingBlockPool(..., vllm=True)``, blocks registered when allocated).

An option the chosen way would ignore is refused, never dropped: ``num_blocks=`` or ``kv_bytes=``
beside ``pool=`` or a manager object, and ``block_size=`` beside one that has its own.

A host tier (``host_kv_tokens=N, write_policy=...``, or ``host_tier=HostTier(...)``) is turned
into one :class:`~nano_engine.host_tier.HostTier` here, checked once: its size (at least one
block, and no more tokens than the machine has bytes of memory, then, once the model's bytes per
token are known and still before any allocation, no more KV than the machine's memory), its
write policy, and that the cache takes it (the hashed cache has no write-back).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from nano_engine.attention import PagedAttention
from nano_engine.cache_manager import CacheManager, HashedBlockCacheManager, NaiveCacheManager, RadixCacheManager
from nano_engine.checks import require, require_int
from nano_engine.host_tier import HostTier, as_host_tier
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
DEFAULT_BLOCK_SIZE = 16

DEFAULT_STEP_LOG_SIZE = 10_000
"""``LLMEngine.step_log`` keeps the last this many steps (about 10 MB); None keeps every step."""

CACHE_KINDS = ("none", "hashed", "vllm", "radix")
ATTENTION_NAMES = ("torch", "triton", "auto")


@dataclass(frozen=True)
class KVLayout:
    """The KV pool, settled before anything is built: ``num_blocks`` blocks of ``block_size``
    tokens, managed by a cache of ``kind`` (one of ``CACHE_KINDS``, or ``"given"`` for a
    cache-manager object), with ``host_tier`` under it or None."""

    num_blocks: int
    block_size: int
    kind: str
    host_tier: HostTier | None = None


@dataclass
class EngineConfig:
    """The options of :class:`~nano_engine.engine.LLMEngine` (see its docstring for what each does).

    ``block_size`` None means 16, or the block size of the ``pool=`` / ``cache=`` object given.
    ``host_tier`` is the host-memory tier as one :class:`~nano_engine.host_tier.HostTier`;
    ``host_kv_tokens=`` (with ``write_policy=``) is shorthand for it, and ``host_tier`` holds the
    value made from them after construction."""

    eos_token_id: int | None = None
    pool: BlockPool | None = None
    cache: str | CacheManager | None = None
    num_blocks: int | None = None
    block_size: int | None = None
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
    write_policy: str | None = None
    host_tier: HostTier | None = None

    def __post_init__(self) -> None:
        self._check_values()
        self._check_memory_choice()
        make_policy(self.policy)        # raises for an unknown name or a non-policy
        self.host_tier = self._check_host_tier()

    def _check_host_tier(self) -> HostTier | None:
        """``host_kv_tokens`` (or ``host_tier``) adds a host-memory tier under a prefix cache
        (``nano_engine.tiered_cache_manager``); ``write_policy`` says when it is written. The tier
        is checked here, once, as a :class:`HostTier`: its size, its policy, and that the cache can
        take that policy (the hashed cache has no write-back)."""
        require(self.host_tier is None or isinstance(self.host_tier, HostTier), "host_tier",
                "None or a HostTier", self.host_tier)
        if self.host_tier is not None:
            if (self.host_kv_tokens not in (None, self.host_tier.tokens)
                    or self.write_policy not in (None, self.host_tier.write_policy)):
                raise ValueError("pass either host_tier= or host_kv_tokens= / write_policy=, not both")
        elif self.host_kv_tokens is None:
            if self.write_policy is not None:
                raise ValueError(f"write_policy={self.write_policy!r} needs a host tier: pass host_kv_tokens= too")
            return None
        require(self.cache in ("radix", "hashed", "vllm"), "cache",
                "'radix', 'hashed' or 'vllm' when host_kv_tokens is given (the host tier sits under a prefix cache)",
                self.cache)
        tier = self.host_tier or as_host_tier(self.host_kv_tokens, write_policy=self.write_policy)  # type: ignore[arg-type]
        tier.num_pages(self.block_size or DEFAULT_BLOCK_SIZE)      # at least one block
        return tier.for_cache(self.cache)  # type: ignore[arg-type]

    def _check_values(self) -> None:
        require_int("eos_token_id", self.eos_token_id, minimum=0, optional=True)
        for name in ("num_blocks", "kv_bytes", "max_num_batched_tokens"):
            require_int(name, getattr(self, name), optional=True)
        if self.block_size is not None:      # None: the default (16) or the pool's own
            require_int("block_size", self.block_size)
        require_int("step_log_size", self.step_log_size, minimum=0, optional=True)
        require_int("max_num_seqs", self.max_num_seqs)
        require(self.kv_dtype is None or (isinstance(self.kv_dtype, torch.dtype) and self.kv_dtype.is_floating_point),
                "kv_dtype", "None (the model's dtype) or a floating torch dtype (torch.float32, torch.bfloat16, ...)",
                self.kv_dtype)
        require(self.attention in ATTENTION_NAMES or (callable(self.attention) and not isinstance(self.attention, str)),
                "attention", f"one of {ATTENTION_NAMES} or a callable (kv_cache, metadata) -> context", self.attention)
        for name in ("progress", "cuda_graphs"):
            value = getattr(self, name)
            require(isinstance(value, bool) or (name == "progress" and value is None), name,
                    "True or False" + (" or None" if name == "progress" else ""), value)
        u = self.gpu_memory_utilization
        require(u is None or (isinstance(u, numbers.Real) and not isinstance(u, bool) and 0 < u <= 1),
                "gpu_memory_utilization", "None or a fraction in (0, 1]", u)

    def _check_memory_choice(self) -> None:
        """The four ways of sizing the pool (module docstring) exclude each other: an option that
        the chosen way would ignore is refused, not dropped."""
        require(self.pool is None or isinstance(self.pool, BlockPool), "pool",
                "None or a BlockPool (a PrefixCachingBlockPool for hashed caching)", self.pool)
        require(self.cache is None or self.cache in CACHE_KINDS or isinstance(self.cache, CacheManager), "cache",
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
        given = self.pool if self.pool is not None else self.cache if isinstance(self.cache, CacheManager) else None
        if given is not None:
            what = "pool=" if given is self.pool else "a cache manager as cache="
            carries_block_size = not (given is self.pool and not isinstance(self.pool, PrefixCachingBlockPool))
            for name in ("num_blocks", "kv_bytes") + (("block_size",) if carries_block_size else ()):
                if getattr(self, name) is not None:
                    raise ValueError(f"{what} sizes the KV pool with its own number of blocks"
                                     f"{' and block size' if carries_block_size else ''}; drop {name}={getattr(self, name)!r}")

    # -- the four ways of sizing the KV pool, settled into one layout ------------------------------

    def layout(self, model: Transformer, attention: Callable, kv_dtype: torch.dtype) -> KVLayout:
        """Number of blocks, block size and cache kind (module docstring), before anything is
        allocated; a host tier larger than this machine's memory is refused here too."""
        tier = self.host_tier
        if tier is not None:
            tier.check_memory(bytes_per_token(model.config, kv_dtype))
        if isinstance(self.cache, CacheManager):
            return KVLayout(self.cache.num_blocks, self.cache.block_size, "given")
        if isinstance(self.pool, PrefixCachingBlockPool):
            return KVLayout(self.pool.num_blocks, self.pool.block_size, "vllm" if self.pool.vllm else "hashed")
        block_size = self.block_size or DEFAULT_BLOCK_SIZE
        if self.pool is not None:
            return KVLayout(self.pool.num_blocks, block_size, "none")
        num_blocks = self.num_blocks or KVCache.pages_for_budget(
            model.config, self._kv_budget(model, attention, kv_dtype, block_size), block_size, kv_dtype)
        return KVLayout(num_blocks, block_size, self.cache or "none", tier)

    def build_cache_manager(self, layout: KVLayout, kv_cache: KVCache, layerwise: bool = True) -> CacheManager:
        """The cache manager of ``layout``, on the engine's allocated ``kv_cache`` (a host tier is
        built once, shaped like it; ``layerwise``: attention waits for a load layer by layer)."""
        if isinstance(self.cache, CacheManager):
            self.cache.bind_kv_cache(kv_cache, layerwise)
            return self.cache
        if isinstance(self.pool, PrefixCachingBlockPool):
            return HashedBlockCacheManager(self.pool)
        if self.pool is not None:
            return NaiveCacheManager(self.pool.num_blocks, layout.block_size, self.pool)
        n, bs, tier = layout.num_blocks, layout.block_size, layout.host_tier
        if tier is not None:
            from nano_engine.tiered_cache_manager import TieredHashedCacheManager, TieredRadixCacheManager
            if layout.kind == "radix":
                return TieredRadixCacheManager(n, bs, tier, kv_cache=kv_cache, layerwise=layerwise)
            pool = PrefixCachingBlockPool(n, bs, vllm=layout.kind == "vllm")
            return TieredHashedCacheManager(pool, tier, kv_cache=kv_cache, layerwise=layerwise)
        if layout.kind in ("hashed", "vllm"):
            return HashedBlockCacheManager(PrefixCachingBlockPool(n, bs, vllm=layout.kind == "vllm"))
        if layout.kind == "radix":
            return RadixCacheManager(n, bs)
        return NaiveCacheManager(n, bs)

    def step_token_budget(self) -> int | None:
        """``max_num_batched_tokens`` for the scheduler. None means "as many as the pool holds",
        except when ``gpu_memory_utilization`` sized the pool: its profiling forward measured a
        step of ``DEFAULT_PROFILE_TOKENS`` (8192) tokens, so no step may be larger (a bigger one
        could need more activation memory than the profile left free)."""
        if self.max_num_batched_tokens is None and self.gpu_memory_utilization is not None:
            from nano_engine.fast.gpu_memory import DEFAULT_PROFILE_TOKENS
            return DEFAULT_PROFILE_TOKENS
        return self.max_num_batched_tokens

    def _kv_budget(self, model: Transformer, attention: Callable, kv_dtype: torch.dtype, block_size: int) -> int:
        """Bytes of KV: measured on the GPU, given, or the default."""
        if self.gpu_memory_utilization is not None:
            from nano_engine.fast.gpu_memory import profile_kv_budget
            return profile_kv_budget(model, self.gpu_memory_utilization, attention, block_size, kv_dtype,
                                     self.max_num_batched_tokens)
        if self.kv_bytes is not None:
            return self.kv_bytes
        return min(DEFAULT_KV_BYTES, DEFAULT_KV_TOKENS * bytes_per_token(model.config, kv_dtype))
