"""instances.py: what a router feeds, the stand-ins for engines, and a trace run over them.

A router (:mod:`nano_engine.routing`) only decides; something must then serve the request. Three
kinds of instance serve here, from the cheapest to the real thing:

* :class:`SimulatedInstance` (chapters 05 and 07): a bounded prefix cache
  (:class:`~nano_engine.replay.ReplayCache`) behind a first-in first-out server that does a
  fixed amount of work per tick. Fast enough for traces of thousands of requests.
* :class:`TraceInstance` (chapter 07's processes, :mod:`nano_engine.cluster`): a vLLM-mode block
  pool fed Mooncake trace requests on the trace's own clock, with a time-to-first-token model.
* :class:`EngineInstance` (chapter 05): a real :class:`~nano_engine.engine.LLMEngine`, one
  ``step`` per tick.

Each block-pool instance (all but a radix :class:`SimulatedInstance` and an :class:`EngineInstance`
whose engine uses the radix cache) holds a
:class:`~nano_engine.prefix_cache.PrefixCachingBlockPool` (``pool``) whose KV events
a router can follow: in this process with :meth:`~nano_engine.kv_index.KVBlockIndex.follow`, or
over ZeroMQ (:mod:`nano_engine.kv_pubsub`).

:func:`run_trace` sends a workload through a policy to ticking instances (``submit``, ``tick``,
``busy``) and reports hits, computed tokens and the loads the router saw.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from nano_engine.checks import require_int
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.replay import ReplayCache, method_cache
from nano_engine.routing import RoutingPolicy, RoutingRequest
from nano_engine.traces import TraceRequest, serve_request, trace_replay
from nano_engine.workloads import Method

PREFILL_TOKENS_PER_MS = 15.0
"""The TTFT model's prefill rate per instance (tokens per millisecond)."""
DECODE_MS_PER_TOKEN = 20.0
"""The model's decode time per output token (it keeps a request in flight, beside prefill)."""


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
    an engine does at admission. ``cache`` is a :class:`~nano_engine.replay.ReplayCache`
    (``method`` "radix" or a block size, ``capacity`` tokens); with a block size, ``pool`` is the
    :class:`~nano_engine.prefix_cache.PrefixCachingBlockPool` whose KV events a router can follow.
    """

    def __init__(self, method: Method = 16, capacity: int = 1 << 15, *, work_per_tick: int = 4096,
                 decode_work: int = 256) -> None:
        self.work_per_tick = require_int("work_per_tick", work_per_tick)
        self.decode_work = require_int("decode_work", decode_work, minimum=0)
        cache, block_size = method_cache(method)
        self.cache = ReplayCache(cache, capacity, block_size=block_size)
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
                assert hits is not None        # a workload replay stores what fits: it refuses nothing
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

    def __init__(self, engine: Any, params: Any) -> None:
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


# ------------------------------------------------------------------------------- on a trace's clock


@dataclass(order=True)
class _Running:
    finish_ms: float
    request_id: int
    ttft_ms: float = field(compare=False)
    hit_tokens: int = field(compare=False)
    input_tokens: int = field(compare=False)


class TraceInstance:
    """A simulated engine fed trace requests: a vLLM-mode block pool and a FIFO prefill server.

    A trace block (512 tokens, one hash id) is one block of the pool, so one published hash per
    512 tokens (see :mod:`nano_engine.traces`); ``pool.subscribe`` gives its KV events. Times are
    in milliseconds; ``now`` is where the instance's clock starts. The TTFT model is
    :mod:`nano_engine.cluster`'s: one prefill at a time, in arrival order, at
    ``prefill_tokens_per_ms``, computing only the prompt tokens the cache misses; decoding runs
    beside it at ``decode_ms_per_token`` per output token and only keeps the request in flight.
    """

    def __init__(self, capacity_tokens: int, *, prefill_tokens_per_ms: float = PREFILL_TOKENS_PER_MS,
                 decode_ms_per_token: float = DECODE_MS_PER_TOKEN, now: float = 0.0) -> None:
        self.cache = trace_replay(None, "vllm", capacity_tokens)
        self.pool = self.cache.pool
        self.prefill_tokens_per_ms, self.decode_ms_per_token = prefill_tokens_per_ms, decode_ms_per_token
        self.waiting: deque[tuple[int, float, TraceRequest]] = deque()
        self.running: list[_Running] = []
        self.busy_until = now

    def submit(self, request_id: int, arrival_ms: float, request: TraceRequest) -> None:
        self.waiting.append((request_id, arrival_ms, request))

    def advance(self, now: float) -> list[tuple[int, float, int, int]]:
        """Run until ``now``: prefills that start by then (each looks up and fills the cache as it
        starts), then the requests finished by then, as ``(id, ttft_ms, hit_tokens, input_tokens)``."""
        while self.waiting and max(self.busy_until, self.waiting[0][1]) <= now:
            request_id, arrival, request = self.waiting.popleft()
            start = max(self.busy_until, arrival)
            hits = serve_request(self.cache, request) or 0       # None: larger than the whole cache, no hit
            first_token = start + (request.input_length - hits) / self.prefill_tokens_per_ms
            self.busy_until = first_token
            finish = first_token + request.output_length * self.decode_ms_per_token
            heapq.heappush(self.running, _Running(finish, request_id, first_token - arrival, hits, request.input_length))
        finished = []
        while self.running and self.running[0].finish_ms <= now:
            r = heapq.heappop(self.running)
            finished.append((r.request_id, r.ttft_ms, r.hit_tokens, r.input_tokens))
        return finished

    def next_time(self) -> float:
        """When something next happens here (a prefill starts or a request ends); inf if idle."""
        t = math.inf
        if self.waiting:
            t = max(self.busy_until, self.waiting[0][1])
        if self.running:
            t = min(t, self.running[0].finish_ms)
        return t

    def cached_hashes(self) -> set:
        """Every block hash the pool caches, as its events publish them: the truth for the index."""
        return {self.pool.event_hash(h) for h in self.pool.hash_to_blocks}


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


def hashing_pool(pools: Sequence[PrefixCachingBlockPool]) -> PrefixCachingBlockPool:
    """The instances' common way of hashing a prompt: their pools must agree on block size and on a
    named hash algorithm, so that one prompt has one chain of hashes; returns the first pool."""
    if len({(p.block_size, p.hash_algo) for p in pools}) != 1 or callable(pools[0].hash_algo):
        raise ValueError("the instances' pools must use the same block size and the same named hash_algo, "
                         "so that one prompt has one chain of hashes")
    return pools[0]


def run_trace(policy: RoutingPolicy, instances: Sequence[Instance], workload: Sequence[Sequence[int]], *,
              requests_per_tick: float = 1.0, name: str | None = None) -> TraceResult:
    """Send ``workload`` (in order) through ``policy`` to ``instances`` and run them until done.

    Each tick, the requests due by then arrive (``requests_per_tick`` on average) and are routed
    one by one; then every instance ticks, and each finished request is reported to the policy
    (``on_finished``: its load drops). Request ids are positions in ``workload``. A policy that
    reads an index of the instances' KV events (``policy.uses_index``) gets each request's block
    hashes as the instances' pools publish them.
    """
    if len(instances) != policy.num_workers:
        raise ValueError(f"the policy routes to {policy.num_workers} instances, got {len(instances)}")
    if requests_per_tick <= 0:
        raise ValueError(f"requests_per_tick must be > 0, got {requests_per_tick}")
    hasher = hashing_pool([cast(Any, inst).pool for inst in instances]) if policy.uses_index else None
    routed_to: list[int] = []
    loads: list[tuple[int, ...]] = []
    requests: dict[int, RoutingRequest] = {}
    next_request, tick = 0, 0
    while next_request < len(workload) or any(inst.busy for inst in instances):
        due = min(len(workload), int((tick + 1) * requests_per_tick))
        while next_request < due:
            prompt = list(workload[next_request])
            request = RoutingRequest.of(prompt, hasher)
            loads.append(tuple(policy.loads.in_flight))
            instance = policy.route(request)
            instances[instance].submit(next_request, prompt)
            requests[next_request] = request
            routed_to.append(instance)
            next_request += 1
        for i, inst in enumerate(instances):
            for request_id in inst.tick():
                policy.on_finished(i, requests.pop(request_id))
        tick += 1
    label = name or policy.name + ("+kv_events" if policy.uses_index else "")
    return TraceResult(label, [inst.stats for inst in instances], routed_to, loads, tick)
