"""kv_pubsub.py - KV events over ZeroMQ, as vLLM 0.33.0 sends them, and a router's subscriber.

**Engine side** (:class:`KVEventPublisher`, the transport of vLLM's ``ZmqEventPublisher``,
``vllm/distributed/kv_events.py``, 0.33.0):

- a PUB socket; each batch is one message of three frames ``[topic, seq, payload]``: ``seq`` the
  batch's number, counted per publisher from 0 (``itertools.count`` there), as 8 bytes big-endian,
  ``payload`` the batch's msgpack bytes (:func:`nano_engine.kv_wire.encode_batch`);
- every batch also goes into a bounded buffer (``buffer_steps`` batches, oldest dropped first);
- a ROUTER socket (``replay_endpoint``) answers a request ``[b"", start_seq as 8 bytes big-endian]``
  with every buffered batch of ``seq >= start_seq`` as ``[b"", topic, seq, payload]`` and then the end
  marker ``[b"", b"", -1 as 8 signed bytes, b""]`` (``_service_replay``). Its send high-water mark is
  ``2 * (buffer_steps + 1)`` as vLLM sets it, so a whole replay plus the marker fits.

PUB never blocks: past the high-water mark (``hwm``) it drops messages, silently. Nothing tells the
subscriber but the sequence numbers. Differences from vLLM, each on purpose: ``publish`` sends on
the caller's thread and returns the batch's ``seq`` (vLLM queues it for a publishing thread); only
the replay socket has a thread; sockets bind only to loopback or ``ipc://`` here; ``drop_rate`` is a
fault-injection hook vLLM does not have.

**Router side** (:class:`KVEventSubscriber`): a SUB socket for the live stream, a DEALER socket for
replay, and the bookkeeping that turns an unreliable stream into an exact one:

- it expects ``seq`` 0, 1, 2, ... and applies batches only in that order (``on_batch(worker, seq,
  events)``); a batch that arrives early waits in ``pending``;
- a jump in ``seq`` is a **gap** (messages dropped at a high-water mark, or lost while connecting):
  it asks the replay socket for everything from the first missing ``seq`` and fills the gap from the
  answer (``gaps_detected``, ``gaps_recovered``); a duplicate (a batch it already applied) is skipped;
- on its first ``poll`` it asks for a replay from 0: a SUB that connects loses what was published
  before the connection completed (ZeroMQ's "slow joiner"), and a router that starts after the
  engine must learn what the engine already holds (llm-d fixed exactly this: llm-d-router PR #1887);
- after ``idle_probe_ms`` without any message it asks for a replay from the next ``seq`` (a tail
  probe: the last batches of a burst can be dropped with nothing after them to show the gap);
- a live ``seq`` that goes **backwards** means the engine restarted (a new publisher counts from 0
  again; its cache is empty): ``on_reset(worker)``, then everything from 0 again
  (``restarts_detected``). Unless it is a batch heard before: the transport promises no exactly-once
  delivery (a subscriber connected to one publisher twice, over two spellings of its address or
  twice over ``inproc://``, receives every message twice; libzmq ignores a SUB's repeated connect to
  the same ``tcp://`` or ``ipc://`` endpoint), and nothing
  the stream says twice may reset a worker. A live batch whose ``seq``
  and bytes equal one of the last :data:`DUPLICATE_WINDOW` batches is a duplicate; any other
  backwards ``seq`` is first checked with the replay socket (the anchor below: the same publisher
  answers with the batch we applied last), and only a failed check is a restart. Without replay
  there is nothing to ask, and a backwards ``seq`` with new bytes is taken for a restart;
- but a restart can also come with no live batch at all, or with the new publisher already past
  the old ``seq`` when the subscriber reconnects (vLLM's format names no publisher and no epoch).
  So every replay request starts one batch early, at the last batch applied (the *anchor*), and
  the answer must begin with the very same bytes (the publisher buffers payloads as sent, and a
  batch carries its timestamp). An answer with nothing from the anchor on, or other bytes there,
  comes from another publisher: a restart, handled as above;
- an answer that starts after the anchor means the gap is older than the publisher's buffer: lost
  for good. The worker is reset and followed from the oldest batch still buffered (``resyncs``):
  the index then misses blocks stored earlier, but never keeps a block the engine dropped;
- a payload that does not decode (:class:`~nano_engine.kv_wire.WireError`: malformed, unknown event
  tag) is logged and counted (``malformed``) and its ``seq`` is passed over as if it were empty:
  a replay would return the same bytes.

Why DEALER and not REQ for replay: one request gets many replies (every buffered batch, then the
end marker). REQ is a strict one-request-one-reply socket: it takes the first reply and ignores
the rest until the next request (a second receive fails with ``EFSM``; a ROUTER streaming 4
replies delivers 1 to a REQ and all 4 to a DEALER; ``tests/test_kv_pubsub.py`` shows the first).
vLLM's example consumer (``examples/online_serving/kv_events_subscriber.py``) used REQ in the copy
read for this package. llm-d switched from REQ to DEALER ("REQ can only receive one reply per
request", llm-d-router PR #1887); Mooncake's client was a DEALER already, but sent an incomplete
request and read only one frame of the answer until its PR #3616. A DEALER adds no envelope, so the
request starts with the empty delimiter frame REQ would have added (the ROUTER expects
``[identity, b"", start_seq]``).

Every wait here has a timeout: ``poll(timeout_ms)``, a replay without its end marker after
``replay_timeout_ms`` (the DEALER is then replaced, so a late answer cannot pass for the next one),
the replay thread's 50 ms poll, ``close``'s join.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import random
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Sequence
from urllib.parse import urlsplit

import zmq

from nano_engine.checks import is_int, require, require_int
from nano_engine.kv_events import KVEvent
from nano_engine.kv_wire import WireError, decode_batch, encode_batch

logger = logging.getLogger(__name__)

END_SEQ = (-1).to_bytes(8, "big", signed=True)     # vLLM's ZmqEventPublisher.END_SEQ
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")
DUPLICATE_WINDOW = 1024
"""How many recent batches a subscriber remembers (seq and a digest of the bytes) to tell a live
batch delivered twice from a restarted publisher at once."""


def _digest(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, digest_size=16).digest()


def check_endpoint(endpoint: str) -> str:
    """``endpoint`` if it is loopback TCP, ``ipc://`` or ``inproc://``; a ValueError otherwise."""
    if not isinstance(endpoint, str):
        raise ValueError(f"endpoint must be a string like tcp://127.0.0.1:5557, got {endpoint!r}")
    if endpoint.startswith(("ipc://", "inproc://")):
        return endpoint
    if endpoint.startswith("tcp://"):
        host = urlsplit(endpoint).hostname if not endpoint.endswith(":*") else endpoint[6:-2]
        if host in LOOPBACK_HOSTS or f"[{host}]" in LOOPBACK_HOSTS:
            return endpoint
    raise ValueError(f"endpoint {endpoint!r}: only loopback TCP (tcp://127.0.0.1:PORT, port 0 or * for a "
                     "free one) or ipc:// / inproc:// are allowed here")


