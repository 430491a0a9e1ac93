"""router.py: deprecated; chapter 05's router now lives in :mod:`nano_engine.routing`, its instances
in :mod:`nano_engine.instances`. This module keeps the old names working for one release, each with
a ``DeprecationWarning``.

==========================================  ====================================================
old (``nano_engine.router``)                new
==========================================  ====================================================
``Router(n, "cache_aware", ...)``           ``routing.make_policy("approx", n, ...)``
``Router(n, "round_robin")``                ``routing.make_policy("round-robin", n)``
``Router(n, "least_load")``                 ``routing.make_policy("least-loaded", n)``
``Router(..., kv_event_pools=pools)``       ``make_policy("approx", n, event_index=index)``, the
                                            index fed by ``index.follow(i, pool)``
``router.route(prompt)``                    ``policy.route(RoutingRequest.of(prompt))``
``router.complete(i)``, ``router.load``     ``policy.on_finished(i, request)``, ``policy.loads.in_flight``
``SimulatedInstance``, ``EngineInstance``,  ``nano_engine.instances`` (same names; ``run_trace``
``run_trace``, ``TraceResult``, ...         takes a policy)
==========================================  ====================================================
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from nano_engine import instances as _instances, routing as _routing

_MOVED = {name: "nano_engine.instances" for name in
          ("Instance", "InstanceStats", "SimulatedInstance", "EngineInstance", "TraceResult")}
_MOVED.update({name: "nano_engine.routing" for name in
               ("CACHE_THRESHOLD", "BALANCE_ABS_THRESHOLD", "BALANCE_REL_THRESHOLD", "TREE_CAPACITY")})
_OLD_POLICIES = {"round_robin": "round-robin", "least_load": "least-loaded", "cache_aware": "approx"}
ROUTING_POLICIES = tuple(_OLD_POLICIES)


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"nano_engine.router.{old} is deprecated and goes in the next release; use {new}",
                  DeprecationWarning, stacklevel=3)


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        _deprecated(name, f"{_MOVED[name]}.{name}")
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module 'nano_engine.router' has no attribute {name!r}")


class Router:
    """Deprecated: the old interface over a :mod:`nano_engine.routing` policy (module docstring)."""

    def __init__(self, num_instances: int, policy: str = "cache_aware", *,
                 kv_event_pools: Sequence[Any] | None = None, **options: Any) -> None:
        _deprecated("Router", "nano_engine.routing.make_policy")
        if policy not in _OLD_POLICIES:
            raise ValueError(f"unknown routing policy {policy!r}; choose one of {ROUTING_POLICIES}")
        self._unsubscribe: list[Callable[[], None]] = []
        self.pools = None if kv_event_pools is None else list(kv_event_pools)
        if self.pools is not None:
            from nano_engine.kv_index import KVBlockIndex

            if len(self.pools) != num_instances:
                raise ValueError(f"kv_event_pools: need one pool per instance ({num_instances}), got {len(self.pools)}")
            _instances.hashing_pool(self.pools)
            index = KVBlockIndex()
            self._unsubscribe = [index.follow(i, pool) for i, pool in enumerate(self.pools)]
            options["event_index"] = index
        if policy != "cache_aware":      # the old router took the tree's options for every policy
            options = {}
        self.policy: Any = _routing.make_policy(_OLD_POLICIES[policy], num_instances, **options)
        self.num_instances = num_instances
        self._in_flight: dict[int, list[_routing.RoutingRequest]] = {}

    def __getattr__(self, name: str) -> Any:       # cache_threshold, trees, reasons, is_imbalanced ...
        policy = self.__dict__.get("policy")
        if policy is None:
            raise AttributeError(name)
        return getattr(policy, name)

    @property
    def load(self) -> list[int]:
        return self.policy.loads.in_flight

    @property
    def num_routed(self) -> list[int]:
        return self.policy.loads.routed

    def _request(self, prompt: Sequence[int]) -> _routing.RoutingRequest:
        return _routing.RoutingRequest.of(prompt, self.pools[0] if self.pools else None)

    def route(self, prompt: Sequence[int]) -> int:
        request = self._request(prompt)
        worker = self.policy.route(request)
        self._in_flight.setdefault(worker, []).append(request)
        return worker

    def complete(self, instance: int) -> None:
        if not self._in_flight.get(instance):
            raise ValueError(f"complete: instance {instance} has no request in flight")
        self.policy.on_finished(instance, self._in_flight[instance].pop(0))

    def match_lengths(self, prompt: Sequence[int]) -> list[int]:
        return self.policy.match_lengths(self._request(prompt))

    def close(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe = []


def run_trace(router: Router, instances: Sequence[Any], workload: Sequence[Sequence[int]], **kwargs: Any) -> Any:
    """Deprecated: :func:`nano_engine.instances.run_trace`, which takes the policy (``router.policy``)."""
    _deprecated("run_trace", "nano_engine.instances.run_trace with a routing policy")
    return _instances.run_trace(router.policy, instances, workload, **kwargs)
