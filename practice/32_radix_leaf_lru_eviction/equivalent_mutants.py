"""Mutants of solution.py that behave exactly like it (see practice/mutation.py): id -> why.

The tiebreak only matters when two heap entries have the same last_access. Nodes stamped by the
same call lie on one path, so two of them are never evictable leaves at the same time: a pushed
parent never ties with another entry, whatever its tiebreak."""

_TIE = "a parent pushed in this call never has the stamp of another entry in the heap (see above)"
EQUIVALENT = {
    "RadixCache.evict: 'tiebreak += 1' -> 'pass'": _TIE,
    "RadixCache.evict: 'tiebreak += 1' -> 'tiebreak -= 1'": _TIE,
    "RadixCache.evict: 'tiebreak += 1': '1' -> '2'": _TIE,
    "RadixCache.evict: 'tiebreak += 1': '1' -> '0'": _TIE,
}
