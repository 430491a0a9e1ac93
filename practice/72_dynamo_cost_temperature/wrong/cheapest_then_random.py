"""A plausible wrong solution: at temperature > 0 it draws a random worker with probability T/(1+T)
and takes the cheapest otherwise (an epsilon-greedy reading of "temperature")."""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Worker:
    overlap_blocks: int
    decode_blocks: int
    active_prefill_tokens: int = 0


def worker_cost(worker, isl_tokens, block_size, *, overlap_score_credit=1.0, prefill_load_scale=1.0):
    blocks = (worker.active_prefill_tokens + isl_tokens) / block_size - overlap_score_credit * worker.overlap_blocks
    return prefill_load_scale * blocks + worker.decode_blocks


def selection_probabilities(costs, temperature):
    if not costs or not 0 < temperature < math.inf:
        raise ValueError("need costs and a finite temperature > 0")
    eps = temperature / (1 + temperature)
    best = min(range(len(costs)), key=lambda i: costs[i])
    return [eps / len(costs) + (1 - eps if i == best else 0) for i in range(len(costs))]


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
        best, tied = 0, 1
        for i in range(1, len(costs)):
            if costs[i] < costs[best]:
                best, tied = i, 1
            elif costs[i] == costs[best]:
                tied += 1
                if rng.randrange(tied) == 0:
                    best = i
        return best
    u, acc = rng.random(), 0.0
    for i, p in enumerate(selection_probabilities(costs, temperature)):
        acc += p
        if u <= acc:
            return i
    return len(workers) - 1
