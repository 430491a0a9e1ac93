"""Tests for exercise 71: a subscriber over a lossy live stream with a replay socket (gaps, the
replay running ahead of the live stream, duplicates, restarts), checked against an engine whose
true cached set the test keeps itself."""

import random

from solution_under_test import GapAwareSubscriber


class Engine:
    """A publisher: numbered batches per run (seq from 0), a replay buffer holding the current run,
    and the truth (the set its cache holds after each batch)."""

    def __init__(self):
        self.runs = [[]]              # the batches of each run of the engine
        self.replay_calls = []

    @property
    def batches(self):
        return self.runs[-1]

    def publish(self, *events):
        batch = (len(self.batches), list(events))
        self.batches.append(batch)
        return batch

    def restart(self):
        self.runs.append([])

    def truth(self, upto=None):
        """The engine's cached set after batches 0..upto of its current run (all by default)."""
        held = set()
        for _seq, events in self.batches[: None if upto is None else upto + 1]:
            for event in events:
                if event[0] == "stored":
                    held |= set(event[1])
                elif event[0] == "removed":
                    held -= set(event[1])
                else:
                    held = set()
        return held

    def replay(self, start):
        self.replay_calls.append(start)
        return [b for b in self.batches if b[0] >= start]


def feed(engine, view, *seqs):
    for seq in seqs:
        view.receive(*engine.batches[seq])


def test_example_in_order_needs_no_replay():
    engine = Engine()
    for i in range(4):
        engine.publish(("stored", [i, 10 + i]), ("removed", [10 + i - 1]))
    view = GapAwareSubscriber(engine.replay)
    assert view.hashes == set() and view.gaps_detected == 0 and view.restarts == 0
    feed(engine, view, 0, 1, 2, 3)
    assert view.hashes == engine.truth() == {0, 1, 2, 3, 13}
    assert engine.replay_calls == [] and view.gaps_detected == 0 and view.restarts == 0


def test_example_a_lost_batch_is_replayed():
    engine = Engine()
    for i in range(4):
        engine.publish(("stored", [i]))
    view = GapAwareSubscriber(engine.replay)
    feed(engine, view, 0, 1, 3)
    assert engine.replay_calls == [2], "one replay, from the first missing seq"
    assert view.hashes == {0, 1, 2, 3} and view.gaps_detected == 1 and view.restarts == 0


def test_missing_batches_are_applied_before_the_live_one():
    engine = Engine()
    engine.publish(("stored", [7, 8]))
    engine.publish(("removed", [7]))            # lost
    engine.publish(("stored", [7]))             # 7 is back: order decides the answer
    view = GapAwareSubscriber(engine.replay)
    feed(engine, view, 0, 2)
    assert view.hashes == engine.truth() == {7, 8}
    engine.publish(("removed", [8]))            # lost
    engine.publish(("cleared",), ("stored", [5]))   # lost
    engine.publish(("stored", [8]))
    feed(engine, view, 5)
    assert engine.replay_calls == [1, 3] and view.hashes == engine.truth() == {5, 8}


def test_a_late_joiner_replays_from_zero():
    engine = Engine()
    for i in range(6):
        engine.publish(("stored", [i]), ("removed", [i - 2]))
    view = GapAwareSubscriber(engine.replay)
    feed(engine, view, 5)
    assert engine.replay_calls == [0], "a publisher counts from 0: everything before 5 is missing"
    assert view.hashes == engine.truth() == {4, 5} and view.gaps_detected == 1 and view.restarts == 0


def test_the_replay_runs_ahead_and_live_duplicates_are_ignored():
    engine = Engine()
    engine.publish(("stored", [1]))
    engine.publish(("stored", [2]))            # lost on the live stream
    engine.publish(("stored", [3]))
    engine.publish(("removed", [3]))           # published before the replay: it returns 0..4
    engine.publish(("stored", [4]))
    view = GapAwareSubscriber(engine.replay)
    feed(engine, view, 0, 2)
    assert view.hashes == engine.truth() == {1, 2, 4}, "the replay returned batches 1-4"
    feed(engine, view, 3)                      # arrives live now: applied already
    assert view.hashes == {1, 2, 4}, "a live duplicate of 'stored [3]' must not bring 3 back"
    feed(engine, view, 4)
    assert view.restarts == 0, "a live seq below the next one to apply is a duplicate, not a restart"
    assert view.gaps_detected == 1 and engine.replay_calls == [1]
    engine.publish(("removed", [1]))
    feed(engine, view, 5)
    assert view.hashes == {2, 4} and engine.replay_calls == [1]


def test_replayed_duplicates_are_applied_once():
    engine = Engine()
    engine.publish(("stored", [1]))
    engine.publish(("removed", [1]))           # lost
    engine.publish(("stored", [2]))            # lost
    engine.publish(("stored", [3]))
    view = GapAwareSubscriber(lambda start: engine.replay(start) + engine.replay(start)[:2])
    feed(engine, view, 0, 3)
    assert view.hashes == engine.truth() == {2, 3}, "the replay repeated batches 1-2: apply them once"


