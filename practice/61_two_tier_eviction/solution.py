"""Reference solution for exercise 61: the two eviction rules of a two-tier radix tree."""

import heapq


class Node:
    """One node of the tree: ``pages`` pages of KV, a device copy and/or a host copy."""

    def __init__(self, name, parent, pages, last_access, on_device=True, on_host=False, lock_ref=0, host_ref=0):
        self.name = name                  # a unique label, e.g. "sys/a"
        self.parent = parent              # None only for the root
        self.children = []                # Nodes
        self.pages = pages
        self.last_access = last_access
        self.on_device = on_device
        self.on_host = on_host
        self.lock_ref = lock_ref          # running requests using this node's device pages
        self.host_ref = host_ref          # copies reading this node's host copy right now

    def __repr__(self) -> str:
        where = "+".join(w for w, on in (("device", self.on_device), ("host", self.on_host)) if on) or "nowhere"
        return (f"Node({self.name!r}, {where}, pages={self.pages}, last_access={self.last_access}, "
                f"lock_ref={self.lock_ref}, host_ref={self.host_ref}, children={[c.name for c in self.children]})")


class Tree:
    """A root (on both tiers, never evicted) and the nodes added under it."""

    def __init__(self):
        self.root = Node("", None, 0, 0, on_device=True, on_host=True)
        self.by_name = {"": self.root}

    def add(self, name, parent, pages, last_access, **state):
        """Add a node under the node called ``parent``; ``state``: on_device, on_host, lock_ref, host_ref."""
        node = Node(name, self.by_name[parent], pages, last_access, **state)
        node.parent.children.append(node)
        self.by_name[name] = node
        return node

    def remove(self, node):
        """Take ``node`` (a node without children) out of the tree."""
        assert not node.children, f"{node.name} still has children"
        node.parent.children.remove(node)
        del self.by_name[node.name]

    def nodes(self):
        """Every node but the root, parents before children."""
        out, stack = [], list(reversed(self.root.children))
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(reversed(node.children))
        return out


def _device_leaf(node):
    return (node.parent is not None and node.on_device and node.lock_ref == 0
            and not any(c.on_device for c in node.children))


def _host_leaf(node):
    # the root is always on the device, so it is never a host leaf
    return not node.on_device and not node.children and node.lock_ref == 0 and node.host_ref == 0


def evict_device(tree, num_pages):
    """Free at least num_pages device pages (fewer if nothing more can go): take unlocked device
    leaves, least recently used first (ties: smaller name first). A leaf with a host copy is
    demoted (it stays, host only); one without is deleted. A parent that becomes a device leaf is
    a candidate in the same call. Returns [(name, "demote" or "delete"), ...] in order.
    A negative num_pages raises ValueError."""
    if num_pages < 0:
        raise ValueError(f"num_pages must be >= 0, got {num_pages}")
    heap = [(n.last_access, n.name, n) for n in tree.nodes() if _device_leaf(n)]
    heapq.heapify(heap)
    done, freed = [], 0
    while heap and freed < num_pages:
        _, _, node = heapq.heappop(heap)
        freed += node.pages
        node.on_device = False
        if node.on_host:
            done.append((node.name, "demote"))
        else:
            tree.remove(node)
            done.append((node.name, "delete"))
        parent = node.parent
        if _device_leaf(parent):
            heapq.heappush(heap, (parent.last_access, parent.name, parent))
    return done


def evict_host(tree, num_pages):
    """Free at least num_pages host pages: delete host-only leaves (no device copy, no children,
    no lock, no reader of the host copy), least recently used first (ties: smaller name first); a
    parent that becomes one is a candidate in the same call. Returns the deleted names in order.
    A negative num_pages raises ValueError."""
    if num_pages < 0:
        raise ValueError(f"num_pages must be >= 0, got {num_pages}")
    heap = [(n.last_access, n.name, n) for n in tree.nodes() if _host_leaf(n)]
    heapq.heapify(heap)
    done, freed = [], 0
    while heap and freed < num_pages:
        _, _, node = heapq.heappop(heap)
        freed += node.pages
        tree.remove(node)
        done.append(node.name)
        if _host_leaf(node.parent):
            heapq.heappush(heap, (node.parent.last_access, node.parent.name, node.parent))
    return done
