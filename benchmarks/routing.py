"""Routing policies on multi-tenant traffic: round robin vs least load vs cache-aware.

The workload (``nano_engine.workloads.multi_tenant``): tenants with their own system prompt and
Zipf-distributed sizes, each user a multi-turn conversation, turns of all users interleaved.

1. **Simulated instances at scale** (``--instances`` of them, ``--users`` users): each instance
   is a ``SimulatedInstance``, a bounded hashed-block cache (``--capacity`` tokens) behind a FIFO
   server doing ``--work-per-tick`` units per tick (a request costs its uncached prompt tokens plus
   128 for decoding); ``--rate`` requests arrive per tick.
2. **Real engines** (``--engines`` ``LLMEngine`` instances of the default model with a hashed
   cache of 1024 tokens each; a small trace: 2 tenants and 8 two-turn users per engine): one engine
   step per tick; greedy outputs are checked equal to one engine serving everything.

Columns: hit rate (cache hits over all prompt tokens, all instances); prefill tokens computed and
their ratio to round robin's in the same run; imbalance = requests of the busiest instance over the
mean (1.00 is even); the largest in-flight load gap (max - min) the router saw; ticks until the
trace drained; (real engines) wall time. The rows are ``nano_engine.routing`` policies:
"round-robin", "least-loaded", "approx" (SGLang's cache-aware router, an approximate tree per
instance), "approx + kv events" (the same rule matched against the blocks the instances' pools
report through their KV events, fed in process to a ``KVBlockIndex``) and "affinity only" (approx
with the balance rule switched off, to show what the rule buys).

    python benchmarks/routing.py [--instances 8] [--users 1024] [--engines 4]
"""

import argparse
import time

import torch

from nano_engine.checkpoints import default_model_path
from nano_engine.engine import LLMEngine, SamplingParams
from nano_engine.instances import EngineInstance, SimulatedInstance, TraceResult, run_trace
from nano_engine.kv_index import KVBlockIndex
from nano_engine.model import Transformer
from nano_engine.routing import RoutingPolicy, make_policy
from nano_engine.workloads import multi_tenant

# name -> (policy, follow KV events, balance rule on)
VARIANTS = {
    "round-robin": ("round-robin", False, True),
    "least-loaded": ("least-loaded", False, True),
    "approx": ("approx", False, True),
    "approx + kv events": ("approx", True, True),
    "affinity only": ("approx", False, False),
}


def make_router(variant: str, instances, tree_capacity: int, abs_threshold: int) -> RoutingPolicy:
    name, kv, balance = VARIANTS[variant]
    if name != "approx":
        return make_policy(name, len(instances))
    options = {}
    if kv:
        options["event_index"] = index = KVBlockIndex()
        for i, inst in enumerate(instances):
            index.follow(i, inst.pool)
    # cache_threshold 0.5 (not the gateway's default 0.3): the figures in benchmarks/README.md use it
    return make_policy("approx", len(instances), tree_capacity=tree_capacity, cache_threshold=0.5,
                       balance_abs_threshold=abs_threshold if balance else 10**9, **options)


def print_table(rows: list[tuple[str, TraceResult, float | None]]) -> None:
    base = rows[0][1].computed_tokens
    print(f"{'policy':26s}{'hit rate':>10s}{'prefill':>10s}{'x rr':>7s}{'imbalance':>11s}"
          f"{'max gap':>9s}{'ticks':>7s}{'seconds':>9s}")
    for name, r, seconds in rows:
        wall = f"{seconds:9.2f}" if seconds is not None else f"{'':9s}"
        print(f"{name:26s}{r.hit_rate:10.1%}{r.computed_tokens:10d}{r.computed_tokens / base:7.2f}"
              f"{r.imbalance:11.2f}{r.max_load_gap:9d}{r.num_ticks:7d}{wall}")


def simulated(args) -> None:
    workload = multi_tenant(args.seed, num_tenants=args.tenants, num_users=args.users, num_turns=4)
    print(f"1. simulated: {args.instances} instances, {len(workload)} requests "
          f"({args.tenants} tenants, {args.users} users x 4 turns, {sum(map(len, workload))} prompt tokens), "
          f"cache {args.capacity} tokens per instance (block 16), {args.rate} requests per tick, "
          f"balance thresholds abs {args.abs_threshold} rel 1.5, cache_threshold 0.5")
    rows = []
    for variant in VARIANTS:
        instances = [SimulatedInstance(16, args.capacity, work_per_tick=args.work_per_tick, decode_work=128)
                     for _ in range(args.instances)]
        router = make_router(variant, instances, args.capacity, args.abs_threshold)
        start = time.perf_counter()
        rows.append((variant, run_trace(router, instances, workload, requests_per_tick=args.rate),
                     time.perf_counter() - start))
    print_table(rows)


def real_engines(args) -> None:
    torch.set_num_threads(1)
    path = args.model or default_model_path()
    model = Transformer.from_pretrained(path)
    tenants, users = 2 * args.engines, 8 * args.engines
    workload = multi_tenant(args.seed, num_tenants=tenants, num_users=users, num_turns=2, system_len=(150, 250),
                            user_len=(10, 30), answer_len=(10, 30))
    params = SamplingParams(max_tokens=4)
    reference = LLMEngine(model, cache="none", progress=False).generate(workload, params)
    print(f"\n2. real engines: {args.engines} x LLMEngine ({path}), hashed cache of 64 x 16 tokens each, "
          f"{len(workload)} requests ({tenants} tenants, {users} users x 2 turns, {sum(map(len, workload))} "
          f"prompt tokens), {args.engines} requests per tick (one engine step), balance thresholds abs 4 rel 1.5")
    rows, identical = [], True
    for variant in VARIANTS:
        instances = [EngineInstance(LLMEngine(model, cache="hashed", num_blocks=64, block_size=16,
                                              progress=False), params) for _ in range(args.engines)]
        router = make_router(variant, instances, 64 * 16, 4)
        start = time.perf_counter()
        result = run_trace(router, instances, workload, requests_per_tick=args.engines)
        rows.append((variant, result, time.perf_counter() - start))
        outputs = {r: out for inst in instances for r, out in inst.outputs.items()}
        identical &= [outputs[r] for r in range(len(workload))] == reference
    print_table(rows)
    print(f"greedy outputs identical to a single engine for every policy: {identical}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=8)
    parser.add_argument("--tenants", type=int, default=16)
    parser.add_argument("--users", type=int, default=1024)
    parser.add_argument("--capacity", type=int, default=32768, help="cache tokens per simulated instance")
    parser.add_argument("--work-per-tick", type=int, default=300)
    parser.add_argument("--rate", type=float, default=8.0, help="requests arriving per tick")
    parser.add_argument("--abs-threshold", type=int, default=32)
    parser.add_argument("--engines", type=int, default=4, help="real engines (0: skip that part)")
    parser.add_argument("--model", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    simulated(args)
    if args.engines:
        real_engines(args)


if __name__ == "__main__":
    main()
