"""A GPU's copy streams, emulated on the CPU: copies that really run later.

On CPU the host tier's copies are synchronous (``host_tier.CopyEngine`` runs each one to the end
before it returns), so the CPU tests never see a copy in flight. A GPU runs them on copy streams
while it computes, and the engine finds out they are done only when an event says so. Its CUDA
branch is tested here by handing the copy engine :class:`DeferredStreams` in place of
``host_tier.CudaStreams`` (``CopyEngine.use_streams``):

* ``launch(stream, work)`` runs ``work`` at once, but every tensor copy it issues (``copy``) is
  only *queued* on the stream, followed by an event; the bytes move later;
* a queued copy runs when the compute side waits for its event (``wait``), on ``synchronize``, or
  when an event query finds it done. When that is, is the completion ``policy``:
  ``"next_step"`` (a copy finishes within one engine step: an event recorded in step ``n``
  answers "done" from step ``n + 1`` on), ``"forced"`` (a slow link: only waits and synchronize
  finish copies; every query answers "not yet"), ``"random"`` (each query finishes the copy with
  probability one half, seeded: a race);
* compute is synchronous (the CPU runs it at once), so the checks below catch what a GPU would get
  wrong: attention reading a device slot that a queued load has not written yet (RAW), and the
  forward writing a slot that a queued store has not read yet (WAR: the host copy would be of the
  new data) or that a queued load will overwrite (WAW). :func:`watch_compute` records them as
  :attr:`DeferredStreams.hazards`, where the engine touches its KV (``KVCache.store`` and the
  reference attention's reads, right after ``KVCache.wait_layer``).

The same idea as ``../shared/tools/gpu_emulation/async_copy_emulation.py`` (the static review's
tool), written for the test suite.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from nano_engine.attention import PagedAttention, context_slots
from nano_engine.kv_cache import KVCache

POLICIES = ("next_step", "forced", "random")


@dataclass
class QueuedCopy:
    """One tensor copy waiting on a stream; ``kind`` "store" reads device ``slots`` of ``layer``,
    "load" writes them."""

    run: Callable[[], None]
    layer: int
    kind: str
    slots: set[int]


@dataclass(eq=False)
class DeferredEvent:
    stream: DeferredStream
    step: int
    done: bool = False

    def query(self) -> bool:
        world = self.stream.world
        if not self.done:
            if world.policy == "next_step" and world.step > self.step:
                self.stream.flush(until=self)
            elif world.policy == "random" and world.rng.random() < 0.5:
                self.stream.flush(until=self)
        return self.done

    def synchronize(self) -> None:
        if not self.done:
            self.stream.flush(until=self)


@dataclass(eq=False)
class DeferredStream:
    name: str
    world: DeferredStreams
    queue: list[QueuedCopy | DeferredEvent] = field(default_factory=list)

    def flush(self, until: DeferredEvent | None = None) -> None:
        """Run what is queued, in order, up to and including ``until``'s mark (all if None)."""
        while self.queue:
            item = self.queue.pop(0)
            if isinstance(item, DeferredEvent):
                item.done = True
                if item is until:
                    return
            else:
                item.run()
                self.world.num_ran += 1


