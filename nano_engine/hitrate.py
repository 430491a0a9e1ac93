"""hitrate.py - what ``python -m nano_engine hitrate`` runs: its options checked once, the replays, the report.

The command line (``__main__.py``) only parses; :class:`HitRateStudy` is the one place that knows
which options go together (their messages name the flags), runs the replays of
:mod:`nano_engine.replay` (the chapter's workloads) and :mod:`nano_engine.traces` (a trace), and
prints the tables, rows or JSON records.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from nano_engine.host_tier import fits_cache
from nano_engine.replay import ReplayResult, method_cache, replay_workload
from nano_engine.traces import (
    TOKENS_PER_ID,
    check_block_size,
    format_results,
    load_trace,
    plot_capacity_curves,
    replay_trace,
)

PLOT_FORMATS = (".png", ".svg", ".pdf")


@dataclass
class HitRateStudy:
    """What ``python -m nano_engine hitrate`` runs, every option checked when it is made (the
    messages name the command's flags): the chapter's four workloads (``trace=None``: their table,
    curves at ``capacities``, rows with a host tier) or a trace through ``caches`` at each capacity
    (None: unlimited), with a host tier of each of ``host_capacities`` under them, or not.
    :meth:`run` prints the report (JSON records with ``as_json``) and returns the results."""

    trace: str | None = None
    caches: Sequence[str] | None = None
    capacities: Sequence[int | None] = ()
    block_size: int = TOKENS_PER_ID
    requests: int | None = None
    host_capacities: Sequence[int | None] = ()
    write_policies: Sequence[str] = ("write_through",)
    seed: int = 0
    as_json: bool = False
    plot: str | None = None

    def __post_init__(self) -> None:
        hosts, trace = list(self.host_capacities), self.trace is not None
        if self.plot is not None:
            path = Path(self.plot)
            if path.suffix.lower() not in PLOT_FORMATS:
                raise ValueError(f"--plot {path}: the file name must end in one of {', '.join(PLOT_FORMATS)}")
            if not path.parent.is_dir():
                raise ValueError(f"--plot {path}: the folder {path.parent} does not exist")
        if list(self.write_policies) != ["write_through"] and not hosts:
            raise ValueError("--write-policy applies to a host tier only: add --host-capacity")
        if None in hosts:
            raise ValueError("--host-capacity inf: a host tier is finite (give a size in tokens, e.g. 6e6)")
        if hosts and (not self.capacities or None in self.capacities):
            raise ValueError("--host-capacity needs a finite --capacity (the device size under which the host tier sits)")
        if not trace:
            for option, given in (("--cache", self.caches), ("--json", self.as_json), ("--requests", self.requests),
                                  ("--block-size", self.block_size != TOKENS_PER_ID)):
                if given:
                    raise ValueError(f"{option} applies to a trace replay only: add --trace conversation (or synthetic)")
            if None in self.capacities:
                raise ValueError("--capacity inf: the chapter's table is already the unlimited cache (inf is for --trace)")
            return
        check_block_size(self.block_size)
        if self.requests is not None and self.requests < 1:
            raise ValueError(f"--requests must be >= 1, got {self.requests}")
        self.caches = list(dict.fromkeys(self.caches or ["hashed", "radix"]))
        self.capacities = list(self.capacities) or [None]
        for capacity in self.capacities:
            if capacity is not None and capacity < self.block_size:
                raise ValueError(f"--capacity {capacity}: holds no block of {self.block_size} tokens")
        if hosts:
            if self.block_size != TOKENS_PER_ID:
                raise ValueError("--host-capacity with --trace replays at the trace's granularity: --block-size 512 only")
            for cache in self.caches:
                if cache not in ("radix", "hashed"):
                    raise ValueError(f"--host-capacity: --cache {cache} has no host tier here (radix or hashed)")
                if cache == "hashed" and "write_back" in self.write_policies:
                    raise ValueError("--cache hashed has vLLM's policies only (write_through, write_through_selective)")
            if self.plot:
                raise ValueError("--plot with --host-capacity is not supported; use --json")

    def run(self, out=print) -> list[ReplayResult]:
        """Replay and print; the trace is read first, so a bad file fails before any replay."""
        if self.trace is None:
            return self._run_workloads(out)
        trace = load_trace(self.trace)
        if self.requests is not None:
            trace = trace[:self.requests]
        results = []
        for cache in self.caches or ():
            for capacity in self.capacities:
                result = replay_trace(trace, cache, capacity, block_size=self.block_size, progress=True)
                if self.host_capacities:
                    result = replace(result, host_capacity_tokens=0)   # the device-only row
                results.append(result)
                if self.as_json and not self.host_capacities:
                    out(json.dumps(result.as_dict()))
                for host in self.host_capacities:
                    for policy in self.write_policies:
                        results.append(replay_trace(trace, cache, capacity, host_capacity=host, write_policy=policy,
                                                    progress=True))
        if self.host_capacities:
            for result in results:
                out(json.dumps(result.as_dict()) if self.as_json else format_tier_row(result))
        elif not self.as_json:
            out(f"{trace.name}: {len(trace):,} requests, {trace.input_tokens:,} input tokens, "
                f"blocks of {self.block_size} tokens; prefix hit rate:")
            out(format_results(results))
        if self.plot:
            plot_capacity_curves(results, self.plot)
            print(f"figure saved to {self.plot}", file=sys.stderr if self.as_json else sys.stdout)
        return results

    def _run_workloads(self, out) -> list[ReplayResult]:
        from nano_engine.workloads import (
            CHAPTER_METHODS,
            capacity_curve,
            chapter_workloads,
            format_table,
            hit_rate_table,
            plot_hit_rates,
        )

        workloads = chapter_workloads(self.seed)
        table = hit_rate_table(workloads)
        out(format_table(table))
        capacities = sorted(c for c in self.capacities if c is not None)
        curves = None
        if capacities:
            curves = {name: {m: capacity_curve(w, m, capacities) for m in CHAPTER_METHODS}
                      for name, w in workloads.items()}
            out(f"\nbounded caches (LRU), hit rate at capacity {', '.join(map(str, capacities))} tokens:")
            for name, by_method in curves.items():
                for m, rates in by_method.items():
                    label = f"{name}, {'radix' if m == 'radix' else f'block {m}'}"
                    out(f"  {label:36s}" + "".join(f"{r:8.1%}" for r in rates))
        results: list[ReplayResult] = []
        if self.host_capacities:
            out("\nwith a host tier (bytes at 112 KiB/token, Qwen3-0.6B bf16; a size model):")
            for name, w in workloads.items():
                for method in ("radix", 16):    # the chapter's tree and its hashed pool of 16-token blocks
                    for capacity in capacities:
                        device_only = replay_workload(w, method, capacity, name=name)
                        results.append(replace(device_only, host_capacity_tokens=0))
                        for host in self.host_capacities:
                            for policy in self.write_policies:
                                if not fits_cache(method_cache(method)[0], policy):
                                    continue
                                results.append(replay_workload(w, method, capacity, host_capacity=host,
                                                               write_policy=policy, name=name))
            for result in results:
                out(format_tier_row(result))
        if self.plot:
            plot_hit_rates(table, self.plot, curves=curves, capacities=capacities)
            out(f"figure saved to {self.plot}")
        return results


def format_tier_row(r: ReplayResult) -> str:
    """One row of a replay with a host tier (device-only rows have host capacity 0)."""
    policy = r.write_policy or "device only"
    capacity = "inf" if r.capacity_tokens is None else f"{r.capacity_tokens:,}"
    return (f"{r.trace:22s} {r.cache:6s} C={capacity:<10s} H={r.host_capacity_tokens or 0:<10,d} {policy:24s} "
            f"hit {r.hit_rate:6.1%} (device {r.device_hit_rate:6.1%}, host {r.host_hit_rate:6.1%})  "
            f"written {r.bytes_written / 2**30:9.2f} GiB  loaded {r.bytes_loaded / 2**30:9.2f} GiB")
