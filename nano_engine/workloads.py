"""workloads.py: request streams with shared prefixes, and how much of them a prefix cache reuses.

A prefix cache pays off only when requests share beginnings. Four shapes of sharing cover most
real traffic (chapter 04 measures each):

* **shared system prompt**: every request starts with the same long instructions;
* **multi-turn conversations**: each turn's prompt is the whole conversation so far, so it extends
  the previous turn's prompt and answer;
* **few-shot prompts**: a fixed header, then a *varying* number of the same worked examples, then
  the question: requests share a prefix of varying length;
* **parallel sampling**: the same question sent several times (n samples, best-of-n).

Plus one for routing: **multi-tenant** traffic, several system prompts (tenants) with many users
each holding a multi-turn conversation, turns from different users interleaved in time.

Every generator takes a seed or a ``random.Random`` and draws only from it, so a workload is
reproducible and independent of the global random state. ``chapter_workloads(seed=0)`` draws the
four shapes from one generator in the chapter's order, which reproduces the chapter's exact token
streams (its code seeds the global generator with 0 and calls it in this same order).

``hit_rate(workload, method)`` replays a workload against a cache, the chapter's way: for each
request, match everything but its last token (that one is always recomputed to get logits),
count the hit tokens, then store the whole request. The rate is hits over *all* tokens. The two
methods are the package's own caches, not a copy of them:

* ``"radix"``: a :class:`~nano_engine.radix.RadixCache` (token granularity);
* an int ``block_size``: a :class:`~nano_engine.prefix_cache.PrefixCachingBlockPool` with that
  block size (chained hashes, full blocks only).

With ``capacity=None`` the cache never evicts (the chapter's setting). ``capacity=C`` keeps at most
C tokens, evicting least recently used data: ``RadixCache.evict`` (leaf by leaf) for the tree, a
pool of ``C // block_size`` blocks (its free queue is the LRU) for blocks. A request longer than
the whole cache stores only its first C tokens. The replay itself is
:class:`nano_engine.replay.ReplayCache` (``ReplayCache("radix")``, ``ReplayCache("hashed",
capacity, block_size=16)``), the one every hit rate of the package comes from.

>>> w = chapter_workloads(seed=0)
>>> round(hit_rate(w["shared system prompt"], "radix"), 3), round(hit_rate(w["shared system prompt"], 16), 3)
(0.895, 0.888)
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Sequence

from nano_engine import replay
from nano_engine.radix import RadixCache
from nano_engine.replay import method_cache

Workload = list[list[int]]
Method = str | int
Seed = int | random.Random

TOKEN_RANGE = (1000, 50000)
"""Token ids are drawn uniformly from ``range(1000, 50000)``, the chapter's choice: random ids that
almost never repeat by chance, so every shared prefix is one the workload put there."""

CHAPTER_METHODS: tuple[Method, ...] = ("radix", 16, 64)

CHAPTER_TABLE: dict[str, tuple[float, float, float]] = {
    "shared system prompt": (89.5, 88.8, 86.0),
    "multi-turn": (79.2, 78.6, 76.8),
    "few-shot": (89.6, 87.8, 81.1),
    "parallel sampling": (87.1, 84.2, 73.3),
}
"""The chapter's printed table: hit rate in percent for radix / block 16 / block 64."""


def _rng(seed: Seed) -> random.Random:
    return seed if isinstance(seed, random.Random) else random.Random(seed)


def rand_tokens(rng: random.Random, n: int) -> list[int]:
    """``n`` random token ids from ``TOKEN_RANGE``."""
    return [rng.randrange(*TOKEN_RANGE) for _ in range(n)]


# ---------------------------------------------------------------------------- the four shapes
# Defaults are the chapter's sizes. The order of the random draws inside each function is the
# chapter's too (it matters for reproducing its table): keep it when editing.


def shared_system_prompt(seed: Seed = 0, *, num_requests: int = 100, system_len: int = 1000,
                         question_len: tuple[int, int] = (20, 200)) -> Workload:
    """One system prompt of ``system_len`` tokens, then a different question per request."""
    rng = _rng(seed)
    system = rand_tokens(rng, system_len)
    return [system + rand_tokens(rng, rng.randint(*question_len)) for _ in range(num_requests)]


