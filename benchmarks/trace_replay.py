"""Replaying Mooncake's traces through the real caches: CPU time, peak memory, hit rate.

For each cache (``hashed``: the chapter's ``PrefixCachingBlockPool``; ``radix``: ``RadixCache``)
and capacity, the trace is replayed at two granularities:

* ``--block-size 512`` (one token per hash id, the paper's count): the baseline of the same run;
* ``--block-size 16`` (512 deterministic tokens per id, blocks / pages of 16, as an engine sees
  the prompt: 145M tokens for the conversation trace).

Each replay runs in a fresh child process (so its peak resident memory is its own), ``--repeat``
times; the table gives the best CPU time (``time.process_time`` around the replay alone: loading
the trace is not counted), the largest peak RSS, the hit rates at both granularities and their
difference in points. ``--old-radix`` adds the radix tree as it was before eviction candidates
were kept between calls (every ``evict`` collects the leaves by walking the whole tree), the
baseline of that change.

    python benchmarks/trace_replay.py [--trace conversation] [--capacity 1e6 3e6 1e7 inf]
                                      [--cache hashed radix] [--repeat 3] [--old-radix]

Goals (issue 25, per capacity, 2-core machine): 16-token replay <= 10 s CPU through the hashed
pool, <= 15 s through the radix tree, peak memory <= 2 GiB, hit rate within 0.5 points of the
512-token replay.
"""

import argparse
import heapq
import multiprocessing as mp
import resource
import time

from nano_engine.radix import RadixCache
from nano_engine.traces import load_trace, parse_tokens, replay_trace


class WalkingRadixCache(RadixCache):
    """The tree before the change: ``evict`` collects every unlocked leaf by walking the tree."""

    def evict(self, num_tokens: int) -> list[int]:
        leaves = [(n.last_access, n.id, n) for n in self.nodes() if not n.children and n.lock_ref == 0]
        heapq.heapify(leaves)
        freed: list[int] = []
        while leaves and len(freed) < num_tokens:
            _, _, node = heapq.heappop(leaves)
            parent = node.parent_in_tree()
            del parent.children[self._child_key(node.key, 0)]
            node.parent = None
            self._num_nodes -= 1
            freed += node.value
            self.evictable_size -= len(node.key)
            if not parent.children and parent.lock_ref == 0:
                heapq.heappush(leaves, (parent.last_access, parent.id, parent))
        return freed


def one_replay(trace_name: str, cache: str, capacity: int | None, block_size: int, old_radix: bool, out) -> None:
    if old_radix:
        import nano_engine.traces as traces
        traces.RadixCache = WalkingRadixCache      # type: ignore[misc]
    trace = load_trace(trace_name)
    start = time.process_time()
    result = replay_trace(trace, cache, capacity, block_size=block_size)
    cpu = time.process_time() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024      # Linux: KiB
    out.send((cpu, peak, result.hit_rate, result.rejected))


def measure(trace: str, cache: str, capacity: int | None, block_size: int, repeat: int, old_radix: bool = False):
    runs = []
    ctx = mp.get_context("spawn")
    for _ in range(repeat):
        receive, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=one_replay, args=(trace, cache, capacity, block_size, old_radix, send))
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
    parser.add_argument("--old-radix", action="store_true", help="also time the radix tree before the change")
    args = parser.parse_args()
    capacities = [parse_tokens(c) for c in args.capacity]
    print(f"trace {args.trace}; CPU s = best of {args.repeat} (replay only), peak = resident memory of the child")
    print(f"{'cache':14s}{'capacity':>12s}{'CPU@512':>9s}{'CPU@16':>9s}{'x 512':>7s}{'peak@16 MiB':>13s}"
          f"{'hit@512':>9s}{'hit@16':>9s}{'diff pp':>9s}")
    rows = [(cache, False) for cache in args.cache]
    if args.old_radix:
        rows.append(("radix", True))
    for cache, old in rows:
        for capacity in capacities:
            cpu512, _, hit512, _ = measure(args.trace, cache, capacity, 512, args.repeat, old)
            cpu16, peak16, hit16, rejected = measure(args.trace, cache, capacity, 16, args.repeat, old)
            label = "radix (old)" if old else cache
            size = "unlimited" if capacity is None else f"{capacity:.0e}"
            print(f"{label:14s}{size:>12s}{cpu512:9.2f}{cpu16:9.2f}{cpu16 / cpu512:7.1f}{peak16 / 2**20:13.0f}"
                  f"{hit512:9.2%}{hit16:9.2%}{100 * (hit16 - hit512):+9.2f}", flush=True)


if __name__ == "__main__":
    main()
