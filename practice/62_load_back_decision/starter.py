"""Exercise 62: the load-back decision. Write plan_load_back."""

from typing import NamedTuple


class Entry(NamedTuple):
    """A device-resident cached prefix that eviction can take as a whole (a device leaf)."""

    name: str
    pages: int
    last_access: int
    lock_ref: int = 0        # running requests use it
    in_hit: bool = False     # part of this request's own device hit


class LoadPlan(NamedTuple):
    prefix_tokens: int       # the request's prefix after the load: device hit + loaded tokens
    load_tokens: int         # host tokens copied to the device (0: nothing is loaded)
    evict: list              # names of the entries evicted, in eviction order (kept even when nothing loads)


def plan_load_back(device_hit, host_hit, *, page_size, min_tokens, free_pages, cached):
    """Decide the load-back of a host hit of host_hit tokens after a device hit of device_hit
    tokens, as SGLang 0.5.9's HiRadixCache.load_back: load its whole pages, all or nothing, only if
    that is at least min_tokens. If free_pages cannot hold them, evict entries of cached (least
    recently used first, ties by name; never a locked one nor one of the request's own hit) until
    the evicted pages reach the whole load, then try again; if that is still short, load nothing and
    keep the evictions."""
    raise NotImplementedError
