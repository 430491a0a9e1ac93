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
    evict: list              # names of the entries to evict first, in eviction order


def plan_load_back(device_hit, host_hit, *, page_size, min_tokens, free_pages, cached):
    """Decide the load-back of a host hit of host_hit tokens after a device hit of device_hit
    tokens: load its whole pages, all or nothing, only if that is at least min_tokens; take room
    from free_pages first, then evict entries of cached (least recently used first, ties by
    name), never a locked one nor one of the request's own hit; evict only what is needed, and
    nothing at all when the load does not happen."""
    raise NotImplementedError
