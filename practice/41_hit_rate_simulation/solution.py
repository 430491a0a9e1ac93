"""Reference solution for exercise 41: replaying a workload against a prefix cache."""


def _check(workload, method) -> None:
    if not workload:
        raise ValueError("the workload is empty")
    if any(len(request) == 0 for request in workload):
        raise ValueError("every request needs at least 1 token")
    if method != "radix" and not (isinstance(method, int) and not isinstance(method, bool) and method >= 1):
        raise ValueError(f"method must be 'radix' or a block size >= 1, got {method!r}")


def hit_rate(workload: list[list[int]], method: str | int) -> float:
    """Hit tokens over all tokens, serving the requests in order from an unbounded cache."""
    _check(workload, method)
    size = 1 if method == "radix" else method   # a radix tree is a cache of 1-token blocks
    cached: set[tuple[int, ...]] = set()        # every cached whole-block prefix
    hits = 0
    for request in workload:
        # Match all but the last token, in whole blocks: the last token must be computed.
        usable = (len(request) - 1) // size * size
        matched = 0
        while matched < usable and tuple(request[:matched + size]) in cached:
            matched += size
        hits += matched
        for end in range(size, len(request) + 1, size):   # store the request's full blocks
            cached.add(tuple(request[:end]))
    return hits / sum(len(request) for request in workload)