def _bind(sock: zmq.Socket, endpoint: str) -> str:
    """Bind; a TCP port of 0 or ``*`` picks a free port. Returns the endpoint actually bound."""
    endpoint = check_endpoint(endpoint)
    if endpoint.startswith("tcp://") and endpoint.rsplit(":", 1)[1] in ("0", "*"):
        endpoint = endpoint.rsplit(":", 1)[0] + ":*"
    try:
        sock.bind(endpoint)
    except zmq.ZMQError as error:
        raise ValueError(f"cannot bind {endpoint}: {error} (port 0 picks a free one)") from None
    return sock.getsockopt_string(zmq.LAST_ENDPOINT)


def _ipc_path(endpoint: str) -> str | None:
    """The file an ``ipc://`` endpoint binds (None for another transport, or Linux's abstract ``@`` names)."""
    if not endpoint.startswith("ipc://") or endpoint.startswith("ipc://@"):
        return None
    return endpoint[len("ipc://"):]


def _same_address(a: str, b: str) -> bool:
    """Do two endpoints name one address (the same ipc:// file, or the same TCP host and fixed port)?"""
    if _ipc_path(a) is not None and _ipc_path(b) is not None:
        return os.path.abspath(_ipc_path(a) or "") == os.path.abspath(_ipc_path(b) or "")
    return a == b and not a.endswith((":0", ":*"))


def _seq_bytes(seq: int) -> bytes:
    return seq.to_bytes(8, "big")


