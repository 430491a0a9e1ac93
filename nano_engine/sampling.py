"""sampling.py: per-request sampling parameters and the sampler that turns logits into tokens.

``temperature == 0`` is greedy (argmax), the setting every equivalence test uses. Otherwise the
logits are divided by the temperature, optionally cut to the ``top_k`` largest and to the smallest
set whose probability reaches ``top_p`` (nucleus sampling), and one token is drawn.

A request with a ``seed`` owns a ``torch.Generator`` on the model's device, seeded once and used
only for its own draws (exactly one per generated token), so its samples do not depend on which
other requests share its batches, on chunked prefill, or on preemption and recomputation.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch


@dataclass
class SamplingParams:
    """How one request generates.

    * ``max_tokens``: generated tokens at most (the eos or stop token counts, and is returned);
    * ``temperature``: 0 for greedy; ``top_k`` (None or 0: off) and ``top_p`` (1.0: off) narrow
      the distribution; ``seed`` makes the draws reproducible;
    * ``ignore_eos``: keep going past the eos token (benchmarks use it to fix output lengths);
      ``stop_token_ids``: further tokens that end the request (kept, like eos);
    * ``lora_id``, ``cache_salt``: extra prefix-cache keys. KV computed under another adapter or
      for another tenant is never reused (see ``prefix_cache.ExtraKeys``).

    Checked when built and again by ``LLMEngine.add_request``: ``ValueError`` names the field and
    its limit.
    """

    max_tokens: int = 16
    temperature: float = 0.0
    top_k: int | None = None
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False
    stop_token_ids: Sequence[int] = ()
    lora_id: Hashable | None = None
    cache_salt: Hashable | None = None

    def __post_init__(self) -> None:
        self.stop_token_ids = tuple(self.stop_token_ids)
        self.validate()

    def validate(self) -> None:
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        if not self.temperature >= 0:   # also catches NaN
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature!r}")
        if self.top_k is not None and (not isinstance(self.top_k, int) or self.top_k < 0):
            raise ValueError(f"top_k must be None, 0 (off) or a positive integer, got {self.top_k!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.seed is not None and not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer or None, got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def make_generator(params: SamplingParams, device: torch.device) -> torch.Generator | None:
    """A generator seeded with ``params.seed`` on ``device`` (None: use torch's global RNG)."""
    if params.seed is None or params.greedy:
        return None
    return torch.Generator(device=device).manual_seed(params.seed)


def filter_logits(logits: torch.Tensor, top_k: int | None, top_p: float) -> torch.Tensor:
    """Set every logit outside the top-k / top-p set to -inf (``logits [V]``, already tempered).

    top-p keeps the smallest prefix of the sorted distribution whose probability reaches ``top_p``;
    the most likely token always stays."""
    if top_k:
        kth = torch.topk(logits, min(top_k, logits.numel())).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1:
        sorted_logits, order = logits.sort(descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        drop_sorted = cumulative - sorted_logits.softmax(-1) >= top_p   # mass before this token already enough
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample(logits: torch.Tensor, params: Sequence[SamplingParams],
           generators: Sequence[torch.Generator | None]) -> list[int]:
    """One token per row of ``logits [B, V]``, row ``i`` drawn with ``params[i]`` and ``generators[i]``.

    Greedy rows are one batched argmax. Sampled rows are drawn one by one, each from its own
    generator, which is what keeps a seeded request reproducible whatever its batch neighbours.
    Every draw stays on the logits' device; the final ``tolist()`` is the step's one wait for the GPU."""
    tokens = logits.argmax(-1)
    for i, (p, gen) in enumerate(zip(params, generators)):
        if p.greedy:
            continue
        row = filter_logits(logits[i].float() / p.temperature, p.top_k, p.top_p)
        probs = row.softmax(-1)
        tokens[i] = torch.multinomial(probs, 1, generator=gen)[0]
    return tokens.tolist()
