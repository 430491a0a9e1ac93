"""Admission order and the prefix cache: FCFS vs LPM vs DFS-weight on the real engine.

Two tables, each run on one engine per cache (hashed blocks, radix) and policy, on the default
model (the tiny checkpoint unless ``NANO_ENGINE_MODEL`` or ``models/Qwen3-0.6B`` says otherwise):

1. **Interleaved groups under cache pressure** (the main figure). ``--groups`` shared prefixes of
   ``--prefix`` tokens, ``--per-group`` requests each (prefix + ``--suffix`` own tokens), queued
   at once in the order g0, g1, g2, ..., g0, g1, ... The KV pool (``--blocks`` blocks of 16)
   holds only a few prefixes beside the running requests, so under FCFS a prefix is usually evicted
   before its group's next request starts. "lpm (no bound)" turns off the starvation bound.
2. **Bursts of cold shared prefixes** (4 groups x 8 requests back to back, a roomy pool): the
   requests of a group arrive together before their prefix is cached. Admitted in one step, each
   computes the prefix itself; LPM's in-batch check starts one of them first.

Columns: tokens computed (prefill + decode) and prefill tokens (recomputation after preemption
included); ``x fcfs``: prefill over FCFS's with the same cache; hit rate: prompt tokens served from
the cache at each request's first admission over all prompt tokens; preemptions; "passed over":
the most rounds any request waited while a later arrival was admitted (from admission steps);
wall time. Caching off ("none") is the baseline; greedy outputs must be identical in every run.

    python benchmarks/scheduling_policies.py [--groups 6] [--per-group 8] [--blocks 64]
"""

import argparse
import random
import time

import torch

from nano_engine.checkpoints import default_model_path
from nano_engine.engine import LLMEngine, SamplingParams
from nano_engine.model import Transformer
from nano_engine.policies import LongestPrefixMatch

PRESSURE_POLICIES = {
    "fcfs": lambda: "fcfs",
    "lpm": lambda: "lpm",
    "lpm (no bound)": lambda: LongestPrefixMatch(max_passed_over=None),
    "dfs-weight": lambda: "dfs-weight",
}
BURST_POLICIES = {
    "fcfs": lambda: "fcfs",
    "lpm (no in-batch)": lambda: LongestPrefixMatch(in_batch_threshold=None),
    "lpm": lambda: "lpm",
    "dfs-weight": lambda: "dfs-weight",
}


def grouped_workload(groups: int, per_group: int, prefix: int, suffix: int, seed: int,
                     interleaved: bool = True) -> list[list[int]]:
    """``groups`` prefixes, ``per_group`` requests each: g0, g1, ..., g0, g1, ... when
    ``interleaved``, else g0, g0, ..., g1, g1, ... (bursts)."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(1000, 50000) for _ in range(prefix)] for _ in range(groups)]
    order = ([g for _ in range(per_group) for g in range(groups)] if interleaved
             else [g for g in range(groups) for _ in range(per_group)])
    return [prefixes[g] + [rng.randrange(1000, 50000) for _ in range(suffix)] for g in order]


def run(engine: LLMEngine, prompts: list[list[int]], params: SamplingParams) -> dict:
    """Queue everything, step to the end, and note the step of each request's first admission."""
    ids = [engine.add_request(p, params) for p in prompts]
    seqs = {s.request_id: s for s in engine.scheduler.waiting if s.request_id in set(ids)}
    admitted: dict[int, int] = {}
    start, step = time.perf_counter(), 0
    while engine.scheduler.has_unfinished:
        finished = engine.step()
        for s in list(engine.scheduler.running) + finished:
            admitted.setdefault(s.request_id, step)
        step += 1
    seconds = time.perf_counter() - start
    passed_over = max(len({a for j, a in admitted.items() if j > i and a < admitted[i]}) for i in admitted)
    log = engine.step_log
    return {
        "outputs": [seqs[i].output_token_ids for i in ids],
        "computed": sum(s["num_tokens"] for s in log),
        "prefill": sum(s["num_prefill_tokens"] for s in log),
        "hits": sum(seqs[i].metrics.num_cached_tokens for i in ids),
        "preempted": sum(s["num_preempted"] for s in log),
        "passed_over": passed_over,
        "seconds": seconds,
    }


