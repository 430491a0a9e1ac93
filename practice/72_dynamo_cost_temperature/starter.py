"""Exercise 72: NVIDIA Dynamo's KV-router cost, with temperature. Worker is given."""

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
    """The worker's cost for a request of isl_tokens tokens, lower is better:
    prefill_load_scale x prefill_blocks + decode_blocks, where
    prefill_blocks = (active_prefill_tokens + isl_tokens) / block_size - overlap_score_credit x overlap_blocks
    (a float: a partial block counts as a fraction)."""
    raise NotImplementedError


def selection_probabilities(costs: list[float], temperature: float) -> list[float]:
    """For a finite temperature > 0: the probability of each worker, a softmax over the negated costs
    normalised by their spread: p_i proportional to exp(-(c_i - min) / ((max - min) x temperature)).
    All costs equal: the uniform distribution. ValueError for no costs or a temperature that is not
    a finite number > 0."""
    raise NotImplementedError


def select_worker(workers: list[Worker], isl_tokens: int, block_size: int, *, rng, overlap_score_credit: float = 1.0,
                  prefill_load_scale: float = 1.0, temperature: float = 0.0) -> int:
    """The index of the worker the router picks.

    temperature 0: the lowest cost, ties drawn uniformly at random by reservoir sampling: walk the
    workers in index order keeping the cheapest so far; a worker cheaper than it becomes the choice;
    the k-th worker tied with it (k = 2, 3, ...) becomes the choice if rng.randrange(k) == 0.
    temperature > 0: one draw u = rng.random(); the first worker i with u <= p_0 + ... + p_i (the
    last one if rounding leaves none).
    ValueError for no workers, isl_tokens or block_size < 1, a temperature that is not a finite
    number >= 0, overlap_score_credit outside [0, 1], prefill_load_scale < 0, or a worker whose
    overlap_blocks is negative or more than the prompt's full blocks (isl_tokens // block_size).
    """
    raise NotImplementedError
