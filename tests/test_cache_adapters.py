"""nano_engine.cache_adapters: a from-scratch pool, prefix cache or radix tree under LLMEngine.

The package's own classes behind the adapters serve exactly what the package's managers serve
(the independent reference here is the package's manager over the same class, step by step), and a
structure with a bug is reported at the first step that differs, naming the step and the request.
"""

import random

import pytest
import torch

from nano_engine.cache_adapters import (
    PoolAdapter,
    PrefixCacheAdapter,
    RadixTreeAdapter,
    serve_side_by_side,
    small_model,
)
from nano_engine.cache_manager import HashedBlockCacheManager, NaiveCacheManager, RadixCacheManager
from nano_engine.engine import SamplingParams
from nano_engine.paged import BlockPool
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.radix import RadixCache

_RNG = random.Random(0)
_SYSTEM = [_RNG.randrange(500) for _ in range(24)]
PROMPTS = [_SYSTEM + [_RNG.randrange(500) for _ in range(_RNG.randrange(3, 10))] for _ in range(5)]
WAVES = [PROMPTS[:1], PROMPTS[1:]]
PARAMS = SamplingParams(max_tokens=5)


@pytest.fixture(scope="module")
def model():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield small_model()
    torch.set_num_threads(threads)


def test_small_model_is_the_tiny_body_over_a_small_vocabulary(model):
    assert model.config.vocab_size == 512, "the vocabulary is cut to 512 tokens"
    assert model.config.num_hidden_layers == 4, "the tiny preset's 4 layers"
    assert model.config.hidden_size == 128, "the tiny preset's width"
    again = small_model()
    for (name, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), f"{name}: the same seed gives the same weights"


@pytest.mark.parametrize("case", ["pool", "prefix cache", "radix tree"])
def test_the_packages_classes_serve_like_the_packages_managers(model, case):
    yours, package = {
        "pool": (PoolAdapter(BlockPool(16), block_size=4), NaiveCacheManager(16, 4)),
        "prefix cache": (PrefixCacheAdapter(PrefixCachingBlockPool(16, 4)),
                         HashedBlockCacheManager(PrefixCachingBlockPool(16, 4))),
        "radix tree": (RadixTreeAdapter(RadixCache, num_tokens=64), RadixCacheManager(64, 1)),
    }[case]
    run = serve_side_by_side(yours, package, WAVES, PARAMS, model=model)
    assert len(run.outputs) == 5, "every request was served"
    assert all(len(out) == 5 for out in run.outputs), "five tokens each (no EOS on this model)"
    if case != "pool":
        assert run.cached_tokens[1:] == [24] * 4, "the four later requests hit the 24-token prefix"
    assert run.preemptions > 0, "the pool is small enough to preempt: free paths are exercised"


class HandsOutABlockInUse(BlockPool):
    """allocate() swaps its last block for one another request holds."""

    def allocate(self, n):
        blocks = super().allocate(n)
        held = [b for b in range(self.num_blocks) if self.ref_cnt[b] and b not in (blocks or [])]
        if blocks and held:
            blocks[-1] = held[0]
        return blocks


def test_a_pool_that_hands_out_a_block_in_use_is_named(model):
    with pytest.raises(AssertionError, match=r"^step \d+, request \d+: your allocate\(\d+\) returned .* in use"):
        serve_side_by_side(PoolAdapter(HandsOutABlockInUse(16), 4), NaiveCacheManager(16, 4), WAVES, PARAMS,
                           model=model)


class ServesTheWrongBlock(PrefixCachingBlockPool):
    """lookup() returns the right number of hit blocks, but the wrong ones."""

    def lookup(self, token_ids, **keys):
        hit = super().lookup(token_ids, **keys)
        return [(b + 1) % self.num_blocks for b in hit]


def test_a_cache_that_serves_the_wrong_blocks_is_caught_by_its_tokens(model):
    with pytest.raises(AssertionError, match=r"^step \d+, request \d+: output token \d+ is \d+ on your cache"):
        serve_side_by_side(PrefixCacheAdapter(ServesTheWrongBlock(32, 4)),
                           HashedBlockCacheManager(PrefixCachingBlockPool(32, 4)), WAVES, PARAMS, model=model)


class RaisesInFree(BlockPool):
    def free(self, blocks):
        raise KeyError("lost")


def test_an_exception_in_the_structure_names_the_step_the_request_and_the_call(model):
    with pytest.raises(KeyError, match=r"step \d+, request 0: your free\(\[.*\]\) raised KeyError"):
        serve_side_by_side(PoolAdapter(RaisesInFree(16), 4), NaiveCacheManager(16, 4), WAVES, PARAMS, model=model)


class CheckpointFreesTheMatchedPrefix(RadixCache):
    def checkpoint(self, node, key, value):
        already = self.insert(key, value)
        slots, new = self.match_prefix(key)
        self.inc_lock_ref(new)
        self.dec_lock_ref(node)
        return slots, new, list(value[:already])      # the tree's own slots too


def test_a_checkpoint_that_frees_the_trees_slots_is_named(model):
    with pytest.raises(AssertionError, match=r"^step \d+, request \d+: your checkpoint returned duplicates"):
        serve_side_by_side(RadixTreeAdapter(CheckpointFreesTheMatchedPrefix, 64), RadixCacheManager(64, 1), WAVES,
                           PARAMS, model=model)


def test_a_different_hit_count_is_named(model):
    """A prefix cache that never hits serves the same tokens (caching is only an optimisation), and
    is caught by its hits."""
    class NeverHits(PrefixCachingBlockPool):
        def lookup(self, token_ids, **keys):
            super().lookup(token_ids, **keys)
            return []

    with pytest.raises(AssertionError, match=r"^step \d+, request 1: admitted with 0 prompt tokens from your cache, "
                                             r"24 from the package's"):
        serve_side_by_side(PrefixCacheAdapter(NeverHits(32, 4)), HashedBlockCacheManager(PrefixCachingBlockPool(32, 4)),
                           WAVES, PARAMS, model=model)
