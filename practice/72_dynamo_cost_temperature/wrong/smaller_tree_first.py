"""A plausible wrong solution, from an older reading of Dynamo: ties at temperature 0 go to the worker
whose index holds fewer blocks (earlier 2026 versions of selector.rs), then to the lower index. The
Worker here carries a tree size; Dynamo at 01690d4 draws a tie at random instead."""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Worker:
    overlap_blocks: int
    decode_blocks: int
    active_prefill_tokens: int = 0
    tree_size: int = 0


def worker_cost(worker, isl_tokens, block_size, *, overlap_score_credit=1.0, prefill_load_scale=1.0):
    blocks = (worker.active_prefill_tokens + isl_tokens) / block_size - overlap_score_credit * worker.overlap_blocks
    return prefill_load_scale * blocks + worker.decode_blocks


def selection_probabilities(costs, temperature):
    if not costs or not 0 < temperature < math.inf:
        raise ValueError("need costs and a finite temperature > 0")
    lo, hi = min(costs), max(costs)
    if lo == hi:
        return [1 / len(costs)] * len(costs)
    weights = [math.exp(-(c - lo) / ((hi - lo) * temperature)) for c in costs]
    return [w / sum(weights) for w in weights]


def select_worker(workers, isl_tokens, block_size, *, rng, overlap_score_credit=1.0, prefill_load_scale=1.0,
                  temperature=0.0):
    if not workers or isl_tokens < 1 or block_size < 1 or not 0 <= temperature < math.inf:
        raise ValueError("bad input")
    if not 0 <= overlap_score_credit <= 1 or prefill_load_scale < 0:
        raise ValueError("bad knobs")
    if any(not 0 <= w.overlap_blocks <= isl_tokens // block_size for w in workers):
        raise ValueError("overlap beyond the prompt")
    costs = [worker_cost(w, isl_tokens, block_size, overlap_score_credit=overlap_score_credit,
                         prefill_load_scale=prefill_load_scale) for w in workers]
    if temperature == 0:
        return min(range(len(workers)), key=lambda i: (costs[i], workers[i].tree_size, i))
    u, acc = rng.random(), 0.0
    for i, p in enumerate(selection_probabilities(costs, temperature)):
        acc += p
        if u <= acc:
            return i
    return len(workers) - 1
