"""Reference solution for exercise 52: SGLang's LPM order with in-batch prefix de-duplication."""

from typing import Callable


def common_prefix_len(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def lpm_order(waiting: list[tuple[str, list[int]]], match_len: Callable[[list[int]], int], *,
              check_threshold: int = 32, deprioritize_threshold: int = 32,
              fcfs_threshold: int = 128) -> list[str]:
    """The order in which SGLang's LPM policy tries the waiting requests this round."""
    rids = [rid for rid, _ in waiting]
    if len(set(rids)) != len(rids):
        raise ValueError(f"waiting lists a request id twice: {rids}")
    if type(fcfs_threshold) is not int or fcfs_threshold < 0:      # a bool is not a queue length
        raise ValueError(f"fcfs_threshold must be an int >= 0, got {fcfs_threshold!r}")
    if len(waiting) > fcfs_threshold:
        return rids                              # too many to match: first come, first served
    cached: dict[str, int] = {}
    deprioritized: set[str] = set()
    this_round: list[list[int]] = []             # prompts that will compute their prefix themselves
    for rid, tokens in waiting:
        cached[rid] = match_len(tokens)
        if cached[rid] <= check_threshold:       # little in the cache: maybe a sibling computes it
            shared = max((common_prefix_len(tokens, other) for other in this_round), default=0)
            if shared >= deprioritize_threshold:
                deprioritized.add(rid)           # wait for the sibling's prefix to be cached
            else:
                this_round.append(tokens)
    return sorted(rids, key=lambda rid: float("inf") if rid in deprioritized else -cached[rid])
