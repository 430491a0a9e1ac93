"""host_tier.py: a second tier of KV memory in host RAM, and the copies between the two tiers.

The device pool (``kv_cache.KVCache``) is small and fast; host memory is large and far away (a PCIe
link on a GPU machine). Instead of throwing evicted KV away, SGLang and vLLM can keep it one tier
down, each as an opt-in: SGLang's HiCache (``python/sglang/srt/mem_cache/hiradix_cache.py``, release
0.5.9; ``--enable-hierarchical-cache``) under its radix tree, vLLM's native offloading
(``vllm/v1/kv_offload/``, release 0.33.0; ``--kv-offloading-size``) under its hashed blocks.
This module holds what the two caches share (:mod:`nano_engine.hiradix` and
:mod:`nano_engine.offload` put a tree and a hash table on top):

* :class:`HostKVPool`: pages of host memory with the device pool's layout (per layer K and V
  ``[slots, kv_heads, head_dim]``, layer first as SGLang 0.5.9's default ``layer_first``), page
  ids from a :class:`~nano_engine.paged.BlockPool`. On CUDA the tensors are *pinned* (page-locked),
  which is what lets a copy run as DMA while the GPU computes; on CPU they are ordinary tensors.
* :class:`Copy` and :class:`CopyEngine`: a copy is *submitted* (queued), *started*, then
  *acknowledged*. Until the acknowledgement the caller keeps the source locked and the destination
  unreadable (SGLang: ``inc_lock_ref`` until ``writing_check``; vLLM: a CPU block's ``ref_cnt`` is
  -1 until ``complete_store``). On CUDA a copy runs on the engine's own stream and is acknowledged
  when its event has fired; loads record one event per layer, so attention for layer *i* can start
  as soon as layer *i* has arrived (``KVCache.wait_layer``). **On CPU a copy is synchronous**:
  ``start`` does the whole copy before it returns, nothing overlaps, and every "transfer time" this
  package shows for CPU runs comes from :class:`BandwidthModel`, labelled as a model.
* A copy that raises stays queued (nothing was acknowledged) and is started again next time: the
  source is still locked, so the same bytes are copied again. The caches rely on that: a failed
  load never lets anything read a half-written page, because the destination is read only by a
  forward that runs after ``start_loads`` returned.

Without a KV cache bound (``CopyEngine(None, host)``) copies move no data and only count bytes:
what the trace replays of ``python -m nano_engine hitrate --host-capacity`` use.

Not run on a GPU in this project's tests: the CUDA branches (pinned memory, the copy stream,
per-layer events) are written device-agnostically and exercised on CPU only through their
synchronous fallback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from nano_engine.kv_cache import KVCache
from nano_engine.paged import BlockPool

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
"""When a device page is copied to the host (SGLang's ``--hicache-write-policy``):

* ``write_through``: as soon as it is cached (every inserted node; vLLM: every newly full block).
  The host tier is then *inclusive*: it holds a copy of (almost) everything on the device, so the
  two tiers together hold about max(host, device) distinct tokens; SGLang 0.5.9 therefore requires a
  host pool larger than the device pool (``--hicache-ratio`` default 2).
* ``write_through_selective``: on the second hit (SGLang: ``write_through_threshold = 2``; vLLM's
  ``store_threshold``): fewer bytes moved, only data used twice is kept.
* ``write_back``: only when the device evicts it. Closer to *exclusive* (about host + device
  tokens), fewest bytes for data that is never evicted, but the copy sits on the eviction path:
  the eviction waits for it.
"""


@dataclass
class BandwidthModel:
    """Transfer time as ``latency + bytes / bandwidth``: a *model*, not a measurement.

    The default, 25 GB/s, is a PCIe 4.0 x16 link at about 80% of its 32 GB/s peak; an H100/H200 on
    PCIe 5.0 sees roughly twice that. Use it to label CPU runs, where nothing is transferred over a
    link at all (host and "device" are the same RAM)."""

    bytes_per_s: float = 25e9
    latency_s: float = 10e-6

    def seconds(self, num_bytes: int) -> float:
        return self.latency_s + num_bytes / self.bytes_per_s if num_bytes else 0.0


class HostKVPool:
    """``num_pages`` pages of ``page_size`` token slots of KV in host memory.

    ``like``: the device :class:`~nano_engine.kv_cache.KVCache` whose layout to copy (None: no
    tensors, page bookkeeping only, for trace replays). ``bytes_per_token`` then defaults to
    Qwen3-0.6B's 112 KiB in bfloat16, the figure the chapters use."""

    def __init__(self, num_pages: int, page_size: int, like: KVCache | None = None,
                 bytes_per_token: int | None = None) -> None:
        if not isinstance(num_pages, int) or num_pages < 1:
            raise ValueError(f"the host pool needs at least one page, got num_pages={num_pages!r}")
        self.num_pages, self.page_size = num_pages, page_size
        self.pages = BlockPool(num_pages)
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []
        self.pinned = False
        if like is not None:
            self.pinned = like.device.type == "cuda"
            shape = (num_pages * page_size, like.config.num_key_value_heads, like.config.head_dim)
            for _ in range(like.config.num_hidden_layers):
                self.k.append(torch.zeros(shape, dtype=like.dtype, pin_memory=self.pinned))
                self.v.append(torch.zeros(shape, dtype=like.dtype, pin_memory=self.pinned))
            bytes_per_token = like.bytes_per_token
        self.bytes_per_token = bytes_per_token if bytes_per_token is not None else 2 * 28 * 8 * 128 * 2

    @property
    def num_slots(self) -> int:
        return self.num_pages * self.page_size

    def allocate_slots(self, num_tokens: int) -> list[int] | None:
        """Slots for ``num_tokens`` (a whole number of pages), or None if the pool is short."""
        if num_tokens % self.page_size:
            raise ValueError(f"host copies are whole pages: {num_tokens} is not a multiple of {self.page_size}")
        pages = self.pages.allocate(num_tokens // self.page_size)
        if pages is None:
            return None
        return [p * self.page_size + i for p in pages for i in range(self.page_size)]

    def free_slots(self, slots: Sequence[int]) -> None:
        self.pages.free([s // self.page_size for s in slots[::self.page_size]])

    def __repr__(self) -> str:
        where = "pinned host" if self.pinned else ("host" if self.k else "no tensors")
        return f"HostKVPool({self.num_pages} pages x {self.page_size} tokens, {where})"


@dataclass(eq=False)
class Copy:
    """One copy of whole pages between the device pool and the host pool.

    ``kind`` is ``"store"`` (device to host) or ``"load"`` (host to device); ``src`` and ``dst`` are
    slot lists of equal length. ``on_done`` runs at the acknowledgement (the owner unlocks the
    source and makes the destination readable there). ``done`` turns True then."""

    kind: str
    src: list[int]
    dst: list[int]
    on_done: Callable[[], None] | None = None
    done: bool = False
    events: list[Any] = field(default_factory=list)   # CUDA: one per layer (loads) or one (stores)


def page_runs(src: Sequence[int], dst: Sequence[int]) -> Iterator[tuple[int, int, int]]:
    """``(src_start, dst_start, length)`` for the maximal runs where both slot lists go up by one.

    Copying runs instead of slots turns thousands of tiny copies into a few large ones: the
    fragment problem vLLM 0.12.0 solved by making a block contiguous across layers."""
    i, n = 0, len(src)
    while i < n:
        j = i + 1
        while j < n and src[j] == src[j - 1] + 1 and dst[j] == dst[j - 1] + 1:
            j += 1
        yield src[i], dst[i], j - i
        i = j


class CopyEngine:
    """Submits, starts and acknowledges :class:`Copy` objects; counts the bytes moved.

    ``start_stores`` / ``start_loads`` start every submitted copy of that kind; ``poll``
    acknowledges the started copies that have finished (on CPU: all of them); ``drain`` starts and
    acknowledges everything (an idle engine, a blocking write-back). Counters: ``bytes_written``
    (device to host), ``bytes_loaded`` (host to device), ``model_seconds`` (their time under
    ``bandwidth``, a model).
    """

    def __init__(self, device_kv: KVCache | None, host: HostKVPool,
                 bandwidth: BandwidthModel | None = None, *, layerwise: bool = True) -> None:
        self.device_kv, self.host = device_kv, host
        self.layerwise = layerwise    # False: the forward waits for whole loads (attention without wait_layer)
        self.bandwidth = bandwidth or BandwidthModel()
        self.cuda = device_kv is not None and device_kv.device.type == "cuda"
        self.stream = torch.cuda.Stream(device_kv.device) if self.cuda and device_kv is not None else None
        self.submitted: list[Copy] = []
        self.started: list[Copy] = []
        self.bytes_written = self.bytes_loaded = 0
        self.model_seconds = 0.0
        self.num_copies = 0

    @property
    def synchronous(self) -> bool:
        """True when ``start`` finishes the copy before returning (no overlap at all): CPU runs."""
        return not self.cuda

    def submit(self, copy: Copy) -> None:
        if copy.kind not in ("store", "load") or len(copy.src) != len(copy.dst):
            raise ValueError(f"a copy is a 'store' or a 'load' between equally long slot lists, got {copy.kind!r} "
                             f"with {len(copy.src)} and {len(copy.dst)} slots")
        self.submitted.append(copy)

    def in_flight(self) -> list[Copy]:
        """Copies submitted or started, not yet acknowledged."""
        return self.submitted + self.started

    def start_stores(self) -> None:
        self._start("store")

    def start_loads(self) -> None:
        self._start("load")

    def _start(self, kind: str) -> None:
        """Start the submitted copies of ``kind`` in order. If one raises, it and the ones after it
        stay submitted (to be started again); the ones before are started."""
        for copy in [c for c in self.submitted if c.kind == kind]:
            self._run(copy)
            self.submitted.remove(copy)
            self.started.append(copy)
            self._count(copy)
        if kind == "load" and self.stream is not None and not self.layerwise and self.device_kv is not None:
            torch.cuda.current_stream(self.device_kv.device).wait_stream(self.stream)   # wait for all of it

    def _count(self, copy: Copy) -> None:
        nbytes = len(copy.src) * self.host.bytes_per_token
        if copy.kind == "store":
            self.bytes_written += nbytes
        else:
            self.bytes_loaded += nbytes
        self.model_seconds += self.bandwidth.seconds(nbytes)
        self.num_copies += 1

    def _run(self, copy: Copy) -> None:
        """Move the bytes: layer by layer, run by run. On CUDA on ``self.stream``, with events."""
        kv = self.device_kv
        if kv is None:
            return
        layers = range(len(self.host.k))
        to_host = copy.kind == "store"
        if self.stream is None:
            for layer in layers:
                self._copy_layer(layer, copy, to_host)
            return
        compute = torch.cuda.current_stream(kv.device)
        self.stream.wait_stream(compute)      # the source was written by kernels queued before now
        events = []
        with torch.cuda.stream(self.stream):
            for layer in layers:
                self._copy_layer(layer, copy, to_host)
                if not to_host:
                    events.append(torch.cuda.Event())
                    events[-1].record(self.stream)
            if to_host:
                events.append(torch.cuda.Event())
                events[-1].record(self.stream)
        copy.events = events
        if not to_host and self.layerwise:
            kv.layer_events = events          # attention waits on layer i's event (KVCache.wait_layer)

    def _copy_layer(self, layer: int, copy: Copy, to_host: bool) -> None:
        kv = self.device_kv
        assert kv is not None
        for device, host in ((kv.k[layer], self.host.k[layer]), (kv.v[layer], self.host.v[layer])):
            for s, d, n in page_runs(copy.src, copy.dst):
                if to_host:
                    host[d:d + n].copy_(device[s:s + n], non_blocking=self.cuda)
                else:
                    device[d:d + n].copy_(host[s:s + n], non_blocking=self.cuda)

    def poll(self) -> list[Copy]:
        """Acknowledge, in order, the started copies that have finished; returns them."""
        acked = []
        while self.started and all(e.query() for e in self.started[0].events):
            copy = self.started.pop(0)
            copy.done = True
            if copy.on_done is not None:
                copy.on_done()
            acked.append(copy)
        if not self.started and self.device_kv is not None:
            self.device_kv.layer_events = None
        return acked

    def drain(self) -> None:
        """Start every submitted copy and acknowledge everything (waits for the GPU on CUDA)."""
        self.start_stores()
        self.start_loads()
        if self.stream is not None:
            self.stream.synchronize()
        self.poll()
        assert not self.started, "a copy was started but not acknowledged after synchronizing"

    def run_now(self, copy: Copy) -> None:
        """Run one copy to the end and acknowledge it, waiting for it: SGLang's blocking write-back
        (``writing_check(write_back=True)`` inside ``evict``). If it raises, nothing is counted or
        acknowledged."""
        self._run(copy)
        if self.stream is not None:
            self.stream.synchronize()
        self._count(copy)
        copy.done = True
        if copy.on_done is not None:
            copy.on_done()
