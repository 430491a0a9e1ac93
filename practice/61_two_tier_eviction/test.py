"""Tests for exercise 61: device eviction takes unlocked device leaves (demote or delete), host
eviction takes host-only leaves nothing holds or reads; both the on-device set and the anywhere set
stay prefix-closed.

The reference is a brute force written here: at every step, scan the whole tree for the
candidates and take the least recently used one. Random trees respect both closures and the locks
(a locked node's ancestors are locked too), as a real tree does.
"""

import copy
import random

from solution_under_test import Tree, evict_device, evict_host


def raises_value_error(call) -> bool:
    try:
        call()
    except ValueError:
        return True
    return False


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
        leaves = [n for n in _all(tree) if not n.on_device and not n.children and n.lock_ref == 0
                  and n.host_ref == 0]
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
    parent is. Locks: some nodes are the end of a running request's prefix (the node and every
    ancestor get a lock; now and then a host-only one, which SGLang's host-leaf test also skips).
    Some host-only nodes are pinned by a copy (host_ref)."""
    tree = Tree()
    for i in range(rng.randint(1, 11)):
        parent = rng.choice([tree.root] + tree.nodes())
        options = [w for w in ("d", "h", "dh") if ("d" not in w or parent.on_device) and
                   ("h" not in w or parent.on_host)]
        where = rng.choice(options)
        tree.add(f"n{i}", parent.name, rng.randint(1, 4), rng.randint(0, 5), on_device="d" in where,
                 on_host="h" in where)
    for node in tree.nodes():
        if rng.random() < (0.15 if node.on_device else 0.05):
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
    got = evict_device(tree, 4)
    assert got == [("a2", "delete"), ("a", "demote")], \
        "unlocked device leaves, least recently used first: a2 (no host copy) is deleted, then a is demoted"
    assert snapshot(tree)["a"] == ("sys", False, True, []), "a demoted node stays in the tree, host only"
    assert "a2" not in snapshot(tree), "a deleted node leaves the tree"
    check_closed(tree)


def test_example_host_eviction_takes_host_only_leaves():
    tree = build(SPEC)
    got = evict_host(tree, 3)
    assert got == ["b2", "b"], "host-only leaves, least recently used first; b joins once b2 is gone"
    assert sorted(snapshot(tree)["sys"][3]) == ["a", "c"], "b and b2 leave the tree"
    check_closed(tree)


def test_a_locked_node_and_its_ancestors_stay_on_the_device():
    tree = build(SPEC)
    got = evict_device(tree, 100)
    assert got == [("a2", "delete"), ("a", "demote")], "everything unlocked goes, nothing locked"
    snap = snapshot(tree)
    assert snap["c"][1], "c is locked (lock_ref 1): it stays on the device"
    assert snap["sys"][1], "sys is locked as c's ancestor: it stays on the device"
    check_closed(tree)


def test_everything_unlocked_goes_and_the_root_stays():
    spec = [("x", "", 2, 3, "dh"), ("y", "x", 1, 1, "dh"), ("z", "", 1, 2, "d")]
    tree = build(spec)
    got = evict_device(tree, 100)
    assert got == [("y", "demote"), ("z", "delete"), ("x", "demote")], "x becomes a device leaf once y is demoted"
    got = evict_host(tree, 100)
    assert got == ["y", "x"], "x becomes a host leaf once y is deleted"
    assert snapshot(tree) == {"": (None, True, True, [])}, "only the root is left, on both tiers"
    got = evict_device(tree, 1)
    assert got == [], "device eviction never takes the root"
    got = evict_host(tree, 1)
    assert got == [], "host eviction never takes the root"


def test_a_parent_becomes_a_device_leaf_only_when_no_child_is_on_the_device():
    spec = [("p", "", 1, 1, "dh"), ("q", "p", 1, 5, "dh"), ("r", "p", 1, 6, "d"), ("s", "", 1, 3, "d")]
    tree = build(spec)
    got = evict_device(tree, 2)
    assert got == [("s", "delete"), ("q", "demote")], "p is no device leaf while q and r are on the device"
    assert snapshot(tree)["p"][1], "p still has r on the device"
    got = evict_device(tree, 2)
    assert got == [("r", "delete"), ("p", "demote")], "the parent joins in the same call"


def test_a_demoted_child_keeps_its_parent_off_the_host_leaves():
    spec = [("p", "", 2, 1, "dh"), ("q", "p", 2, 1, "dh")]
    tree = build(spec)
    got = evict_device(tree, 4)
    assert got == [("q", "demote"), ("p", "demote")], "a parent whose children were demoted is a device leaf"
    got = evict_host(tree, 1)
    assert got == ["q"], "p has a child: only q is a host leaf"
    check_closed(tree)


def test_host_eviction_skips_pinned_and_device_nodes():
    spec = [("p", "", 1, 0, "h", 0, 1), ("q", "", 1, 1, "dh"), ("r", "", 1, 2, "h"), ("s", "r", 1, 3, "h")]
    tree = build(spec)
    got = evict_host(tree, 5)
    assert got == ["s", "r"], "p is being read (host_ref 1), q is on the device"
    assert sorted(snapshot(tree)) == ["", "p", "q"], "p and q stay"


def test_host_eviction_skips_a_locked_node():
    spec = [("p", "", 1, 0, "h", 1), ("r", "", 1, 2, "h")]
    tree = build(spec)
    got = evict_host(tree, 5)
    assert got == ["r"], "p is held by a request (lock_ref 1): host eviction skips it, as SGLang's host-leaf test"
    assert sorted(snapshot(tree)) == ["", "p"], "p stays"


def test_stops_as_soon_as_enough_is_freed():
    spec = [("a", "", 3, 1, "h"), ("b", "", 1, 2, "h"), ("c", "", 2, 3, "d"), ("d", "", 2, 4, "d")]
    tree = build(spec)
    got = evict_host(tree, 3)
    assert got == ["a"], "a's 3 pages reach num_pages 3: stop"
    got = evict_host(tree, 0)
    assert got == [], "num_pages 0 frees nothing"
    got = evict_device(tree, 2)
    assert got == [("c", "delete")], "c's 2 pages reach num_pages 2: stop"
    got = evict_device(tree, 3)
    assert got == [("d", "delete")], "nothing else to take: stop with fewer pages than asked"


def test_ties_go_by_name():
    spec = [("m", "", 1, 4, "dh"), ("k", "", 1, 4, "dh"), ("l", "", 1, 4, "h")]
    tree = build(spec)
    got = evict_device(tree, 1)
    assert got == [("k", "demote")], "equal last_access: the smaller name first (device)"
    got = evict_host(tree, 2)
    assert got == ["k", "l"], "equal last_access: the smaller name first (host)"


def test_negative_num_pages_raise():
    tree = build(SPEC)
    assert raises_value_error(lambda: evict_device(tree, -1)), "evict_device(tree, -1) must raise ValueError"
    assert raises_value_error(lambda: evict_host(tree, -1)), "evict_host(tree, -1) must raise ValueError"
    assert snapshot(tree) == snapshot(build(SPEC)), "a rejected call changes nothing"


def test_random_trees_against_the_brute_force():
    rng = random.Random(61)
    for _ in range(300):
        tree = random_tree(rng)
        for _ in range(3):
            kind, pages = rng.choice(["device", "host"]), rng.randint(0, 8)
            want_tree = copy.deepcopy(tree)
            want = (brute_device if kind == "device" else brute_host)(want_tree, pages)
            got = (evict_device if kind == "device" else evict_host)(tree, pages)
            assert got == want, f"evict_{kind}({pages}): the order of a full scan for the least recently used candidate"
            assert snapshot(tree) == snapshot(want_tree), f"evict_{kind}({pages}) leaves the tree as the brute force does"
            assert sorted(tree.by_name) == sorted(snapshot(tree)), "tree.by_name lists exactly the nodes in the tree"
            check_closed(tree)
