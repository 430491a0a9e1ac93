"""SGLang-style radix tree prefix cache.

Every cached sequence is a path from the root. Each edge (a ``Node``) holds a run of tokens
(``key``) and the KV-cache slots those tokens were written to (``value``), so reading the keys along
a path spells out a cached prefix and reading the values gives where its KV lives.

Four operations make it a cache:

* ``match_prefix(key)`` walks down from the root as long as the tree agrees with ``key``. If the
  agreement stops in the middle of an edge, the edge is split in two so that the walk ends exactly
  on a node; that node is the handle a request locks.
* ``insert(key, value)`` stores a finished sequence and returns how many of its leading tokens were
  already cached. The caller computed those tokens a second time, so it frees its own copies.
* ``inc_lock_ref(node)`` / ``dec_lock_ref(node)`` count users of every node from ``node`` up to the
  root. Tokens of nodes with no users are *evictable*, the others *protected*; a lock only moves
  tokens from one count to the other, so ``evictable_size + protected_size`` never changes.
* ``evict(num_tokens)`` deletes unlocked leaves, least recently used first. A parent whose last
  child goes becomes a leaf and joins the candidates, so an unused branch is peeled from its tip
  inwards. Only leaves go: an inner node is the prefix of everything below it.

The root holds one permanent reference, so it is never an unlocked leaf and eviction needs no
"but not the root" branch.

Chapter 03's reference session (six operations whose results come from an independent
implementation's doctest), replayed:

>>> from nano_engine.radix import RadixCache
>>> tree = RadixCache()
>>> tree.insert([1, 2, 3, 4, 5], [10, 11, 12, 13, 14])   # values: the KV slots of the tokens
0
>>> tree.insert([1, 2, 3, 9, 9], [10, 11, 12, 20, 21])   # [1, 2, 3] is cached already: split
3
>>> value, node = tree.match_prefix([1, 2, 3, 4, 7])
>>> value, node.key
([10, 11, 12, 13], [4])
>>> tree.inc_lock_ref(node)                               # a request now reads [1, 2, 3, 4]
>>> tree.evictable_size, tree.protected_size
(3, 4)
>>> tree.evict(10)                                        # asks for 10; only unlocked leaves go
[14, 20, 21]
>>> tree.dec_lock_ref(node)                               # the request is done with it
>>> sorted(tree.evict(10)), tree.total_size()
([10, 11, 12, 13], 0)

Beyond the chapter:

* ``page_size``: with ``RadixCache(page_size=P)`` (P > 1) the tree works in whole pages, as
  mini-sglang does. A child is found by the tuple of its first P tokens, matches and inserts are cut
  down to a multiple of P, and the slots of each stored page must be one aligned page of the KV pool
  (``s, s+1, ..., s+P-1`` with ``s % P == 0``), so whatever eviction frees is whole pages.
* Fast comparison: how far an edge agrees with a prompt is the hot loop of every lookup. Runs of at
  least ``numpy_min_run`` tokens are compared with NumPy (``common_len``); shorter runs, where
  NumPy's fixed cost per call is larger than the loop itself, use the plain loop
  (``_common_len_reference``). ``numpy_min_run=None`` gives the all-Python tree of the chapter,
  the baseline in ``benchmarks/radix_lookup.py``. Keys may be passed as lists or as 1-D integer
  NumPy arrays. An array is compared without ever turning into Python ints: that is what makes
  long prompts cheap (about 13x faster than the loop at 32k tokens). A list is first compared to
  the edge with list equality (C code, still one Python int at a time) and converted for NumPy
  only where it disagrees (about 3x). An engine that keeps its prompts as int64 arrays gets the
  larger gain.
* Eviction candidates are kept between calls: a heap of ``(last_access, id, leaf)`` entries, one
  pushed whenever a leaf appears or is accessed, stale ones skipped when popped. ``evict`` then
  costs O(log n) per node it removes, not a walk over the whole tree (SGLang collects the leaves
  on every call); the order is the same, least recently used leaf first.
* Instrumentation for diagrams and step-by-step views: ``last_match_path``, ``last_split``,
  ``last_evicted``, node ``id``s, and an ``on_event`` callback receiving ``(kind, data)`` tuples
  (see ``RadixCache.__init__``). Nothing is built when nobody listens.
* ``check_invariants()`` verifies the bookkeeping; the property-based tests call it after every step.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

Event = tuple[str, dict[str, Any]]
Tokens = Sequence[int] | np.ndarray

NUMPY_MIN_RUN = 64
"""Default shortest run compared with NumPy. Below it the per-call cost of NumPy (about a
microsecond) is more than what the plain loop spends; ``benchmarks/radix_lookup.py`` measures the
crossover."""


def _common_len_reference(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of ``a`` and ``b``: the readable, one-token-at-a-time version."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def common_len(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the common prefix of two 1-D integer arrays, without a Python loop.

    Compare the overlapping part element-wise, then find the first mismatch: ``argmax`` on a boolean
    array returns the index of the first ``True``. If there is none, the shorter array is a prefix
    of the longer one.
    """
    n = min(len(a), len(b))
    if n == 0:
        return 0
    differs = a[:n] != b[:n]
    first = int(differs.argmax())
    return first if differs[first] else n


