"""cluster.py: N engine instances in N processes, one router, KV events over ZeroMQ between them.

Chapter 05's instances shared the router's memory. Here every instance is its own OS process
(``multiprocessing``, spawn), as engines on separate GPUs are, and the router in the parent knows
their caches only from what they publish:

* **instance** (child process, :class:`~nano_engine.instances.TraceInstance`): a real prefix cache (the package's
  ``PrefixCachingBlockPool`` in vLLM mode: SHA-256 chained hashes, published as their low 64 bits,
  as vLLM publishes them) behind a first-come-first-served prefill server. Every batch of KV events
  its pool emits goes out through a :class:`~nano_engine.kv_pubsub.KVEventPublisher` (PUB + ROUTER
  replay, ``ipc://`` sockets in a private temporary folder);
* **router** (parent): one :class:`~nano_engine.kv_pubsub.KVEventSubscriber` per instance feeding a
  :class:`~nano_engine.kv_index.KVBlockIndex`, and a policy of :mod:`nano_engine.routing`;
* **requests** go to the instances over a ``multiprocessing`` pipe; every wait has a timeout, and
  every child is reaped on success, on error and on Ctrl-C (stop, then terminate, then kill).

**Time is simulated** (milliseconds of the trace's clock), so a run is deterministic given its
seed: before each routing decision the router waits until every batch an instance published has
been applied to the index, or found missing. (An instance whose last batch was dropped follows it
with an empty one, so that the loss shows as a gap at once rather than at its next real batch, as
it would in an engine that publishes every few milliseconds.)

**TTFT is a model, not a measurement.** Each instance prefills one request at a time, in arrival
order, at ``prefill_tokens_per_ms`` tokens per millisecond, and computes only the prompt tokens its
cache misses; a request's time to first token is its wait in that queue plus its prefill. Decoding
runs beside prefill (continuous batching) and takes ``decode_ms_per_token`` per output token; it
only keeps the request in flight, which is the load the routers see. Defaults: 15 tokens/ms
(15,000 tokens/s per instance) and 20 ms per output token; on Mooncake's conversation trace (one
hour, 145M prompt tokens) four such instances would be busy 68% of the time if nothing hit (41k prompt tokens/s against 60k).

**Faults** (``ClusterConfig``): ``drop_rate`` (the publishers drop that fraction of batches; the
subscribers find the gaps and, unless ``replay=False``, refill them from the replay socket);
``restart_instance=(K, T)`` (after request T, instance K's process is stopped and a new one
started: empty cache, sequence numbers from 0; its unfinished requests are sent again);
``restart_router_at=T`` (after request T the router loses its index and subscribers and starts
again: with replay it recovers what the publishers' buffers still hold, ``buffer_steps`` batches).

``index_accuracy``: per instance, the Jaccard similarity between the block hashes the index says
it holds on the GPU and those its pool really holds (asked from the process itself), averaged
over instances; 1.0 when the index is exact.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from nano_engine import instances
from nano_engine.checks import require_int
from nano_engine.deprecation import moved
from nano_engine.instances import DECODE_MS_PER_TOKEN, PREFILL_TOKENS_PER_MS
from nano_engine.routing import EVENT_POLICIES, POLICIES, RoutingPolicy, RoutingRequest, make_policy
from nano_engine.traces import TOKENS_PER_ID, Trace, TraceRequest

logger = logging.getLogger(__name__)

CALL_TIMEOUT_S = 30.0
"""How long the router waits for an instance's answer, or for its events, before giving up."""
MAX_CAPACITY_TOKENS = 1 << 30
"""The largest cache an instance may be given (tokens): 2,097,152 blocks of 512, about 400 MB of the
simulated pool's bookkeeping (some 200 bytes per block) in each instance process. Mooncake's whole
conversation trace is 145M prompt tokens."""
MAX_REQUEST_TOKENS = 1 << 53
"""The longest prompt or output a trace request may have: the TTFT model computes times in floating
point, exact for integers up to 2**53."""


class ClusterError(RuntimeError):
    """An instance failed, did not answer in time, or its events stopped arriving."""


