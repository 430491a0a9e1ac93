"""host_tier.py: a second tier of KV memory in host RAM, and the copies between the two tiers.

The device pool (``kv_cache.KVCache``) is small and fast; host memory is large and far away (a PCIe
link on a GPU machine). Instead of throwing evicted KV away, SGLang and vLLM can keep it one tier
down, each as an opt-in: SGLang's HiCache (``python/sglang/srt/mem_cache/hiradix_cache.py``, release
0.5.9; ``--enable-hierarchical-cache``) under its radix tree, vLLM's native offloading
(``vllm/v1/kv_offload/``, release 0.33.0; ``--kv-offloading-size``) under its hashed blocks.
This module holds what the two caches share (:mod:`nano_engine.hiradix` and
:mod:`nano_engine.offload` put a tree and a hash table on top; :mod:`nano_engine.tiered_cache_manager`
puts them under the engine):

* :class:`HostTier`: the tier's settings as one value, checked once: its size in tokens, the
  write policy (and the store threshold it implies), the shortest host hit worth loading back, and
  the bandwidth model. ``LLMEngine(host_kv_tokens=..., write_policy=...)`` becomes one.
* :class:`HostKVPool`: pages of host memory with the device pool's layout (per layer K and V
  ``[slots, kv_heads, head_dim]``, layer first as SGLang 0.5.9's default ``layer_first``), page
  ids from a :class:`~nano_engine.paged.BlockPool`. On CUDA the memory is *pinned* (page-locked,
  registered with ``cudaHostRegister``, as ``alloc_with_host_register`` in SGLang 0.5.9's
  ``python/sglang/srt/mem_cache/memory_pool_host.py`` does), which is what lets a copy run as DMA
  while the GPU computes.
* :class:`Copy` and :class:`CopyEngine`: a copy is *submitted* (queued), *started*, then
  *acknowledged*. Until the acknowledgement the caller keeps the source locked and the destination
  unreadable (SGLang: ``inc_lock_ref`` until ``writing_check``; vLLM: a CPU block's ``ref_cnt`` is
  -1 until ``complete_store``). On CUDA, loads and stores run on two streams of their own
  (:class:`CudaStreams`; SGLang's ``HiCacheController`` has a ``load_stream`` and a
  ``write_stream``, ``python/sglang/srt/managers/cache_controller.py``), so a load never queues
  behind a store. A copy is acknowledged when its event
  has fired. Loads record one event per layer, so attention for layer *i* can start as soon as
  layer *i* has arrived (``KVCache.wait_layer``); a forward waits for the loads of its own step
  only, never for the stores. **On CPU a copy is synchronous**: ``start`` does the whole copy
  before it returns, nothing overlaps, and every "transfer time" this package shows for CPU runs
  comes from :class:`BandwidthModel`, labelled as a model.
* A copy that raises stays queued (nothing was acknowledged) and is started again next time: the
  source is still locked, so the same bytes are copied again. The caches rely on that: a failed
  load never lets anything read a half-written page, because the destination is read only by a
  forward that runs after ``start_loads`` returned.

Without a KV cache bound (``CopyEngine(None, host)``) copies move no data and only count bytes:
what the trace replays of ``python -m nano_engine hitrate --host-capacity`` use.

No GPU runs this project's tests. The CUDA branch (two streams, events, copies that finish later)
is tested on CPU by handing the copy engine a stand-in whose streams *defer* every copy until a
wait, a synchronize or a later event query (``tests/copy_streams.py``): outputs must still equal
the reference, and no attention may read a slot a queued load has not written, nor overwrite one a
queued store has not read. ``benchmarks/gpu_check.py`` runs the same scenarios on a real GPU.
"""

