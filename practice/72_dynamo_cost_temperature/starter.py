"""Exercise 72: NVIDIA Dynamo's KV-router cost, with temperature. Worker is given."""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Worker:
    """What the router knows about one worker for one request (given)."""

    overlap_blocks: int    # leading blocks of the request the worker has cached (from the KV index)
    decode_blocks: int     # KV blocks the worker's active requests would hold with this one added
    tree_size: int = 0     # blocks the index holds for the worker (Dynamo's tie-break)


def worker_cost(worker: Worker, isl_tokens: int, block_size: int, overlap_weight: float = 1.0) -> float:
    """The worker's cost for a request of isl_tokens tokens: overlap_weight x prefill_blocks +
    decode_blocks, where prefill_blocks = max(isl_tokens - overlap_blocks x block_size, 0) / block_size
    (a float: a partial block counts as a fraction). Lower is better."""
    raise NotImplementedError


def selection_probabilities(costs: list[float], temperature: float) -> list[float]:
    """For temperature > 0: the probability of each worker, a softmax over the negated costs
    normalised by their spread: p_i proportional to exp(-(c_i - min) / ((max - min) x temperature)).
    All costs equal: the uniform distribution."""
    raise NotImplementedError


def select_worker(workers: list[Worker], isl_tokens: int, block_size: int, *, overlap_weight: float = 1.0,
                  temperature: float = 0.0, rng=None) -> int:
    """The index of the worker the router picks.

    temperature 0: the lowest cost; ties go to the smaller tree_size, then the lower index; rng unused.
    temperature > 0: one draw u = rng.random(); the first worker i with u <= p_0 + ... + p_i (the
    last one if rounding leaves none). ValueError for no workers, isl_tokens or block_size < 1, a
    negative temperature, or temperature > 0 without an rng.
    """
    raise NotImplementedError
