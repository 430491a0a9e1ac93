"""routing.py: the routers of a cluster, one interface, six policies.

A router sees a request, picks a worker (an engine instance), and keeps its own count of the load
it sent there. Every policy here answers ``pick(request) -> worker``; ``route`` is ``pick`` plus
the load bookkeeping (``on_routed``), and the cluster calls ``on_finished`` when a request ends.
Load is the router's own view, as in SGLang's gateway and Dynamo's router: requests in flight
(routed, not finished) and the KV blocks those requests occupy (their prompts, in blocks).

Three policies know nothing of caches:

* ``random``: a worker drawn uniformly (seeded);
* ``round-robin``: workers in turn;
* ``least-loaded``: the fewest requests in flight (lowest index among equals).

One guesses the caches from its own decisions, with no events:

* ``approx``: SGLang Model Gateway's ``cache_aware`` policy, the approximate tree of
  :class:`nano_engine.router.Router` (chapter 05) with the gateway's command-line defaults
  (``cache_threshold`` 0.3, ``balance_abs_threshold`` 64, ``balance_rel_threshold`` 1.5,
  ``max_tree_size`` 2**26; sources and the differences from the gateway in ``router.py``). It
  assumes every prompt it sent is still cached, so it keeps routing to a worker that already
  evicted the prefix.

Two read a global index built from the workers' KV events (``nano_engine.kv_index.KVBlockIndex``,
anything with ``workers_for(block_hash) -> {worker: {medium, ...}}``). A worker's *overlap* is the
run of the request's blocks, from block 0, that the index says it holds:

* ``dynamo``: NVIDIA Dynamo's KV router, its classic cost, simplified (``DefaultWorkerSelector``,
  ai-dynamo/dynamo, ``lib/llm/src/kv_router/scheduler.rs`` in mid-2025 versions, where the prefill
  term also counted the worker's queued prefill tokens, left out here; the earliest 2025 version
  scored ``2 * overlap - cache usage - waiting`` instead)::

      prefill_blocks = (prompt_tokens - overlap_blocks * block_size) / block_size
      decode_blocks  = blocks of the requests in flight at the worker + this request's blocks
      logit          = overlap_score_weight * prefill_blocks + decode_blocks     (lower is better)

  The cost has moved on since. At commit ``01690d4`` (``DefaultWorkerSelector::worker_logit`` in
  ``lib/kv-router/src/scheduling/selector.rs``) it is ``prefill_load_scale * max(raw_prefill_blocks -
  overlap_credit_blocks, 0) + decode_blocks + decode_active_request_weight * active_requests``, where
  ``raw_prefill_blocks`` counts the worker's active prefill tokens plus this request's, and the
  credit is ``overlap_score_credit`` (0 to 1, default 1) per device block plus 0.75 per host and 0.25
  per disk block; ``overlap_score_weight`` survives in ``lib/kv-router/src/scheduling/config.rs`` only
  as a deprecated alias that sets ``prefill_load_scale`` (and, at 0, the credit too). This policy
  keeps the classic form, which is the new one with no queued prefill, no host or disk blocks and
  ``decode_active_request_weight`` 0. Defaults of the classic form, as ``KvRouterConfig::default()``
  (``lib/llm/src/kv_router.rs`` in 2025): ``overlap_score_weight``
  1.0, ``router_temperature`` 0.0, the same in every version of the file we read (we pinned no
  Dynamo release). Temperature 0 takes the argmin (ties drawn at random, as
  Dynamo's ``minimum_cost_index``); T > 0 samples worker i with probability proportional to
  ``exp(-(logit_i - min) / ((max - min) * T))`` (the logits normalised to [0, 1] first; all equal:
  uniform), as ``softmax_sample``. The overlap counts device (GPU) blocks only; today's Dynamo adds
  host and disk credits (0.75, 0.25), not modelled here.

* ``llm-d``: llm-d's precise prefix-cache scorer plus its load scorers, summed with weights by the
  endpoint picker, highest total wins (ties at random, the ``max-score-picker``):

  - ``prefix``, weight 2: ``LongestPrefixScorer`` (``pkg/kvcache/kvblock_scorer.go`` of
    llm-d-kv-cache-manager at ``a378f5b``): walking the request's blocks from block 0, a worker
    adds the weight of the best tier that holds the block (``gpu`` 1.0, ``cpu`` 0.8,
    ``pkg/kvcache/backend.go``) until the first block it does not hold; the raw scores are then
    min-max normalised over the workers that have one (all equal: 1.0; no hit at all: 0.0), as
    ``indexedScoresToNormalizedScoredPods`` in llm-d-inference-scheduler did until its PR #1107
    (2026-05-14), which made the score matched blocks over the request's blocks, clipped to [0, 1]
    ("cold clusters previously returned 1.0 for every pod"). This package keeps the min-max form.
  - ``queue``, weight 1: ``(max_q - q) / (max_q - min_q)`` over the workers, 1.0 when all are equal
    (``QueueScorer.Score``, ``pkg/epp/scheduling/framework/plugins/scorer/queue.go`` of
    kubernetes-sigs/gateway-api-inference-extension).
  - ``kv-cache``, weight 1: ``1 - KV utilisation``.

  Weights: the endpoint picker's ``prefix-cache-scorer`` 2, ``kv-cache-scorer`` 1, ``queue-scorer``
  1, as llm-d configures precise prefix caching (read beside llm-d-kv-cache-manager at ``a378f5b``). Where this package differs: llm-d
  reads each pod's waiting queue and KV utilisation from its metrics; here they are the router's
  own counts (requests in flight; the blocks of the prompts in flight over the worker's capacity),
  so every policy sees the same load.

  A consequence of the normalisation worth seeing: a worker that holds no block of the request
  scores 0 on the prefix, and any holder of block 0 up to 2, which the two load scorers (at most
  1 + 1) can only tie. On Mooncake's conversation trace, where every request starts with the same
  block, the first worker to hold it takes every request until its KV utilisation reaches 1, and
  a worker that never got one can starve (``benchmarks/README.md``: one of four instances served
  nothing): cache affinity funnelling traffic to a few workers, as vLLM's production-stack reported
  of its KV-aware router ("every request for a hot prefix lands on the one engine holding it",
  vllm-project/production-stack PR #1035). (SGLang PR #14305 reported a funnel with another cause:
  on a cache miss the gateway's smallest-tree rule sent all new traffic to one overloaded worker,
  blind to its load.)

The approximate tree matches a request's ``tokens`` (on a Mooncake trace, its block ids: one
"token" per 512 real ones); the event-driven policies look up its
``block_hashes``, the chained hashes of its full blocks in the form the KV events publish them, so
the router must hash exactly as the engines do (same algorithm, block size, seed).
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from nano_engine.router import (
    BALANCE_ABS_THRESHOLD,
    BALANCE_REL_THRESHOLD,
    CACHE_THRESHOLD,
    TREE_CAPACITY,
    Router,
)

POLICIES = ("random", "round-robin", "least-loaded", "approx", "dynamo", "llm-d")
"""Every policy's name, as ``make_policy`` and the command line take it."""

