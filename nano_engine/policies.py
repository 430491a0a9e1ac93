"""policies.py: cache-aware admission orders for the scheduler (LPM and DFS-weight, after SGLang).

With a prefix cache, the order in which waiting requests start changes how much they reuse.
Under memory pressure, first come first served (``fcfs``, :class:`FCFS`) can let a
prefix be evicted between two requests that share it, because other requests were admitted in
between. A cache-aware order runs requests that share a cached prefix back to back:

* ``lpm`` (longest prefix match): the requests with the longest cached prefix first. They are the
  cheapest to start, and their prefix is reused while it is still cached.
* ``dfs-weight``: group the waiting requests by where their cached prefix ends in the prefix
  tree; the *weight* of a node is the number of waiting requests in its subtree. Walk the tree
  depth first, heaviest child first, and list each node's requests after its subtree's. The
  branch most requests share runs first, and all of it before the next branch.

Both read match lengths with ``cache.peek(seq)`` (no hit counted, no lock taken), for any cache
manager. DFS-weight builds its tree from those matched prefixes (a :class:`RadixCache` of the
matched tokens): the nodes where waiting requests' matches branch, the same grouping SGLang reads
off its cache's tree, for the hashed-block cache too.

What SGLang 0.5.23 does (``python/sglang/srt/managers/schedule_policy.py``): its default
``--schedule-policy`` is ``fcfs`` (declared in ``python/sglang/srt/arg_groups/fields/schedule.py::Schedule``;
releases of 2024 defaulted to ``lpm``). Its *cache-aware* policies (``CacheAwarePolicy``) are
``lpm``, ``dfs-weight``, ``hrrn`` and the experimental ``shortest-prefill-first``; its
cache-agnostic ones (``CacheAgnosticPolicy``) are ``fcfs``, ``lof`` (longest output first),
``random`` and ``routing-key``. ``SchedulePolicy.calc_priority`` matches prefixes and marks
requests for the in-batch rule (``_compute_prefix_matches``) only under a cache-aware policy,
never under ``fcfs``; the rule then acts under ``lpm``, ``hrrn`` and ``shortest-prefill-first``
(``_sort_by_dfs_weight`` ignores it). With the radix cache disabled, a cache-aware policy becomes
``fcfs`` (``_validate_and_adjust_policy``).

Two safety rails, shared by both:

* **Fallback to FCFS.** Matching every waiting prompt costs time on every step. With more than
  ``fcfs_threshold`` requests waiting (SGLang: 128), the queue order is used and nothing is
  matched. (SGLang's ``SchedulePolicy._determine_active_policy`` applies it to ``lpm`` and
  ``hrrn``, not to ``dfs-weight``; here DFS-weight, which matches too, falls back as well.)
* **No starvation (this package's own rule, not SGLang's).** A greedy order can pass over a
  request forever: a prompt that shares nothing waits while a stream of later, cache-hitting
  requests goes first. A request is *passed over* in a round (a scheduler step that admits
  requests) when it stays waiting while a request that arrived after it is admitted. A request
  passed over ``max_passed_over`` times goes first, ahead of the cache-aware order (oldest first
  among such). The scheduler admits a prefix of the order and stops at the first request that
  does not fit, so from then on no later arrival can be admitted before it: **no request is ever
  passed over more than ``max_passed_over`` times.** SGLang's ``lpm`` has no such bound; SGLang
  handles starvation with priority scheduling (``--enable-priority-scheduling``: requests carry a
  priority, ``_sort_by_priority_and_fcfs``) and the ``hrrn`` policy, whose
  ratio of tokens prefilled while a request waits to its uncached tokens grows until an old
  request outranks new cache hits (``_sort_by_hrrn``).

A policy learns who was admitted by comparing the queue it sees with the one it saw last time:
a request gone from it (or back in it after a preemption) was admitted in between.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence as Seq
from typing import Protocol

from nano_engine.cache_manager import CacheManager
from nano_engine.radix import Node, RadixCache
from nano_engine.sequence import Sequence


class AdmissionPolicy(Protocol):
    """Decides the order in which waiting requests are offered admission.

    ``order`` sees the waiting queue (front first: preempted requests are put back at the front)
    and the cache manager (for cache-aware policies: ``cache.peek(seq)`` is the cached prefix
    length), and returns the waiting sequences in the order to try them."""

    name: str

    def order(self, waiting: Seq[Sequence], cache: CacheManager) -> list[Sequence]:
        ...


class FCFS:
    """First come, first served: the queue order itself."""

    name = "fcfs"

    def order(self, waiting: Seq[Sequence], cache: CacheManager) -> list[Sequence]:
        return list(waiting)


FCFS_THRESHOLD = 128
"""SGLang's queue length above which LPM gives way to FCFS (``_determine_active_policy``)."""

