"""Replays through the tiered caches (nano_engine.replay with a host tier) and the hitrate CLI options.

Reference: with a host tier large enough to hold everything, nothing is ever lost, so the hit
rate (device + host) must equal the unbounded cache's, whatever the device capacity and the
write policy (write-through copies at insertion, write-back at eviction)."""

from __future__ import annotations

import json

import pytest

from nano_engine.__main__ import main
from nano_engine.hitrate import HitRateStudy
from nano_engine.replay import ReplayCache, tier_hit_rate
from nano_engine.traces import replay_trace
from nano_engine.workloads import hit_rate, multi_tenant


@pytest.fixture(scope="module")
def workload():
    return multi_tenant(1, num_tenants=3, num_users=12, num_turns=3, system_len=(100, 200))


def replay(workload, method, capacity, host, policy, threshold=1):
    cache, block_size = ("radix", 1) if method == "radix" else ("hashed", method)
    r = ReplayCache(cache, capacity, block_size=block_size, host_capacity=host, write_policy=policy,
                    load_back_threshold=threshold)
    for req in workload:
        r.serve(req)
    return r.result()


@pytest.mark.parametrize("policy", ["write_through", "write_through_selective", "write_back"])
def test_radix_with_a_huge_host_tier_loses_nothing(workload, policy):
    longest = max(len(w) for w in workload)
    unbounded = hit_rate(workload, "radix")
    small = replay(workload, "radix", longest, 10**6, policy)
    device_only = hit_rate(workload, "radix", longest)
    assert device_only < unbounded
    if policy == "write_through_selective":     # only data hit twice reaches the host
        assert device_only <= small.hit_rate <= unbounded
    else:
        assert small.hit_rate == pytest.approx(unbounded)
    assert small.host_hit_tokens > 0 and small.bytes_loaded == small.host_hit_tokens * 114688


@pytest.mark.parametrize("policy", ["write_through", "write_through_selective"])
def test_hashed_with_a_huge_host_tier_loses_nothing(workload, policy):
    longest = max(len(w) for w in workload)
    cap = (longest // 16 + 1) * 16
    unbounded = hit_rate(workload, 16, 10**6)
    r = replay(workload, 16, cap, 10**6, policy)
    if policy == "write_through":
        assert r.hit_rate == pytest.approx(unbounded)
    else:
        assert hit_rate(workload, 16, cap) <= r.hit_rate <= unbounded
    assert r.host_hit_tokens > 0


def test_write_back_writes_fewer_bytes_than_write_through(workload):
    longest = max(len(w) for w in workload)
    wt = tier_hit_rate(workload, "radix", 2 * longest, 10**6, "write_through")
    wb = tier_hit_rate(workload, "radix", 2 * longest, 10**6, "write_back")
    assert wb.bytes_written < wt.bytes_written


def test_bad_replay_options():
    with pytest.raises(ValueError, match="write_policy must be one of"):
        ReplayCache("radix", 10, host_capacity=10, write_policy="write_around")
    with pytest.raises(ValueError, match="no write-back"):
        ReplayCache("hashed", 64, host_capacity=64, write_policy="write_back")


def test_the_old_tier_replay_still_works_with_a_warning(workload):
    import nano_engine.tier_replay as old_module

    with pytest.warns(DeprecationWarning, match="moved to nano_engine.replay"):
        old = old_module.TierReplay("radix", 400, 4000, "write_through")
    pairs = [old.serve(req) for req in workload]
    assert sum(d + h for d, h in pairs) == old.hit_tokens and sum(h for _, h in pairs) == old.host_hit_tokens
    assert old.result().as_dict() == tier_hit_rate(workload, "radix", 400, 4000).as_dict()


def test_cli_host_tier_rows(capsys):
    assert main(["hitrate", "--capacity", "2000", "--host-capacity", "4e3", "--write-policy", "write_back"]) == 0
    out = capsys.readouterr().out
    assert "with a host tier" in out and "write_back" in out
    assert main(["hitrate", "--host-capacity", "4000"]) == 2      # needs --capacity
    assert "needs a finite --capacity" in capsys.readouterr().err


def test_trace_rows_as_json(capsys):
    rows = HitRateStudy(trace="synthetic", requests=40, caches=["radix"], capacities=[100_000],
                        host_capacities=[400_000], as_json=True).run()
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert printed == [r.as_dict() for r in rows] and {r["host_capacity_tokens"] for r in printed} == {0, 400_000}
    assert all({"hit_rate", "device_hit_rate", "host_hit_rate", "bytes_written", "bytes_loaded"} <= set(r)
               for r in printed)


def _json_rows(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("cache", ["radix", "hashed"])
def test_trace_with_a_host_tier_that_holds_everything_hits_as_the_unlimited_cache(cache, capsys):
    """``hitrate --trace --host-capacity``: with write-through into a host tier larger than the
    slice, every id seen before is found on one tier or the other, so the hit rate is the
    unlimited cache's (``traces.replay_trace``, an independent replay); the device-only row is
    ``replay_trace`` at the same capacity, and device + host add up."""
    from nano_engine.traces import load_trace

    trace = load_trace("conversation")[:150]
    assert main(["hitrate", "--trace", "conversation", "--requests", "150", "--cache", cache, "--capacity", "1.5e5",
                 "--host-capacity", "1e8", "--json"]) == 0
    device_only, tiered = _json_rows(capsys.readouterr().out)
    assert device_only["host_capacity_tokens"] == 0
    assert device_only["hit_rate"] == replay_trace(trace, cache, 150_000).as_dict()["hit_rate"]
    assert tiered["rejected"] == 0 and tiered["write_policy"] == "write_through"
    unlimited = replay_trace(trace, cache, None).hit_rate
    assert device_only["hit_rate"] < unlimited - 0.005      # the device alone loses hits here: the tier matters
    assert tiered["hit_rate"] == pytest.approx(unlimited, abs=1e-6)
    assert tiered["hit_rate"] == pytest.approx(tiered["device_hit_rate"] + tiered["host_hit_rate"], abs=2e-6)
    assert tiered["host_hit_rate"] > 0 and tiered["bytes_loaded"] > 0
    assert tiered["bytes_written"] >= tiered["bytes_loaded"]


@pytest.mark.parametrize("argv, message", [
    (["--cache", "vllm", "--host-capacity", "6e5"], "--cache vllm has no host tier"),
    (["--cache", "hashed", "--host-capacity", "6e5", "--write-policy", "write_back"], "vLLM's policies only"),
    (["--cache", "radix", "--write-policy", "write_back"], "add --host-capacity"),
    (["--cache", "radix", "--host-capacity", "inf"], "a host tier is finite"),
    (["--cache", "radix", "--host-capacity", "6e5", "--block-size", "16"], "--block-size 512 only"),
])
def test_trace_host_tier_bad_options(argv, message, capsys):
    assert main(["hitrate", "--trace", "conversation", "--requests", "5", "--capacity", "3e5", *argv]) == 2
    assert message in capsys.readouterr().err
