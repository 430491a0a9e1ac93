"""Exercise 53: cache-aware request routing. The constructor and block_hashes are given."""

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
        self.load = [0] * num_replicas        # requests in flight per replica
        # What the router believes each replica has cached: block hash -> None, least recent first.
        # (Use these, or your own structure.)
        self._cached = [OrderedDict() for _ in range(num_replicas)]

    def block_hashes(self, token_ids: list[int]) -> list[int]:
        """Chained hashes of the full blocks (exercise 21)."""
        hashes, parent = [], None
        for start in range(0, len(token_ids) - self.block_size + 1, self.block_size):
            parent = hash((parent, tuple(token_ids[start:start + self.block_size])))
            hashes.append(parent)
        return hashes

    def matched_blocks(self, replica: int, token_ids: list[int]) -> int:
        """How many leading full blocks of token_ids replica is believed to hold: count hashes
        from the first block on, stopping at the first one it lacks. Does not refresh the LRU."""
        raise NotImplementedError

    def num_cached_blocks(self, replica: int) -> int:
        """How many blocks replica is believed to hold."""
        raise NotImplementedError

    def route(self, token_ids: list[int]) -> int:
        """Pick a replica for the request and return its index.

        1. Imbalanced (max load - min load > balance_abs_threshold and
           max load > min load * balance_rel_threshold): the least-loaded replica.
        2. Else, if the best matched_blocks / number of full blocks > cache_threshold: the replica
           with the best score = matched blocks - load_weight * load.
        3. Else: the replica with the fewest cached blocks.
        Ties: lower load, then lower index. Then record the prompt's block hashes in the chosen
        replica's LRU, last block first (evicting the least recent beyond capacity_blocks), and
        add 1 to its load.
        """
        raise NotImplementedError

    def finish(self, replica: int) -> None:
        """A request routed to replica has finished: its load drops by 1 (ValueError at 0)."""
        raise NotImplementedError
