"""Exercise 71: a subscriber that detects gaps, replays what it missed, and notices restarts.
apply_event is given; write GapAwareSubscriber."""

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
        """A view of one engine's cache, empty, that has seen no batch yet.

        replay(start) asks the engine's replay socket for every batch it still buffers with
        seq >= start (in seq order, as a list of (seq, events)); it may return batches that the
        live stream has not delivered yet. Keep these attributes up to date:
          hashes         the set of hashes the engine caches, as far as the batches applied say
          gaps_detected  how many times a live batch revealed missing batches
          restarts       how many times the engine was seen to restart
        """
        raise NotImplementedError

    def receive(self, seq: int, events: list) -> None:
        """One batch from the live stream, in arrival order.

        Apply every batch of the engine exactly once, in seq order (a publisher counts from 0).
        Missing batches before seq: one replay call from the first missing seq, then apply them,
        then this one. A batch already applied: ignore it. seq not above the last live seq: the
        engine restarted (its cache is empty, its seq counts from 0 again).
        """
        raise NotImplementedError
