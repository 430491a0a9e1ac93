"""traces.py - real traffic: Mooncake's request traces, replayed through this package's caches.

Every other hit rate in the series comes from workloads this package generates. The Mooncake paper
(FAST'25, Kimi's serving system) released request traces of its production traffic; two of them
ship in ``nano_engine/data/mooncake/`` (Apache-2.0, attribution in the README there):

* ``"conversation"``: 12,031 requests, one hour of sampled online chat traffic;
* ``"synthetic"``: 3,993 requests built from public datasets, Poisson arrivals.

A trace has no text and no token ids. Each request gives ``input_length``, ``output_length``, a
``timestamp`` and ``hash_ids``: one id per 512-token block of the prompt, remapped from a chained
hash, so equal ids at the same positions mean an equal prefix. The last block may be partial
(``len(hash_ids) == ceil(input_length / 512)``).

**From ids to tokens** (:func:`request_tokens`), so that the real caches can take a request:

* ``block_size=512`` (the trace's own granularity, the default): **one token per id**, replayed
  with blocks (pages) of 1 token. A block then is an id, capacity counts 512 tokens a block, and a
  request's hit tokens are ``min(512 x leading cached blocks, input_length)``: the paper's
  definition, exactly.
* ``block_size=16`` (or any other divisor of 512): **512 tokens per id**, as an engine would see
  the prompt, replayed with hashed blocks / radix pages of that size. Token ``j`` of id ``h`` is byte
  ``j % 8`` of ``splitmix64(64 h + j // 8)``, a bijection, so every aligned 8-token group of the
  whole trace is distinct. Two requests' tokens then agree exactly as far as their ids do (no block
  of 8 or more tokens matches inside a different id), and a prefix match stops at the same id
  boundary as an id match. The tokens are bytes (0..255), which CPython keeps as shared objects: a
  cache holding a hundred million of them stores pointers, not ints.

Why the hit rates stay exact: each cache keys a block (an edge) by the whole prefix before it, and
the mapping is injective on prefixes, so a cache hit happens exactly where the trace's ids say that
a prefix repeats. The token-level replay then differs from the 512-token one only where an engine
differs from the paper's count: a partial block is never cached, and the last prompt token is
always recomputed (a cache serves at most ``input_length - 1`` tokens, in whole blocks).

**Replay** (:func:`replay_trace`, :class:`TraceReplay`): requests in file order, one at a time,
through the real classes: ``PrefixCachingBlockPool`` (``"hashed"``: the chapter's pool;
``"vllm"``: its vLLM mode) or ``RadixCache`` (``"radix"``). Each request: look up its prefix, take
the hits, allocate the rest (evicting least recently used), cache it all, release it (last block
first). A request larger than the whole cache is counted in ``rejected`` (with no hit) and leaves
the cache untouched.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from nano_engine.paged import ceil_div
from nano_engine.prefix_cache import PrefixCachingBlockPool
from nano_engine.radix import RadixCache

TOKENS_PER_ID = 512
"""Tokens behind one hash id in Mooncake's traces."""

TRACES = {"conversation": "conversation_trace.jsonl.gz", "synthetic": "synthetic_trace.jsonl.gz"}
"""The traces shipped with the package, by name."""

CACHES = ("hashed", "vllm", "radix")
"""``"hashed"``: the chapter's ``PrefixCachingBlockPool``; ``"vllm"``: the same in vLLM mode;
``"radix"``: ``RadixCache``."""

PAPER_UNLIMITED_HIT_RATE = {"conversation": 0.40, "synthetic": 0.66}
"""Mooncake (FAST'25), Table 2: the prefix-cache ratio of each workload with an unlimited cache."""


class TraceError(ValueError):
    """A trace file that cannot be read; the message names the file and the line."""


# ----------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace (times in ms from the trace's start)."""

    timestamp: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


