"""The cluster end to end: instance processes publishing KV events over ZeroMQ, a router's index.

Small runs (2-3 instances, tens of requests, caches small enough to evict), real sockets. The
hit counts are checked against an independent replay of each instance's requests in one process;
the index against each instance's real cache; and after every run, failed ones included, no
child process and no socket may be left.
"""

import multiprocessing
import os
import signal
from collections import Counter

import pytest

from nano_engine.cluster import Cluster, ClusterConfig, ClusterError, jaccard, run_cluster
from nano_engine.instances import TraceInstance
from nano_engine.kv_events import replay
from nano_engine.traces import load_trace, serve_request, trace_replay

CAPACITY = 64 * 512          # 64 blocks per instance: the first requests already evict
TRACE = load_trace("conversation")


def sockets() -> int:
    fds = os.listdir("/proc/self/fd")
    out = 0
    for fd in fds:
        try:
            out += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return out


@pytest.fixture
def no_leaks():
    """Nothing the test started may outlive it: children, sockets."""
    assert not multiprocessing.active_children()
    before = sockets()
    yield
    assert not multiprocessing.active_children(), multiprocessing.active_children()
    assert sockets() <= before, f"{sockets() - before} socket(s) left open"


def config(**kw) -> ClusterConfig:
    base = dict(instances=2, router="dynamo", capacity_tokens=CAPACITY, timeout_s=60.0)
    base.update(kw)
    return ClusterConfig(**base)


def reference_hits(trace, routed_to, instances, capacity) -> int:
    """Each instance's requests replayed in one process, in the order it served them (FIFO)."""
    caches = [trace_replay(None, "vllm", capacity) for _ in range(instances)]
    return sum(serve_request(caches[k], r) or 0 for r, k in zip(trace, routed_to))


def test_instance_events_replay_to_its_cache():
    inst = TraceInstance(CAPACITY)
    events: list = []
    inst.pool.subscribe(events.append)
    for i, request in enumerate(TRACE[:80]):
        inst.submit(i, request.timestamp, request)
        inst.advance(request.timestamp)
    inst.advance(float("inf"))
    assert any(type(e).__name__ == "BlockRemoved" for e in events)
    assert replay(events, Counter()) == inst.cached_hashes()
    assert jaccard(set(), set()) == 1.0 and jaccard({1, 2}, {2, 3}) == pytest.approx(1 / 3)


def test_exact_index_and_hits_without_faults(no_leaks):
    trace = TRACE[:60]
    result = run_cluster(trace, config(instances=3))
    assert result.index_accuracy == 1.0
    assert (result.gaps_detected, result.gaps_lost, result.restarts_detected) == (0, 0, 0)
    assert sum(result.requests_per_instance) == 60 and len(result.ttft_ms) == 60
    assert result.hit_tokens == reference_hits(trace, result.routed_to, 3, CAPACITY)
    assert result.hit_tokens > 0          # the event-driven router found shared prefixes


def test_dropped_batches_recovered_by_replay_and_lost_without(no_leaks):
    trace = TRACE[:60]
    recovered = run_cluster(trace, config(drop_rate=0.15, seed=3))
    assert recovered.batches_dropped > 0
    assert recovered.gaps_detected > 0 and recovered.gaps_recovered == recovered.gaps_detected
    assert recovered.gaps_lost == 0 and recovered.index_accuracy == 1.0
    assert recovered.hit_tokens == reference_hits(trace, recovered.routed_to, 2, CAPACITY)
    again = run_cluster(trace, config(drop_rate=0.15, seed=3))
    assert again.as_dict() == recovered.as_dict()          # simulated time: deterministic given the seed
    lost = run_cluster(trace, config(drop_rate=0.15, seed=3, replay=False))
    assert lost.gaps_detected > 0 and lost.gaps_recovered == 0 and lost.gaps_lost == lost.gaps_detected
    assert lost.index_accuracy < 1.0


def test_instance_restart_is_detected_and_resynced(no_leaks):
    result = run_cluster(TRACE[:50], config(router="llm-d", restart_instance=(1, 20)))
    # At least once: a replay request in flight across the restart can make the subscriber see it
    # a second time (its reset is harmless: the index is rebuilt by replay before the next decision).
    assert result.restarts_detected >= 1
    assert result.index_accuracy == 1.0
    assert sum(result.requests_per_instance) == 50      # the restarted instance's requests were sent again


def test_router_restart_recovers_from_the_replay_buffers(no_leaks):
    result = run_cluster(TRACE[:50], config(restart_router_at=25))
    assert result.index_accuracy == 1.0
    blind = run_cluster(TRACE[:50], config(restart_router_at=25, replay=False, capacity_tokens=512 * 400))
    assert blind.gaps_lost > 0 and blind.index_accuracy < 1.0    # what it held before the restart is unknown


@pytest.mark.parametrize("fault", [RuntimeError, KeyboardInterrupt])
def test_children_and_sockets_reaped_when_the_run_fails(no_leaks, fault):
    with pytest.raises(fault, match="injected fault"):
        with Cluster(config()) as cluster:
            folder = cluster._dir
            cluster.run(TRACE[:30], fail_after=10, fault=fault)
    assert not os.path.exists(folder)


def test_a_crashed_or_killed_instance_is_a_clear_error(no_leaks):
    with Cluster(config()) as cluster:
        with pytest.raises(ClusterError, match="injected fault in the instance"):
            cluster._call(0, "crash")
    with Cluster(config()) as cluster:
        os.kill(cluster.procs[1].pid, signal.SIGKILL)
        with pytest.raises(ClusterError, match="instance 1"):
            cluster.run(TRACE[:30])


