"""Mutants of solution.py that behave exactly like it (`judge.py mutate 71`), each with the reason."""

EQUIVALENT = {
    "GapAwareSubscriber.__init__: 'self._last_live = -1': '1' -> '2'":
        "seq is never negative, so no live seq is <= -1 or <= -2: the first batch is never a restart either way",
}