@dataclass(frozen=True)
class ClusterConfig:
    """One cluster run. ``capacity_tokens`` is per instance; ``restart_instance`` is ``(K, T)``:
    instance K restarts after request T (0-based); ``restart_router_at``: the router restarts
    after that request; ``accuracy_every``: also measure the index accuracy every that many
    requests (``ClusterResult.accuracy_over_time``)."""

    instances: int = 4
    router: str = "dynamo"
    capacity_tokens: int = 2_000_000
    drop_rate: float = 0.0
    replay: bool = True
    restart_instance: tuple[int, int] | None = None
    restart_router_at: int | None = None
    buffer_steps: int = 10_000
    seed: int = 0
    prefill_tokens_per_ms: float = PREFILL_TOKENS_PER_MS
    decode_ms_per_token: float = DECODE_MS_PER_TOKEN
    accuracy_every: int | None = None
    timeout_s: float = CALL_TIMEOUT_S
    router_options: Mapping[str, Any] | None = None     # passed to the policy (e.g. Dynamo's temperature)

    def __post_init__(self) -> None:
        def whole(name: str, value: Any, low: int) -> None:
            require_int(name, value, minimum=low)

        whole("instances", self.instances, 1)
        if self.router not in POLICIES:
            raise ValueError(f"unknown router {self.router!r}; choose one of {', '.join(POLICIES)}")
        whole("capacity_tokens", self.capacity_tokens, TOKENS_PER_ID)
        if self.capacity_tokens > MAX_CAPACITY_TOKENS:
            raise ValueError(f"capacity_tokens {self.capacity_tokens:.3g} is more than an instance can be given: at "
                             f"most 2**30 = {MAX_CAPACITY_TOKENS:,} tokens ({MAX_CAPACITY_TOKENS // TOKENS_PER_ID:,} "
                             "blocks of 512, about 400 MB of bookkeeping per instance process)")
        if not (isinstance(self.drop_rate, (int, float)) and 0 <= self.drop_rate < 1):
            raise ValueError(f"drop_rate must be in [0, 1), got {self.drop_rate!r}")
        if self.restart_instance is not None:
            k, t = self.restart_instance
            if not (isinstance(k, int) and 0 <= k < self.instances):
                raise ValueError(f"restart_instance: no instance {k!r} (instances are 0..{self.instances - 1})")
            whole("restart_instance's request", t, 0)
        if self.restart_router_at is not None:
            whole("restart_router_at", self.restart_router_at, 0)
        whole("buffer_steps", self.buffer_steps, 1)
        for name, low_ok in (("prefill_tokens_per_ms", False), ("decode_ms_per_token", True)):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and (value > 0 or (low_ok and value == 0))):
                raise ValueError(f"{name} must be a finite number > 0{' (or 0)' if low_ok else ''}, got {value!r}")
        if self.accuracy_every is not None:
            whole("accuracy_every", self.accuracy_every, 1)
        if not (self.timeout_s > 0):
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s!r}")
        if self.router_options:     # the policy checks the values: build one now, not in the middle of a run
            try:
                make_policy(self.router, self.instances, index=_NoIndex(), capacity_blocks=1, **self.router_options)
            except TypeError as error:
                raise ValueError(f"router_options {dict(self.router_options)} do not apply to the {self.router} "
                                 f"router ({error})") from None


def check_trace(trace: Trace) -> None:
    """Refuse, in one line naming the request, a trace the TTFT model cannot compute with: a length
    above :data:`MAX_REQUEST_TOKENS`, a timestamp that is not a finite number."""
    for i, r in enumerate(trace.requests):
        for name in ("input_length", "output_length"):
            value = getattr(r, name)
            if not isinstance(value, int) or not 0 <= value <= MAX_REQUEST_TOKENS:
                size = f"an integer of {value.bit_length()} bits" if isinstance(value, int) else repr(value)
                raise ValueError(f"trace {trace.name!r}, request {i}: {name} is {size}; the TTFT model takes "
                                 f"lengths from 0 to 2**53 tokens")
        if not (isinstance(r.timestamp, (int, float)) and math.isfinite(r.timestamp)
                and abs(r.timestamp) <= MAX_REQUEST_TOKENS):
            size = f"an integer of {r.timestamp.bit_length()} bits" if isinstance(r.timestamp, int) else repr(r.timestamp)
            raise ValueError(f"trace {trace.name!r}, request {i}: timestamp is {size}; the TTFT model takes "
                             "finite times up to 2**53 ms")