def multi_turn(seed: Seed = 0, *, num_conversations: int = 20, num_turns: int = 8,
               first_len: int = 300, user_len: tuple[int, int] = (10, 60),
               answer_len: tuple[int, int] = (50, 300)) -> Workload:
    """Conversations one after the other; a turn's prompt is the history plus the user's message.

    The model's answer then joins the history, so turn k+1's prompt extends turn k's prompt by the
    answer and the next message. (The answer is only in the history: the replay never stores
    generated tokens, so the answer itself is always a miss on the next turn.)
    """
    rng = _rng(seed)
    workload = []
    for _ in range(num_conversations):
        history = rand_tokens(rng, first_len)
        for _ in range(num_turns):
            history = history + rand_tokens(rng, rng.randint(*user_len))
            workload.append(list(history))
            history = history + rand_tokens(rng, rng.randint(*answer_len))
    return workload


def few_shot(seed: Seed = 0, *, num_requests: int = 100, num_examples: int = 5,
             example_len: tuple[int, int] = (100, 200), header_len: int = 37,
             examples_used: tuple[int, int] = (2, 5), question_len: tuple[int, int] = (20, 80)) -> Workload:
    """A header, the first k of a fixed list of examples (k varies per request), a question."""
    rng = _rng(seed)
    examples = [rand_tokens(rng, rng.randint(*example_len)) for _ in range(num_examples)]
    header = rand_tokens(rng, header_len)
    workload = []
    for _ in range(num_requests):
        k = rng.randint(*examples_used)
        question = rand_tokens(rng, rng.randint(*question_len))
        workload.append(header + [t for example in examples[:k] for t in example] + question)
    return workload


def parallel_sampling(seed: Seed = 0, *, num_questions: int = 30, num_samples: int = 8,
                      question_len: tuple[int, int] = (80, 400)) -> Workload:
    """Each question sent ``num_samples`` times in a row, each copy with one distinct last token.

    The distinct token stands for the per-sample difference (in a real server the copies are
    identical and differ from their first sampled token on).
    """
    rng = _rng(seed)
    workload = []
    for _ in range(num_questions):
        question = rand_tokens(rng, rng.randint(*question_len))
        workload += [question + rand_tokens(rng, 1) for _ in range(num_samples)]
    return workload


def chapter_workloads(seed: Seed = 0) -> dict[str, Workload]:
    """The four shapes with the chapter's sizes, drawn in the chapter's order from one generator.

    ``seed=0`` gives exactly the chapter's token streams, hence its table (``CHAPTER_TABLE``).
    """
    rng = _rng(seed)
    return {
        "shared system prompt": shared_system_prompt(rng),
        "multi-turn": multi_turn(rng),
        "few-shot": few_shot(rng),
        "parallel sampling": parallel_sampling(rng),
    }


# ---------------------------------------------------------------------------- routing traffic


def multi_tenant(seed: Seed = 0, *, num_tenants: int = 8, num_users: int = 128, num_turns: int = 4,
                 tenant_skew: float = 1.0, system_len: tuple[int, int] = (400, 800),
                 user_len: tuple[int, int] = (20, 80), answer_len: tuple[int, int] = (20, 80)) -> Workload:
    """Traffic of several tenants (each its own system prompt) with many chatting users.

    Each user belongs to one tenant, drawn with Zipf weights ``1 / (k + 1) ** tenant_skew`` (real
    tenants differ in size: with the default 1.0 and 8 tenants, the largest sends about 37% of the
    requests; 0 makes them equal). Every user runs a ``num_turns``-turn conversation that starts
    with its tenant's system prompt. Requests arrive in rounds: round t holds turn t of every
    user, in a random order, so tenants are interleaved (the hard case for a router: consecutive
    requests rarely share a prefix, but each tenant's and each user's requests do).
    """
    rng = _rng(seed)
    systems = [rand_tokens(rng, rng.randint(*system_len)) for _ in range(num_tenants)]
    weights = [1 / (k + 1) ** tenant_skew for k in range(num_tenants)]
    tenants = rng.choices(range(num_tenants), weights=weights, k=num_users)
    histories = [list(systems[tenant]) for tenant in tenants]
    workload = []
    for _ in range(num_turns):
        users = list(range(num_users))
        rng.shuffle(users)
        for user in users:
            histories[user] += rand_tokens(rng, rng.randint(*user_len))
            workload.append(list(histories[user]))
            histories[user] += rand_tokens(rng, rng.randint(*answer_len))
    return workload


# ---------------------------------------------------------------------------- hit rates


def hit_rate(workload: Sequence[Sequence[int]], method: Method, capacity: int | None = None) -> float:
    """Fraction of all tokens of ``workload`` a prefix cache serves, replaying it in order.

    ``method``: ``"radix"`` or a block size (int). ``capacity``: at most this many tokens cached
    (LRU eviction), or ``None`` for an unbounded cache. Each request: match all but its last token,
    count the hits, then cache the whole request (:class:`nano_engine.replay.ReplayCache`).
    """
    if not workload:
        raise ValueError("hit_rate: the workload is empty")
    return replay.replay_workload(workload, method, capacity).hit_rate


