"""Does prefix caching save time? Chapter 02's six-request experiment, timed, for notebooks and benchmarks.

Six chat requests share a long system prompt. The first runs alone, so its KV is in the cache;
then the other five arrive together. With a cache they skip the shared prefix, so they compute
fewer prompt tokens, finish sooner and, above all, produce their first token sooner (the time to
first token, TTFT, is what a user waits for before the answer starts to stream).

:func:`reuse_experiment` runs it once on one cache manager; :func:`compare_reuse` runs several
side by side, alternating, and keeps each one's least-disturbed run, so that a busy machine
(another process taking the CPU for a second) does not decide the comparison;
:func:`ratio_sentence` and :func:`plot_ttft` turn the figures into words and a picture.

Nothing here asserts a time: the figures depend on the machine. Ratios against a baseline
measured in the same run are what carries over from one machine to another.

>>> ratio_sentence("wall time", 0.5)
'wall time with the cache is 0.50x the time without: 50% less.'
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from nano_engine.engine import LLMEngine
from nano_engine.model import Transformer
from nano_engine.sampling import SamplingParams


@dataclass
class ReuseRun:
    """The five later requests of one run, on one cache manager."""

    cache: str
    outputs: list[list[int]]       # all six completions, in prompt order
    seconds: float                 # wall time of the five, submitted together
    ttft: list[float]              # each of the five's time to first token, in seconds
    computed_tokens: int           # tokens the model ran for the five (prefill + decode)
    cached_tokens: int             # prompt tokens of the five served from the cache

    @property
    def median_ttft(self) -> float:
        return statistics.median(self.ttft)


def reuse_experiment(model: Transformer, eos_token_id: int | None, prompts: list[list[int]], cache: str,
                     max_tokens: int = 16, num_blocks: int = 256, block_size: int = 16) -> ReuseRun:
    """Run ``prompts[0]`` alone, then ``prompts[1:]`` together, on a fresh engine with ``cache``
    (``"none"``, ``"hashed"`` or ``"radix"``); time the second part."""
    engine = LLMEngine(model, eos_token_id=eos_token_id, cache=cache, num_blocks=num_blocks,
                       block_size=block_size, progress=False)
    params = SamplingParams(max_tokens=max_tokens)
    first = engine.generate(prompts[:1], params)
    steps_before = len(engine.step_log)
    start = time.perf_counter()
    rest, metrics = engine.generate(prompts[1:], params, return_metrics=True)
    seconds = time.perf_counter() - start
    engine.check_no_leaks()
    steps = engine.step_log[steps_before:]
    return ReuseRun(cache=cache, outputs=first + rest, seconds=seconds,
                    ttft=[m.time_to_first_token for m in metrics],
                    computed_tokens=sum(s["num_tokens"] for s in steps),
                    cached_tokens=sum(s["num_cached_tokens"] for s in steps))


def compare_reuse(model: Transformer, eos_token_id: int | None, prompts: list[list[int]],
                  caches: tuple[str, ...] = ("none", "hashed", "radix"), repeats: int = 1,
                  max_tokens: int = 16, threads: int | None = 1) -> dict[str, ReuseRun]:
    """:func:`reuse_experiment` for each cache manager, ``repeats`` rounds in turn; per manager
    the run with the shortest wall time (the one least disturbed by other work on the machine).

    ``threads``: PyTorch's CPU threads during the runs (restored afterwards; None leaves them).
    One by default: on a machine shared with other work, a thread pool stalls at every operation
    while the thread it waits for is descheduled, and a decode step is hundreds of small
    operations, so timings with two threads measured the machine's load more than the cache.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    before = torch.get_num_threads()
    if threads is not None and model.device.type == "cpu":
        torch.set_num_threads(threads)
    best: dict[str, ReuseRun] = {}
    try:
        with torch.inference_mode():
            for _ in range(repeats):
                for cache in caches:
                    run = reuse_experiment(model, eos_token_id, prompts, cache, max_tokens)
                    if cache not in best or run.seconds < best[cache].seconds:
                        best[cache] = run
    finally:
        torch.set_num_threads(before)
    return best


def ratio_sentence(what: str, ratio: float) -> str:
    """One sentence that reads a with/without ratio, e.g. ``ratio_sentence("median TTFT", 0.3)``."""
    if ratio < 0.95:
        verdict = f"{1 - ratio:.0%} less"
    elif ratio <= 1.05:
        verdict = "no measurable difference (within the noise of a shared machine)"
    else:
        verdict = f"{ratio - 1:.0%} more: the saved work is smaller than the noise or the cache's own cost"
    return f"{what} with the cache is {ratio:.2f}x the time without: {verdict}."


def plot_ttft(runs: dict[str, ReuseRun], ax=None, title: str | None = None):
    """Bars of each request's time to first token, one group per request, one colour per cache
    manager; returns the matplotlib axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3), layout="constrained")
    width = 0.8 / len(runs)
    for i, (name, run) in enumerate(runs.items()):
        xs = [r + (i - (len(runs) - 1) / 2) * width for r in range(len(run.ttft))]
        ax.bar(xs, [t * 1e3 for t in run.ttft], width, label=f"cache {name}")
    ax.set_xticks(range(len(next(iter(runs.values())).ttft)),
                  [f"request {r + 2}" for r in range(len(next(iter(runs.values())).ttft))])
    ax.set_ylabel("time to first token (ms)")
    ax.set_title(title or "Time to first token of the five requests submitted together")
    ax.legend(frameon=False, loc="upper left", bbox_to_anchor=(1, 1))   # beside the bars, never on them
    ax.spines[["top", "right"]].set_visible(False)
    return ax