def test_two_gaps_two_replays():
    engine = Engine()
    for i in range(8):
        engine.publish(("stored", [i]))
    view = GapAwareSubscriber(engine.replay)
    view.receive(*engine.batches[0])
    engine.runs[-1] = engine.batches[:3]        # only 0..2 published so far
    feed(engine, view, 2)
    engine.runs[-1] = [(i, [("stored", [i])]) for i in range(8)]
    feed(engine, view, 3, 6, 7)
    assert engine.replay_calls == [1, 4] and view.gaps_detected == 2
    assert view.hashes == set(range(8))


def test_a_restart_empties_the_view():
    engine = Engine()
    engine.publish(("stored", [1, 2]))
    engine.publish(("stored", [3]))
    view = GapAwareSubscriber(engine.replay)
    feed(engine, view, 0, 1)
    engine.restart()
    engine.publish(("stored", [9]))
    feed(engine, view, 0)
    assert view.restarts == 1 and view.hashes == {9}, "the old run's blocks are gone with its process"
    assert engine.replay_calls == [] and view.gaps_detected == 0
    engine.publish(("stored", [8]))
    feed(engine, view, 1)
    assert view.hashes == {8, 9} and view.restarts == 1


def test_a_restart_whose_first_batches_were_lost():
    engine = Engine()
    for i in range(6):
        engine.publish(("stored", [i]))
    view = GapAwareSubscriber(engine.replay)
    feed(engine, view, 0, 1, 2, 3, 4, 5)
    engine.restart()
    for i in range(4):
        engine.publish(("stored", [100 + i]))
    feed(engine, view, 2)                        # 0 and 1 of the new run were lost; 2 < 5
    assert view.restarts == 1 and engine.replay_calls == [0]
    assert view.hashes == {100, 101, 102, 103} and view.gaps_detected == 1
    feed(engine, view, 3)
    assert view.hashes == engine.truth() and view.restarts == 1


def test_a_live_seq_equal_to_the_last_one_is_a_restart():
    engine = Engine()
    for i in range(3):
        engine.publish(("stored", [i]))
    view = GapAwareSubscriber(engine.replay)
    feed(engine, view, 0, 1, 2)
    engine.restart()
    for i in range(3):
        engine.publish(("stored", [50 + i]))
    feed(engine, view, 2)
    assert view.restarts == 1 and engine.replay_calls == [0] and view.hashes == {50, 51, 52}


def test_restart_at_seq_zero_twice():
    engine = Engine()
    view = GapAwareSubscriber(engine.replay)
    engine.publish(("stored", [1]))
    feed(engine, view, 0)
    for k in range(3):
        engine.restart()
        engine.publish(("stored", [10 + k]))
        feed(engine, view, 0)
        assert view.restarts == k + 1 and view.hashes == {10 + k}
    assert engine.replay_calls == [] and view.gaps_detected == 0


def test_random_streams_against_the_truth():
    rng = random.Random(71)
    for _trial in range(40):
        engine = Engine()
        view = GapAwareSubscriber(engine.replay)
        pending = []                 # published, not yet delivered live (same run)
        last_live = -1               # the test's own record, per run
        obtained = -1                # the highest seq of this run the view has been given
        restarts = gaps = 0
        fresh_run = False            # a restart shows only if the new run's first live batch is delivered
        drop = rng.choice([0.0, 0.1, 0.3, 0.6])
        for _step in range(120):
            action = rng.random()
            if action < 0.5:
                kind = rng.random()
                if kind < 0.55:
                    event = ("stored", [rng.randrange(30) for _ in range(rng.randint(1, 3))])
                elif kind < 0.95:
                    event = ("removed", [rng.randrange(30) for _ in range(rng.randint(1, 3))])
                else:
                    event = ("cleared",)
                pending.append(engine.publish(event))
            elif action < 0.96:
                if not pending:
                    continue
                batch = pending.pop(0)
                if rng.random() < drop and pending and not fresh_run:
                    continue                      # lost on the live stream
                fresh_run = False
                seq = batch[0]
                calls = len(engine.replay_calls)
                if seq <= last_live:
                    restarts += 1
                    obtained = -1
                last_live = seq
                view.receive(*batch)
                if seq > obtained + 1:
                    gaps += 1
                    assert engine.replay_calls[calls:] == [obtained + 1], "one replay from the first missing seq"
                    obtained = len(engine.batches) - 1
                else:
                    assert engine.replay_calls[calls:] == [], "no replay without a gap"
                obtained = max(obtained, seq)
                assert view.hashes == engine.truth(obtained)
                assert (view.gaps_detected, view.restarts) == (gaps, restarts)
            elif last_live >= 0:
                engine.restart()                  # the old run's undelivered batches die with it
                pending, fresh_run = [], True
                lost = rng.randint(0, last_live)  # so that the first live seq of the new run is <= last_live
                for i in range(lost + 1 + rng.randint(0, 3)):
                    batch = engine.publish(("stored", [100 + i]))
                    if i >= lost:
                        pending.append(batch)
        while pending:
            view.receive(*pending.pop(0))
        if last_live >= 0 and engine.batches:
            assert view.hashes == engine.truth()