class _NoIndex:
    """An empty index, to check a policy's options before any event flows."""

    def workers_for(self, block_hash: Any) -> dict:
        return {}


# ------------------------------------------------------------------------------ one instance


def _instance_main(conn: Any, parent_pid: int, endpoint: str, replay_endpoint: str, config: ClusterConfig,
                   seed: int, now: float) -> None:
    """A child process: one simulated instance and its publisher, answering the router's commands."""

    def start(publisher: Any) -> tuple[Any, dict[str, Callable[..., Any]]]:
        instance = instances.TraceInstance(config.capacity_tokens, prefill_tokens_per_ms=config.prefill_tokens_per_ms,
                                           decode_ms_per_token=config.decode_ms_per_token, now=now)
        flush = publishing(instance.pool, publisher)

        def step(t: float) -> tuple[list, int, float]:
            finished = instance.advance(t)
            return finished, flush(), instance.next_time()

        def submit(request_id: int, arrival: float, request: TraceRequest, t: float) -> tuple[list, int, float]:
            instance.submit(request_id, arrival, request)
            return step(t)

        return instance.pool, {"advance": step, "submit": submit}

    serve_commands(conn, parent_pid, endpoint, replay_endpoint, config, seed, start)


def publishing(pool: Any, publisher: Any) -> Callable[[], int]:
    """A ``flush()`` that publishes the pool's events of one step as one batch (as vLLM publishes)
    and returns the last seq; after a dropped batch, empty ones follow until one is sent, so that
    the router sees the loss as a gap at once."""
    from nano_engine.kv_pubsub import StepBatcher

    batcher = StepBatcher(pool, publisher)

    def flush() -> int:
        dropped = publisher.num_dropped
        if batcher.flush() is not None:
            for _ in range(10_000):
                if publisher.num_dropped == dropped:
                    break
                dropped = publisher.num_dropped
                publisher.publish([])
        return publisher.next_seq - 1

    return flush


def serve_commands(conn: Any, parent_pid: int, endpoint: str, replay_endpoint: str, config: ClusterConfig,
                   seed: int, start: Callable[[Any], tuple[Any, dict[str, Callable[..., Any]]]]) -> None:
    """An instance process's loop: open the publisher, build the instance (``start(publisher)``
    returns its pool and its own commands), then answer the router's commands until ``stop``.
    The commands every instance has: ``hello`` (an empty batch that is never dropped: how the
    router learns we are connected), ``start`` (faults on), ``truth`` (the cached hashes, as the
    events publish them), ``dropped``, ``crash`` (fault injection) and ``stop``."""
    from nano_engine.kv_pubsub import KVEventPublisher

    signal.signal(signal.SIGINT, signal.SIG_IGN)      # the parent handles Ctrl-C and stops us
    publisher = None
    try:
        publisher = KVEventPublisher(endpoint, replay_endpoint, buffer_steps=config.buffer_steps, drop_rate=0.0,
                                     seed=seed)
        pool, commands = start(publisher)

        def hello() -> int:
            assert publisher is not None
            publisher.drop_rate = 0.0
            return publisher.publish([])

        def faults_on() -> None:
            assert publisher is not None
            publisher.drop_rate = config.drop_rate

        def crash() -> None:
            raise RuntimeError("injected fault in the instance")

        commands = {"hello": hello, "start": faults_on, "truth": lambda: {pool.event_hash(h) for h in pool.hash_to_blocks},
                    "dropped": lambda: publisher.num_dropped, "crash": crash, **commands}
        conn.send(("ready", None))
        while True:
            if not conn.poll(1.0):
                if os.getppid() != parent_pid:       # orphaned: the router is gone
                    return
                continue
            command, args = conn.recv()
            if command == "stop":
                conn.send(("ok", None))
                return
            try:
                if command not in commands:
                    raise ValueError(f"unknown command {command!r}")
                result = commands[command](*args)
            except Exception:
                conn.send(("error", traceback.format_exc()))
                return
            conn.send(("ok", result))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        return
    except Exception:
        try:
            conn.send(("error", traceback.format_exc()))
        except (OSError, ValueError):
            pass
    finally:
        if publisher is not None:
            publisher.close()
        conn.close()


# ------------------------------------------------------------------------------ results


