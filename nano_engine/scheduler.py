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
   (``cache.match``), check that it and the first chunk fit (``cache.can_admit``, before anything
   is locked), lock it, and allocate pages for the first chunk. The first request that does
   not fit stops admission for this step, so no request is overtaken forever by smaller ones.
4. **Copies in flight.** With a host tier on a GPU, a page being copied to the host stays locked
   until its copy is acknowledged (``host_tier.CopyEngine``), and the copy runs in the background.
   If a step would schedule nothing while requests are left, that is where their memory is: the
   scheduler asks the cache manager to wait for its oldest copy (``cache.wait_for_copy``) and plans
   again, instead of failing. This is the one place the engine waits for a copy. (SGLang's
   scheduler loop, ``Scheduler.event_loop_normal`` in ``python/sglang/srt/managers/scheduler.py``
   (0.5.9 and 0.5.23), idles on an empty batch and polls again next turn, where 0.5.9's
   ``HiRadixCache.writing_check`` acknowledges the stores that finished; a synchronous ``step()``
   must make progress, so it waits.)

The scheduler only talks to a :class:`~nano_engine.cache_manager.CacheManager`; which cache sits
behind it (none, hashed blocks, radix tree) changes nothing here. Admission orders (FCFS and the
cache-aware ones) live in :mod:`nano_engine.policies`.

Faults: every change to one sequence (preempt it, admit it, finish it, abort it) is all or
nothing when a cache-manager call raises, and undone where it started. What an interrupted step
can still leave behind (a finished sequence whose ``free`` raised stays in ``running``) is put
right by :meth:`Scheduler.repair`, which the next ``schedule`` runs after ``needs_repair`` is set.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from nano_engine.cache_manager import CacheManager
from nano_engine.checks import require_int
from nano_engine.policies import AdmissionPolicy, make_policy
from nano_engine.sequence import Sequence, Status


@dataclass
class SchedulerOutput:
    """One step's plan: ``seqs[i]`` computes its next ``num_new_tokens[i]`` tokens."""

    seqs: list[Sequence] = field(default_factory=list)
    num_new_tokens: list[int] = field(default_factory=list)
    num_cached_tokens: int = 0            # prefix-cache hits of the requests admitted this step
    preempted: list[Sequence] = field(default_factory=list)

    def add(self, seq: Sequence, num_new_tokens: int) -> None:
        self.seqs.append(seq)
        self.num_new_tokens.append(num_new_tokens)

    @property
    def num_tokens(self) -> int:
        return sum(self.num_new_tokens)


