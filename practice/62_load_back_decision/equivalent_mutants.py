"""Mutants of solution.py that behave exactly like it (see practice/mutation.py): id -> why."""

_MIN = "min() of the same four numbers in another order is the same number"
_CHECK = ("plan_load_back: 'if page_size < 1 or min(device_hit, host_hit, min_tokens, free_pages) < 0 or ...': "
          "'min(device_hit, host_hit, min_tokens, free_pages)' -> ")
EQUIVALENT = {
    _CHECK + "'min(host_hit, device_hit, min_tokens, free_pages)'": _MIN,
    _CHECK + "'min(device_hit, min_tokens, host_hit, free_pages)'": _MIN,
    _CHECK + "'min(device_hit, host_hit, free_pages, min_tokens)'": _MIN,
    "plan_load_back: 'break' -> 'continue'":
        "evicted only grows, so once it has reached the load's pages every later entry is skipped too",
}