from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from nano_engine.checks import require, require_int
from nano_engine.kv_cache import KVCache
from nano_engine.paged import BlockPool

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
"""When a device page is copied to the host (SGLang's ``--hicache-write-policy``):

* ``write_through``: as soon as it is cached (every inserted node; vLLM: every newly full prompt block by default,
  ``offload_prompt_only=True``).
  The host tier is then *inclusive*: it holds a copy of (almost) everything on the device, so the
  two tiers together hold about max(host, device) distinct tokens; SGLang 0.5.9 therefore requires a
  host pool larger than the device pool (``--hicache-ratio`` default 2).
* ``write_through_selective``: on the second hit (SGLang: ``write_through_threshold = 2``; vLLM's
  ``store_threshold``): fewer bytes moved, only data used twice is kept.
* ``write_back``: only when the device evicts it. Closer to *exclusive* (about host + device
  tokens), fewest bytes for data that is never evicted, but the copy sits on the eviction path:
  the eviction waits for it. The radix tree only: vLLM's offloading has no write-back.
"""

STORE_THRESHOLDS: dict[str, int | None] = {"write_through": 1, "write_through_selective": 2, "write_back": None}
"""The write policy as the number of times a page must be offered (inserted, or used by a request)
before it is stored: SGLang's ``write_through_threshold``, vLLM's ``store_threshold``. None: only at
eviction (write-back)."""


def fits_cache(cache: str, write_policy: str) -> bool:
    """Can a host tier with ``write_policy`` sit under ``cache``? Not write-back under the hashed
    pool: vLLM's offloading stores blocks as they fill, never at eviction."""
    return cache == "radix" or STORE_THRESHOLDS[write_policy] is not None

LOAD_BACK_THRESHOLD = 10
"""Shortest host hit worth loading, in tokens (SGLang 0.5.9 ``HiRadixCache.load_back_threshold``)."""

BOOKKEEPING_BYTES_PER_PAGE = 64
"""What a host page costs without tensors (its entries in the page allocator's lists), for the
memory check of a pool that only counts (trace replays)."""


def host_memory_bytes() -> int:
    """This machine's physical memory in bytes (2**50 where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 2**50


def check_host_memory(num_bytes: int, what: str) -> None:
    """ValueError, before anything is allocated, if ``what`` would take more than this machine's memory."""
    have = host_memory_bytes()
    if num_bytes > have:
        raise ValueError(f"{what} needs {num_bytes / 2**30:,.1f} GiB of host memory, but this machine has "
                         f"{have / 2**30:,.1f} GiB")


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


@dataclass(frozen=True)
class HostTier:
    """A host-memory tier's settings, checked once, when the value is made.

    ``tokens``: its size (``LLMEngine(host_kv_tokens=...)``); ``write_policy``: one of
    :data:`WRITE_POLICIES`; ``load_back_threshold``: the shortest host hit worth copying back
    (radix only; SGLang: 10 tokens); ``bandwidth``: the transfer-time model of the figures.

    >>> HostTier(4096, "write_through_selective").store_threshold
    2
    >>> HostTier(4096, "write_back").for_cache("hashed")
    Traceback (most recent call last):
    ...
    ValueError: write_policy='write_back' needs cache='radix': vLLM's offloading (the host tier of the hashed cache) has no write-back; use 'write_through' or 'write_through_selective'
    """

    tokens: int
    write_policy: str = "write_through"
    load_back_threshold: int = LOAD_BACK_THRESHOLD
    bandwidth: BandwidthModel | None = None

    def __post_init__(self) -> None:
        require_int("host_kv_tokens", self.tokens)
        if self.tokens > host_memory_bytes():     # not even one byte per token: a size in bytes, surely
            raise ValueError(f"host_kv_tokens must be a number of tokens this machine can hold, got {self.tokens!r}, "
                             f"more than its {host_memory_bytes():,} bytes of memory")
        require(self.write_policy in WRITE_POLICIES, "write_policy", f"one of {WRITE_POLICIES}", self.write_policy)
        require_int("load_back_threshold", self.load_back_threshold, minimum=0)
        require(self.bandwidth is None or isinstance(self.bandwidth, BandwidthModel), "bandwidth",
                "None or a BandwidthModel", self.bandwidth)

    @property
    def store_threshold(self) -> int | None:
        """Offers before a page is stored (1: write-through, 2: selective); None: at eviction only."""
        return STORE_THRESHOLDS[self.write_policy]

    def for_cache(self, cache: str) -> HostTier:
        """This tier, if it can sit under ``cache`` ("radix", "hashed" or "vllm")."""
        if not fits_cache(cache, self.write_policy):
            raise ValueError("write_policy='write_back' needs cache='radix': vLLM's offloading (the host tier of the "
                             "hashed cache) has no write-back; use 'write_through' or 'write_through_selective'")
        return self

    def num_pages(self, page_size: int) -> int:
        """Whole pages of ``page_size`` tokens in the tier (at least one)."""
        if self.tokens < page_size:
            raise ValueError(f"host_kv_tokens must be at least one block ({page_size} tokens), got {self.tokens}")
        return self.tokens // page_size

    def check_memory(self, bytes_per_token: int) -> None:
        """ValueError, before anything is allocated, if the tier's KV does not fit in this machine's memory."""
        check_host_memory(self.tokens * bytes_per_token,
                          f"host_kv_tokens={self.tokens:,} ({bytes_per_token:,} bytes of KV per token)")