class DeferredStreams:
    """What ``CopyEngine`` needs of a GPU (``host_tier.Streams``), with every copy deferred.

    Counters: ``num_queued`` tensor copies queued, ``num_ran`` run, ``num_waits`` compute waits;
    ``hazards``: ``(what, layer, slots)`` found by :func:`watch_compute`."""

    def __init__(self, policy: str = "next_step", seed: int = 0) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        self.policy, self.rng = policy, random.Random(seed)
        self.step = 0
        self.load = DeferredStream("load", self)
        self.store = DeferredStream("store", self)
        self.current: DeferredStream | None = None
        self.kv: KVCache | None = None
        self.hazards: list[tuple[str, int, int]] = []
        self.num_queued = self.num_ran = self.num_waits = 0

    # -- host_tier.Streams -------------------------------------------------------------------------

    def launch(self, stream: DeferredStream, work: Callable[[], None], keep: Sequence[torch.Tensor] = ()):
        self.current = stream
        try:
            work()
        finally:
            self.current = None
        event = DeferredEvent(stream, self.step)
        stream.queue.append(event)
        return event

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        assert self.current is not None, "a copy issued outside launch() would run on the compute stream"
        where = self._device_slots(dst)
        kind = "load" if where is not None else "store"
        if where is None:
            where = self._device_slots(src)
        layer, slots = where if where is not None else (-1, set())
        self.current.queue.append(QueuedCopy(lambda: dst.copy_(src), layer, kind, slots))
        self.num_queued += 1

    def wait(self, event: DeferredEvent) -> None:
        self.num_waits += 1
        event.synchronize()

    def synchronize(self) -> None:
        self.load.flush()
        self.store.flush()

    # -- the checks ----------------------------------------------------------------------------------

    def pending(self) -> Iterator[QueuedCopy]:
        for stream in (self.load, self.store):
            yield from (item for item in stream.queue if isinstance(item, QueuedCopy))

    def _device_slots(self, view: torch.Tensor) -> tuple[int, set[int]] | None:
        """(layer, slots) if ``view`` is a slice of the watched device cache's K or V, else None."""
        kv = self.kv
        if kv is None:
            return None
        for layer, (k, v) in enumerate(zip(kv.k, kv.v, strict=True)):
            for base in (k, v):
                if view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr():
                    row = base.stride(0)
                    first = (view.storage_offset() - base.storage_offset()) // row
                    return layer, set(range(first, first + view.shape[0]))
        return None

    def check_write(self, layer: int, slots: set[int], where: str) -> None:
        for op in self.pending():
            both = op.slots & slots
            if op.layer == layer and both:
                what = "WAR: a queued store has not read" if op.kind == "store" else "WAW: a queued load will overwrite"
                self.hazards.append((f"{where} writes slots {what} them", layer, len(both)))

    def check_read(self, layer: int, slots: set[int], where: str) -> None:
        for op in self.pending():
            both = op.slots & slots
            if op.kind == "load" and op.layer == layer and both:
                self.hazards.append((f"{where} reads slots a queued load has not written", layer, len(both)))


@contextmanager
def deferred_copies(engine, policy: str = "next_step", seed: int = 0, layerwise: bool | None = None):
    """Run ``engine``'s host-tier copies on :class:`DeferredStreams` and watch its compute: a
    context manager yielding the streams (``streams.hazards`` must stay empty). ``layerwise=False``
    makes the forward wait for whole loads, as the Triton and CUDA-graph paths do."""
    streams = DeferredStreams(policy, seed)
    streams.kv = engine.kv_cache
    copies = engine.cache.copies
    copies.use_streams(streams)
    if layerwise is not None:
        copies.layerwise = layerwise
    real_step = engine.step

    def step():
        streams.step += 1
        return real_step()

    engine.step = step
    with watch_compute(streams):
        yield streams
    del engine.step


@contextmanager
def watch_compute(streams: DeferredStreams):
    """Record hazards where the engine's compute touches ``streams.kv``: writes in
    ``KVCache.store``, the reference attention's reads right after ``KVCache.wait_layer``."""
    real_store, real_wait, real_attend = KVCache.store, KVCache.wait_layer, PagedAttention.attend
    reads: dict[int, set[int]] = {}

    def store(self, layer, k, v, slot_mapping):
        if self is streams.kv:
            streams.check_write(layer, {s for s in slot_mapping.tolist() if s >= 0}, "KVCache.store")
        return real_store(self, layer, k, v, slot_mapping)

    def wait_layer(self, layer):
        real_wait(self, layer)
        if self is streams.kv:
            streams.check_read(layer, reads.get(id(self), set()), "attention")

    def attend(self, layer_idx, q, k, v):
        md = self.metadata
        slots: set[int] = set()
        for i, n in enumerate(md.context_lens):
            slots |= set(context_slots(md.page_table[i:i + 1], n, md.page_size)[0].tolist())
        reads[id(self.cache)] = slots
        return real_attend(self, layer_idx, q, k, v)

    KVCache.store, KVCache.wait_layer, PagedAttention.attend = store, wait_layer, attend   # type: ignore[method-assign]
    try:
        yield
    finally:
        KVCache.store, KVCache.wait_layer, PagedAttention.attend = real_store, real_wait, real_attend  # type: ignore[method-assign]
