"""EngineConfig: sizes settled before anything is built, conflicting options refused, the host
tier checked once (as a HostTier) and refused before any allocation when it cannot be."""

from __future__ import annotations

import pytest

from nano_engine.engine import LLMEngine
from nano_engine.engine_config import EngineConfig, KVLayout
from nano_engine.host_tier import HostTier
from nano_engine.kv_cache import KVCache
from nano_engine.paged import BlockPool
from nano_engine.prefix_cache import PrefixCachingBlockPool


def test_hashed_cache_with_write_back_is_refused_when_the_config_is_made():
    """vLLM's offloading has no write-back; the refusal used to come only after the pool was
    sized (after a profiling forward with gpu_memory_utilization)."""
    with pytest.raises(ValueError, match="write_back.*needs cache='radix'"):
        EngineConfig(cache="hashed", host_kv_tokens=4096, write_policy="write_back")
    with pytest.raises(ValueError, match="write_back.*needs cache='radix'"):
        EngineConfig(cache="vllm", host_tier=HostTier(4096, "write_back"))
    assert EngineConfig(cache="radix", host_kv_tokens=4096, write_policy="write_back").host_tier == \
        HostTier(4096, "write_back")


@pytest.mark.parametrize("options, dropped", [
    ({"pool": PrefixCachingBlockPool(64, 32), "block_size": 8}, "block_size"),
    ({"pool": PrefixCachingBlockPool(64, 32), "num_blocks": 10}, "num_blocks"),
    ({"pool": PrefixCachingBlockPool(64, 32), "kv_bytes": 2**20}, "kv_bytes"),
    ({"pool": BlockPool(26), "num_blocks": 10}, "num_blocks"),
    ({"pool": BlockPool(26), "kv_bytes": 2**20}, "kv_bytes"),
])
def test_sizes_beside_pool_are_refused_not_ignored(options, dropped):
    """``pool=`` carries its number of blocks (and a PrefixCachingBlockPool its block size): a
    size given beside it used to be silently ignored."""
    with pytest.raises(ValueError, match=f"pool= sizes the KV pool .*drop {dropped}="):
        EngineConfig(**options)


def test_sizes_beside_a_cache_manager_object_are_refused():
    from nano_engine.cache_manager import RadixCacheManager
    with pytest.raises(ValueError, match="cache manager as cache= sizes .*drop num_blocks="):
        EngineConfig(cache=RadixCacheManager(8, 4), num_blocks=16)
    with pytest.raises(ValueError, match="drop block_size="):
        EngineConfig(cache=RadixCacheManager(8, 4), block_size=8)


def test_a_plain_pool_takes_its_block_size_from_the_options(tiny_model):
    """A ``BlockPool`` has no block size of its own: ``block_size=`` beside it is what sizes it."""
    engine = LLMEngine(tiny_model, pool=BlockPool(26), block_size=8)
    assert (engine.cache.num_blocks, engine.block_size, engine.kv_cache.page_size) == (26, 8, 8)


@pytest.mark.parametrize("options, want", [
    ({"cache": "radix", "num_blocks": 9, "block_size": 4}, KVLayout(9, 4, "radix")),
    ({"pool": PrefixCachingBlockPool(12, 32)}, KVLayout(12, 32, "hashed")),
    ({"pool": PrefixCachingBlockPool(12, 8, vllm=True)}, KVLayout(12, 8, "vllm")),
    ({"pool": BlockPool(5)}, KVLayout(5, 16, "none")),
    ({"cache": "hashed", "num_blocks": 20, "host_kv_tokens": 64}, KVLayout(20, 16, "hashed", HostTier(64))),
])
def test_the_layout_is_settled_before_anything_is_built(tiny_model, options, want):
    config = EngineConfig(**options)
    assert config.layout(tiny_model, None, tiny_model.dtype) == want
    engine = LLMEngine(tiny_model, config=config)
    assert (engine.cache.num_blocks, engine.block_size, engine.kv_cache.num_pages) == \
        (want.num_blocks, want.block_size, want.num_blocks)


