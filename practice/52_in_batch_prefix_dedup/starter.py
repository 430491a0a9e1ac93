"""Exercise 52: SGLang's longest-prefix-match order with in-batch prefix de-duplication."""

from typing import Callable


def lpm_order(waiting: list[tuple[str, list[int]]], match_len: Callable[[list[int]], int], *,
              check_threshold: int = 32, deprioritize_threshold: int = 32,
              fcfs_threshold: int = 128) -> list[str]:
    """The order in which the scheduler tries the waiting requests this round (every id once).

    waiting: (request id, prompt tokens) in queue order. match_len(tokens): how many leading
    tokens the prefix cache holds now.

    - More than fcfs_threshold requests: queue order, and match_len is not called.
    - Otherwise, in queue order, call match_len once per request. A request whose cached length
      is <= check_threshold is compared with the prompts of the earlier requests of this round
      that were compared and kept: if it shares >= deprioritize_threshold leading tokens with one
      of them it is deprioritized, else its prompt joins them.
    - Order: requests not deprioritized by cached length, longest first; then the deprioritized
      ones. Ties keep queue order.

    ValueError for a request id listed twice or fcfs_threshold not an int >= 0.
    """
    raise NotImplementedError
