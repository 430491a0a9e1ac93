"""Helpers shared by the engine, cache-manager and scheduler tests (imported, not a conftest).

The tiny checkpoint (Qwen's real vocabulary, 4 layers) is loaded once per module; its greedy
outputs under ``nano_engine.model.generate`` are the reference every engine run must equal.
"""

from __future__ import annotations

import random

import pytest
import torch

from nano_engine.checkpoints import tiny_checkpoint
from nano_engine.engine import LLMEngine
from nano_engine.model import Transformer, generate

MAX_TOKENS = 5

# 16 prompts from 1 to 300 tokens, long and short interleaved (so a small pool fills up). Several share a 40-token prefix (so prefix caches hit), one
# repeats another exactly, and lengths straddle block boundaries (16, 17, 31, 32, 33, ...).
LENGTHS = [100, 1, 250, 17, 32, 300, 2, 48, 16, 150, 5, 33, 64, 31, 200, 33]


def make_prompts(vocab_size: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    shared = [rng.randrange(vocab_size) for _ in range(40)]
    prompts = []
    for i, n in enumerate(LENGTHS[:-1]):
        tokens = [rng.randrange(vocab_size) for _ in range(n)]
        if i % 2 and n > 40:
            tokens = shared + tokens[40:]
        prompts.append(tokens)
    prompts.append(list(prompts[11]))    # an exact repeat of a 33-token prompt
    return prompts


@pytest.fixture(scope="module")
def single_thread():
    """The tiny model's matrices are far too small for a thread pool to pay; with two busy cores
    (or pytest-xdist) OpenMP's wake-ups cost milliseconds per call."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_model(single_thread) -> Transformer:
    return Transformer.from_pretrained(tiny_checkpoint())


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(tiny_checkpoint())


@pytest.fixture(scope="module")
def prompts(tiny_model) -> list[list[int]]:
    return make_prompts(tiny_model.config.vocab_size)


@pytest.fixture(scope="module")
def eos(tiny_model, prompts) -> int:
    """A stand-in eos: the token the random model emits most often, so that some requests stop
    early and some do not (the real eos id almost never comes out of random weights)."""
    counts: dict[int, int] = {}
    for p in prompts:
        for t in generate(tiny_model, torch.tensor([p]), MAX_TOKENS)[0].tolist():
            counts[t] = counts.get(t, 0) + 1
    return max(counts, key=counts.get)


@pytest.fixture(scope="module")
def reference(tiny_model, prompts, eos) -> list[list[int]]:
    return [generate(tiny_model, torch.tensor([p]), MAX_TOKENS, eos_token_id=eos)[0].tolist() for p in prompts]


@pytest.fixture
def make_engine(tiny_model):
    """``make_engine(**kwargs)`` builds an engine on the tiny model; after the test every engine
    it built must have no request left and no block held outside its cache."""
    engines = []

    def build(model=None, **kwargs) -> LLMEngine:
        engine = LLMEngine(model or tiny_model, **kwargs)
        engines.append(engine)
        return engine

    yield build
    for engine in engines:
        engine.check_no_leaks()


def total(engine: LLMEngine, key: str, since: int = 0) -> int:
    return sum(step[key] for step in engine.step_log[since:])


def assert_running_prefixes_intact(engine: LLMEngine) -> None:
    """Every running sequence still owns the pages in its block table: referenced in the pool,
    never in a free queue, and (radix) its locked prefix is still in the tree at the same pages."""
    pool = engine.pool
    free = set(pool.free_queue)
    for seq in engine.scheduler.running:
        for page in seq.block_table:
            assert page not in free and pool.ref_cnt[page] > 0, f"{seq}: page {page} was released"
        handle = seq.cache_handle
        if handle is not None and hasattr(handle, "node"):
            tree = engine.cache.trees[handle.namespace]
            if handle.node is not tree.root:
                assert handle.node.parent is not None and handle.node.lock_ref > 0, f"{seq}: prefix evicted"
            slots, node = tree.match_prefix(seq.token_ids[:handle.num_tokens])
            bs = engine.block_size
            assert [s // bs for s in slots[::bs]] == seq.block_table[:handle.num_tokens // bs]
    owners: dict[int, int] = {}
    for seq in engine.scheduler.running:
        shared = seq.cache_handle.num_tokens // engine.block_size if hasattr(seq.cache_handle, "node") else 0
        for page in seq.block_table[shared:]:      # radix: pages past the locked prefix are private
            owners[page] = owners.get(page, 0) + 1
    if hasattr(engine.cache, "trees"):
        assert all(n == 1 for n in owners.values()), "two running requests write to the same page"
    else:   # naive / hashed: a page's references are exactly its holders (plus pins)
        pinned = getattr(pool, "pinned_blocks", set())
        for page, n in owners.items():
            assert pool.ref_cnt[page] == n or page in pinned, f"page {page}: ref_cnt {pool.ref_cnt[page]}, {n} holders"
