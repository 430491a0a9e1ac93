"""Plain helpers shared by the engine, cache-manager and scheduler tests: the workload every
engine run is checked on, and invariant checks. The fixtures built on them are in conftest.py.
"""

from __future__ import annotations

import random
import signal
import sys
from collections.abc import Collection, Iterator
from contextlib import contextmanager

from nano_engine.engine import LLMEngine
from nano_engine.host_tier import CopyEngine

MAX_TOKENS = 5

# 16 prompts from 1 to 300 tokens, long and short interleaved (so a small pool fills up). Several
# share a 40-token prefix (so prefix caches hit), one repeats another exactly, and lengths straddle
# block boundaries (16, 17, 31, 32, 33, ...).
LENGTHS = [100, 1, 250, 17, 32, 300, 2, 48, 16, 150, 5, 33, 64, 31, 200, 33]


def make_prompts(vocab_size: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    shared = [rng.randrange(vocab_size) for _ in range(40)]
    prompts = []
    for i, n in enumerate(LENGTHS[:-1]):
        tokens = [rng.randrange(vocab_size) for _ in range(n)]
        if i % 2 and n > 40:
            tokens = shared + tokens[40:]
        prompts.append(tokens)
    prompts.append(list(prompts[11]))    # an exact repeat of a 33-token prompt
    return prompts


def total(engine: LLMEngine, key: str, since: int = 0) -> int:
    return sum(step[key] for step in engine.step_log[since:])


def assert_running_prefixes_intact(engine: LLMEngine) -> None:
    """Every running sequence still owns the pages in its block table: referenced in the pool,
    never in a free queue, and (radix) its locked prefix is still in the tree at the same pages."""
    pool = engine.pool
    free = set(pool.free_queue)
    for seq in engine.scheduler.running:
        for page in seq.block_table:
            assert page not in free and pool.ref_cnt[page] > 0, f"{seq}: page {page} was released"
        handle = seq.cache_handle
        if handle is not None and hasattr(handle, "node"):
            tree = engine.cache.trees[handle.namespace]
            if handle.node is not tree.root:
                assert handle.node.parent is not None and handle.node.lock_ref > 0, f"{seq}: prefix evicted"
            slots, node = tree.match_prefix(seq.token_ids[:handle.num_tokens])
            bs = engine.block_size
            assert [s // bs for s in slots[::bs]] == seq.block_table[:handle.num_tokens // bs]
    owners: dict[int, int] = {}
    for seq in engine.scheduler.running:
        shared = seq.cache_handle.num_tokens // engine.block_size if hasattr(seq.cache_handle, "node") else 0
        for page in seq.block_table[shared:]:      # radix: pages past the locked prefix are private
            owners[page] = owners.get(page, 0) + 1
    if hasattr(engine.cache, "trees"):
        assert all(n == 1 for n in owners.values()), "two running requests write to the same page"
    else:   # naive / hashed: a page's references are exactly its holders (plus pins)
        pinned = getattr(pool, "pinned_blocks", set())
        for page, n in owners.items():
            assert pool.ref_cnt[page] == n or page in pinned, f"page {page}: ref_cnt {pool.ref_cnt[page]}, {n} holders"


class SigintAtLine:
    """A tracer that raises SIGINT at the ``at``-th line executed in files whose path starts with
    ``prefix`` (``at=None``: only count the lines), the way Ctrl-C lands: the interpreter runs the
    SIGINT handler at its next check, wherever that is. Use it as a context manager."""

    def __init__(self, at: int | None, prefix: str) -> None:
        self.at, self.prefix, self.lines = at, prefix, 0

    def __call__(self, frame, event, arg):
        if not frame.f_code.co_filename.startswith(self.prefix):
            return None
        if event == "line":
            self.lines += 1
            if self.lines == self.at:
                sys.settrace(None)
                signal.raise_signal(signal.SIGINT)
                return None
        return self

    def __enter__(self) -> SigintAtLine:
        sys.settrace(self)
        return self

    def __exit__(self, *exc) -> None:
        sys.settrace(None)


def serve_on(manager, request_id: int, tokens: list[int]) -> None:
    """A whole request's life on a cache manager, as the scheduler drives it: match, can_admit,
    lock, allocate, compute everything, cache, free; then the next step's stores (begin_step)."""
    from nano_engine.sampling import SamplingParams
    from nano_engine.sequence import Sequence

    seq = Sequence(request_id, tokens, SamplingParams())
    match = manager.match(seq)
    assert manager.can_admit(match, len(tokens))
    manager.lock(seq, match)
    assert manager.allocate(seq, len(tokens))
    done = seq.num_computed_tokens
    seq.num_computed_tokens = len(tokens)
    manager.cache(seq, len(tokens) - done)
    manager.free(seq)
    manager.begin_step()


@contextmanager
def failing_copies(fail_at: Collection[int]) -> Iterator[None]:
    """Inside: the host tier's copy calls numbered in ``fail_at`` (counting from 1) raise
    ``RuntimeError("injected copy failure")`` when issued, as a CUDA call does; the others copy."""
    real = CopyEngine._copy_layer
    calls = {"n": 0}

    def flaky(self, layer, copy, to_host):
        calls["n"] += 1
        if calls["n"] in fail_at:
            raise RuntimeError("injected copy failure")
        return real(self, layer, copy, to_host)

    CopyEngine._copy_layer = flaky                  # type: ignore[method-assign]
    try:
        yield
    finally:
        CopyEngine._copy_layer = real              # type: ignore[method-assign]
