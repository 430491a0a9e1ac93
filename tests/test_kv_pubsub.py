"""KV events over ZeroMQ: vLLM's framing and replay protocol, gaps, drops, restarts, bad input.

Every test uses loopback TCP on free ports (or ipc:// in a temporary folder), waits with a deadline,
and closes what it opened (publishers and subscribers terminate their own zmq.Context; raw
sockets here live in a context the fixture terminates). The index a subscriber builds is compared
with the truth: the same events replayed with ``kv_events.replay`` onto a Counter.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

import msgspec
import pytest
import zmq
from kv_event_helpers import pool_events

from nano_engine.kv_events import BlockStored, replay
from nano_engine.kv_index import KVBlockIndex
from nano_engine.kv_pubsub import END_SEQ, KVEventPublisher, KVEventSubscriber, check_endpoint
from nano_engine.kv_wire import decode_batch, encode_batch

FREE = "tcp://127.0.0.1:0"
DEADLINE_S = 20.0            # generous: the machine is shared; CPU time is what the tests keep small


@pytest.fixture
def ctx():
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


@pytest.fixture(autouse=True)
def no_thread_left():
    yield
    left = [t for t in threading.enumerate() if t.name == "kv-replay"]
    assert not left, f"replay threads still running: {left}"


def batches_of(events: list, size: int) -> list[list]:
    return [events[i:i + size] for i in range(0, len(events), size)]


def poll_until(sub: KVEventSubscriber, done, deadline_s: float = DEADLINE_S) -> bool:
    end = time.monotonic() + deadline_s
    while not done() and time.monotonic() < end:
        sub.poll(20)
    return done()


def spin(sub: KVEventSubscriber, seconds: float) -> None:
    """Poll for ``seconds`` whatever comes."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sub.poll(20)


def recv(sock: zmq.Socket, timeout_ms: int = 5000) -> list[bytes]:
    assert sock.poll(timeout_ms), "nothing received before the deadline"
    return sock.recv_multipart()


class Recorder:
    """on_batch / on_reset: the index, plus what was applied, in order."""

    def __init__(self) -> None:
        self.index = KVBlockIndex()
        self.seqs: list[int] = []
        self.resets = 0

    def on_batch(self, worker, seq, events) -> None:
        self.seqs.append(seq)
        self.index.apply(worker, events)

    def on_reset(self, worker) -> None:
        self.resets += 1
        self.seqs.clear()
        self.index.reset(worker)


def subscriber(pub: KVEventPublisher, rec: Recorder, **kwargs) -> KVEventSubscriber:
    return KVEventSubscriber(*pub.bound_endpoints, worker="w0", on_batch=rec.on_batch, on_reset=rec.on_reset, **kwargs)


# -- the wire protocol, read with raw sockets ----------------------------------------------------------

def test_three_frames_and_the_replay_protocol(ctx):
    with KVEventPublisher(FREE, FREE, topic=b"kv@pod-0") as pub:
        endpoint, replay_endpoint = pub.bound_endpoints
        assert endpoint.startswith("tcp://127.0.0.1:") and not endpoint.endswith(":0")
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
        sub.connect(endpoint)
        payloads = {}
        end = time.monotonic() + DEADLINE_S
        while not sub.poll(10) and time.monotonic() < end:      # the slow joiner: publish until one arrives
            events = [BlockStored([len(payloads)], None, [1, 2], 2, None, [None])]
            payloads[pub.publish(events, ts=1.5)] = encode_batch(events, 1.5)
        topic, seq_bytes, payload = sub.recv_multipart()
        seq = int.from_bytes(seq_bytes, "big")
        assert topic == b"kv@pod-0" and len(seq_bytes) == 8 and payload == payloads[seq]
        assert decode_batch(payload)[1] == [BlockStored([seq], None, [1, 2], 2, None, [None])]
        assert sorted(payloads) == list(range(len(payloads)))              # seq counts batches from 0

        # DEALER: every buffered batch from the start seq, each framed as live, then the -1 end marker
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(replay_endpoint)
        dealer.send_multipart([b"", (1).to_bytes(8, "big")])
        replies = []
        while (frames := recv(dealer))[1] != b"":
            replies.append(frames)
        assert frames == [b"", b"", END_SEQ, b""] and int.from_bytes(END_SEQ, "big", signed=True) == -1
        assert replies == [[b"", b"kv@pod-0", s.to_bytes(8, "big"), payloads[s]] for s in range(1, len(payloads))]

        # REQ (vLLM's example consumer) takes the first reply and cannot read the rest: why DEALER
        req = ctx.socket(zmq.REQ)
        req.connect(replay_endpoint)
        pub.publish([], ts=2.0)                       # at least two replies (a batch, then the end marker)
        req.send((0).to_bytes(8, "big"))
        assert recv(req)[0] == b"kv@pod-0"
        with pytest.raises(zmq.ZMQError) as error:
            req.recv_multipart(zmq.NOBLOCK)           # a REQ must send before it may receive again
        assert error.value.errno == zmq.EFSM


