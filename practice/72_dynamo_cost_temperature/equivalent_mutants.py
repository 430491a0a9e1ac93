"""Mutants of solution.py that behave exactly like it (`judge.py mutate 72`), each with the reason."""

EQUIVALENT = {
    "select_worker: 'if not workers:' -> 'pass'":
        "min() of the empty list of costs raises ValueError as well, in both modes",
    "select_worker: \"raise ValueError('no workers to route to')\" -> 'pass'":
        "min() of the empty list of costs raises ValueError as well, in both modes",
    "select_worker: 'for i in range(len(probs) - 1):': 'range(len(probs) - 1)' -> 'range(len(probs) - 1 + 1)'":
        "the extra step tests the last worker, which the return after the loop picks anyway",
    "select_worker: 'for i in range(len(probs) - 1):': '1' -> '0'":
        "the extra step tests the last worker, which the return after the loop picks anyway",
    "select_worker: 'if rng is None:': 'rng is None' -> 'not rng'":
        "an rng object is always truthy (random.Random and the tests' stubs define no __bool__ or __len__)",
    "worker_cost: 'prefill_tokens = max(isl_tokens - worker.overlap_blocks * block_size, 0)': 'max(isl_tokens - worker.overlap_blocks * block_size, 0)' -> 'max(0, isl_tokens - worker.overlap_blocks * block_size)'":
        "max of two ints does not depend on their order",
}
