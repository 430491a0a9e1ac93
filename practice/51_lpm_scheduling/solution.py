"""Reference solution for exercise 51: longest-prefix-match scheduling that cannot starve."""

from typing import Callable


class LPMScheduler:
    def __init__(self, match_len: Callable[[list[int]], int], *, fcfs_threshold: int = 128,
                 max_passed_over: int = 4):
        self.match_len = match_len
        self.fcfs_threshold = fcfs_threshold
        self.max_passed_over = max_passed_over
        self._queue: list[dict] = []          # waiting requests, in arrival order
        self._arrivals = 0

    @property
    def waiting(self) -> list[str]:
        """Ids of the waiting requests, in arrival order."""
        return [r["rid"] for r in self._queue]

    def add(self, rid: str, prompt: list[int]) -> None:
        """A request arrives."""
        self._queue.append({"rid": rid, "prompt": prompt, "arrival": self._arrivals, "passed_over": 0})
        self._arrivals += 1

    def schedule(self, max_requests: int) -> list[str]:
        """Choose up to max_requests waiting requests to run now; return their ids in the order
        chosen and remove them from the queue."""
        if max_requests < 0:
            raise ValueError(f"max_requests must be at least 0, got {max_requests}")
        if len(self._queue) > self.fcfs_threshold:
            order = list(self._queue)            # too many to match each one: first come, first served
        else:
            starving = [r for r in self._queue if r["passed_over"] >= self.max_passed_over]
            others = [r for r in self._queue if r["passed_over"] < self.max_passed_over]
            matched = {r["rid"]: self.match_len(r["prompt"]) for r in others}
            others.sort(key=lambda r: (-matched[r["rid"]], r["arrival"]))
            order = starving + others
        chosen = order[:max_requests]
        latest = max((r["arrival"] for r in chosen), default=-1)
        chosen_ids = {r["rid"] for r in chosen}
        self._queue = [r for r in self._queue if r["rid"] not in chosen_ids]
        for r in self._queue:
            if r["arrival"] < latest:            # someone who came later went first
                r["passed_over"] += 1
        return [r["rid"] for r in chosen]