def test_a_malformed_replay_request_is_logged_and_the_next_one_answered(ctx, caplog):
    caplog.set_level(logging.WARNING, logger="nano_engine.kv_pubsub")
    with KVEventPublisher(FREE, FREE) as pub:
        pub.publish([], ts=1.0)
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(pub.replay_endpoint)
        dealer.send_multipart([b"", b"\x00\x01"])                 # a 2-byte start seq
        dealer.send_multipart([b"", (0).to_bytes(8, "big")])
        assert recv(dealer)[2] == (0).to_bytes(8, "big")        # the good request's batch
        assert recv(dealer) == [b"", b"", END_SEQ, b""]
    assert "ignoring a malformed request" in caplog.text


def test_loopback_only():
    for endpoint in ("tcp://0.0.0.0:5557", "tcp://*:5557", "tcp://10.0.0.1:5557", "udp://127.0.0.1:1", 5557):
        with pytest.raises(ValueError, match="loopback|must be a string"):
            check_endpoint(endpoint)                 # type: ignore[arg-type]
    for endpoint in ("tcp://127.0.0.1:0", "tcp://127.0.0.1:*", "tcp://localhost:5557", "ipc:///tmp/x"):
        assert check_endpoint(endpoint) == endpoint
    with pytest.raises(ValueError, match="drop_rate"):
        KVEventPublisher(FREE, drop_rate=1.5)


# -- recovery -----------------------------------------------------------------------------------------

def test_ten_thousand_events_through_a_tiny_high_water_mark():
    """HWM 2 on both ends drops most of a burst, silently; every gap is refilled by replay."""
    events = pool_events(3200, num_blocks=16, block_size=2, num_prefixes=6)
    assert len(events) >= 10_000
    batches = batches_of(events, 5)
    rec = Recorder()
    with KVEventPublisher(FREE, FREE, hwm=2) as pub, subscriber(pub, rec, rcvhwm=2) as sub:
        for i, batch in enumerate(batches):
            pub.publish(batch)
            if i % 100 == 99:
                sub.poll(0)
        assert poll_until(sub, lambda: sub.expected == len(batches) and sub.in_sync)
        assert sub.gaps_detected > 0, "no message was dropped: the test did not test recovery"
        assert (sub.gaps_recovered, sub.gaps_lost, sub.malformed) == (sub.gaps_detected, 0, 0)
    assert rec.seqs == list(range(len(batches)))                 # each batch once, in order
    rec.index.check_invariants()
    assert rec.index.blocks("w0") == replay(events, Counter())   # the index is the truth
    assert rec.index.num_blocks("w0") == sum(counter_of(events).values())


def counter_of(events: list) -> Counter:
    counts: Counter = Counter()
    replay(events, counts)
    return counts


def test_drop_rate_faults_are_recovered_and_without_replay_are_reported(caplog):
    events = pool_events(400, seed=3)
    batches = batches_of(events, 2)
    rec = Recorder()
    with KVEventPublisher(FREE, FREE, drop_rate=0.2, seed=1) as pub, subscriber(pub, rec) as sub:
        for batch in batches:
            pub.publish(batch)
            sub.poll(0)
        assert poll_until(sub, lambda: sub.expected == len(batches) and sub.in_sync)
        assert pub.num_dropped > 0 and sub.gaps_detected > 0
        assert (sub.gaps_recovered, sub.gaps_lost) == (sub.gaps_detected, 0)
    assert rec.index.blocks("w0") == replay(events, Counter())

    rec = Recorder()
    caplog.set_level(logging.WARNING, logger="nano_engine.kv_pubsub")
    with KVEventPublisher(FREE, FREE, drop_rate=0.2, seed=1) as pub, subscriber(pub, rec, replay=False) as sub:
        spin(sub, 0.2)                                # past the slow-joiner window
        for batch in batches:
            pub.publish(batch)
            sub.poll(0)
        spin(sub, 0.5)
        assert sub.gaps_detected > 0 and sub.gaps_lost > 0 and sub.gaps_recovered == 0
    assert "replay is off" in caplog.text