def _as_tokens(x: Tokens, what: str) -> list[int] | np.ndarray:
    """Accept a list of ints or a 1-D integer array (anything else is copied into a list)."""
    if isinstance(x, list):
        return x
    if not isinstance(x, np.ndarray) and hasattr(x, "__array__"):  # e.g. a CPU torch tensor
        x = np.asarray(x)
    if isinstance(x, np.ndarray):
        if x.ndim != 1 or x.dtype.kind not in "iu":
            raise ValueError(f"{what} must be a 1-D sequence of ints, got an array of shape "
                             f"{x.shape} and dtype {x.dtype}")
        return x
    return list(x)


def _to_list(x: list[int] | np.ndarray) -> list[int]:
    return x if isinstance(x, list) else x.tolist()


class Node:
    """One edge of the tree: a run of tokens (``key``) and their KV slots (``value``).

    ``key`` and ``value`` are plain lists of ints; treat them as read-only (the tree keeps an array
    copy of long keys for fast comparison). ``lock_ref`` counts the requests using this node or
    anything below it; ``last_access`` is the tree's clock at the last walk through it; ``id`` is a
    small integer, stable for the node's life, for drawing the tree.
    """

    __slots__ = ("id", "key", "value", "parent", "children", "lock_ref", "last_access", "_array")

    def __init__(self, key: list[int], value: list[int], parent: Node | None, id: int) -> None:
        self.id = id
        self.key = key
        self.value = value
        self.parent = parent
        self.children: dict[int | tuple[int, ...], Node] = {}  # keyed by first token or first page
        self.lock_ref = 0
        self.last_access = 0
        self._array: np.ndarray | None = None  # NumPy copy of key, made on first long comparison

    def parent_in_tree(self) -> Node:
        """The parent of a node that is in the tree (only the root and evicted nodes have none)."""
        if self.parent is None:
            raise ValueError(f"node {self.id} has no parent: it is the root or was evicted")
        return self.parent

    def key_array(self) -> np.ndarray:
        """The key as an int64 array (built once, then reused by every comparison)."""
        if self._array is None:
            self._array = np.array(self.key, dtype=np.int64)
        return self._array

    def __repr__(self) -> str:
        key = self.key if len(self.key) <= 8 else f"[{len(self.key)} tokens]"
        return f"Node(id={self.id}, key={key}, lock_ref={self.lock_ref})"


