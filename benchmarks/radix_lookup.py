"""The package's radix tree against the tree it replaced: compact runs against lists of Python ints.

``RadixCache`` keeps each node's key and KV slots as arrays of machine integers (``radix.Ints``: 8
bytes a token, 4 a slot) and compares a prompt with an edge window by window in C, converting a
prompt given as a list only as far as it is compared. The tree before (``ListRadixCache`` below,
its logic as it was, trimmed of events and checks) kept Python lists: a pointer and a 32-byte int
object per token and per slot, list equality to compare, a NumPy conversion of the whole remaining
run where an edge disagreed, and ``match_prefix`` / ``evict`` built lists of slots.

Both replay the same request streams in one process, as an engine drives a tree: match the prompt,
lock the match, evict what a pool of ``--capacity`` tokens lacks, insert prompt (and output), unlock.
Each request's tokens are a fresh Python list, as ``Sequence.token_ids``. Printed per workload:
CPU time per call of match, insert and evict (``time.process_time``, the best of ``--reps``
alternating passes, gc off), and the memory the tree holds per cached token at the end of an
unbounded replay (``tracemalloc``, in a pass of its own: the bytes still allocated since the
replay began, so the int objects a tree keeps alive are counted), with the ratio new / old.

    python benchmarks/radix_lookup.py [--reps 3] [--requests 400]

Workloads: a shared system prompt (2,000 tokens, then 200-800 own tokens); multi-turn chats (40
sessions of 8 turns, interleaved, each turn the previous prompt and answer plus a new message);
long documents (8 documents of 16k tokens, each queried by different 128-token questions). Under pressure the pool holds a third of what
the unbounded replay caches.
Token ids are uniform over a 151,936-token vocabulary (not CPython's shared small ints).
"""

import argparse
import gc
import heapq
import itertools
import time
import tracemalloc

import numpy as np

from nano_engine.radix import RadixCache

VOCAB = 151_936


class _ListNode:
    __slots__ = ("id", "key", "value", "parent", "children", "lock_ref", "last_access")

    def __init__(self, key, value, parent, id):
        self.id, self.key, self.value, self.parent = id, key, value, parent
        self.children, self.lock_ref, self.last_access = {}, 0, 0


class ListRadixCache:
    """The package's tree before compact runs (page size 1): lists of Python ints, list equality,
    NumPy for the rest of a run that disagrees, a persistent heap of eviction candidates."""

    def __init__(self):
        self._ids, self._clock = itertools.count(), itertools.count(1)
        self.root = _ListNode([], [], None, next(self._ids))
        self.root.lock_ref = 1
        self.evictable_size = self.protected_size = 0
        self._heap, self._num_nodes = [], 1

    def _agree(self, child, tokens, start):
        n = min(len(child.key), len(tokens) - start)
        run = tokens[start:start + n]
        if n < 64:
            return next((i for i, (x, y) in enumerate(zip(child.key, run)) if x != y), n)
        if run == (child.key if n == len(child.key) else child.key[:n]):
            return n
        a, b = np.array(child.key[:n], dtype=np.int64), np.array(run, dtype=np.int64)
        differs = a != b
        first = int(differs.argmax())
        return first if differs[first] else n

    def _walk(self, tokens):
        now = next(self._clock)
        node, matched, path = self.root, 0, [self.root]
        while matched < len(tokens):
            child = node.children.get(tokens[matched])
            if child is None:
                break
            n = self._agree(child, tokens, matched)
            if n < len(child.key):
                child = self._split(child, n)
                child.last_access = now
                path.append(child)
                node, matched = child, matched + n
                break
            child.last_access = now
            path.append(child)
            node, matched = child, matched + n
        if not node.children and node is not self.root:
            heapq.heappush(self._heap, (node.last_access, node.id, node))
        return path, matched, now

    def _split(self, child, n):
        front = _ListNode(child.key[:n], child.value[:n], child.parent, next(self._ids))
        front.lock_ref, front.last_access = child.lock_ref, child.last_access
        child.key, child.value, child.parent = child.key[n:], child.value[n:], front
        front.parent.children[front.key[0]] = front
        front.children[child.key[0]] = child
        self._num_nodes += 1
        return front

    def match_prefix(self, key):
        path, _, _ = self._walk(key)
        value = []
        for node in path[1:]:
            value += node.value
        return value, path[-1]

    def insert(self, key, value):
        path, matched, now = self._walk(key)
        if matched < len(key):
            new = _ListNode(key[matched:], value[matched:], path[-1], next(self._ids))
            new.last_access = now
            path[-1].children[new.key[0]] = new
            self._num_nodes += 1
            heapq.heappush(self._heap, (now, new.id, new))
            self.evictable_size += len(new.key)
        return matched

    def inc_lock_ref(self, node):
        while node is not self.root:
            if node.lock_ref == 0:
                self.evictable_size -= len(node.key)
                self.protected_size += len(node.key)
            node.lock_ref += 1
            node = node.parent

    def dec_lock_ref(self, node):
        while node is not self.root:
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self.evictable_size += len(node.key)
                self.protected_size -= len(node.key)
            node = node.parent

    def evict(self, num_tokens):
        freed, locked = [], []
        while self._heap and len(freed) < num_tokens:
            entry = heapq.heappop(self._heap)
            last_access, _, node = entry
            if node.parent is None or node.children or node.last_access != last_access:
                continue
            if node.lock_ref:
                locked.append(entry)
                continue
            parent = node.parent
            del parent.children[node.key[0]]
            node.parent = None
            self._num_nodes -= 1
            freed += node.value
            self.evictable_size -= len(node.key)
            if not parent.children and parent is not self.root:
                heapq.heappush(self._heap, (parent.last_access, parent.id, parent))
        for entry in locked:
            heapq.heappush(self._heap, entry)
        return freed

    def total_size(self):
        return self.evictable_size + self.protected_size


