"""scheduler.py: which sequences run in the next step, and how many tokens each computes.

Continuous batching: every step is planned from scratch. Requests join as soon as there is room
and leave the moment they finish, so a long request never holds the others hostage.

One step (``Scheduler.schedule``):

1. **Running sequences first, decodes before prefill chunks.** A decode costs one token of the
   step's budget (``max_num_batched_tokens``) and keeps a user's stream flowing; a sequence still
   in prefill gets as many of its remaining prompt tokens as the budget allows (*chunked prefill*:
   a long prompt is spread over several steps instead of stalling every decode behind it).
2. **Memory.** Before a sequence is scheduled, the cache manager must find pages for its new
   tokens (evicting unused cached prefixes if it can). If it cannot, the most recently admitted
   running sequence not yet scheduled in this step is *preempted*: its pages are released and it
   goes back to the front of the waiting queue, to be recomputed later (vLLM's and nano-vllm's
   "recompute" preemption). That may be the sequence itself.
3. **Admission.** If nobody was preempted, waiting requests are admitted in the order the
   *policy* gives, while the budget and ``max_num_seqs`` allow: look up the longest cached prefix
   (``cache.match``), lock it, and allocate pages for the first chunk. The first request that does
   not fit stops admission for this step, so no request is overtaken forever by smaller ones.

The scheduler only talks to a :class:`~nano_engine.cache_manager.CacheManager`; which cache sits
behind it (none, hashed blocks, radix tree) changes nothing here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from typing import Protocol

from nano_engine.cache_manager import CacheManager
from nano_engine.policies import DFSWeight, LongestPrefixMatch
from nano_engine.sequence import Sequence, Status


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


POLICIES: dict[str, type] = {"fcfs": FCFS, "lpm": LongestPrefixMatch, "dfs-weight": DFSWeight}
"""Policies selectable by name (``LLMEngine(..., policy="fcfs")``); register new ones here."""


def make_policy(policy: str | AdmissionPolicy) -> AdmissionPolicy:
    if not isinstance(policy, str):
        return policy
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose one of {sorted(POLICIES)} or pass a policy object")
    return POLICIES[policy]()


@dataclass
class SchedulerOutput:
    """One step's plan: ``seqs[i]`` computes its next ``num_new_tokens[i]`` tokens."""

    seqs: list[Sequence] = field(default_factory=list)
    num_new_tokens: list[int] = field(default_factory=list)
    num_cached_tokens: int = 0            # prefix-cache hits of the requests admitted this step
    preempted: list[Sequence] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(self.num_new_tokens)


class Scheduler:
    """Waiting and running queues, a token budget per step, preemption by recompute.

    ``max_num_batched_tokens=None`` means no budget (every prompt is prefilled in one piece);
    ``max_num_seqs`` caps the running sequences."""

    def __init__(self, cache: CacheManager, max_num_batched_tokens: int | None = None,
                 max_num_seqs: int = 256, policy: str | AdmissionPolicy = "fcfs") -> None:
        if max_num_batched_tokens is not None and max_num_batched_tokens < 1:
            raise ValueError(f"max_num_batched_tokens must be >= 1 or None, got {max_num_batched_tokens}")
        if max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {max_num_seqs}")
        self.cache = cache
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.policy = make_policy(policy)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []         # in admission order: the last is preempted first

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    @property
    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        budget = self.max_num_batched_tokens if self.max_num_batched_tokens is not None else float("inf")
        out = SchedulerOutput()

        # 1-2. running sequences: decodes first, then prefill chunks (stable sort keeps admission order)
        for seq in sorted(self.running, key=lambda s: s.is_prefilling):
            if budget == 0:
                break
            if seq.status is not Status.RUNNING:       # preempted earlier in this loop
                continue
            n = min(seq.num_remaining, budget)
            while not self.cache.allocate(seq, seq.num_computed_tokens + n):
                victim = next(s for s in reversed(self.running) if s not in out.seqs)
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is seq:
                    break
            else:
                out.seqs.append(seq)
                out.num_new_tokens.append(n)
                budget -= n

        # 3. admission (not in a step that had to preempt: memory is short already)
        if not out.preempted:
            for seq in self.policy.order(self.waiting, self.cache):
                if budget == 0 or len(self.running) >= self.max_num_seqs:
                    break
                match = self.cache.match(seq)
                self.cache.lock(seq, match)
                n = min(seq.num_remaining, budget)
                # allocate() runs after lock(): it sees the space left once the match is
                # protected, and evicts other cached prefixes if that is what it takes.
                if not self.cache.allocate(seq, seq.num_computed_tokens + n):
                    self.cache.free(seq)
                    seq.num_computed_tokens = seq.num_cached_tokens = 0
                    break
                self.waiting.remove(seq)
                self.running.append(seq)
                seq.status = Status.RUNNING
                if seq.metrics.num_preemptions == 0:
                    seq.metrics.num_cached_tokens = match.num_tokens
                out.seqs.append(seq)
                out.num_new_tokens.append(n)
                out.num_cached_tokens += match.num_tokens
                budget -= n
        return out

    def _preempt(self, seq: Sequence) -> None:
        """Release ``seq``'s memory and queue it (first in line) for recomputation."""
        self.cache.free(seq)
        seq.num_computed_tokens = seq.num_cached_tokens = 0
        seq.status = Status.WAITING
        seq.metrics.num_preemptions += 1
        self.running.remove(seq)
        self.waiting.appendleft(seq)

    def finish(self, seq: Sequence) -> None:
        """``seq`` produced its last token: hand its memory back to the cache manager."""
        self.cache.free(seq)
        self.running.remove(seq)