@dataclass(frozen=True)
class Trace:
    """A whole trace, in file order. ``trace[:300]`` is a trace of its first 300 requests."""

    name: str
    requests: tuple[TraceRequest, ...]

    def __len__(self) -> int:
        return len(self.requests)

    def __getitem__(self, index: slice) -> Trace:
        if not isinstance(index, slice):
            raise TypeError("index a trace with a slice (trace.requests[i] is one request)")
        return Trace(self.name, self.requests[index])

    def __iter__(self):
        return iter(self.requests)

    @property
    def input_tokens(self) -> int:
        return sum(r.input_length for r in self.requests)

    @property
    def unique_ids(self) -> int:
        """Distinct 512-token blocks: what an unlimited cache ends up holding (x 512 tokens)."""
        return len({h for r in self.requests for h in r.hash_ids})


def trace_path(name: str | Path) -> Path:
    """The file of a shipped trace (by name), or ``name`` itself as a path."""
    if isinstance(name, str) and name in TRACES:
        return Path(str(resources.files("nano_engine") / "data" / "mooncake" / TRACES[name]))
    return Path(name)


def load_trace(name: str | Path) -> Trace:
    """Read a trace: ``"conversation"``, ``"synthetic"``, or the path of a ``.jsonl`` / ``.jsonl.gz``
    file in Mooncake's format.

    Raises ``FileNotFoundError`` for a missing file and :class:`TraceError` (a ``ValueError``)
    naming the file and line for anything else: a cut-short gzip, a line that is not a JSON
    object, a missing or ill-typed field, a negative length, a ``hash_ids`` list whose length does
    not match ``input_length``. Nothing is returned unless the whole file is good.
    """
    path = trace_path(name)
    if not path.is_file():
        known = ", ".join(TRACES)
        raise FileNotFoundError(f"trace {str(name)!r}: no such file {path} (shipped traces: {known})")
    opener = gzip.open if path.suffix == ".gz" else open
    requests: list[TraceRequest] = []
    line_no = 0
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for line_no, line in enumerate(f, 1):
                if line.strip():
                    requests.append(_parse_request(line, path, line_no))
    except (EOFError, OSError, zlib.error, UnicodeDecodeError) as error:
        raise TraceError(f"{path}: line {line_no + 1}: cannot read the file past line {line_no} "
                         f"(cut short or corrupt: {error})") from None
    if not requests:
        raise TraceError(f"{path}: line 1: the trace holds no request")
    stem = path.name.removesuffix(".gz").removesuffix(".jsonl").removesuffix("_trace")
    return Trace(name if isinstance(name, str) and name in TRACES else stem, tuple(requests))


