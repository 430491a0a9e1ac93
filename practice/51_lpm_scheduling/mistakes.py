"""Classic mistakes of exercise 51, each an edit of solution.py (`judge.py mistakes 51` shows them as diffs)."""

MISTAKES = [
    {"name": 'counts_every_wait',
     "explain": 'Counts every round a request waits as passed over, even when nobody overtook it.',
     "old": '            if r["arrival"] < latest:            # someone who came later went first\n',
     "new": '            if chosen:\n'},
    {"name": 'fallback_only',
     "explain": 'Falls back to FCFS for long queues (as SGLang does) but never ages a request, so a short queue can starve one.',
     "old": '            starving = [r for r in self._queue if r["passed_over"] >= self.max_passed_over]\n            others = [r for r in self._queue if r["passed_over"] < self.max_passed_over]\n',
     "new": '            starving = []\n            others = list(self._queue)\n'},
    {"name": 'pure_lpm',
     "explain": 'Always longest match first: no fallback, no passed-over count.',
     "old": '        if len(self._queue) > self.fcfs_threshold:\n            order = list(self._queue)            # too many to match each one: first come, first served\n        else:\n            starving = [r for r in self._queue if r["passed_over"] >= self.max_passed_over]\n            others = [r for r in self._queue if r["passed_over"] < self.max_passed_over]\n            matched = {r["rid"]: self.match_len(r["prompt"]) for r in others}\n            others.sort(key=lambda r: (-matched[r["rid"]], r["arrival"]))\n            order = starving + others\n',
     "new": '        matched = {r["rid"]: self.match_len(r["prompt"]) for r in self._queue}\n        order = sorted(self._queue, key=lambda r: (-matched[r["rid"]], r["arrival"]))\n'},
    {"name": 'threshold_off_by_one',
     "explain": 'Falls back to FCFS already when the queue length equals the threshold.',
     "old": '        if len(self._queue) > self.fcfs_threshold:\n',
     "new": '        if len(self._queue) >= self.fcfs_threshold:\n'},
    {"name": 'ties_reversed',
     "explain": 'Sorts by (match, arrival) descending, so equal matches run newest first.',
     "old": '            others.sort(key=lambda r: (-matched[r["rid"]], r["arrival"]))\n',
     "new": '            others.sort(key=lambda r: (matched[r["rid"]], r["arrival"]), reverse=True)\n'},
]
