"""KV events over a lossy ZeroMQ stream: does the router's index still equal the engine's cache?

One vLLM-mode pool (16 blocks of 2 tokens, so it evicts all the time) serves 4,400 requests that
share 6 prefixes; its ~10,000 KV events go, 5 per batch, through a real KVEventPublisher on loopback
TCP to a KVEventSubscriber feeding a KVBlockIndex. Each row is one fault; the baseline row (no
fault) is measured in the same run. Columns: batches that came live, gaps seen / refilled by
replay / lost, replay requests, and the index against the truth (``kv_events.replay`` of the same
events): Jaccard, and ``stale`` = blocks the index holds that the engine does not.

    python benchmarks/kv_event_faults.py [--requests 4400] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import time
from collections import Counter

from nano_engine.kv_events import replay
from nano_engine.kv_index import KVBlockIndex
from nano_engine.kv_pubsub import KVEventPublisher, KVEventSubscriber
from nano_engine.prefix_cache import PrefixCachingBlockPool

FREE = "tcp://127.0.0.1:0"


def workload_events(num_requests: int, seed: int = 0) -> list:
    rng = random.Random(seed)
    pool = PrefixCachingBlockPool(16, 2, vllm=True)
    events: list = []
    pool.subscribe(events.append)
    prefixes = [[rng.randrange(1000) for _ in range(4)] for _ in range(6)]
    for _ in range(num_requests):
        tokens = rng.choice(prefixes) + [rng.randrange(1000) for _ in range(rng.randrange(1, 5))]
        hit = pool.lookup(tokens, max_tokens=len(tokens) - 1)
        pool.touch(hit)
        new = pool.allocate(-(-len(tokens) // 2) - len(hit))
        if new is None:
            pool.free(hit)
            continue
        pool.cache_blocks(tokens, hit + new, len(tokens))
        pool.free(hit + new)
    return events


def run(events: list, *, hwm: int = 100_000, drop_rate: float = 0.0, replay_on: bool = True,
        batch: int = 5, burst: int = 100, deadline_s: float = 30.0) -> dict:
    batches = [events[i:i + batch] for i in range(0, len(events), batch)]
    index = KVBlockIndex()
    with KVEventPublisher(FREE, FREE, hwm=hwm, drop_rate=drop_rate, seed=1) as pub, \
            KVEventSubscriber(*pub.bound_endpoints, worker=0, on_batch=lambda w, s, e: index.apply(w, e),
                              on_reset=index.reset, replay=replay_on, rcvhwm=hwm, idle_probe_ms=300) as sub:
        end = time.monotonic() + 0.3                 # let the SUB connect (the slow joiner)
        while time.monotonic() < end:
            sub.poll(20)
        for i, b in enumerate(batches):
            pub.publish(b)
            if i % burst == burst - 1:
                sub.poll(0)
        end = time.monotonic() + (deadline_s if replay_on else 1.0)
        while time.monotonic() < end and not (replay_on and sub.expected == len(batches) and sub.in_sync):
            sub.poll(20)
        truth, held = replay(events, Counter()), index.blocks(0)
        return {"hwm": hwm, "drop_rate": drop_rate, "replay": replay_on, "batches": len(batches),
                "live_received": sub.live_received, "gaps_detected": sub.gaps_detected,
                "gaps_recovered": sub.gaps_recovered, "gaps_lost": sub.gaps_lost,
                "replay_requests": sub.replay_requests,
                "jaccard": round(len(truth & held) / len(truth | held), 4) if truth | held else 1.0,
                "stale": len(held - truth), "missing": len(truth - held)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4400)
    parser.add_argument("--json", action="store_true", help="one JSON object per row")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)        # the subscriber's warnings are the rows' subject
    events = workload_events(args.requests)
    rows = [run(events),                                          # baseline: no fault
            run(events, hwm=2),                                   # tiny high-water mark on both ends
            run(events, drop_rate=0.01),                          # 1% of batches never sent live
            run(events, drop_rate=0.01, replay_on=False)]         # the same without replay
    print(f"{len(events)} events; CPU time of the whole run {time.process_time():.1f} s")
    for row in rows:
        print(json.dumps(row) if args.json else
              "  ".join(f"{k}={v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
