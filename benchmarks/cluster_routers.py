"""The six routers of nano_engine.routing on a cluster of instance processes, with and without faults.

Each configuration is one ``python -m nano_engine cluster ... --json`` run (the same function);
the table puts each router's hit rate beside random routing's, measured in the same invocation.
Time inside a run is simulated, so every figure except the wall time is deterministic.

    python benchmarks/cluster_routers.py --requests 4000                 # 24 runs, ~1 min each on 2 cores
    python benchmarks/cluster_routers.py --requests 500 --faults none    # a quick look
"""

from __future__ import annotations

import argparse
import json
import time

from nano_engine.cluster import ClusterConfig, run_cluster
from nano_engine.routing import POLICIES
from nano_engine.traces import load_trace, parse_tokens

FAULTS = {
    "none": {},
    "drop1": {"drop_rate": 0.01},
    "drop1-noreplay": {"drop_rate": 0.01, "replay": False},
    "restart": "restart",      # instance 1 restarts halfway
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", default="conversation")
    p.add_argument("--instances", type=int, default=4)
    p.add_argument("--capacity", default="2e6", help="tokens per instance")
    p.add_argument("--requests", type=int, default=4000)
    p.add_argument("--routers", nargs="+", default=list(POLICIES), choices=POLICIES)
    p.add_argument("--faults", nargs="+", default=list(FAULTS), choices=list(FAULTS))
    args = p.parse_args()
    capacity = parse_tokens(args.capacity)
    if capacity is None:
        raise SystemExit("--capacity must be finite")
    trace = load_trace(args.trace)[:args.requests]
    rows = []
    for fault in args.faults:
        options = FAULTS[fault]
        if options == "restart":
            options = {"restart_instance": (1, len(trace) // 2)}
        assert isinstance(options, dict)
        for router in args.routers:
            config = ClusterConfig(instances=args.instances, router=router, capacity_tokens=capacity, **options)
            start = time.perf_counter()
            row = run_cluster(trace, config, progress=True).as_dict()
            row["fault"], row["wall_s"] = fault, round(time.perf_counter() - start, 1)
            print(json.dumps(row), flush=True)
            rows.append(row)
    print()
    print("| fault | router | hit rate | vs random | requests per instance | imbalance | gaps det. / rec. / lost "
          "| index accuracy | TTFT p50 / p90 (model, s) |")
    print("|---|---|---:|---:|---|---:|---|---:|---|")
    for row in rows:
        base = next((r for r in rows if r["fault"] == row["fault"] and r["router"] == "random"), None)
        ratio = f"{row['hit_rate'] / base['hit_rate']:.2f}x" if base and base["hit_rate"] else "n/a"
        print(f"| {row['fault']} | {row['router']} | {row['hit_rate']:.1%} | {ratio} | {row['requests_per_instance']} "
              f"| {row['load_imbalance']:.2f} | {row['gaps_detected']} / {row['gaps_recovered']} / {row['gaps_lost']} "
              f"| {row['index_accuracy']:.4f} | {row['ttft_p50_ms_model'] / 1000:.2f} / "
              f"{row['ttft_p90_ms_model'] / 1000:.2f} |")


if __name__ == "__main__":
    main()
