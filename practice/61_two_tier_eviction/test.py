"""Tests for exercise 61: device eviction takes device leaves (demote or delete), host eviction
takes host-only leaves; both the on-device set and the anywhere set stay prefix-closed.

The reference is a brute force written here: at every step, scan the whole tree for the
candidates and take the least recently used one. Random trees respect both closures and the locks
(a locked node's ancestors are locked too), as a real tree does.
"""

import copy
import random

import pytest
from solution_under_test import Tree, evict_device, evict_host


def build(spec):
    """spec: (name, parent, pages, last_access, state) rows; state: "d", "h", "dh", optional locks."""
    tree = Tree()
    for name, parent, pages, last_access, where, *refs in spec:
        lock_ref, host_ref = (refs + [0, 0])[:2]
        tree.add(name, parent, pages, last_access, on_device="d" in where, on_host="h" in where,
                 lock_ref=lock_ref, host_ref=host_ref)
    return tree


def snapshot(tree):
    """Every node still in the tree: name -> (parent, on_device, on_host, child names), by a walk
    from the root (so a node left dangling from a removed parent does not count)."""
    out, stack = {}, [tree.root]
    while stack:
        node = stack.pop()
        out[node.name] = (node.parent.name if node.parent is not None else None, node.on_device, node.on_host,
                          sorted(c.name for c in node.children))
        stack.extend(node.children)
    return out


def check_closed(tree):
    snap = snapshot(tree)
    assert snap[""][1:3] == (True, True), "the root stays on both tiers"
    for name, (parent, on_device, on_host, _) in snap.items():
        if parent is None:
            continue
        assert on_device or on_host, f"{name} has no copy anywhere but is still in the tree"
        assert not on_device or snap[parent][1], f"{name} is on the device but its parent {parent!r} is not"
        assert not on_host or snap[parent][2], f"{name} has a host copy but its parent {parent!r} has none"


# ---- the brute force -------------------------------------------------------------------------

def _all(tree):
    out, stack = [], list(tree.root.children)
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node.children)
    return out


def brute_device(tree, num_pages):
    done, freed = [], 0
    while freed < num_pages:
        leaves = [n for n in _all(tree) if n.on_device and n.lock_ref == 0
                  and not [c for c in n.children if c.on_device]]
        if not leaves:
            break
        node = min(leaves, key=lambda n: (n.last_access, n.name))
        freed += node.pages
        if node.on_host:
            node.on_device = False
            done.append((node.name, "demote"))
        else:
            node.parent.children = [c for c in node.parent.children if c is not node]
            del tree.by_name[node.name]
            done.append((node.name, "delete"))
    return done


def brute_host(tree, num_pages):
    done, freed = [], 0
    while freed < num_pages:
        leaves = [n for n in _all(tree) if not n.on_device and not n.children and n.host_ref == 0]
        if not leaves:
            break
        node = min(leaves, key=lambda n: (n.last_access, n.name))
        freed += node.pages
        node.parent.children = [c for c in node.parent.children if c is not node]
        del tree.by_name[node.name]
        done.append(node.name)
    return done


def random_tree(rng):
    """Both closures hold: a child is on the device only if its parent is, on the host only if its
    parent is. Locks: some device nodes are the end of a running request's prefix (the node and
    every ancestor get a lock). Some host-only nodes are pinned by a load (host_ref)."""
    tree = Tree()
    for i in range(rng.randint(1, 11)):
        parent = rng.choice([tree.root] + tree.nodes())
        options = [w for w in ("d", "h", "dh") if ("d" not in w or parent.on_device) and
                   ("h" not in w or parent.on_host)]
        where = rng.choice(options)
        tree.add(f"n{i}", parent.name, rng.randint(1, 4), rng.randint(0, 5), on_device="d" in where,
                 on_host="h" in where)
    for node in tree.nodes():
        if node.on_device and rng.random() < 0.15:
            while node.parent is not None:
                node.lock_ref += 1
                node = node.parent
        elif not node.on_device and rng.random() < 0.2:
            node.host_ref = 1
    return tree


# ---- tests -----------------------------------------------------------------------------------

SPEC = [("sys", "", 2, 9, "dh", 1),          # a system prompt both tiers hold (c locks it)
        ("a", "sys", 3, 4, "dh"),            # user a's turn, backed up
        ("a2", "a", 1, 4, "d"),              # and its newest turn, device only
        ("b", "sys", 2, 2, "h"),             # user b, host only now
        ("b2", "b", 2, 1, "h"),
        ("c", "sys", 1, 7, "d", 1)]          # user c: a running request holds it


