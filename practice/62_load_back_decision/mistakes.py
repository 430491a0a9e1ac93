"""Classic mistakes of exercise 62, each an edit of solution.py (`judge.py mistakes 62` shows them as diffs)."""

MISTAKES = [
    {"name": "rolls_back_a_failed_load",
     "explain": "Reports no eviction when the retry fails, as if the evictions were undone: SGLang keeps "
                "them, and the entries are gone from the device.",
     "old": "        return LoadPlan(device_hit, 0, evict)\n",
     "new": "        return LoadPlan(device_hit, 0, [])\n"},
    {"name": "evicts_only_the_shortfall",
     "explain": "Evicts only the pages the free ones lack: a planner's rule, not SGLang's, which asks "
                "evict() for the whole load.",
     "old": "        if evicted >= pages:\n",
     "new": "        if free_pages + evicted >= pages:\n"},
    {"name": "minimum_counts_the_device_hit",
     "explain": "Compares the whole prefix with the minimum: a long device hit lets a 1-page host hit through.",
     "old": "    if load < min_tokens:",
     "new": "    if device_hit + load < min_tokens:"},
    {"name": "loads_a_partial_page",
     "explain": "Rounds the host hit up to whole pages: the last page's missing tokens were never cached.",
     "old": "    pages = host_hit // page_size",
     "new": "    pages = -(-host_hit // page_size)"},
    {"name": "evicts_its_own_hit",
     "explain": "Lets eviction take the request's own device hit: the load extends a prefix it just evicted.",
     "old": "e.lock_ref == 0 and not e.in_hit",
     "new": "e.lock_ref == 0"},
    {"name": "ignores_free_pages",
     "explain": "Evicts for every load, even when the free pages hold it: the first allocation would have succeeded.",
     "old": "    if free_pages >= pages:                       # the first allocation succeeds\n"
            "        return LoadPlan(device_hit + load, load, [])\n",
     "new": ""},
]