class KVEventPublisher:
    """An engine's KV events on a PUB socket, with a replay buffer behind a ROUTER socket.

    Args:
        endpoint: where the PUB socket binds (``tcp://127.0.0.1:PORT``; port ``0`` or ``*``: a free
            one; or ``ipc://PATH``). ``bound_endpoints`` tells the addresses actually bound.
        replay_endpoint: where the ROUTER replay socket binds; None: no replay.
        topic: the first frame of every message (vLLM's ``KVEventsConfig.topic``).
        buffer_steps: batches kept for replay (vLLM's default, 10,000).
        hwm: the PUB socket's send high-water mark (vLLM's default, 100,000).
        drop_rate: fault injection: this fraction of batches (drawn with ``seed``) is buffered for
            replay but never sent on PUB, as if the network had dropped it.
        data_parallel_rank: written into every batch (vLLM's ``data_parallel_rank``).
        context: a ``zmq.Context`` to make the sockets in (left open by ``close``); None: an own one,
            terminated by ``close``.
    """

    def __init__(self, endpoint: str, replay_endpoint: str | None = None, *, topic: bytes = b"kv-events",
                 buffer_steps: int = 10_000, hwm: int = 100_000, drop_rate: float = 0.0, seed: int = 0,
                 data_parallel_rank: int | None = None, context: zmq.Context | None = None) -> None:
        if not isinstance(topic, bytes):
            raise ValueError(f"topic must be bytes, got {topic!r}")
        require_int("buffer_steps", buffer_steps)
        require(is_int(hwm) and hwm >= 0, "hwm", "an integer >= 0 (0: no limit)", hwm)
        if not 0.0 <= drop_rate <= 1.0:
            raise ValueError(f"drop_rate must be in [0, 1], got {drop_rate!r}")
        check_endpoint(endpoint)
        if replay_endpoint is not None:
            check_endpoint(replay_endpoint)
            if _same_address(endpoint, replay_endpoint):
                raise ValueError(f"the replay endpoint must differ from the PUB endpoint, got {endpoint} for both "
                                 "(ipc://: the second bind would take the first one's socket file)")
        self.topic, self.buffer_steps, self.drop_rate = topic, buffer_steps, drop_rate
        self.data_parallel_rank = data_parallel_rank
        self.num_dropped = 0                      # batches drop_rate kept off the PUB socket
        self._rng = random.Random(seed)
        self._seq = itertools.count()
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._lock = threading.Lock()             # the buffer, between publish() and the replay thread
        self._closed = False
        self._own_ctx = context is None
        self._ctx = zmq.Context() if context is None else context
        self._pub: zmq.Socket | None = None
        self._replay: zmq.Socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._socket_files: list[tuple[str, int, int]] = []   # ipc:// files we bound: (path, device, inode)
        try:
            self._pub = self._ctx.socket(zmq.PUB)
            self._pub.setsockopt(zmq.SNDHWM, hwm)
            self._pub.setsockopt(zmq.LINGER, 0)
            self.endpoint = self._bind(self._pub, endpoint)
            self.replay_endpoint: str | None = None
            if replay_endpoint is not None:
                self._replay = self._ctx.socket(zmq.ROUTER)
                self._replay.setsockopt(zmq.SNDHWM, 2 * (buffer_steps + 1))
                self._replay.setsockopt(zmq.LINGER, 0)
                self.replay_endpoint = self._bind(self._replay, replay_endpoint)
        except BaseException:
            self._close_sockets()
            raise
        if self._replay is not None:
            self._thread = threading.Thread(target=self._serve_replay, name="kv-replay", daemon=True)
            self._thread.start()

    def _bind(self, sock: zmq.Socket, endpoint: str) -> str:
        bound = _bind(sock, endpoint)
        path = _ipc_path(bound)
        if path is not None:
            try:
                st = os.stat(path)
                self._socket_files.append((path, st.st_dev, st.st_ino))
            except OSError:
                pass
        return bound

    @property
    def bound_endpoints(self) -> tuple[str, str | None]:
        """``(endpoint, replay_endpoint)`` as bound (a free port resolved)."""
        return self.endpoint, self.replay_endpoint

    @property
    def next_seq(self) -> int:
        """The ``seq`` the next batch will get (= batches published so far)."""
        with self._lock:
            return self._buffer[-1][0] + 1 if self._buffer else 0

    def publish(self, events: Sequence[KVEvent], ts: float | None = None) -> int:
        """Send one batch (``ts``: now by default); returns its ``seq``."""
        if self._closed or self._pub is None:
            raise RuntimeError("publish on a closed KVEventPublisher")
        payload = encode_batch(events, time.time() if ts is None else ts, self.data_parallel_rank)
        with self._lock:
            seq = next(self._seq)
            self._buffer.append((seq, payload))
        if self.drop_rate and self._rng.random() < self.drop_rate:
            self.num_dropped += 1
        else:
            self._pub.send_multipart((self.topic, _seq_bytes(seq), payload))   # PUB drops at the HWM, silently
        return seq

    def _serve_replay(self) -> None:
        """The replay thread: the only user of the ROUTER socket."""
        sock = self._replay
        assert sock is not None
        while not self._stop.is_set():
            try:
                if not sock.poll(50):
                    continue
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.ZMQError:
                if self._stop.is_set():
                    return
                raise
            if len(frames) != 3 or frames[1] != b"" or len(frames[2]) != 8:
                logger.warning("KV replay: ignoring a malformed request of %d frames %r (expected "
                               "[b'', start seq as 8 bytes big-endian])", len(frames) - 1, frames[1:])
                continue
            client, _, start = frames
            start_seq = int.from_bytes(start, "big")
            with self._lock:
                batches = [(seq, payload) for seq, payload in self._buffer if seq >= start_seq]
            try:
                for seq, payload in batches:
                    sock.send_multipart((client, b"", self.topic, _seq_bytes(seq), payload))
                sock.send_multipart((client, b"", b"", END_SEQ, b""))
            except zmq.ZMQError as error:       # the thread must survive one bad answer (vLLM logs it too)
                if self._stop.is_set():
                    return
                logger.warning("KV replay: answering from seq %d failed: %s", start_seq, error)

    def close(self) -> None:
        """Stop the replay thread, close the sockets and terminate an own context (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            if self._thread.is_alive():
                logger.warning("KV replay thread did not stop within 5 s")
        self._close_sockets()

    def _close_sockets(self) -> None:
        for sock in (self._pub, self._replay):
            if sock is not None:
                sock.close(linger=0)
        if self._own_ctx:
            self._ctx.term()
        # libzmq (4.3.5) leaves an ipc:// socket's file behind: remove ours, unless another
        # publisher has bound the path since (then the file is not the one we made)
        for path, device, inode in self._socket_files:
            try:
                st = os.stat(path)
                if (st.st_dev, st.st_ino) == (device, inode):
                    os.unlink(path)
            except OSError:
                pass
        self._socket_files = []

    def __enter__(self) -> KVEventPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class KVEventSubscriber:
    """One worker's KV event stream, made exact: gaps refilled by replay, restarts resynced.

    Args:
        endpoint: the publisher's PUB address (connected to).
        replay_endpoint: its ROUTER replay address; None: gaps are detected but not recovered.
        worker: the name passed to the callbacks (which engine this stream is).
        on_batch: ``on_batch(worker, seq, events)`` for every batch, in ``seq`` order, once.
        on_reset: ``on_reset(worker)`` when what the worker holds must be forgotten: the engine
            restarted (its cache is empty), or batches were lost for good and the stream is
            resumed from the oldest batch the publisher still has.
        topic: the topic prefix subscribed to.
        replay: use the replay socket (catch-up on the first ``poll``, gaps, tail probes).
        replay_timeout_ms: how long to wait for a replay's end marker before asking again.
        max_replay_attempts: requests in a row for one missing ``seq`` before giving it up.
        idle_probe_ms: after this long without any message, ask for a replay from the next ``seq``
            (a *tail probe*): the last batches of a burst can be dropped with no later batch to
            reveal the gap, and a subscriber that started before its publisher hears nothing live.
            An up-to-date subscriber gets just its last batch and the end marker back.
        rcvhwm: the SUB socket's receive high-water mark.
        context: a ``zmq.Context`` to make the sockets in (left open by ``close``); None: an own one,
            terminated by ``close``. One context for many subscribers saves an I/O thread each.

    Counters: ``batches_applied``, ``gaps_detected``, ``gaps_recovered``, ``gaps_lost``,
    ``restarts_detected``, ``resyncs`` (resumed after a loss), ``malformed``, ``duplicates``,
    ``live_received`` (messages that came on SUB), ``replay_requests``.
    """

    def __init__(self, endpoint: str, replay_endpoint: str | None = None, *, worker: Hashable = 0,
                 on_batch: Callable[[Hashable, int, list[KVEvent]], None],
                 on_reset: Callable[[Hashable], None] | None = None, topic: bytes = b"kv-events",
                 replay: bool = True, replay_timeout_ms: int = 1000, max_replay_attempts: int = 3,
                 idle_probe_ms: int = 1000, rcvhwm: int = 100_000, context: zmq.Context | None = None) -> None:
        check_endpoint(endpoint)
        if replay_endpoint is not None:
            check_endpoint(replay_endpoint)
        self.endpoint, self.replay_endpoint, self.worker = endpoint, replay_endpoint, worker
        self.on_batch, self.on_reset, self.topic = on_batch, on_reset, topic
        self.replay = replay and replay_endpoint is not None
        self.replay_timeout_ms, self.max_replay_attempts = replay_timeout_ms, max_replay_attempts
        self.idle_probe_ms = idle_probe_ms
        self.batches_applied = self.gaps_detected = self.gaps_recovered = self.gaps_lost = 0
        self.restarts_detected = self.resyncs = self.malformed = self.duplicates = 0
        self.live_received = self.replay_requests = 0
        self.expected = 0                      # the next seq to apply
        self.pending: dict[int, bytes] = {}    # batches that arrived ahead of `expected`
        self._last_payload: bytes | None = None  # the bytes of batch expected - 1 (the replay anchor)
        self._open_gaps: list[int] = []        # end (exclusive) of each gap not yet filled, ascending
        self._highest = -1                     # highest seq seen (live or replayed)
        self._last_live: int | None = None     # last seq seen on the live stream
        self._replay_sent: float | None = None  # monotonic time of the replay request in flight
        self._replay_start = -1                # the first seq the last request needs
        self._replay_anchor = -1               # the seq it asked from (start - 1 to check continuity)
        self._replay_unanswered = False        # no message of its answer yet
        self._replay_attempts = 0              # requests in a row with that start
        self._recent: OrderedDict[int, bytes] = OrderedDict()   # seq -> digest of its bytes, the last batches
        self._check_restart = False            # a live seq went backwards: ask the replay socket before resetting
        self._started = False
        self._warned_silent = False
        self._silent_ms = 0                    # time polled before anything arrived
        self._last_message = time.monotonic()  # when the last message (live or replayed) arrived
        self._closed = False
        self._own_ctx = context is None
        self._ctx = zmq.Context() if context is None else context
        self._sub = self._ctx.socket(zmq.SUB)
        self._sub.setsockopt(zmq.RCVHWM, rcvhwm)
        self._sub.setsockopt(zmq.LINGER, 0)
        self._sub.setsockopt(zmq.RECONNECT_IVL, 20)
        self._sub.setsockopt(zmq.SUBSCRIBE, topic)
        self._sub.connect(endpoint)
        self._dealer: zmq.Socket | None = None
        self._poller = zmq.Poller()
        self._poller.register(self._sub, zmq.POLLIN)
        self._timeouts_in_row = 0
        if self.replay:
            self._open_dealer()

    def _open_dealer(self) -> None:
        """A fresh DEALER for replay (after a timeout: a late answer to the old one must not be
        mistaken for the answer to the next request, and the end marker names no request)."""
        if self._dealer is not None:
            self._poller.unregister(self._dealer)
            self._dealer.close(linger=0)
        self._dealer = self._ctx.socket(zmq.DEALER)
        self._dealer.setsockopt(zmq.LINGER, 0)
        self._dealer.setsockopt(zmq.RCVHWM, 0)        # a replay is bounded by the publisher's buffer
        self._dealer.setsockopt(zmq.RECONNECT_IVL, 20)
        self._dealer.connect(self.replay_endpoint)   # type: ignore[arg-type]
        self._poller.register(self._dealer, zmq.POLLIN)

    # -- the loop -------------------------------------------------------------------------------------

    def poll(self, timeout_ms: int) -> int:
        """Wait up to ``timeout_ms`` for messages, handle all that are there; returns batches applied."""
        if self._closed:
            raise RuntimeError("poll on a closed KVEventSubscriber")
        before = self.batches_applied
        if not self._started:
            self._started = True
            if self.replay:
                self._request_replay(0)          # catch up: slow joiner, or a router started late
        ready = dict(self._poller.poll(timeout_ms))
        if self._dealer is not None and self._dealer in ready:
            self._drain(self._dealer, live=False)
        if self._sub in ready:
            self._drain(self._sub, live=True)
        now = time.monotonic()
        if ready:
            self._last_message = now
        self._check_replay_timeout()
        if self.replay and self._replay_sent is None and (now - self._last_message) * 1000 >= self.idle_probe_ms:
            self._last_message = now
            self._request_replay(self.expected)  # tail probe
        if not ready and self._last_live is None and self.batches_applied == 0:
            self._silent_ms += timeout_ms
            if self._silent_ms >= self.replay_timeout_ms and not self._warned_silent:
                self._warned_silent = True
                logger.warning("KV events: nothing from %s after %d ms (publisher not started yet, or idle); "
                               "still waiting", self.endpoint, self._silent_ms)
        return self.batches_applied - before

    def _drain(self, sock: zmq.Socket, live: bool, limit: int = 100_000) -> None:
        for _ in range(limit):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if not live:                          # DEALER: the ROUTER's empty delimiter first
                if not frames or frames[0] != b"":
                    self._bad_frames(frames, "replay")
                    continue
                frames = frames[1:]
            if len(frames) != 3 or len(frames[1]) != 8:
                self._bad_frames(frames, "live" if live else "replay")
                continue
            _, seq_bytes, payload = frames
            if live:
                self.live_received += 1
                self._on_live(int.from_bytes(seq_bytes, "big"), payload)
            else:
                self._on_replayed(int.from_bytes(seq_bytes, "big", signed=True), payload)

    def _bad_frames(self, frames: list[bytes], where: str) -> None:
        self.malformed += 1
        logger.warning("KV events from %s: ignoring a %s message of %d frames (expected [topic, seq as "
                       "8 bytes, payload])", self.endpoint, where, len(frames))

    def _on_live(self, seq: int, payload: bytes) -> None:
        if self._last_live is not None and seq <= self._last_live:
            if self._recent.get(seq) == _digest(payload):
                self.duplicates += 1             # the same batch again (a repeated delivery): nothing new
                return
            if self.replay and self.expected > 0 and self._last_payload is not None:
                self._suspect_restart(seq)       # the replay socket decides; this batch is replayed if needed
                return
            self._restart(f"seq went backwards ({seq} after {self._last_live})")
        self._last_live = seq
        self._on_batch(seq, payload)

    def _suspect_restart(self, seq: int) -> None:
        """A live ``seq`` at or below the last live one, with bytes not heard before: a restarted
        publisher, or an old batch delivered again. Ask for a replay from the last batch applied:
        the same publisher answers with those very bytes (then nothing happened), a new one cannot."""
        logger.info("KV events from %s: seq %d after %d on the live stream; checking with the replay socket",
                    self.endpoint, seq, self._last_live)
        if not self._check_restart:
            self._check_restart = True
            if self._replay_sent is None:
                self._request_replay(self.expected)

    def _remember(self, seq: int, payload: bytes) -> None:
        self._recent[seq] = _digest(payload)
        self._recent.move_to_end(seq)
        while len(self._recent) > DUPLICATE_WINDOW:
            self._recent.popitem(last=False)

    def _on_batch(self, seq: int, payload: bytes) -> None:
        """A batch from either socket: apply it if it is next, keep it if early, skip it if known."""
        if seq < self.expected or seq in self.pending:
            self.duplicates += 1
            return
        self._remember(seq, payload)
        if seq > self._highest + 1:
            self.gaps_detected += 1
            self._open_gaps.append(seq)
            logger.info("KV events from %s: gap, seq %d..%d missing", self.endpoint, self._highest + 1, seq - 1)
            if not self.replay:
                logger.warning("KV events from %s (worker %r): seq %d..%d lost and replay is off; the "
                               "index may miss or keep blocks", self.endpoint, self.worker, self._highest + 1,
                               seq - 1)
        self._highest = max(self._highest, seq)
        self.pending[seq] = payload
        if not self.replay and seq > self.expected:
            self._skip_to(seq)
        self._apply_ready()
        if self.replay and self.expected <= self._highest and self._replay_sent is None:
            self._request_replay(self.expected)

    def _apply_ready(self) -> None:
        while self.expected in self.pending:
            seq = self.expected
            payload = self.pending.pop(seq)
            try:
                _, events, _ = decode_batch(payload)
            except WireError as error:
                self.malformed += 1
                logger.warning("KV events from %s (worker %r): batch seq %d skipped: %s",
                               self.endpoint, self.worker, seq, error)
                events = None
            self.expected, self._last_payload = seq + 1, payload
            if events is not None:
                self.on_batch(self.worker, seq, events)
                self.batches_applied += 1
            while self._open_gaps and self.expected >= self._open_gaps[0]:
                self._open_gaps.pop(0)
                self.gaps_recovered += 1

    def _skip_to(self, seq: int) -> None:
        """Without replay: accept that ``expected .. seq - 1`` are lost and go on from ``seq``."""
        lost = [end for end in self._open_gaps if end <= seq]
        self.gaps_lost += len(lost)
        self._open_gaps = self._open_gaps[len(lost):]
        self.expected = seq

    def _forget(self) -> None:
        """Drop the stream's state and the worker's blocks (``on_reset``)."""
        self.gaps_lost += len(self._open_gaps)
        self._open_gaps.clear()
        self.pending.clear()
        self.expected, self._highest, self._last_payload, self._last_live = 0, -1, None, None
        self._replay_sent, self._replay_start, self._replay_anchor, self._replay_attempts = None, -1, -1, 0
        self._recent.clear()
        self._check_restart = False
        if self.on_reset is not None:
            self.on_reset(self.worker)

    def _restart(self, why: str) -> None:
        """The publisher is a new one (its seq starts at 0 again, its cache is empty): start over."""
        self.restarts_detected += 1
        logger.warning("KV events from %s (worker %r): %s: the engine restarted; resetting the worker and "
                       "resyncing from seq 0", self.endpoint, self.worker, why)
        self._forget()
        if self.replay:
            self._request_replay(0)

    def _resync_from(self, first: int, why: str) -> None:
        """Batches before ``first`` are lost for good: forget the worker, resume from ``first``.

        The index then misses the blocks stored before ``first`` that the engine still holds, but
        never keeps one it dropped (a removal it never saw): under-reporting costs a router a hit,
        a stale block sends a request where its prefix no longer is.
        """
        self.resyncs += 1
        logger.warning("KV events from %s (worker %r): %s; resetting the worker and resuming from seq %d (its "
                       "blocks stored earlier are unknown until stored again)", self.endpoint, self.worker, why,
                       first)
        pending = {seq: payload for seq, payload in self.pending.items() if seq >= first}
        highest, last_live = self._highest, self._last_live    # the same publisher: its seq goes on
        self._forget()
        self.pending, self.expected, self._highest = pending, first, max(highest, first - 1)
        self._last_live = last_live
        for seq, payload in pending.items():
            self._remember(seq, payload)
        self._apply_ready()

    # -- replay ---------------------------------------------------------------------------------------

    def _request_replay(self, start: int) -> None:
        """Ask for every buffered batch from ``start`` (from ``start - 1`` when that is the last batch
        applied: the answer must begin with the same bytes, or the publisher is not the one we follow)."""
        assert self._dealer is not None
        anchor = start - 1 if start > 0 and start == self.expected and self._last_payload is not None else start
        try:
            self._dealer.send_multipart((b"", _seq_bytes(anchor)), zmq.NOBLOCK)
        except zmq.Again:
            logger.warning("KV events: replay request to %s could not be queued", self.replay_endpoint)
        # attempts count the requests in a row for one start: a replay that moved `expected` on
        # was progress (drops during a long stream are normal), one that did not may be hopeless
        self._replay_attempts = self._replay_attempts + 1 if start == self._replay_start else 1
        self._replay_sent, self._replay_start, self._replay_anchor = time.monotonic(), start, anchor
        self._replay_unanswered = True
        self.replay_requests += 1

    def _on_replayed(self, seq: int, payload: bytes) -> None:
        first, self._replay_unanswered = self._replay_unanswered, False
        checking = first and self._replay_anchor == self.expected - 1 >= 0
        if seq == -1:                                   # the end marker
            self._replay_sent, self._timeouts_in_row = None, 0
            if checking:
                self._restart(f"the replay socket holds nothing from seq {self._replay_anchor}, the last "
                              "batch applied")
            else:
                self._on_replay_end()
            return
        if checking and seq == self._replay_anchor:
            if payload != self._last_payload:
                self._restart(f"replayed batch seq {seq} differs from the one applied")
                self._on_batch(seq, payload)            # the new publisher's batch: kept for after 0 .. seq-1
            else:
                self.duplicates += 1
                if self._check_restart:                 # the same publisher: a backwards live seq was a repeat
                    self._check_restart = False
                    self.duplicates += 1
            return
        if checking and seq > self._replay_anchor:
            self._resync_from(seq, f"the replay buffer starts at seq {seq}, after the last batch applied "
                                   f"({self._replay_anchor})")
            return
        self._on_batch(seq, payload)

    def _on_replay_end(self) -> None:
        if self._check_restart and self._replay_sent is None:
            if self._replay_start == self.expected and self._replay_attempts >= self.max_replay_attempts:
                self._restart(f"seq went backwards on the live stream and {self._replay_attempts} replay "
                              "requests did not show the same publisher")
            else:
                self._request_replay(self.expected)   # the answer checked nothing (it started elsewhere): again
            return
        if self.expected > self._highest:
            self._replay_attempts = 0           # nothing missing: the next request starts a new count
            return
        # The replay is over and `expected` is still missing.
        if self._replay_start == self.expected and self._replay_attempts >= self.max_replay_attempts:
            first = min(self.pending) if self.pending else self._highest + 1
            self._resync_from(first, f"seq {self.expected}..{first - 1} not recovered after "
                                     f"{self._replay_attempts} replay requests")
        if self.expected <= self._highest:
            self._request_replay(self.expected)

    def _check_replay_timeout(self) -> None:
        if self._replay_sent is None:
            return
        if (time.monotonic() - self._replay_sent) * 1000 < self.replay_timeout_ms:
            return
        self._timeouts_in_row += 1
        log = logger.warning if self._timeouts_in_row == 1 else logger.debug    # once per silence
        log("KV events: no end of replay from %s within %d ms (publisher not up, or its answer was dropped)",
            self.replay_endpoint, self.replay_timeout_ms)
        self._replay_sent = None
        self._replay_unanswered = False
        self._open_dealer()
        self._on_replay_end()

    @property
    def in_sync(self) -> bool:
        """Every batch seen so far applied, no replay in flight."""
        return self.expected > self._highest and self._replay_sent is None

    def close(self) -> None:
        """Close both sockets and terminate an own context (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._sub.close(linger=0)
        if self._dealer is not None:
            self._dealer.close(linger=0)
        if self._own_ctx:
            self._ctx.term()

    def __enter__(self) -> KVEventSubscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StepBatcher:
    """A pool's KV events, gathered and published as one batch per engine step.

    vLLM publishes once per scheduler step, and only when the step produced events
    (``vllm/v1/core/sched/scheduler.py``, 0.33.0: ``Scheduler.update_from_output`` takes the KV cache
    manager's events and calls ``publisher.publish(KVEventBatch(ts=time.time(), events=events))``).
    ``source`` is anything with ``subscribe(callback) -> unsubscribe``: a
    :class:`~nano_engine.prefix_cache.PrefixCachingBlockPool` (an ``LLMEngine``'s is
    ``engine.cache.pool``). Call :meth:`flush` after each step.
    """

    def __init__(self, source, publisher: KVEventPublisher) -> None:
        self.publisher = publisher
        self.events: list[KVEvent] = []
        self.num_events = self.num_batches = 0
        self._unsubscribe: Callable[[], None] = source.subscribe(self.events.append)

    def flush(self) -> int | None:
        """Publish the events gathered since the last flush as one batch; its seq, or None if none."""
        if not self.events:
            return None
        seq = self.publisher.publish(self.events)
        self.num_events += len(self.events)
        self.num_batches += 1
        self.events.clear()
        return seq

    def close(self) -> None:
        """Stop listening to the pool (what is gathered and not flushed is dropped)."""
        self._unsubscribe()
