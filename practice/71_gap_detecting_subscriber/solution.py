"""Reference solution for exercise 71: a subscriber that turns a lossy, restartable stream of
numbered event batches into exactly the engine's cached set."""

from collections.abc import Callable

Batch = tuple[int, list]     # (seq, events); an event is ("stored", hashes), ("removed", hashes) or ("cleared",)


def apply_event(hashes: set, event: tuple) -> None:
    """Apply one event to a set of cached hashes (given)."""
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
        self.replay = replay          # replay(start): every buffered batch with seq >= start, in order
        self.hashes: set = set()
        self.gaps_detected = 0
        self.restarts = 0
        self._next = 0                # the next seq to apply (a publisher counts from 0)
        self._last_live = -1          # the last seq seen on the live stream

    def receive(self, seq: int, events: list) -> None:
        """One batch from the live stream, in arrival order."""
        if seq <= self._last_live:    # the live stream never goes back: the engine restarted
            self.restarts += 1
            self.hashes.clear()
            self._next = 0
        self._last_live = seq
        if seq > self._next:          # batches next..seq-1 were lost
            self.gaps_detected += 1
            for replayed_seq, replayed_events in self.replay(self._next):
                self._apply(replayed_seq, replayed_events)
        self._apply(seq, events)

    def _apply(self, seq: int, events: list) -> None:
        if seq != self._next:         # a duplicate: already applied from a replay
            return
        for event in events:
            apply_event(self.hashes, event)
        self._next = seq + 1
