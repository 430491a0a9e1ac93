"""Fixtures shared by the test files (pytest finds them here; nothing imports this file).

Everything runs offline: no model hub is ever contacted. The tiny checkpoint (Qwen's real
vocabulary, 4 layers) is loaded once per module; its greedy outputs under
``nano_engine.model.generate`` are the reference every engine run must equal. Plain helpers
(constants, prompt builders, invariant checks) live in ``engine_helpers.py``.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Imported after the environment above: huggingface_hub reads it once, at its first import.
import pytest
import torch
from engine_helpers import MAX_TOKENS, make_prompts

from nano_engine.checkpoints import tiny_checkpoint
from nano_engine.engine import LLMEngine
from nano_engine.model import Transformer, generate


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
    return max(counts, key=counts.__getitem__)


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