def _parse_request(line: str, path: Path, line_no: int) -> TraceRequest:
    def fail(why: str) -> TraceError:
        return TraceError(f"{path}: line {line_no}: {why}")

    try:
        row = json.loads(line)
    except json.JSONDecodeError as error:
        raise fail(f"not JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(row, dict):
        raise fail(f"expected a JSON object, got {type(row).__name__}")
    for key in ("timestamp", "input_length", "output_length", "hash_ids"):
        if key not in row:
            raise fail(f"the request has no {key!r}")
    for key in ("input_length", "output_length"):
        value = row[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise fail(f"{key} must be an integer >= 0, got {value!r}")
    if row["input_length"] == 0:
        raise fail("input_length is 0: a request has at least one prompt token")
    timestamp = row["timestamp"]
    if not isinstance(timestamp, (int, float)) or isinstance(timestamp, bool) or not math.isfinite(timestamp):
        raise fail(f"timestamp must be a number, got {timestamp!r}")
    ids = row["hash_ids"]
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in ids):
        raise fail("hash_ids must be a list of integers >= 0")
    if len(ids) != ceil_div(row["input_length"], TOKENS_PER_ID):
        raise fail(f"{len(ids)} hash_ids for input_length {row['input_length']}: expected "
                   f"{ceil_div(row['input_length'], TOKENS_PER_ID)} (one per {TOKENS_PER_ID} tokens)")
    return TraceRequest(timestamp, row["input_length"], row["output_length"], tuple(ids))


# ----------------------------------------------------------------------------- ids -> tokens

_GROUPS_PER_ID = TOKENS_PER_ID // 8
_GROUP = np.arange(_GROUPS_PER_ID, dtype=np.uint64)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a bijection of 64-bit integers that scatters their bits."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def check_block_size(block_size: int) -> int:
    if not isinstance(block_size, int) or block_size < 1 or TOKENS_PER_ID % block_size:
        raise ValueError(f"block_size must divide {TOKENS_PER_ID} (the tokens behind one hash id), got {block_size!r}")
    return block_size


def request_tokens(request: TraceRequest, block_size: int = TOKENS_PER_ID) -> list[int]:
    """The token ids a cache is fed for ``request`` (see the module docstring).

    ``block_size=512``: the hash ids themselves, one token per 512-token block. Otherwise
    ``input_length`` tokens, 512 deterministic bytes per id.
    """
    if check_block_size(block_size) == TOKENS_PER_ID:
        return list(request.hash_ids)
    ids = np.asarray(request.hash_ids, dtype=np.uint64)
    groups = _splitmix64(ids[:, None] * np.uint64(_GROUPS_PER_ID) + _GROUP)
    return groups.astype("<u8", copy=False).view(np.uint8).reshape(-1)[:request.input_length].tolist()


# ----------------------------------------------------------------------------- replay


@dataclass(frozen=True)
class ReplayResult:
    """One replay of a trace through one cache at one capacity.

    ``capacity_tokens`` is None for an unlimited cache. ``input_tokens`` counts every request,
    rejected ones included (they hit nothing), so ``hit_rate`` is over all the traffic.
    """

    trace: str
    cache: str
    block_size: int
    capacity_tokens: int | None
    requests: int
    rejected: int
    input_tokens: int
    hit_tokens: int

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.input_tokens if self.input_tokens else 0.0

    def as_dict(self) -> dict:
        """The JSON record (``capacity_tokens`` null = unlimited)."""
        return {"trace": self.trace, "cache": self.cache, "block_size": self.block_size,
                "capacity_tokens": self.capacity_tokens, "hit_rate": round(self.hit_rate, 6),
                "hit_tokens": self.hit_tokens, "input_tokens": self.input_tokens,
                "requests": self.requests, "rejected": self.rejected}


class TraceReplay:
    """One of the package's caches, fed trace requests one at a time (no model: only the keys).

    ``cache``: one of :data:`CACHES`. ``capacity_tokens``: the cache's size in tokens, or None for
    unlimited (a block pool is always finite: it then gets one block per distinct block of
    ``trace``, which it needs to size it, so no block is ever evicted). ``block_size``: 512 (the
    trace's granularity) or a divisor of it for a token-level replay. ``serve(request)`` returns
    the hit tokens, or None for a request larger than the cache (counted in ``rejected``).
    """

    def __init__(self, cache: str, capacity_tokens: int | None, block_size: int = TOKENS_PER_ID, *,
                 trace: Trace | None = None) -> None:
        if cache not in CACHES:
            raise ValueError(f"cache must be one of {', '.join(CACHES)}, got {cache!r}")
        if capacity_tokens is not None and (not isinstance(capacity_tokens, int) or capacity_tokens < 1):
            raise ValueError(f"capacity must be a positive number of tokens or None (unlimited), got {capacity_tokens!r}")
        self.cache, self.block_size = cache, check_block_size(block_size)
        self.capacity_tokens = capacity_tokens
        self.coarse = block_size == TOKENS_PER_ID        # one token per id
        self.unit = 1 if self.coarse else block_size     # tokens per block / page of the real class
        if capacity_tokens is None:
            self.capacity_blocks = None
        else:
            self.capacity_blocks = capacity_tokens // block_size
            if self.capacity_blocks < 1:
                raise ValueError(f"capacity {capacity_tokens} tokens holds no block of {block_size} tokens")
        self.requests = self.rejected = self.input_tokens = self.hit_tokens = 0
        self.pool: PrefixCachingBlockPool | None = None
        self.tree: RadixCache | None = None
        if cache == "radix":
            self.tree = RadixCache(page_size=self.unit)
            self._slots = np.zeros(0, dtype=np.uint8)
        else:
            num_blocks = self.capacity_blocks
            if num_blocks is None:
                if trace is None:
                    raise ValueError("an unlimited block pool is sized from the trace: pass trace=")
                # Every cached block is a distinct (id, block within the id); at most one partial
                # block per request is left uncached and may sit in the queue.
                num_blocks = trace.unique_ids * (TOKENS_PER_ID // block_size) + len(trace)
            self.pool = PrefixCachingBlockPool(num_blocks, self.unit, vllm=cache == "vllm")

    def serve(self, request: TraceRequest) -> int | None:
        tokens = request_tokens(request, self.block_size)
        self.requests += 1
        self.input_tokens += request.input_length
        blocks = ceil_div(len(tokens), self.unit)
        if self.capacity_blocks is not None and blocks > self.capacity_blocks:
            self.rejected += 1
            return None
        hits = self._serve_pool(tokens) if self.tree is None else self._serve_tree(tokens)
        hit_tokens = min(hits * self.block_size // self.unit, request.input_length)
        self.hit_tokens += hit_tokens
        return hit_tokens

    def _serve_pool(self, tokens: list[int]) -> int:
        """lookup -> touch the hits -> allocate the rest (evicting) -> cache -> free, last block
        first. Returns the hit tokens of the pool (blocks x its block size)."""
        pool = self.pool
        assert pool is not None
        # At 512 a block is a whole id (the paper's count); with tokens, the engine's rule: at
        # most len - 1 tokens are served, the last one is computed for its logits.
        limit = len(tokens) if self.coarse else len(tokens) - 1
        hit = pool.lookup(tokens, max_tokens=limit)
        pool.touch(hit)
        fresh = pool.allocate(ceil_div(len(tokens), self.unit) - len(hit))
        assert fresh is not None, "every block is back in the free queue between requests"
        table = hit + fresh
        pool.cache_blocks(tokens, table, len(tokens))
        pool.free(table)
        return len(hit) * self.unit

    def _serve_tree(self, tokens: list[int]) -> int:
        """match -> lock the match -> evict what the rest needs -> insert -> unlock."""
        tree = self.tree
        assert tree is not None
        aligned = len(tokens) - len(tokens) % self.unit
        key = tokens if aligned == len(tokens) else tokens[:aligned]
        matched, node = tree.match_prefix(key)
        tree.inc_lock_ref(node)
        if self.capacity_blocks is not None:
            excess = tree.total_size() + aligned - len(matched) - self.capacity_blocks * self.unit
            if excess > 0:
                tree.evict(excess)
        if len(self._slots) < aligned:   # dummy slots (only keys matter here), page-aligned
            size = max(aligned, 2 * len(self._slots))
            self._slots = np.tile(np.arange(self.unit, dtype=np.uint8), ceil_div(size, self.unit))
        tree.insert(key, self._slots[:aligned])
        tree.dec_lock_ref(node)
        hits = len(matched)
        return hits if self.coarse else min(hits, (len(tokens) - 1) // self.unit * self.unit)

    def result(self, trace_name: str) -> ReplayResult:
        return ReplayResult(trace_name, self.cache, self.block_size, self.capacity_tokens,
                            self.requests, self.rejected, self.input_tokens, self.hit_tokens)

    def check_no_leaks(self) -> None:
        """Between requests: nothing is held, the cache is consistent and within its capacity."""
        if self.pool is not None:
            self.pool.check_invariants()
            held = [b for b, c in enumerate(self.pool.ref_cnt) if c]
            assert not held, f"blocks still referenced between requests: {held[:10]}"
        else:
            assert self.tree is not None
            self.tree.check_invariants()
            assert self.tree.protected_size == 0, f"{self.tree.protected_size} tokens still locked"
            if self.capacity_blocks is not None:
                limit = self.capacity_blocks * self.unit
                assert self.tree.total_size() <= limit, f"the tree holds {self.tree.total_size()} > {limit}"


def replay_trace(trace: Trace, cache: str, capacity_tokens: int | None, *, block_size: int = TOKENS_PER_ID,
                 progress: bool = False) -> ReplayResult:
    """Replay ``trace`` through ``cache`` bounded to ``capacity_tokens`` (None: unlimited)."""
    replay = TraceReplay(cache, capacity_tokens, block_size, trace=trace)
    requests: Iterable[TraceRequest] = trace.requests
    if progress:
        from tqdm.auto import tqdm

        size = "unlimited" if capacity_tokens is None else f"{capacity_tokens:,} tokens"
        requests = tqdm(requests, desc=f"{trace.name}, {cache}, {size}", unit="req", leave=False, mininterval=1.0)
    for request in requests:
        replay.serve(request)
    return replay.result(trace.name)


def parse_tokens(text: str, option: str = "--capacity") -> int | None:
    """A size in tokens as the command line writes it: ``4096``, ``1e6``, ``2.5e6`` or ``inf``
    (None: unlimited). Raises ValueError naming ``option`` for anything else."""
    if text.strip().lower() in ("inf", "unlimited"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{option} {text}: not a number of tokens (write 4096, 1e6 or inf)") from None
    if not math.isfinite(value) or value != int(value) or value < 1:
        raise ValueError(f"{option} {text}: a size must be a whole number of tokens >= 1 (or inf)")
    return int(value)


# ----------------------------------------------------------------------------- showing results


def format_results(results: Sequence[ReplayResult]) -> str:
    """One row per capacity, one column per cache: hit rates in percent."""
    caches = list(dict.fromkeys(r.cache for r in results))
    rows: dict[int | None, dict[str, ReplayResult]] = {}
    for r in results:
        rows.setdefault(r.capacity_tokens, {})[r.cache] = r
    lines = [f"{'capacity (tokens)':>18s}" + "".join(f"{c:>10s}" for c in caches) + f"{'rejected':>10s}"]
    for capacity in sorted(rows, key=lambda c: math.inf if c is None else c):
        by_cache = rows[capacity]
        label = "unlimited" if capacity is None else f"{capacity:,}"
        cells = "".join(f"{by_cache[c].hit_rate:10.1%}" if c in by_cache else f"{'':10s}" for c in caches)
        rejected = max(r.rejected for r in by_cache.values())
        lines.append(f"{label:>18s}{cells}{rejected:10d}")
    return "\n".join(lines)


def plot_capacity_curves(results: Sequence[ReplayResult], path: str | None = None, *, ax=None,
                         paper: bool = True):
    """Hit rate against capacity, one line per (trace, cache); unlimited as a dotted level, and
    (``paper``) the paper's Table 2 figure as a grey dashed one. Saved to ``path`` when given."""
    import matplotlib
    if path is not None and ax is None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 4))
    groups: dict[tuple[str, str], list[ReplayResult]] = {}
    for r in results:
        groups.setdefault((r.trace, r.cache), []).append(r)
    for (trace, cache), rs in groups.items():
        bounded = sorted((r for r in rs if r.capacity_tokens is not None), key=lambda r: r.capacity_tokens or 0)
        line, = ax.plot([r.capacity_tokens for r in bounded], [100 * r.hit_rate for r in bounded], marker="o",
                        label=f"{trace}, {cache}")
        for r in rs:
            if r.capacity_tokens is None:
                ax.axhline(100 * r.hit_rate, color=line.get_color(), linestyle=":", linewidth=1)
    if paper:
        for trace in dict.fromkeys(t for t, _ in groups):
            if trace in PAPER_UNLIMITED_HIT_RATE:
                level = 100 * PAPER_UNLIMITED_HIT_RATE[trace]
                ax.axhline(level, color="grey", linestyle="--", linewidth=1)
                ax.annotate(f"paper, {trace}: {level:.0f}%", (0.01, level + 1), xycoords=("axes fraction", "data"),
                            fontsize=8, color="grey")
    ax.set_xscale("log")
    ax.set_xlabel("cache capacity (tokens)")
    ax.set_ylabel("prefix hit rate (%)")
    ax.set_ylim(0, 100)
    ax.set_title("dotted: unlimited cache; dashed: Mooncake paper (Table 2)", fontsize=9)
    ax.legend(fontsize=8)
    if fig is not None:
        fig.tight_layout()
        if path is not None:
            fig.savefig(path, dpi=120)
    return fig if fig is not None else ax.figure
