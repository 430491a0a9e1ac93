"""tier_replay.py - moved: a host tier's replay is :class:`nano_engine.replay.ReplayCache` with
``host_capacity=`` (one replay core for every cache). The names below work for one more release,
each with a ``DeprecationWarning``:

* ``TierReplay(method, capacity, host_capacity, write_policy, *, bytes_per_token,
  load_back_threshold, key_tokens)``: ``ReplayCache(cache, capacity_tokens, block_size=...,
  host_capacity=..., write_policy=...)`` (capacities in tokens); its ``serve`` returned
  ``(device hits, host hits)``, the new one returns their sum (``host_hit_tokens`` counts the host's);
* ``TierReplayResult``: ``replay.ReplayResult``; ``tier_hit_rate``: ``replay.tier_hit_rate``;
* ``replay_trace_tiered(trace, cache, capacity_tokens, host_capacity_tokens, write_policy)``:
  ``traces.replay_trace(trace, cache, capacity_tokens, host_capacity=..., write_policy=...)``;
* ``QWEN3_06B_BYTES_PER_TOKEN``: ``replay.QWEN3_06B_BYTES_PER_TOKEN``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from nano_engine import replay, traces

_MOVED = {"TierReplayResult": "ReplayResult", "tier_hit_rate": "tier_hit_rate",
          "QWEN3_06B_BYTES_PER_TOKEN": "QWEN3_06B_BYTES_PER_TOKEN"}


class _TierReplay(replay.ReplayCache):
    """``TierReplay(method, capacity, host_capacity, ...)`` of the old module: capacities in keys."""

    def __init__(self, method: str | int, capacity: int, host_capacity: int, write_policy: str = "write_through",
                 *, bytes_per_token: int = replay.QWEN3_06B_BYTES_PER_TOKEN, load_back_threshold: int = 10,
                 key_tokens: int = 1) -> None:
        cache, block_size = replay.method_cache(method)
        for size in (capacity, host_capacity):
            if not isinstance(size, int) or size < 1:
                raise ValueError(f"capacity and host capacity must be positive token counts, got {capacity!r}, "
                                 f"{host_capacity!r}")
        super().__init__(cache, capacity * key_tokens, block_size=block_size, key_tokens=key_tokens,
                         host_capacity=host_capacity * key_tokens, write_policy=write_policy,
                         load_back_threshold=load_back_threshold, bytes_per_token=bytes_per_token)

    def serve(self, tokens: Sequence[int], input_length: int | None = None) -> tuple[int, int]:  # type: ignore[override]
        before = self.hit_tokens, self.host_hit_tokens
        super().serve(tokens, input_length)
        host = self.host_hit_tokens - before[1]
        return self.hit_tokens - before[0] - host, host


def _replay_trace_tiered(trace, cache: str, capacity_tokens: int, host_capacity_tokens: int,
                         write_policy: str = "write_through", *, progress: bool = False) -> dict:
    return traces.replay_trace(trace, cache, capacity_tokens, host_capacity=host_capacity_tokens,
                               write_policy=write_policy, progress=progress).as_dict()


def __getattr__(name: str):
    if name == "TierReplay":
        value: object = _TierReplay
    elif name == "replay_trace_tiered":
        value = _replay_trace_tiered
    elif name in _MOVED:
        value = getattr(replay, _MOVED[name])
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"nano_engine.tier_replay.{name} moved to nano_engine.replay (see nano_engine.tier_replay's "
                  f"docstring); the old name goes in the next release", DeprecationWarning, stacklevel=2)
    return value
