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

**Which tail survives: two ways to stamp a split.** Eviction takes the leaf with the oldest
``last_access``, so what a walk stamps decides what goes first under memory pressure. By default
the tree stamps as mini-sglang does (``python/minisgl/kvcache/radix_cache.py``: ``split_at``, then
the walk sets the timestamp of the node it ends on) and as chapter 03's from-scratch tree does:
every node the walk *uses* gets the walk's clock value, and the tail left below a split keeps its
old one, since no request read it. ``RadixCache(..., sglang=True)`` stamps as SGLang 0.5.23 does,
op for op (``python/sglang/srt/mem_cache/radix_cache.py::RadixCache._match_prefix_helper`` and
``python/sglang/srt/mem_cache/radix_cache.py::RadixCache._insert_helper`` set the child's
``last_access_time`` *before* ``python/sglang/srt/mem_cache/radix_cache.py::RadixCache._split_node``
cuts it, and every new ``python/sglang/srt/mem_cache/radix_cache.py::TreeNode``, the front of a
split or a new leaf, is created with the current time, later than the walk's): the tail counts as
just used, and the front and new leaves as newer still. Insert ``A + x``, then ``B``, then ``A + y``
(which splits ``A + x``), then ``C``, and evict 40 tokens: mini-sglang's order drops ``x`` (last
read by the first request) and then ``B``; SGLang's drops ``B`` alone, since the split refreshed
``x``. A later ``A + x`` hits ``A`` only in the first tree and all of ``A + x`` in the second:

>>> def six_requests(tree):
...     A, x, y = list(range(100, 140)), list(range(200, 220)), list(range(300, 320))
...     B, C, D = list(range(400, 440)), list(range(500, 540)), list(range(600, 640))
...     slots = iter(range(10_000))
...     for tokens in (A + x, B, A + y, C):
...         tree.insert(tokens, [next(slots) for _ in tokens])
...     freed = len(tree.evict(40))             # the pool is 40 tokens short for D
...     tree.insert(D, [next(slots) for _ in D])
...     return freed, len(tree.match_prefix(A + x)[0])
>>> six_requests(RadixCache()), six_requests(RadixCache(sglang=True))
((60, 40), (40, 60))

Nothing else differs between the two modes. ``tests/test_radix.py`` replays answers recorded
from SGLang 0.5.23's own tree (``tests/data/``): the SGLang mode gives every one of them, the
default parts from it at an eviction.

Beyond the chapter:

* ``page_size``: with ``RadixCache(page_size=P)`` (P > 1) the tree works in whole pages, as
  mini-sglang and SGLang do. A child is found by the tuple of its first P tokens, matches and
  inserts are cut down to a multiple of P, and the slots of each stored page must be one aligned
  page of the KV pool (``s, s+1, ..., s+P-1`` with ``s % P == 0``), so whatever eviction frees is
  whole pages.