def table(title: str, prompts: list[list[int]], policies: dict, make_engine, params: SamplingParams) -> bool:
    """Print one table (caching off, then each cache x policy); return whether all outputs agree."""
    prompt_tokens = sum(len(p) for p in prompts)
    print(f"\n{title}")
    print(f"{'cache':7s}{'policy':19s}{'computed':>10s}{'prefill':>9s}{'x fcfs':>8s}{'hit rate':>10s}"
          f"{'preempt':>9s}{'passed over':>13s}{'seconds':>9s}")
    baseline = run(make_engine("none", "fcfs"), prompts, params)
    print(f"{'none':7s}{'fcfs':19s}{baseline['computed']:10d}{baseline['prefill']:9d}{'':>8s}{0:10.1%}"
          f"{baseline['preempted']:9d}{baseline['passed_over']:13d}{baseline['seconds']:9.2f}")
    identical = True
    for cache in ("hashed", "radix"):
        fcfs_prefill = None
        for name, make in policies.items():
            r = run(make_engine(cache, make()), prompts, params)
            fcfs_prefill = fcfs_prefill or r["prefill"]
            identical &= r["outputs"] == baseline["outputs"]
            print(f"{cache:7s}{name:19s}{r['computed']:10d}{r['prefill']:9d}{r['prefill'] / fcfs_prefill:8.2f}"
                  f"{r['hits'] / prompt_tokens:10.1%}{r['preempted']:9d}{r['passed_over']:13d}{r['seconds']:9.2f}")
    return identical


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=6)
    parser.add_argument("--per-group", type=int, default=8)
    parser.add_argument("--prefix", type=int, default=256)
    parser.add_argument("--suffix", type=int, default=32)
    parser.add_argument("--blocks", type=int, default=64, help="KV pool size in blocks of 16 tokens")
    parser.add_argument("--max-num-seqs", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default=None, help="checkpoint folder (default: the default model)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    torch.set_num_threads(1)   # the tiny model's matrices are too small for a thread pool to pay
    path = args.model or default_model_path()
    model = Transformer.from_pretrained(path, device=args.device)
    params = SamplingParams(max_tokens=args.max_tokens)
    print(f"model {path}; prompts: prefix {args.prefix} + suffix {args.suffix} tokens; greedy, "
          f"{args.max_tokens} new tokens each")

    def engine(blocks: int, max_num_seqs: int, budget: int):
        def make(cache: str, policy) -> LLMEngine:
            return LLMEngine(model, cache=cache, num_blocks=blocks, block_size=16, max_num_seqs=max_num_seqs,
                             max_num_batched_tokens=budget, policy=policy, progress=False)
        return make

    pressure = grouped_workload(args.groups, args.per_group, args.prefix, args.suffix, args.seed)
    ok = table(f"1. interleaved groups under cache pressure: {args.groups} groups x {args.per_group} requests, "
               f"KV pool {args.blocks} x 16 = {args.blocks * 16} tokens, max_num_seqs {args.max_num_seqs}, "
               f"1024 tokens per step", pressure, PRESSURE_POLICIES,
               engine(args.blocks, args.max_num_seqs, 1024), params)
    bursts = grouped_workload(4, 8, args.prefix, args.suffix, args.seed, interleaved=False)
    ok &= table("2. bursts of cold shared prefixes: 4 groups x 8 requests back to back, KV pool 256 x 16, "
                "max_num_seqs 16, 4096 tokens per step", bursts, BURST_POLICIES, engine(256, 16, 4096), params)
    print(f"\ngreedy outputs identical across all runs of each table: {ok}")


if __name__ == "__main__":
    main()