def test_engine_restart_is_detected_and_resynced(caplog):
    """A new publisher on the same endpoints counts from 0 again: reset the worker, replay from 0."""
    before, after = pool_events(60, seed=4), pool_events(30, seed=5)     # the restarted engine starts empty
    rec = Recorder()
    with KVEventPublisher(FREE, FREE) as first:
        endpoints = first.bound_endpoints
        with KVEventSubscriber(*endpoints, worker="w0", on_batch=rec.on_batch, on_reset=rec.on_reset) as sub:
            for batch in batches_of(before, 1):
                first.publish(batch)
            assert poll_until(sub, lambda: sub.expected == len(before) and sub.in_sync)
            first.close()
            caplog.set_level(logging.WARNING, logger="nano_engine.kv_pubsub")
            with KVEventPublisher(*endpoints) as second:
                for batch in batches_of(after, 1):
                    second.publish(batch)
                    sub.poll(20)
                ok = poll_until(sub, lambda: sub.restarts_detected == 1 and sub.expected == len(after) and sub.in_sync)
                assert ok, (sub.restarts_detected, sub.expected, len(after), sub._highest, sub._last_live,
                            sorted(sub.pending), sub.gaps_detected, sub.gaps_lost, second.next_seq)
    # seen by a live seq going backwards, or (if the replay anchor asked first) by the replay answer
    assert rec.resets == 1 and ("seq went backwards" in caplog.text or "holds nothing from seq" in caplog.text)
    assert caplog.text.count("the engine restarted") == 1
    assert rec.seqs == list(range(len(after)))
    assert rec.index.blocks("w0") == replay(after, Counter())    # nothing of the old engine's cache left


@pytest.mark.parametrize("new_batches", [5, 80])
def test_restart_seen_only_by_the_replay_anchor(new_batches, caplog):
    """The restarted engine's live batches never arrive (drop_rate=1): the tail probe asks from the last
    batch applied; the new publisher has none there (5 < 40 batches) or other bytes (80): a restart."""
    before = batches_of(pool_events(40, seed=7), 1)[:40]
    after = batches_of(pool_events(2 * new_batches, seed=8), 1)[:new_batches]     # the restarted engine's
    assert (len(before), len(after)) == (40, new_batches)
    rec = Recorder()
    caplog.set_level(logging.WARNING, logger="nano_engine.kv_pubsub")
    with KVEventPublisher(FREE, FREE) as first:
        endpoints = first.bound_endpoints
        with KVEventSubscriber(*endpoints, worker="w0", on_batch=rec.on_batch, on_reset=rec.on_reset,
                               idle_probe_ms=100) as sub:
            for batch in before:
                first.publish(batch)
            assert poll_until(sub, lambda: sub.expected == 40 and sub.in_sync)
            first.close()
            with KVEventPublisher(*endpoints, drop_rate=1.0) as second:
                for batch in after:
                    second.publish(batch)
                assert poll_until(sub, lambda: sub.restarts_detected == 1 and sub.expected == new_batches
                                  and sub.in_sync)
                assert second.num_dropped == new_batches                 # nothing came live
    assert rec.resets == 1 and rec.seqs == list(range(new_batches))
    assert rec.index.blocks("w0") == replay([e for b in after for e in b], Counter())
    assert ("holds nothing from seq 39" if new_batches < 40 else "replayed batch seq 39 differs") in caplog.text