* Compact runs: a node's ``key`` and ``value`` are :class:`Ints`, arrays of machine integers
  (8 bytes a token id, 4 bytes a KV slot) that compare equal to, and print as, the list of their
  values. A list of ints costs 8 bytes of pointer plus a 32-byte int object per token.
  Comparing a prompt with an edge is then a C comparison of two arrays (``common_len``: doubling
  windows, then a binary search in the first window that differs, as SGLang's
  ``RadixKey.match_at``). A prompt given as a Python list is converted window by window, so only
  the tokens that are compared are converted (all at once when the tree seems to hold most of
  it); ``insert`` converts the key once. ``match_prefix`` and ``evict`` return the slots as an
  ``Ints`` too (copied from the nodes' arrays: no Python int is made per token); it concatenates
  with a list, ``slots + [...]``, as a list would. Against the list-based tree this replaced:
  about 14 bytes of memory per cached token instead of 77, and matching 1.4-2.6x faster where
  prompts hit; storing a mostly new request costs up to twice as much, since every token is read
  once to be stored (``benchmarks/radix_lookup.py``; beside SGLang's tree: ``benchmarks/README.md``).
* Eviction candidates are kept between calls: a heap of ``(last_access, id, leaf)`` entries, one
  pushed whenever a leaf appears or is accessed, stale ones skipped when popped. ``evict`` then
  costs O(log n) per node it removes, not a walk over the tree (SGLang's ``RadixCache.evict``
  heapifies all its evictable leaves on every call). It takes the same leaves in the same order
  as a fresh heap of all unlocked leaves would.
* Instrumentation for diagrams and step-by-step views: ``last_match_path``, ``last_split``,
  ``last_evicted``, node ``id``s, and an ``on_event`` callback receiving ``(kind, data)`` tuples
  (see ``RadixCache.__init__``). Nothing is built when nobody listens.
* ``check_invariants()`` verifies the bookkeeping; the property-based tests call it after every step.
"""

from __future__ import annotations

import heapq
import itertools
import warnings
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from nano_engine.checks import require_int

Event = tuple[str, dict[str, Any]]
Tokens = Sequence[int] | np.ndarray

TOKEN = "Q"
"""Typecode of a stored token id: unsigned 64-bit (a vocabulary id, or a trace's 64-bit hash id)."""
SLOT = "I"
"""Typecode of a stored KV slot: unsigned 32-bit (no KV pool holds 4 billion tokens)."""
_LIMITS = {TOKEN: "token ids must be ints in 0..2**64-1", SLOT: "KV slots must be ints in 0..2**32-1"}

FIRST_WINDOW = 128
"""Tokens in the first window ``common_len`` compares of a prompt given as a list (each window is
converted: a small first one converts little when the prompt leaves the edge early); each next
window is twice as long. An array's windows start 8 times larger (slicing it costs a copy only)."""


class Ints(array):
    """A run of non-negative ints stored as machine integers (an ``array.array``).

    Equal to the list of its values (``Ints('Q', [4]) == [4]``) and printed as that list, so a node's
    ``key`` and ``value`` read like lists in tests, pictures and doctests. Slicing one gives a plain
    ``array``.
    """

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return self.tolist() == other
        return array.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # mutable, as a list

    def __repr__(self) -> str:
        return repr(self.tolist())

    def __add__(self, other: Iterable[int]) -> Ints:
        """``slots + more``: a new run; ``more`` may be a list (a list is converted)."""
        run = _part(self, 0, len(self))
        _fill(run, other, "concatenation")
        return run

    def __radd__(self, other: list[int]) -> list[int]:
        """``a_list + slots``: a list, as ``list + list``."""
        if not isinstance(other, list):
            return NotImplemented
        return other + self.tolist()

    def __iadd__(self, other: Iterable[int]) -> Ints:
        _fill(self, other, "concatenation")
        return self


def _fill(run: array, values: Iterable[int], what: str) -> None:
    """Append ``values`` to ``run`` (``fromlist`` for a list: about 3 ns a value); ValueError if one
    does not fit the typecode."""
    try:
        if isinstance(values, list):
            run.fromlist(values)
        elif isinstance(values, array):
            if values.typecode == run.typecode:
                array.extend(run, values)         # a copy of the bytes
            else:
                run.fromlist(values.tolist())
        else:
            run.extend(values)
    except (OverflowError, TypeError):
        bad = next((v for v in values if not (isinstance(v, int) and 0 <= v < 2 ** (8 * run.itemsize))), None)
        raise ValueError(f"{what}: {_LIMITS[run.typecode]}, got {bad!r}") from None


def _ints(typecode: str, values: Sequence[int] | array, what: str) -> Ints:
    """``values`` as an :class:`Ints` of ``typecode``: a new one, except that an ``Ints`` of that
    typecode is taken as it is (the tree makes those itself and hands them over)."""
    if type(values) is Ints and values.typecode == typecode:
        return values
    run = Ints(typecode)
    _fill(run, values, what)
    return run


def _part(run: array, start: int, stop: int) -> Ints:
    """``run[start:stop]`` as a new :class:`Ints`, in one copy (a slice would be a plain array)."""
    part = Ints(run.typecode)
    size = run.itemsize
    part.frombytes(memoryview(run).cast("B")[start * size:stop * size])
    return part


def _token_array(values: Sequence[int], what: str = "key") -> array:
    """``values`` as a plain ``TOKEN`` array (a window of a prompt being compared)."""
    run = array(TOKEN)
    _fill(run, values, what)
    return run


def _first_difference(a: array, b: array) -> int:
    """Index of the first position where two equal-length arrays differ (they must differ)."""
    lo, hi = 0, len(a)                 # a[:lo] == b[:lo] and a[lo:hi] != b[lo:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def common_len(key: array, tokens: list[int] | array, start: int, n: int) -> int:
    """How many of ``key[:n]`` equal ``tokens[start:start + n]``.

    Windows of ``FIRST_WINDOW`` tokens, then twice as many each time, are compared in C (array
    against array, as SGLang's ``RadixKey.match_at`` gallops); inside the first window that
    differs, a binary search finds the token. A prompt that leaves the edge early is compared (and,
    given as a list, converted) only that far, and no copy is larger than twice what agrees.
    """
    lo, size = 0, FIRST_WINDOW if isinstance(tokens, list) else 8 * FIRST_WINDOW
    while lo < n:
        hi = min(lo + size, n)
        edge, window = key[lo:hi], tokens[start + lo:start + hi]
        run = _token_array(window) if isinstance(window, list) else window
        if array.__ne__(edge, run):
            return lo + _first_difference(edge, run)
        lo, size = hi, 2 * size
    return n


def _as_tokens(x: Tokens, what: str) -> list[int] | array:
    """A key as a list of ints (converted as it is compared) or a ``TOKEN`` array."""
    if isinstance(x, list):
        return x
    if isinstance(x, array) and x.typecode == TOKEN:
        return x
    if not isinstance(x, np.ndarray) and hasattr(x, "__array__"):  # e.g. a CPU torch tensor
        x = np.asarray(x)
    if isinstance(x, np.ndarray):
        if x.ndim != 1 or x.dtype.kind not in "iu":
            raise ValueError(f"{what} must be a 1-D sequence of ints, got an array of shape "
                             f"{x.shape} and dtype {x.dtype}")
        if x.dtype.kind == "i" and x.size and x.min() < 0:
            raise ValueError(f"{what}: {_LIMITS[TOKEN]}, got {int(x.min())}")
        return array(TOKEN, x.astype(np.uint64, copy=False).tobytes())
    return list(x)


def _as_slots(x: Tokens, what: str) -> list[int] | array:
    """Slots as a list of ints (converted when stored) or a ``SLOT`` array."""
    if isinstance(x, list) or (isinstance(x, array) and x.typecode == SLOT):
        return x
    if not isinstance(x, np.ndarray) and hasattr(x, "__array__"):
        x = np.asarray(x)
    if isinstance(x, np.ndarray):
        if x.ndim != 1 or x.dtype.kind not in "iu":
            raise ValueError(f"{what} must be a 1-D sequence of ints, got an array of shape "
                             f"{x.shape} and dtype {x.dtype}")
        if x.size and (x.min() < 0 or x.max() >= 2 ** 32):
            raise ValueError(f"{what}: {_LIMITS[SLOT]}, got {int(x.min() if x.min() < 0 else x.max())}")
        return array(SLOT, x.astype(np.uint32, copy=False).tobytes())
    return list(x)


class Node:
    """One edge of the tree: a run of tokens (``key``) and their KV slots (``value``).

    ``key`` and ``value`` are :class:`Ints` (assigning a list converts it); treat them as
    read-only. ``lock_ref`` counts the requests using this node or anything below it;
    ``last_access`` is the tree's clock at the last walk through it; ``id`` is a small integer,
    stable for the node's life, for drawing the tree.
    """

    __slots__ = ("id", "_key", "_value", "parent", "children", "lock_ref", "last_access")

    def __init__(self, key: Sequence[int] | array, value: Sequence[int] | array, parent: Node | None,
                 id: int) -> None:
        self.id = id
        self._key = _ints(TOKEN, key, "key")
        self._value = _ints(SLOT, value, "value")
        self.parent = parent
        self.children: dict[int | tuple[int, ...], Node] = {}  # keyed by first token or first page
        self.lock_ref = 0
        self.last_access = 0

    @property
    def key(self) -> Ints:
        return self._key

    @key.setter
    def key(self, tokens: Sequence[int] | array) -> None:
        self._key = _ints(TOKEN, tokens, "key")

    @property
    def value(self) -> Ints:
        return self._value

    @value.setter
    def value(self, slots: Sequence[int] | array) -> None:
        self._value = _ints(SLOT, slots, "value")

    def parent_in_tree(self) -> Node:
        """The parent of a node that is in the tree (only the root and evicted nodes have none)."""
        if self.parent is None:
            raise ValueError(f"node {self.id} has no parent: it is the root or was evicted")
        return self.parent

    def __repr__(self) -> str:
        key = self.key if len(self.key) <= 8 else f"[{len(self.key)} tokens]"
        return f"Node(id={self.id}, key={key}, lock_ref={self.lock_ref})"


class RadixCache:
    """Prefix cache over KV slots, organised as a radix tree (see the module docstring).

    Args:
        page_size: tokens per KV page; the tree stores and matches whole pages only.
        sglang: stamp access times as SGLang 0.5.23 does (a split's tail counts as used, a split's
            front and a new leaf are newer than the walk); default: as mini-sglang and chapter 03
            do. Only which leaf eviction takes first differs (the module docstring).
        numpy_min_run: deprecated and ignored (runs are compared as arrays, see ``common_len``).
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

    def __init__(self, page_size: int = 1, *, sglang: bool = False, numpy_min_run: object = None,
                 on_event: Callable[[Event], None] | None = None) -> None:
        page_size = require_int("page_size", page_size)
        if numpy_min_run is not None:
            warnings.warn("RadixCache(numpy_min_run=...) is deprecated and ignored: runs are compared "
                          "as arrays (radix.common_len)", DeprecationWarning, stacklevel=2)
        self.page_size = page_size
        self.sglang = bool(sglang)
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

    def match_prefix(self, key: Tokens) -> tuple[Sequence[int], Node]:
        """Return the KV slots of the longest cached prefix of ``key`` and the node it ends on.

        With pages, the prefix is a whole number of pages. The returned node is what a request
        passes to ``inc_lock_ref`` to keep the prefix from being evicted while it reads it. The
        slots are an :class:`Ints` (it reads, compares and concatenates like a list).
        """
        tokens = self._for_walk(_as_tokens(key, "key"))
        path, matched = self._walk(tokens, self._whole(len(tokens)))
        slots = Ints(SLOT)
        for node in path[1:]:
            array.extend(slots, node._value)
        if self.on_event is not None:
            self.on_event(("match", {"key_len": self._whole(len(tokens)), "matched": matched,
                                     "path": [n.id for n in path]}))
        return slots, path[-1]

    def match_length(self, key: Tokens) -> int:
        """How many leading tokens of ``key`` are cached (whole pages), and nothing else.

        Unlike ``match_prefix`` it changes nothing: no split, no access time, no event. For
        schedulers and routers that compare many candidates and act on one of them only: asking
        must not make the other prefixes look recently used to LRU eviction.
        """
        tokens = self._for_walk(_as_tokens(key, "key"))
        end = self._whole(len(tokens))
        node, matched = self.root, 0
        while matched < end:
            child = node.children.get(self._child_key(tokens, matched))
            if child is None:
                break
            n = self._agree(child, tokens, matched, end)
            matched += n - n % self.page_size
            if n < len(child._key):
                break
            node = child
        return matched

    def insert(self, key: Tokens, value: Tokens) -> int:
        """Cache ``key`` with its KV slots ``value``; return how many leading tokens were cached.

        Those first tokens keep their existing slots, so the caller's ``value[:returned]`` are
        duplicates to free. With pages only ``key[:len(key) // page_size * page_size]`` is stored;
        the slots of the partial last page stay the caller's. Bad slots in the new part (not
        whole aligned pages, out of range) raise ``ValueError`` and store nothing; the walk has
        then split and stamped the path as ``match_prefix(key)`` would.
        """
        tokens, slots = _as_tokens(key, "key"), _as_slots(value, "value")
        if len(tokens) != len(slots):
            raise ValueError(f"insert: key has {len(tokens)} tokens but value has {len(slots)} "
                             f"slots; they must be the same length")
        end = self._whole(len(tokens))
        if isinstance(tokens, list):          # every token is compared or stored: convert once
            tokens = _token_array(tokens)
        path, matched = self._walk(tokens, end)
        parent, new = path[-1], None
        if matched < end:
            if isinstance(slots, list):
                new_slots = _ints(SLOT, slots[matched:end] if matched or end < len(slots) else slots, "value")
            else:
                new_slots = _part(slots, matched, end)
            if self.page_size > 1:
                self._check_aligned_pages(new_slots)
            new = self._new_node(_part(tokens, matched, end), new_slots, parent)
            new.last_access = next(self._clock) if self.sglang else self._now
            parent.children[self._child_key(new._key, 0)] = new
            self._num_nodes += 1
            self._push_leaf(new)
            self.evictable_size += len(new_slots)
            path.append(new)
        if self.on_event is not None:
            self.on_event(("insert", {"node": None if new is None else new.id,
                                      "parent": parent.id,
                                      "key": [] if new is None else new.key.tolist(),
                                      "slots": [] if new is None else new.value.tolist(),
                                      "already_cached": matched}))
        return matched

    def _walk(self, tokens: list[int] | array, end: int | None = None) -> tuple[list[Node], int]:
        """Follow ``tokens[:end]`` down from the root while the tree agrees with them.

        Returns the nodes passed (root first) and the number of tokens matched. An edge that agrees
        only in part is split first, so the walk always ends on a node. Every node the walk uses is
        stamped with the walk's clock value, so a parent is never older than its children; with
        ``sglang=True`` the cut edge is stamped before the split (its tail counts as used) and the
        new front gets a later clock value, as SGLang's ``_match_prefix_helper`` does.
        """
        self._now = now = next(self._clock)
        self.last_split = None
        end = len(tokens) if end is None else end
        node, matched, path = self.root, 0, [self.root]
        while matched < end:
            child = node.children.get(self._child_key(tokens, matched))
            if child is None:
                break
            n = self._agree(child, tokens, matched, end)
            n -= n % self.page_size  # whole pages; n >= page_size, the first page found the child
            if n < len(child._key):  # the agreement stops inside this edge: cut it there
                if self.sglang:
                    child.last_access = now
                    if not child.children:
                        self._push_leaf(child)
                child = self._split(child, n)
                child.last_access = next(self._clock) if self.sglang else now
                path.append(child)
                node, matched = child, matched + n
                break
            child.last_access = now
            path.append(child)
            node, matched = child, matched + n
        if not node.children and node is not self.root:   # a leaf's access time changed
            self._push_leaf(node)
        self.last_match_path = path
        return path, matched

    def _for_walk(self, tokens: list[int] | array) -> list[int] | array:
        """A key to look up, converted to an array at once when most of it looks cached.

        A list is compared window by window (``common_len``), converting only what is compared;
        each window costs a list slice on top of the conversion. When the tree seems to hold most
        of the key, converting the whole list in one go is cheaper. The guess follows the edges
        whose *last* token agrees with the key (one int compared per edge, nothing converted); it
        only chooses how to convert, never what matches.
        """
        if not isinstance(tokens, list):
            return tokens
        node, guess, end = self.root, 0, len(tokens)
        while guess < end:
            child = node.children.get(self._child_key(tokens, guess)) if end - guess >= self.page_size else None
            if child is None or guess + len(child._key) > end or tokens[guess + len(child._key) - 1] != child._key[-1]:
                break
            node, guess = child, guess + len(child._key)
        return _token_array(tokens) if 2 * guess >= end else tokens

    def _agree(self, child: Node, tokens: list[int] | array, start: int, end: int | None = None) -> int:
        """How many tokens of ``child.key`` agree with ``tokens[start:end]``."""
        n = min(len(child._key), (len(tokens) if end is None else end) - start)
        return common_len(child._key, tokens, start, n)

    def _split(self, child: Node, n: int) -> Node:
        """Cut ``child``'s edge after ``n`` tokens; return the new node holding the front part.

        The new node takes ``child``'s place under the parent and ``child`` keeps the tail below
        it. Whoever locked ``child`` also uses the front part, so the front inherits ``lock_ref``
        (and ``last_access``); the evictable/protected sizes are unchanged.
        """
        key_before = child.key.tolist() if self.on_event is not None else None
        front = self._new_node(_part(child._key, 0, n), _part(child._value, 0, n), child.parent)
        front.lock_ref, front.last_access = child.lock_ref, child.last_access
        del child._key[:n], child._value[:n]
        child.parent = front
        front.parent_in_tree().children[self._child_key(front._key, 0)] = front
        front.children[self._child_key(child._key, 0)] = child
        self._num_nodes += 1
        self.last_split = front
        if self.on_event is not None:
            self.on_event(("split", {"node": front.id, "child": child.id, "key_before": key_before,
                                     "at": n, "inherited_lock": front.lock_ref}))
        return front

    def _new_node(self, key: Any, value: Any, parent: Node | None) -> Node:
        """Every node is made here (a subclass with richer nodes overrides it: ``hiradix.HiRadixCache``)."""
        return Node(key, value, parent, next(self._ids))

    def _child_key(self, tokens: Sequence[int] | array, start: int) -> int | tuple[int, ...]:
        """The dict key that selects a child: its first token, or its first page as a tuple."""
        if self.page_size == 1:
            return int(tokens[start])
        return tuple(tokens[start:start + self.page_size])

    def _whole(self, n: int) -> int:
        """``n`` cut down to whole pages."""
        return n - n % self.page_size

    def _whole_pages(self, tokens: list[int] | array) -> list[int] | array:
        cut = self._whole(len(tokens))
        return tokens if cut == len(tokens) else tokens[:cut]

    def _check_aligned_pages(self, slots: Sequence[int] | array) -> None:
        """Each page of ``slots`` must be one KV page, ``s, s+1, ..., s+P-1`` with ``s % P == 0``.

        Read at each page's first and last slot (two strided reads: a page that starts off a page
        boundary or does not span P slots is refused); ``check_invariants`` reads every slot.
        """
        P = self.page_size
        if isinstance(slots, array) and slots.typecode == SLOT:
            pages = np.frombuffer(slots, dtype=np.uint32).reshape(-1, P)
        else:
            pages = np.asarray(slots, dtype=np.int64).reshape(-1, P)  # type: ignore[assignment]
        first, last = pages[:, 0], pages[:, -1]
        if len(pages) and ((first % P != 0).any() or (last - first != P - 1).any()):
            raise ValueError(f"insert: with page_size={P} every page of value must be "
                             f"the slots s, s+1, ..., s+{P - 1} of one KV page "
                             f"(s a multiple of {P})")

    def _whole_pages_of_kv(self, node: Node) -> bool:
        """Every page of ``node.value`` is one aligned KV page (every slot read)."""
        if self.page_size == 1 or not len(node.value):
            return True
        pages = np.frombuffer(node._value, dtype=np.uint32).reshape(-1, self.page_size).astype(np.int64)
        return bool((pages[:, 0] % self.page_size == 0).all()
                    and (pages == pages[:, :1] + np.arange(self.page_size)).all())

    # ---------------------------------------------------------------------------- locking

    def inc_lock_ref(self, node: Node) -> None:
        """Mark ``node`` and its ancestors as used by one more request (so none can be evicted)."""
        self._check_in_tree(node)
        moved, path = 0, []
        while node is not self.root:
            if node.lock_ref == 0:  # first user: its tokens become protected
                moved += len(node._key)
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
                moved += len(node._key)
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

    def evict(self, num_tokens: int) -> Sequence[int]:
        """Remove unlocked leaves, least recently used first, until ``num_tokens`` are freed.

        Returns the freed KV slots as an :class:`Ints` (possibly more than asked, as nodes go
        whole; fewer if nothing evictable is left).
        """
        if num_tokens < 0:
            raise ValueError(f"evict: num_tokens must be >= 0, got {num_tokens}")
        heap = self._leaf_heap
        freed = Ints(SLOT)
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
            del parent.children[self._child_key(node._key, 0)]
            node.parent = None
            self._num_nodes -= 1
            array.extend(freed, node._value)
            self.evictable_size -= len(node._key)
            self.last_evicted.append(node)
            self.last_evicted_parents.append(parent)
            if self.on_event is not None:
                self.on_event(("evict", {"node": node.id, "parent": parent.id,
                                         "key": node.key.tolist(), "slots": node.value.tolist()}))
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
        * a non-root parent was accessed no earlier than its children (walks stamp whole paths;
          not with ``sglang=True``, where a split's front and a new leaf are newer than the walk
          that made them, as in SGLang);
        * ``evictable_size`` / ``protected_size`` equal the key lengths summed over unlocked /
          locked nodes, and their sum is ``total_size()``.
        """
        def require(ok: bool, message: str) -> None:
            if not ok:
                raise AssertionError(message)

        root = self.root
        require(len(root.key) == 0 and len(root.value) == 0 and root.parent is None,
                "the root must have an empty key and no parent")
        require(root.lock_ref == 1, f"the root must hold exactly its permanent reference, "
                                    f"has lock_ref {root.lock_ref}")
        evictable = protected = 0
        ids = set()
        for node in self.nodes():
            require(node.id not in ids, f"node id {node.id} appears twice")
            ids.add(node.id)
            require(type(node._key) is Ints and node._key.typecode == TOKEN
                    and type(node._value) is Ints and node._value.typecode == SLOT,
                    f"node {node.id}: key and value must be Ints of typecodes {TOKEN!r} and {SLOT!r}")
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
            require(self._whole_pages_of_kv(node), f"node {node.id}'s slots are not whole aligned KV pages")
            require(node.lock_ref >= users_below >= 0,
                    f"node {node.id} has lock_ref {node.lock_ref} but its children count "
                    f"{users_below} users")
            require(self.sglang or all(node.last_access >= c.last_access for c in node.children.values()),
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