EVENT_POLICIES = ("dynamo", "llm-d")
"""The policies that read the KV-event index."""

MEDIUM_GPU, MEDIUM_CPU = "GPU", "CPU"

# Dynamo's KvRouterConfig::default() (module docstring).
OVERLAP_SCORE_WEIGHT = 1.0
ROUTER_TEMPERATURE = 0.0

# llm-d: tier weights of the longest-prefix scorer, and the endpoint picker's scorer weights.
TIER_WEIGHTS = {MEDIUM_GPU: 1.0, MEDIUM_CPU: 0.8}
LLMD_SCORER_WEIGHTS = {"prefix": 2.0, "queue": 1.0, "kv-cache": 1.0}


class BlockIndex(Protocol):
    """What the event-driven policies read: which workers hold a block hash, on which media."""

    def workers_for(self, block_hash: Hashable) -> Mapping[Any, set[str]]: ...


@dataclass(frozen=True)
class RoutingRequest:
    """One request as a router sees it.

    ``tokens``: what the approximate tree matches (token ids, or a trace's block ids);
    ``block_hashes``: the chained hashes of its full blocks, as KV events publish them;
    ``num_tokens``: prompt length in tokens; ``block_size``: tokens per block.
    """

    tokens: Sequence[int]
    block_hashes: Sequence[Hashable]
    num_tokens: int
    block_size: int

    @property
    def num_blocks(self) -> int:
        """Blocks the prompt occupies (a partial last block counts)."""
        return -(-self.num_tokens // self.block_size)


@dataclass
class Loads:
    """The router's own view of each worker's load."""

    in_flight: list[int]          # requests routed there and not finished
    active_blocks: list[int]      # KV blocks of those requests' prompts
    routed: list[int] = field(default_factory=list)   # requests sent there so far

    @classmethod
    def empty(cls, n: int) -> Loads:
        return cls([0] * n, [0] * n, [0] * n)


class RoutingPolicy:
    """Base of every policy: load bookkeeping, a seeded generator, and ``route``.

    Subclasses implement ``pick(request) -> worker``. ``index`` (the event-driven ones) can be
    replaced while running, as after a router restart that lost it.
    """

    name = "base"
    uses_index = False

    def __init__(self, num_workers: int, *, seed: int = 0) -> None:
        if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 1:
            raise ValueError(f"num_workers must be an int >= 1, got {num_workers!r}")
        self.num_workers = num_workers
        self.loads = Loads.empty(num_workers)
        self.rng = random.Random(seed)

    def pick(self, request: RoutingRequest) -> int:
        raise NotImplementedError

    def route(self, request: RoutingRequest) -> int:
        """``pick``, then count the request in flight at the chosen worker."""
        worker = self.pick(request)
        self.on_routed(worker, request)
        return worker

    def on_routed(self, worker: int, request: RoutingRequest) -> None:
        self.loads.in_flight[worker] += 1
        self.loads.active_blocks[worker] += request.num_blocks
        self.loads.routed[worker] += 1

    def on_finished(self, worker: int, request: RoutingRequest) -> None:
        if self.loads.in_flight[worker] < 1:
            raise ValueError(f"on_finished: worker {worker} has no request in flight")
        self.loads.in_flight[worker] -= 1
        self.loads.active_blocks[worker] -= request.num_blocks


class RandomPolicy(RoutingPolicy):
    name = "random"

    def pick(self, request: RoutingRequest) -> int:
        return self.rng.randrange(self.num_workers)


class RoundRobinPolicy(RoutingPolicy):
    name = "round-robin"

    def __init__(self, num_workers: int, *, seed: int = 0) -> None:
        super().__init__(num_workers, seed=seed)
        self._next = 0

    def pick(self, request: RoutingRequest) -> int:
        worker = self._next
        self._next = (worker + 1) % self.num_workers
        return worker


class LeastLoadedPolicy(RoutingPolicy):
    name = "least-loaded"

    def pick(self, request: RoutingRequest) -> int:
        return min(range(self.num_workers), key=lambda w: (self.loads.in_flight[w], w))


class ApproxTreePolicy(RoutingPolicy):
    """SGLang Model Gateway's ``cache_aware`` policy: chapter 05's :class:`~nano_engine.router.Router`.

    ``pick`` records the prompt in the chosen worker's approximate tree (and counts it in flight
    there, which is the tree router's own load): call it once per request.
    """

    name = "approx"

    def __init__(self, num_workers: int, *, seed: int = 0, cache_threshold: float = CACHE_THRESHOLD,
                 balance_abs_threshold: int = BALANCE_ABS_THRESHOLD,
                 balance_rel_threshold: float = BALANCE_REL_THRESHOLD,
                 tree_capacity: int | None = TREE_CAPACITY) -> None:
        super().__init__(num_workers, seed=seed)
        self.tree_router = Router(num_workers, "cache_aware", cache_threshold=cache_threshold,
                                  balance_abs_threshold=balance_abs_threshold,
                                  balance_rel_threshold=balance_rel_threshold, tree_capacity=tree_capacity)

    def pick(self, request: RoutingRequest) -> int:
        return self.tree_router.route(request.tokens)

    def on_finished(self, worker: int, request: RoutingRequest) -> None:
        super().on_finished(worker, request)
        self.tree_router.complete(worker)


def prefix_tiers(index: BlockIndex, block_hashes: Sequence[Hashable], num_workers: int) -> list[list[str]]:
    """Per worker, the best medium of each block of its longest held run from block 0.

    ``"GPU"`` if the worker holds the block on the device, else ``"CPU"``; the run stops at the
    first block the worker holds on neither.
    """
    runs: list[list[str]] = [[] for _ in range(num_workers)]
    alive = set(range(num_workers))
    for h in block_hashes:
        if not alive:
            break
        holders = index.workers_for(h)
        for w in list(alive):
            mediums = holders.get(w, ())
            if MEDIUM_GPU in mediums:
                runs[w].append(MEDIUM_GPU)
            elif MEDIUM_CPU in mediums:
                runs[w].append(MEDIUM_CPU)
            else:
                alive.discard(w)
    return runs


def gpu_overlap(run: Sequence[str]) -> int:
    """Blocks from block 0 held on the device (Dynamo's classic overlap)."""
    n = 0
    while n < len(run) and run[n] == MEDIUM_GPU:
        n += 1
    return n


class _IndexPolicy(RoutingPolicy):
    uses_index = True

    def __init__(self, num_workers: int, index: BlockIndex | None, *, seed: int = 0) -> None:
        super().__init__(num_workers, seed=seed)
        if index is None:
            raise ValueError(f"the {self.name} policy reads a KV-event index: pass index=")
        self.index = index

    def _argmin(self, costs: Sequence[float]) -> int:
        best = min(costs)
        tied = [w for w, c in enumerate(costs) if c == best]
        return tied[0] if len(tied) == 1 else self.rng.choice(tied)


class DynamoPolicy(_IndexPolicy):
    """Dynamo's classic cost (module docstring)."""

    name = "dynamo"

    def __init__(self, num_workers: int, index: BlockIndex | None = None, *, seed: int = 0,
                 overlap_score_weight: float = OVERLAP_SCORE_WEIGHT,
                 temperature: float = ROUTER_TEMPERATURE) -> None:
        super().__init__(num_workers, index, seed=seed)
        if not (math.isfinite(overlap_score_weight) and overlap_score_weight >= 0):
            raise ValueError(f"overlap_score_weight must be a finite number >= 0, got {overlap_score_weight!r}")
        if not (math.isfinite(temperature) and temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
        self.overlap_score_weight, self.temperature = overlap_score_weight, temperature

    def logits(self, request: RoutingRequest) -> list[float]:
        """Per worker, ``overlap_score_weight * prefill_blocks + decode_blocks``."""
        runs = prefix_tiers(self.index, request.block_hashes, self.num_workers)
        out = []
        for w in range(self.num_workers):
            prefill = (request.num_tokens - gpu_overlap(runs[w]) * request.block_size) / request.block_size
            decode = self.loads.active_blocks[w] + request.num_blocks
            out.append(self.overlap_score_weight * prefill + decode)
        return out

    def pick(self, request: RoutingRequest) -> int:
        logits = self.logits(request)
        if self.temperature == 0:
            return self._argmin(logits)
        return softmax_sample(logits, self.temperature, self.rng.random())


def softmax_sample(costs: Sequence[float], temperature: float, sample: float) -> int:
    """Dynamo's sampling: costs normalised to [0, 1], probability ~ ``exp(-normalised / T)``;
    ``sample`` in [0, 1) walks the cumulative distribution. All costs equal: uniform."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 to sample, got {temperature}")
    lo, hi = min(costs), max(costs)
    if lo == hi:
        weights = [1.0] * len(costs)
    else:
        weights = [math.exp(-(c - lo) / ((hi - lo) * temperature)) for c in costs]
    total, cumulative = sum(weights), 0.0
    for w, weight in enumerate(weights):
        cumulative += weight / total
        if sample <= cumulative:
            return w
    return len(costs) - 1


def min_max_scores(raw: Mapping[int, float], num_workers: int, *, missing: float = 0.0,
                   invert: bool = False) -> list[float]:
    """Min-max normalise ``raw`` (worker -> score) to [0, 1] over the workers present in it;
    all equal: 1.0; a worker absent from ``raw``: ``missing``. ``invert``: lower raw is better."""
    if not raw:
        return [missing] * num_workers
    lo, hi = min(raw.values()), max(raw.values())
    out = []
    for w in range(num_workers):
        if w not in raw:
            out.append(missing)
        elif lo == hi:
            out.append(1.0)
        else:
            out.append(((hi - raw[w]) if invert else (raw[w] - lo)) / (hi - lo))
    return out


class LlmdPolicy(_IndexPolicy):
    """llm-d's precise prefix-cache scorer plus queue and KV-cache scorers (module docstring).

    ``capacity_blocks``: KV blocks per worker, for the KV-cache scorer's utilisation.
    """

    name = "llm-d"

    def __init__(self, num_workers: int, index: BlockIndex | None = None, *, seed: int = 0,
                 capacity_blocks: int = 1, tier_weights: Mapping[str, float] | None = None,
                 scorer_weights: Mapping[str, float] | None = None) -> None:
        super().__init__(num_workers, index, seed=seed)
        if not isinstance(capacity_blocks, int) or capacity_blocks < 1:
            raise ValueError(f"capacity_blocks must be an int >= 1, got {capacity_blocks!r}")
        self.capacity_blocks = capacity_blocks
        self.tier_weights = dict(TIER_WEIGHTS if tier_weights is None else tier_weights)
        self.scorer_weights = dict(LLMD_SCORER_WEIGHTS if scorer_weights is None else scorer_weights)
        unknown = set(self.scorer_weights) - set(LLMD_SCORER_WEIGHTS)
        if unknown:
            raise ValueError(f"unknown llm-d scorers {sorted(unknown)}; known: {sorted(LLMD_SCORER_WEIGHTS)}")

    def scores(self, request: RoutingRequest) -> dict[str, list[float]]:
        """Each scorer's normalised score per worker."""
        runs = prefix_tiers(self.index, request.block_hashes, self.num_workers)
        raw = {w: sum(self.tier_weights[m] for m in run) for w, run in enumerate(runs) if run}
        queue = {w: float(q) for w, q in enumerate(self.loads.in_flight)}
        usage = [min(1.0, b / self.capacity_blocks) for b in self.loads.active_blocks]
        return {"prefix": min_max_scores(raw, self.num_workers),
                "queue": min_max_scores(queue, self.num_workers, invert=True),
                "kv-cache": [1.0 - u for u in usage]}

    def totals(self, request: RoutingRequest) -> list[float]:
        scores = self.scores(request)
        return [sum(self.scorer_weights.get(s, 0.0) * scores[s][w] for s in scores) for w in range(self.num_workers)]

    def pick(self, request: RoutingRequest) -> int:
        return self._argmin([-t for t in self.totals(request)])


def make_policy(name: str, num_workers: int, *, index: BlockIndex | None = None, seed: int = 0,
                capacity_blocks: int = 1, **options: Any) -> RoutingPolicy:
    """The policy called ``name`` (one of :data:`POLICIES`); ``options`` go to its class."""
    simple: dict[str, type[RoutingPolicy]] = {"random": RandomPolicy, "round-robin": RoundRobinPolicy,
                                              "least-loaded": LeastLoadedPolicy, "approx": ApproxTreePolicy}
    if name in simple:
        return simple[name](num_workers, seed=seed, **options)
    if name == "dynamo":
        return DynamoPolicy(num_workers, index, seed=seed, **options)
    if name == "llm-d":
        return LlmdPolicy(num_workers, index, seed=seed, capacity_blocks=capacity_blocks, **options)
    raise ValueError(f"unknown router {name!r}; choose one of {', '.join(POLICIES)}")
