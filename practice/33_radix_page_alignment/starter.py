"""Exercise 33: a radix tree whose KV is allocated in pages of page_size tokens."""


class Node:
    """A node of the tree (given). The root has key == value == [] and parent None."""

    def __init__(self, key: list[int], value: list[int], parent: "Node | None"):
        self.key = key                          # tokens of this edge, a whole number of pages
        self.value = value                      # their KV slots, one per token
        self.parent = parent
        self.children: dict[tuple[int, ...], Node] = {}   # keyed by the child's first page


class PagedRadixCache:
    def __init__(self, page_size: int):
        """An empty tree (attributes page_size and root). ValueError unless page_size is an int >= 1."""
        raise NotImplementedError

    def match_prefix(self, key: list[int]) -> list[int]:
        """The KV slots of the longest cached prefix of key, a whole number of pages: key is cut
        down to whole pages first, and a page matches only if all its tokens do. Changes nothing
        that is cached."""
        raise NotImplementedError

    def insert(self, key: list[int], value: list[int]) -> int:
        """Cache key -> value (slots); len(key) must be a multiple of page_size and equal len(value).

        Returns how many leading tokens of key were cached already; their slots in the tree stay,
        the rest of key is added with its slots. Edges are split only at page boundaries; every
        child is stored under its first page. ValueError, changing nothing, for a bad key/value.
        """
        raise NotImplementedError

    def cache_finished(self, token_ids: list[int], kv_indices: list[int], num_prefix: int) -> list[int]:
        """A request finished: token_ids have KV in kv_indices; its first num_prefix tokens came from
        the tree (its match when it started).

        Inserts the page-aligned part and returns the slots the caller must free, in position
        order: those of tokens num_prefix .. (what the tree already held) - 1, then those of the
        unaligned tail. ValueError, changing nothing, if the lengths differ or num_prefix is not a
        multiple of page_size between 0 and the aligned length.
        """
        raise NotImplementedError

    def total_size(self) -> int:
        """The number of tokens cached in the tree."""
        raise NotImplementedError
