"""Reference solution for exercise 53: cache-aware request routing."""

from collections import OrderedDict


class CacheAwareRouter:
    def __init__(self, num_replicas: int, block_size: int, *, capacity_blocks: int = 1024,
                 load_weight: float = 1.0, cache_threshold: float = 0.5,
                 balance_abs_threshold: int = 32, balance_rel_threshold: float = 1.5):
        if num_replicas < 1:
            raise ValueError(f"num_replicas must be at least 1, got {num_replicas}")
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {block_size}")
        if capacity_blocks < 1:
            raise ValueError(f"capacity_blocks must be at least 1, got {capacity_blocks}")
        self.block_size = block_size
        self.capacity_blocks = capacity_blocks
        self.load_weight = load_weight
        self.cache_threshold = cache_threshold
        self.balance_abs_threshold = balance_abs_threshold
        self.balance_rel_threshold = balance_rel_threshold
        self.load = [0] * num_replicas
        # What the router believes each replica has cached: block hash -> None, least recent first.
        self._cached = [OrderedDict() for _ in range(num_replicas)]

    def block_hashes(self, token_ids: list[int]) -> list[int]:
        """Chained hashes of the full blocks (exercise 21)."""
        hashes, parent = [], None
        for start in range(0, len(token_ids) - self.block_size + 1, self.block_size):
            parent = hash((parent, tuple(token_ids[start:start + self.block_size])))
            hashes.append(parent)
        return hashes

    def matched_blocks(self, replica: int, token_ids: list[int]) -> int:
        """Leading full blocks of token_ids that replica is believed to hold (no LRU refresh)."""
        return self._match(replica, self.block_hashes(token_ids))

    def num_cached_blocks(self, replica: int) -> int:
        """How many blocks replica is believed to hold."""
        return len(self._cached[replica])

    def route(self, token_ids: list[int]) -> int:
        """Pick a replica for the request, record its blocks there, count it as load."""
        replicas = range(len(self.load))
        hashes = self.block_hashes(token_ids)
        lo, hi = min(self.load), max(self.load)
        if hi - lo > self.balance_abs_threshold and hi > lo * self.balance_rel_threshold:
            target = min(replicas, key=lambda r: (self.load[r], r))          # balance first
        else:
            matched = [self._match(r, hashes) for r in replicas]
            if hashes and max(matched) / len(hashes) > self.cache_threshold:
                target = max(replicas, key=lambda r: (matched[r] - self.load_weight * self.load[r],
                                                      -self.load[r], -r))
            else:   # no replica holds much of it: grow the smallest cache
                target = min(replicas, key=lambda r: (len(self._cached[r]), self.load[r], r))
        self._record(target, hashes)
        self.load[target] += 1
        return target

    def finish(self, replica: int) -> None:
        """A request routed to replica has finished."""
        if self.load[replica] == 0:
            raise ValueError(f"replica {replica} has no request in flight")
        self.load[replica] -= 1

    def _match(self, replica: int, hashes: list[int]) -> int:
        cached, n = self._cached[replica], 0
        while n < len(hashes) and hashes[n] in cached:
            n += 1
        return n

    def _record(self, replica: int, hashes: list[int]) -> None:
        cached = self._cached[replica]
        for h in reversed(hashes):   # last block first, so the prefix's head is the most recent
            cached[h] = None
            cached.move_to_end(h)
            if len(cached) > self.capacity_blocks:
                cached.popitem(last=False)