class _ReplayCacheOfMethod(replay.ReplayCache):
    """``workloads.ReplayCache(method, capacity)``, kept for one release: use
    ``replay.ReplayCache("radix")`` or ``replay.ReplayCache("hashed", capacity, block_size=B)``."""

    def __init__(self, method: Method, capacity: int | None = None) -> None:
        cache, block_size = method_cache(method)
        if capacity is None and cache == "hashed":
            raise ValueError(f"a block pool is bounded: give the capacity in tokens (block size {method})")
        super().__init__(cache, capacity, block_size=block_size)
        self.method, self.capacity = method, capacity

    @property
    def hits(self) -> int:
        return self.hit_tokens

    @property
    def tokens(self) -> int:
        return self.input_tokens


def __getattr__(name: str):
    if name == "ReplayCache":
        warnings.warn("nano_engine.workloads.ReplayCache(method, capacity) moved to nano_engine.replay.ReplayCache"
                      "(cache, capacity_tokens, block_size=...); the old name goes in the next release",
                      DeprecationWarning, stacklevel=2)
        return _ReplayCacheOfMethod
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def hit_rate_table(workloads: dict[str, Workload], methods: Sequence[Method] = CHAPTER_METHODS,
                   capacity: int | None = None) -> dict[str, list[float]]:
    """``{workload name: [hit rate per method]}``."""
    return {name: [hit_rate(w, m, capacity) for m in methods] for name, w in workloads.items()}


def format_table(table: dict[str, list[float]], methods: Sequence[Method] = CHAPTER_METHODS) -> str:
    """The table as aligned text, rates in percent with one decimal (the chapter's format)."""
    heads = ["radix" if m == "radix" else f"block {m}" for m in methods]
    width = max(len(name) for name in table) + 2
    lines = [f"{'workload':{width}s}" + "".join(f"{h:>10s}" for h in heads)]
    for name, rates in table.items():
        lines.append(f"{name:{width}s}" + "".join(f"{r:10.1%}" for r in rates))
    return "\n".join(lines)


def unique_tokens(workload: Sequence[Sequence[int]]) -> int:
    """Tokens an unbounded radix tree holds after the whole workload: the capacity at which a
    bounded cache can no longer differ from an unbounded one."""
    tree = RadixCache()
    for req in workload:
        tree.insert(list(req), [0] * len(req))
    return tree.total_size()


def capacity_curve(workload: Sequence[Sequence[int]], method: Method,
                   capacities: Sequence[int]) -> list[float]:
    """Hit rate of a bounded cache at each capacity (tokens)."""
    return [hit_rate(workload, method, c) for c in capacities]


def plot_hit_rates(table: dict[str, list[float]], path: str | None = None, *,
                   methods: Sequence[Method] = CHAPTER_METHODS,
                   curves: dict[str, dict[Method, list[float]]] | None = None,
                   capacities: Sequence[int] = ()):
    """A bar chart of ``table`` and, with ``curves`` (workload -> method -> rates at
    ``capacities``), one panel per workload of hit rate against cache capacity. Saved to ``path``
    when given; returns the matplotlib figure."""
    import matplotlib
    if path is not None:
        matplotlib.use("Agg")   # writing a file needs no display
    import matplotlib.pyplot as plt

    labels = ["radix" if m == "radix" else f"block {m}" for m in methods]
    panels = 1 + (len(curves) if curves else 0)
    fig, axes = plt.subplots(1, panels, figsize=(5 + 3.2 * (panels - 1), 3.6), squeeze=False)
    bars = axes[0][0]
    width = 0.8 / len(methods)
    for j, label in enumerate(labels):
        xs = [i + (j - (len(methods) - 1) / 2) * width for i in range(len(table))]
        bars.bar(xs, [100 * rates[j] for rates in table.values()], width, label=label)
    bars.set_xticks(range(len(table)), [name.replace(" ", "\n", 1) for name in table], fontsize=8)
    bars.set_ylabel("hit rate (%)")
    bars.set_ylim(0, 115)       # room for the legend above the bars
    bars.set_title("unbounded cache")
    bars.legend(fontsize=8, ncol=len(methods), loc="upper center")
    for ax, (name, by_method) in zip(axes[0][1:], (curves or {}).items()):
        for label, method in zip(labels, methods):
            ax.plot(capacities, [100 * r for r in by_method[method]], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("capacity (tokens)")
        ax.set_ylim(0, 100)
        ax.set_title(name, fontsize=9)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig
