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

**Replay**: :func:`nano_engine.replay.replay_trace` sends the requests, in file order, through the
package's real caches (the one replay core of :mod:`nano_engine.replay`). A request larger than
the whole cache is counted in ``rejected`` (with no hit) and leaves the cache untouched.

**What a file may hold** (:func:`load_trace` refuses anything else, naming the file and line):
lengths are integers in ``0 .. 2**31 - 1``, a timestamp a finite number of milliseconds, each hash
id an integer in ``0 .. 2**64 - 1`` (the 64-bit ids that ``request_tokens`` scatters), one per
512 tokens.
"""

from __future__ import annotations

import gzip
import json
import math
import warnings
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from nano_engine import replay as _replay
from nano_engine.paged import ceil_div
from nano_engine.replay import ReplayCache

TOKENS_PER_ID = 512
"""Tokens behind one hash id in Mooncake's traces."""

TRACES = {"conversation": "conversation_trace.jsonl.gz", "synthetic": "synthetic_trace.jsonl.gz"}
"""The traces shipped with the package, by name."""

MAX_LENGTH = 2**31 - 1
"""Longest request (``input_length``, ``output_length``) a trace file may give, in tokens."""

MAX_HASH_ID = 2**64 - 1
"""Largest hash id a trace file may give (``request_tokens`` works on 64-bit ids)."""

MAX_TOKENS = 2**53
"""Largest size a command line accepts in tokens (``parse_tokens``): beyond it a float is no longer
exact, and no cache of that size is meant."""

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
    except RecursionError:
        raise fail("not JSON this package reads: nested too deeply") from None
    except ValueError as error:           # e.g. an integer of more than 4,300 digits
        raise fail(f"not JSON this package reads ({' '.join(str(error).split()[:8])} ...)") from None
    if not isinstance(row, dict):
        raise fail(f"expected a JSON object, got {type(row).__name__}")
    for key in ("timestamp", "input_length", "output_length", "hash_ids"):
        if key not in row:
            raise fail(f"the request has no {key!r}")
    for key in ("input_length", "output_length"):
        value = row[key]
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_LENGTH:
            raise fail(f"{key} must be an integer in 0..2**31-1, got {_short(value)}")
    if row["input_length"] == 0:
        raise fail("input_length is 0: a request has at least one prompt token")
    timestamp = row["timestamp"]
    if not isinstance(timestamp, (int, float)) or isinstance(timestamp, bool):
        raise fail(f"timestamp must be a number, got {_short(timestamp)}")
    try:
        timestamp = float(timestamp)
    except OverflowError:
        raise fail(f"timestamp must be a finite number of milliseconds, got {_short(timestamp)}") from None
    if not math.isfinite(timestamp):
        raise fail(f"timestamp must be a finite number of milliseconds, got {_short(timestamp)}")
    ids = row["hash_ids"]
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) and 0 <= h <= MAX_HASH_ID
                                            for h in ids):
        raise fail("hash_ids must be a list of integers in 0..2**64-1")
    if len(ids) != ceil_div(row["input_length"], TOKENS_PER_ID):
        raise fail(f"{len(ids)} hash_ids for input_length {row['input_length']}: expected "
                   f"{ceil_div(row['input_length'], TOKENS_PER_ID)} (one per {TOKENS_PER_ID} tokens)")
    return TraceRequest(timestamp, row["input_length"], row["output_length"], tuple(ids))


