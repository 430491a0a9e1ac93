"""Replaying Mooncake's traces through the real caches: CPU time, peak memory, hit rate.

For each cache (``hashed``: the chapter's ``PrefixCachingBlockPool``; ``vllm``; ``radix``:
``RadixCache``) and capacity, the trace is replayed at two granularities:

* ``--block-size 512`` (one token per hash id, the paper's count): the baseline of the same run;
* ``--block-size 16`` (512 deterministic tokens per id, blocks / pages of 16, as an engine sees
  the prompt: 145M tokens for the conversation trace). The hashed pool is then
  ``trace_pool.TraceBlockPool``, the same pool keyed by the trace's ids (``traces.replay_trace``).

``--token-pool`` adds, for the hashed caches, the 16-token replay through the real
``PrefixCachingBlockPool`` fed the tokens (the replay before ``TraceBlockPool``): the baseline of
that change, about 50 s and 4.7 GB a capacity on the conversation trace.

Each replay runs in a fresh child process (so its peak resident memory is its own), ``--repeat``
times; the table gives the best CPU time (``time.process_time`` around the replay alone: loading
the trace is not counted), the largest peak RSS, the hit rates at both granularities and their
difference in points.

    python benchmarks/trace_replay.py [--trace conversation] [--capacity 1e6 3e6 1e7 inf]
                                      [--cache hashed radix] [--repeat 3] [--token-pool]

Goals (issue 36, per capacity, 2-core machine): the 16-token replay through the hashed pool <= 10 s
CPU, peak memory <= 2 GiB at unlimited capacity; hit rate within 0.5 points of the 512-token one.
"""

import argparse
import multiprocessing as mp
import resource
import time

from nano_engine.replay import ReplayCache
from nano_engine.traces import TOKENS_PER_ID, load_trace, parse_tokens, replay_trace, request_tokens


def token_pool_replay(trace, cache: str, capacity: int | None) -> float:
    """The 16-token replay through PrefixCachingBlockPool itself, fed each request's tokens."""
    needed = trace.unique_ids * (TOKENS_PER_ID // 16) + len(trace)
    replay = ReplayCache(cache, capacity, block_size=16, oversized="reject", num_blocks=needed)
    for request in trace:
        replay.serve(request_tokens(request, 16), request.input_length)
    return replay.result().hit_rate


def one_replay(trace_name: str, cache: str, capacity: int | None, block_size: int, token_pool: bool, out) -> None:
    trace = load_trace(trace_name)
    start = time.process_time()
    if token_pool:
        hit_rate, rejected = token_pool_replay(trace, cache, capacity), 0
    else:
        result = replay_trace(trace, cache, capacity, block_size=block_size)
        hit_rate, rejected = result.hit_rate, result.rejected
    cpu = time.process_time() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024      # Linux: KiB
    out.send((cpu, peak, hit_rate, rejected))


def measure(trace: str, cache: str, capacity: int | None, block_size: int, repeat: int, token_pool: bool = False):
    runs = []
    ctx = mp.get_context("spawn")
    for _ in range(repeat):
        receive, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=one_replay, args=(trace, cache, capacity, block_size, token_pool, send))
        child.start()
        runs.append(receive.recv())
        child.join(timeout=60)
    return min(r[0] for r in runs), max(r[1] for r in runs), runs[0][2], runs[0][3]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="conversation")
    parser.add_argument("--capacity", nargs="+", default=["1e6", "3e6", "1e7", "inf"])
    parser.add_argument("--cache", nargs="+", default=["hashed", "radix"], choices=["hashed", "vllm", "radix"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--token-pool", action="store_true",
                        help="also the 16-token replay through PrefixCachingBlockPool fed tokens (hashed, vllm)")
    args = parser.parse_args()
    capacities = [parse_tokens(c) for c in args.capacity]
    print(f"trace {args.trace}; CPU s = best of {args.repeat} (replay only), peak = resident memory of the child")
    print(f"{'cache':18s}{'capacity':>12s}{'CPU@512':>9s}{'CPU@16':>9s}{'x 512':>7s}{'peak@16 MiB':>13s}"
          f"{'hit@512':>9s}{'hit@16':>9s}{'diff pp':>9s}")
    rows = [(cache, False) for cache in args.cache]
    if args.token_pool:
        rows += [(cache, True) for cache in args.cache if cache != "radix"]
    for cache, token_pool in rows:
        for capacity in capacities:
            cpu512, _, hit512, _ = measure(args.trace, cache, capacity, 512, args.repeat)
            cpu16, peak16, hit16, rejected = measure(args.trace, cache, capacity, 16, args.repeat, token_pool)
            label = f"{cache} (tokens)" if token_pool else cache
            size = "unlimited" if capacity is None else f"{capacity:.0e}"
            print(f"{label:18s}{size:>12s}{cpu512:9.2f}{cpu16:9.2f}{cpu16 / cpu512:7.1f}{peak16 / 2**20:13.0f}"
                  f"{hit512:9.2%}{hit16:9.2%}{100 * (hit16 - hit512):+9.2f}", flush=True)


if __name__ == "__main__":
    main()
