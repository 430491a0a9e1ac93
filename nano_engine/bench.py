"""bench.py: offline throughput of LLMEngine beside transformers' batched ``generate``, in one run.

The workload is nano-vllm's benchmark: ``num_seqs`` requests of random token ids, prompt and output
lengths uniform in a range (100-1024 both at nano-vllm's scale), ``ignore_eos`` so every request
generates exactly its length; throughput = output tokens / wall time. Greedy decoding everywhere
(nano-vllm samples at temperature 0.6; the cost per token is the same).

Each engine configuration runs the same prompts on the same loaded model:

* ``torch``: the PyTorch reference attention (``nano_engine.attention.PagedAttention``);
* ``triton``: the Triton kernels (``nano_engine.fast.fast_attention``), CUDA only;
* ``triton+graphs``: Triton plus decode steps replayed from CUDA graphs (``nano_engine.fast.cuda_graph``).

transformers gets the same prompts as one left-padded batch (or batches of ``hf_batch_size``) with
``min_new_tokens = max_new_tokens`` = the longest output in the batch, its stand-in for
``ignore_eos``. A static batch cannot drop a finished row, so it computes more tokens than were
asked for; both rates are printed: *useful* (the requested tokens, the engine's work) and
*generated* (everything it computed). Ratios use useful tokens.

For the decode steps (steps without prefill work) the table puts the measured step time beside
the memory-bandwidth bound: a decode step must read every weight once and every scheduled
sequence's KV once, so it cannot take less than ``(weight bytes + context tokens x KV bytes per
token) / bandwidth``, with the bandwidth of a device-to-device copy measured in the same run.

The prefix-heavy variant gives every request one long shared system prompt (random tokens) and a
short private suffix, and runs it with each cache manager (none / hashed / radix).

    python -m nano_engine bench                              # the random `tiny` preset on CPU, a few minutes
    python benchmarks/throughput.py --model full             # the same command: Qwen3-0.6B shapes, random weights
    python -m nano_engine bench --model full --device cuda --prefix-heavy   # nano-vllm's scale, bf16
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import torch

from nano_engine.paged import ceil_div

ENGINE_CONFIGS: dict[str, dict[str, Any]] = {   # name -> LLMEngine keyword arguments
    "torch": dict(attention="torch"),
    "triton": dict(attention="triton"),
    "triton+graphs": dict(attention="triton", cuda_graphs=True),
}
CACHES = ("none", "hashed", "radix")


class RandomShape(TypedDict):
    """A :func:`random_workload`: how many sequences, and (inclusive) ranges of lengths."""
    num_seqs: int
    prompt_lens: tuple[int, int]
    output_lens: tuple[int, int]


class PrefixShape(TypedDict):
    """A :func:`shared_prefix_workload`: one shared prefix, then a suffix of its own per sequence."""
    num_seqs: int
    prefix_len: int
    suffix_lens: tuple[int, int]
    output_lens: tuple[int, int]


# Per model and device; "cuda" is nano-vllm's scale.
PRESETS: dict[str, RandomShape] = {
    "tiny": RandomShape(num_seqs=64, prompt_lens=(50, 300), output_lens=(20, 120)),
    "full": RandomShape(num_seqs=8, prompt_lens=(16, 64), output_lens=(8, 32)),
    "cuda": RandomShape(num_seqs=256, prompt_lens=(100, 1024), output_lens=(100, 1024)),
}
PREFIX_PRESETS: dict[str, PrefixShape] = {
    "tiny": PrefixShape(num_seqs=32, prefix_len=256, suffix_lens=(8, 32), output_lens=(8, 16)),
    "full": PrefixShape(num_seqs=8, prefix_len=128, suffix_lens=(8, 16), output_lens=(4, 8)),
    "cuda": PrefixShape(num_seqs=256, prefix_len=2048, suffix_lens=(64, 256), output_lens=(32, 128)),
}


# --------------------------------------------------------------------------- workloads

@dataclass
class Workload:
    name: str
    prompts: list[list[int]]
    output_lens: list[int]

    @property
    def output_tokens(self) -> int:
        return sum(self.output_lens)

    @property
    def prompt_tokens(self) -> int:
        return sum(map(len, self.prompts))

    def describe(self) -> str:
        lens = [len(p) for p in self.prompts]
        return (f"{self.name}: {len(self.prompts)} sequences, prompts {min(lens)}-{max(lens)} tokens "
                f"({self.prompt_tokens} in all), outputs {min(self.output_lens)}-{max(self.output_lens)} "
                f"({self.output_tokens} in all)")


def random_workload(num_seqs: int, prompt_lens: tuple[int, int], output_lens: tuple[int, int],
                    vocab_size: int, seed: int = 0) -> Workload:
    """nano-vllm's benchmark: random token ids, lengths uniform in the given (inclusive) ranges."""
    _check_range("prompt lengths", prompt_lens)
    _check_range("output lengths", output_lens)
    rng = random.Random(seed)
    prompts = [[rng.randrange(vocab_size) for _ in range(rng.randint(*prompt_lens))] for _ in range(num_seqs)]
    outputs = [rng.randint(*output_lens) for _ in range(num_seqs)]
    return Workload("random", prompts, outputs)