def test_batches_lost_for_good_reset_the_worker(caplog):
    """A gap older than the publisher's buffer cannot be replayed: the worker is reset and followed from
    the oldest batch still buffered, so the index may miss blocks but never keeps a removed one."""
    events = pool_events(200, seed=9)
    batches = batches_of(events, 1)
    rec = Recorder()
    caplog.set_level(logging.WARNING, logger="nano_engine.kv_pubsub")
    with KVEventPublisher(FREE, FREE, buffer_steps=20) as pub, subscriber(pub, rec, idle_probe_ms=100) as sub:
        pub.publish(batches[0])
        assert poll_until(sub, lambda: sub.expected == 1 and sub.in_sync)
        pub.drop_rate = 1.0                                  # a long outage: nothing live
        for batch in batches[1:]:
            pub.publish(batch)
        assert poll_until(sub, lambda: sub.expected == len(batches) and sub.in_sync)
    assert sub.resyncs == 1 and rec.resets == 1 and "buffer starts at seq" in caplog.text
    assert rec.seqs == list(range(len(batches) - 20, len(batches)))
    truth = replay(events, Counter())
    assert rec.index.blocks("w0") <= truth                   # never a block the engine does not hold
    assert rec.index.blocks("w0") == replay([e for b in batches[-20:] for e in b], Counter()) & truth


def test_step_batcher_publishes_one_batch_per_step_and_shared_contexts(ctx):
    """StepBatcher: a pool's events gathered, one batch per flush, none for a step without events; two
    subscribers in one caller-owned context (left open by close) both follow the stream."""
    from nano_engine.kv_pubsub import StepBatcher
    from nano_engine.prefix_cache import PrefixCachingBlockPool

    pool = PrefixCachingBlockPool(8, 2, vllm=True)
    recs = [Recorder(), Recorder()]
    with KVEventPublisher(FREE, FREE, context=ctx) as pub:
        subs = [KVEventSubscriber(*pub.bound_endpoints, worker="w0", on_batch=r.on_batch, on_reset=r.on_reset,
                                  context=ctx) for r in recs]
        batcher = StepBatcher(pool, pub)
        truth: list = []
        pool.subscribe(truth.append)
        for step in range(6):
            tokens = [1, 2, 3, 4, 5 + step]
            blocks = pool.allocate(3)
            pool.cache_blocks(tokens, blocks, len(tokens))
            pool.free(blocks)
            assert batcher.flush() == step
            assert batcher.flush() is None                      # nothing new: no batch
        batcher.close()
        pool.reset()                                            # AllBlocksCleared, after close: not gathered
        assert batcher.events == [] and batcher.num_batches == 6 and batcher.num_events == len(truth) - 1
        for sub in subs:
            assert poll_until(sub, lambda sub=sub: sub.expected == 6 and sub.in_sync)
            sub.close()
    for rec in recs:
        assert rec.index.blocks("w0") == replay(truth[:-1], Counter())
    assert not ctx.closed                                      # the caller's context stays usable
    ctx.socket(zmq.PUB).close()


def publish_all(pub: KVEventPublisher, batches: list[list], sub: KVEventSubscriber) -> dict[int, bytes]:
    """Publish every batch, the subscriber polling between them; the bytes each went out as, by seq
    (what a second delivery repeats)."""
    sent = {}
    for batch in batches:
        seq = pub.publish(batch)
        sent[seq] = pub._buffer[-1][1]
        sub.poll(1)
    return sent