@dataclass
class ClusterResult:
    """What a run measured (``as_dict`` is the command line's JSON)."""

    config: ClusterConfig
    trace: str
    requests: int
    hit_tokens: int
    input_tokens: int
    requests_per_instance: list[int]
    ttft_ms: list[float]
    gaps_detected: int
    gaps_recovered: int
    gaps_lost: int
    restarts_detected: int
    batches_dropped: int
    index_accuracy_per_instance: list[float]
    accuracy_over_time: list[tuple[int, float]]
    routed_to: list[int]                 # request -> the instance it was routed to

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.input_tokens if self.input_tokens else 0.0

    @property
    def load_imbalance(self) -> float:
        """Requests of the busiest instance over the mean (1.0: even)."""
        counts = self.requests_per_instance
        return max(counts) / (sum(counts) / len(counts)) if sum(counts) else 1.0

    @property
    def index_accuracy(self) -> float:
        return sum(self.index_accuracy_per_instance) / len(self.index_accuracy_per_instance)

    def ttft_percentile(self, q: float) -> float:
        import numpy as np

        return float(np.percentile(self.ttft_ms, q)) if self.ttft_ms else 0.0

    def as_dict(self) -> dict:
        c = self.config
        return {
            "router": c.router, "instances": c.instances, "trace": self.trace, "requests": self.requests,
            "capacity_tokens": c.capacity_tokens, "hit_rate": round(self.hit_rate, 6),
            "requests_per_instance": self.requests_per_instance, "load_imbalance": round(self.load_imbalance, 4),
            "gaps_detected": self.gaps_detected, "gaps_recovered": self.gaps_recovered, "gaps_lost": self.gaps_lost,
            "restarts_detected": self.restarts_detected, "batches_dropped": self.batches_dropped,
            "index_accuracy": round(self.index_accuracy, 6),
            "index_accuracy_per_instance": [round(a, 6) for a in self.index_accuracy_per_instance],
            "ttft_p50_ms_model": round(self.ttft_percentile(50), 3),
            "ttft_p90_ms_model": round(self.ttft_percentile(90), 3),
            "drop_rate": c.drop_rate, "replay": c.replay,
            "restart_instance": list(c.restart_instance) if c.restart_instance else None,
            "restart_router_at": c.restart_router_at, "seed": c.seed, "router_options": dict(c.router_options or {}),
            "prefill_tokens_per_ms": c.prefill_tokens_per_ms, "decode_ms_per_token": c.decode_ms_per_token,
            **({"accuracy_over_time": self.accuracy_over_time} if c.accuracy_every else {}),
        }