class RadixCache:
    """Prefix cache over KV slots, organised as a radix tree (see the module docstring).

    Args:
        page_size: tokens per KV page; the tree stores and matches whole pages only.
        numpy_min_run: runs at least this long are compared with NumPy, shorter ones with the plain
            loop; ``None`` compares everything with the plain loop (the chapter's tree).
        on_event: optional callback, called with one ``(kind, data)`` tuple per event, for example
            ``RadixCache(on_event=events.append)``. Kinds and their data (node ids, lists of ints):

            - ``"match"``: ``key_len``, ``matched``, ``path`` (ids, root first)
            - ``"split"``: ``node`` (new front part), ``child`` (the old node, now the tail),
              ``key_before``, ``at``, ``inherited_lock``
            - ``"insert"``: ``node`` (the new leaf, or ``None`` if all was cached), ``parent``,
              ``key``, ``slots`` (of the new leaf), ``already_cached``
            - ``"lock"`` / ``"unlock"``: ``node``, ``path`` (ids, up to but without the root),
              ``moved`` (tokens moved between evictable and protected)
            - ``"evict"``: ``node``, ``parent`` (it was removed from), ``key``, ``slots``

    Besides the events, the tree keeps what its last operations did: ``last_match_path`` (nodes of
    the most recent ``match_prefix`` or ``insert``, root first, ending at the node where the key
    ends: lock ``last_match_path[-1]`` after an insert to hold what was just stored),
    ``last_split`` (the node a split created in that operation, else ``None``) and
    ``last_evicted`` (nodes removed by the most recent ``evict``, in order) with
    ``last_evicted_parents`` (the node each was removed from: pictures draw the gone leaves there).
    """

    def __init__(self, page_size: int = 1, *, numpy_min_run: int | None = NUMPY_MIN_RUN,
                 on_event: Callable[[Event], None] | None = None) -> None:
        if not isinstance(page_size, int) or page_size < 1:
            raise ValueError(f"page_size must be an int >= 1, got {page_size!r}")
        if numpy_min_run is not None and numpy_min_run < 0:
            raise ValueError(f"numpy_min_run must be >= 0 or None, got {numpy_min_run}")
        self.page_size = page_size
        self.numpy_min_run = numpy_min_run
        self.on_event = on_event
        self._ids = itertools.count()
        self._clock = itertools.count(1)
        self._now = 0  # clock value of the walk in progress
        self.root = self._new_node([], [], None)
        self.root.lock_ref = 1  # a permanent user: the root is never an unlocked leaf
        self.evictable_size = 0  # tokens in nodes nobody uses: may be evicted
        self.protected_size = 0  # tokens in nodes some request uses: must stay
        self.last_match_path: list[Node] = [self.root]
        self.last_split: Node | None = None
        self.last_evicted: list[Node] = []
        self.last_evicted_parents: list[Node] = []
        # Eviction candidates, kept between calls: (last_access, id, node) for every leaf, pushed
        # again whenever its access time changes. Stale entries (the leaf was accessed since, got
        # a child, or left the tree) are skipped when popped, so ``evict`` costs O(log n) per node
        # it removes instead of a walk over the whole tree.
        self._leaf_heap: list[tuple[int, int, Node]] = []
        self._num_nodes = 1

    # ----------------------------------------------------------------- lookup and insertion

    def match_prefix(self, key: Tokens) -> tuple[list[int], Node]:
        """Return the KV slots of the longest cached prefix of ``key`` and the node it ends on.

        With pages, the prefix is a whole number of pages. The returned node is what a request
        passes to ``inc_lock_ref`` to keep the prefix from being evicted while it reads it.
        """
        tokens = self._whole_pages(_as_tokens(key, "key"))
        path, matched = self._walk(tokens)
        value: list[int] = []
        for node in path[1:]:
            value += node.value
        if self.on_event is not None:
            self.on_event(("match", {"key_len": len(tokens), "matched": matched,
                                     "path": [n.id for n in path]}))
        return value, path[-1]

    def match_length(self, key: Tokens) -> int:
        """How many leading tokens of ``key`` are cached (whole pages), and nothing else.

        Unlike ``match_prefix`` it changes nothing: no split, no access time, no event. For
        schedulers and routers that compare many candidates and act on one of them only: asking
        must not make the other prefixes look recently used to LRU eviction.
        """
        tokens = self._whole_pages(_as_tokens(key, "key"))
        node, matched = self.root, 0
        while matched < len(tokens):
            child = node.children.get(self._child_key(tokens, matched))
            if child is None:
                break
            n = self._agree(child, tokens, matched)
            matched += n - n % self.page_size
            if n < len(child.key):
                break
            node = child
        return matched

    def insert(self, key: Tokens, value: Tokens) -> int:
        """Cache ``key`` with its KV slots ``value``; return how many leading tokens were cached.

        Those first tokens keep their existing slots, so the caller's ``value[:returned]`` are
        duplicates to free. With pages only ``key[:len(key) // page_size * page_size]`` is stored;
        the slots of the partial last page stay the caller's.
        """
        tokens, slots = _as_tokens(key, "key"), _as_tokens(value, "value")
        if len(tokens) != len(slots):
            raise ValueError(f"insert: key has {len(tokens)} tokens but value has {len(slots)} "
                             f"slots; they must be the same length")
        tokens, slots = self._whole_pages(tokens), self._whole_pages(slots)
        if self.page_size > 1:
            self._check_aligned_pages(slots)
        path, matched = self._walk(tokens)
        parent, new = path[-1], None
        if matched < len(tokens):
            new = self._new_node(_to_list(tokens[matched:]), _to_list(slots[matched:]), parent)
            if isinstance(tokens, np.ndarray):  # the array is at hand: keep a copy for comparing
                new._array = tokens[matched:].astype(np.int64)
            new.last_access = self._now
            parent.children[self._child_key(new.key, 0)] = new
            self._num_nodes += 1
            self._push_leaf(new)
            self.evictable_size += len(new.key)
            path.append(new)
        if self.on_event is not None:
            self.on_event(("insert", {"node": None if new is None else new.id,
                                      "parent": parent.id,
                                      "key": [] if new is None else list(new.key),
                                      "slots": [] if new is None else list(new.value),
                                      "already_cached": matched}))
        return matched

    def _walk(self, tokens: list[int] | np.ndarray) -> tuple[list[Node], int]:
        """Follow ``tokens`` down from the root while the tree agrees with them.

        Returns the nodes passed (root first) and the number of tokens matched. An edge that agrees
        only in part is split first, so the walk always ends on a node. Every node passed is
        stamped with the same clock value: a parent is never older than its children.
        """
        self._now = now = next(self._clock)
        self.last_split = None
        node, matched, path = self.root, 0, [self.root]
        while matched < len(tokens):
            child = node.children.get(self._child_key(tokens, matched))
            if child is None:
                break
            n = self._agree(child, tokens, matched)
            n -= n % self.page_size  # whole pages; n >= page_size, the first page found the child
            stopped_inside = n < len(child.key)
            if stopped_inside:
                child = self._split(child, n)
            child.last_access = now
            path.append(child)
            node, matched = child, matched + n
            if stopped_inside:
                break
        if not node.children and node is not self.root:   # a leaf's access time changed
            self._push_leaf(node)
        self.last_match_path = path
        return path, matched

    def _agree(self, child: Node, tokens: list[int] | np.ndarray, start: int) -> int:
        """How many tokens of ``child.key`` agree with ``tokens[start:]``."""
        n = min(len(child.key), len(tokens) - start)
        if self.numpy_min_run is None or n < self.numpy_min_run:
            return _common_len_reference(child.key, _to_list(tokens[start:start + n]))
        run = tokens[start:start + n]
        if isinstance(run, list):
            # Unboxing a list for NumPy costs ~15 ns a token. Every edge but the last on a path
            # agrees in full, and list equality (in C) settles that for about half the cost.
            if run == (child.key if n == len(child.key) else child.key[:n]):
                return n
            run = np.array(run, dtype=np.int64)  # convert only the part being compared
        return common_len(child.key_array()[:n], run)

    def _split(self, child: Node, n: int) -> Node:
        """Cut ``child``'s edge after ``n`` tokens; return the new node holding the front part.

        The new node takes ``child``'s place under the parent and ``child`` keeps the tail below
        it. Whoever locked ``child`` also uses the front part, so the front inherits ``lock_ref``
        (and ``last_access``); the evictable/protected sizes are unchanged.
        """
        key_before = list(child.key) if self.on_event is not None else None
        front = self._new_node(child.key[:n], child.value[:n], child.parent)
        front.lock_ref, front.last_access = child.lock_ref, child.last_access
        if child._array is not None:
            front._array, child._array = child._array[:n].copy(), child._array[n:].copy()
        child.key, child.value, child.parent = child.key[n:], child.value[n:], front
        front.parent_in_tree().children[self._child_key(front.key, 0)] = front
        front.children[self._child_key(child.key, 0)] = child
        self._num_nodes += 1
        self.last_split = front
        if self.on_event is not None:
            self.on_event(("split", {"node": front.id, "child": child.id, "key_before": key_before,
                                     "at": n, "inherited_lock": front.lock_ref}))
        return front

    def _new_node(self, key: list[int], value: list[int], parent: Node | None) -> Node:
        """Every node is made here (a subclass with richer nodes overrides it: ``hiradix.HiRadixCache``)."""
        return Node(key, value, parent, next(self._ids))

    def _child_key(self, tokens: list[int] | np.ndarray, start: int) -> int | tuple[int, ...]:
        """The dict key that selects a child: its first token, or its first page as a tuple."""
        if self.page_size == 1:
            return int(tokens[start])
        return tuple(_to_list(tokens[start:start + self.page_size]))

    def _whole_pages(self, tokens: list[int] | np.ndarray) -> list[int] | np.ndarray:
        cut = len(tokens) - len(tokens) % self.page_size
        return tokens if cut == len(tokens) else tokens[:cut]

    def _check_aligned_pages(self, slots: list[int] | np.ndarray) -> None:
        pages = np.asarray(slots, dtype=np.int64).reshape(-1, self.page_size)
        if len(pages) and ((pages[:, 0] % self.page_size != 0).any()
                           or (pages - pages[:, :1] != np.arange(self.page_size)).any()):
            raise ValueError(f"insert: with page_size={self.page_size} every page of value must be "
                             f"the slots s, s+1, ..., s+{self.page_size - 1} of one KV page "
                             f"(s a multiple of {self.page_size})")

    # ---------------------------------------------------------------------------- locking

    def inc_lock_ref(self, node: Node) -> None:
        """Mark ``node`` and its ancestors as used by one more request (so none can be evicted)."""
        self._check_in_tree(node)
        moved, path = 0, []
        while node is not self.root:
            if node.lock_ref == 0:  # first user: its tokens become protected
                moved += len(node.key)
            node.lock_ref += 1
            path.append(node)
            node = node.parent_in_tree()
        self.evictable_size -= moved
        self.protected_size += moved
        if self.on_event is not None and path:
            self.on_event(("lock", {"node": path[0].id, "path": [n.id for n in path],
                                    "moved": moved}))

    def dec_lock_ref(self, node: Node) -> None:
        """Undo one ``inc_lock_ref(node)``; raises ``ValueError`` if ``node`` is not locked."""
        self._check_in_tree(node)
        if node is not self.root and node.lock_ref < 1:
            # Ancestors count at least as many users as their descendants, so checking the start
            # is enough to know the whole walk stays >= 0.
            raise ValueError(f"dec_lock_ref: node {node.id} is not locked (lock_ref "
                             f"{node.lock_ref}); every dec_lock_ref needs an inc_lock_ref first")
        moved, path = 0, []
        while node is not self.root:
            node.lock_ref -= 1
            if node.lock_ref == 0:  # last user left: its tokens become evictable
                moved += len(node.key)
            path.append(node)
            node = node.parent_in_tree()
        self.evictable_size += moved
        self.protected_size -= moved
        if self.on_event is not None and path:
            self.on_event(("unlock", {"node": path[0].id, "path": [n.id for n in path],
                                      "moved": moved}))

    def _check_in_tree(self, node: Node) -> None:
        if node.parent is None and node is not self.root:
            raise ValueError(f"node {node.id} is no longer in the tree (it was evicted)")

    # ---------------------------------------------------------------------------- eviction

    def evict(self, num_tokens: int) -> list[int]:
        """Remove unlocked leaves, least recently used first, until ``num_tokens`` are freed.

        Returns the freed KV slots (possibly more than asked, as nodes go whole; fewer if nothing
        evictable is left).
        """
        if num_tokens < 0:
            raise ValueError(f"evict: num_tokens must be >= 0, got {num_tokens}")
        heap = self._leaf_heap
        freed: list[int] = []
        locked: list[tuple[int, int, Node]] = []   # current entries of locked leaves, put back after
        self.last_evicted = []
        self.last_evicted_parents = []
        while heap and len(freed) < num_tokens:
            entry = heapq.heappop(heap)
            last_access, _, node = entry
            if node.parent is None or node.children or node.last_access != last_access:
                continue  # stale: evicted, no longer a leaf, or accessed since (a newer entry exists)
            if node.lock_ref > 0:
                locked.append(entry)
                continue
            parent = node.parent
            del parent.children[self._child_key(node.key, 0)]
            node.parent = None
            self._num_nodes -= 1
            freed += node.value
            self.evictable_size -= len(node.key)
            self.last_evicted.append(node)
            self.last_evicted_parents.append(parent)
            if self.on_event is not None:
                self.on_event(("evict", {"node": node.id, "parent": parent.id,
                                         "key": list(node.key), "slots": list(node.value)}))
            if not parent.children and parent is not self.root:   # it is a leaf now
                self._push_leaf(parent)
        for entry in locked:
            heapq.heappush(heap, entry)
        return freed

    def _push_leaf(self, node: Node) -> None:
        heap = self._leaf_heap
        heapq.heappush(heap, (node.last_access, node.id, node))
        if len(heap) > 4 * self._num_nodes + 64:   # mostly stale: rebuild from the current leaves
            heap[:] = [(n.last_access, n.id, n) for n in self.nodes() if not n.children and n is not self.root]
            heapq.heapify(heap)

    # ------------------------------------------------------------------------ inspection

    def total_size(self) -> int:
        """Tokens held by the tree (evictable + protected)."""
        return self.evictable_size + self.protected_size

    def nodes(self) -> Iterator[Node]:
        """All nodes, root first, depth-first."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children.values()))

    def check_invariants(self) -> None:
        """Raise ``AssertionError`` naming the first broken rule of the tree's bookkeeping.

        * the root: empty key, no parent, exactly its one permanent reference;
        * every other node: a non-empty key of whole pages, one slot per token, filed under its
          parent by its first token (page), and linked back to that parent;
        * locks: ``lock_ref >= 0``, and a node counts at least the sum of its children's users
          (each lock walks up from its node, so it is counted once at every ancestor) -- hence a
          locked node's ancestors are all locked;
        * a non-root parent was accessed no earlier than its children (walks stamp whole paths);
        * ``evictable_size`` / ``protected_size`` equal the key lengths summed over unlocked /
          locked nodes, and their sum is ``total_size()``.
        """
        def require(ok: bool, message: str) -> None:
            if not ok:
                raise AssertionError(message)

        root = self.root
        require(root.key == [] and root.value == [] and root.parent is None,
                "the root must have an empty key and no parent")
        require(root.lock_ref == 1, f"the root must hold exactly its permanent reference, "
                                    f"has lock_ref {root.lock_ref}")
        evictable = protected = 0
        ids = set()
        for node in self.nodes():
            require(node.id not in ids, f"node id {node.id} appears twice")
            ids.add(node.id)
            for file_key, child in node.children.items():
                require(child.parent is node, f"node {child.id} does not point back to its parent")
                require(file_key == self._child_key(child.key, 0),
                        f"node {child.id} is filed under {file_key!r}, not its first token/page")
            users_below = sum(c.lock_ref for c in node.children.values())
            if node is root:
                continue
            require(len(node.key) > 0, f"node {node.id} has an empty key")
            require(len(node.key) % self.page_size == 0,
                    f"node {node.id} holds {len(node.key)} tokens, not whole pages")
            require(self._value_ok(node),
                    f"node {node.id} has {len(node.key)} tokens but {len(node.value)} slots")
            require(node._array is None or node._array.tolist() == node.key,
                    f"node {node.id}'s comparison array differs from its key")
            require(node.lock_ref >= users_below >= 0,
                    f"node {node.id} has lock_ref {node.lock_ref} but its children count "
                    f"{users_below} users")
            require(all(node.last_access >= c.last_access for c in node.children.values()),
                    f"a child of node {node.id} was accessed after it")
            if node.lock_ref == 0:     # the sizes count slots held (a tiered tree has nodes without)
                evictable += len(node.value)
            else:
                protected += len(node.value)
        require(evictable == self.evictable_size,
                f"evictable_size is {self.evictable_size}, unlocked nodes hold {evictable}")
        require(protected == self.protected_size,
                f"protected_size is {self.protected_size}, locked nodes hold {protected}")
        require(self.total_size() == evictable + protected, "total_size() is not the node sum")
        require(len(ids) == self._num_nodes, f"{len(ids)} nodes in the tree, {self._num_nodes} counted")
        current = {id(node) for last_access, _, node in self._leaf_heap
                   if node.parent is not None and node.last_access == last_access}
        for node in self.nodes():
            if node is not root and not node.children:
                require(id(node) in current, f"leaf {node.id} is not among the eviction candidates")

    def _value_ok(self, node: Node) -> bool:
        """One slot per token (``hiradix.HiRadixCache`` also allows none: a node only on the host)."""
        return len(node.key) == len(node.value)