def test_bad_configs():
    with pytest.raises(ValueError, match="unknown router"):
        ClusterConfig(router="nearest")
    with pytest.raises(ValueError, match="restart_instance"):
        ClusterConfig(instances=2, restart_instance=(2, 5))
    with pytest.raises(ValueError, match="drop_rate"):
        ClusterConfig(drop_rate=1.0)
    with pytest.raises(ValueError, match="capacity_tokens"):
        ClusterConfig(capacity_tokens=100)


def test_restart_of_an_instance_that_never_published_completes(no_leaks):
    # Instance 1 has published only its handshake (seq 0) when it restarts: if the new process's
    # seq 0 is lost while the subscriber reconnects, its seq 1 looks like the old stream going on.
    # The run must neither hang nor lose the index (the old process held nothing).
    result = run_cluster(TRACE[:10], config(router="round-robin", restart_instance=(1, 0)))
    assert result.index_accuracy == 1.0 and sum(result.requests_per_instance) == 10


def test_cluster_command_prints_the_json(no_leaks, capsys):
    import json

    from nano_engine.__main__ import main

    assert main(["cluster", "--instances", "2", "--requests", "20", "--capacity", str(CAPACITY), "--router", "llm-d",
                 "--drop-rate", "0.2", "--restart-instance", "0@10", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    for key in ("hit_rate", "requests_per_instance", "load_imbalance", "gaps_detected", "gaps_recovered",
                "index_accuracy", "ttft_p50_ms_model", "ttft_p90_ms_model"):
        assert key in row, key
    assert sum(row["requests_per_instance"]) == 20 and row["index_accuracy"] == 1.0
    assert row["restart_instance"] == [0, 10] and row["gaps_recovered"] == row["gaps_detected"]


def test_accuracy_over_time_and_router_options(no_leaks):
    result = run_cluster(TRACE[:30], config(accuracy_every=10, router_options={"temperature": 0.5}))
    assert [n for n, _ in result.accuracy_over_time] == [10, 20, 30]
    assert all(a == 1.0 for _, a in result.accuracy_over_time)
    assert result.as_dict()["router_options"] == {"temperature": 0.5}
    with pytest.raises(ValueError, match="do not apply to the random router"):
        ClusterConfig(router="random", router_options={"temperature": 0.5})


def test_absurd_capacity_and_trace_lengths_are_refused_before_anything_starts(no_leaks, capsys, tmp_path):
    from nano_engine.__main__ import main
    from nano_engine.traces import Trace, TraceRequest

    with pytest.raises(ValueError, match=r"capacity_tokens 1e\+30 is more than an instance can be given"):
        ClusterConfig(capacity_tokens=10**30)
    assert main(["cluster", "--capacity", "1e30", "--requests", "5"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "--capacity 1e30" in err[0], err
    huge = TraceRequest(0.0, 512, 10**400, (1,))
    trace = Trace("t", (TRACE.requests[0], huge))
    with pytest.raises(ValueError, match=r"request 1: output_length is an integer of 1329 bits"):
        run_cluster(trace, config())
    path = tmp_path / "long.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1]}\n'
                    '{"timestamp": 5, "input_length": 512, "output_length": 1' + "0" * 400 + ', "hash_ids": [2]}\n')
    assert main(["cluster", "--trace", str(path), "--instances", "2"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and "long.jsonl: line 2: output_length must be an integer" in lines[0], captured.err
    assert "Traceback" not in captured.err


def leftover_processes(marker: str) -> list[int]:
    """Processes whose environment holds ``marker`` (the children of a run inherit its TMPDIR)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if marker.encode() in f.read().split(b"\0"):
                        found.append(int(pid))
            except OSError:
                pass
    return found


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_second_signal_during_clean_up_leaves_nothing_behind(tmp_path, second):
    """Ctrl-C, then a second Ctrl-C or a `kill` 5-50 ms later, while the cluster command stops its
    instances: no nano-cluster-* folder, no socket file, no process left; ten times each."""
    import subprocess
    import sys
    import time

    env = dict(os.environ, TMPDIR=str(tmp_path))
    command = [sys.executable, "-m", "nano_engine", "cluster", "--instances", "2", "--requests", "3000",
               "--capacity", str(CAPACITY), "--router", "round-robin"]
    for attempt in range(10):
        child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 120
            while len([f for d in tmp_path.glob("nano-cluster-*") for f in d.iterdir()]) < 4:
                assert child.poll() is None, child.stderr.read().decode()[-2000:]   # type: ignore[union-attr]
                assert time.monotonic() < deadline, "the instances did not start within 120 s"
                time.sleep(0.01)
            child.send_signal(signal.SIGINT)
            time.sleep(0.005 + 0.005 * attempt)        # 5 .. 50 ms
            child.send_signal(second)
            code = child.wait(timeout=120)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(timeout=60)
            err = child.stderr.read().decode()          # type: ignore[union-attr]
            child.stderr.close()                        # type: ignore[union-attr]
        assert code in (130, 143), (attempt, code, err[-2000:])
        assert "Traceback" not in err, (attempt, err[-2000:])
        assert not list(tmp_path.iterdir()), (attempt, [str(p) for p in tmp_path.rglob("*")])
        deadline = time.monotonic() + 30                # instances stopped by the parent: reaped by now
        while leftover_processes(f"TMPDIR={tmp_path}") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not leftover_processes(f"TMPDIR={tmp_path}"), attempt