MAX_PASSED_OVER = 16
"""Default bound on how many rounds a request can be passed over (this package's rule; SGLang has none)."""


class CacheAwarePolicy(ABC):
    """The FCFS fallback (as SGLang's) and the starvation bound (this package's); subclasses give the order.

    ``max_passed_over=None`` removes the bound (to show starvation; do not serve like that).
    ``passed_over[seq]``: rounds ``seq`` has been passed over during its current wait.
    """

    name = "cache-aware"

    def __init__(self, *, fcfs_threshold: int = FCFS_THRESHOLD,
                 max_passed_over: int | None = MAX_PASSED_OVER) -> None:
        if fcfs_threshold < 0:
            raise ValueError(f"fcfs_threshold must be >= 0, got {fcfs_threshold}")
        if max_passed_over is not None and max_passed_over < 0:
            raise ValueError(f"max_passed_over must be >= 0 or None, got {max_passed_over}")
        self.fcfs_threshold = fcfs_threshold
        self.max_passed_over = max_passed_over
        self.passed_over: dict[Sequence, int] = {}
        self.num_fallbacks = 0                     # rounds ordered FCFS because the queue was long
        self._seen: dict[Sequence, int] = {}       # queue at the last call -> its preemption count

    def order(self, waiting: Seq[Sequence], cache: CacheManager) -> list[Sequence]:
        """The waiting requests in the order the scheduler should try to admit them."""
        waiting = list(waiting)
        self._count_passed_over(waiting)
        if len(waiting) > self.fcfs_threshold:
            self.num_fallbacks += 1
            preferred = waiting
        else:
            preferred = self.cache_order(waiting, cache)
        due = [] if self.max_passed_over is None else sorted(
            (s for s in waiting if self.passed_over.get(s, 0) >= self.max_passed_over),
            key=lambda s: s.request_id)
        first = set(due)
        self._seen = {s: s.metrics.num_preemptions for s in waiting}
        return due + [s for s in preferred if s not in first]

    @abstractmethod
    def cache_order(self, waiting: list[Sequence], cache: CacheManager) -> list[Sequence]:
        """The cache-aware order of ``waiting`` (used while the queue is short enough)."""

    def _count_passed_over(self, waiting: list[Sequence]) -> None:
        """Credit the last round: who was admitted, and whom did a later arrival pass over."""
        now = set(waiting)
        admitted = [s for s, preemptions in self._seen.items()
                    if s not in now or s.metrics.num_preemptions != preemptions]
        self.passed_over = {s: n for s, n in self.passed_over.items() if s in now}
        if not admitted:
            return
        latest = max(s.request_id for s in admitted)   # request ids grow with arrival
        gone = set(admitted)
        for s in waiting:
            if s in self._seen and s not in gone and s.request_id < latest:
                self.passed_over[s] = self.passed_over.get(s, 0) + 1


