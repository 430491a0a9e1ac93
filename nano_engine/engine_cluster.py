"""engine_cluster.py: chapter 07's cluster with real engines: a few ``LLMEngine`` processes on a real model.

:mod:`nano_engine.cluster` replays traces on simulated instances (a real prefix cache, a modelled
clock). Here each instance process runs an :class:`~nano_engine.engine.LLMEngine` with a vLLM-mode
cache on a real model (the default model unless told otherwise), publishes its KV events over the
same ZeroMQ transport, one batch per engine step, and answers real prompts with real greedy tokens;
the router in the parent knows each engine's cache only from those events.

It is small on purpose: prompts are served one at a time, so the demo is about *where* each prompt
goes and what that engine then finds cached, not about throughput. Routing never changes the
tokens: every engine runs the same model greedily, so the outputs equal one engine's (tested).
Everything else (process start and reaping, the handshake, the subscribers, the index, the faults'
counters) is :class:`~nano_engine.cluster.Cluster`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nano_engine.checks import require_int
from nano_engine.cluster import Cluster, ClusterConfig, publishing, serve_commands
from nano_engine.routing import EVENT_POLICIES, RoutingPolicy, RoutingRequest, make_policy


@dataclass(frozen=True)
class EngineClusterConfig(ClusterConfig):
    """``ClusterConfig`` for engines: ``capacity_tokens`` is each engine's KV cache (in tokens, a
    multiple of ``block_size``); ``model`` as the CLI's ``--model`` (``"default"``, a preset, a folder)."""

    instances: int = 2
    capacity_tokens: int = 4096
    model: str = "default"
    block_size: int = 16
    device: str = "cpu"
    timeout_s: float = 120.0       # a prompt's prefill on a loaded CPU

    def __post_init__(self) -> None:
        super().__post_init__()
        require_int("block_size", self.block_size)
        if self.capacity_tokens % self.block_size:
            raise ValueError(f"capacity_tokens ({self.capacity_tokens}) must be a multiple of block_size "
                             f"({self.block_size})")


@dataclass(frozen=True)
class Served:
    """One prompt's answer: where it went, its greedy tokens, and the prompt tokens its engine had cached."""

    engine: int
    output_token_ids: list[int]
    cached_tokens: int
    prompt_tokens: int


def _engine_main(conn: Any, parent_pid: int, endpoint: str, replay_endpoint: str, config: EngineClusterConfig,
                 seed: int, now: float) -> None:
    """A child process: one LLMEngine and its publisher, answering the router's commands."""

    def start(publisher: Any) -> tuple[Any, dict[str, Callable[..., Any]]]:
        from nano_engine.checkpoints import resolve_model
        from nano_engine.engine import LLMEngine, SamplingParams
        from nano_engine.model import Transformer

        model = Transformer.from_pretrained(resolve_model(config.model), device=config.device)
        engine = LLMEngine(model, cache="vllm", num_blocks=config.capacity_tokens // config.block_size,
                           block_size=config.block_size)
        flush = publishing(engine.cache.pool, publisher)

        def generate(prompt: list[int], max_tokens: int) -> tuple[list[int], int, int]:
            engine.add_request(prompt, SamplingParams(max_tokens=max_tokens))
            finished: list = []
            while engine.scheduler.has_unfinished:
                finished += engine.step()
                last_seq = flush()
            (seq,) = finished
            return list(seq.output_token_ids), seq.metrics.num_cached_tokens, last_seq

        return engine.cache.pool, {"generate": generate}

    serve_commands(conn, parent_pid, endpoint, replay_endpoint, config, seed, start)


class EngineCluster(Cluster):
    """``config.instances`` engine processes behind one router (``config.router``); use as a
    context manager, as :class:`~nano_engine.cluster.Cluster`."""

    child_main = staticmethod(_engine_main)
    config: EngineClusterConfig

    def __init__(self, config: EngineClusterConfig) -> None:
        from nano_engine.prefix_cache import PrefixCachingBlockPool

        if not isinstance(config, EngineClusterConfig):
            raise TypeError(f"EngineCluster takes an EngineClusterConfig, got {type(config).__name__}")
        super().__init__(config)
        self.hasher = PrefixCachingBlockPool(1, config.block_size, vllm=True)   # the engines' hashes
        self.policy: RoutingPolicy = self._make_policy()

    def _make_policy(self) -> RoutingPolicy:
        c = self.config
        return make_policy(c.router, c.instances, index=self.index if c.router in EVENT_POLICIES else None,
                           seed=c.seed, capacity_blocks=c.capacity_tokens // c.block_size, **(c.router_options or {}))

    def routing_request(self, prompt: Sequence[int]) -> RoutingRequest:   # type: ignore[override]
        return RoutingRequest.of(prompt, self.hasher)

    def serve(self, prompt: Sequence[int], max_tokens: int = 8) -> Served:
        """Route one prompt, run it there, and wait until its engine's events are in the index (so
        the next prompt is routed on them; the other engines published nothing meanwhile)."""
        prompt = [int(t) for t in prompt]
        if not prompt:
            raise ValueError("the prompt is empty")
        routed = self.routing_request(prompt)
        k = self.policy.route(routed)
        tokens, cached, self.last_seq[k] = self._call(k, "generate", prompt, max_tokens)
        self.policy.on_finished(k, routed)
        self._sync(k)
        return Served(k, tokens, cached, len(prompt))

    def serve_all(self, prompts: Sequence[Sequence[int]], max_tokens: int = 8) -> list[Served]:
        return [self.serve(p, max_tokens) for p in prompts]
