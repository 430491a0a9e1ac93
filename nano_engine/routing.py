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

* ``approx``: SGLang Model Gateway's ``cache_aware`` policy (chapter 05; :class:`ApproxTreePolicy`,
  whose docstring has the rule, the sources and the differences from the gateway), with the
  gateway's command-line defaults (``cache_threshold`` 0.3, ``balance_abs_threshold`` 64,
  ``balance_rel_threshold`` 1.5, ``max_tree_size`` 2**26). It assumes every prompt it sent is still
  cached, so it keeps routing to a worker that already evicted the prefix. Given an
  ``event_index``, it matches against the device blocks the workers' KV events report instead of
  its trees (chapter 05's comparison of the two views).

Two read a global index built from the workers' KV events (``nano_engine.kv_index.KVBlockIndex``,
anything with ``workers_for(block_hash) -> {worker: {medium, ...}}``). A worker's prefix is the run
of the request's blocks, from block 0, that the index says it holds in any medium
(:func:`nano_engine.kv_index.prefix_runs`):

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
  credit is ``overlap_score_credit`` (default 1; 0 to 1 in the v1.2 documentation) per device block
  plus 0.75 per host and 0.25 per disk block (a decay factor and a shared-cache term, off by default,
  left out here); ``overlap_score_weight`` survives in ``lib/kv-router/src/scheduling/config.rs`` only
  as a deprecated alias that sets ``prefill_load_scale`` (and, at 0, the credit too). This policy
  keeps the classic form, which is the new one with no queued prefill, no host or disk blocks and
  ``decode_active_request_weight`` 0. Defaults of the classic form, as ``KvRouterConfig::default()``
  (``lib/llm/src/kv_router.rs`` in 2025): ``overlap_score_weight``
  1.0, ``router_temperature`` 0.0, the same in every version of the file we read (we pinned no
  Dynamo release). Temperature 0 takes the argmin, ties broken uniformly at random (seeded here),
  as Dynamo's ``DefaultWorkerSelector::select_worker`` does at commit ``01690d4`` (reservoir
  sampling over the tied minima; later versions move it to ``minimum_cost_index``); T > 0 samples worker i with probability proportional to
  ``exp(-(logit_i - min) / ((max - min) * T))`` (the logits normalised to [0, 1] first; all equal:
  uniform), as ``softmax_sample``. The overlap counts the run's leading device (GPU) blocks only;
  today's Dynamo adds host and disk credits (0.75, 0.25), not modelled here.

* ``llm-d``: llm-d's precise prefix-cache scorer plus its load scorers, summed with weights by the
  endpoint picker, highest total wins (ties at random, the ``max-score-picker``):

  - ``prefix``, weight 2: ``LongestPrefixScorer`` (``pkg/kvcache/kvblock_scorer.go`` of
    llm-d-kv-cache-manager at ``a378f5b``): walking the request's blocks from block 0, a worker
    adds the weight of the best tier that holds the block (``gpu`` 1.0, ``cpu`` 0.8,
    ``pkg/kvcache/backend.go``; a tier without a weight, such as ``STORAGE``, 1.0) until the first
    block it holds in no tier; the raw scores are then
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
from collections import Counter
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nano_engine.checks import require_int
from nano_engine.kv_index import CPU, GPU, BlockIndex, prefix_runs
from nano_engine.radix import RadixCache

POLICIES = ("random", "round-robin", "least-loaded", "approx", "dynamo", "llm-d")
"""Every policy's name, as ``make_policy`` and the command line take it."""

EVENT_POLICIES = ("dynamo", "llm-d")
"""The policies that read the KV-event index."""

MEDIUM_GPU, MEDIUM_CPU = GPU, CPU

# SGLang Model Gateway's command-line defaults (ApproxTreePolicy's docstring has the source).
CACHE_THRESHOLD = 0.3
BALANCE_ABS_THRESHOLD = 64
BALANCE_REL_THRESHOLD = 1.5
TREE_CAPACITY = 1 << 26      # the gateway's max_tree_size (characters there, tokens per worker here)

# Dynamo's KvRouterConfig::default() (module docstring).
OVERLAP_SCORE_WEIGHT = 1.0
ROUTER_TEMPERATURE = 0.0

