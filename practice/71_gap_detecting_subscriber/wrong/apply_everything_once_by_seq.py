"""A plausible wrong solution: remembers which seqs it applied and applies each new one as it comes,
the live batch first and the replayed ones after it (order lost), and never resets on a restart."""

from collections.abc import Callable

Batch = tuple[int, list]


def apply_event(hashes: set, event: tuple) -> None:
    kind = event[0]
    if kind == "stored":
        hashes.update(event[1])
    elif kind == "removed":
        hashes.difference_update(event[1])
    elif kind == "cleared":
        hashes.clear()
    else:
        raise ValueError(f"unknown event {event!r}")


class GapAwareSubscriber:
    def __init__(self, replay: Callable[[int], list[Batch]]):
        self.replay = replay
        self.hashes: set = set()
        self.gaps_detected = 0
        self.restarts = 0
        self._seen: set[int] = set()

    def receive(self, seq: int, events: list) -> None:
        if seq in self._seen:
            return
        self._apply(seq, events)
        missing = [s for s in range(seq) if s not in self._seen]
        if missing:
            self.gaps_detected += 1
            for s, e in self.replay(missing[0]):
                self._apply(s, e)

    def _apply(self, seq: int, events: list) -> None:
        if seq in self._seen:
            return
        self._seen.add(seq)
        for event in events:
            apply_event(self.hashes, event)