def as_host_tier(tier: HostTier | int, *, write_policy: str | None = None, load_back_threshold: int | None = None,
                 bandwidth: BandwidthModel | None = None) -> HostTier:
    """``tier`` itself, or a :class:`HostTier` of ``tier`` tokens with the shorthand keywords: the
    one place the older keyword arguments (``host_tokens, write_policy=...``) become a value."""
    if isinstance(tier, HostTier):
        if write_policy is not None or load_back_threshold is not None or bandwidth is not None:
            raise ValueError("a HostTier carries its write policy, load-back threshold and bandwidth: "
                             "drop write_policy= / load_back_threshold= / bandwidth= beside it")
        return tier
    return HostTier(tier, "write_through" if write_policy is None else write_policy,
                    LOAD_BACK_THRESHOLD if load_back_threshold is None else load_back_threshold, bandwidth)


class HostKVPool:
    """``num_pages`` pages of ``page_size`` token slots of KV in host memory.

    ``like``: the device :class:`~nano_engine.kv_cache.KVCache` whose layout to copy (None: no
    tensors, page bookkeeping only, for trace replays; :meth:`attach` adds them later, once).
    ``bytes_per_token`` then defaults to Qwen3-0.6B's 112 KiB in bfloat16, the figure the chapters
    use. A pool larger than this machine's memory is refused before anything is allocated."""

    def __init__(self, num_pages: int, page_size: int, like: KVCache | None = None,
                 bytes_per_token: int | None = None) -> None:
        require_int("num_pages", num_pages)
        require_int("page_size", page_size)
        check_host_memory(num_pages * BOOKKEEPING_BYTES_PER_PAGE, f"a host pool of {num_pages:,} pages")
        self.num_pages, self.page_size = num_pages, page_size
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []
        self.pinned = False
        self.bytes_per_token = bytes_per_token if bytes_per_token is not None else 2 * 28 * 8 * 128 * 2
        if like is not None:
            self.attach(like)
        self.pages = BlockPool(num_pages)

    def attach(self, like: KVCache) -> None:
        """Allocate the tensors, shaped like the device cache ``like`` (once; pinned on CUDA)."""
        if self.k:
            raise ValueError("this host pool has its tensors already")
        config = like.config
        check_host_memory(self.num_slots * like.bytes_per_token,
                          f"a host pool of {self.num_slots:,} tokens ({like.bytes_per_token:,} bytes per token)")
        shape = (2, config.num_hidden_layers, self.num_slots, config.num_key_value_heads, config.head_dim)
        buffer = torch.zeros(shape, dtype=like.dtype)          # one allocation: no per-tensor rounding
        self.pinned = like.device.type == "cuda"
        if self.pinned:
            _register_pinned(self, buffer)
        self.k, self.v = list(buffer[0].unbind(0)), list(buffer[1].unbind(0))
        self.bytes_per_token = like.bytes_per_token

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


