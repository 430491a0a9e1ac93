"""Reference solution for exercise 33: a radix tree over pages of page_size tokens."""


class Node:
    def __init__(self, key: list[int], value: list[int], parent: "Node | None"):
        self.key = key                          # tokens of this edge, a whole number of pages
        self.value = value                      # their KV slots, one per token
        self.parent = parent
        self.children: dict[tuple[int, ...], Node] = {}   # keyed by the child's first page


class PagedRadixCache:
    def __init__(self, page_size: int):
        if not isinstance(page_size, int) or page_size < 1:
            raise ValueError(f"page_size must be an int >= 1, got {page_size!r}")
        self.page_size = page_size
        self.root = Node([], [], None)

    def match_prefix(self, key: list[int]) -> list[int]:
        """The KV slots of the longest cached prefix of key, in whole pages."""
        key = key[:self._aligned(len(key))]
        node, matched = self.root, []
        while key:
            child = node.children.get(self._page(key))
            if child is None:
                break
            n = self._common_pages(child.key, key)
            matched += child.value[:n]
            if n < len(child.key):
                break
            node, key = child, key[n:]
        return matched

    def insert(self, key: list[int], value: list[int]) -> int:
        """Cache key -> value (page-aligned); returns how many leading tokens were cached already."""
        if len(key) != len(value):
            raise ValueError(f"key and value differ in length: {len(key)} != {len(value)}")
        if len(key) % self.page_size:
            raise ValueError(f"len(key) = {len(key)} is not a multiple of page_size = {self.page_size}")
        node, done = self.root, 0
        while done < len(key):
            rest = key[done:]
            child = node.children.get(self._page(rest))
            if child is None:
                node.children[self._page(rest)] = Node(list(rest), list(value[done:]), node)
                return done
            n = self._common_pages(child.key, rest)
            if n < len(child.key):
                child = self._split(child, n)
            node, done = child, done + n
        return done

    def cache_finished(self, token_ids: list[int], kv_indices: list[int], num_prefix: int) -> list[int]:
        """A request ends: cache its page-aligned part; return the slots the caller must free."""
        if len(token_ids) != len(kv_indices):
            raise ValueError(f"token_ids and kv_indices differ in length: {len(token_ids)} != {len(kv_indices)}")
        aligned = self._aligned(len(token_ids))
        if not isinstance(num_prefix, int) or not 0 <= num_prefix <= aligned or num_prefix % self.page_size:
            raise ValueError(f"num_prefix must be a multiple of page_size in 0..{aligned}, got {num_prefix!r}")
        already = self.insert(token_ids[:aligned], kv_indices[:aligned])
        duplicates = kv_indices[num_prefix:already]     # computed again while the tree had them
        tail = kv_indices[aligned:]                     # an incomplete page is never cached
        return list(duplicates) + list(tail)

    def total_size(self) -> int:
        """Tokens cached in the tree."""
        total, stack = 0, [self.root]
        while stack:
            node = stack.pop()
            total += len(node.key)
            stack.extend(node.children.values())
        return total

    def _split(self, child: Node, n: int) -> Node:
        """Cut child's edge after n tokens (a page boundary); return the new upper node."""
        parent = child.parent
        assert parent is not None                # the root is never split
        upper = Node(child.key[:n], child.value[:n], parent)
        parent.children[self._page(child.key)] = upper
        child.key, child.value, child.parent = child.key[n:], child.value[n:], upper
        upper.children[self._page(child.key)] = child
        return upper

    def _page(self, key: list[int]) -> tuple[int, ...]:
        return tuple(key[:self.page_size])

    def _aligned(self, n: int) -> int:
        return n // self.page_size * self.page_size

    def _common_pages(self, a: list[int], b: list[int]) -> int:
        """Length of the common prefix of a and b, counted in whole pages."""
        n, size = 0, self.page_size
        while n + size <= min(len(a), len(b)) and a[n:n + size] == b[n:n + size]:
            n += size
        return n