class LongestPrefixMatch(CacheAwarePolicy):
    """``lpm``: longest cached prefix first; equal matches keep the queue order.

    In-batch prefix sharing (SGLang's refinement under its cache-aware policies, ``in_batch_threshold``;
    32 tokens as SGLang's ``IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD`` and ``..._DEPRIORITIZE_THRESHOLD``):
    when several waiting requests share a prefix that is *not cached yet*, they all match little,
    and starting them in the same round would compute that prefix once per request. So a request
    whose cached match is at most ``in_batch_threshold`` tokens, and whose prompt shares at least
    that many tokens with an earlier request in the queue, goes to the end of the order. That only
    reorders: the scheduler still admits down the order while the step's budget lasts, so a moved
    request that fits is admitted in the same round and computes the prefix itself; one that does
    not fit finds it cached in a later round. ``None`` turns this off. (SGLang's
    ``_sort_by_longest_prefix`` likewise sorts these requests last, and its ``PrefillAdder`` admits
    them in the same batch when the budget allows; it matches the whole
    ``origin_input_ids + output_ids``, this package the prompt without its last token.)
    """

    name = "lpm"

    def __init__(self, *, in_batch_threshold: int | None = 32, **kwargs) -> None:
        super().__init__(**kwargs)
        if in_batch_threshold is not None and in_batch_threshold < 1:
            raise ValueError(f"in_batch_threshold must be >= 1 or None, got {in_batch_threshold}")
        self.in_batch_threshold = in_batch_threshold

    def cache_order(self, waiting: list[Sequence], cache: CacheManager) -> list[Sequence]:
        matched = {s: cache.peek(s) for s in waiting}
        deferred = set()
        if self.in_batch_threshold is not None:
            queued = RadixCache()    # the prompts of the requests ahead, to spot a shared prefix
            for s in waiting:
                if matched[s] > self.in_batch_threshold:
                    continue
                prompt = s.token_ids[:-1]
                if len(queued.match_prefix(prompt)[0]) >= self.in_batch_threshold:
                    deferred.add(s)
                else:
                    queued.insert(prompt, [0] * len(prompt))
        # sorted is stable: equal keys keep the queue order
        return sorted(waiting, key=lambda s: (s in deferred, -matched[s]))


class DFSWeight(CacheAwarePolicy):
    """``dfs-weight``: depth first over the tree of cached prefixes, heaviest subtree first.

    SGLang (``_sort_by_dfs_weight`` → ``RadixCache.dfs_weight_order``) walks its cache's own tree
    from each request's ``last_node``; this package builds a small tree of the matched prefixes
    instead, so that the hashed-block cache can use the policy too.
    """

    name = "dfs-weight"

    def cache_order(self, waiting: list[Sequence], cache: CacheManager) -> list[Sequence]:
        # The tree of the waiting requests' cached prefixes. After inserting a prefix, the last
        # node of the walk is where it ends; later inserts may split that node, but the node
        # object keeps the tail, so it still ends exactly there.
        tree = RadixCache()
        ends: dict[Node, list[Sequence]] = {}
        for s in waiting:
            prefix = s.token_ids[:cache.peek(s)]
            tree.insert(prefix, [0] * len(prefix))
            ends.setdefault(tree.last_match_path[-1], []).append(s)

        weight: dict[Node, int] = {}
        for node in reversed(list(tree.nodes())):          # children before parents
            weight[node] = len(ends.get(node, ())) + sum(weight[c] for c in node.children.values())

        order: list[Sequence] = []
        stack: list[tuple[Node, bool]] = [(tree.root, False)]
        while stack:
            node, children_done = stack.pop()
            if children_done:           # SGLang lists a node's requests after its whole subtree
                order += ends.get(node, [])
                continue
            stack.append((node, True))
            heaviest_first = sorted(node.children.values(), key=lambda c: -weight[c])
            stack += [(c, False) for c in reversed(heaviest_first)]
        return order


POLICIES: dict[str, type] = {"fcfs": FCFS, "lpm": LongestPrefixMatch, "dfs-weight": DFSWeight}
"""Policies selectable by name (``LLMEngine(..., policy="fcfs")``); register new ones here."""


def make_policy(policy: str | AdmissionPolicy) -> AdmissionPolicy:
    """The policy named ``policy`` (see ``POLICIES``), or ``policy`` itself if it is a policy object."""
    if isinstance(policy, str) and policy in POLICIES:
        return POLICIES[policy]()
    if isinstance(policy, str) or not callable(getattr(policy, "order", None)):
        what = "unknown policy" if isinstance(policy, str) else "not a policy"
        raise ValueError(f"{what} {policy!r}: policy must be one of {sorted(POLICIES)} or an object with an "
                         f"order(waiting, cache) method")
    return policy
