"""Classic mistakes of exercise 61, each an edit of solution.py (`judge.py mistakes 61` shows them as diffs)."""

MISTAKES = [
    {"name": "device_leaf_means_no_children",
     "explain": "A device leaf is taken to be a node without children: a parent whose children were all "
                "demoted keeps its device copy forever, and the device runs out of room it could free.",
     "old": "            and not any(c.on_device for c in node.children))",
     "new": "            and not node.children)"},
    {"name": "host_eviction_takes_backed_up_leaves",
     "explain": "Host eviction takes every leaf with a host copy, device+host ones included, and deletes it: "
                "it throws away device pages (even locked ones) to free host pages.",
     "old": "    return not node.on_device and not node.children and node.lock_ref == 0 and node.host_ref == 0",
     "new": "    return node.on_host and not node.children and node.host_ref == 0"},
    {"name": "demotes_only_inner_nodes",
     "explain": "Deletes every device leaf that has no children, host copy or not: a backed-up hit that "
                "only needed its device copy dropped is lost from both tiers.",
     "old": "        if node.on_host:\n            done.append((node.name, \"demote\"))",
     "new": "        if node.children:\n            done.append((node.name, \"demote\"))"},
    {"name": "ignores_host_ref",
     "explain": "Deletes a host copy that a copy is reading right now (a load-back here; a storage backup or "
                "prefetch in SGLang, whose host_ref_counter this is).",
     "old": "and node.lock_ref == 0 and node.host_ref == 0",
     "new": "and node.lock_ref == 0"},
    {"name": "host_eviction_ignores_locks",
     "explain": "Takes locked host-only nodes too (\"locks protect device pages only\"): SGLang's host-leaf test "
                "skips any node with lock_ref > 0, so a node a request holds is never taken from either tier.",
     "old": "and node.lock_ref == 0 and node.host_ref == 0",
     "new": "and node.host_ref == 0"},
    {"name": "no_parent_push_on_the_host",
     "explain": "Never reconsiders a host-only parent that has just become a leaf: a cold branch is only "
                "peeled one level per call.",
     "old": "        if _host_leaf(node.parent):\n            heapq.heappush(heap, (node.parent.last_access, node.parent.name, node.parent))\n",
     "new": ""},
]
