"""A plausible wrong solution: counts "passed over" once for every chosen request that arrived
later, instead of once per round. Two requests overtaking in one round count twice, so a request
jumps the LPM order after fewer rounds than max_passed_over (it fails the statement's own worked
example: the third round picks a, not d)."""


class LPMScheduler:
    def __init__(self, match_len, *, fcfs_threshold=128, max_passed_over=4):
        self.match_len = match_len
        self.fcfs_threshold = fcfs_threshold
        self.max_passed_over = max_passed_over
        self.queue = []            # [arrival, rid, prompt, times passed over]
        self.count = 0

    @property
    def waiting(self):
        return [entry[1] for entry in self.queue]

    def add(self, rid, prompt):
        self.queue.append([self.count, rid, prompt, 0])
        self.count += 1

    def schedule(self, max_requests):
        if max_requests < 0:
            raise ValueError("max_requests must be >= 0")
        if len(self.queue) > self.fcfs_threshold:
            order = list(self.queue)
        else:
            first = [e for e in self.queue if e[3] >= self.max_passed_over]
            rest = [e for e in self.queue if e[3] < self.max_passed_over]
            rest.sort(key=lambda e: (-self.match_len(e[2]), e[0]))
            order = first + rest
        chosen = order[:max_requests]
        self.queue = [e for e in self.queue if e not in chosen]
        for e in self.queue:
            e[3] += sum(1 for c in chosen if c[0] > e[0])      # one per request that went ahead of it
        return [e[1] for e in chosen]