def shared_prefix_workload(num_seqs: int, prefix_len: int, suffix_lens: tuple[int, int],
                           output_lens: tuple[int, int], vocab_size: int, seed: int = 0) -> Workload:
    """Every prompt = one shared ``prefix_len``-token system prompt + its own random suffix."""
    _check_range("suffix lengths", suffix_lens)
    _check_range("output lengths", output_lens)
    rng = random.Random(seed)
    prefix = [rng.randrange(vocab_size) for _ in range(prefix_len)]
    prompts = [prefix + [rng.randrange(vocab_size) for _ in range(rng.randint(*suffix_lens))]
               for _ in range(num_seqs)]
    outputs = [rng.randint(*output_lens) for _ in range(num_seqs)]
    return Workload(f"shared prefix of {prefix_len}", prompts, outputs)


def _check_range(name: str, bounds: tuple[int, int]) -> None:
    if not 1 <= bounds[0] <= bounds[1]:
        raise ValueError(f"{name} must satisfy 1 <= min <= max, got {bounds[0]}..{bounds[1]}")


# --------------------------------------------------------------------------- measurements

@dataclass
class RunResult:
    """One timed run: wall and process CPU seconds, output tokens, and details by name."""

    name: str
    seconds: float
    cpu_seconds: float
    output_tokens: int
    outputs: list[list[int]] = field(repr=False)
    info: dict = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def release_memory(device: torch.device) -> None:
    """Give freed tensors back (an engine's KV pool is most of the GPU)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def copy_bandwidth(device: torch.device, num_bytes: int = 2**30, repeats: int = 10) -> float:
    """Bytes per second moved by a device-to-device copy, counting the read and the write."""
    device = torch.device(device)
    src = torch.empty(num_bytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        dst.copy_(src)
    synchronize(device)
    elapsed = time.perf_counter() - start
    del src, dst
    release_memory(device)
    return 2 * num_bytes * repeats / elapsed


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes a decode step reads for weights: every parameter once (a tied embedding counts once,
    as the LM head; the embedding lookup itself touches only a few rows)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def decode_roofline(steps: list[dict], weights: int, kv_bytes_per_token: int, bandwidth: float) -> dict:
    """Mean measured time of the decode-only steps beside their mean memory-bandwidth bound."""
    decode = [s for s in steps if s["num_prefill_tokens"] == 0 and s["num_decode_tokens"] > 0]
    if not decode:
        return {}
    bounds = [(weights + s["num_context_tokens"] * kv_bytes_per_token) / bandwidth for s in decode]
    measured = sum(s["time"] for s in decode) / len(decode)
    bound = sum(bounds) / len(bounds)
    return {"decode_steps": len(decode), "decode_step_ms": 1e3 * measured, "bound_ms": 1e3 * bound,
            "mean_batch": sum(s["num_seqs"] for s in decode) / len(decode),
            "mean_context": sum(s["num_context_tokens"] for s in decode) / len(decode)}


def run_engine(model, workload: Workload, config: str = "torch", *, cache: str = "none", block_size: int = 16,
               max_num_batched_tokens: int | None = 4096, max_num_seqs: int = 256,
               gpu_memory_utilization: float | None = None, bandwidth: float | None = None) -> RunResult:
    """Time ``LLMEngine.generate`` on ``workload`` with one engine configuration (``ENGINE_CONFIGS``).

    The KV pool: ``gpu_memory_utilization`` of the GPU if given, else exactly what the workload
    needs (so no run is slowed by preemption). The engine is built, warmed up (kernels compiled,
    graphs captured), timed, checked for leaks, and deleted."""
    from nano_engine.engine import LLMEngine, SamplingParams

    device = model.device
    kwargs = dict(ENGINE_CONFIGS[config])
    if gpu_memory_utilization is not None:
        kwargs["gpu_memory_utilization"] = gpu_memory_utilization
    else:
        kwargs["num_blocks"] = 16 + sum(ceil_div(len(p) + o, block_size)
                                        for p, o in zip(workload.prompts, workload.output_lens))
    build_start = time.perf_counter()
    engine = LLMEngine(model, cache=cache, block_size=block_size, max_num_batched_tokens=max_num_batched_tokens,
                       max_num_seqs=max_num_seqs, progress=False, **kwargs)
    if kwargs["attention"] == "triton":
        from nano_engine.fast.fast_attention import precompile
        precompile(engine.kv_cache, model.config.num_attention_heads)
    engine.generate([workload.prompts[0][:16], workload.prompts[-1][:5]], SamplingParams(max_tokens=4))  # warm-up
    setup_s = time.perf_counter() - build_start
    first_step = len(engine.step_log)
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in workload.output_lens]
    synchronize(device)
    start, cpu_start = time.perf_counter(), time.process_time()
    outputs = engine.generate(workload.prompts, params)
    synchronize(device)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    steps = engine.step_log[first_step:]
    if [len(o) for o in outputs] != workload.output_lens:
        raise AssertionError(f"{config}: the engine did not generate exactly the requested lengths")
    engine.check_no_leaks()
    info = {"steps": len(steps), "graph_steps": sum(s.get("cuda_graph", False) for s in steps),
            "preempted": sum(s["num_preempted"] for s in steps),
            "computed_prompt_tokens": sum(s["num_prefill_tokens"] for s in steps),
            "cached_tokens": sum(s["num_cached_tokens"] for s in steps),
            "kv_gib": engine.kv_cache.num_bytes / 2**30, "setup_s": setup_s}
    if bandwidth:
        info |= decode_roofline(steps, weight_bytes(model), engine.kv_cache.bytes_per_token, bandwidth)
    name = config if cache == "none" else f"{config}, cache {cache}"
    del engine
    release_memory(device)
    return RunResult(f"LLMEngine ({name})", seconds, cpu_seconds, workload.output_tokens, outputs, info)


@torch.inference_mode()
def run_transformers(path: str | Path, workload: Workload, device: torch.device, dtype: torch.dtype,
                     batch_size: int | None = None) -> RunResult:
    """transformers' ``generate`` on the same prompts: left-padded batches, greedy, KV cache on,
    SDPA attention. ``info["generated_tokens"]`` counts every row's tokens, padding rows' included."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa")
    model = model.to(device).eval()  # type: ignore[arg-type]  # transformers wraps `to`: its stub wants a model
    batch_size = len(workload.prompts) if batch_size is None else batch_size
    outputs, generated = [], 0
    model.generate(input_ids=torch.tensor([workload.prompts[0][:16]], device=device), max_new_tokens=4,
                   min_new_tokens=4, do_sample=False, pad_token_id=0)                 # warm-up
    synchronize(device)
    start, cpu_start = time.perf_counter(), time.process_time()
    for b in range(0, len(workload.prompts), batch_size):
        batch, lens = workload.prompts[b:b + batch_size], workload.output_lens[b:b + batch_size]
        width, steps = max(len(p) for p in batch), max(lens)
        ids = torch.zeros(len(batch), width, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(batch):             # left padding: every row's last prompt token in the same column
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=steps,
                             min_new_tokens=steps, do_sample=False, use_cache=True, pad_token_id=0)
        outputs += [row[:n] for row, n in zip(out[:, width:].tolist(), lens)]
        generated += len(batch) * steps
    synchronize(device)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    del model
    release_memory(torch.device(device))
    info = {"generated_tokens": generated, "batch_size": batch_size}
    return RunResult("transformers generate", seconds, cpu_seconds, workload.output_tokens, outputs, info)


