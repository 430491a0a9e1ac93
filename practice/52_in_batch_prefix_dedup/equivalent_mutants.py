"""Mutants of solution.py that behave exactly like it (`judge.py mutate 52`), each with the reason."""

EQUIVALENT = {
    "common_prefix_len: 'while n < min(len(a), len(b)) and a[n] == b[n]:': 'min(len(a), len(b))' -> 'min(len(b), len(a))'":
        'min is symmetric',
    "lpm_order: 'shared = max((common_prefix_len(tokens, other) for other in this_round), defa...': '0' -> '-1'":
        'default=-1 instead of 0 for the first checked request: with deprioritize_threshold >= 1 both stay below it; with a threshold <= 0 the first request is kept instead of deprioritized, but every later checked one is deprioritized either way, and the first (lowest priority of the kept, after the unchecked) lands in the same place',
    "lpm_order: 'shared = max((common_prefix_len(tokens, other) for other in this_round), defa...': 'common_prefix_len(tokens, other)' -> 'common_prefix_len(other, tokens)'":
        'the common prefix of two prompts does not depend on their order',
}
