"""A plausible wrong solution: at temperature > 0 it draws a random worker with probability T/(1+T)
and takes the cheapest otherwise (an epsilon-greedy reading of "temperature")."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Worker:
    overlap_blocks: int
    decode_blocks: int
    tree_size: int = 0


def worker_cost(worker: Worker, isl_tokens: int, block_size: int, overlap_weight: float = 1.0) -> float:
    prefill_tokens = max(isl_tokens - worker.overlap_blocks * block_size, 0)
    return overlap_weight * (prefill_tokens / block_size) + worker.decode_blocks


def selection_probabilities(costs: list[float], temperature: float) -> list[float]:
    eps = temperature / (1 + temperature)
    best = min(range(len(costs)), key=lambda i: costs[i])
    return [eps / len(costs) + (1 - eps if i == best else 0) for i in range(len(costs))]


def select_worker(workers, isl_tokens, block_size, *, overlap_weight=1.0, temperature=0.0, rng=None) -> int:
    if not workers:
        raise ValueError("no workers")
    if isl_tokens < 1 or block_size < 1 or temperature < 0:
        raise ValueError("bad input")
    costs = [worker_cost(w, isl_tokens, block_size, overlap_weight) for w in workers]
    if temperature == 0:
        return min(range(len(workers)), key=lambda i: (costs[i], workers[i].tree_size, i))
    if rng is None:
        raise ValueError("need an rng")
    u, acc = rng.random(), 0.0
    for i, p in enumerate(selection_probabilities(costs, temperature)):
        acc += p
        if u <= acc:
            return i
    return len(workers) - 1