@pytest.mark.parametrize("use_replay", [True, False])
def test_a_live_batch_delivered_twice_resets_nothing(use_replay, monkeypatch):
    """A batch can arrive twice (a subscriber connected to one publisher over two addresses): the same seq and bytes again on the live
    stream are a duplicate, not a restarted engine. With an 8-batch buffer a wrong reset would leave
    the index with the last 8 batches' blocks only."""
    import nano_engine.kv_pubsub as kv_pubsub

    events = pool_events(200, seed=11)
    batches = batches_of(events, 5)
    truth = replay(events, Counter())
    rec = Recorder()
    with KVEventPublisher(FREE, FREE, buffer_steps=8) as pub, \
            subscriber(pub, rec, replay=use_replay, idle_probe_ms=100) as sub:
        spin(sub, 0.2)                                 # past the slow-joiner window
        sent = publish_all(pub, batches, sub)
        assert poll_until(sub, lambda: sub.expected == len(batches) and sub.in_sync)
        assert rec.index.blocks("w0") == truth
        last = len(batches) - 1
        for seq in (last, last, last - 3, 2):          # the last batch twice, a recent one, one long gone
            pub._pub.send_multipart((pub.topic, seq.to_bytes(8, "big"), sent[seq]))
        assert poll_until(sub, lambda: sub.duplicates >= 4), sub.duplicates
        if use_replay:                                 # a repeat older than the window: the replay socket decides
            monkeypatch.setattr(kv_pubsub, "DUPLICATE_WINDOW", 4)
            sub._recent.clear()
            pub._pub.send_multipart((pub.topic, (last - 1).to_bytes(8, "big"), sent[last - 1]))
            assert poll_until(sub, lambda: sub.duplicates >= 6 and sub.in_sync and not sub._check_restart)
        spin(sub, 0.3)
        assert sub.restarts_detected == 0, "a batch heard twice is not a restart"
        assert sub.resyncs == 0
    assert rec.resets == 0, "the worker was reset"
    assert rec.index.blocks("w0") == truth, f"the index kept {len(rec.index.blocks('w0'))} of {len(truth)} blocks"


def test_a_bad_batch_is_counted_and_skipped_and_the_stream_goes_on(monkeypatch):
    """A payload no decoder can read (extra keys 600 deep, a medium that is not UTF-8) is counted as
    malformed and passed over; the batches around it are applied and nothing is reset."""
    import nano_engine.kv_pubsub as kv_pubsub

    batches = batches_of(pool_events(60, seed=12), 4)[:11]
    hostile = {3: msgspec.msgpack.encode([1.0, [{"type": "BlockRemoved", "block_hashes": [1],
                                                 "medium": "GPU"}]]).replace(b"\xa3GPU", b"\xa3\xff\xff\xff"),
               7: encode_batch([BlockStored([5], None, [1, 2], 2, None, [("x",)])], 1.0).replace(
                   b"\x91\x91\xa1x", b"\x91" + b"\x91" * 600 + b"\xc0")}
    real_encode = kv_pubsub.encode_batch
    count = iter(range(10**6))
    monkeypatch.setattr(kv_pubsub, "encode_batch",
                        lambda events, ts, rank=None: hostile.get(next(count)) or real_encode(events, ts, rank))
    rec = Recorder()
    with KVEventPublisher(FREE, FREE) as pub, subscriber(pub, rec) as sub:
        for batch in batches:
            pub.publish(batch)
            sub.poll(0)
        assert poll_until(sub, lambda: sub.expected == len(batches) and sub.in_sync)
    good = [b for i, b in enumerate(batches) if i not in hostile]
    assert sub.malformed == 2, sub.malformed
    assert rec.resets == 0 and sub.restarts_detected == 0, "a bad message resets nothing"
    assert rec.seqs == [i for i in range(len(batches)) if i not in hostile]
    assert rec.index.blocks("w0") == replay([e for b in good for e in b], Counter())


def test_one_address_for_both_sockets_is_refused(tmp_path):
    for endpoint, replay_endpoint in [(f"ipc://{tmp_path}/x", f"ipc://{tmp_path}/x"),
                                      (f"ipc://{tmp_path}/x", f"ipc://{tmp_path}/./x"),
                                      ("tcp://127.0.0.1:5557", "tcp://127.0.0.1:5557")]:
        with pytest.raises(ValueError, match="the replay endpoint must differ from the PUB endpoint"):
            KVEventPublisher(endpoint, replay_endpoint)
    assert not list(tmp_path.iterdir()), "nothing bound"
    with KVEventPublisher(FREE, FREE) as pub:        # two free ports: two addresses
        assert pub.endpoint != pub.replay_endpoint


def test_ipc_socket_files_are_removed_on_close(tmp_path):
    pub = KVEventPublisher(f"ipc://{tmp_path}/pub", f"ipc://{tmp_path}/replay")
    assert sorted(f.name for f in tmp_path.iterdir()) == ["pub", "replay"]
    pub.close()
    assert not list(tmp_path.iterdir()), "libzmq leaves them; close must remove them"
    # a publisher that took over the path (a restarted engine) keeps its file when the old one closes
    old = KVEventPublisher(f"ipc://{tmp_path}/pub")
    new = KVEventPublisher(f"ipc://{tmp_path}/pub")
    old.close()
    assert (tmp_path / "pub").exists(), "the new publisher's socket file was removed by the old one"
    new.close()
    assert not (tmp_path / "pub").exists()


