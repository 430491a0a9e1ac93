"""Reference solution for exercise 72: NVIDIA Dynamo's KV-router cost, with temperature."""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Worker:
    """What the router knows about one worker for one request (given)."""

    overlap_blocks: int             # leading full blocks of the prompt the worker has cached (from the KV index)
    decode_blocks: int              # KV blocks the worker's active requests would hold with this one added
    active_prefill_tokens: int = 0  # prompt tokens already routed to the worker and not yet prefilled


def worker_cost(worker: Worker, isl_tokens: int, block_size: int, *, overlap_score_credit: float = 1.0,
                prefill_load_scale: float = 1.0) -> float:
    """prefill_load_scale x (the worker's queued and this request's prompt blocks, less the credited
    overlap) + the decode blocks; lower is better."""
    prefill_blocks = (worker.active_prefill_tokens + isl_tokens) / block_size - overlap_score_credit * worker.overlap_blocks
    return prefill_load_scale * prefill_blocks + worker.decode_blocks


def selection_probabilities(costs: list[float], temperature: float) -> list[float]:
    """Softmax over the negated costs, normalised to [0, 1] by their spread, at a temperature > 0."""
    if not costs:
        raise ValueError("no costs to turn into probabilities")
    if not 0 < temperature < math.inf:
        raise ValueError(f"temperature must be a finite number > 0, got {temperature}")
    lo, hi = min(costs), max(costs)
    if lo == hi:
        return [1 / len(costs)] * len(costs)
    weights = [math.exp(-(c - lo) / ((hi - lo) * temperature)) for c in costs]
    total = sum(weights)
    return [w / total for w in weights]


def select_worker(workers: list[Worker], isl_tokens: int, block_size: int, *, rng, overlap_score_credit: float = 1.0,
                  prefill_load_scale: float = 1.0, temperature: float = 0.0) -> int:
    """The index of the worker the router picks."""
    if not workers:
        raise ValueError("no workers to route to")
    if isl_tokens < 1 or block_size < 1:
        raise ValueError(f"isl_tokens and block_size must be >= 1, got {isl_tokens}, {block_size}")
    if not 0 <= temperature < math.inf:
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
    if not 0 <= overlap_score_credit <= 1 or prefill_load_scale < 0:
        raise ValueError(f"need 0 <= overlap_score_credit <= 1 and prefill_load_scale >= 0, "
                         f"got {overlap_score_credit}, {prefill_load_scale}")
    for w in workers:
        if not 0 <= w.overlap_blocks <= isl_tokens // block_size:
            raise ValueError(f"{w}: overlap_blocks must be between 0 and the prompt's "
                             f"{isl_tokens // block_size} full blocks")
    costs = [worker_cost(w, isl_tokens, block_size, overlap_score_credit=overlap_score_credit,
                         prefill_load_scale=prefill_load_scale) for w in workers]
    if temperature == 0:
        best, tied = 0, 1
        for i in range(1, len(costs)):
            if costs[i] < costs[best]:
                best, tied = i, 1
            elif costs[i] == costs[best]:
                tied += 1                       # reservoir sampling: each tied worker kept with probability 1/tied
                if rng.randrange(tied) == 0:
                    best = i
        return best
    probs = selection_probabilities(costs, temperature)
    u, cumulative = rng.random(), 0.0
    for i in range(len(probs) - 1):
        cumulative += probs[i]
        if u <= cumulative:
            return i
    return len(probs) - 1
