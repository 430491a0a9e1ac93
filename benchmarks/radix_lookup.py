"""What a radix-tree lookup costs, with NumPy comparison and with the plain Python loop.

Three tables, every figure beside its baseline from the same run:

1. The comparison alone: ``common_len`` (NumPy) vs ``_common_len_reference`` (a Python loop) on
   two token runs that differ only in their last token. The crossover sets ``NUMPY_MIN_RUN``.
2. ``match_prefix`` and ``insert`` on a tree holding thousands of cached sequences, prompts of 1k
   to 32k tokens. For each prompt length there are a few long shared documents, each followed by
   many different 128-token questions; every query is a cached document plus a new question (a
   hit of all but 128 tokens). Trees: the chapter's all-Python tree (``numpy_min_run=None``) and
   the default one, fed the prompt as a list and as an int64 NumPy array. When
   ``nano_engine.prefix_cache`` is present, the hashed-block ``PrefixCachingBlockPool.lookup``
   (built-in hash) on the same prompts is the last column.
3. Shorter prompts in practice: replaying the chapter's hit-rate workloads (match, then insert,
   request after request; prompts of about 100 to 1,500 tokens) and 2,000 prompts of 5 to 32
   tokens through both trees.

    python benchmarks/radix_lookup.py [--groups 8] [--per-group 64] [--queries 20]

Times are medians per call in microseconds (table 3: the fastest of 9 interleaved replays), wall
clock, one process; on a busy machine, run it twice.
"""

import argparse
import gc
import random
import statistics
import time
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from nano_engine.radix import NUMPY_MIN_RUN, RadixCache, _common_len_reference, common_len

try:
    from nano_engine.prefix_cache import PrefixCachingBlockPool
except ImportError:  # the hashed-block chapter is not there yet: radix columns only
    PrefixCachingBlockPool = None

LENGTHS = (1024, 4096, 16384, 32768)
QUESTION = 128  # tokens after the shared document: different in every sequence
VOCAB = 151_936  # Qwen3's vocabulary size


def median_us(fn: Callable[[object], object], inputs: Sequence[object], repeat: int = 1) -> float:
    """Median wall time of ``fn(x)`` over ``inputs`` (each run ``repeat`` times), in microseconds."""
    times = []
    gc.disable()
    try:
        for _ in range(repeat):
            for x in inputs:
                start = time.perf_counter_ns()
                fn(x)
                times.append(time.perf_counter_ns() - start)
    finally:
        gc.enable()
    return statistics.median(times) / 1000


def insert_into(tree: RadixCache, slots: Sequence[int] | np.ndarray, key: Sequence[int] | np.ndarray) -> object:
    """``tree.insert(key, slots)`` with the tree and slots bound first (by ``partial``), timed per key."""
    return tree.insert(key, slots)