# --------------------------------------------------------------------------- reporting

def result_row(result: RunResult, baseline: RunResult | None = None, reference: RunResult | None = None) -> dict:
    """One table row: rates, the ratio to ``baseline`` and output agreement with ``reference``."""
    info = result.info
    row = {"run": result.name, "output tok/s": round(result.tokens_per_s, 1), "wall s": round(result.seconds, 2),
           "CPU s": round(result.cpu_seconds, 1)}
    if baseline is not None and baseline is not result:
        row["x transformers"] = round(result.tokens_per_s / baseline.tokens_per_s, 2)
        # by process CPU time: the steadier ratio on a shared, busy CPU
        row["x transformers (CPU s)"] = round(baseline.cpu_seconds / result.cpu_seconds, 2)
    if "generated_tokens" in info:
        row["generated tok/s"] = round(info["generated_tokens"] / result.seconds, 1)
    for key, label, digits in [("steps", "steps", 0), ("graph_steps", "graph steps", 0),
                               ("preempted", "preempted", 0), ("computed_prompt_tokens", "prefill tokens", 0),
                               ("cached_tokens", "cache hits", 0), ("decode_step_ms", "decode step ms", 2),
                               ("bound_ms", "HBM bound ms", 2), ("mean_batch", "decode batch", 1),
                               ("kv_gib", "KV GiB", 1)]:
        if key in info:
            row[label] = round(info[key], digits) if digits else info[key]
    if reference is not None and reference is not result:
        same = sum(a == b for a, b in zip(result.outputs, reference.outputs))
        row[f"= {reference.name}"] = f"{same}/{len(reference.outputs)}"
    return row


