"""sampling.py: per-request sampling parameters and the sampler that turns logits into tokens.

``temperature == 0`` is greedy (argmax), the setting every equivalence test uses. Otherwise the
logits are divided by the temperature, optionally cut to the ``top_k`` largest and to the smallest
set whose probability reaches ``top_p`` (nucleus sampling), and one token is drawn.

A request with a ``seed`` owns a ``torch.Generator`` on the model's device, seeded once and used
only for its own draws (exactly one per generated token), so its samples do not depend on which
other requests share its batches, on chunked prefill, or on preemption and recomputation.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

import torch

from nano_engine.checks import is_int, require_int

MIN_TEMPERATURE = 1e-2
"""The smallest temperature besides 0. Dividing logits by less overflows float32 (1e-39 turns every
logit into +-inf and the softmax into NaN). vLLM logs a warning and raises smaller values to the
same 1e-2 (``vllm/sampling_params.py``, ``SamplingParams.__post_init__``, ``_MAX_TEMP``); here they
are rejected instead: use 0 for greedy."""


def _is_real(x: object) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


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

    Checked when built and again by ``LLMEngine.add_request`` (a field may be changed after
    construction): ``ValueError`` names the field and its allowed values.
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
        if isinstance(self.stop_token_ids, (str, bytes)) or not isinstance(self.stop_token_ids, Iterable):
            raise ValueError(f"stop_token_ids must be a list of token ids (() for none), got {self.stop_token_ids!r}")
        self.stop_token_ids = tuple(self.stop_token_ids)
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the first field outside its allowed values."""
        require_int("max_tokens", self.max_tokens)
        if not _is_real(self.temperature) or not (self.temperature == 0 or
                                                  MIN_TEMPERATURE <= self.temperature < math.inf):
            raise ValueError(f"temperature must be 0 (greedy) or a finite number >= {MIN_TEMPERATURE}, "
                             f"got {self.temperature!r}")
        if self.top_k is not None and (not is_int(self.top_k) or self.top_k < 0):
            raise ValueError(f"top_k must be None, 0 (off) or a positive integer, got {self.top_k!r}")
        if not _is_real(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be a number in (0, 1], got {self.top_p!r}")
        if self.seed is not None and (not is_int(self.seed) or not 0 <= self.seed < 2**64):
            raise ValueError(f"seed must be None or an integer in [0, 2**64), got {self.seed!r}")
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos must be True or False, got {self.ignore_eos!r}")
        if not all(is_int(t) and t >= 0 for t in self.stop_token_ids):
            raise ValueError(f"stop_token_ids must be token ids (integers >= 0), got {self.stop_token_ids!r}")
        for name in ("lora_id", "cache_salt"):
            try:
                hash(getattr(self, name))
            except TypeError:
                raise ValueError(f"{name} must be hashable (a str, an int, a tuple, ...), "
                                 f"got {type(getattr(self, name)).__name__}") from None

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
    for i, (p, gen) in enumerate(zip(params, generators, strict=True)):
        if p.greedy:
            continue
        row = filter_logits(logits[i].float() / p.temperature, p.top_k, p.top_p)
        probs = row.softmax(-1)
        tokens[i] = torch.multinomial(probs, 1, generator=gen)[0]
    return tokens.tolist()
