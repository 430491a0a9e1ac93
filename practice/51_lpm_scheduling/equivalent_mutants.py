"""Mutants of solution.py that behave exactly like it (see practice/mutation.py): id -> why.

Arrival numbers are only compared with each other, so where they start and how far apart they
are does not matter; and they are unique, so a waiting request never has the latest chosen one's."""

EQUIVALENT = {
    "LPMScheduler.__init__: 'self._arrivals = 0': '0' -> '1'": "arrival numbers are only compared with each other",
    "LPMScheduler.__init__: 'self._arrivals = 0': '0' -> '-1'": "arrival numbers are only compared with each other",
    "LPMScheduler.add: 'self._arrivals += 1': '1' -> '2'": "arrival numbers are only compared with each other",
    "LPMScheduler.schedule: 'for r in self._queue:' -> 'for r in reversed(list(self._queue)):'":
        "each waiting request's count is updated on its own",
    "LPMScheduler.schedule: \"if r['arrival'] < latest:\": \"r['arrival'] < latest\" -> \"r['arrival'] <= latest\"":
        "arrivals are unique and the request that arrived at `latest` was chosen, so it is not waiting",
    "LPMScheduler.schedule: \"latest = max((r['arrival'] for r in chosen), default=-1)\": '1' -> '2'":
        "with nothing chosen, no arrival (all >= 0) is below -1 or -2",
    "LPMScheduler.schedule: \"latest = max((r['arrival'] for r in chosen), default=-1)\": '1' -> '0'":
        "with nothing chosen, no arrival (all >= 0) is below 0 either",
}