@contextmanager
def signals_held(signums: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """Run the block with ``signums`` only remembered, then restore their handlers and deliver what
    arrived (once each), so that the block finishes: Python raises a signal's exception at whatever
    line runs, a ``finally`` included. Signals reach the main thread only: elsewhere, nothing held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: arrived.append(signum)) for s in signums}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
        for s in dict.fromkeys(arrived):
            signal.raise_signal(s)


def jaccard(a: set, b: set) -> float:
    """|a & b| / |a | b|; 1.0 for two empty sets."""
    union = len(a | b)
    return len(a & b) / union if union else 1.0


# ------------------------------------------------------------------------------ the cluster


class Cluster:
    """The instances' processes, the router's subscribers and index; use as a context manager
    (``close`` reaps every child and removes the socket folder)."""

    child_main: Callable[..., None] = staticmethod(_instance_main)   # what each instance process runs

    def __init__(self, config: ClusterConfig) -> None:
        from nano_engine.kv_index import KVBlockIndex
        from nano_engine.prefix_cache import PrefixCachingBlockPool

        self.config = config
        self._ctx = multiprocessing.get_context("spawn")
        self._dir = tempfile.mkdtemp(prefix="nano-cluster-")
        self.procs: list[Any] = [None] * config.instances
        self.conns: list[Any] = [None] * config.instances
        self.subs: list[Any] = []
        self._generation = [0] * config.instances
        self.index = KVBlockIndex()
        # The router hashes prompts exactly as the instances' pools do (vLLM mode, SHA-256).
        self.hasher = PrefixCachingBlockPool(1, 1, vllm=True)
        self.last_seq = [-1] * config.instances
        self.next_time = [math.inf] * config.instances
        self._closed_counters = {"gaps_detected": 0, "gaps_recovered": 0, "gaps_lost": 0, "restarts_detected": 0}
        self.policy: RoutingPolicy | None = None
        self._dropped_before = 0          # batches dropped by instances' earlier processes (restarts)
        try:
            for k in range(config.instances):
                self._spawn(k, now=0.0)
            self._subscribe_all()
            for k in range(config.instances):
                self._handshake(k)
                self._call(k, "start")
        except BaseException:
            self.close()
            raise

    # -- processes ----------------------------------------------------------------------------

    def endpoints(self, k: int) -> tuple[str, str]:
        return f"ipc://{self._dir}/kv-{k}.pub", f"ipc://{self._dir}/kv-{k}.replay"

    def _spawn(self, k: int, now: float) -> None:
        parent, child = self._ctx.Pipe()
        pub, replay = self.endpoints(k)
        seed = self.config.seed * 1_000_003 + k * 101 + self._generation[k]
        proc = self._ctx.Process(target=self.child_main, name=f"nano-instance-{k}", daemon=True,
                                 args=(child, os.getpid(), pub, replay, self.config, seed, now))
        proc.start()
        child.close()
        self.procs[k], self.conns[k] = proc, parent
        self._receive(k, "start-up", timeout=max(self.config.timeout_s, 60.0))   # imports take a while
        self.last_seq[k] = -1
        self.next_time[k] = math.inf

    def _receive(self, k: int, what: str, timeout: float | None = None) -> Any:
        conn = self.conns[k]
        try:
            if not conn.poll(self.config.timeout_s if timeout is None else timeout):
                raise ClusterError(f"instance {k} did not answer {what!r} within {timeout or self.config.timeout_s:.0f} s")
            status, result = conn.recv()
        except (EOFError, OSError) as error:
            code = None
            if self.procs[k] is not None:
                self.procs[k].join(timeout=1.0)      # it is exiting: its status says why
                code = self.procs[k].exitcode
            hint = (" (a script that starts a cluster needs `if __name__ == \"__main__\":` around it: the spawn start "
                    "method imports the script again in each instance)" if what == "start-up" else "")
            raise ClusterError(f"instance {k} is gone (exit code {code}) while answering {what!r}: {error!r}{hint}") from None
        if status == "error":
            raise ClusterError(f"instance {k} failed on {what!r}:\n{result}")
        return result

    def _call(self, k: int, command: str, *args: Any) -> Any:
        try:
            self.conns[k].send((command, args))
        except (OSError, ValueError) as error:
            raise ClusterError(f"instance {k} cannot be reached for {command!r}: {error!r}") from None
        return self._receive(k, command)

    def close(self) -> None:
        """Stop every child (politely, then terminate, then kill), close the subscribers, remove the
        socket folder. Safe to call twice, and from a failed start. SIGINT and SIGTERM are held until
        it is done (a second Ctrl-C or ``kill`` right after the first would otherwise cut it short and
        leave the folder behind); every wait in it has a timeout, so they are held for seconds at most."""
        with signals_held():
            for sub in self.subs:
                if sub is not None:
                    sub.close()
            self.subs = []
            for k, proc in enumerate(self.procs):
                if proc is None:
                    continue
                self._stop(k)
            shutil.rmtree(self._dir, ignore_errors=True)

    def _stop(self, k: int) -> None:
        proc, conn = self.procs[k], self.conns[k]
        try:
            if proc.is_alive():
                conn.send(("stop", ()))
                conn.poll(2.0)
        except (OSError, ValueError, EOFError):
            pass
        proc.join(timeout=5.0)
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=5.0)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5.0)
        conn.close()
        proc.close()
        self.procs[k] = self.conns[k] = None

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- events -------------------------------------------------------------------------------

    def _subscribe_all(self) -> None:
        from nano_engine.kv_pubsub import KVEventSubscriber

        for k in range(self.config.instances):
            self.index.add_worker(k)
            pub, replay = self.endpoints(k)
            self.subs.append(KVEventSubscriber(pub, replay, worker=k, on_batch=self._on_batch,
                                               on_reset=self._on_reset, replay=self.config.replay,
                                               replay_timeout_ms=500))

    def _on_batch(self, worker: Any, seq: int, events: list) -> None:
        self.index.apply(worker, events)

    def _on_reset(self, worker: Any) -> None:
        self.index.reset(worker)

    def _deadline(self) -> float:
        return time.monotonic() + self.config.timeout_s

    def _handshake(self, k: int, old_last: int | None = None) -> None:
        """Empty never-dropped batches until instance k's subscriber has one: it is connected
        (a SUB loses what is published before its connection completes, ZeroMQ's slow joiner).

        ``old_last``: after a restart, the last seq of the instance's previous process; we wait
        until the subscriber sees the sequence go back, unless the new stream has already passed
        ``old_last`` (its first batches lost), a restart that sequence numbers cannot show (logged).
        """
        sub, deadline = self.subs[k], self._deadline()
        restarts = sub.restarts_detected
        if old_last is not None:
            sub.poll(100)        # time for the SUB to reconnect and resubscribe to the new process
        while True:
            seq = self._call(k, "hello")
            self.last_seq[k] = seq
            until = time.monotonic() + 0.2
            while time.monotonic() < until:
                sub.poll(10)
                if sub.expected <= seq:
                    continue
                if old_last is None or sub.restarts_detected > restarts:
                    return
                if seq > old_last:
                    logger.warning("instance %d restarted, but its first batches were lost and its seq (%d) "
                                   "passed the old one (%d): the router cannot tell it restarted, and its "
                                   "index keeps whatever the old process held", k, seq, old_last)
                    return
            if time.monotonic() > deadline:
                raise ClusterError(f"instance {k}: its KV events never reached the router "
                                   f"({self.endpoints(k)[0]}) within {self.config.timeout_s:.0f} s")

    def _sync(self, k: int) -> None:
        """Wait until every batch instance k published is applied to the index (or known lost)."""
        sub, deadline = self.subs[k], None
        while sub.expected <= self.last_seq[k]:
            deadline = deadline or self._deadline()
            if time.monotonic() > deadline:
                raise ClusterError(f"instance {k}: KV events up to seq {self.last_seq[k]} did not arrive within "
                                   f"{self.config.timeout_s:.0f} s (applied up to {sub.expected - 1})")
            sub.poll(10)

    def counters(self) -> dict[str, int]:
        out = dict(self._closed_counters)
        for sub in self.subs:
            for name in out:
                out[name] += getattr(sub, name)
        return out

    def index_accuracy(self) -> list[float]:
        """Per instance, Jaccard(index's GPU blocks, the pool's true blocks), after a full sync."""
        out = []
        for k in range(self.config.instances):
            self._sync(k)
            truth = self._call(k, "truth")
            out.append(jaccard(set(self.index.blocks(k, "GPU")), truth))
        return out

    # -- faults ---------------------------------------------------------------------------------

    def restart_instance(self, k: int, now: float) -> None:
        """Stop instance k's process and start a new one (empty cache, seq from 0)."""
        self._dropped_before += self._call(k, "dropped")
        old_last = self.last_seq[k]
        self._stop(k)
        self._generation[k] += 1
        self._spawn(k, now=now)
        self._handshake(k, old_last=old_last)
        self._call(k, "start")

    def restart_router(self) -> None:
        """Lose the index and the subscribers; build them again (replay from what is buffered)."""
        from nano_engine.kv_index import KVBlockIndex

        for name, value in self.counters().items():
            self._closed_counters[name] = value
        for sub in self.subs:
            sub.close()
        self.subs = []
        self.index = KVBlockIndex()
        self._subscribe_all()
        for k in range(self.config.instances):
            seq = self.last_seq[k]
            self._handshake(k)
            self.last_seq[k] = max(seq, self.last_seq[k])
            self._sync(k)
            self._call(k, "start")

    # -- a run -----------------------------------------------------------------------------------

    def routing_request(self, request: TraceRequest) -> RoutingRequest:
        ids = list(request.hash_ids)
        hashes = [self.hasher.event_hash(h) for h in self.hasher.block_hashes(ids)]
        return RoutingRequest(ids, hashes, request.input_length, TOKENS_PER_ID)

    def _make_policy(self) -> RoutingPolicy:
        c = self.config
        return make_policy(c.router, c.instances, index=self.index if c.router in EVENT_POLICIES else None,
                           seed=c.seed, capacity_blocks=c.capacity_tokens // TOKENS_PER_ID, **(c.router_options or {}))

    def run(self, trace: Trace, *, progress: bool = False, fail_after: int | None = None,
            fault: type[BaseException] = RuntimeError) -> ClusterResult:
        """Route every request of ``trace`` (in order, arriving at its timestamp) and run the
        instances until all are done. ``fail_after``: raise ``fault`` after that request (the
        tests' injected failure; ``KeyboardInterrupt`` stands for Ctrl-C)."""
        check_trace(trace)
        c = self.config
        n = c.instances
        self.policy = self._make_policy()
        self.in_flight: dict[int, tuple[int, RoutingRequest, TraceRequest, float]] = {}
        self.served = [0] * n
        routed_to: list[int] = []
        self.ttft: list[float] = []
        self.hit_tokens = self.input_tokens = 0
        accuracy_over_time: list[tuple[int, float]] = []
        requests: Sequence[TraceRequest] = trace.requests
        if progress:
            from tqdm.auto import tqdm

            requests = tqdm(requests, desc=f"cluster, {c.router}", unit="req", leave=False, mininterval=1.0)
        for i, request in enumerate(requests):
            now = float(request.timestamp)
            for k in range(n):
                if self.next_time[k] <= now:
                    self._send(k, "advance", now)
            for k in range(n):
                self._sync(k)
            routed = self.routing_request(request)
            k = self.policy.route(routed)
            routed_to.append(k)
            self.in_flight[i] = (k, routed, request, now)
            self._send(k, "submit", i, now, request, now)
            if c.restart_instance is not None and c.restart_instance[1] == i:
                self._restart_with_requests(c.restart_instance[0], now)
            if c.restart_router_at == i:
                self.restart_router()
                self.policy = self._rebuilt_policy(self.policy)
            if c.accuracy_every and (i + 1) % c.accuracy_every == 0:
                accuracy_over_time.append((i + 1, sum(self.index_accuracy()) / n))
            if fail_after is not None and i >= fail_after:
                raise fault(f"injected fault after request {i}")
        while any(t < math.inf for t in self.next_time):
            now = min(self.next_time)
            for k in range(n):
                if self.next_time[k] <= now:
                    self._send(k, "advance", now)
        accuracy = self.index_accuracy()
        counters = self.counters()
        dropped = self._dropped_before + sum(self._call(k, "dropped") for k in range(n))
        return ClusterResult(c, trace.name, len(trace), self.hit_tokens, self.input_tokens, self.served, self.ttft,
                             counters["gaps_detected"], counters["gaps_recovered"], counters["gaps_lost"],
                             counters["restarts_detected"], dropped, accuracy, accuracy_over_time, routed_to)

    def _send(self, k: int, command: str, *args: Any) -> None:
        """``advance`` or ``submit`` on instance k; count what finished there."""
        finished, self.last_seq[k], self.next_time[k] = self._call(k, command, *args)
        assert self.policy is not None
        for request_id, ttft_ms, hits, tokens in finished:
            worker, routed, _, _ = self.in_flight.pop(request_id)
            self.policy.on_finished(worker, routed)
            self.served[worker] += 1
            self.ttft.append(ttft_ms)
            self.hit_tokens += hits
            self.input_tokens += tokens

    def _restart_with_requests(self, k: int, now: float) -> None:
        """Restart instance k and send it again the requests it had not finished (they keep their
        arrival time: the restart's delay shows in their TTFT)."""
        self.restart_instance(k, now)
        for request_id in sorted(r for r, (w, _, _, _) in self.in_flight.items() if w == k):
            _, _, request, arrival = self.in_flight[request_id]
            self._send(k, "submit", request_id, arrival, request, now)

    def _rebuilt_policy(self, old: RoutingPolicy) -> RoutingPolicy:
        """A restarted router: a new policy (the approximate tree is lost too) reading the new
        index; the in-flight counts carry over, as requests in flight still finish."""
        new = self._make_policy()
        new.loads = old.loads
        return new


def run_cluster(trace: Trace, config: ClusterConfig, *, progress: bool = False) -> ClusterResult:
    """Check the trace, start the cluster, run ``trace`` through it, and reap every process, whatever happens."""
    check_trace(trace)
    with Cluster(config) as cluster:
        return cluster.run(trace, progress=progress)


__getattr__ = moved(__name__, {"TraceInstance": "nano_engine.instances"})   # the old name, for one release