def comparison_table() -> None:
    print("1. common prefix of two runs differing in the last token, us per call")
    print(f"{'tokens':>8} {'python loop':>12} {'numpy':>10} {'loop/numpy':>11}")
    rng = random.Random(0)
    for n in (4, 16, 32, 64, 128, 1024, 32768):
        a = [rng.randrange(VOCAB) for _ in range(n)]
        b = [int(str(t)) for t in a[:-1]] + [a[-1] + 1]  # equal values, distinct int objects
        arr_a, arr_b = np.array(a, dtype=np.int64), np.array(b, dtype=np.int64)
        assert common_len(arr_a, arr_b) == _common_len_reference(a, b) == n - 1
        reps = max(3, 20_000 // n)
        # The closures run before the loop moves on, so late binding (B023) cannot bite.
        py = median_us(lambda _: _common_len_reference(a, b), range(reps))  # noqa: B023
        vec = median_us(lambda _: common_len(arr_a, arr_b), range(reps))  # noqa: B023
        print(f"{n:>8} {py:>12.2f} {vec:>10.2f} {py / vec:>10.1f}x")
    print(f"(runs shorter than NUMPY_MIN_RUN = {NUMPY_MIN_RUN} use the loop)\n")


def fresh_ints(tokens: Sequence[int]) -> list[int]:
    """The same token ids as new int objects, as a tokenizer returns them. (Lists that share int
    objects with the tree compare faster: list equality skips identical objects.)"""
    return np.array(tokens, dtype=np.int64).tolist()


def build_workload(rng: random.Random, groups: int, per_group: int, queries: int):
    """Cached sequences and fresh queries (as lists) for every prompt length."""
    def tokens(n: int) -> list[int]:
        return [rng.randrange(VOCAB) for _ in range(n)]

    cached, fresh = [], {}
    for length in LENGTHS:
        documents = [tokens(length - QUESTION) for _ in range(groups)]
        cached += [doc + tokens(QUESTION) for doc in documents for _ in range(per_group)]
        # Separate query sets: timing match, insert from lists, insert from arrays.
        fresh[length] = [[fresh_ints(documents[i % groups] + tokens(QUESTION))
                          for i in range(queries)] for _ in range(3)]
    rng.shuffle(cached)
    return cached, fresh


def hashed_pool(cached: list[list[int]], block_size: int):
    """A PrefixCachingBlockPool holding ``cached`` the way an engine leaves it: every request
    looked up, computed its misses into new blocks, registered them, and finished."""
    num_blocks = sum(len(seq) for seq in cached) // block_size + 64
    pool = PrefixCachingBlockPool(num_blocks, block_size)
    for seq in cached:
        hit = pool.lookup(seq)
        pool.touch(hit)
        table = hit + pool.allocate(len(seq) // block_size - len(hit))
        pool.cache_blocks(seq, table, len(seq))
        pool.free(table)
    return pool


def tree_table(groups: int, per_group: int, queries: int, block_size: int) -> None:
    rng = random.Random(0)
    cached, fresh = build_workload(rng, groups, per_group, queries)
    total = sum(len(s) for s in cached)
    start = time.perf_counter()
    python_tree, numpy_tree = RadixCache(numpy_min_run=None), RadixCache()
    for i, seq in enumerate(cached):
        slots = list(range(i * 40_000, i * 40_000 + len(seq)))
        python_tree.insert(seq, slots)
        numpy_tree.insert(seq, slots)
    pool = hashed_pool(cached, block_size) if PrefixCachingBlockPool is not None else None
    print(f"2. a tree of {len(cached)} cached sequences ({total:,} tokens, "
          f"{python_tree.total_size():,} distinct, {sum(1 for _ in numpy_tree.nodes())} nodes); "
          f"built in {time.perf_counter() - start:.1f} s")

    header = f"{'prompt':>7} {'python':>9} {'numpy':>9} {'numpy':>9}  {'py/np':>7} {'py/np':>7}"
    units = f"{'tokens':>7} {'list':>9} {'list':>9} {'array':>9}  {'list':>7} {'array':>7}"
    hashed_header = f" {f'hashed-{block_size}':>10} {'hash/np':>8}" if pool is not None else ""
    hashed_units = f" {'list':>10} {'array':>8}" if pool is not None else ""
    for title, timed in (("match_prefix", "match"), ("insert (a new 128-token leaf)", "insert")):
        extra = timed == "match"
        print(f"\n{title}, us per call (median)\n{header}{hashed_header * extra}\n"
              f"{units}{hashed_units * extra}")
        for length in LENGTHS:
            match_q, insert_lists, insert_arrays = fresh[length]
            if timed == "match":
                arrays = [np.array(q, dtype=np.int64) for q in match_q]
                for q in match_q:  # warm-up: builds the comparison arrays of the nodes walked
                    numpy_tree.match_prefix(q)
                    assert python_tree.match_prefix(q)[0] == numpy_tree.match_prefix(q)[0]
                py = median_us(python_tree.match_prefix, match_q, repeat=3)
                np_list = median_us(numpy_tree.match_prefix, match_q, repeat=3)
                np_array = median_us(numpy_tree.match_prefix, arrays, repeat=3)
            else:
                slots = list(range(len(insert_lists[0])))
                arrays = [np.array(q, dtype=np.int64) for q in insert_arrays]
                slot_array = np.array(slots, dtype=np.int64)
                py = median_us(partial(insert_into, python_tree, slots), insert_lists)
                np_list = median_us(partial(insert_into, numpy_tree, slots), insert_lists)
                np_array = median_us(partial(insert_into, numpy_tree, slot_array), arrays)
            row = (f"{length:>7} {py:>9.1f} {np_list:>9.1f} {np_array:>9.1f}  "
                   f"{py / np_list:>6.1f}x {py / np_array:>6.1f}x")
            if pool is not None and timed == "match":
                hashed = median_us(pool.lookup, match_q, repeat=3)
                assert len(pool.lookup(match_q[0])) * block_size == length - QUESTION
                row += f" {hashed:>10.1f} {hashed / np_array:>7.1f}x"
            print(row)
    if pool is None:
        print("\n(nano_engine.prefix_cache is missing: no hashed-block column)")
    print()


def practice_table() -> None:
    from nano_engine.workloads import chapter_workloads

    print("3. the chapter's hit-rate workloads replayed (match_prefix, then insert, per request)")
    print(f"{'workload':<22} {'requests':>8} {'tokens/req':>10} {'python ms':>10} "
          f"{'numpy ms':>9} {'py/np':>6}")
    rng = random.Random(0)
    stems = [[rng.randrange(VOCAB) for _ in range(24)] for _ in range(20)]
    short = [stem[:rng.randint(4, 24)] + [rng.randrange(VOCAB) for _ in range(rng.randint(1, 8))]
             for stem in rng.choices(stems, k=2000)]
    for name, workload in [*chapter_workloads(0).items(), ("short prompts (5-32)", short)]:
        workload = [fresh_ints(req) for req in workload]

        def replay(tree_args: dict, workload: list[list[int]] = workload) -> float:
            tree = RadixCache(**tree_args)
            start = time.perf_counter()
            for req in workload:
                tree.match_prefix(req[:-1])
                tree.insert(req, list(range(len(req))))
            return (time.perf_counter() - start) * 1000

        runs = [(replay({"numpy_min_run": None}), replay({})) for _ in range(9)]  # interleaved
        py, vec = min(r[0] for r in runs), min(r[1] for r in runs)
        mean_len = sum(map(len, workload)) / len(workload)
        print(f"{name:<22} {len(workload):>8} {mean_len:>10.0f} {py:>10.2f} {vec:>9.2f} "
              f"{py / vec:>5.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=8, help="shared documents per prompt length")
    parser.add_argument("--per-group", type=int, default=64, help="cached questions per document")
    parser.add_argument("--queries", type=int, default=20, help="timed prompts per length")
    parser.add_argument("--block-size", type=int, default=16, help="hashed-block column")
    args = parser.parse_args()
    comparison_table()
    tree_table(args.groups, args.per_group, args.queries, args.block_size)
    practice_table()


if __name__ == "__main__":
    main()
