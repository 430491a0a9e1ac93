"""sequence.py: the state of one request as it moves through the engine.

A sequence is a growing list of tokens (the prompt, then every generated token) and a pointer,
``num_computed_tokens``: how many of those tokens already have their K/V in the cache. Each step
the scheduler picks how many of the remaining ``num_tokens - num_computed_tokens`` to compute:

* a fresh request has its whole prompt left: its first steps are prefill (possibly in chunks);
* once the prompt is computed, its last logits gave a new token, and that newest token is the
  only one left to compute: decode, one token per step;
* a preempted request drops its cache and starts over at 0 (or at a prefix-cache hit): prompt
  *and* generated tokens are recomputed as one long prefill, then decoding resumes.

The last sampled token never has K/V: it is fed to the model in the next step, if there is one.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

import torch

from nano_engine.sampling import SamplingParams


class CacheHandle:
    """What a cache manager keeps on a sequence to find the prefix it locked for it again.

    The base class holds nothing (the block pools need nothing beyond the block table); the radix
    manager subclasses it (``cache_manager.RadixHandle``: the tree node the locked prefix ends on)."""


class Status(enum.Enum):
    WAITING = "waiting"     # queued (new, or preempted and waiting to be recomputed)
    RUNNING = "running"     # admitted: holds KV blocks and is scheduled every step it can be
    FINISHED = "finished"


@dataclass
class Metrics:
    """Wall-clock timestamps (``time.perf_counter``) and the numbers derived from them."""

    arrival_time: float
    first_token_time: float | None = None
    finish_time: float | None = None
    num_output_tokens: int = 0
    num_cached_tokens: int = 0      # prompt tokens served from the prefix cache at first admission
    num_preemptions: int = 0

    @property
    def time_to_first_token(self) -> float | None:
        """Seconds from ``add_request`` to the first generated token (queueing + prefill)."""
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def decode_tokens_per_s(self) -> float | None:
        """Generated tokens after the first, per second of decoding (None with fewer than 2)."""
        if self.finish_time is None or self.first_token_time is None or self.num_output_tokens < 2:
            return None
        elapsed = self.finish_time - self.first_token_time
        return (self.num_output_tokens - 1) / elapsed if elapsed > 0 else float("inf")


@dataclass(eq=False)   # compared and hashed by identity: queues hold and remove these objects
class Sequence:
    request_id: int
    prompt_token_ids: list[int]
    params: SamplingParams
    eos_token_id: int | None = None
    generator: torch.Generator | None = None
    token_ids: list[int] = field(init=False)
    num_computed_tokens: int = 0
    block_table: list[int] = field(default_factory=list)   # page ids, position t in block_table[t // page_size]
    cache_handle: CacheHandle | None = None   # what the cache manager needs to unlock this sequence's prefix
    num_cached_tokens: int = 0        # tokens of the current admission served by the prefix cache
    status: Status = Status.WAITING
    finish_reason: str | None = None  # "stop" (eos or a stop token) or "length"
    metrics: Metrics = field(default_factory=lambda: Metrics(time.perf_counter()))

    def __post_init__(self) -> None:
        self.token_ids = list(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def num_remaining(self) -> int:
        """Tokens still to be computed before the next token can be sampled."""
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_prefilling(self) -> bool:
        """More than one token to compute (a decode has exactly one: the newest token)."""
        return self.num_remaining > 1

    @property
    def extra_keys(self) -> dict:
        """Prefix-cache keys besides the tokens (see ``SamplingParams``)."""
        return {"lora_id": self.params.lora_id, "cache_salt": self.params.cache_salt}

    def append_token(self, token: int, now: float) -> None:
        """Record a sampled token and decide whether the request is done."""
        self.token_ids.append(token)
        self.metrics.num_output_tokens += 1
        if self.metrics.first_token_time is None:
            self.metrics.first_token_time = now
        hit_eos = token == self.eos_token_id and not self.params.ignore_eos
        if hit_eos or token in self.params.stop_token_ids:
            self.finish_reason = "stop"
        elif len(self.output_token_ids) >= self.params.max_tokens:
            self.finish_reason = "length"
        if self.finish_reason is not None:
            self.status = Status.FINISHED
            self.metrics.finish_time = now

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED

    def __repr__(self) -> str:
        return (f"Sequence(id={self.request_id}, {self.status.value}, tokens={self.num_tokens} "
                f"(prompt {self.num_prompt_tokens}), computed={self.num_computed_tokens}, "
                f"blocks={len(self.block_table)})")