def _register_pinned(owner: HostKVPool, buffer: torch.Tensor) -> None:
    """Page-lock ``buffer``'s memory for DMA, and unlock it when ``owner`` (whose tensors are views
    of it, so the memory outlives it) is collected.

    ``torch.zeros(..., pin_memory=True)`` goes through torch's caching host allocator, which rounds
    every request up to a power of two and keeps freed blocks cached: a 100k-token tier of
    Qwen3-0.6B took 256 MiB per tensor instead of 195 MiB, and a dropped engine gave nothing back.
    ``cudaHostRegister`` on ordinary memory pins exactly what was allocated."""
    cudart = torch.cuda.cudart()
    ptr, nbytes = buffer.data_ptr(), buffer.numel() * buffer.element_size()
    code = cudart.cudaHostRegister(ptr, nbytes, 0)
    if int(getattr(code, "value", code)) != 0:
        raise RuntimeError(f"cudaHostRegister of {nbytes:,} bytes of host KV failed (error {code})")
    weakref.finalize(owner, cudart.cudaHostUnregister, ptr)


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


class Event(Protocol):
    def query(self) -> bool: ...
    def synchronize(self) -> None: ...


class Streams(Protocol):
    """What the copy engine needs of a device: two copy streams, work launched on one of them
    (returning an event recorded after it; inside it, ``copy`` queues one tensor copy), the compute
    stream made to wait for an event, and a synchronize. :class:`CudaStreams` is the real one; the tests use a stand-in that defers."""

    load: Any
    store: Any

    def launch(self, stream: Any, work: Callable[[], None], keep: Sequence[torch.Tensor] = ()) -> Event: ...
    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None: ...
    def wait(self, event: Event) -> None: ...
    def synchronize(self) -> None: ...


