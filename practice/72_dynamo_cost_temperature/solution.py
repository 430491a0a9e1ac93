"""Reference solution for exercise 72: NVIDIA Dynamo's KV-router cost, with temperature."""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Worker:
    """What the router knows about one worker for one request (given)."""

    overlap_blocks: int    # leading blocks of the request the worker has cached (from the KV index)
    decode_blocks: int     # KV blocks the worker's active requests would hold with this one added
    tree_size: int = 0     # blocks the index holds for the worker (Dynamo's tie-break)


def worker_cost(worker: Worker, isl_tokens: int, block_size: int, overlap_weight: float = 1.0) -> float:
    """overlap_weight x the blocks still to prefill + the decode blocks; lower is better."""
    prefill_tokens = max(isl_tokens - worker.overlap_blocks * block_size, 0)
    return overlap_weight * (prefill_tokens / block_size) + worker.decode_blocks


def selection_probabilities(costs: list[float], temperature: float) -> list[float]:
    """Softmax over the negated costs, normalised to [0, 1] by the spread, at temperature > 0."""
    lo, hi = min(costs), max(costs)
    if lo == hi:
        return [1 / len(costs)] * len(costs)
    weights = [math.exp(-(c - lo) / ((hi - lo) * temperature)) for c in costs]
    total = sum(weights)
    return [w / total for w in weights]


def select_worker(workers: list[Worker], isl_tokens: int, block_size: int, *, overlap_weight: float = 1.0,
                  temperature: float = 0.0, rng=None) -> int:
    """The index of the worker the router picks."""
    if not workers:
        raise ValueError("no workers to route to")
    if isl_tokens < 1 or block_size < 1:
        raise ValueError(f"isl_tokens and block_size must be >= 1, got {isl_tokens}, {block_size}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    costs = [worker_cost(w, isl_tokens, block_size, overlap_weight) for w in workers]
    if temperature == 0:
        return min(range(len(workers)), key=lambda i: (costs[i], workers[i].tree_size, i))
    if rng is None:
        raise ValueError("temperature > 0 samples: pass an rng")
    probs = selection_probabilities(costs, temperature)
    u, cumulative = rng.random(), 0.0
    for i in range(len(probs) - 1):
        cumulative += probs[i]
        if u <= cumulative:
            return i
    return len(probs) - 1
