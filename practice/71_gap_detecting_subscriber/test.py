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
    assert view.hashes == set(), "a new subscriber's view is empty"
    assert view.gaps_detected == 0, "a new subscriber has detected no gap"
    assert view.restarts == 0, "a new subscriber has detected no restart"
    feed(engine, view, 0, 1, 2, 3)
    assert view.hashes == {0, 1, 2, 3, 13}, "in order: apply every batch"
    assert engine.replay_calls == [], "in order: no replay"
    assert view.gaps_detected == 0, "in order: no gap"
    assert view.restarts == 0, "in order: no restart"


def test_example_a_lost_batch_is_replayed():
    engine = Engine()
    for i in range(4):
        engine.publish(("stored", [i]))
    view = GapAwareSubscriber(engine.replay)
    feed(engine, view, 0, 1, 3)
    assert engine.replay_calls == [2], "one replay, from the first missing seq"
    assert view.hashes == {0, 1, 2, 3}, "the replayed batch 2 is applied, then the live batch 3"
    assert view.gaps_detected == 1, "one gap"
    assert view.restarts == 0, "a gap is no restart"


def test_missing_batches_are_applied_before_the_live_one():
    engine = Engine()
    engine.publish(("stored", [7, 8]))
    engine.publish(("removed", [7]))            # lost
    engine.publish(("stored", [7]))             # 7 is back: order decides the answer
    view = GapAwareSubscriber(engine.replay)
    feed(engine, view, 0, 2)
    assert view.hashes == {7, 8}, "the missing batch 1 ('removed 7') is applied before the live batch 2 ('stored 7')"
    engine.publish(("removed", [8]))            # lost
    engine.publish(("cleared",), ("stored", [5]))   # lost
    engine.publish(("stored", [8]))
    feed(engine, view, 5)
    assert engine.replay_calls == [1, 3], "a second gap: a second replay, from its first missing seq (3)"
    assert view.hashes == {5, 8}, "batches 3 and 4 are applied in order before the live batch 5"


def test_a_late_joiner_replays_from_zero():
    engine = Engine()
    for i in range(6):
        engine.publish(("stored", [i]), ("removed", [i - 2]))
    view = GapAwareSubscriber(engine.replay)
    feed(engine, view, 5)
    assert engine.replay_calls == [0], "a publisher counts from 0: everything before 5 is missing"
    assert view.hashes == {4, 5}, "a late joiner ends up with the engine's set"
    assert view.gaps_detected == 1, "joining late is one gap"
    assert view.restarts == 0, "joining late is no restart"


def test_the_replay_runs_ahead_and_live_duplicates_are_ignored():
    engine = Engine()
    engine.publish(("stored", [1]))
    engine.publish(("stored", [2]))            # lost on the live stream
    engine.publish(("stored", [3]))
    engine.publish(("removed", [3]))           # published before the replay: it returns 0..4
    engine.publish(("stored", [4]))
    view = GapAwareSubscriber(engine.replay)
    feed(engine, view, 0, 2)
    assert view.hashes == {1, 2, 4}, \
        "the replay returned batches 1-4: apply all of them, also those beyond the live batch 2"
    feed(engine, view, 3)                      # arrives live now: applied already
    assert view.hashes == {1, 2, 4}, "a live duplicate of 'stored [3]' must not bring 3 back"
    feed(engine, view, 4)
    assert view.restarts == 0, "a live seq below the next one to apply is a duplicate, not a restart"
    assert view.gaps_detected == 1, "live duplicates are no gap"
    assert engine.replay_calls == [1], "live duplicates need no replay"
    engine.publish(("removed", [1]))
    feed(engine, view, 5)
    assert view.hashes == {2, 4}, "after the duplicates, the next live batch applies as usual"
    assert engine.replay_calls == [1], "the next live batch needs no replay"


def test_replayed_duplicates_are_applied_once():
    engine = Engine()
    engine.publish(("stored", [1]))
    engine.publish(("removed", [1]))           # lost
    engine.publish(("stored", [2]))            # lost
    engine.publish(("stored", [3]))
    view = GapAwareSubscriber(lambda start: engine.replay(start) + engine.replay(start)[:2])
    feed(engine, view, 0, 3)
    assert view.hashes == {2, 3}, "the replay repeated batches 1-2: apply them once, in seq order"


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
    assert engine.replay_calls == [1, 4], "two gaps: a replay from 1, then one from 4"
    assert view.gaps_detected == 2, "two gaps counted"
    assert view.hashes == set(range(8)), "every batch applied"


def test_a_restart_empties_the_view():
    engine = Engine()
    engine.publish(("stored", [1, 2]))
    engine.publish(("stored", [3]))
    view = GapAwareSubscriber(engine.replay)
    feed(engine, view, 0, 1)
    engine.restart()
    engine.publish(("stored", [9]))
    feed(engine, view, 0)
    assert view.restarts == 1, "a live seq not above the last live seq (0 after 1) is a restart"
    assert view.hashes == {9}, "the old run's blocks are gone with its process"
    assert engine.replay_calls == [], "the new run's batch 0 arrived: nothing to replay"
    assert view.gaps_detected == 0, "the new run's batch 0 arrived: no gap"
    engine.publish(("stored", [8]))
    feed(engine, view, 1)
    assert view.hashes == {8, 9}, "the new run goes on in order"
    assert view.restarts == 1, "the new run's next batch is no second restart"


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
    assert view.restarts == 1, "live seq 2 after 5: a restart"
    assert engine.replay_calls == [0], "the new run's 0 and 1 were lost: replay from 0"
    assert view.hashes == {100, 101, 102, 103}, "the view is the new run's, replayed up to its last batch"
    assert view.gaps_detected == 1, "a restart with lost batches is also a gap"
    feed(engine, view, 3)
    assert view.hashes == {100, 101, 102, 103}, "batch 3 came with the replay: a duplicate"
    assert view.restarts == 1, "a duplicate after a restart is no second restart"


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
    assert view.restarts == 1, "live seq 2 after live seq 2: the live stream never repeats a seq, so a restart"
    assert engine.replay_calls == [0], "the new run's 0 and 1 were lost: replay from 0"
    assert view.hashes == {50, 51, 52}, "the view is the new run's"


def test_restart_at_seq_zero_twice():
    engine = Engine()
    view = GapAwareSubscriber(engine.replay)
    engine.publish(("stored", [1]))
    feed(engine, view, 0)
    for k in range(3):
        engine.restart()
        engine.publish(("stored", [10 + k]))
        feed(engine, view, 0)
        assert view.restarts == k + 1, "seq 0 after seq 0 is a restart"
        assert view.hashes == {10 + k}, "each restart empties the view first"
    assert engine.replay_calls == [], "every run's batch 0 arrived: no replay"
    assert view.gaps_detected == 0, "every run's batch 0 arrived: no gap"


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
                assert view.hashes == engine.truth(obtained), \
                    f"after live seq {seq}: the engine's set after every batch the view was given (up to {obtained})"
                assert view.gaps_detected == gaps, "gaps_detected counts each live batch above the next seq to apply"
                assert view.restarts == restarts, "restarts counts each live seq not above the last live seq"
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
            assert view.hashes == engine.truth(), "once every batch is delivered, the view is the engine's set"
