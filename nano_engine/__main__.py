"""Command line: ``python -m nano_engine <command> ...`` (also installed as ``nano-engine``).

Each command is one function that adds an ``argparse`` sub-parser and sets its handler; to add a
command, write ``add_<name>_command(subparsers)`` and list it in ``COMMANDS``. A value that
argparse accepts but the engine refuses (a ``ValueError``, or a missing model folder) ends as one
line on stderr and exit status 2, as argparse's own usage errors do; handlers check what they can
before any slow work starts.

    python -m nano_engine generate --prompt "What is a KV cache?" --max-tokens 32 --cache radix
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path


def add_generate_command(subparsers) -> None:
    p = subparsers.add_parser("generate", help="answer one prompt with the engine (chat template applied)",
                              description="Generate a completion for one prompt through LLMEngine.")
    p.add_argument("--prompt", required=True, help="the user message")
    p.add_argument("--system", default=None, help="an optional system message")
    p.add_argument("--model", default=None, help="a preset ('tiny', 'medium', 'full', ...: nano_engine.checkpoints.PRESETS), "
                                                   "a model folder, or 'default' (the default)")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                   help="default: float32 on CPU, bfloat16 on CUDA")
    p.add_argument("--cache", default="none", choices=["none", "hashed", "vllm", "radix"],
                   help="prefix cache (vllm: hashed blocks registered when allocated, as vLLM v1)")
    p.add_argument("--raw", action="store_true", help="send the prompt as is, without the chat template")
    p.add_argument("--stats", action="store_true", help="print timing figures to stderr")
    p.set_defaults(handler=run_generate)


def run_generate(args: argparse.Namespace) -> int:
    import torch

    from nano_engine.checkpoints import resolve_model
    from nano_engine.engine import LLMEngine, SamplingParams
    from nano_engine.model import Transformer

    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_k=args.top_k,
                            top_p=args.top_p, seed=args.seed)
    device = check_device(args.device)
    dtype = getattr(torch, args.dtype) if args.dtype else None
    path = resolve_model(args.model)
    model = Transformer.from_pretrained(path, device=device, dtype=dtype)   # before the tokenizer: its errors are ours
    tokenizer = load_tokenizer(path)
    if args.raw:
        prompt = tokenizer(args.prompt)["input_ids"]
    else:
        messages = ([{"role": "system", "content": args.system}] if args.system else []) + [
            {"role": "user", "content": args.prompt}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                             enable_thinking=False)
        prompt = tokenizer(text)["input_ids"]
    engine = LLMEngine(model, eos_token_id=tokenizer.eos_token_id, cache=args.cache)
    (completion,), (metrics,) = engine.generate([prompt], params, return_metrics=True)
    print(tokenizer.decode(completion, skip_special_tokens=True))
    if args.stats:
        rate = metrics.decode_tokens_per_s
        decode = f", decode {rate:.1f} tokens/s" if rate else ""
        print(f"model {path} on {device}: {len(prompt)} prompt tokens, {len(completion)} generated, "
              f"time to first token {metrics.time_to_first_token:.3f} s{decode}", file=sys.stderr)
    return 0


def check_device(name: str | None) -> str:
    """``--device``, or the best one here when not given; a ValueError if this machine lacks it."""
    import torch

    if name is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError as error:
        raise ValueError(f"--device {name!r}: {error} (use cpu or cuda)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        why = "this torch is built without CUDA" if torch.version.cuda is None else "no GPU is visible"
        raise ValueError(f"--device {name}: CUDA is not available ({why}); use --device cpu")
    return name


def load_tokenizer(path):
    """The tokenizer saved in the model folder (never fetched from the hub: without its files,
    transformers would build a bare one from config.json, with no chat template)."""
    from transformers import AutoTokenizer

    if not (Path(path) / "tokenizer_config.json").is_file():
        raise ValueError(f"--model {path}: no tokenizer in the folder (tokenizer_config.json is missing)")
    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except OSError as error:
        raise ValueError(f"--model {path}: the tokenizer files cannot be read ({error})") from None


def add_hitrate_command(subparsers) -> None:
    p = subparsers.add_parser("hitrate", help="the chapter's hit-rate table: radix tree vs hashed blocks",
                              description="Replay the chapter's four workloads against a radix tree and "
                                          "hashed blocks of 16 and 64 tokens; print the hit rates.")
    p.add_argument("--seed", type=int, default=0, help="workload seed (0: the chapter's exact streams)")
    p.add_argument("--capacity", type=int, nargs="+", default=None, metavar="TOKENS",
                   help="also print the hit rates of caches bounded to these sizes (LRU eviction)")
    p.add_argument("--plot", default=None, metavar="FILE", help="save a matplotlib figure (PNG, SVG, PDF)")
    add_host_tier_options(p)
    p.set_defaults(handler=run_hitrate)


# -- hitrate with a host tier (chapter 06): its own options and its own block ------------------------

def token_count(text: str) -> int:
    """A token count written as an integer or in scientific notation (``6e6``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of tokens: {text!r}") from None
    if value != int(value) or value < 1:
        raise argparse.ArgumentTypeError(f"a token count must be a whole number >= 1, got {text!r}")
    return int(value)


def add_host_tier_options(p) -> None:
    p.add_argument("--host-capacity", type=token_count, nargs="+", default=None, metavar="TOKENS",
                   help="add a host-memory tier of these sizes under each --capacity (nano_engine.tier_replay)")
    p.add_argument("--write-policy", nargs="+", default=["write_through"],
                   choices=["write_through", "write_through_selective", "write_back"],
                   help="when the host tier is written (with --host-capacity; the hashed cache has no write_back)")


def run_host_tier_hitrate(args: argparse.Namespace, workloads: dict, capacities: list[int]) -> list[dict]:
    """One row per workload x cache x capacity x host capacity x write policy: the device-only
    figures (host capacity 0) and the tiered ones, ``hit_rate`` counting device and host hits."""
    import json

    from nano_engine.tier_replay import tier_hit_rate
    from nano_engine.workloads import hit_rate

    methods = ["radix", getattr(args, "block_size", None) or 16]
    rows = []
    print("\nwith a host tier (bytes at 112 KiB/token, Qwen3-0.6B bf16; a size model):")
    for name, w in workloads.items():
        for m in methods:
            for c in capacities:
                rows.append({"workload": name, "cache": "radix" if m == "radix" else "hashed", "capacity_tokens": c,
                             "host_capacity_tokens": 0, "hit_rate": hit_rate(w, m, c), "device_hit_rate": None,
                             "host_hit_rate": 0.0, "bytes_written": 0, "bytes_loaded": 0, "write_policy": None})
                for h in args.host_capacity:
                    for policy in args.write_policy:
                        if m != "radix" and policy == "write_back":
                            continue
                        r = tier_hit_rate(w, m, c, h, policy).as_dict()
                        rows.append({"workload": name, "cache": rows[-1]["cache"], **r})
    for row in rows:
        if getattr(args, "json", None):
            print(json.dumps(row))
            continue
        policy = row["write_policy"] or "device only"
        print(f"  {row['workload']:22s} {row['cache']:6s} C={row['capacity_tokens']:<8d} "
              f"H={row['host_capacity_tokens']:<8d} {policy:24s} hit {row['hit_rate']:6.1%}  "
              f"host {row['host_hit_rate']:6.1%}  written {row['bytes_written'] / 2**30:8.2f} GiB  "
              f"loaded {row['bytes_loaded'] / 2**30:8.2f} GiB")
    return rows


def run_hitrate(args: argparse.Namespace) -> int:
    from nano_engine.workloads import (
        CHAPTER_METHODS,
        capacity_curve,
        chapter_workloads,
        format_table,
        hit_rate_table,
        plot_hit_rates,
    )

    if args.capacity and min(args.capacity) < 1:
        raise ValueError(f"--capacity: every size must be >= 1 token, got {min(args.capacity)}")
    if args.plot:
        check_plot_path(Path(args.plot))
    workloads = chapter_workloads(args.seed)
    table = hit_rate_table(workloads)
    print(format_table(table))
    curves = None
    if args.capacity:
        capacities = sorted(args.capacity)
        curves = {name: {m: capacity_curve(w, m, capacities) for m in CHAPTER_METHODS}
                  for name, w in workloads.items()}
        print(f"\nbounded caches (LRU), hit rate at capacity {', '.join(map(str, capacities))} tokens:")
        for name, by_method in curves.items():
            for m, rates in by_method.items():
                label = f"{name}, {'radix' if m == 'radix' else f'block {m}'}"
                print(f"  {label:36s}" + "".join(f"{r:8.1%}" for r in rates))
    if args.host_capacity:
        if not args.capacity:
            raise ValueError("--host-capacity needs --capacity (the device size under which the host tier sits)")
        run_host_tier_hitrate(args, workloads, sorted(args.capacity))
    if args.plot:
        plot_hit_rates(table, args.plot, curves=curves, capacities=sorted(args.capacity or []))
        print(f"figure saved to {args.plot}")
    return 0


PLOT_FORMATS = (".png", ".svg", ".pdf")


def check_plot_path(path: Path) -> None:
    if path.suffix.lower() not in PLOT_FORMATS:
        raise ValueError(f"--plot {path}: the file name must end in one of {', '.join(PLOT_FORMATS)}")
    if not path.parent.is_dir():
        raise ValueError(f"--plot {path}: the folder {path.parent} does not exist")


def add_bench_command(subparsers) -> None:
    p = subparsers.add_parser("bench", help="offline throughput: LLMEngine beside transformers (nano-vllm's benchmark)",
                              description="Time LLMEngine (each attention path) and transformers' batched generate on "
                                          "the same random-token workload; see nano_engine.bench.")
    p.add_argument("--model", default="tiny", help="a preset ('tiny', 'medium', 'full' = random Qwen3-0.6B, ...) or a checkpoint folder")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                   help="default: float32 on CPU, bfloat16 on CUDA")
    p.add_argument("--num-seqs", type=int, default=None, help="default: per model and device (nano_engine.bench.PRESETS)")
    for name in ("min-len", "max-len", "min-out", "max-out"):
        p.add_argument(f"--{name}", type=int, default=None, help="prompt / output length range (default: preset)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--attention", nargs="+", default=None, choices=["torch", "triton", "triton+graphs", "reference"],
                   help="engine paths to time (default: torch on CPU; triton+graphs, triton, torch on CUDA); "
                        "'reference' is 'torch'")
    p.add_argument("--cache", default="none", choices=["none", "hashed", "vllm", "radix"], help="cache manager of the main runs")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--max-num-batched-tokens", type=int, default=4096)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9,
                   help="CUDA: fraction of GPU memory for weights, activations and the KV pool")
    p.add_argument("--hf-batch-size", type=int, default=None, help="transformers' batch (default: all prompts)")
    p.add_argument("--skip-transformers", action="store_true")
    p.add_argument("--prefix-heavy", action="store_true",
                   help="also run a shared-system-prompt workload with each cache manager")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    p.add_argument("--json", default=None, metavar="FILE", help="write every figure to this JSON file")
    p.set_defaults(handler=run_bench)


def run_bench(args: argparse.Namespace) -> int:
    from nano_engine.bench import run

    args.device = check_device(args.device)
    return run(args)


COMMANDS: list[Callable] = [add_generate_command, add_hitrate_command, add_bench_command]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nano-engine", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(subparsers)
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (ValueError, FileNotFoundError) as error:
        message = " ".join(str(error).split())      # one line, whatever the message's layout
        print(f"{parser.prog} {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
