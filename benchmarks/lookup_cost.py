"""What a prefix-cache lookup costs with each hash function.

A 32k-token prompt (block size 16: 2,048 blocks) is cached in a PrefixCachingBlockPool, then
looked up again (every block hits, so every block is hashed and confirmed). For each hash choice
the table gives microseconds per block for

- hashing alone (``block_hashes``),
- ``lookup`` of the cached prompt (hashing + hash table + the collision guard's comparison),
- ``cache_blocks`` registering the whole prompt in an empty pool,

and each figure's ratio to the built-in hash, measured in the same run.

    python benchmarks/lookup_cost.py [--tokens 32768] [--block-size 16] [--repeat 21]
"""

import argparse
import random
import time
from collections.abc import Callable

from nano_engine.hashing import HASH_ALGOS
from nano_engine.prefix_cache import PrefixCachingBlockPool


def best_seconds(fn: Callable[..., object], repeat: int, setup: Callable[[], tuple] = tuple) -> float:
    """Fastest of ``repeat`` runs of ``fn(*setup())`` (the least disturbed by the rest of the
    machine); ``setup`` runs outside the timing."""
    times = []
    for _ in range(repeat):
        args = setup()
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return min(times)


def measure(algo: str, prompt: list[int], block_size: int, repeat: int) -> dict[str, float]:
    num_blocks = len(prompt) // block_size
    pool = PrefixCachingBlockPool(num_blocks, block_size, hash_algo=algo)
    blocks = pool.allocate(num_blocks)
    pool.cache_blocks(prompt, blocks, len(prompt))
    pool.free(blocks)
    assert pool.lookup(prompt) == blocks  # the measured lookup really hits every block

    def empty_pool() -> tuple:
        fresh = PrefixCachingBlockPool(num_blocks, block_size, hash_algo=algo)
        return fresh, fresh.allocate(num_blocks)

    per_block = 1e6 / num_blocks
    return {
        "hash": best_seconds(lambda: pool.block_hashes(prompt), repeat) * per_block,
        "lookup": best_seconds(lambda: pool.lookup(prompt), repeat) * per_block,
        "cache_blocks": best_seconds(lambda p, b: p.cache_blocks(prompt, b, len(prompt)), repeat, empty_pool)
        * per_block,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()

    rng = random.Random(0)
    prompt = [rng.randrange(151_643) for _ in range(args.tokens)]  # Qwen's vocabulary size
    print(f"prompt: {args.tokens} tokens, block size {args.block_size} "
          f"({args.tokens // args.block_size} blocks), best of {args.repeat} runs\n")

    results = {}
    for algo in HASH_ALGOS:
        try:
            results[algo] = measure(algo, prompt, args.block_size, args.repeat)
        except ImportError as e:
            print(f"{algo}: skipped ({e})")
    base = results["builtin"]
    columns = ["hash", "lookup", "cache_blocks"]
    print(f"{'hash_algo':10s}" + "".join(f"{c + ' us/blk':>20s}{'x builtin':>10s}" for c in columns))
    for algo, row in results.items():
        print(f"{algo:10s}" + "".join(f"{row[c]:20.3f}{row[c] / base[c]:10.2f}" for c in columns))
    print(f"\none {args.tokens}-token lookup: " + ", ".join(
        f"{algo} {row['lookup'] * args.tokens / args.block_size / 1000:.2f} ms" for algo, row in results.items()))


if __name__ == "__main__":
    main()
