"""router.py: which engine instance should serve a request, when there are several.

Each instance (an engine on its own GPU) has its own prefix cache. If requests that share a prefix
are spread over the instances, every instance computes and stores its own copy of that prefix: N
instances, up to N times the prefill work and 1/N of the useful cache. A router that knows where a
prefix already lives can send the request there. But affinity alone overloads the instance that
holds a popular prefix, so the router must also balance load.

:class:`Router` decides, request by request, with one of three policies:

* ``round_robin``: instances in turn. Perfect balance, no affinity at all.
* ``least_load``: the instance with the fewest requests in flight.
* ``cache_aware``: the policy of SGLang's router (sgl-router, renamed SGLang Model Gateway, now
  developed as smg-project/smg). Per instance, the router keeps an *approximate* radix tree
  (:class:`~nano_engine.radix.RadixCache`) of the prompts it sent there: it cannot see the
  instance's cache, so it assumes what it sent is cached, and trims the tree to a size bound,
  least recently used first, as the instance's cache would evict. Then, for each request:

  1. if the load is imbalanced, ``max - min > balance_abs_threshold`` **and**
     ``max > min * balance_rel_threshold``, send it to the least-loaded instance;
  2. else, if the longest match over the instances' trees covers more than ``cache_threshold`` of
     the prompt, send it to that instance;
  3. else (nobody has much of it), send it to the instance with the smallest tree, the one with
     the most room for a new prefix.

  In every case the prompt is recorded in the chosen instance's tree.

**What SGLang's router does differently** (``CacheAwarePolicy::select_worker`` in
``sgl-model-gateway/src/policies/cache_aware.rs`` of sgl-project/sglang at commit ``b93974f``, and
``model_gateway/src/policies/cache_aware.rs`` of smg-project/smg at commit ``56ad201``; the tree is
``Tree::prefix_match`` in ``src/policies/tree.rs``):

* Its tree is over request **text** (characters), not token ids: it routes before any
  tokenizer runs, and the match ratio is matched characters over prompt characters. (smg adds a
  token tree for pre-tokenized gRPC requests.) This package's router matches token ids.
* Step 3: the rule above, "smallest tree", is the original design (still described in the
  file's header comment); the code now sends a low-match request to the **least-loaded** worker.
  This package keeps the smallest-tree rule.
* Trees are trimmed by a background thread every ``eviction_interval`` seconds to
  ``max_tree_size``; this package trims on every insert (a simulation has no clock), to
  ``tree_capacity`` tokens per instance.
* Load is the gateway's own in-flight count (``Worker::load``), as here; smg can also use the
  loads the engines report. (smg's header at ``56ad201`` still describes the max - min / relative
  rule above; its PR #2341, 2026-08-27, mentions an "overload spill gate", which we have not
  checked in code.)

Defaults (below) are the gateway's command-line defaults, the same in ``src/main.rs``'s ``CliArgs``
(sgl-model-gateway at commit ``f47e04e``) and in the Python ``RouterArgs``
(``sglang_router/router_args.py``, sglang-router 0.3.2): ``cache_threshold`` 0.3,
``balance_abs_threshold`` 64, ``balance_rel_threshold`` 1.5, ``max_tree_size`` 2**26; eviction
every 120 s in ``CliArgs``, 60 s in that ``RouterArgs`` (``eviction_interval_secs``). The Rust
``CacheAwareConfig::default()`` (``src/policies/mod.rs``) used by library callers differs (0.5,
32, 1.1, 30 s, 10,000).

**Load** is the number of requests in flight at an instance: routed there and not yet finished,
counted by the router itself (``route`` adds one, ``complete`` takes it away), as SGLang's router
does. It needs no query to the instance.

**KV events instead of guessing.** vLLM engines publish which block hashes enter and leave their
cache (:mod:`nano_engine.kv_events`). With ``kv_event_pools`` the router subscribes to each
instance's :class:`~nano_engine.prefix_cache.PrefixCachingBlockPool`, counts the blocks holding
each hash there (a ``Counter``: in vLLM mode two blocks can cache one hash, and evicting one leaves
the other serving), and measures a match as the longest run of the prompt's chained block hashes,
in their published form (``pool.event_hash``), that the instance holds; the size of an instance is
its number of cached blocks, duplicates included. Nothing is guessed, but an instance reports a
prefix only once it has registered it.

Instances for :func:`run_trace` (anything with ``submit``, ``tick`` and ``busy``):

* :class:`SimulatedInstance`: a bounded prefix cache (:class:`~nano_engine.workloads.ReplayCache`)
  behind a FIFO server that does a fixed amount of work per tick; fast enough for large traces.
* :class:`EngineInstance`: a real :class:`~nano_engine.engine.LLMEngine`, one ``step`` per tick.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from nano_engine.kv_events import KVEvent, replay
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.radix import RadixCache
from nano_engine.workloads import Method, ReplayCache

ROUTING_POLICIES = ("round_robin", "least_load", "cache_aware")

# SGLang Model Gateway's command-line defaults (see the module docstring for the source).
CACHE_THRESHOLD = 0.3
BALANCE_ABS_THRESHOLD = 64
BALANCE_REL_THRESHOLD = 1.5
TREE_CAPACITY = 1 << 26      # the gateway's max_tree_size (characters there, tokens per instance here)


class Router:
    """Route requests to ``num_instances`` instances (see the module docstring).

    Args:
        policy: ``"round_robin"``, ``"least_load"`` or ``"cache_aware"``.
        cache_threshold: the match ratio (matched / prompt tokens) above which affinity wins.
        balance_abs_threshold, balance_rel_threshold: the loads are imbalanced when
            ``max - min > abs`` and ``max > min * rel`` (SGLang's rule: both must hold).
        tree_capacity: tokens each approximate tree keeps at most (LRU-trimmed at every insert); None:
            unbounded.
        kv_event_pools: one pool per instance; the cache-aware policy then matches against the
            hashes their KV events report instead of the approximate trees.

    ``load[i]``: requests in flight at instance i; ``num_routed[i]``: requests sent there so far;
    ``reasons``: how many cache-aware decisions each rule made (``"balance"``, ``"affinity"``,
    ``"smallest"``).
    """

    def __init__(self, num_instances: int, policy: str = "cache_aware", *, cache_threshold: float = CACHE_THRESHOLD,
                 balance_abs_threshold: int = BALANCE_ABS_THRESHOLD, balance_rel_threshold: float = BALANCE_REL_THRESHOLD,
                 tree_capacity: int | None = TREE_CAPACITY,
                 kv_event_pools: Sequence[PrefixCachingBlockPool] | None = None) -> None:
        if not isinstance(num_instances, int) or num_instances < 1:
            raise ValueError(f"num_instances must be an int >= 1, got {num_instances!r}")
        if policy not in ROUTING_POLICIES:
            raise ValueError(f"unknown routing policy {policy!r}; choose one of {ROUTING_POLICIES}")
        if not 0 <= cache_threshold <= 1:
            raise ValueError(f"cache_threshold must be in [0, 1], got {cache_threshold}")
        if balance_abs_threshold < 0 or balance_rel_threshold < 1:
            raise ValueError(f"need balance_abs_threshold >= 0 and balance_rel_threshold >= 1, got "
                             f"{balance_abs_threshold} and {balance_rel_threshold}")
        if tree_capacity is not None and tree_capacity < 1:
            raise ValueError(f"tree_capacity must be >= 1 or None, got {tree_capacity}")
        self.num_instances, self.policy = num_instances, policy
        self.cache_threshold = cache_threshold
        self.balance_abs_threshold, self.balance_rel_threshold = balance_abs_threshold, balance_rel_threshold
        self.tree_capacity = tree_capacity
        self.load = [0] * num_instances
        self.num_routed = [0] * num_instances
        self.reasons: Counter[str] = Counter()
        self._next = 0  # round robin's turn
        self.trees = [RadixCache() for _ in range(num_instances)]
        self.kv_event_pools: list[PrefixCachingBlockPool] | None = None
        self.cached_hashes: list[Counter] = []      # per instance, blocks per hash, from its KV events
        self._unsubscribe: list[Callable[[], None]] = []
        if kv_event_pools is not None:
            self._subscribe(list(kv_event_pools))

    # -- KV events ------------------------------------------------------------------------------

    def _subscribe(self, pools: list[PrefixCachingBlockPool]) -> None:
        if len(pools) != self.num_instances:
            raise ValueError(f"kv_event_pools: need one pool per instance ({self.num_instances}), got {len(pools)}")
        if len({(p.block_size, p.hash_algo) for p in pools}) != 1 or callable(pools[0].hash_algo):
            raise ValueError("kv_event_pools: every pool must use the same block size and the same named "
                             "hash_algo, so that one prompt has one chain of hashes")
        self.kv_event_pools = pools
        self.cached_hashes = [Counter() for _ in pools]
        self._unsubscribe = [pool.subscribe(self._event_handler(i)) for i, pool in enumerate(pools)]

    def _event_handler(self, instance: int) -> Callable[[KVEvent], None]:
        def handle(event: KVEvent) -> None:
            replay([event], self.cached_hashes[instance])
        return handle

    def close(self) -> None:
        """Stop listening to KV events."""
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe = []

    # -- the decision ---------------------------------------------------------------------------

    def route(self, prompt: Sequence[int]) -> int:
        """Choose the instance for ``prompt`` and count it in flight there; returns its index."""
        prompt = list(prompt)
        if not prompt:
            raise ValueError("route: the prompt is empty")
        if self.policy == "round_robin":
            instance = self._next
            self._next = (self._next + 1) % self.num_instances
        elif self.policy == "least_load":
            instance = self._least_loaded()
        else:
            instance = self._cache_aware(prompt)
        self.load[instance] += 1
        self.num_routed[instance] += 1
        return instance

    def complete(self, instance: int) -> None:
        """A request routed to ``instance`` finished."""
        if self.load[instance] < 1:
            raise ValueError(f"complete: instance {instance} has no request in flight")
        self.load[instance] -= 1

    def is_imbalanced(self) -> bool:
        """SGLang's rule: both the absolute and the relative gap are over their thresholds."""
        high, low = max(self.load), min(self.load)
        return high - low > self.balance_abs_threshold and high > low * self.balance_rel_threshold

    def _least_loaded(self) -> int:
        return min(range(self.num_instances), key=lambda i: (self.load[i], i))

    def _cache_aware(self, prompt: list[int]) -> int:
        if self.is_imbalanced():
            instance, reason = self._least_loaded(), "balance"
        else:
            matched = self.match_lengths(prompt)
            # Longest match; among equals, the less loaded instance.
            best = min(range(self.num_instances), key=lambda i: (-matched[i], self.load[i], i))
            if matched[best] / len(prompt) > self.cache_threshold:
                instance, reason = best, "affinity"
            else:
                sizes = self.cached_sizes()
                instance = min(range(self.num_instances), key=lambda i: (sizes[i], self.load[i], i))
                reason = "smallest"
        self.reasons[reason] += 1
        if self.kv_event_pools is None:
            self._record(instance, prompt)
        return instance

    def _record(self, instance: int, prompt: list[int]) -> None:
        """Remember that ``instance`` will cache ``prompt``; trim its tree to the bound."""
        tree = self.trees[instance]
        tree.insert(prompt, [0] * len(prompt))   # dummy values: the router holds no KV
        if self.tree_capacity is not None and tree.total_size() > self.tree_capacity:
            tree.evict(tree.total_size() - self.tree_capacity)

    def match_lengths(self, prompt: Sequence[int]) -> list[int]:
        """Per instance, how many leading tokens of ``prompt`` it is believed to have cached."""
        if self.kv_event_pools is None:
            return [tree.match_length(prompt) for tree in self.trees]
        pool = self.kv_event_pools[0]
        # An engine never reuses the last token; events carry hashes as pool.event_hash gives them.
        hashes = [pool.event_hash(h) for h in pool.block_hashes(list(prompt)[:-1])]
        lengths = []
        for cached in self.cached_hashes:
            n = 0
            while n < len(hashes) and hashes[n] in cached:
                n += 1
            lengths.append(n * pool.block_size)
        return lengths

    def cached_sizes(self) -> list[int]:
        """Per instance, the tokens it is believed to cache (tree size, or cached blocks)."""
        if self.kv_event_pools is None:
            return [tree.total_size() for tree in self.trees]
        return [sum(blocks.values()) * self.kv_event_pools[0].block_size for blocks in self.cached_hashes]


# ------------------------------------------------------------------------------- instances


class Instance(Protocol):
    """What :func:`run_trace` needs from an instance."""

    stats: InstanceStats

    def submit(self, request_id: int, prompt: list[int]) -> None: ...

    def tick(self) -> list[int]:
        """Advance one time unit; return the ids of the requests that finished."""
        ...

    @property
    def busy(self) -> bool: ...


@dataclass
class InstanceStats:
    """What one instance served: request ids in finishing order, prompt tokens, cache hits."""

    served: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    hit_tokens: int = 0
    computed_tokens: int = 0   # prompt tokens actually computed (misses, and any recomputation)


class SimulatedInstance:
    """A stand-in for an engine: a bounded prefix cache and a first-in first-out server.

    A request's work is the prompt tokens its cache does not hold plus ``decode_work`` (a fixed
    cost standing for its generated tokens). Each ``tick`` the server does ``work_per_tick`` units,
    requests in arrival order; a request looks up and fills the cache when its service starts, as
    an engine does at admission. ``cache`` is a :class:`~nano_engine.workloads.ReplayCache`
    (``method`` "radix" or a block size, ``capacity`` tokens); with a block size, ``pool`` is the
    :class:`~nano_engine.prefix_cache.PrefixCachingBlockPool` whose KV events a router can follow.
    """

    def __init__(self, method: Method = 16, capacity: int = 1 << 15, *, work_per_tick: int = 4096,
                 decode_work: int = 256) -> None:
        if work_per_tick < 1 or decode_work < 0:
            raise ValueError(f"need work_per_tick >= 1 and decode_work >= 0, got {work_per_tick}, {decode_work}")
        self.cache = ReplayCache(method, capacity)
        self.work_per_tick, self.decode_work = work_per_tick, decode_work
        self.queue: deque[list] = deque()   # [request id, prompt, work left or None if not started]
        self.stats = InstanceStats()

    @property
    def pool(self) -> PrefixCachingBlockPool:
        if not hasattr(self.cache, "pool"):
            raise ValueError("a radix-tree instance has no block pool (and publishes no KV events)")
        return self.cache.pool

    def submit(self, request_id: int, prompt: list[int]) -> None:
        self.queue.append([request_id, list(prompt), None])

    @property
    def busy(self) -> bool:
        return bool(self.queue)

    def tick(self) -> list[int]:
        budget, finished = self.work_per_tick, []
        while self.queue and budget > 0:
            item = self.queue[0]
            if item[2] is None:     # service starts: the cache lookup, as at admission
                prompt = item[1]
                hits = self.cache.serve(prompt)
                self.stats.prompt_tokens += len(prompt)
                self.stats.hit_tokens += hits
                self.stats.computed_tokens += len(prompt) - hits
                item[2] = len(prompt) - hits + self.decode_work
            done = min(item[2], budget)
            item[2] -= done
            budget -= done
            if item[2] == 0:
                self.queue.popleft()
                finished.append(item[0])
                self.stats.served.append(item[0])
        return finished


class EngineInstance:
    """A real :class:`~nano_engine.engine.LLMEngine` as an instance: one engine ``step`` per tick.

    ``params`` are the sampling parameters of every request; completions land in ``outputs``
    (request id -> generated token ids). Hits are the engine's own counts (its cache manager's
    match at first admission); computed tokens come from its ``step_log`` (prefill tokens,
    recomputation after preemption included).
    """

    def __init__(self, engine, params) -> None:
        self.engine, self.params = engine, params
        self.stats = InstanceStats()
        self.outputs: dict[int, list[int]] = {}
        self._ids: dict[int, int] = {}    # engine request id -> trace request id
        self._log_seen = len(engine.step_log)

    @property
    def pool(self) -> PrefixCachingBlockPool:
        pool = getattr(self.engine.cache, "pool", None)
        if not isinstance(pool, PrefixCachingBlockPool):
            raise ValueError(f"KV events need the hashed cache; this engine's cache is {self.engine.cache.name!r}")
        return pool

    def submit(self, request_id: int, prompt: list[int]) -> None:
        self._ids[self.engine.add_request(prompt, self.params)] = request_id

    @property
    def busy(self) -> bool:
        return self.engine.scheduler.has_unfinished

    def tick(self) -> list[int]:
        if not self.busy:
            return []
        finished = []
        for seq in self.engine.step():
            request_id = self._ids.pop(seq.request_id)
            self.outputs[request_id] = seq.output_token_ids
            self.stats.served.append(request_id)
            self.stats.prompt_tokens += seq.num_prompt_tokens
            self.stats.hit_tokens += seq.metrics.num_cached_tokens
            finished.append(request_id)
        for step in self.engine.step_log[self._log_seen:]:
            self.stats.computed_tokens += step["num_prefill_tokens"]
        self._log_seen = len(self.engine.step_log)
        return finished


# ------------------------------------------------------------------------------- a trace


@dataclass
class TraceResult:
    """Outcome of :func:`run_trace`."""

    policy: str
    stats: list[InstanceStats]
    routed_to: list[int]             # request id -> instance
    loads: list[tuple[int, ...]]     # request id -> in-flight loads the router saw when routing it
    num_ticks: int

    @property
    def hit_rate(self) -> float:
        """Cache hits over all prompt tokens, across instances."""
        return sum(s.hit_tokens for s in self.stats) / sum(s.prompt_tokens for s in self.stats)

    @property
    def computed_tokens(self) -> int:
        return sum(s.computed_tokens for s in self.stats)

    @property
    def requests_per_instance(self) -> list[int]:
        return [len(s.served) for s in self.stats]

    @property
    def max_load_gap(self) -> int:
        """The largest ``max - min`` of in-flight loads seen at a routing decision."""
        return max(max(loads) - min(loads) for loads in self.loads)

    @property
    def imbalance(self) -> float:
        """Requests of the busiest instance over the mean (1.0: perfectly even)."""
        counts = self.requests_per_instance
        return max(counts) / (sum(counts) / len(counts))


def run_trace(router: Router, instances: Sequence[Instance], workload: Sequence[Sequence[int]], *,
              requests_per_tick: float = 1.0, name: str | None = None) -> TraceResult:
    """Send ``workload`` (in order) through ``router`` to ``instances`` and run them until done.

    Each tick, the requests due by then arrive (``requests_per_tick`` on average) and are routed
    one by one; then every instance ticks, and each finished request is reported to the router
    (its load drops). Request ids are positions in ``workload``.
    """
    if len(instances) != router.num_instances:
        raise ValueError(f"the router expects {router.num_instances} instances, got {len(instances)}")
    if requests_per_tick <= 0:
        raise ValueError(f"requests_per_tick must be > 0, got {requests_per_tick}")
    routed_to: list[int] = []
    loads: list[tuple[int, ...]] = []
    next_request, tick = 0, 0
    while next_request < len(workload) or any(inst.busy for inst in instances):
        due = min(len(workload), int((tick + 1) * requests_per_tick))
        while next_request < due:
            loads.append(tuple(router.load))
            instance = router.route(workload[next_request])
            instances[instance].submit(next_request, list(workload[next_request]))
            routed_to.append(instance)
            next_request += 1
        for i, inst in enumerate(instances):
            for _ in inst.tick():
                router.complete(i)
        tick += 1
    label = name or router.policy + ("+kv_events" if router.kv_event_pools is not None else "")
    return TraceResult(label, [inst.stats for inst in instances], routed_to, loads, tick)
