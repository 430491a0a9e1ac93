"""Classic mistakes of exercise 62, each an edit of solution.py (`judge.py mistakes 62` shows them as diffs)."""

MISTAKES = [
    {"name": "evicts_then_gives_up",
     "explain": "Reports the evictions it tried even when the load does not happen: other requests lose "
                "their cached prefixes for nothing.",
     "old": "    if need > 0:\n        return LoadPlan(device_hit, 0, [])",
     "new": "    if need > 0:\n        return LoadPlan(device_hit, 0, evict)"},
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
     "explain": "Evicts for every page it loads, even when free pages are there.",
     "old": "    need = pages - free_pages",
     "new": "    need = pages"},
]