def test_example_device_eviction_demotes_or_deletes():
    tree = build(SPEC)
    assert evict_device(tree, 4) == [("a2", "delete"), ("a", "demote")]
    assert snapshot(tree)["a"] == ("sys", False, True, [])
    assert "a2" not in snapshot(tree)
    check_closed(tree)


def test_example_host_eviction_takes_host_only_leaves():
    tree = build(SPEC)
    assert evict_host(tree, 3) == ["b2", "b"]
    assert sorted(snapshot(tree)["sys"][3]) == ["a", "c"]
    check_closed(tree)


def test_a_locked_node_and_its_ancestors_stay_on_the_device():
    tree = build(SPEC)
    assert evict_device(tree, 100) == [("a2", "delete"), ("a", "demote")]
    snap = snapshot(tree)
    assert snap["c"][1] and snap["sys"][1], "c is locked, and sys is its parent"
    check_closed(tree)


def test_everything_unlocked_goes_and_the_root_stays():
    spec = [("x", "", 2, 3, "dh"), ("y", "x", 1, 1, "dh"), ("z", "", 1, 2, "d")]
    tree = build(spec)
    assert evict_device(tree, 100) == [("y", "demote"), ("z", "delete"), ("x", "demote")]
    assert evict_host(tree, 100) == ["y", "x"]
    assert snapshot(tree) == {"": (None, True, True, [])}
    assert evict_device(tree, 1) == [] and evict_host(tree, 1) == []


def test_a_parent_becomes_a_device_leaf_only_when_no_child_is_on_the_device():
    spec = [("p", "", 1, 1, "dh"), ("q", "p", 1, 5, "dh"), ("r", "p", 1, 6, "d"), ("s", "", 1, 3, "d")]
    tree = build(spec)
    assert evict_device(tree, 2) == [("s", "delete"), ("q", "demote")]
    assert snapshot(tree)["p"][1], "p still has r on the device"
    assert evict_device(tree, 2) == [("r", "delete"), ("p", "demote")], "the parent joins in the same call"


def test_a_demoted_child_keeps_its_parent_off_the_host_leaves():
    spec = [("p", "", 2, 1, "dh"), ("q", "p", 2, 1, "dh")]
    tree = build(spec)
    assert evict_device(tree, 4) == [("q", "demote"), ("p", "demote")]
    assert evict_host(tree, 1) == ["q"], "p has a child: only q is a host leaf"
    check_closed(tree)


def test_host_eviction_skips_pinned_and_device_nodes():
    spec = [("p", "", 1, 0, "h", 0, 1), ("q", "", 1, 1, "dh"), ("r", "", 1, 2, "h"), ("s", "r", 1, 3, "h")]
    tree = build(spec)
    assert evict_host(tree, 5) == ["s", "r"], "p is being loaded, q is on the device"
    assert sorted(snapshot(tree)) == ["", "p", "q"]


def test_stops_as_soon_as_enough_is_freed():
    spec = [("a", "", 3, 1, "h"), ("b", "", 1, 2, "h"), ("c", "", 2, 3, "d"), ("d", "", 2, 4, "d")]
    tree = build(spec)
    assert evict_host(tree, 3) == ["a"]
    assert evict_host(tree, 0) == []
    assert evict_device(tree, 2) == [("c", "delete")]
    assert evict_device(tree, 3) == [("d", "delete")]


def test_ties_go_by_name():
    spec = [("m", "", 1, 4, "dh"), ("k", "", 1, 4, "dh"), ("l", "", 1, 4, "h")]
    tree = build(spec)
    assert evict_device(tree, 1) == [("k", "demote")]
    assert evict_host(tree, 2) == ["k", "l"]


def test_negative_num_pages_raise():
    tree = build(SPEC)
    with pytest.raises(ValueError):
        evict_device(tree, -1)
    with pytest.raises(ValueError):
        evict_host(tree, -1)
    assert snapshot(tree) == snapshot(build(SPEC))


def test_random_trees_against_the_brute_force():
    rng = random.Random(61)
    for _ in range(300):
        tree = random_tree(rng)
        for _ in range(3):
            kind, pages = rng.choice(["device", "host"]), rng.randint(0, 8)
            want_tree = copy.deepcopy(tree)
            want = (brute_device if kind == "device" else brute_host)(want_tree, pages)
            got = (evict_device if kind == "device" else evict_host)(tree, pages)
            assert got == want, f"evict_{kind}({pages})"
            assert snapshot(tree) == snapshot(want_tree)
            assert sorted(tree.by_name) == sorted(snapshot(tree))
            check_closed(tree)