# -- bad input ----------------------------------------------------------------------------------------

def test_bad_input_is_logged_and_survived(ctx, caplog):
    """Malformed payload, unknown tag, wrong frame count, seq going backwards: a log line each, no crash."""
    xpub = ctx.socket(zmq.XPUB)                       # a PUB that shows when the subscription has arrived
    port = xpub.bind_to_random_port("tcp://127.0.0.1")
    rec = Recorder()
    caplog.set_level(logging.WARNING, logger="nano_engine.kv_pubsub")
    with KVEventSubscriber(f"tcp://127.0.0.1:{port}", worker="w0", on_batch=rec.on_batch,
                           on_reset=rec.on_reset) as sub:
        sub.poll(0)
        assert recv(xpub) == [b"\x01kv-events"]
        good = encode_batch([BlockStored([7], None, [1, 2], 2, None, [None])], 1.0)
        unknown = msgspec.msgpack.encode([1.0, [{"type": "BlockPinned", "block_hashes": [1]}]])
        for frames in ([b"kv-events", (0).to_bytes(8, "big"), good],
                       [b"kv-events", (1).to_bytes(8, "big"), b"\xc1not msgpack"],
                       [b"kv-events", (2).to_bytes(8, "big"), unknown],
                       [b"kv-events", b"\x00\x03"],
                       [b"kv-events", (3).to_bytes(8, "big"), good],
                       [b"kv-events", (1).to_bytes(8, "big"), good]):
            xpub.send_multipart(frames)
        assert poll_until(sub, lambda: sub.restarts_detected == 1 and len(rec.seqs) == 1, 5.0)
    assert sub.malformed == 3
    assert "batch seq 1 skipped: malformed KV event batch" in caplog.text
    assert "batch seq 2 skipped: unknown KV event tag 'BlockPinned'" in caplog.text
    assert "message of 2 frames" in caplog.text
    assert "seq went backwards (1 after 3)" in caplog.text
    # the reset emptied the worker; seq 1 of the "new" publisher then opened a gap (0 missing) that a
    # subscriber without replay cannot fill: reported lost, and seq 1 applied
    assert rec.resets == 1 and rec.seqs == [1] and sub.gaps_lost == 1
    assert rec.index.blocks("w0") == {7}


def test_subscriber_started_before_any_publisher(tmp_path, caplog):
    endpoint, replay_endpoint = f"ipc://{tmp_path}/pub", f"ipc://{tmp_path}/replay"
    events = pool_events(20, seed=6)
    rec = Recorder()
    caplog.set_level(logging.WARNING, logger="nano_engine.kv_pubsub")
    with KVEventSubscriber(endpoint, replay_endpoint, worker="w0", on_batch=rec.on_batch,
                           replay_timeout_ms=200) as sub:
        for _ in range(15):
            assert sub.poll(20) == 0
        assert "nothing from ipc://" in caplog.text and "publisher not started yet" in caplog.text
        with KVEventPublisher(endpoint, replay_endpoint) as pub:
            for batch in batches_of(events, 3):                  # the first ones are lost to the slow joiner
                pub.publish(batch)
            n = pub.next_seq
            assert poll_until(sub, lambda: sub.expected == n and sub.in_sync)
    assert rec.seqs == list(range(n))
    assert rec.index.blocks("w0") == replay(events, Counter())


# -- the `events` command, as a separate process ----------------------------------------------------------

