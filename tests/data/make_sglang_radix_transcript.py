"""Record SGLang 0.5.23's own radix tree on a few operation sequences: the reference that
``tests/test_radix.py`` replays through ``RadixCache(..., sglang=True)`` (offline, no SGLang needed).

    pip download --no-deps sglang==0.5.23 -d /tmp/sg && unzip -q /tmp/sg/sglang-*.whl -d /tmp/sg
    SGLANG_SRC=/tmp/sg PEER_BENCH=../shared/tools/peer_bench_sglang.py \\
        .venv/bin/python tests/data/make_sglang_radix_transcript.py > tests/data/sglang_0.5.23_radix_transcript.json

SGLang's classes are loaded by the peer tool ``peer_bench_sglang.py`` (it loads
``python/sglang/srt/mem_cache/radix_cache.py`` and its imports unchanged from ``SGLANG_SRC``, with
name-holders for the server modules it never calls); this script only drives them. Each sequence
is a list of operations, each with SGLang's answer:

* ``["insert", key, value, prefix_len]``: ``RadixCache.insert`` (``InsertParams``);
* ``["match", key, slots]``: ``RadixCache.match_prefix`` then ``path_device_indices`` of its node;
* ``["lock", i]`` / ``["unlock", i]``: ``inc_lock_ref`` / ``dec_lock_ref`` on the node of the
  i-th match of the sequence;
* ``["evict", num_tokens, freed]``: ``RadixCache.evict``, the slots in the order it freed them.

The tree's access times are ``time.monotonic()`` there; consecutive operations are made at least a
microsecond apart so that no two stamps can tie.
"""

import importlib.util
import json
import os
import random
import sys
import time
from array import array

import torch

spec = importlib.util.spec_from_file_location("peer_bench_sglang", os.environ["PEER_BENCH"])
peer = importlib.util.module_from_spec(spec)
argv, sys.argv = sys.argv, sys.argv[:1]
spec.loader.exec_module(peer)
sys.argv = argv


def wait():
    t = time.monotonic()
    while time.monotonic() - t < 1e-6:
        pass


def sequence(seed: int, page: int, steps: int = 120, capacity: int = 60) -> list:
    """Requests as an engine runs them, up to three at a time: match and lock; later insert,
    unlock, and evict what is above ``capacity`` tokens. Keys are cuts of three prefixes over a
    3-token alphabet plus a few own tokens, so walks stop inside edges (and split them) often."""
    rng = random.Random(seed)
    alloc = peer.StubAllocator()
    tree = peer.SG_RadixCache.create_simulated(mock_allocator=alloc, page_size=page)
    prefixes = [[rng.randrange(3) for _ in range(24)] for _ in range(3)]
    ops, nodes, running, next_page = [], [], [], 0
    for _ in range(steps):
        wait()
        if running and (len(running) == 3 or rng.random() < 0.45):
            key, i = running.pop(rng.randrange(len(running)))
            pages = -(-len(key) // page)
            value = [p * page + j for p in range(next_page, next_page + pages) for j in range(page)][:len(key)]
            next_page += pages
            aligned = len(key) // page * page
            got = tree.insert(peer.InsertParams(key=peer.RadixKey(array("q", key)),
                                                value=torch.tensor(value[:aligned], dtype=torch.int64)))
            ops.append(["insert", key, value, got.prefix_len])
            wait()
            tree.dec_lock_ref(nodes[i])
            ops.append(["unlock", i])
            over = tree.total_size() - capacity
            if over > 0:
                wait()
                alloc.freed.clear()
                tree.evict(peer.EvictParams(num_tokens=over))
                freed = torch.cat(alloc.freed).tolist() if alloc.freed else []
                ops.append(["evict", over, freed])
            continue
        key = rng.choice(prefixes)[:rng.randrange(1, 25)] + [rng.randrange(3) for _ in range(rng.randrange(4))]
        res = tree.match_prefix(peer.MatchPrefixParams(key=peer.RadixKey(array("q", key))))
        node = res.last_device_node
        ops.append(["match", key, tree.path_device_indices(node).tolist()])
        nodes.append(node)
        wait()
        tree.inc_lock_ref(node)
        ops.append(["lock", len(nodes) - 1])
        running.append((key, len(nodes) - 1))
    return ops


version, files = peer.sglang_provenance()
print(json.dumps({"sglang": version, "files": files,
                  "sequences": [{"page_size": page, "seed": seed, "ops": sequence(seed, page)}
                                for page in (1, 2) for seed in range(3)]}, separators=(",", ":")))