# ------------------------------------------------------------------------------------ workloads


def shared(rng, n):
    system = rng.integers(0, VOCAB, 2000)
    prompts = [np.concatenate([system, rng.integers(0, VOCAB, int(rng.integers(200, 801)))]) for _ in range(n)]
    return prompts, prompts


def multiturn(rng, n):
    sessions = max(1, n // 8)
    order = rng.permutation(np.repeat(np.arange(sessions), 8))
    history, prompts, fulls = [np.zeros(0, np.int64) for _ in range(sessions)], [], []
    for s in order:
        p = np.concatenate([history[s], rng.integers(0, VOCAB, int(rng.integers(50, 401)))])
        f = np.concatenate([p, rng.integers(0, VOCAB, int(rng.integers(50, 401)))])
        prompts.append(p)
        fulls.append(f)
        history[s] = f
    return prompts, fulls


def documents(rng, n):
    docs = [rng.integers(0, VOCAB, 16384) for _ in range(8)]
    prompts = [np.concatenate([docs[i % 8], rng.integers(0, VOCAB, 128)]) for i in range(max(n // 2, 16))]
    return prompts, prompts


WORKLOADS = {"shared system prompt": shared, "multi-turn": multiturn, "long documents": documents}


def replay(make_tree, prompts, fulls, capacity, timed=True):
    """One pass; returns (seconds per match, per insert, per evict call, tree, cached tokens)."""
    tree, slots, t_match, t_insert, t_evict, n_evict = make_tree(), itertools.count(), 0.0, 0.0, 0.0, 0
    clock = time.process_time if timed else (lambda: 0.0)
    for p_arr, f_arr in zip(prompts, fulls):
        prompt = p_arr.tolist()
        full = prompt if f_arr is p_arr else f_arr.tolist()
        t0 = clock()
        hit, node = tree.match_prefix(prompt)
        t_match += clock() - t0
        tree.inc_lock_ref(node)
        short = tree.total_size() + len(full) - len(hit) - capacity if capacity else 0
        if short > 0:
            t0 = clock()
            tree.evict(short)
            t_evict += clock() - t0
            n_evict += 1
        value = list(hit) + [next(slots) for _ in range(len(full) - len(hit))]
        t0 = clock()
        tree.insert(full, value)
        t_insert += clock() - t0
        tree.dec_lock_ref(node)
    n = len(prompts)
    return t_match / n, t_insert / n, (t_evict / n_evict if n_evict else float("nan")), tree, tree.total_size()


def bytes_per_token(make_tree, prompts, fulls):
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    _, _, _, tree, cached = replay(make_tree, prompts, fulls, None, timed=False)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del tree
    return held / cached


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--requests", type=int, default=400)
    args = ap.parse_args()
    trees = {"new": RadixCache, "old": ListRadixCache}
    print(f"CPU us per call, best of {args.reps} alternating passes; memory: bytes held per cached token\n")
    print(f"{'workload':22s}{'capacity':>10s}{'op':>8s}{'new':>10s}{'old':>10s}{'new/old':>9s}")
    for name, make in WORKLOADS.items():
        prompts, fulls = make(np.random.default_rng(0), args.requests)
        unbounded = replay(RadixCache, prompts, fulls, None, timed=False)[4]
        for capacity in (None, unbounded // 3):     # a third of what the replay caches: evictions
            best = {side: [float("inf")] * 3 for side in trees}
            for rep in range(args.reps):
                for side in (("new", "old") if rep % 2 == 0 else ("old", "new")):
                    gc.collect()
                    gc.disable()
                    times = replay(trees[side], prompts, fulls, capacity)[:3]
                    gc.enable()
                    best[side] = [min(a, b) if b == b else a for a, b in zip(best[side], times)]
            for i, op in enumerate(("match", "insert", "evict")):
                new, old = best["new"][i], best["old"][i]
                if new == float("inf"):
                    continue
                label = "unbounded" if capacity is None else f"{capacity:,}"
                print(f"{name:22s}{label:>10s}{op:>8s}{new * 1e6:10.1f}{old * 1e6:10.1f}{new / old:9.2f}", flush=True)
        new_b, old_b = (bytes_per_token(trees[s], prompts, fulls) for s in ("new", "old"))
        print(f"{name:22s}{'unbounded':>10s}{'memory':>8s}{new_b:10.1f}{old_b:10.1f}{new_b / old_b:9.2f}\n", flush=True)


if __name__ == "__main__":
    main()
