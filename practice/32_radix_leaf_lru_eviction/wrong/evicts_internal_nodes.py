"""Evicts the unlocked node with the smallest key even when it has children."""

import heapq
import itertools


class Node:
    def __init__(self, key=(), value=(), parent=None):
        self.children: dict[int, "Node"] = {}   # keyed by the first token of the child's key
        self.key: list[int] = list(key)          # the run of tokens on the edge into this node
        self.value: list[int] = list(value)      # their KV slots
        self.parent: "Node | None" = parent
        self.lock_ref = 0                        # running requests using this node (or a descendant)
        self.last_access = 0                     # the clock of the last walk through it
        self.hit_count = 0                       # inserts that passed through it (or created it)

    def __repr__(self) -> str:   # short: the parent and children links would repeat the whole tree
        return (f"Node(key={self.key}, value={self.value}, lock_ref={self.lock_ref}, "
                f"last_access={self.last_access}, hit_count={self.hit_count}, children={len(self.children)})")


def _common_len(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


POLICIES = ("lru", "lfu", "slru")


class RadixCache:
    def __init__(self, policy: str = "lru", protected_threshold: int = 2):
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        self.policy, self.protected_threshold = policy, protected_threshold
        self.root = Node()
        self.root.lock_ref = 1          # a permanent reference: the root is never evicted
        self._clock = itertools.count(1)
        self.evictable_size = 0         # cached tokens no request is using
        self.protected_size = 0         # cached tokens locked by running requests

    def evict(self, num_tokens: int) -> list[int]:
        """Evicts the unlocked node with the smallest key, leaf or not."""
        candidates = sorted((n for n in self._nodes() if n.lock_ref == 0), key=self._priority)
        freed: list[int] = []
        for node in candidates:
            if len(freed) >= num_tokens:
                break
            freed += node.value
            node.parent.children.pop(node.key[0], None)
            self.evictable_size -= len(node.key)
        return freed

    def _priority(self, node: Node) -> tuple:
        if self.policy == "lfu":
            return (node.hit_count, node.last_access)
        if self.policy == "slru":
            return (node.hit_count >= self.protected_threshold, node.last_access)
        return (node.last_access,)

    # ---- given (exercise 31, and hit counts) ---------------------------------------------------

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
        ``value`` are duplicates that the caller frees (the cached slots are kept). Every node the
        insert passes or creates counts one more hit."""
        node, matched, now = self.root, 0, next(self._clock)
        while key:
            child = node.children.get(key[0])
            if child is None:
                leaf = Node(key, value, node)
                leaf.last_access, leaf.hit_count = now, 1
                node.children[key[0]] = leaf
                self.evictable_size += len(key)
                break
            n = _common_len(child.key, key)
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = now
            child.hit_count += 1
            matched += n
            node, key, value = child, key[n:], value[n:]
        return matched

    def _split(self, child: Node, n: int) -> Node:
        """Cut child's edge after n tokens; return the new node holding the front part, which
        inherits child's lock count, clock and hit count."""
        front = Node(child.key[:n], child.value[:n], child.parent)
        front.lock_ref, front.last_access, front.hit_count = child.lock_ref, child.last_access, child.hit_count
        child.parent.children[front.key[0]] = front
        child.key, child.value, child.parent = child.key[n:], child.value[n:], front
        front.children[child.key[0]] = child
        return front

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
