"""Command line: ``python -m nano_engine <command> ...`` (also installed as ``nano-engine``).

Each command is one function that adds an ``argparse`` sub-parser and sets its handler; to add a
command, write ``add_<name>_command(subparsers)`` and list it in ``COMMANDS``. A value that
argparse accepts but the engine refuses (a ``ValueError``, or a missing model folder) ends as one
line on stderr and exit status 2, as argparse's own usage errors do; handlers check what they can
before any slow work starts.

    python -m nano_engine generate --prompt "What is a KV cache?" --max-tokens 32 --cache radix
    python -m nano_engine hitrate --trace conversation --cache hashed radix --capacity 1e6 3e6 1e7 inf --json
    python -m nano_engine cluster --instances 4 --trace conversation --router dynamo --requests 2000 --json
    python -m nano_engine events --publish tcp://127.0.0.1:5557 --replay tcp://127.0.0.1:5558 --prompts 6 --linger 30
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
                   help="default: the device's (float32 on CPU and on a T4, bfloat16 on sm_80+ GPUs)")
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
    p = subparsers.add_parser(
        "hitrate", help="hit rates: the chapter's workloads, or a real trace (--trace) through one cache",
        description="Without --trace: replay the chapter's four workloads against a radix tree and hashed blocks "
                    "of 16 and 64 tokens and print the hit rates. With --trace: replay Mooncake's production "
                    "trace ('conversation', 'synthetic' or a .jsonl[.gz] path) through the package's caches at "
                    "each --capacity (see nano_engine.hitrate, nano_engine.replay).")
    p.add_argument("--seed", type=int, default=0, help="workload seed (0: the chapter's exact streams)")
    p.add_argument("--capacity", nargs="+", default=None, metavar="TOKENS",
                   help="bounded caches (LRU eviction) of these sizes in tokens: 4096, 1e6, or inf (unlimited, "
                        "--trace only)")
    p.add_argument("--plot", default=None, metavar="FILE", help="save a matplotlib figure (PNG, SVG, PDF)")
    trace = p.add_argument_group("real traffic (--trace)")
    trace.add_argument("--trace", default=None, metavar="NAME|PATH",
                       help="replay this trace instead of the chapter's workloads (conversation, synthetic, a path)")
    trace.add_argument("--cache", nargs="+", default=None, choices=["hashed", "vllm", "radix"],
                       help="caches to replay through (default: hashed radix)")
    trace.add_argument("--block-size", type=int, default=512,
                       help="512 (default): one block per hash id, the paper's count; 16: token-level replay, "
                            "512 tokens per id in blocks / radix pages of 16, as an engine sees it")
    trace.add_argument("--requests", type=int, default=None, metavar="N", help="replay only the first N requests")
    trace.add_argument("--json", action="store_true", help="print one JSON object per cache and capacity")
    tier = p.add_argument_group("a host-memory tier (chapter 06)")
    tier.add_argument("--host-capacity", nargs="+", default=None, metavar="TOKENS",
                      help="add a host-memory tier of these sizes (4096, 6e6) under each --capacity; with --trace: "
                           "--cache radix or hashed")
    tier.add_argument("--write-policy", nargs="+", default=["write_through"],
                      choices=["write_through", "write_through_selective", "write_back"],
                      help="when the host tier is written (with --host-capacity; the hashed cache has no write_back)")
    p.set_defaults(handler=run_hitrate)


def run_hitrate(args: argparse.Namespace) -> int:
    """``hitrate``: every option is checked (and the trace read) before the first replay."""
    from nano_engine.hitrate import HitRateStudy
    from nano_engine.traces import parse_tokens

    HitRateStudy(trace=args.trace, caches=args.cache, block_size=args.block_size, requests=args.requests,
                 capacities=[parse_tokens(text, "--capacity") for text in args.capacity or []],
                 host_capacities=[parse_tokens(text, "--host-capacity") for text in args.host_capacity or []],
                 write_policies=args.write_policy, seed=args.seed, as_json=args.json, plot=args.plot).run()
    return 0


def add_cluster_command(subparsers) -> None:
    from nano_engine.routing import POLICIES

    p = subparsers.add_parser(
        "cluster", help="route a trace over N instance processes that publish KV events (chapter 07)",
        description="Start --instances processes, each a simulated engine with a real prefix cache publishing "
                    "vLLM-format KV events over ZeroMQ; route the trace's requests with --router (the event-driven "
                    "ones read an index built from those events) and print the hit rate, the load per instance, "
                    "the index's accuracy and a TTFT from a stated cost model (see nano_engine.cluster).")
    p.add_argument("--instances", type=int, default=4)
    p.add_argument("--trace", default="conversation", metavar="NAME|PATH",
                   help="conversation (default), synthetic, or a Mooncake-format .jsonl[.gz] path")
    p.add_argument("--router", default="dynamo", choices=POLICIES)
    p.add_argument("--capacity", default="2e6", metavar="TOKENS", help="prefix cache per instance, tokens (default 2e6)")
    p.add_argument("--requests", type=int, default=None, metavar="N", help="only the trace's first N requests")
    p.add_argument("--drop-rate", type=float, default=0.0, metavar="P",
                   help="fault: each publisher drops this fraction of its event batches")
    p.add_argument("--no-replay", action="store_true", help="subscribers detect gaps but do not replay them")
    p.add_argument("--restart-instance", default=None, metavar="K@T",
                   help="fault: instance K restarts (empty cache, seq from 0) after request T")
    p.add_argument("--restart-router", type=int, default=None, metavar="T",
                   help="fault: the router loses its index after request T and resubscribes")
    p.add_argument("--overlap-score-weight", type=float, default=None, metavar="W",
                   help="--router dynamo: the weight of the prefill blocks in its cost (Dynamo's default 1.0)")
    p.add_argument("--router-temperature", type=float, default=None, metavar="T",
                   help="--router dynamo: softmax temperature over the costs (Dynamo's default 0: the cheapest)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=run_cluster_command)


def parse_restart(text: str | None, instances: int) -> tuple[int, int] | None:
    """``--restart-instance K@T`` as ``(K, T)``."""
    if text is None:
        return None
    parts = text.split("@")
    try:
        k, t = (int(x) for x in parts)
    except ValueError:
        raise ValueError(f"--restart-instance {text}: write K@T, e.g. 1@500 (instance 1 after request 500)") from None
    if not 0 <= k < instances:
        raise ValueError(f"--restart-instance {text}: no instance {k} (instances are 0..{instances - 1})")
    if t < 0:
        raise ValueError(f"--restart-instance {text}: the request number must be >= 0")
    return k, t


def run_cluster_command(args: argparse.Namespace) -> int:
    import json

    from nano_engine.cluster import ClusterConfig, run_cluster
    from nano_engine.traces import load_trace, parse_tokens

    if args.instances < 1:
        raise ValueError(f"--instances must be >= 1, got {args.instances}")
    capacity = parse_tokens(args.capacity, "--capacity")
    if capacity is None:
        raise ValueError("--capacity inf: an instance's cache is finite (give tokens, e.g. 2e6)")
    if args.requests is not None and args.requests < 1:
        raise ValueError(f"--requests must be >= 1, got {args.requests}")
    if not 0 <= args.drop_rate < 1:
        raise ValueError(f"--drop-rate must be in [0, 1), got {args.drop_rate}")
    options = {name: value for name, value in (("overlap_score_weight", args.overlap_score_weight),
                                                ("temperature", args.router_temperature)) if value is not None}
    if options and args.router != "dynamo":
        raise ValueError(f"--overlap-score-weight and --router-temperature apply to --router dynamo, not {args.router}")
    config = ClusterConfig(instances=args.instances, router=args.router, capacity_tokens=capacity,
                           drop_rate=args.drop_rate, replay=not args.no_replay,
                           restart_instance=parse_restart(args.restart_instance, args.instances),
                           restart_router_at=args.restart_router, seed=args.seed, router_options=options or None)
    trace = load_trace(args.trace)
    if args.requests is not None:
        trace = trace[:args.requests]
    for name, at in (("--restart-instance", config.restart_instance and config.restart_instance[1]),
                     ("--restart-router", config.restart_router_at)):
        if at is not None and at >= len(trace):
            raise ValueError(f"{name}: request {at} is past the trace's last ({len(trace) - 1})")
    import signal

    from nano_engine.cluster import ClusterError

    # `kill` (SIGTERM) unwinds like Ctrl-C, so that run_cluster's cleanup stops the instances.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    try:
        result = run_cluster(trace, config, progress=True).as_dict()
    except ClusterError as error:
        print(f"nano-engine cluster: failed: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:        # every instance process is already stopped (run_cluster's finally)
        print("nano-engine cluster: interrupted", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{result['trace']}: {result['requests']:,} requests over {config.instances} instances of "
          f"{capacity:,} tokens, router {config.router}")
    print(f"  hit rate {result['hit_rate']:.1%}; requests per instance {result['requests_per_instance']} "
          f"(imbalance {result['load_imbalance']:.2f})")
    print(f"  KV events: {result['batches_dropped']} batches dropped, gaps detected {result['gaps_detected']}, "
          f"recovered {result['gaps_recovered']}, lost {result['gaps_lost']}; restarts detected "
          f"{result['restarts_detected']}; index accuracy {result['index_accuracy']:.4f}")
    print(f"  TTFT (cost model, not measured): p50 {result['ttft_p50_ms_model'] / 1000:.2f} s, "
          f"p90 {result['ttft_p90_ms_model'] / 1000:.2f} s")
    return 0


def add_bench_command(subparsers) -> None:
    p = subparsers.add_parser("bench", help="offline throughput: LLMEngine beside transformers (nano-vllm's benchmark)",
                              description="Time LLMEngine (each attention path) and transformers' batched generate on "
                                          "the same random-token workload; see nano_engine.bench.")
    p.add_argument("--model", default="tiny", help="a preset ('tiny', 'medium', 'full' = random Qwen3-0.6B, ...) or a checkpoint folder")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                   help="default: the device's (float32 on CPU and on a T4, bfloat16 on sm_80+ GPUs)")
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


def add_events_command(subparsers) -> None:
    p = subparsers.add_parser(
        "events", help="run one engine that publishes its KV events over ZeroMQ, as vLLM does (chapter 07)",
        description="Run LLMEngine (cache 'vllm': SHA-256 block hashes published as their low 64 bits, an int, "
                    "as vLLM does; the same in every process unless PYTHONHASHSEED differs, since vLLM's NONE_HASH "
                    "seed reads it) on --prompts of the chapters' chat requests and publish its KV events in vLLM "
                    "0.33's wire format, one batch per engine step: PUB on --publish, replay (ROUTER) on --replay; "
                    "then stay up --linger seconds so that subscribers can replay. vLLM's own flag for the same "
                    "stream: --kv-events-config '{\"enable_kv_cache_events\": true, \"publisher\": \"zmq\", "
                    "\"endpoint\": \"tcp://*:5557\", \"replay_endpoint\": \"tcp://*:5558\", "
                    "\"topic\": \"kv-events\"}'.")
    p.add_argument("--publish", default="tcp://127.0.0.1:5557", metavar="ENDPOINT",
                   help="PUB endpoint (loopback tcp, port 0 for a free one, or ipc://PATH)")
    p.add_argument("--replay", default="tcp://127.0.0.1:5558", metavar="ENDPOINT",
                   help="replay (ROUTER) endpoint; 'none' for no replay")
    p.add_argument("--topic", default="kv-events", help="the topic frame of every message")
    p.add_argument("--prompts", type=int, default=6, metavar="N",
                   help="how many chat requests (the chapters' six questions after one system prompt, repeated)")
    p.add_argument("--max-tokens", type=int, default=16, help="tokens generated per request")
    p.add_argument("--linger", type=float, default=10.0, metavar="S",
                   help="seconds to stay up after the last request (Ctrl-C ends it sooner)")
    p.add_argument("--model", default=None, help="a preset, a model folder, or 'default' (the default)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"])
    p.set_defaults(handler=run_events)


def run_events(args: argparse.Namespace) -> int:
    import json
    import signal
    import time

    from nano_engine.kv_pubsub import KVEventPublisher, check_endpoint

    if args.prompts < 1:
        raise ValueError(f"--prompts must be >= 1, got {args.prompts}")
    if not args.linger >= 0:
        raise ValueError(f"--linger must be >= 0 seconds, got {args.linger}")
    if args.max_tokens < 1:
        raise ValueError(f"--max-tokens must be >= 1, got {args.max_tokens}")
    replay = None if args.replay.lower() == "none" else check_endpoint(args.replay)
    check_endpoint(args.publish)
    device = check_device(args.device)

    def stop(signum, frame):
        # SIGTERM ends the run as Ctrl-C does (sockets closed, exit 130), and through SIGINT's current
        # handler, so an engine step holds it back until its bookkeeping is done (interrupts.py). A
        # process started with SIGINT ignored (a script's background job: `... &`) has no such
        # handler, and raising SIGINT would do nothing: it stops at once instead.
        if callable(signal.getsignal(signal.SIGINT)):
            signal.raise_signal(signal.SIGINT)
        else:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with KVEventPublisher(args.publish, replay, topic=args.topic.encode()) as publisher:
            endpoint, replay_endpoint = publisher.bound_endpoints
            print(f"events: publishing KV events on {endpoint} (replay: {replay_endpoint or 'off'}, "
                  f"topic {args.topic!r}, vLLM 0.33 wire format)", flush=True)
            summary = _publish_engine_events(args, device, publisher)
            summary.update(publish=endpoint, replay=replay_endpoint)
            print(json.dumps(summary), flush=True)
            print(f"events: done; staying up {args.linger:g} s for replays (Ctrl-C to stop)", flush=True)
            end = time.monotonic() + args.linger
            while time.monotonic() < end:
                time.sleep(min(0.1, max(0.0, end - time.monotonic())))
    except KeyboardInterrupt:
        print("events: interrupted; sockets closed", file=sys.stderr, flush=True)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


def _publish_engine_events(args: argparse.Namespace, device: str, publisher) -> dict:
    """Run the engine on the prompts, one KV event batch per step; returns what was published."""
    import torch

    from nano_engine.checkpoints import resolve_model
    from nano_engine.engine import LLMEngine, SamplingParams
    from nano_engine.kv_pubsub import StepBatcher
    from nano_engine.model import Transformer
    from nano_engine.prefix_cache import PrefixCachingBlockPool
    from nano_engine.prompts import QUESTIONS, chat_prompts

    path = resolve_model(args.model)
    model = Transformer.from_pretrained(path, device=device, dtype=getattr(torch, args.dtype) if args.dtype else None)
    tokenizer = load_tokenizer(path)
    questions = [QUESTIONS[i % len(QUESTIONS)] + (f" ({i // len(QUESTIONS)})" if i >= len(QUESTIONS) else "")
                 for i in range(args.prompts)]
    engine = LLMEngine(model, eos_token_id=tokenizer.eos_token_id, cache="vllm")
    pool = engine.cache.pool
    assert isinstance(pool, PrefixCachingBlockPool)      # cache="vllm" builds one
    batcher = StepBatcher(pool, publisher)   # the pool's subscribe(), as KVBlockIndex.follow in one process
    try:
        for prompt in chat_prompts(tokenizer, questions):
            engine.add_request(prompt, SamplingParams(max_tokens=args.max_tokens))
        steps = 0
        while engine.scheduler.has_unfinished:
            engine.step()
            steps += 1
            batcher.flush()
    finally:
        batcher.close()
    return {"model": str(path.name), "prompts": args.prompts, "steps": steps, "batches": batcher.num_batches,
            "events": batcher.num_events, "next_seq": publisher.next_seq,
            "cached_blocks": sum(len(blocks) for blocks in pool.hash_to_blocks.values()),
            "cached_hashes": len(pool.hash_to_blocks)}


COMMANDS: list[Callable] = [add_generate_command, add_hitrate_command, add_cluster_command, add_bench_command,
                            add_events_command]


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
