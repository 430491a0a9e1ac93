"""Exercise 41: how much of a workload would a prefix cache serve?"""


def hit_rate(workload: list[list[int]], method: str | int) -> float:
    """Hit tokens over all tokens, serving the requests in order from an unbounded cache.

    method "radix": token granular; an int: a block size, whole blocks only. Each request matches
    at most all but its last token against everything served before it, then is stored whole.
    ValueError for an empty workload, an empty request or an unknown method.
    """
    raise NotImplementedError
