"""Reference solution for exercise 31: radix tree match / insert with splits that inherit locks, and a
running request's checkpoint."""

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
        node, value, now = self.root, [], next(self._clock)
        while key:
            child = node.children.get(key[0])
            if child is None:
                break
            n = _common_len(child.key, key)
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = now
            value += child.value
            node, key = child, key[n:]
        return value, node

    def insert(self, key: list[int], value: list[int]) -> int:
        """Cache key -> value. Returns how many leading tokens were already cached; their slots in
        ``value`` are duplicates that the caller frees (the cached slots are kept)."""
        node, matched, now = self.root, 0, next(self._clock)
        while key:
            child = node.children.get(key[0])
            if child is None:
                leaf = Node(key, value, node)
                leaf.last_access = now
                node.children[key[0]] = leaf
                self.evictable_size += len(key)
                break
            n = _common_len(child.key, key)
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = now
            matched += n
            node, key, value = child, key[n:], value[n:]
        return matched

    def _split(self, child: Node, n: int) -> Node:
        """Cut child's edge after n tokens; return the new node holding the front part.

        The front is in use by whoever uses child, so it inherits child's lock count; the sizes
        do not change, because no token changes state.
        """
        front = Node(child.key[:n], child.value[:n], child.parent)
        front.lock_ref, front.last_access = child.lock_ref, child.last_access
        child.parent.children[front.key[0]] = front
        child.key, child.value, child.parent = child.key[n:], child.value[n:], front
        front.children[child.key[0]] = child
        return front

    def checkpoint(self, node: Node, key: list[int], value: list[int]) -> tuple[list[int], Node, list[int]]:
        """A running request holds a lock on ``node`` and has computed ``key`` into its slots
        ``value``: cache it now, move the lock to where ``key`` ends. Returns the tree's slots for
        ``key``, that node, and the request's duplicate slots for the caller to free."""
        if len(key) != len(value):
            raise ValueError(f"key has {len(key)} tokens but value has {len(value)} slots")
        matched = 0                          # the request's cached prefix: the path down to node
        walk = node
        while walk is not self.root:
            matched += len(walk.key)
            walk = walk.parent
        already = self.insert(key, value)
        duplicates = value[matched:already]  # computed again: someone cached them meanwhile
        slots, new = self.match_prefix(key)
        self.inc_lock_ref(new)               # lock the longer prefix before releasing the old one
        self.dec_lock_ref(node)
        return slots, new, duplicates

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
