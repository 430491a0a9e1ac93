"""Mutants of solution.py that behave exactly like it (see practice/mutation.py): id -> why."""

EQUIVALENT = {
    "hit_rate: 'for end in range(size, len(request) + 1, size):' -> 'for end in reversed(list(range(size, len(request) + 1, size))):'":
        "adds the same prefixes to a set, in another order",
    "hit_rate: 'for end in range(size, len(request) + 1, size):': 'range(size, len(request) + 1, size)' -> 'range(size, len(request) + 1 + 1, size)'":
        "the extra end is len(request) + 1 > len(request): it adds the whole request, an unaligned key no lookup asks for",
    "hit_rate: 'for end in range(size, len(request) + 1, size):': '1' -> '2'":
        "the same change as `+ 1 + 1`: an unaligned key no lookup asks for",
}