# llm-d: tier weights of the longest-prefix scorer (a tier not listed weighs 1.0), and the endpoint
# picker's scorer weights.
TIER_WEIGHTS = {MEDIUM_GPU: 1.0, MEDIUM_CPU: 0.8}
UNKNOWN_TIER_WEIGHT = 1.0
LLMD_SCORER_WEIGHTS = {"prefix": 2.0, "queue": 1.0, "kv-cache": 1.0}


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

    @classmethod
    def of(cls, tokens: Sequence[int], pool: Any = None) -> RoutingRequest:
        """A request from its token ids. ``pool`` hashes as the engines do (a
        :class:`~nano_engine.prefix_cache.PrefixCachingBlockPool` of their block size and hash
        algorithm): the block hashes are then the ones its KV events publish; without it there are
        none, and a block is one token."""
        tokens = list(tokens)
        if pool is None:
            return cls(tokens, [], len(tokens), 1)
        return cls(tokens, [pool.event_hash(h) for h in pool.block_hashes(tokens)], len(tokens), pool.block_size)

    @property
    def num_blocks(self) -> int:
        """Blocks the prompt occupies (a partial last block counts)."""
        return -(-self.num_tokens // self.block_size)


@dataclass
class Loads:
    """The router's own view of each worker's load: the one count every policy keeps."""

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
    uses_index = False      # does it read an index of the workers' KV events (then requests need block hashes)

    def __init__(self, num_workers: int, *, seed: int = 0) -> None:
        self.num_workers = require_int("num_workers", num_workers)
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

    def least_loaded(self) -> int:
        """The worker with the fewest requests in flight (the lowest index among equals)."""
        return min(range(self.num_workers), key=lambda w: (self.loads.in_flight[w], w))


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
        return self.least_loaded()


class ApproxTreePolicy(RoutingPolicy):
    """SGLang Model Gateway's ``cache_aware`` policy (sgl-router, renamed SGLang Model Gateway, now
    developed as smg-project/smg): an *approximate* radix tree per worker.

    The router cannot see a worker's cache, so it keeps a :class:`~nano_engine.radix.RadixCache` of
    the prompts it sent there, assumes what it sent is cached, and trims the tree to
    ``tree_capacity`` tokens, least recently used first, as the worker's cache would evict. For
    each request (the load is the requests in flight, ``loads.in_flight``, counted by the router):

    1. if the load is imbalanced, ``max - min > balance_abs_threshold`` **and**
       ``max > min * balance_rel_threshold``, send it to the least-loaded worker;
    2. else, if the longest match over the workers' trees covers more than ``cache_threshold`` of
       the prompt, send it to that worker (among equal matches, the less loaded);
    3. else (nobody has much of it), send it to the worker with the smallest tree, the one with the
       most room for a new prefix.

    In every case the prompt is recorded in the chosen worker's tree: ``pick`` does it, so call it
    once per request. ``reasons`` counts the decisions of each rule (``"balance"``,
    ``"affinity"``, ``"smallest"``).

    **KV events instead of guessing.** With ``event_index`` (a
    :class:`~nano_engine.kv_index.KVBlockIndex` fed by the workers' events; in one process,
    ``event_index.follow(worker, pool)``), a match is the
    run of the request's block hashes, from block 0, that the worker holds on the device, at most
    the blocks before the prompt's last token (an engine never reuses that one), and a worker's size
    is its number of cached device blocks, duplicates included. Nothing is recorded or guessed, but
    a worker reports a prefix only once it has computed it.

    **What SGLang's router does differently** (``CacheAwarePolicy::select_worker`` in
    ``sgl-model-gateway/src/policies/cache_aware.rs`` of sgl-project/sglang at commit ``b93974f``,
    and ``model_gateway/src/policies/cache_aware.rs`` of smg-project/smg at commit ``56ad201``; the
    tree is ``Tree::prefix_match`` in ``src/policies/tree.rs``):

    * Its tree is over request **text** (characters), not token ids: it routes before any
      tokenizer runs, and the match ratio is matched characters over prompt characters. (smg adds a
      token tree for pre-tokenized gRPC requests.) This package's router matches token ids.
    * Step 3: the rule above, "smallest tree", is the original design (still described in the
      file's header comment); the code now sends a low-match request to the **least-loaded**
      worker. This package keeps the smallest-tree rule.
    * Trees are trimmed by a background thread every ``eviction_interval`` seconds to
      ``max_tree_size``; this package trims on every insert (a simulation has no clock), to
      ``tree_capacity`` tokens per worker.
    * Load is the gateway's own in-flight count (``Worker::load``), as here; smg can also use the
      loads the engines report. (smg's header at ``56ad201`` still describes the max - min /
      relative rule above; its PR #2341, 2026-08-27, mentions an "overload spill gate", which we
      have not checked in code.)

    Defaults are the gateway's command-line defaults, the same in ``src/main.rs``'s ``CliArgs``
    (sgl-model-gateway at commit ``f47e04e``) and in the Python ``RouterArgs``
    (``sglang_router/router_args.py``, sglang-router 0.3.2): ``cache_threshold`` 0.3,
    ``balance_abs_threshold`` 64, ``balance_rel_threshold`` 1.5, ``max_tree_size`` 2**26; eviction
    every 120 s in ``CliArgs``, 60 s in that ``RouterArgs`` (``eviction_interval_secs``). The Rust
    ``CacheAwareConfig::default()`` (``src/policies/mod.rs``) used by library callers differs (0.5,
    32, 1.1, 30 s, 10,000).
    """

    name = "approx"

    def __init__(self, num_workers: int, *, seed: int = 0, cache_threshold: float = CACHE_THRESHOLD,
                 balance_abs_threshold: int = BALANCE_ABS_THRESHOLD,
                 balance_rel_threshold: float = BALANCE_REL_THRESHOLD, tree_capacity: int | None = TREE_CAPACITY,
                 event_index: BlockIndex | None = None) -> None:
        super().__init__(num_workers, seed=seed)
        if not 0 <= cache_threshold <= 1:
            raise ValueError(f"cache_threshold must be in [0, 1], got {cache_threshold}")
        if balance_abs_threshold < 0 or balance_rel_threshold < 1:
            raise ValueError(f"need balance_abs_threshold >= 0 and balance_rel_threshold >= 1, got "
                             f"{balance_abs_threshold} and {balance_rel_threshold}")
        require_int("tree_capacity", tree_capacity, optional=True)
        self.cache_threshold = cache_threshold
        self.balance_abs_threshold, self.balance_rel_threshold = balance_abs_threshold, balance_rel_threshold
        self.tree_capacity = tree_capacity
        self.event_index = event_index
        self.trees = [RadixCache() for _ in range(num_workers)]
        self.reasons: Counter[str] = Counter()

    @property
    def uses_index(self) -> bool:  # type: ignore[override]
        """With an ``event_index`` the policy reads KV events (requests need block hashes)."""
        return self.event_index is not None

    def is_imbalanced(self) -> bool:
        """SGLang's rule: both the absolute and the relative gap are over their thresholds."""
        high, low = max(self.loads.in_flight), min(self.loads.in_flight)
        return high - low > self.balance_abs_threshold and high > low * self.balance_rel_threshold

    def pick(self, request: RoutingRequest) -> int:
        if not request.tokens:
            raise ValueError("route: the prompt is empty")
        load = self.loads.in_flight
        if self.is_imbalanced():
            worker, reason = self.least_loaded(), "balance"
        else:
            matched = self.match_lengths(request)
            best = min(range(self.num_workers), key=lambda w: (-matched[w], load[w], w))
            if matched[best] / len(request.tokens) > self.cache_threshold:
                worker, reason = best, "affinity"
            else:
                sizes = self.cached_sizes(request.block_size)
                worker = min(range(self.num_workers), key=lambda w: (sizes[w], load[w], w))
                reason = "smallest"
        self.reasons[reason] += 1
        if self.event_index is None:
            self._record(worker, request.tokens)
        return worker

    def _record(self, worker: int, tokens: Sequence[int]) -> None:
        """Remember that ``worker`` will cache ``tokens``; trim its tree to the bound."""
        tree = self.trees[worker]
        tree.insert(list(tokens), [0] * len(tokens))   # dummy values: the router holds no KV
        if self.tree_capacity is not None and tree.total_size() > self.tree_capacity:
            tree.evict(tree.total_size() - self.tree_capacity)

    def match_lengths(self, request: RoutingRequest) -> list[int]:
        """Per worker, how many leading tokens of the request it is believed to have cached."""
        if self.event_index is None:
            return [tree.match_length(request.tokens) for tree in self.trees]
        usable = (request.num_tokens - 1) // request.block_size
        runs = prefix_runs(self.event_index, request.block_hashes[:usable], range(self.num_workers))
        return [gpu_overlap(runs[w]) * request.block_size for w in range(self.num_workers)]

    def cached_sizes(self, block_size: int = 1) -> list[int]:
        """Per worker, the tokens it is believed to cache: its tree's size, or (with an index) its
        device blocks times ``block_size``."""
        if self.event_index is None:
            return [tree.total_size() for tree in self.trees]
        count = getattr(self.event_index, "num_blocks", None)
        if count is None:
            raise ValueError("the approx policy's event_index must count blocks (num_blocks(worker, medium)): "
                             "use a KVBlockIndex")
        return [count(w, MEDIUM_GPU) * block_size for w in range(self.num_workers)]


def gpu_overlap(run: Sequence[Collection[str]]) -> int:
    """Blocks from block 0 held on the device (Dynamo's classic overlap)."""
    n = 0
    while n < len(run) and MEDIUM_GPU in run[n]:
        n += 1
    return n


class _IndexPolicy(RoutingPolicy):
    uses_index = True

    def __init__(self, num_workers: int, index: BlockIndex | None, *, seed: int = 0) -> None:
        super().__init__(num_workers, seed=seed)
        if index is None:
            raise ValueError(f"the {self.name} policy reads a KV-event index: pass index=")
        self.index: BlockIndex = index

    def _runs(self, request: RoutingRequest) -> dict[int, list[frozenset[str]]]:
        return prefix_runs(self.index, request.block_hashes, range(self.num_workers))

    def _argmin(self, costs: Sequence[float]) -> int:
        """The cheapest worker; ties broken uniformly at random (seeded)."""
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
        runs = self._runs(request)
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
        self.capacity_blocks = require_int("capacity_blocks", capacity_blocks)
        self.tier_weights = dict(TIER_WEIGHTS if tier_weights is None else tier_weights)
        self.scorer_weights = dict(LLMD_SCORER_WEIGHTS if scorer_weights is None else scorer_weights)
        unknown = set(self.scorer_weights) - set(LLMD_SCORER_WEIGHTS)
        if unknown:
            raise ValueError(f"unknown llm-d scorers {sorted(unknown)}; known: {sorted(LLMD_SCORER_WEIGHTS)}")

    def scores(self, request: RoutingRequest) -> dict[str, list[float]]:
        """Each scorer's normalised score per worker."""
        runs = self._runs(request)
        raw = {w: sum(self.tier_weight(media) for media in run) for w, run in runs.items() if run}
        queue = {w: float(q) for w, q in enumerate(self.loads.in_flight)}
        usage = [min(1.0, b / self.capacity_blocks) for b in self.loads.active_blocks]
        return {"prefix": min_max_scores(raw, self.num_workers),
                "queue": min_max_scores(queue, self.num_workers, invert=True),
                "kv-cache": [1.0 - u for u in usage]}

    def tier_weight(self, media: Collection[str]) -> float:
        """A block's weight: its best tier's (llm-d's ``getMaxWeight``: a tier without a weight, 1.0)."""
        return max(self.tier_weights.get(m, UNKNOWN_TIER_WEIGHT) for m in media)

    def totals(self, request: RoutingRequest) -> list[float]:
        scores = self.scores(request)
        return [sum(self.scorer_weights.get(s, 0.0) * scores[s][w] for s in scores) for w in range(self.num_workers)]

    def pick(self, request: RoutingRequest) -> int:
        return self._argmin([-t for t in self.totals(request)])


def make_policy(name: str, num_workers: int, *, index: BlockIndex | None = None, seed: int = 0,
                capacity_blocks: int = 1, **options: Any) -> RoutingPolicy:
    """The policy called ``name`` (one of :data:`POLICIES`); ``options`` go to its class.

    ``index`` goes to the policies that read one (:data:`EVENT_POLICIES`); the others ignore it
    (``approx`` reads the workers' events only when given ``event_index=``)."""
    simple: dict[str, type[RoutingPolicy]] = {"random": RandomPolicy, "round-robin": RoundRobinPolicy,
                                              "least-loaded": LeastLoadedPolicy, "approx": ApproxTreePolicy}
    if name in simple:
        return simple[name](num_workers, seed=seed, **options)
    if name == "dynamo":
        return DynamoPolicy(num_workers, index, seed=seed, **options)
    if name == "llm-d":
        return LlmdPolicy(num_workers, index, seed=seed, capacity_blocks=capacity_blocks, **options)
    raise ValueError(f"unknown router {name!r}; choose one of {', '.join(POLICIES)}")
