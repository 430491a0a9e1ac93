"""Classic mistakes of exercise 71, each an edit of solution.py (`judge.py mistakes 71` shows them as diffs)."""

MISTAKES = [
    {"name": "going_back_means_restart",
     "explain": "takes any seq below the next one to apply for a restart, so a live duplicate of a replayed batch wipes the view",
     "old": "        if seq <= self._last_live:    # the live stream never goes back: the engine restarted\n",
     "new": "        if seq < self._next:          # the stream went back: the engine restarted\n"},
    {"name": "no_restart_detection",
     "explain": "treats a seq going back as a duplicate, so a restarted engine's new blocks are ignored and its dead ones kept",
     "old": "        if seq <= self._last_live:    # the live stream never goes back: the engine restarted\n",
     "new": "        if False:\n"},
    {"name": "restart_keeps_the_view",
     "explain": "counts the restart but keeps the old run's hashes, which died with its process",
     "old": "            self.hashes.clear()\n",
     "new": "            pass\n"},
    {"name": "replay_from_after_the_gap",
     "explain": "asks the replay for the batches after the live one's predecessor instead of from the first missing seq",
     "old": "            for replayed_seq, replayed_events in self.replay(self._next):\n",
     "new": "            for replayed_seq, replayed_events in self.replay(seq):\n"},
    {"name": "stops_the_replay_at_the_gap",
     "explain": "applies the replay only up to the live batch, as chapter 07's `follow` models a replay: the "
                "batches the replay brought beyond it are thrown away and the view lags the engine",
     "old": "                self._apply(replayed_seq, replayed_events)\n",
     "new": "                if replayed_seq < seq:\n                    self._apply(replayed_seq, replayed_events)\n"},
]
