"""Exercise 31: radix tree match / insert, with edge splits that inherit the lock count, and a
running request's checkpoint.

Write match_prefix, insert, _split and checkpoint. Node, the locks and total_size are given.
"""

import itertools


class Node:
    def __init__(self, key=(), value=(), parent=None):
        self.children: dict[int, "Node"] = {}   # keyed by the first token of the child's key
        self.key: list[int] = list(key)          # the run of tokens on the edge into this node
        self.value: list[int] = list(value)      # their KV slots
        self.parent: "Node | None" = parent
        self.lock_ref = 0                        # running requests using this node (or a descendant)
        self.last_access = 0

    def __repr__(self) -> str:   # short: the parent and children links would repeat the whole tree
        return (f"Node(key={self.key}, value={self.value}, lock_ref={self.lock_ref}, "
                f"last_access={self.last_access}, children={len(self.children)})")


def _common_len(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class RadixCache:
    def __init__(self):
        self.root = Node()
        self.root.lock_ref = 1          # a permanent reference: the root is never evicted
        self._clock = itertools.count(1)
        self.evictable_size = 0         # cached tokens no request is using
        self.protected_size = 0         # cached tokens locked by running requests

    def match_prefix(self, key: list[int]) -> tuple[list[int], Node]:
        """Slots of the longest cached prefix of key, and the node where that prefix ends.

        When the match ends inside an edge, the edge is split so that it ends on a node.
        """
        # One clock value per walk: now = next(self._clock) once, then every node you pass gets
        # last_access = now (exercise 32 evicts by it).
        raise NotImplementedError

    def insert(self, key: list[int], value: list[int]) -> int:
        """Cache key -> value. Returns how many leading tokens were already cached; their slots in
        ``value`` are duplicates that the caller frees (the cached slots are kept)."""
        # A new leaf's tokens are cached but unlocked: add them to evictable_size.
        raise NotImplementedError

    def _split(self, child: Node, n: int) -> Node:
        """Cut child's edge after n tokens; return the new node holding the front part.

        The front is in use by whoever uses child, so it inherits child's lock count; the sizes
        do not change, because no token changes state.
        """
        raise NotImplementedError

    def checkpoint(self, node: Node, key: list[int], value: list[int]) -> tuple[list[int], Node, list[int]]:
        """A running request holds a lock on ``node`` (the end of the prefix it matched when it was
        admitted) and has computed KV for ``key`` into its slots ``value`` (the first ones, down to
        ``node``, are the tree's own slots it matched). Make that reusable while it runs:

        insert key -> value; the request's slots for tokens the tree already held beyond its own
        prefix are duplicates; lock the node where ``key`` now ends, then release ``node``.
        Returns (the tree's slots for all of key, that node, the duplicate slots the caller frees).
        ValueError, changing nothing, if key and value differ in length.
        """
        raise NotImplementedError

    # ---- given -------------------------------------------------------------------------------

    def inc_lock_ref(self, node: Node) -> None:
        """A request uses the prefix ending at node: lock it and every ancestor."""
        while node is not self.root:
            if node.lock_ref == 0:
                self.evictable_size -= len(node.key)
                self.protected_size += len(node.key)
            node.lock_ref += 1
            node = node.parent

    def dec_lock_ref(self, node: Node) -> None:
        """The request is done with the prefix ending at node."""
        while node is not self.root:
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self.evictable_size += len(node.key)
                self.protected_size -= len(node.key)
            node = node.parent

    def total_size(self) -> int:
        """Number of cached tokens."""
        return sum(len(n.key) for n in self._nodes())

    def _nodes(self):
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())