class CudaStreams:
    """The copy engine's streams on a CUDA device: ``load`` and ``store``, apart.

    ``launch`` queues the copies after everything the compute stream has queued so far (their
    source, or the pages they overwrite, may still be in use by queued kernels) and records an
    event after them; ``keep`` are the device tensors they touch, marked as used by the copy
    stream so that the caching allocator never hands their memory out while a copy still runs."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.load = torch.cuda.Stream(device)
        self.store = torch.cuda.Stream(device)

    def launch(self, stream: Any, work: Callable[[], None], keep: Sequence[torch.Tensor] = ()) -> Any:
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            work()
            event = torch.cuda.Event()
            event.record(stream)
        if isinstance(stream, torch.cuda.streams.Stream):
            for tensor in keep:
                tensor.record_stream(stream)
        return event

    def wait(self, event: Any) -> None:
        torch.cuda.current_stream(self.device).wait_event(event)

    @staticmethod
    def copy(dst: torch.Tensor, src: torch.Tensor) -> None:
        """One tensor copy, queued on the current stream (the one ``launch`` made current)."""
        dst.copy_(src, non_blocking=True)

    def synchronize(self) -> None:
        self.load.synchronize()
        self.store.synchronize()


class CopyEngine:
    """Submits, starts and acknowledges :class:`Copy` objects; counts the bytes moved.

    ``start_stores`` / ``start_loads`` start every submitted copy of that kind; ``poll``
    acknowledges the started copies that have finished (on CPU: all of them); ``wait_oldest``
    waits for the oldest copy in flight and acknowledges it; ``drain`` starts and acknowledges
    everything (an idle engine, a blocking write-back). Counters: ``bytes_written`` (device to host),
    ``bytes_loaded`` (host to device), ``model_seconds`` (their time under ``bandwidth``, a model),
    ``num_copies``, ``num_transfers`` (tensor copies issued: one per layer, K or V, and run of
    consecutive slots), ``num_waits`` (times a stalled step waited for the oldest copy).

    A step's loads are started together, layer by layer: layer *i* of every load, then its event,
    so attention on layer *i* waits for layer *i* of the step's loads and nothing else (with
    ``layerwise=False``, attention that cannot wait per layer, the forward waits for the last
    layer's event: the step's loads, still not the stores).
    """

    def __init__(self, device_kv: KVCache | None, host: HostKVPool,
                 bandwidth: BandwidthModel | None = None, *, layerwise: bool = True) -> None:
        self.device_kv, self.host = device_kv, host
        self.layerwise = layerwise    # False: the forward waits for whole loads (attention without wait_layer)
        self.bandwidth = bandwidth or BandwidthModel()
        self._streams: Streams | None = None
        self.submitted: list[Copy] = []
        self.started: list[Copy] = []
        self.bytes_written = self.bytes_loaded = 0
        self.model_seconds = 0.0
        self.num_copies = self.num_transfers = self.num_waits = 0

    def attach(self, device_kv: KVCache, layerwise: bool = True) -> None:
        """Bind the device cache of a copy engine made without one (before any copy)."""
        if self.device_kv is not None or self.in_flight():
            raise ValueError("this copy engine has its device cache already")
        self.device_kv, self.layerwise = device_kv, layerwise

    @property
    def streams(self) -> Streams | None:
        """The streams copies run on; None: synchronous copies (CPU)."""
        if self._streams is None and self.device_kv is not None and self.device_kv.device.type == "cuda":
            self._streams = CudaStreams(self.device_kv.device)
        return self._streams

    def use_streams(self, streams: Streams) -> None:
        """Run the copies on ``streams`` (the tests' stand-in that defers them), before any copy."""
        if self.in_flight() or self.device_kv is None:
            raise ValueError("streams are set on a copy engine with a device cache, before any copy")
        self._streams = streams

    @property
    def synchronous(self) -> bool:
        """True when ``start`` finishes the copy before returning (no overlap at all): CPU runs."""
        return self.streams is None

    def submit(self, copy: Copy) -> None:
        if copy.kind not in ("store", "load") or len(copy.src) != len(copy.dst):
            raise ValueError(f"a copy is a 'store' or a 'load' between equally long slot lists, got {copy.kind!r} "
                             f"with {len(copy.src)} and {len(copy.dst)} slots")
        self.submitted.append(copy)

    def in_flight(self) -> list[Copy]:
        """Copies submitted or started, not yet acknowledged."""
        return self.submitted + self.started

    # -- starting ----------------------------------------------------------------------------------

    def start_stores(self) -> None:
        """Start the submitted stores in order, each on the store stream with one event. If one
        raises, it and the ones after it stay submitted (to be started again)."""
        for copy in [c for c in self.submitted if c.kind == "store"]:
            copy.events = self._launch(functools.partial(self._copy_all_layers, [copy], True), store=True)
            self._mark_started([copy])

    def start_loads(self) -> None:
        """Start every submitted load, layer by layer, on the load stream. If a layer raises, all
        of them stay submitted (to be started again: the same bytes, into pages nobody reads yet)."""
        loads = [c for c in self.submitted if c.kind == "load"]
        if not loads:
            return
        kv, streams = self.device_kv, self.streams
        if kv is None or streams is None:      # no data to move, or synchronous: copies done here
            for layer in range(len(self.host.k) if kv is not None else 0):
                self._copy_layer_of(loads, layer)
            self._mark_started(loads)
            return
        with self._finishing_on_failure(streams):
            events = [streams.launch(streams.load, functools.partial(self._copy_layer_of, loads, layer),
                                     keep=(kv.k[layer], kv.v[layer])) for layer in range(len(self.host.k))]
        for copy in loads:
            copy.events = events
        self._mark_started(loads)
        if self.layerwise:       # attention waits for layer i of these loads only (KVCache.wait_layer)
            kv.pending_load = lambda layer: streams.wait(events[layer])
        else:                    # the forward waits for these loads, not for the stores
            streams.wait(events[-1])

    def _launch(self, work: Callable[[], None], *, store: bool) -> list[Any]:
        """Run ``work`` now (synchronous) or on the store/load stream; its events."""
        streams, kv = self.streams, self.device_kv
        if streams is None or kv is None:
            work()
            return []
        keep = [t for layer in range(len(self.host.k)) for t in (kv.k[layer], kv.v[layer])]
        with self._finishing_on_failure(streams):
            return [streams.launch(streams.store if store else streams.load, work, keep=keep)]

    @staticmethod
    @contextmanager
    def _finishing_on_failure(streams: Streams) -> Iterator[None]:
        """If issuing a copy raises halfway, the parts already queued still run later: wait for
        them before the failure reaches a caller that may free the copy's pages (a write-back
        that failed drops its node, and its device and host pages go back to their pools)."""
        try:
            yield
        except BaseException:
            streams.synchronize()
            raise

    def _mark_started(self, copies: list[Copy]) -> None:
        for copy in copies:
            self.submitted.remove(copy)
            self.started.append(copy)
            self._count(copy)

    def _count(self, copy: Copy) -> None:
        nbytes = len(copy.src) * self.host.bytes_per_token
        if copy.kind == "store":
            self.bytes_written += nbytes
        else:
            self.bytes_loaded += nbytes
        self.model_seconds += self.bandwidth.seconds(nbytes)
        self.num_copies += 1

    def _copy_all_layers(self, copies: list[Copy], to_host: bool) -> None:
        if self.device_kv is None:
            return
        for layer in range(len(self.host.k)):
            for copy in copies:
                self._copy_layer(layer, copy, to_host)

    def _copy_layer_of(self, copies: list[Copy], layer: int) -> None:
        for copy in copies:
            self._copy_layer(layer, copy, copy.kind == "store")

    def _copy_layer(self, layer: int, copy: Copy, to_host: bool) -> None:
        """One layer of one copy, run by run (K and V). With streams these copies are queued on
        the copy stream ``launch`` made current, and return at once."""
        kv, streams = self.device_kv, self.streams
        assert kv is not None
        for device, host in ((kv.k[layer], self.host.k[layer]), (kv.v[layer], self.host.v[layer])):
            for s, d, n in page_runs(copy.src, copy.dst):
                dst, src = (host[d:d + n], device[s:s + n]) if to_host else (device[d:d + n], host[s:s + n])
                if streams is None:
                    dst.copy_(src)
                else:
                    streams.copy(dst, src)
                self.num_transfers += 1

    # -- acknowledging -----------------------------------------------------------------------------

    def poll(self) -> list[Copy]:
        """Acknowledge, in order, the started copies that have finished; returns them. Loads and
        stores run on streams of their own, so a finished load is not held up by a store."""
        acked = [c for c in self.started if all(e.query() for e in c.events)]
        for copy in acked:
            self.started.remove(copy)
            copy.done = True
            if copy.on_done is not None:
                copy.on_done()
        if self.device_kv is not None and not any(c.kind == "load" for c in self.started):
            self.device_kv.pending_load = None
        return acked

    def wait_oldest(self) -> bool:
        """Start what is submitted, wait for the oldest copy in flight and acknowledge what has
        finished; False if nothing was in flight. What a step that could schedule nothing calls:
        the pages such a copy holds locked are free a moment later."""
        if not self.in_flight():
            return False
        self.num_waits += 1
        self.start_stores()
        self.start_loads()
        if self.started:
            for event in self.started[0].events:
                event.synchronize()
        return bool(self.poll())

    def drain(self) -> None:
        """Start every submitted copy and acknowledge everything (waits for the GPU on CUDA)."""
        self.start_stores()
        self.start_loads()
        if self.streams is not None:
            self.streams.synchronize()
        self.poll()
        assert not self.started, "a copy was started but not acknowledged after synchronizing"

    def run_now(self, copy: Copy) -> None:
        """Run one copy to the end and acknowledge it, waiting for it: SGLang's blocking write-back
        (``writing_check(write_back=True)`` inside ``evict``). If it raises, nothing is counted or
        acknowledged."""
        events = self._launch(functools.partial(self._copy_all_layers, [copy], copy.kind == "store"),
                              store=copy.kind == "store")
        for event in events:
            event.synchronize()
        self._count(copy)
        copy.done = True
        if copy.on_done is not None:
            copy.on_done()
