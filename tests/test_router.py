"""nano_engine.router is deprecated for one release: its old names still work, each with a
DeprecationWarning, and give what the new modules give (routing.py, instances.py)."""

import importlib
import warnings

import pytest

from nano_engine import instances, routing
from nano_engine.kv_index import KVBlockIndex
from nano_engine.workloads import multi_tenant

A = list(range(100, 140))


@pytest.mark.parametrize("name, new", [("SimulatedInstance", instances), ("EngineInstance", instances),
                                       ("InstanceStats", instances), ("TraceResult", instances),
                                       ("CACHE_THRESHOLD", routing), ("TREE_CAPACITY", routing)])
def test_moved_names_still_import_with_a_warning(name, new):
    router = importlib.import_module("nano_engine.router")
    with pytest.warns(DeprecationWarning, match=f"nano_engine.router.{name} is deprecated.*{new.__name__}"):
        value = getattr(router, name)
    assert value is getattr(new, name)


def test_traceinstance_moved_out_of_cluster_with_a_warning():
    from nano_engine import cluster

    with pytest.warns(DeprecationWarning, match="nano_engine.instances.TraceInstance"):
        assert cluster.TraceInstance is instances.TraceInstance


def test_the_old_router_still_routes_as_the_new_policy():
    from nano_engine.router import Router, run_trace

    workload = multi_tenant(2, num_tenants=3, num_users=12, num_turns=2, system_len=(20, 40),
                            user_len=(2, 9), answer_len=(2, 9))
    for old, new, kv in [("cache_aware", "approx", False), ("round_robin", "round-robin", False),
                         ("least_load", "least-loaded", False), ("cache_aware", "approx", True)]:
        sims = [instances.SimulatedInstance(4, capacity=128, work_per_tick=40) for _ in range(3)]
        with pytest.warns(DeprecationWarning):
            router = Router(3, old, kv_event_pools=[s.pool for s in sims] if kv else None, tree_capacity=128)
        with pytest.warns(DeprecationWarning):
            got = run_trace(router, sims, workload, requests_per_tick=2)
        router.close()
        fresh = [instances.SimulatedInstance(4, capacity=128, work_per_tick=40) for _ in range(3)]
        options = {"tree_capacity": 128} if new == "approx" else {}
        if kv:
            index = KVBlockIndex()
            for i, s in enumerate(fresh):
                index.follow(i, s.pool)
            options["event_index"] = index
        want = instances.run_trace(routing.make_policy(new, 3, **options), fresh, workload, requests_per_tick=2)
        assert got.routed_to == want.routed_to, (old, kv)
        assert router.load == [0, 0, 0], (old, kv)


def test_the_old_router_by_hand():
    from nano_engine.router import Router

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        router = Router(2, cache_threshold=0.5)
        with pytest.raises(ValueError, match="unknown routing policy"):
            Router(2, "random")
    assert router.route(A + [1]) == 0 and router.route(A + [2]) == 0
    assert router.match_lengths(A + [3]) == [40, 0] and router.num_routed == [2, 0]
    assert router.reasons == {"smallest": 1, "affinity": 1} and router.cache_threshold == 0.5
    router.complete(0)
    assert router.load == [1, 0]
    with pytest.raises(ValueError, match="no request in flight"):
        router.complete(1)