def test_host_tier_options_become_one_value():
    config = EngineConfig(cache="radix", host_kv_tokens=4096, write_policy="write_through_selective")
    assert config.host_tier == HostTier(4096, "write_through_selective") and config.host_tier.store_threshold == 2
    with pytest.raises(ValueError, match="host_tier= or host_kv_tokens="):
        EngineConfig(cache="radix", host_tier=HostTier(4096), host_kv_tokens=2048)
    with pytest.raises(ValueError, match="write_policy='write_back' needs a host tier"):
        EngineConfig(cache="radix", write_policy="write_back")
    with pytest.raises(ValueError, match="host_kv_tokens must be at least one block"):
        EngineConfig(cache="radix", host_kv_tokens=8, block_size=16)


@pytest.mark.parametrize("tokens", [10**30, 64 * 2**30])
def test_an_absurd_host_tier_is_refused_before_any_allocation(tiny_model, monkeypatch, tokens):
    """``10**30`` tokens, or 64 GiB given as a number of tokens: a ValueError that names the
    option, raised before the device pool or the host pool allocates anything."""
    def no_allocation(*args, **kwargs):
        raise AssertionError("something was allocated before the host tier was refused")

    monkeypatch.setattr(KVCache, "__init__", no_allocation)
    monkeypatch.setattr(BlockPool, "__init__", no_allocation)
    with pytest.raises(ValueError, match="host_kv_tokens"):
        LLMEngine(tiny_model, cache="radix", num_blocks=8, host_kv_tokens=tokens)


def test_a_profiled_pool_caps_each_step_at_the_profiled_tokens():
    """The static review's finding 9: with ``gpu_memory_utilization`` and no step budget, a step
    could take the whole pool while the profile measured 8,192 tokens of activations."""
    from nano_engine.fast.gpu_memory import DEFAULT_PROFILE_TOKENS
    assert EngineConfig(gpu_memory_utilization=0.9, max_num_batched_tokens=None).step_token_budget() == \
        DEFAULT_PROFILE_TOKENS
    assert EngineConfig(max_num_batched_tokens=None).step_token_budget() is None
    assert EngineConfig(gpu_memory_utilization=0.9, max_num_batched_tokens=2048).step_token_budget() == 2048


@pytest.mark.parametrize("cache", ["radix", "hashed", "vllm"])
def test_the_host_pool_and_copy_engine_are_built_once(tiny_model, monkeypatch, cache):
    """They used to be built as placeholders with the manager, then again once the KV cache was
    allocated (``bind_kv_cache``); now the KV cache comes first and each is built once, shaped like it."""
    from nano_engine.host_tier import CopyEngine, HostKVPool

    built = {"pool": 0, "copies": 0}
    real_pool, real_copies = HostKVPool.__init__, CopyEngine.__init__

    def count_pool(self, *args, **kwargs):
        built["pool"] += 1
        real_pool(self, *args, **kwargs)

    def count_copies(self, *args, **kwargs):
        built["copies"] += 1
        real_copies(self, *args, **kwargs)

    monkeypatch.setattr(HostKVPool, "__init__", count_pool)
    monkeypatch.setattr(CopyEngine, "__init__", count_copies)
    engine = LLMEngine(tiny_model, cache=cache, num_blocks=16, host_kv_tokens=256)
    assert built == {"pool": 1, "copies": 1}, built
    assert engine.cache.copies.device_kv is engine.kv_cache and len(engine.cache.host.k) == tiny_model.config.num_hidden_layers


def test_a_tiered_manager_object_gets_the_engines_kv_cache(tiny_model):
    """A manager made by hand (no KV cache yet) is given the engine's, and its host pool its
    tensors, once; the engine then serves through it."""
    import torch

    from nano_engine.engine import SamplingParams
    from nano_engine.model import generate
    from nano_engine.tiered_cache_manager import TieredRadixCacheManager
    manager = TieredRadixCacheManager(16, 16, HostTier(512))
    assert manager.host.k == [] and manager.copies.device_kv is None
    engine = LLMEngine(tiny_model, cache=manager)
    assert manager.copies.device_kv is engine.kv_cache and len(manager.host.k) == tiny_model.config.num_hidden_layers
    prompt = list(range(1, 40))
    assert engine.generate([prompt], SamplingParams(max_tokens=3)) == \
        [generate(tiny_model, torch.tensor([prompt]), 3)[0].tolist()]
    engine.check_no_leaks()