class Scheduler:
    """Waiting and running queues, a token budget per step, preemption by recompute.

    ``max_num_batched_tokens=None`` means no budget of its own: a step computes at most as many
    tokens as the KV pool holds (every prompt that fits is prefilled in one piece);
    ``max_num_seqs`` caps the running sequences."""

    def __init__(self, cache: CacheManager, max_num_batched_tokens: int | None = None,
                 max_num_seqs: int = 256, policy: str | AdmissionPolicy = "fcfs") -> None:
        require_int("max_num_batched_tokens", max_num_batched_tokens, optional=True)
        require_int("max_num_seqs", max_num_seqs)
        self.cache = cache
        self.max_num_batched_tokens = max_num_batched_tokens
        self.token_budget: int = max_num_batched_tokens or cache.num_blocks * cache.block_size
        self.max_num_seqs = max_num_seqs
        self.policy = make_policy(policy)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []         # in admission order: the last is preempted first
        self.needs_repair = False                 # set by the engine when a step failed halfway

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    @property
    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    # -- one step ----------------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        """Plan the next step: running sequences first (steps 1-2), then admissions (step 3).

        If that schedules nothing while requests are left, the memory they need is held by a
        host-tier copy in flight (step 4): wait for the oldest copy, then plan again."""
        if self.needs_repair:
            self.repair()
        preempted: list[Sequence] = []
        while True:
            out = SchedulerOutput()
            budget = self._schedule_running(out, self.token_budget)
            if not out.preempted:           # a step that had to preempt is short of memory already
                self._admit_waiting(out, budget)
            out.preempted[:0] = preempted
            if out.seqs or not self.has_unfinished or not self.cache.wait_for_copy():
                return out
            preempted = out.preempted

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        """Decodes first, then prefill chunks (a stable sort keeps admission order); returns the
        budget left."""
        for seq in sorted(self.running, key=lambda s: s.is_prefilling):
            if budget == 0:
                break
            if seq.status is not Status.RUNNING:       # preempted earlier in this loop
                continue
            n = min(seq.num_remaining, budget)
            if self._make_room(seq, n, out):
                out.add(seq, n)
                budget -= n
        return budget

    def _make_room(self, seq: Sequence, num_new_tokens: int, out: SchedulerOutput) -> bool:
        """Allocate for ``seq``'s next tokens, preempting the latest admitted sequence not yet in
        this step until it fits; False if ``seq`` itself had to go."""
        while not self.cache.allocate(seq, seq.num_computed_tokens + num_new_tokens):
            victim = next(s for s in reversed(self.running) if s not in out.seqs)
            self._preempt(victim)
            out.preempted.append(victim)
            if victim is seq:
                return False
        return True

    def _admit_waiting(self, out: SchedulerOutput, budget: int) -> None:
        """Admit in the policy's order while the budget and ``max_num_seqs`` allow; the first
        request that does not fit stops admission for this step."""
        for seq in self.policy.order(self.waiting, self.cache):
            if budget == 0 or len(self.running) >= self.max_num_seqs:
                break
            n = self._admit(seq, budget)
            if n == 0:
                break
            out.add(seq, n)
            out.num_cached_tokens += seq.num_cached_tokens
            budget -= n

    def _admit(self, seq: Sequence, budget: int) -> int:
        """Lock ``seq``'s cached prefix and allocate its first chunk; returns the chunk's size,
        or 0 (and ``seq`` holds nothing) if it does not fit.

        ``can_admit`` is asked first, so a request that does not fit touches nothing: locking its
        hits and giving them back would refresh them in the LRU order (vLLM's ``allocate_slots``
        returns None before touching anything, too)."""
        match = self.cache.match(seq)
        n = min(seq.num_tokens - match.num_tokens, budget)
        if not self.cache.can_admit(match, match.num_tokens + n):
            return 0
        self.cache.lock(seq, match)
        try:
            # allocate() runs after lock(): it sees the space left once the match is
            # protected, and evicts other cached prefixes if that is what it takes.
            fits = self.cache.allocate(seq, seq.num_computed_tokens + n)
        except BaseException:
            self._release(seq)
            raise
        if not fits:
            self._release(seq)
            return 0
        self.waiting.remove(seq)
        self.running.append(seq)
        seq.status = Status.RUNNING
        if seq.metrics.num_preemptions == 0:
            seq.metrics.num_cached_tokens = match.num_tokens
        return n

    def _release(self, seq: Sequence) -> None:
        """Give back everything ``seq`` holds; it will start from scratch (or a cache hit)."""
        self.cache.free(seq)
        seq.num_computed_tokens = seq.num_cached_tokens = 0

    def _preempt(self, seq: Sequence) -> None:
        """Release ``seq``'s memory and queue it (first in line) for recomputation."""
        self._release(seq)
        seq.status = Status.WAITING
        seq.metrics.num_preemptions += 1
        self.running.remove(seq)
        self.waiting.appendleft(seq)

    # -- leaving -----------------------------------------------------------------------------

    def finish(self, seq: Sequence) -> None:
        """``seq`` produced its last token: hand its memory back to the cache manager. It leaves
        ``running`` only once that worked, so a failed ``free`` is retried by ``repair``."""
        self.cache.free(seq)
        self.running.remove(seq)

    def abort(self, seq: Sequence) -> bool:
        """Stop ``seq`` wherever it is and release its memory. Idempotent: returns False (and keeps
        the finish reason) if it had finished already."""
        if seq in self.running:
            self.finish(seq)
        elif seq in self.waiting:
            if seq.block_table or seq.cache_handle is not None:
                self._release(seq)
            self.waiting.remove(seq)
        if seq.finish_reason is not None:
            return False
        seq.status, seq.finish_reason = Status.FINISHED, "abort"
        seq.metrics.finish_time = time.perf_counter()
        return True

    def repair(self) -> None:
        """Restore the queue invariants after a step that failed halfway: a finished sequence
        still in ``running`` (its ``free`` raised) is finished again; a waiting one still holding
        memory (an undo that raised) gives it back. Runs again next step if it raises itself."""
        for seq in [s for s in self.running if s.is_finished]:
            self.finish(seq)
        for seq in [s for s in self.waiting if s.block_table or s.cache_handle is not None]:
            self._release(seq)
        self.needs_repair = False
