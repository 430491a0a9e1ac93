"""Exercise 51: longest-prefix-match scheduling with a fallback that prevents starvation."""

from typing import Callable


class LPMScheduler:
    def __init__(self, match_len: Callable[[list[int]], int], *, fcfs_threshold: int = 128,
                 max_passed_over: int = 4):
        """match_len(prompt) -> how many leading tokens of prompt are cached right now.

        fcfs_threshold: with more waiting requests than this, schedule first come, first served.
        max_passed_over: a request passed over this many times goes ahead of the LPM order.
        """
        raise NotImplementedError

    @property
    def waiting(self) -> list[str]:
        """Ids of the waiting requests, in arrival order."""
        raise NotImplementedError

    def add(self, rid: str, prompt: list[int]) -> None:
        """A request arrives (ids are unique)."""
        raise NotImplementedError

    def schedule(self, max_requests: int) -> list[str]:
        """Choose up to max_requests waiting requests to run now; return their ids in the order
        chosen and remove them from the waiting queue.

        - more than fcfs_threshold waiting: the first max_requests in arrival order;
        - otherwise: requests passed over max_passed_over times or more first (arrival order),
          then the rest by match_len(prompt), longest first, ties in arrival order.
        Afterwards, every request still waiting that arrived before some request chosen this
        round has been passed over once more.
        """
        raise NotImplementedError