def _short(value: object) -> str:
    """A value for an error message, a huge one by its size (a 400-digit number is no help)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        return f"an integer of {len(str(abs(value)))} digits"
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


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
    if value > MAX_TOKENS:
        raise ValueError(f"{option} {text}: more than 2**53 tokens is no cache this replay can mean "
                         f"(write inf for an unlimited one)")
    return int(value)


# ----------------------------------------------------------------------------- replay


def trace_replay(trace: Trace | None, cache: str, capacity_tokens: int | None, *,
                 block_size: int = TOKENS_PER_ID, host_capacity: int | None = None,
                 write_policy: str = "write_through") -> ReplayCache:
    """A :class:`~nano_engine.replay.ReplayCache` for this trace's requests (:func:`serve_request`)
    at ``block_size`` tokens a block: 512 (one key per hash id, the paper's count) or a divisor of
    it (the request's tokens, blocks and pages of that many; the hashed pool is then
    :class:`~nano_engine.trace_pool.TraceBlockPool`, fed the ids). A request larger than the cache
    is refused. An unlimited pool gets a block for every distinct block of ``trace`` and one
    partial block per request, so it never evicts; no pool is built larger than that."""
    if cache not in _replay.CACHES:
        raise ValueError(f"cache must be one of {', '.join(_replay.CACHES)}, got {cache!r}")
    check_block_size(block_size)
    coarse = block_size == TOKENS_PER_ID
    num_blocks = None if trace is None else trace.unique_ids * (TOKENS_PER_ID // block_size) + len(trace)
    if capacity_tokens is None and cache != "radix" and num_blocks is None:
        raise ValueError("an unlimited block pool is sized from the trace: pass trace=")
    if host_capacity is not None and not coarse:
        raise ValueError("a host tier is replayed at the trace's granularity: block size 512 only")
    return ReplayCache(cache, capacity_tokens, block_size=1 if coarse else block_size,
                       key_tokens=TOKENS_PER_ID if coarse else 1, oversized="reject", num_blocks=num_blocks,
                       tokens_per_id=TOKENS_PER_ID, host_capacity=host_capacity, write_policy=write_policy)


def serve_request(replay: ReplayCache, request: TraceRequest) -> int | None:
    """One request of a trace through ``replay`` at its granularity: its hash ids (one key per
    512 tokens), its tokens (:func:`request_tokens`), or its ids for a trace pool."""
    if replay.key_tokens == TOKENS_PER_ID:
        return replay.serve(request_tokens(request), request.input_length)
    if replay.reads_ids:
        return replay.serve_ids(request.hash_ids, request.input_length)
    return replay.serve(request_tokens(request, replay.block_size), request.input_length)


def replay_trace(trace: Trace, cache: str, capacity_tokens: int | None, *, block_size: int = TOKENS_PER_ID,
                 host_capacity: int | None = None, write_policy: str = "write_through",
                 progress: bool = False) -> _replay.ReplayResult:
    """Replay ``trace`` through ``cache`` bounded to ``capacity_tokens`` (None: unlimited)."""
    replay = trace_replay(trace, cache, capacity_tokens, block_size=block_size, host_capacity=host_capacity,
                          write_policy=write_policy)
    requests: Iterable[TraceRequest] = trace.requests
    if progress:
        from tqdm.auto import tqdm

        size = "unlimited" if capacity_tokens is None else f"{capacity_tokens:,} tokens"
        host = "" if host_capacity is None else f" + host {host_capacity:,}, {write_policy}"
        requests = tqdm(requests, desc=f"{trace.name}, {cache}, {size}{host}", unit="req", leave=False,
                        mininterval=1.0)
    for request in requests:
        serve_request(replay, request)
    return replay.result(trace.name)


# ----------------------------------------------------------------------------- showing results


def format_results(results: Sequence[_replay.ReplayResult]) -> str:
    """One row per capacity, one column per cache: hit rates in percent."""
    caches = list(dict.fromkeys(r.cache for r in results))
    rows: dict[int | None, dict[str, _replay.ReplayResult]] = {}
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


def plot_capacity_curves(results: Sequence[_replay.ReplayResult], path: str | None = None, *, ax=None,
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
    groups: dict[tuple[str, str], list[_replay.ReplayResult]] = {}
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


# ----------------------------------------------------------------------------- moved names

_MOVED = ("CACHES", "ReplayResult", "TraceReplay")


def __getattr__(name: str):
    """The replay moved to :mod:`nano_engine.replay`; its old names here work for one more release."""
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"nano_engine.traces.{name} moved to nano_engine.replay"
                  + (".ReplayCache (traces.trace_replay(trace, cache, capacity_tokens, block_size=...), then "
                     "traces.serve_request(replay, request))" if name == "TraceReplay" else "")
                  + "; the old name goes in the next release", DeprecationWarning, stacklevel=2)
    return _TraceReplayOfTrace if name == "TraceReplay" else getattr(_replay, name)


class _TraceReplayOfTrace:
    """``traces.TraceReplay(cache, capacity_tokens, block_size, trace=)``, kept for one release."""

    def __init__(self, cache: str, capacity_tokens: int | None, block_size: int = TOKENS_PER_ID, *,
                 trace: Trace | None = None) -> None:
        self._replay = trace_replay(trace, cache, capacity_tokens, block_size=block_size)

    def serve(self, request: TraceRequest) -> int | None:
        return serve_request(self._replay, request)

    def __getattr__(self, name: str):
        if name == "_replay":
            raise AttributeError(name)
        return getattr(self._replay, name)
