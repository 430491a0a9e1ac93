"""Mutants of solution.py that behave exactly like it (`judge.py mutate 72`), each with the reason."""

_TEMPERATURE = ("the sampling path raises the same ValueError for every temperature this check rejects: "
                "a temperature that is not 0 reaches selection_probabilities, which rejects any temperature "
                "that is not a finite number > 0, before the rng is called")
EQUIVALENT = {
    "selection_probabilities: 'if not costs:' -> 'pass'":
        "min() of the empty list of costs raises ValueError as well (the check is there for its message)",
    "selection_probabilities: \"raise ValueError('no costs to turn into probabilities')\" -> 'pass'":
        "min() of the empty list of costs raises ValueError as well (the check is there for its message)",
    "select_worker: 'if not 0 <= temperature < math.inf:' -> 'pass'": _TEMPERATURE,
    "select_worker: \"raise ValueError(f'temperature must be a finite number >= 0, got {temperature}')\" -> 'pass'":
        _TEMPERATURE,
    "select_worker: 'if not 0 <= temperature < math.inf:': '0' -> '-1'": _TEMPERATURE,
    "select_worker: 'for w in workers:' -> 'for w in reversed(list(workers)):'":
        "every worker is checked either way, and any bad one raises the same ValueError",
    "select_worker: 'if not 0 <= w.overlap_blocks <= isl_tokens // block_size:': 'isl_tokens // block_size' -> 'isl_tokens / block_size'":
        "overlap_blocks is an int, and an int is at most x / b exactly when it is at most x // b",
    "select_worker: 'for i in range(len(probs) - 1):': 'range(len(probs) - 1)' -> 'range(len(probs) - 1 + 1)'":
        "the extra step tests the last worker, which the return after the loop picks anyway",
    "select_worker: 'for i in range(len(probs) - 1):': '1' -> '0'":
        "the extra step tests the last worker, which the return after the loop picks anyway",
}