def markdown_table(rows: list[dict]) -> str:
    """Rows (dicts) as a markdown table over the union of their keys, in first-seen order."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------- command line

COUNT_OPTIONS = ("num_seqs", "min_len", "max_len", "min_out", "max_out", "block_size", "max_num_batched_tokens",
                 "max_num_seqs", "hf_batch_size", "threads")


def check_counts(args: argparse.Namespace) -> None:
    """Every count option that is given is >= 1 (0 is refused, never replaced by a default)."""
    for name in COUNT_OPTIONS:
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")


def _or_preset(value: int | None, preset: int) -> int:
    return preset if value is None else value


def run(args: argparse.Namespace) -> int:
    """``python -m nano_engine bench`` (the options are defined in ``nano_engine.__main__``)."""
    from nano_engine.checkpoints import resolve_model
    from nano_engine.devices import device_defaults
    from nano_engine.model import Transformer
    from nano_engine.weights import load_config

    check_counts(args)
    if args.json and not Path(args.json).parent.is_dir():
        raise ValueError(f"--json {args.json}: the folder {Path(args.json).parent} does not exist")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    dtype = getattr(torch, args.dtype) if args.dtype else device_defaults(device).dtype
    preset_name = "cuda" if on_gpu else ("tiny" if args.model == "tiny" else "full")
    preset = PRESETS[preset_name]
    num_seqs = _or_preset(args.num_seqs, preset["num_seqs"])
    prompt_lens = (_or_preset(args.min_len, preset["prompt_lens"][0]), _or_preset(args.max_len, preset["prompt_lens"][1]))
    output_lens = (_or_preset(args.min_out, preset["output_lens"][0]), _or_preset(args.max_out, preset["output_lens"][1]))
    configs = [c.replace("reference", "torch") for c in (args.attention or
                                                          (["triton+graphs", "triton", "torch"] if on_gpu else ["torch"]))]
    path = resolve_model(args.model)
    vocab = load_config(path)["vocab_size"]
    workload = random_workload(num_seqs, prompt_lens, output_lens, vocab, args.seed)
    engine_kwargs = dict(cache=args.cache, block_size=args.block_size, max_num_seqs=args.max_num_seqs,
                         max_num_batched_tokens=args.max_num_batched_tokens,
                         gpu_memory_utilization=args.gpu_memory_utilization if on_gpu else None)
    print(f"model {path.name} on {device} ({dtype}, {torch.get_num_threads()} CPU threads); {workload.describe()}")
    print(f"engine: block size {args.block_size}, max_num_batched_tokens {args.max_num_batched_tokens}, "
          f"max_num_seqs {args.max_num_seqs}, " + (f"gpu_memory_utilization {args.gpu_memory_utilization}"
                                                   if on_gpu else "KV pool sized to the workload"))

    bandwidth = copy_bandwidth(device, 2**30 if on_gpu else 2**28)
    print(f"device-to-device copy bandwidth (read + write): {bandwidth / 1e9:.0f} GB/s")
    model = Transformer.from_pretrained(path, device=device, dtype=dtype)
    results = []
    for config in configs:
        result = run_engine(model, workload, config, bandwidth=bandwidth, **engine_kwargs)
        results.append(result)
        print(f"{result.name}: {result.output_tokens} tokens in {result.seconds:.2f} s = {result.tokens_per_s:.1f} "
              f"tok/s  {json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in result.info.items()})}")

    prefix_results = []
    if args.prefix_heavy:
        shape = PREFIX_PRESETS[preset_name]
        prefix_workload = shared_prefix_workload(shape["num_seqs"], shape["prefix_len"], shape["suffix_lens"],
                                                 shape["output_lens"], vocab, args.seed)
        print(f"prefix-heavy {prefix_workload.describe()}")
        for cache in CACHES:
            result = run_engine(model, prefix_workload, configs[0], bandwidth=bandwidth,
                                **{**engine_kwargs, "cache": cache})
            prefix_results.append(result)
            print(f"{result.name}: {result.seconds:.2f} s, {result.tokens_per_s:.1f} output tok/s, "
                  f"{result.info['computed_prompt_tokens']} prompt tokens computed, "
                  f"{result.info['cached_tokens']} served from the cache")
    del model
    release_memory(device)

    baseline = None
    if not args.skip_transformers:
        baseline = run_transformers(path, workload, device, dtype, args.hf_batch_size)
        print(f"{baseline.name}: {baseline.seconds:.2f} s = {baseline.tokens_per_s:.1f} useful tok/s "
              f"({baseline.info['generated_tokens']} generated incl. padding rows, batch {baseline.info['batch_size']})")
        results.append(baseline)

    rows = [result_row(r, baseline, results[0]) for r in results]
    print("\n" + markdown_table(rows))
    if prefix_results:
        print("\nprefix-heavy: " + prefix_workload.describe())
        print(markdown_table([result_row(r, None, prefix_results[0]) for r in prefix_results]))
    if args.json:
        figures = {"device": str(device), "dtype": str(dtype), "bandwidth_bytes_per_s": bandwidth,
                   "workload": workload.describe(), "runs": rows,
                   "prefix_heavy": [result_row(r, None, prefix_results[0]) for r in prefix_results],
                   "raw": [asdict(r) | {"outputs": None} for r in results + prefix_results]}
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0