@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_events_command_publishes_a_real_engines_events(sigint):
    """``python -m nano_engine events``: a real LLMEngine in a child process; the subscriber here ends with
    exactly the blocks the child's pool reports, and the child exits cleanly on SIGTERM (reaped), also
    when it was started with SIGINT ignored (as a script's background job is)."""
    import json
    import queue
    import re
    import signal
    import subprocess
    import sys

    from nano_engine.checkpoints import tiny_checkpoint

    command = [sys.executable, "-m", "nano_engine", "events", "--publish", FREE, "--replay", FREE, "--prompts", "2",
               "--max-tokens", "4", "--linger", "120", "--device", "cpu", "--model", str(tiny_checkpoint())]
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint == "ignored" else None
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=ignore)
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in child.stdout], daemon=True)  # type: ignore[union-attr]
    reader.start()

    def next_line(timeout: float = 300.0) -> str:
        try:
            return lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no output from the child within {timeout} s") from None

    try:
        first = next_line()
        found = re.match(r"events: publishing KV events on (\S+) \(replay: (\S+), topic 'kv-events'", first)
        assert found, first
        rec = Recorder()
        with KVEventSubscriber(found[1], found[2], worker="engine", on_batch=rec.on_batch, on_reset=rec.on_reset,
                               idle_probe_ms=200) as sub:
            summary = None
            end = time.monotonic() + 300
            while summary is None and time.monotonic() < end:
                sub.poll(50)
                if not lines.empty():
                    summary = json.loads(next_line())
            assert summary is not None and summary["prompts"] == 2 and summary["batches"] >= 1
            assert poll_until(sub, lambda: sub.expected == summary["next_seq"] and sub.in_sync)
        assert rec.seqs == list(range(summary["next_seq"])) and sub.malformed == 0
        assert rec.index.num_blocks("engine") == summary["cached_blocks"] > 0
        assert len(rec.index.blocks("engine")) == summary["cached_hashes"]
        assert all(isinstance(h, int) and 0 <= h < 2**64 for h in rec.index.blocks("engine"))   # vLLM's int hashes
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=60) == 130
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=60)
        child.stdout.close()          # type: ignore[union-attr]
        child.stderr.close()          # type: ignore[union-attr]
        reader.join(timeout=10)


@pytest.mark.parametrize("ending", ["normal", "SIGINT", "SIGTERM"])
def test_events_command_removes_its_ipc_socket_files(tmp_path, ending):
    """libzmq 4.3.5 leaves an ipc:// socket's file behind; the command removes its two on every ending."""
    import select
    import signal
    import subprocess
    import sys

    from nano_engine.checkpoints import tiny_checkpoint

    command = [sys.executable, "-m", "nano_engine", "events", "--publish", f"ipc://{tmp_path}/pub",
               "--replay", f"ipc://{tmp_path}/replay", "--prompts", "1", "--max-tokens", "2", "--device", "cpu",
               "--model", str(tiny_checkpoint()), "--linger", "0" if ending == "normal" else "120"]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if ending != "normal":
            ready, _, _ = select.select([child.stdout], [], [], 300)     # every wait has a deadline
            assert ready, "the command printed nothing within 300 s"
            first = child.stdout.readline()                 # type: ignore[union-attr]
            assert first.startswith("events: publishing KV events on ipc://"), first
            assert sorted(f.name for f in tmp_path.iterdir()) == ["pub", "replay"]
            child.send_signal(getattr(signal, ending))
        out, err = child.communicate(timeout=300)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate(timeout=60)
    assert child.returncode == (0 if ending == "normal" else 130), err
    assert not list(tmp_path.iterdir()), f"left behind: {sorted(f.name for f in tmp_path.iterdir())}"


@pytest.mark.parametrize("extra, fragment", [
    (["--prompts", "0"], "--prompts must be >= 1"),
    (["--linger", "-1"], "--linger must be >= 0"),
    (["--publish", "tcp://0.0.0.0:5557"], "only loopback TCP"),
    (["--replay", "tcp://192.168.1.1:5558"], "only loopback TCP"),
    (["--publish", "ipc:///tmp/nano-kv-same", "--replay", "ipc:///tmp/nano-kv-same"],
     "the replay endpoint must differ from the PUB endpoint"),
])
def test_events_command_refuses_bad_values_in_one_line(capsys, extra, fragment):
    from nano_engine.__main__ import main

    assert main(["events", "--publish", FREE, "--replay", FREE, *extra]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == "" and len(lines) == 1 and lines[0].startswith("nano-engine events: error: ")
    assert fragment in lines[0], lines[0]


def test_a_taken_port_is_a_clear_error():
    with KVEventPublisher(FREE) as pub, pytest.raises(ValueError, match="cannot bind"):
        KVEventPublisher(pub.endpoint)
